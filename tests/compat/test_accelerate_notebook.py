"""Hugging Face Accelerate's own notebook-launcher tests (accelerate/test_utils/scripts/test_notebook.py,
read from the installed package) run in a real kernel with only the launcher's import swapped.

The swap also shortens ``straggler_timeout`` (default 300 s) to 10 s: test_fault_tolerant's last
attempt can leave one rank in ``init_process_group`` after its peer returned (its queue is shared by
both ranks), which is exactly the hang that rule ends; ended, the attempt restarts with the queue
empty and succeeds. The bitsandbytes test is skipped by Accelerate itself when bitsandbytes is absent.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from kernel_session import KernelSession

pytestmark = pytest.mark.slow

# the line importing Accelerate's launcher (1.15: "PartialState, notebook_launcher"; 1.16 adds Accelerator)
ACCELERATE_IMPORT = re.compile(r"^from accelerate import ((?:\w+, )*)notebook_launcher\n", re.M)
OURS = (
    "import functools, notebook_launcher as _ours\n"
    "notebook_launcher = functools.partial(_ours.notebook_launcher, straggler_timeout=10)\n"
)


def _swapped(line: re.Match) -> str:
    """The import line without Accelerate's launcher, then ours."""
    others = line.group(1).removesuffix(", ")
    return (f"from accelerate import {others}\n" if others else "") + OURS


# the tests of Accelerate 1.15's file, which every later one must still have (1.16 adds
# test_clean_cuda_fork's neighbour test_mixed_precision); every test the file has runs
KNOWN_TESTS = (
    "test_can_initialize",
    "test_clean_cuda_fork",
    "test_static_rdzv_backend",
    "test_c10d_rdzv_backend",
    "test_fault_tolerant",
    "test_monitoring",
)
NEEDS = {"test_problematic_imports": "bitsandbytes"}  # Accelerate skips it without bitsandbytes


def accelerates_test_notebook() -> str:
    import accelerate

    source = (Path(accelerate.__file__).parent / "test_utils" / "scripts" / "test_notebook.py").read_text()
    assert len(ACCELERATE_IMPORT.findall(source)) == 1, "Accelerate's test file changed: look at it again"
    body = ACCELERATE_IMPORT.sub(_swapped, source)
    return body.split('\nif __name__ == "__main__":', 1)[0]


def test_accelerates_own_notebook_tests_pass_with_our_launcher():
    session = KernelSession(env={"ACCELERATE_NUM_PROCESSES": "2"})
    try:
        session.ok(accelerates_test_notebook())
        tests = session.eval("[name for name in globals() if name.startswith('test_')]")
        assert set(KNOWN_TESTS) <= set(tests), tests
        tests = [name for name in tests if name not in NEEDS or importlib.util.find_spec(NEEDS[name])]
        outcomes = {}
        for name in tests:
            result = session.run(f"{name}()", timeout=240)
            outcomes[name] = "passed" if result.error is None else f"{result.error['ename']}: {result.error['evalue']}"
        assert outcomes == dict.fromkeys(tests, "passed")
        assert session.children() == []
    finally:
        session.shutdown()
