"""Marking every test of a folder from that folder's conftest.py (instead of lists in the Makefile).

Examples::

    # tests/browser/conftest.py
    pytest_collection_modifyitems = mark_folder(__file__, "slow", "browser")
"""

from __future__ import annotations

from pathlib import Path

import pytest


def mark_folder(conftest_file: str, *names: str):
    """A ``pytest_collection_modifyitems`` hook that adds the markers ``names`` to every test under
    the folder of ``conftest_file`` (the hook sees every collected test, so it picks its own)."""
    folder = Path(conftest_file).resolve().parent

    def pytest_collection_modifyitems(config, items):
        for item in items:
            if folder in Path(item.path).resolve().parents:
                for name in names:
                    item.add_marker(getattr(pytest.mark, name))

    return pytest_collection_modifyitems
