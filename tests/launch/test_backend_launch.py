"""A backend that is one package, registered and launched without editing any file of the launcher.

The sandbox backend (``tests/backend_sandbox``: ranks as subprocesses it starts, reads and signals
itself, with extra environment variables) stands for a third-party package written from the seam
alone (``backends.base``, ``backends.remote``). Its ranks are real processes in a real gloo group;
the launch core (supervisor, controller, record, errors) is the one every backend gets.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback

import pytest
from paths import SANDBOX_BACKEND as SANDBOX

from notebook_launcher import notebook_launcher


def greet_and_sum(offset):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([dist.get_rank() + offset])
    dist.all_reduce(total)
    return os.environ["GREETING"], dist.get_world_size(), int(total)


def fail_on_rank_one():
    if int(os.environ["RANK"]) == 1:
        raise KeyError(f"no {os.environ['GREETING']} on rank 1")
    return "fine"


def test_a_registered_backend_runs_the_ranks_and_returns_rank_zeros_value(sandbox, capsys):
    value = notebook_launcher(greet_and_sum, args=(10,), num_processes=3, cluster="sandbox", env={"GREETING": "hi"})
    assert value == ("hi", 3, 33)
    assert "sandbox: 3 ranks" in capsys.readouterr().err  # its placement's notice


def test_a_failing_rank_of_another_backend_raises_its_exception_in_the_cell(sandbox):
    with pytest.raises(KeyError, match="rank 1") as caught:
        notebook_launcher(fail_on_rank_one, num_processes=2, cluster="sandbox", env={"GREETING": "ho"}, display="none")
    assert "no ho on rank 1" in str(caught.value)
    shown = "".join(traceback.format_exception(caught.value))
    assert "in fail_on_rank_one" in shown and "raise KeyError" in shown  # the rank's own frames


def test_an_installed_package_registers_its_backend_by_entry_point():
    """A fresh interpreter that only has the package (and its dist-info) on its path launches on it."""
    code = (
        "import os\n"
        "from notebook_launcher import notebook_launcher\n"
        "from notebook_launcher.backends import registered_backends\n"
        "print('registered:', registered_backends())\n"
        "def where():\n"
        "    return os.environ['GREETING'] + ' from rank ' + os.environ['RANK']\n"
        "print(notebook_launcher(where, num_processes=2, cluster='sandbox', env={'GREETING': 'hello'},"
        " display='none'))\n"
        "import sys\n"
        "print('loaded:', sorted(m for m in sys.modules if m.startswith('notebook_launcher.backends.')))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SANDBOX), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr
    assert "registered: ['local', 'ray', 'sandbox']" in done.stdout
    assert "hello from rank 0" in done.stdout
    loaded = next(line for line in done.stdout.splitlines() if line.startswith("loaded:"))
    assert "backends.remote" in loaded and "backends.local" not in loaded  # written from the seam alone


def test_the_sandbox_package_imports_only_the_seam():
    """Its source names no module of the local (or Ray) backend: what it needs is in the seam."""
    import ast

    tree = ast.parse((SANDBOX / "sandbox_backend" / "__init__.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    ours = {name for name in imported if name and name.startswith("notebook_launcher")}
    assert ours <= {
        "notebook_launcher.backends.base",
        "notebook_launcher.backends.payload",
        "notebook_launcher.backends.remote",
        "notebook_launcher.backends.status",
        "notebook_launcher.devices",
        "notebook_launcher.wire",
        "notebook_launcher.wire.spec",
    }, ours


def chatty_then_stuck():
    import time

    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(3):
        print(f"rank {rank} step {step}", flush=True)
    print("progress 50%", end="\r", flush=True)
    dist.barrier()  # both have printed
    if rank == 1:
        raise ValueError("rank 1 gave up")
    time.sleep(600)


def test_a_failure_ends_the_other_ranks_of_another_backend_and_keeps_their_output(sandbox):
    """Rank 1 fails while rank 0 sleeps: the launch core terminates rank 0 through the sandbox's
    ``_signal`` (a subprocess of its own), well before its sleep ends, and every line each rank
    printed (the last one a bar without a newline) is in the record."""
    from notebook_launcher import launch

    job = launch(chatty_then_stuck, num_processes=2, cluster="sandbox", display="none")
    with pytest.raises(ValueError, match="rank 1 gave up"):
        job.wait(timeout=120)
    for rank in (0, 1):
        text = "".join(line.text for line in job.lines(rank))
        assert all(f"rank {rank} step {step}" in text for step in range(3)), text
        assert "progress 50%" in text
    assert job.rank_status(0) == "stopped", job.rank_status(0)
