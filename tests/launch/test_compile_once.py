"""One compile for every rank, from a real kernel: ranks share the kernel's private Inductor cache
and compile one graph at a time, so each graph is compiled by one rank and found by the others;
a second launch of the same function compiles nothing; a changed one compiles again; a rank's own
recompile does not hang the others; the cache goes with the kernel. The ranks of a function that
compiles start with Inductor imported, once, by the process they are forked from (the kernel, or the
start server): importing it costs seconds of CPU per rank otherwise; a launch that does not compile
imports none of it.

Compiles are counted with Inductor's own counters (``fxgraph_cache_miss``: a graph compiled;
``fxgraph_cache_hit``: one loaded from the cache). Before, both ranks missed: each compiled every
graph, on the same cores.
"""

from __future__ import annotations

import os
import signal
import stat
import tempfile
import time
from textwrap import dedent

import pytest
from kernel_session import KernelSession

COMPILES = dedent("""
    import os, sys
    INDUCTOR = "torch._inductor.compile_fx"
    def plain():
        return INDUCTOR in sys.modules
    def cache_dir():  # every local launch has the kernel's folder; Inductor's import keeps the variable set
        import torch._inductor.config
        return os.environ["TORCHINDUCTOR_CACHE_DIR"]
    def compiles(width):
        had = INDUCTOR in sys.modules  # before this rank imported anything: the kernel's, or the start server's
        import torch
        from torch._dynamo.utils import counters
        torch.manual_seed(0)
        layers = torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 1)
        model = torch.compile(torch.nn.Sequential(*layers))
        model(torch.randn(4, width)).sum().backward()   # a forward and a backward graph
        found = counters["inductor"]
        return found["fxgraph_cache_miss"], found["fxgraph_cache_hit"], os.environ["TORCHINDUCTOR_CACHE_DIR"], had
""")
CACHE_DIR = "launch(cache_dir, num_processes=1, display='none').wait()"


def launched(kernel, width, method):
    kernel.ok(f"job = launch(compiles, ({width},), num_processes=2, start_method={method!r}, display='none')")
    kernel.ok("job.wait()", timeout=300)
    return [tuple(rank) for rank in kernel.eval("[list(rank) for rank in job.results]")]


def compiled_once(ranks):
    """The graphs each rank met, once every one of them was compiled by exactly one rank: every
    rank meets them all (a miss or a hit each), and the misses of all ranks add up to their
    number. Which rank compiles which graph is the lock's order, not fixed."""
    graphs = {misses + hits for misses, hits, *_ in ranks}
    assert len(graphs) == 1, ranks
    assert sum(misses for misses, *_ in ranks) == graphs.pop(), ranks  # no graph compiled twice
    return ranks[0][0] + ranks[0][1]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_each_graph_is_compiled_by_one_rank_and_a_relaunch_compiles_nothing(method):
    session = KernelSession()
    try:
        session.ok("from notebook_launcher import launch\n" + COMPILES)
        # a function that does not compile: nothing of the compiler imported for it, in the kernel or its ranks
        session.ok(f"job = launch(plain, num_processes=2, start_method={method!r}, display='none')")
        session.ok("job.wait()", timeout=300)
        assert session.eval("job.results") == [False, False]
        assert session.eval("INDUCTOR in sys.modules") is False
        first = launched(session, 8, method)
        assert compiled_once(first) >= 2, first  # a forward and a backward graph at least
        # ... and one that does: its ranks start with Inductor imported (by the kernel, or the start server)
        assert [rank[3] for rank in first] == [True, True], first
        assert session.eval("INDUCTOR in sys.modules") is (method == "fork")
        again = launched(session, 8, method)
        assert [rank[0] for rank in again] == [0, 0] and all(rank[1] >= 2 for rank in again), again
        changed = launched(session, 16, method)
        assert compiled_once(changed) >= 2, changed
        folder = os.path.dirname(first[0][2])
        assert os.path.basename(folder).startswith(f"notebook-launcher-compile-{session.process.pid}-")
        assert os.path.dirname(folder) == tempfile.gettempdir()
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700 and os.stat(folder).st_uid == os.getuid()
        assert os.listdir(os.path.join(folder, "marks")) == []  # each attempt's marks went with it
        session.manager.shutdown_kernel(now=False)  # as Jupyter shuts a kernel down: it exits itself
        # the kernel's compile cache goes with it: removed by the kernel as it exits, or, when a loaded
        # machine made Jupyter kill a kernel slow to exit (5 s), by its guardian right after
        assert _gone(folder, timeout=15)
    finally:
        session.shutdown()


def _gone(path, timeout):
    deadline = time.monotonic() + timeout
    while os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # a poll of another process's removal, bounded by the deadline
    return True


def test_a_killed_kernels_compile_cache_is_removed_by_its_guardian_or_the_next_import():
    session = KernelSession()
    try:
        session.ok("from notebook_launcher import launch\n" + COMPILES)
        folder = os.path.dirname(session.eval(CACHE_DIR))
        assert os.path.isdir(folder)
        session.process.send_signal(signal.SIGKILL)  # nothing runs in it: no atexit
        assert _gone(folder, timeout=10)  # its guardian removed it
        planted = tempfile.mkdtemp(prefix=f"notebook-launcher-compile-{session.process.pid}-")
    finally:
        session.shutdown()
    fresh = KernelSession()  # a guardian killed with its kernel: the next import sweeps what is left
    try:
        fresh.ok("import notebook_launcher")
        assert not os.path.exists(planted)
    finally:
        fresh.shutdown()


def test_the_users_own_inductor_cache_is_kept(kernel, tmp_path):
    kernel.ok(COMPILES)
    kernel.ok(f"os.environ['TORCHINDUCTOR_CACHE_DIR'] = {str(tmp_path / 'mine')!r}")
    try:
        assert kernel.eval(CACHE_DIR) == str(tmp_path / "mine")
    finally:
        kernel.ok("del os.environ['TORCHINDUCTOR_CACHE_DIR']")


RECOMPILES = dedent("""
    def recompiles():
        import torch, torch.distributed as dist
        from torch._dynamo.utils import counters
        dist.init_process_group("gloo")
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        compiled = torch.compile(model, dynamic=False)
        for step in range(4):
            rows = 8 if step < 2 or dist.get_rank() == 0 else 5   # rank 1 alone recompiles at step 2
            compiled(torch.ones(rows, 4)).sum().backward()
        return counters["frames"]["ok"], float(model.module.weight.grad.sum())
""")


def test_a_rank_that_recompiles_alone_does_not_hang_the_others(kernel):
    """Serializing compiles must not make a rank wait for a sibling that waits in a collective."""
    kernel.ok(RECOMPILES)
    kernel.ok("job = launch(recompiles, num_processes=2, display='none', timeout=240)\njob.wait()", timeout=300)
    results = kernel.eval("[list(rank) for rank in job.results]")
    frames = [rank[0] for rank in results]
    assert frames[1] > frames[0], results  # rank 1 compiled once more: its own recompile
