"""The wheel ships the prebuilt JupyterLab extension, and JupyterLab sees it enabled."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from paths import REPO

ROOT = REPO
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
    assert "etc/jupyter/jupyter_server_config.d/notebook_launcher.json" in data  # enables the server extension
    assert any(name.startswith(SHARE + "static/remoteEntry.") for name in data)
    assert "notebook_launcher/api.py" in names and "trainer_core/accelerator/__init__.py" in names
    assert "notebook_launcher/py.typed" in names and "trainer_core/py.typed" in names  # the classifier says Typed
    for module in ("backends/local/backend.py", "backends/ray/backend.py"):  # the registry imports them by name
        assert "notebook_launcher/" + module in names, module
    assert "trainer_core/strategies/fsdp/plugin.py" in names and "trainer_core/compat/shuffle.py" in names
    assert not any("node_modules" in name for name in names)


def test_jupyterlab_lists_the_extension_enabled():
    jupyter = Path(sys.executable).parent / "jupyter"
    out = subprocess.run([str(jupyter), "labextension", "list"], capture_output=True, text=True, timeout=120)
    line = next(line for line in (out.stdout + out.stderr).splitlines() if "notebook-launcher" in line)
    assert "enabled" in line and "OK" in line


def test_the_jupyter_server_lists_the_server_extension_enabled():
    """The install (here the editable one ``make`` does) enables the server extension that keeps each
    launch's static form in saved notebooks."""
    jupyter = Path(sys.executable).parent / "jupyter"
    out = subprocess.run([str(jupyter), "server", "extension", "list"], capture_output=True, text=True, timeout=120)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)
    assert re.search(r"notebook_launcher\s+enabled", text), text
    assert re.search(r"notebook_launcher \S+ OK", text), text


def test_build_makes_a_wheel_and_sdist_that_install_into_a_fresh_environment(tmp_path):
    """``python -m build`` (no isolation: the build backends are in the test environment) makes both
    archives; the wheel, installed alone into a new venv, imports both packages at the one version,
    with the lab extension in place. The new venv borrows the test environment's dependencies
    (torch ...) through a path file, which adds their directory without running its .pth files, so
    the editable install of this checkout stays out of it."""
    import sysconfig
    import tarfile

    from notebook_launcher import __version__

    dist = tmp_path / "dist"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        check=True,
        env=env,
        capture_output=True,
        timeout=600,
    )
    wheel = dist / f"notebook_launcher-{__version__}-py3-none-any.whl"
    sdist = dist / f"notebook_launcher-{__version__}.tar.gz"
    assert wheel.exists() and sdist.exists()
    metadata = zipfile.ZipFile(wheel).read(f"notebook_launcher-{__version__}.dist-info/METADATA").decode()
    assert f"Version: {__version__}" in metadata and "License-Expression: Apache-2.0" in metadata
    assert "License-File: LICENSE" in metadata and "Requires-Python: >=3.10" in metadata
    assert "Classifier: Framework :: Jupyter :: JupyterLab :: Extensions :: Prebuilt" in metadata
    with tarfile.open(sdist) as archive:
        sources = archive.getnames()
    prefix = f"notebook_launcher-{__version__}/"
    for name in (
        "LICENSE",
        "pyproject.toml",
        "notebook_launcher/_version.py",
        "trainer_core/accelerator/__init__.py",
        "notebook_launcher/labextension/package.json",
    ):
        assert prefix + name in sources, name

    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)],
        check=True,
        timeout=300,
    )
    fresh_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(fresh_site, "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = (
        "import json, os, sys, notebook_launcher, trainer_core\n"
        "share = os.path.join(sys.prefix, 'share/jupyter/labextensions/notebook-launcher/package.json')\n"
        "print(json.dumps([notebook_launcher.__version__, trainer_core.__version__, notebook_launcher.__file__,"
        " trainer_core.__file__, json.load(open(share))['version']]))"
    )
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    import json

    versions = json.loads(out.stdout)
    assert versions[0] == versions[1] == versions[4] == __version__  # one version everywhere
    assert versions[2].startswith(fresh_site) and versions[3].startswith(fresh_site)  # the wheel's copy
