"""Every Python snippet in the README runs as written, in order, in one real kernel."""

from __future__ import annotations

import re

from kernel_session import KernelSession
from paths import REPO

README = REPO / "README.md"


def python_snippets():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_every_readme_snippet_runs_as_written():
    snippets = python_snippets()
    assert len(snippets) >= 2
    session = KernelSession()
    try:
        for snippet in snippets:
            result = session.run(snippet, timeout=300)
            assert result.error is None, f"README snippet failed:\n{snippet}\n{result.traceback}"
        assert session.eval("sorted(state)")  # the quickstart's returned weights
    finally:
        session.shutdown()
