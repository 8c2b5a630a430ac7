"""Where things are, for tests in any folder of tests/: the checkout and this folder of helpers."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent  # the helpers (kernel_session, ranks, ...) and the test folders
REPO = TESTS.parent
NOTEBOOKS = REPO / "notebooks"
SANDBOX_BACKEND = TESTS / "backend_sandbox"  # a backend package outside the launcher, and its dist-info
