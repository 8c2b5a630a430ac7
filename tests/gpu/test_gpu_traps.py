"""The GPU traps Colab and Kaggle users report, handled here without a GPU.

The CUDA driver is the one edge that cannot exist on this machine, so where a test needs it, it
stands in for it and says how: a fake ``nvidia-smi`` on the PATH (what the launcher reads compute
capabilities from), a fake ``libcuda.so.1`` built with the C compiler (what the driver check asks),
``torch.cuda``'s capability functions replaced (what a rank's Accelerator asks), and the CUDA-init
recorder called from a module's import (as torchao's import calls ``torch.cuda``). Everything
else (the plan, the preflight, the messages, kernels and ranks) is the real thing; tests/gpu/test_gpu.py
runs the same paths on a real GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from textwrap import dedent

import pytest
import torch
from kernel_session import KernelSession

from notebook_launcher.devices import cuda as cuda_device
from notebook_launcher.devices.cuda import CudaDevice
from notebook_launcher.launching.plan import make_plan


@pytest.fixture
def t4_nvidia_smi(tmp_path, monkeypatch):
    """A fake ``nvidia-smi`` for two Tesla T4s (Kaggle's GPUs, compute capability 7.5)."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        dedent("""\
        #!/bin/sh
        case "$1" in
          *compute_cap*) printf '0, Tesla T4, 7.5\\n1, Tesla T4, 7.5\\n' ;;
          *) printf '0, Tesla T4, 15360\\n1, Tesla T4, 15360\\n' ;;
        esac
    """)
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(cuda_device, "nvml_gpu_count", lambda: 2)


def test_bf16_on_a_pre_ampere_gpu_is_refused_before_any_rank_starts_naming_it(t4_nvidia_smi):
    with pytest.raises(ValueError) as refused:
        make_plan(lambda: 0, num_processes=2, device="cuda", mixed_precision="bf16")
    message = str(refused.value)
    assert message.startswith("mixed_precision='bf16' needs a GPU of compute capability 8.0 or newer")
    assert "GPU 0 here is a Tesla T4 (compute capability 7.5)" in message
    assert "use mixed_precision='fp16'" in message
    plan, _ = make_plan(lambda: 0, num_processes=2, device="cuda", mixed_precision="fp16")
    assert plan.mixed_precision == "fp16"


def test_bf16_is_allowed_on_ampere_and_newer_and_counted_on_visible_gpus_only(t4_nvidia_smi, monkeypatch):
    assert CudaDevice().check_precision("no") is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert CudaDevice().check_precision("bf16") is None  # no visible GPU: nothing to refuse
    assert cuda_device.bf16_refusal([{"index": 0, "name": "NVIDIA L4", "capability": (8, 9)}]) is None


def test_a_ranks_accelerator_refuses_bf16_on_a_pre_ampere_gpu(monkeypatch):
    """In the rank, the GPU is asked through torch.cuda (replaced here: no GPU)."""
    from trainer_core.backends.cuda import CudaBackend
    from trainer_core.precision import select_precision

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    with pytest.raises(ValueError, match=r"this rank's GPU is a Tesla T4 \(compute capability 7.5\): use"):
        select_precision("bf16", CudaBackend())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert select_precision("bf16", CudaBackend()).name == "bf16"


def test_a_stall_on_two_gpus_names_the_nccl_peer_to_peer_remedy(monkeypatch):
    monkeypatch.delenv("NCCL_P2P_DISABLE", raising=False)
    hint = CudaDevice().stall_hint(2)
    assert "os.environ['NCCL_P2P_DISABLE'] = '1'" in hint and "Kaggle's 2×T4" in hint
    assert CudaDevice().stall_hint(1) is None
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    assert CudaDevice().stall_hint(2) is None


@pytest.fixture(scope="module")
def kernel():
    session = KernelSession()
    session.ok("import os, torch\nfrom notebook_launcher import launch")
    yield session
    session.shutdown()


def test_a_library_that_initialises_cuda_at_import_is_named_after_the_cell_line(kernel, tmp_path):
    """torchao initialised CUDA at import on Colab and Kaggle (Accelerate #3524). Here a module's
    import calls the recorder that wraps ``torch._C._cuda_init`` (it stands for the library's
    ``torch.cuda`` call), and ``torch.cuda.is_initialized`` answers True."""
    (tmp_path / "fake_cuda_lib.py").write_text(
        "from notebook_launcher.devices import cuda_init_site\n"
        "cuda_init_site.recording(lambda: None)()  # stands for torch.cuda.init()\n"
    )
    kernel.ok(f"import sys; sys.path.insert(0, {str(tmp_path)!r})")
    kernel.ok("import fake_cuda_lib")
    kernel.ok("real_is_initialized = torch.cuda.is_initialized; torch.cuda.is_initialized = lambda: True")
    try:
        forced = kernel.run("launch(lambda: 0, num_processes=2, start_method='fork')")
        auto = kernel.ok("print(launch(lambda: 5, num_processes=2).wait())")
    finally:
        kernel.ok("torch.cuda.is_initialized = real_is_initialized")
    evalue = forced.error["evalue"]
    assert forced.error["ename"] == "LaunchError"
    assert "CUDA was initialized in this kernel by Cell In[" in evalue
    assert "], line 1: import fake_cuda_lib → " in evalue
    assert "fake_cuda_lib.py, line 2: cuda_init_site.recording(lambda: None)()" in evalue
    assert auto.stdout.strip() == "5" and "import fake_cuda_lib → " in auto.stderr


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_kernel_that_changed_multiprocessings_default_still_launches_as_documented(kernel, method):
    """Python 3.14 makes forkserver the default on Linux; notebooks also call set_start_method."""
    kernel.ok(
        "import multiprocessing\n"
        "before = multiprocessing.get_start_method(allow_none=True)\n"
        f"multiprocessing.set_start_method({method!r}, force=True)"
    )
    try:
        kernel.ok("job = launch(lambda: os.getppid(), num_processes=2, display='none'); job.wait(timeout=120)")
        assert kernel.eval("job.plan.start_method") == "fork"
        assert kernel.eval("job.results == [os.getpid()] * 2") is True  # forked from the kernel itself
        kernel.ok("spawned = launch(lambda: 3, num_processes=2, start_method='spawn', display='none')")
        assert kernel.eval("spawned.wait(timeout=120)") == 3
    finally:
        kernel.ok("multiprocessing.set_start_method(before, force=True)")


FAKE_DRIVER = r"""
int cuDeviceGetCount(int *count) { *count = 1; return RESULT; }
"""

PROBE = r"""
import ctypes, sys
import torch
from notebook_launcher.devices.probe import cuda_driver_started
from notebook_launcher.backends.local.preflight import fork_hazards
before = cuda_driver_started()
ctypes.CDLL(sys.argv[1])  # loaded under its soname, libcuda.so.1, as libcudart loads the real one
torch.version.cuda = "12.8"  # a CUDA build of torch (this one is CPU-only)
print(before, cuda_driver_started(), fork_hazards())
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build the stand-in driver")
@pytest.mark.parametrize(("result", "started"), [(0, True), (3, False)])
def test_a_cuda_driver_started_in_the_kernel_is_a_fork_hazard(tmp_path, result, started):
    """``torch.cuda.is_available()`` without NVML starts the CUDA driver (``cuInit``), after which a
    forked child's CUDA fails though torch says CUDA is not initialised (seen on an H100). The check
    asks the loaded driver for its GPU count, which says CUDA_ERROR_NOT_INITIALIZED (3) until
    ``cuInit``: a stand-in driver answers 0 (started) or 3 (loaded, not started)."""
    source = tmp_path / "fake_cuda.c"
    source.write_text(FAKE_DRIVER.replace("RESULT", str(result)))
    library = tmp_path / "libcuda.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(library), str(source)], check=True)
    out = subprocess.run([sys.executable, "-c", PROBE, str(library)], capture_output=True, text=True, check=True)
    before, after, hazards = out.stdout.strip().split(" ", 2)
    assert (before, after) == ("False", str(started))
    if started:
        assert "the CUDA driver was started in this kernel (before notebook_launcher was imported" in hazards
        assert "PYTORCH_NVML_BASED_CUDA_CHECK=1" in hazards
    else:
        assert hazards == "[]"
