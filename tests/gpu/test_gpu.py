"""CUDA paths in real kernels that need a real GPU (marked ``gpu``; skipped where none is present;
`make gpu-pass` runs them on a lent GPU machine).

These are the real counterparts of the forced-input tests in test_launch_checks.py and
test_gpu_traps.py. Tests that must find CUDA untouched in their kernel start a fresh one.
"""

from textwrap import dedent

import pytest
from kernel_session import KernelSession

pytestmark = pytest.mark.gpu


@pytest.fixture
def fresh_kernel():
    """A kernel of the test's own: what it does to CUDA stays in it."""
    session = KernelSession()
    yield session
    session.shutdown()


def test_cuda_ranks_fork_from_a_clean_kernel_and_use_their_gpu(kernel):
    """One rank per GPU over NCCL (one GPU: world size 1 on NCCL)."""
    kernel.ok(
        dedent("""
        import torch
        def on_gpu():
            import torch.distributed as dist
            dist.init_process_group("nccl")
            local = int(os.environ["LOCAL_RANK"])
            torch.cuda.set_device(local)
            t = torch.ones(1, device="cuda") * (dist.get_rank() + 1)
            dist.all_reduce(t)
            return torch.cuda.current_device(), t.item(), dist.get_backend()
        job = launch(on_gpu, num_processes=torch.cuda.device_count())
        job.wait()
    """)
    )
    assert kernel.eval("job.plan.start_method") == "fork"
    assert kernel.eval("torch.cuda.is_initialized()") is False
    n = kernel.eval("len(job.results)")
    total = float(sum(range(1, n + 1)))
    assert kernel.eval("job.results") == [(rank, total, "nccl") for rank in range(n)]


def test_two_ranks_share_one_gpu_through_gloo_on_cuda_tensors(kernel):
    """More ranks than GPUs is refused for NCCL; plain torch.distributed with gloo still reduces
    CUDA tensors of two ranks on one GPU (device='cpu' plans CPU ranks, which may use the GPU)."""
    kernel.ok(
        dedent("""
        def gloo_on_cuda():
            import torch, torch.distributed as dist
            dist.init_process_group("gloo")
            t = torch.full((4,), float(dist.get_rank() + 1), device="cuda:0")
            dist.all_reduce(t)
            return t.device.type, t.tolist()
        shared = launch(gloo_on_cuda, num_processes=2, device="cpu")
        shared.wait(timeout=120)
    """)
    )
    assert kernel.eval("shared.results") == [("cuda", [3.0] * 4)] * 2
    assert kernel.eval("torch.cuda.is_initialized()") is False


def test_counting_gpus_the_inventory_and_torchs_launch_config_leave_cuda_uninitialised(fresh_kernel):
    """``is_available``/``device_count``, the sidebar's inventory, the bf16 check and torch
    elastic's ``LaunchConfig`` (torch >= 2.9 asks CUDA for NUMA placement there) touch no CUDA in
    the kernel: a fork launch still works afterwards."""
    fresh_kernel.ok(
        dedent("""
        import torch
        from notebook_launcher import launch
        from notebook_launcher.devices.inventory import device_inventory
        from notebook_launcher.devices.probe import cuda_driver_started
        from torch.distributed.launcher.api import LaunchConfig
        found = (torch.cuda.is_available(), torch.cuda.device_count(), len(device_inventory()["cuda"]))
        LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=torch.cuda.device_count())
        job = launch(lambda: torch.cuda.get_device_name(0), num_processes=1, mixed_precision="bf16",
                     display="none")
        name = job.wait(timeout=120)
    """)
    )
    assert fresh_kernel.eval("found[0]") is True and fresh_kernel.eval("found[1] == found[2] >= 1") is True
    assert fresh_kernel.eval("(torch.cuda.is_initialized(), cuda_driver_started())") == (False, False)
    assert fresh_kernel.eval("job.plan.start_method") == "fork"
    assert fresh_kernel.eval("name")


