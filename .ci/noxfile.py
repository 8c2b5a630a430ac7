"""The suite as sessions of nox: one kind of test, or one runtime, each (``make test`` runs them all).

    make tools                                    # .venv-tools: uv and nox (make test does it)
    .venv-tools/bin/nox -f .ci/noxfile.py -l      # the sessions
    .venv-tools/bin/nox -f .ci/noxfile.py -s "kernel(colab)"

The main environment (``.venv``, the Makefile's: torch 2.13 on CPU) runs every test; a runtime's
session builds only what its kernel or ranks run on (Colab's torch 2.11 with ipykernel 6.17 and
ipywidgets 7.7 without ``comm``, Kaggle's torch 2.10 with ipywidgets 8.1.5, torch_xla's CPU device)
and points the tests at it (``NL_TEST_KERNEL_PYTHON``). Environments are made by uv, which installs
in parallel and hard-links every file they share from one cache beside them (``.cache/uv``): the
CUDA libraries that torch 2.8, 2.9 and 2.10 all take are on disk once. They are kept between local runs
(``reuse_venv``), except the dry GPU pass's, removed after it.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).resolve().parent))
from disk import LOG as DISK_LOG  # .ci/disk.py: what make test prints from it
from disk import disk_used

REPO = Path(__file__).resolve().parent.parent
MAIN = str(REPO / ".venv" / "bin" / "python")  # the main environment: `make env`
PYTHON = os.environ.get("NL_PYTHON", sys.executable)  # the interpreter every runtime's environment is made from

# uv reads no pip.conf: it gets the folder of wheels pip is given on this machine (a CPU build of
# torch), a cache beside the environments (hard links need one file system), and never a download
# of a Python of its own
os.environ.setdefault("UV_CACHE_DIR", str(REPO / ".cache" / "uv"))
os.environ.setdefault("UV_LINK_MODE", "hardlink")
os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")
if os.environ.get("PIP_FIND_LINKS") and not os.environ.get("UV_FIND_LINKS"):
    os.environ["UV_FIND_LINKS"] = os.environ["PIP_FIND_LINKS"]

nox.options.default_venv_backend = "uv"
nox.options.reuse_venv = "yes"  # CUDA builds of torch are gigabytes: kept between local runs
nox.options.envdir = str(REPO / ".nox")
nox.options.error_on_external_run = False

# what the kernel-level tests import in a kernel, beside torch, ipykernel and ipywidgets
KERNEL_EXTRAS = ("cloudpickle", "psutil", "scikit-learn", "tqdm", "matplotlib", "safetensors")


# A session of kernel-level tests spends much of its time waiting for kernels and ranks to start:
# two pytest workers (pytest-xdist) keep both cores busy. A file stays on one worker (its
# module-scoped kernel is shared by its tests); `-- -n 0` runs a session serially.
WORKERS = ("-n", os.environ.get("NL_TEST_WORKERS", "2"))
PARALLEL = (*WORKERS, "--dist", "loadfile")


def pytest(session: nox.Session, *args: str, **env: str) -> None:
    """The main environment's pytest, from the checkout's root."""
    session.chdir(REPO)
    session.run(MAIN, "-m", "pytest", *args, env=env, external=True)


@nox.session(python=False)
def check(session: nox.Session) -> None:
    """Seconds: lint, format, types (Python and TypeScript), tests/unit and every docstring example."""
    session.run("make", "-C", str(REPO), "--no-print-directory", "check", external=True)


@nox.session(python=PYTHON, venv_params=["--seed"])  # with pip: the pass installs the kit with it
def gpu_dry(session: nox.Session) -> None:
    """The GPU pass, dry (no GPU here: the kit is complete, the pass runs, the GPU tests skip), in an
    environment built as the lent machine's is (torch, then bench/gpu/device_base.txt, then the kit
    offline). First, and removed after it: the disk then holds the other environments."""
    kit = REPO / ".gpu-kit-dry"
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        session.install("torch==2.13.0")
        session.install("-r", str(REPO / "bench" / "gpu" / "device_base.txt"))
        make = ("make", "-C", str(REPO), "--no-print-directory")
        session.run(*make, "gpu-kit", f"GPU_KIT={kit}", f"GPU_KIT_PYTHON={version}", external=True)
        session.chdir(REPO)
        python = str(Path(session.bin) / "python")
        env = {"GPU_PYTHON": python, "GPU_KIT": str(kit), "GPU_PASS_QUICK": "1"}
        session.run("bash", "bench/gpu/pass.sh", str(REPO / "build" / "gpu-dry-run"), env=env, external=True)
    finally:
        shutil.rmtree(kit, ignore_errors=True)
        shutil.rmtree(session.virtualenv.location, ignore_errors=True)


@nox.session(python=False)
def main(session: nox.Session) -> None:
    """Every test of the main runtime but the unit tests (``check``), the browsers and the clusters:
    real kernels and ranks, trainer_core, Accelerate's own scripts, the notebooks, the README."""
    marks = "not unit and not browser and not cluster"
    pytest(session, "tests", "-m", marks, "--durations=25", *PARALLEL, *session.posargs)


