"""Every launch is independent of the ones before it: a rank's own processes end with it, and a
sequence of different client libraries in one kernel works launch after launch."""

from __future__ import annotations

from textwrap import dedent

import psutil
import pytest

STARTS_PROCESSES = dedent("""
    import subprocess
    def leaves_processes(fail=False):
        child = subprocess.Popen(["sleep", "300"])                               # a child
        shell = subprocess.run("sleep 300 >/dev/null 2>&1 & echo $!", shell=True, capture_output=True, text=True)
        orphan = int(shell.stdout)                                               # its parent has exited
        with open(os.environ["PIDS_FILE"] + os.environ["RANK"], "w") as file:
            file.write(f"{child.pid} {orphan}")
        if fail:  # rank 0 fails once both ranks have started theirs; rank 1 is ended by the kernel
            import torch.distributed as dist
            dist.init_process_group("gloo")
            dist.barrier()
            if dist.get_rank() == 0:
                raise RuntimeError("failed with processes running")
            dist.barrier()
        return child.pid, orphan
""")


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("fail", [False, True])
def test_processes_a_rank_started_do_not_outlive_the_launch(kernel, tmp_path, fail):
    """Including one whose own parent exited first (re-parented to the rank, not to init)."""
    kernel.ok(STARTS_PROCESSES)
    kernel.ok(f"os.environ['PIDS_FILE'] = {str(tmp_path / 'pids')!r}")
    result = kernel.run(f"notebook_launcher(leaves_processes, ({fail},), num_processes=2, display='none')")
    kernel.ok("del os.environ['PIDS_FILE']")
    assert (result.error is not None) == fail
    pids = [int(pid) for rank in (0, 1) for pid in (tmp_path / f"pids{rank}").read_text().split()]
    assert len(pids) == 4
    assert [pid for pid in pids if _alive(pid)] == []


LIBRARIES = dedent("""
    from lightning.fabric import Fabric   # imported in the kernel, as a notebook does
    def fabric_auto():
        fabric = Fabric(devices="auto", strategy="ddp")   # one CPU device here: Fabric's own clear error
        fabric.launch()
    def fabric_ddp():
        import torch
        fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
        fabric.launch()
        return fabric.all_reduce(torch.tensor([fabric.global_rank + 1.0]), reduce_op="sum").item()
    def hf_accelerate():
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator(cpu=True)
        accelerator.prepare(torch.nn.Linear(4, 1))
        return accelerator.gather(torch.tensor([accelerator.process_index + 1.0])).sum().item()
    def raw_ddp():
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
        model(torch.randn(3, 4)).sum().backward()
        total = torch.tensor([dist.get_rank() + 1.0])
        dist.all_reduce(total)
        return total.item()
    def trainer_core_gather():
        import torch
        from trainer_core import Accelerator
        accelerator = Accelerator()
        accelerator.prepare(torch.nn.Linear(4, 1))
        return accelerator.gather(torch.tensor([accelerator.process_index + 1.0])).sum().item()
    kernel_env = dict(os.environ)
""")


def test_different_client_libraries_launch_after_launch_in_one_kernel(kernel):
    kernel.ok(LIBRARIES, timeout=180)
    failed = kernel.run("notebook_launcher(fabric_auto, num_processes=2, display='none')", timeout=120)
    assert failed.error["ename"] == "ValueError" and "does not match the world size (2)" in failed.error["evalue"]
    for name in [
        "raw_ddp",
        "fabric_ddp",
        "raw_ddp",
        "hf_accelerate",
        "raw_ddp",
        "trainer_core_gather",
        "fabric_ddp",
        "hf_accelerate",
        "raw_ddp",
    ]:
        kernel.ok(f"job = launch({name}, num_processes=2, display='none')")
        assert kernel.eval("job.wait(timeout=60)", timeout=90) == 3.0, name
        assert kernel.eval("{k: v for k, v in os.environ.items() if kernel_env.get(k) != v}") == {}
        assert kernel.children() == []


def test_an_accelerator_built_in_the_kernel_does_not_leak_into_the_ranks(kernel):
    """Hugging Face Accelerate's singletons, filled by an Accelerator built in the kernel (one
    process), start empty in forked ranks as in spawned ones: Accelerate in the ranks sees 2 processes."""
    kernel.ok(LIBRARIES, timeout=180)
    kernel.ok("from accelerate import Accelerator as KernelAccelerator\nin_kernel = KernelAccelerator(cpu=True)")
    assert kernel.eval("in_kernel.num_processes") == 1
    for name in ("hf_accelerate", "trainer_core_gather"):
        kernel.ok(f"job = launch({name}, num_processes=2, display='none')")
        assert kernel.eval("job.wait(timeout=60)", timeout=90) == 3.0, name