def test_real_cuda_init_in_the_kernel_blocks_fork_naming_the_cell_and_auto_spawns(kernel):
    kernel.ok("import torch")
    kernel.ok("warm = torch.zeros(1, device='cuda')")
    forced = kernel.run("launch(lambda: 0, num_processes=1, start_method='fork')")
    assert forced.error["ename"] == "LaunchError"
    assert "CUDA was initialized in this kernel by Cell In[" in forced.error["evalue"]
    assert "warm = torch.zeros(1, device='cuda')" in forced.error["evalue"]
    auto = kernel.ok(
        "job = launch(lambda: torch.cuda.device_count(), num_processes=1); print(job.wait(), job.plan.start_method)"
    )
    assert auto.stdout.split()[-1] == "spawn"
    assert "workers are spawned instead of forked" in auto.stderr


def test_a_library_that_initialises_cuda_at_import_is_named_with_the_cell(fresh_kernel, tmp_path):
    """torchao did this on Colab and Kaggle (Accelerate #3524): a module whose import creates a CUDA
    tensor stands for it here, on a real driver."""
    (tmp_path / "gpu_at_import.py").write_text("import torch\n\n_PROBE = torch.zeros(1, device='cuda')\n")
    fresh_kernel.ok(f"import sys; sys.path.insert(0, {str(tmp_path)!r})\nfrom notebook_launcher import launch")
    fresh_kernel.ok("import gpu_at_import")
    forced = fresh_kernel.run("launch(lambda: 0, num_processes=1, start_method='fork')")
    assert forced.error["ename"] == "LaunchError"
    evalue = forced.error["evalue"]
    assert "CUDA was initialized in this kernel by Cell In[" in evalue
    assert "line 1: import gpu_at_import → " in evalue
    assert "gpu_at_import.py, line 3: _PROBE = torch.zeros(1, device='cuda')" in evalue
    auto = fresh_kernel.ok("print(launch(lambda: 7, num_processes=1).wait())")
    assert auto.stdout.split()[-1] == "7"
    assert "import gpu_at_import" in auto.stderr


def test_a_driver_started_before_the_import_is_caught_and_spawned_around(fresh_kernel):
    """``torch.cuda.is_available()`` without NVML counting (what happens before notebook_launcher
    is imported) starts the CUDA driver, which forked children cannot use, though torch says CUDA
    is not initialised: "auto" spawns, "fork" is refused, naming the cause."""
    fresh_kernel.ok(
        dedent("""
        import os
        os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        import torch
        available = torch.cuda.is_available()
        from notebook_launcher import launch
    """)
    )
    assert fresh_kernel.eval("(available, torch.cuda.is_initialized())") == (True, False)
    forced = fresh_kernel.run("launch(lambda: 0, num_processes=1, start_method='fork')")
    assert forced.error["ename"] == "LaunchError"
    assert "the CUDA driver was started in this kernel" in forced.error["evalue"]
    auto = fresh_kernel.ok(
        "job = launch(lambda: torch.ones(1, device='cuda').item(), num_processes=1)\nprint(job.wait())"
    )
    assert auto.stdout.split()[-1] == "1.0"
    assert fresh_kernel.eval("job.plan.start_method") == "spawn"


def test_the_view_shows_each_ranks_peak_gpu_memory(kernel):
    """A training rank on a GPU shows its peak device memory beside its metrics, live and in the
    finished cell's static form."""
    kernel.ok(
        dedent("""
        from notebook_launcher.frontend.views.static import static_bundle
        from trainer_core.accelerator import DEVICE_MEMORY_METRIC
        def steps():
            import torch
            from trainer_core import Accelerator
            accelerator = Accelerator()
            model = accelerator.prepare(torch.nn.Linear(1024, 1024))
            optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
            for _ in range(3):
                accelerator.backward(model(torch.randn(64, 1024, device=accelerator.device)).sum())
                optimizer.step()
                optimizer.zero_grad()
            return torch.cuda.max_memory_allocated() / 2**20
        shown = launch(steps, num_processes=1, display="none")
        peak = shown.wait(timeout=120)
        memory = [m for m in shown.metrics if DEVICE_MEMORY_METRIC in m["values"]]
    """)
    )
    assert kernel.eval("len(memory) >= 1 and memory[0]['rank'] == 0") is True
    assert kernel.eval("0 < memory[0]['values'][DEVICE_MEMORY_METRIC] <= peak") is True
    assert kernel.eval("DEVICE_MEMORY_METRIC in static_bundle(shown)['text/html']") is True


