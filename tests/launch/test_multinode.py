"""Two "nodes" on this machine: two kernels that each launch 2 ranks, meeting over loopback through
the store node 0's kernel hosts (torch.distributed's TCPStore; static and c10d rendezvous)."""

from __future__ import annotations

import socket
from textwrap import dedent

import pytest
from nodes import SECRET, free_port

TRAIN = dedent("""
    import os, time, threading
    import torch, torch.distributed as dist
    from notebook_launcher import launch
    def all_reduce(fail_rank=None):
        dist.init_process_group("gloo")
        total = torch.tensor([float(dist.get_rank())])
        dist.all_reduce(total)
        if dist.get_rank() == fail_rank:
            raise ValueError(f"rank {fail_rank} saw bad data")
        for _ in range(100000):
            dist.all_reduce(torch.ones(1))         # the others keep training
        return dist.get_rank(), dist.get_world_size(), total.item()
    def short(fail_rank=None):
        dist.init_process_group("gloo")
        total = torch.tensor([float(dist.get_rank())])
        dist.all_reduce(total)
        return dist.get_rank(), dist.get_world_size(), total.item()
""")


@pytest.mark.parametrize("backend", ["static", "c10d"])
def test_two_nodes_train_together(kernel, node1, backend):
    kernel.ok(TRAIN)
    port = free_port(kernel)
    options = f"num_processes=2, num_nodes=2, use_port={port}, rdzv_backend={backend!r}, {SECRET}, display='none'"
    kernel.ok(f"job = launch(short, node_rank=0, {options})")
    node1.ok(f"job = launch(short, node_rank=1, {options})")
    first, second = kernel.eval("job.wait(timeout=120)"), node1.eval("job.wait(timeout=120)")
    results = sorted([*kernel.eval("job.results"), *node1.eval("job.results")])
    assert [r[0] for r in results] == [0, 1, 2, 3] and {r[1:] for r in results} == {(4, 6.0)}
    assert {first[0], second[0]} == {0, 2}  # each cell returns its node's first rank's value
    assert kernel.children() == [] and node1.children() == []


def test_a_kernel_that_arrives_second_at_a_c10d_rendezvous_shows_the_ranks_it_got(kernel, node1):
    """c10d numbers the nodes as they arrive, whatever node_rank a cell passed. Before: the kernel
    that passed node_rank=0 but arrived second kept ranks 0 and 1 in its record, its ranks 2 and 3
    reported into nothing, and the launch ended "stopped before every rank returned" (1 run in 15
    of the restart test). Its widget, built while the kernel waited at the rendezvous, goes on under
    the new numbers, and so do the saved form and the logs."""
    kernel.ok(TRAIN)
    kernel.ok("from notebook_launcher.frontend.views import widget as widget_module\nwidget_module.BUILD_AFTER = 0")
    node1.ok(TRAIN)
    port = free_port(kernel)
    options = f"num_processes=2, num_nodes=2, use_port={port}, rdzv_backend='c10d', {SECRET}"
    node1.ok(f"job = launch(short, node_rank=1, {options}, display='none')")
    node1.ok("while 'more node' not in job.waiting: job.join(0.02)", timeout=60)  # it arrived first
    try:
        shown = kernel.ok(f"job = launch(short, node_rank=0, {options}, display='widget'); job.wait(timeout=120)")
    finally:
        kernel.ok("widget_module.BUILD_AFTER = 0.25")
    assert kernel.eval("(job.ranks, job.status)") == ([2, 3], "succeeded")
    assert [result[:2] for result in kernel.eval("job.results")] == [(2, 4), (3, 4)]
    assert node1.eval("job.wait(timeout=120)")[:2] == (0, 4) and node1.eval("job.ranks") == [0, 1]
    said = (
        "the rendezvous made this kernel node 1 of 2 (c10d numbers the nodes as they arrive):"
        " this node's ranks are 2–3 now"
    )
    assert said in kernel.eval("job.logs(2)") and said in kernel.eval("job.logs(0)")  # the number it had reads it
    assert kernel.eval("job.view.built") is True
    assert kernel.eval("([job.view.tabs.get_title(i) for i in (1, 2)], sorted(job.view.boxes))") == (
        ["rank 2", "rank 3"],
        [2, 3],
    )
    final = [out["display"] for out in shown.outputs if "display" in out][-1]["text/plain"]
    assert "succeeded in" in final.splitlines()[0] and "rank 2 returned tuple" in final.splitlines()[-1]
    assert f"[rank 3] ── {said} ──" in final
    assert kernel.children() == [] and node1.children() == []