@nox.session(python=False)
def browser(session: nox.Session) -> None:
    """A real JupyterLab (and Notebook 7) and Debian's Chromium: what a person sees."""
    pytest(session, "tests/browser", "--deselect", "tests/browser/test_collaboration_browser.py", *session.posargs)


@nox.session(python=PYTHON)
def collaboration(session: nox.Session) -> None:
    """JupyterLab with real-time collaboration (jupyter-collaboration 5) on top of the main
    environment's packages (a .pth file): its extensions load only in servers this environment
    starts, so the main environment's JupyterLab stays without it."""
    main_site = _site_packages(MAIN)
    Path(_site_packages(str(Path(session.bin) / "python")), "main_environment.pth").write_text(
        f"import site; site.addsitedir({main_site!r})\n"
    )
    session.install("jupyter-collaboration==5.0.4")
    python = str(Path(session.bin) / "python")
    pytest(session, "tests/browser/test_collaboration_browser.py", *session.posargs, NL_TEST_RTC_PYTHON=python)


@nox.session(python=False)
def cluster(session: nox.Session) -> None:
    """A real two-node Ray cluster on loopback addresses, and the head-loss tests' own clusters beside
    it (their own addresses and free ports): the files on two workers."""
    pytest(session, "tests/cluster", *PARALLEL, *session.posargs)


@dataclass(frozen=True)
class Runtime:
    """A kernel's runtime: what its environment holds, beside the package."""

    torch: str
    packages: tuple[str, ...]
    without_comm: bool = False  # Colab's kernel has no standalone comm package


# On CI (a fresh clone: nothing is kept for a next run) each runtime's environment, with the CUDA
# build of torch it holds (5-7 GB with its CUDA libraries), is removed after its session, uv's cache
# with it: kept together, torch 2.8, 2.9, 2.10 and 2.11 would hold 19 GB. The two XLA sessions, whose
# torch builds share their CUDA libraries, are removed together after the second (11 GB at most, and
# one download of those libraries). Locally they are kept for the next run (NL_RELEASE_RUNTIMES=1
# removes them there too). Each release first writes the environments' disk to .nox/disk.tsv:
# `make test` prints the most they held at once beside what is left.
RELEASE_RUNTIMES = os.environ.get("NL_RELEASE_RUNTIMES", "1" if os.environ.get("CI") else "0") == "1"
ENVIRONMENTS = (REPO / ".venv", REPO / ".venv-tools", REPO / ".nox", REPO / ".cache" / "uv")  # the Makefile's


def building_only(session: nox.Session) -> bool:
    """Whether nox runs ``session`` with ``--install-only`` (``make test`` builds a runtime's
    environment so, beside an earlier stage): then its environment is kept for the session's run."""
    return bool(session._runner.global_config.install_only)  # nox has no public name for it


