"""The wheel ships the prebuilt JupyterLab extension, and JupyterLab sees it enabled."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARE = "share/jupyter/labextensions/notebook-launcher/"


def test_wheel_contains_the_prebuilt_extension(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        env=env,
        timeout=600,
    )
    wheel = next(tmp_path.glob("notebook_launcher-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    data = [name.split(".data/data/", 1)[1] for name in names if ".data/data/" in name]
    assert SHARE + "package.json" in data and SHARE + "install.json" in data
    assert any(name.startswith(SHARE + "static/remoteEntry.") for name in data)
    assert "notebook_launcher/api.py" in names and "trainer_core/accelerator.py" in names
    assert not any("node_modules" in name for name in names)


def test_jupyterlab_lists_the_extension_enabled():
    jupyter = Path(sys.executable).parent / "jupyter"
    out = subprocess.run([str(jupyter), "labextension", "list"], capture_output=True, text=True, timeout=120)
    line = next(line for line in (out.stdout + out.stderr).splitlines() if "notebook-launcher" in line)
    assert "enabled" in line and "OK" in line