def test_gpu_tensors_a_rank_returns_arrive_on_the_cpu_and_the_kernel_can_still_fork(fresh_kernel):
    """A GPU rank returning its state_dict (the tutorials' pattern) must not initialise CUDA in the
    kernel: unpickled there, the CUDA tensors would, and every later launch would have to spawn."""
    fresh_kernel.ok(
        dedent("""
        import torch
        from notebook_launcher import launch
        def weights():
            model = torch.nn.Linear(1024, 1024).cuda()  # 4 MiB of weights: through shared memory
            return {"state": model.state_dict(), "param": model.bias, "small": torch.ones(3, device="cuda")}
        first = launch(weights, num_processes=1, display="none")
        got = first.wait(timeout=120)
        second = launch(lambda: torch.cuda.device_count(), num_processes=1, display="none")
        second.wait(timeout=120)
    """)
    )
    assert fresh_kernel.eval("torch.cuda.is_initialized()") is False
    assert fresh_kernel.eval("(first.plan.start_method, second.plan.start_method)") == ("fork", "fork")
    assert fresh_kernel.eval("{t.device.type for t in [*got['state'].values(), got['param'], got['small']]}") == {"cpu"}
    assert fresh_kernel.eval("(type(got['param']).__name__, got['state']['weight'].shape[0])") == ("Parameter", 1024)


GPU_PACED = dedent("""
    def gpu_paced(seconds):
        import time, torch
        from trainer_core import Accelerator
        accelerator = Accelerator(mixed_precision="bf16")
        model = accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.Linear(4096, 4096)))
        optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=1e-4))
        batch = torch.randn(256, 4096, device=accelerator.device)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            accelerator.backward(model(batch).float().pow(2).mean())
            optimizer.step()
            optimizer.zero_grad()
        torch.cuda.synchronize()
        return accelerator.throughput(), torch.cuda.get_device_name()
""")


def test_the_kernel_reads_each_ranks_gpu_through_nvml_and_leaves_cuda_uninitialised(fresh_kernel):
    """GPU utilisation, memory, power and the throttle flag of a training rank, sampled by the kernel
    through NVML every second or so, while the kernel's own CUDA stays uninitialised (it can fork)."""
    fresh_kernel.ok("from notebook_launcher import launch\nfrom trainer_core.hardware import cuda_driver_started")
    fresh_kernel.ok(GPU_PACED)
    fresh_kernel.ok("job = launch(gpu_paced, args=(6,), num_processes=1, display='none'); job.wait(timeout=180)")
    samples = fresh_kernel.eval("[r['values'] for r in job.metrics if 'GPU %' in r['values']]")
    assert len(samples) >= 3, samples
    assert max(sample["GPU %"] for sample in samples) > 10
    assert max(sample["GPU memory MB"] for sample in samples) > 100
    assert all(sample["GPU power W"] > 0 and sample["GPU throttled"] in (0.0, 1.0) for sample in samples)
    assert fresh_kernel.eval("cuda_driver_started()") is False


def test_mfu_on_a_gpu_is_the_hand_counted_flops_over_the_table_peak(kernel):
    """Two 4096² linear layers on 256 samples: 2·256·4096²·2 FLOPs forward, three times that a step;
    MFU is that times steps/s over the device's bf16 peak (H100/H200: 989 TFLOPS), within 10 %."""
    from trainer_core.flops import peak_tflops

    kernel.ok(GPU_PACED)
    kernel.ok("job = launch(gpu_paced, args=(4,), num_processes=1, display='none'); job.wait(timeout=180)")
    figures, name = kernel.eval("job.results[0]")
    assert figures["flops_per_step"] == 3 * 2 * 256 * 4096 * 4096 * 2
    peak = peak_tflops(name, "bf16", {})
    assert peak is not None, name
    hand = figures["flops_per_step"] * figures["steps_per_second"] / (peak * 1e12)
    assert figures["mfu"] is not None and abs(figures["mfu"] - hand) <= 0.1 * hand, (figures, hand)
    assert 0.01 < figures["mfu"] < 1.0, figures
