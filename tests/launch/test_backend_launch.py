"""A backend that is one package, registered and launched without editing any file of the launcher.

The sandbox backend (``tests/backend_sandbox``: spawned ranks with extra environment variables)
stands for a third-party package. Its ranks are real processes in a real gloo group; the launch
core (supervisor, controller, record, errors) is the one every backend gets.
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
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SANDBOX), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr
    assert "registered: ['local', 'ray', 'sandbox']" in done.stdout
    assert "hello from rank 0" in done.stdout