def release_runtime(session: nox.Session, *others: str) -> None:
    """Note the environments' disk after ``session``, then remove its environment, those of the
    sessions named ``others`` (folders of .nox) and uv's cache (the environments' files are hard
    links into it: both go, or nothing is freed)."""
    if not RELEASE_RUNTIMES or building_only(session):
        return
    with DISK_LOG.open("a") as log:
        log.write(f"{session.name}\t{disk_used(ENVIRONMENTS)}\n")
    for location in (session.virtualenv.location, *(str(Path(nox.options.envdir) / other) for other in others)):
        shutil.rmtree(location, ignore_errors=True)
    session.run(str(Path(sys.executable).parent / "uv"), "cache", "clean", "--quiet", external=True)


RUNTIMES = {
    "colab": Runtime(
        "torch==2.11.0", ("ipykernel==6.17.1", "ipywidgets==7.7.1", "accelerate==1.14.0", *KERNEL_EXTRAS), True
    ),
    "kaggle": Runtime("torch==2.10.0", ("ipykernel==6.17.1", "ipywidgets==8.1.5", "accelerate", *KERNEL_EXTRAS)),
}


NEVER = str(REPO / ".ci" / "never.txt")  # what these environments never install (triton)


def _build(session: nox.Session, runtime: Runtime) -> str:
    session.install("--override", NEVER, runtime.torch)
    session.install("--override", NEVER, *runtime.packages)
    python = str(Path(session.bin) / "python")
    if runtime.without_comm:
        session.run(python, "-c", "import comm", success_codes=[1], silent=True, external=True)
    return python


@nox.session(python=PYTHON)
@nox.parametrize("runtime", list(RUNTIMES))
def kernel(session: nox.Session, runtime: str) -> None:
    """The kernel-level tests (tests/kernel) again, with kernels started from a runtime's versions
    (README "Tested versions")."""
    try:
        python = _build(session, RUNTIMES[runtime])
        env = {"NL_TEST_KERNEL_PYTHON": python, "PYTHONPATH": str(REPO)}
        pytest(session, "tests/kernel", *PARALLEL, *session.posargs, **env)
    finally:
        release_runtime(session)


XLA_EXTRAS = ("ipykernel", "ipywidgets", "cloudpickle", "psutil", "scikit-learn", "safetensors")
XLA = {  # Kaggle's TPU image (torch 2.8) and Colab's (2.9)
    "2.8": Runtime("torch==2.8.0", ("torch_xla==2.8.*", *XLA_EXTRAS)),
    "2.9": Runtime("torch==2.9.0", ("torch_xla==2.9.0", *XLA_EXTRAS)),
}


# tests/xla is one file whose tests each take seconds of CPU: two workers take a test at a time
# (59 s -> 45 s here; each worker starts the kernels its tests ask for)
XLA_PARALLEL = (*WORKERS, "--dist", "load")


@nox.session(python=PYTHON)
@nox.parametrize("version", list(XLA))
def xla(session: nox.Session, version: str) -> None:
    """The XLA path (tests/xla: launches, trainer_core, the TPU notebook) on torch_xla's CPU device."""
    try:
        python = _build(session, XLA[version])
        check = "import torch_xla.core.xla_model as xm; xm.xla_device()"
        session.run(python, "-c", check, env={"PJRT_DEVICE": "CPU"})
        env = {"NL_TEST_XLA": "1", "NL_TEST_KERNEL_PYTHON": python, "PYTHONPATH": str(REPO)}
        pytest(session, "tests/xla", *XLA_PARALLEL, *session.posargs, **env)
    finally:
        if version == list(XLA)[-1]:  # the XLA sessions share their CUDA libraries: released together
            release_runtime(session, *(f"xla-version-{other.replace('.', '-')}" for other in XLA))


@nox.session(python=False)
def docs(session: nox.Session) -> None:
    """The documentation site, built with --strict (a broken link or reference fails)."""
    session.run("make", "-C", str(REPO), "--no-print-directory", "docs", external=True)


def _site_packages(python: str) -> str:
    import subprocess

    return subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
