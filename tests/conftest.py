"""Shared fixtures: a real kernel per test module, and guards that fail a test leaving processes behind."""

from __future__ import annotations

import contextlib
import os

import psutil
import pytest
from kernel_session import KernelSession, is_kernel_helper
from paths import SANDBOX_BACKEND

# The conftest.py files (this one, and the folders' markers: ``folders.mark_folder``) are loaded as conftests, but
# not collected for doctests: as modules they would all be named "conftest". Nor is the stand-in torch_tpu
# package: importing it gives this process a ``torch.tpu`` (and renames torch's PrivateUse1 device), which
# every rank forked from here would inherit; only the processes of the tests that ask for it load it.
collect_ignore = ["conftest.py", "torch_tpu_standin"]
collect_ignore_glob = ["*/conftest.py"]


def _has_cuda():
    """Counted through NVML, so pytest's own process never initialises CUDA: the tests fork ranks
    from it, and a CUDA driver started here would break every forked rank's CUDA."""
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.version.cuda) and torch.cuda.device_count() > 0


def pytest_collection_modifyitems(config, items):
    """``gpu`` tests skip without a CUDA GPU. ``slow`` means what ``make quick`` leaves out: a real
    browser with a JupyterLab server (every test that takes the ``browser`` fixture, marked here so
    a new one cannot be forgotten), a Ray cluster, a notebook or tutorial run end to end, a launch
    reopened from its saved file, the fault soak (those files mark themselves)."""
    for item in items:
        if "browser" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none here")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # the marker, not the folder tests/gpu
            item.add_marker(skip)


@pytest.fixture(scope="module")
def kernel():
    """A real ipykernel shared by the tests of one module, with notebook_launcher imported."""
    session = KernelSession()
    session.ok("import os, sys, time, signal, threading\nfrom notebook_launcher import notebook_launcher, launch")
    yield session
    session.shutdown()


@pytest.fixture(autouse=True)
def kernel_left_clean(request):
    """Fail the test if the module's kernel still has child processes after it (an orphaned rank)."""
    yield
    if "kernel" not in request.fixturenames:
        return
    session = request.getfixturevalue("kernel")
    leftovers = _kill(session.children())
    if leftovers:
        pytest.fail(f"processes left behind in the kernel: {leftovers}")


def _kill(processes):
    """Kill ``processes`` (ones the test or its kernel started); (pid, name) of each, named before
    the kill. A process may end between its listing and its kill."""
    named = [(process.pid, _name(process)) for process in processes]
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    return named


def _name(process):
    try:
        return process.name()
    except psutil.NoSuchProcess:
        return "(ended)"


@pytest.fixture(autouse=True)
def no_stray_processes():
    """Fail the test if it leaves behind a process it started (a rank launched from the test itself).

    Only new direct children count: processes that long-lived fixtures (a kernel, a JupyterLab
    server, a browser) start below themselves belong to those fixtures.
    """
    before = {child.pid for child in psutil.Process(os.getpid()).children()}
    yield
    after = psutil.Process(os.getpid()).children()
    stray = [child for child in after if child.pid not in before and _alive(child) and not is_kernel_helper(child)]
    killed = _kill(stray)
    assert not killed, f"test left processes behind: {killed}"


def _alive(process):
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server of its own for the test module (browser tests)."""
    from browser import LabServer  # Playwright and JupyterLab: only where browser tests run (not the GPU pass)

    server = LabServer(tmp_path_factory.mktemp("lab"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, driven by Playwright (which never downloads a browser here)."""
    from browser import CHROMIUM, CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def sandbox(monkeypatch):
    """``cluster="sandbox"`` (``tests/backend_sandbox``) registered for one test; the registry is
    put back after it."""
    from notebook_launcher import backends

    monkeypatch.syspath_prepend(str(SANDBOX_BACKEND))
    monkeypatch.setattr(backends, "_known", dict(backends._known))
    monkeypatch.setattr(backends, "_loaded", dict(backends._loaded))
    backends.register_backend("sandbox", "sandbox_backend:SandboxBackend")
    return backends.get_backend("sandbox")


@pytest.fixture()
def node1(request):
    """A second kernel: node 1 of a two-node launch over loopback, with the test module's ``TRAIN``
    cell run in it (node 0 is the ``kernel`` fixture)."""
    session = KernelSession()
    session.ok(request.module.TRAIN)
    yield session
    session.shutdown()


@pytest.fixture()
def fresh_accelerate_state():
    """Hugging Face Accelerate's shared state (a process-wide singleton) reset before and after the
    test, so each test's Accelerator sets its own precision and device."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield AcceleratorState
    AcceleratorState._reset_state(reset_partial_state=True)
