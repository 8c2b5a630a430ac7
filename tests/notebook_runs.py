"""Running a notebook of notebooks/ headlessly, as `make demo` does, for the tests of any folder."""

from __future__ import annotations

import os
import subprocess
import sys

from paths import NOTEBOOKS


def run_notebook(name, tmp_path, **env):
    """Run ``notebooks/<name>`` top to bottom in a real kernel (``notebooks/run_notebook.py``), saving
    the executed notebook to ``tmp_path / name``; its printed output. Fails the test if it fails."""
    saved = tmp_path / name
    result = subprocess.run(
        [sys.executable, str(NOTEBOOKS / "run_notebook.py"), str(NOTEBOOKS / name), "--save", str(saved)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, f"{name} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout
