"""The import layers hold: the contracts in pyproject.toml's ``[tool.importlinter]``, checked by
import-linter over the real import graph (indirect imports count). Runs in ``make check``.

The contracts: the launcher's layers (workers, api, front end, launch core, backends, rank, then
the wire and the devices), each importing only those below it, type-checking imports included;
trainer_core imports nothing of the launcher; the launch core and the front end import no backend
package; the Ray backend builds on the local one and never the other way; the compile cache sits
below the backends and the ranks; FSDP's and DeepSpeed's folders import nothing of each other.
"""

from __future__ import annotations

import json
import subprocess
import sys

from paths import REPO

ROOT = REPO


def test_every_layer_contract_is_kept():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=240,
    )
    report = done.stdout + done.stderr
    assert "BROKEN" not in report and done.returncode == 0, report
    assert report.count("KEPT") >= 7, report


def test_importing_trainer_core_loads_nothing_of_the_launcher_and_no_torch():
    code = (
        "import json, sys, trainer_core, trainer_core.hardware\n"
        "print(json.dumps([sorted(m for m in sys.modules if m.startswith('notebook_launcher')),"
        " 'torch' in sys.modules]))\n"
        "from trainer_core import Accelerator\n"
        "print(json.dumps([sorted(m for m in sys.modules if m.startswith('notebook_launcher')),"
        " 'torch' in sys.modules]))\n"
    )
    before, after = (json.loads(line) for line in _printed_by(code).splitlines())
    assert before == [[], False]  # the package alone: no launcher, no torch
    assert after == [[], True]  # the Accelerator loads torch, still no launcher


def _printed_by(code: str) -> str:
    """What ``code`` prints, run in a fresh interpreter (a clean ``sys.modules``)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_trainer_cores_public_names_are_the_ones_it_loads():
    import trainer_core

    assert sorted(trainer_core.__all__) == sorted(["__version__", *trainer_core._PUBLIC])
    for name in trainer_core.__all__:
        assert getattr(trainer_core, name) is not None


def test_the_kernel_loads_the_ray_backend_without_its_node_side_actor():
    """Every kernel loads the built-in backends for the sidebar (``loaded_backends``); the Ray
    actor's module (``backends.ray.host``, what runs on the nodes) is imported only when a launch
    makes actors."""
    code = (
        "import sys, notebook_launcher.backends as backends\n"
        "backends.loaded_backends()\n"
        "ray = 'notebook_launcher.backends.ray.'\n"
        "print(ray + 'backend' in sys.modules, ray + 'host' in sys.modules)\n"
    )
    assert _printed_by(code).split() == ["True", "False"]
