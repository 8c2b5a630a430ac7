"""Hugging Face Accelerate's own notebook-launcher tests (accelerate/test_utils/scripts/test_notebook.py,
read from the installed package) run in a real kernel with only the launcher's import swapped.

The swap also shortens ``straggler_timeout`` (default 300 s) to 10 s: test_fault_tolerant's last
attempt can leave one rank in ``init_process_group`` after its peer returned (its queue is shared by
both ranks), which is exactly the hang that rule ends; ended, the attempt restarts with the queue
empty and succeeds. The bitsandbytes test is skipped by Accelerate itself when bitsandbytes is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kernel_session import KernelSession

pytestmark = pytest.mark.slow

ACCELERATE_IMPORT = "from accelerate import PartialState, notebook_launcher\n"
SWAPPED = (
    "from accelerate import PartialState\n"
    "import functools, notebook_launcher as _ours\n"
    "notebook_launcher = functools.partial(_ours.notebook_launcher, straggler_timeout=10)\n"
)
TESTS = (
    "test_can_initialize",
    "test_clean_cuda_fork",
    "test_static_rdzv_backend",
    "test_c10d_rdzv_backend",
    "test_fault_tolerant",
    "test_monitoring",
)


def accelerates_test_notebook() -> str:
    import accelerate

    source = (Path(accelerate.__file__).parent / "test_utils" / "scripts" / "test_notebook.py").read_text()
    assert source.count(ACCELERATE_IMPORT) == 1, "Accelerate's test file changed: look at it again"
    body = source.replace(ACCELERATE_IMPORT, SWAPPED)
    return body.split('\nif __name__ == "__main__":', 1)[0]


def test_accelerates_own_notebook_tests_pass_with_our_launcher():
    session = KernelSession(env={"ACCELERATE_NUM_PROCESSES": "2"})
    try:
        session.ok(accelerates_test_notebook())
        assert session.eval("[name for name in globals() if name.startswith('test_')]")[: len(TESTS)] == list(TESTS)
        outcomes = {}
        for name in TESTS:
            result = session.run(f"{name}()", timeout=240)
            outcomes[name] = "passed" if result.error is None else f"{result.error['ename']}: {result.error['evalue']}"
        assert outcomes == dict.fromkeys(TESTS, "passed")
        assert session.children() == []
    finally:
        session.shutdown()
