"""CUDA paths that need a real GPU (marked ``gpu``; skipped where none is present).

These are the real counterparts of the forced-input tests in test_launch_checks.py.
"""

from textwrap import dedent

import pytest

pytestmark = pytest.mark.gpu


def test_cuda_ranks_fork_from_a_clean_kernel_and_use_their_gpu(kernel):
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
            return torch.cuda.current_device(), t.item()
        job = launch(on_gpu, num_processes=min(2, torch.cuda.device_count()))
        job.wait()
    """)
    )
    assert kernel.eval("job.plan.start_method") == "fork"
    assert kernel.eval("torch.cuda.is_initialized()") is False
    n = kernel.eval("len(job.results)")
    total = float(sum(range(1, n + 1)))
    assert kernel.eval("job.results") == [(rank, total) for rank in range(n)]


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