LATE = dedent("""
    def late(release):
        dist.init_process_group("gloo")
        total = torch.ones(1)
        dist.all_reduce(total)
        while dist.get_rank() >= 2 and not os.path.exists(release):   # node 1's ranks return later
            time.sleep(0.01)
        return dist.get_rank()
""")


def test_node_0_keeps_the_store_up_until_a_slower_node_is_done(kernel, node1, tmp_path):
    """Node 0 hosts the ranks' store: leaving as soon as its own ranks returned would make node 1
    take the vanished store for a failure of node 0."""
    release = str(tmp_path / "release")
    kernel.ok(TRAIN)
    for session in (kernel, node1):
        session.ok(LATE)
    port = free_port(kernel)
    options = f"args=({release!r},), num_processes=2, num_nodes=2, use_port={port}, {SECRET}, display='none'"
    kernel.ok(f"job = launch(late, node_rank=0, {options})")
    node1.ok(f"job = launch(late, node_rank=1, {options})")
    kernel.ok("while 'keeping the store up' not in job.waiting: job.join(0.02)", timeout=60)
    assert kernel.eval("(job.rank_status(0), job.rank_status(1), job.done)") == ("done", "done", False)
    assert "keeping the store up for 1 more node(s)" in kernel.eval("job.waiting")
    open(release, "w").close()
    assert node1.eval("job.wait(timeout=60)") == 2 and node1.eval("job.results") == [2, 3]
    assert kernel.eval("job.wait(timeout=60)") == 0
    assert kernel.children() == [] and node1.children() == []


def test_a_failure_on_one_node_ends_the_other_with_its_reason(kernel, node1):
    kernel.ok(TRAIN)
    port = free_port(kernel)
    options = f"num_processes=2, num_nodes=2, use_port={port}, {SECRET}, display='none'"
    kernel.ok(f"job = launch(all_reduce, node_rank=0, {options})")
    node1.ok(f"job = launch(all_reduce, args=(3,), node_rank=1, {options})")
    failed = node1.run("job.wait(timeout=120)")
    assert failed.error["ename"] == "ValueError" and "[rank 3] rank 3 saw bad data" in failed.error["evalue"]
    ended = kernel.run("job.wait(timeout=120)")
    assert ended.error is not None
    told = kernel.eval("str(sys.last_value) + ' '.join(getattr(sys.last_value, '__notes__', []))")
    assert "node 1: rank 3 failed: ValueError: [rank 3] rank 3 saw bad data" in told
    assert kernel.children() == [] and node1.children() == []


def test_a_node_that_never_comes_is_a_clear_error_after_the_rendezvous_timeout(kernel):
    kernel.ok(TRAIN)
    port = free_port(kernel)
    result = kernel.run(
        f"job = launch(short, num_processes=1, num_nodes=2, node_rank=0, use_port={port},"
        f" rendezvous_timeout=1.5, {SECRET}, display='none'); job.wait()"
    )
    assert result.error["ename"] == "LaunchError"
    assert (
        f"only 1 of 2 nodes joined the rendezvous at 127.0.0.1:{port} within rendezvous_timeout=1.5 s"
        in result.error["evalue"]
    )
    assert kernel.eval("job.rank_status(0)") == "stopped"  # no rank ever started
    assert kernel.children() == []


def test_an_interrupt_ends_the_wait_for_a_node(kernel):
    kernel.ok(TRAIN)
    port = free_port(kernel)
    msg_id = kernel.submit(
        f"notebook_launcher = __import__('notebook_launcher').notebook_launcher\n"
        f"print('waiting', flush=True)\n"
        f"notebook_launcher(short, num_processes=1, num_nodes=2, node_rank=1, use_port={port},"
        f" {SECRET}, display='text')"
    )
    kernel.collect(msg_id, timeout=30, until=lambda r: "waiting" in r.stdout)
    kernel.interrupt()
    result = kernel.collect(msg_id, timeout=30)
    assert result.error["ename"] == "KeyboardInterrupt" and result.seconds < 3
    assert kernel.children() == []


def test_waiting_for_node_0_polls_quietly_and_stops_when_asked(capfd):
    """A node that starts first polls node 0's port without torch's client, which retries a closed
    port for seconds (deaf to a stop meanwhile) and prints a C++ stack into the cell at each try."""
    from notebook_launcher.backends.local.rendezvous import Rendezvous
    from notebook_launcher.errors import LaunchError

    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    looks = []
    meeting = Rendezvous("127.0.0.1", port, node_rank=1, num_nodes=2, timeout=60, secret=b"s" * 32)
    with pytest.raises(LaunchError, match="stopped while waiting"):
        meeting.open(lambda: looks.append(1) or len(looks) > 5, lambda text: None)
    assert "TCPStore" not in capfd.readouterr().err
