"""The XLA path (TPUs) through torch_xla, run here on torch_xla's CPU device (``PJRT_DEVICE=CPU``).

Runs only in ``make test``'s XLA sessions (``NL_TEST_XLA=1``), whose kernels come from a separate
torch + torch_xla environment: 2.8 (Kaggle's TPU image) and 2.9 (Colab's). ``CPU_NUM_DEVICES=2``
makes torch_xla run two ranks as threads of one process, as on TPU v2/v3; collectives between
them do not work on CPU (upstream pytorch/xla#9089), so those tests use none. The TPU-host
detection is driven by its environment inputs (``TPU_ACCELERATOR_TYPE``), the test-only way to
take the TPU branch on a CPU host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import pytest
from kernel_session import KernelSession
from paths import NOTEBOOKS, REPO

pytestmark = pytest.mark.skipif(os.environ.get("NL_TEST_XLA") != "1", reason="needs the torch_xla environment")


def _kernel(**env):
    session = KernelSession(env={"PJRT_DEVICE": "CPU", **env})
    session.ok("import os, sys, threading\nfrom notebook_launcher import notebook_launcher, launch")
    return session


@pytest.fixture(scope="module")
def kernel():
    session = _kernel(CPU_NUM_DEVICES="1")
    yield session
    session.shutdown()


@pytest.fixture(scope="module")
def threads_kernel():
    session = _kernel(CPU_NUM_DEVICES="2")
    yield session
    session.shutdown()


def test_one_xla_device_returns_rank_0_value_and_output(kernel):
    result = kernel.ok(
        dedent("""
        def on_xla(scale):
            import torch, torch_xla, torch_xla.runtime as xr
            t = torch.ones(4, device=torch_xla.device()) * scale
            print("ordinal", xr.global_ordinal(), "of", xr.world_size(), "sum", t.sum().item())
            return {"ordinal": xr.global_ordinal(), "sum": t.sum().item()}
        job = launch(on_xla, args=(2.5,), device="xla")
        value = job.wait()
        import torch_xla
    """)
    )
    assert kernel.eval("value") == {"ordinal": 0, "sum": 10.0}
    assert "[rank 0] ordinal 0 of 1 sum 10.0" in result.stdout
    assert kernel.eval("job.plan.start_method") == "xla"
    assert kernel.eval("torch_xla._XLAC._xla_runtime_is_initialized()") is False
    assert kernel.children() == []


def test_a_failing_xla_rank_raises_its_own_exception(kernel):
    kernel.ok("def xla_fails():\n    raise KeyError('no such column')")
    result = kernel.run("notebook_launcher(xla_fails, device='xla')")
    assert result.error["ename"] == "KeyError" and "raise KeyError('no such column')" in result.traceback
    assert kernel.children() == []


def test_interrupt_ends_the_xla_host_and_its_ranks(kernel):
    kernel.ok("def xla_waits():\n    print('waiting', flush=True)\n    threading.Event().wait()")
    msg_id = kernel.submit("notebook_launcher(xla_waits, device='xla')")
    kernel.collect(msg_id, timeout=120, until=lambda r: "[rank 0] waiting" in r.stdout)
    kernel.interrupt()
    result = kernel.collect(msg_id, timeout=30)
    assert result.error["ename"] == "KeyboardInterrupt" and result.seconds < 3
    assert kernel.children() == []


def test_xla_rules_are_explained(kernel, threads_kernel):
    spawn = kernel.run("launch(lambda: 0, device='xla', start_method='spawn')")
    assert spawn.error["ename"] == "ValueError" and "in a notebook torch_xla must fork" in spawn.error["evalue"]
    too_many = kernel.run("launch(lambda: 0, device='xla', num_processes=2)")
    assert too_many.error["ename"] == "ValueError" and "more than the 1 XLA device found" in too_many.error["evalue"]
    session = _kernel(CPU_NUM_DEVICES="4")
    try:
        between = session.run("launch(lambda: 0, device='xla', num_processes=3)")
        assert between.error["ename"] == "ValueError"
        assert "torch_xla: it runs either 1 process or one rank per core (4 here)" in between.error["evalue"]
    finally:
        session.shutdown()


def test_thread_ranks_keep_their_output_apart(threads_kernel):
    threads_kernel.ok(
        dedent("""
        def chatty_threads():
            import torch_xla.runtime as xr
            for i in range(3):
                print(f"ordinal {xr.global_ordinal()} line {i}")
            print(f"note from {xr.global_ordinal()}", file=sys.stderr)
            return (xr.global_ordinal(), os.getpid())
        job = launch(chatty_threads, device="xla", display="none")
        job.wait()
    """)
    )
    results = threads_kernel.eval("job.results")
    assert [ordinal for ordinal, _ in results] == [0, 1]
    assert results[0][1] == results[1][1]  # both ranks ran in one process
    for rank in (0, 1):
        assert threads_kernel.eval(f"job.logs({rank}, 'stdout')") == "".join(
            f"ordinal {rank} line {i}\n" for i in range(3)
        )
        assert threads_kernel.eval(f"job.logs({rank}, 'stderr')") == f"note from {rank}\n"


def test_xla_runtime_started_in_the_kernel_is_refused_before_anything_starts():
    session = _kernel(CPU_NUM_DEVICES="1")
    try:
        session.ok("import torch, torch_xla\nx = torch.ones(1, device=torch_xla.device())")
        refused = session.run("launch(lambda: 0, device='xla')")
        assert refused.error["ename"] == "LaunchError"
        assert "the XLA runtime was started in this kernel" in refused.error["evalue"]
        auto_cpu = session.ok("print(launch(lambda: 'ok', device='cpu', num_processes=1).wait())")
        assert auto_cpu.stdout.strip() == "ok" and "spawned instead of forked" in auto_cpu.stderr
    finally:
        session.shutdown()


def test_a_tpu_host_takes_the_xla_path_by_default():
    session = _kernel(CPU_NUM_DEVICES="1", TPU_ACCELERATOR_TYPE="v3-8")
    try:
        result = session.ok("job = launch(lambda: 7)\nprint(job.wait(), job.plan.device.name, job.plan.start_method)")
        assert result.stdout.split() == ["7", "xla", "xla"]
    finally:
        session.shutdown()


XLA_TRAINING = dedent("""
    def train_on_xla(ckpt):
        import torch, torch.nn as nn, torch.nn.functional as F
        from torch.utils.data import DataLoader, TensorDataset
        from trainer_core import Accelerator, set_seed
        set_seed(0)
        accelerator = Accelerator(mixed_precision="bf16")
        g = torch.Generator().manual_seed(0)
        x = torch.randn(200, 6, generator=g)
        y = (x[:, 0] > 0).long()
        model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        train_dl = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
        eval_dl = DataLoader(TensorDataset(x, y), batch_size=64)
        model, optimizer, train_dl, eval_dl = accelerator.prepare(model, optimizer, train_dl, eval_dl)
        losses = []
        for epoch in range(3):
            for xb, yb in train_dl:
                loss = F.cross_entropy(model(xb), yb)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            losses.append(accelerator.reduce(loss.detach(), "mean").item())
        seen = 0
        correct = 0
        for xb, yb in eval_dl:
            preds, labels = accelerator.gather_for_metrics((model(xb).argmax(-1), yb))
            seen += len(labels)
            correct += (preds == labels).sum().item()
        accelerator.save_state(ckpt)
        weights = {k: v.cpu() for k, v in accelerator.unwrap_model(model).state_dict().items()}
        again = Accelerator()
        fresh = again.prepare(nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 2)))
        again.load_state(ckpt)
        reloaded = {k: v.cpu() for k, v in again.unwrap_model(fresh).state_dict().items()}
        try:
            Accelerator(mixed_precision="fp16")
            fp16 = "accepted"
        except ValueError as err:
            fp16 = str(err)
        return {"device": accelerator.device.type, "world": accelerator.num_processes, "losses": losses,
                "seen": seen, "accuracy": correct / seen,
                "reloaded_equal": all(torch.equal(weights[k], reloaded[k]) for k in weights),
                "fp16": fp16, "batch_device": xb.device.type}
""")


def test_trainer_core_trains_on_the_xla_device(kernel, tmp_path):
    kernel.ok(XLA_TRAINING)
    kernel.ok(
        f"xla_result = notebook_launcher(train_on_xla, args=({str(tmp_path / 'ckpt')!r},), device='xla')", timeout=300
    )
    result = kernel.eval("xla_result")
    assert result["device"] == "xla" and result["batch_device"] == "xla" and result["world"] == 1
    assert result["losses"][-1] < result["losses"][0]
    assert result["seen"] == 200 and result["accuracy"] > 0.8
    assert result["reloaded_equal"] is True
    assert "mixed_precision='fp16' is not supported on XLA devices; use 'bf16'" in result["fp16"]


def test_the_tpu_notebook_runs_on_the_xla_cpu_device():
    """notebooks/tpu_colab_kaggle.ipynb, cell by cell, in a kernel of the torch_xla environment."""
    import nbformat

    path = str(NOTEBOOKS / "tpu_colab_kaggle.ipynb")
    cells = [cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]
    session = _kernel(CPU_NUM_DEVICES="1", TPU_NOTEBOOK_EPOCHS="4")
    try:
        outputs = [session.ok(source, timeout=300).stdout for source in cells]
    finally:
        session.shutdown()
    text = "".join(outputs)
    assert "TPU stack: torch_xla; nothing to install" in text  # no torch_tpu in this environment
    assert "[rank 0] 1 torch_xla ranks on xla:0 (CPU)" in text
    accuracy = float(text.split("accuracy on the TPU ranks: ")[1].split()[0])
    assert accuracy > 0.85


def test_installing_the_package_keeps_the_images_torch_and_torch_xla(tmp_path):
    """A TPU image's torch and torch_xla (Kaggle's: 2.8 and 2.8) stay as they are when the package
    is installed there: a new torch is a 3 GB CUDA build and breaks torch_xla. pip's plan (a dry
    run) for installing the package's wheel into this environment, the kernels', holds neither."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # the build's jupyter-builder
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(tmp_path)]
    subprocess.run([*build, str(REPO)], check=True, env={**os.environ, "PATH": path}, timeout=600)
    wheel = next(tmp_path.glob("notebook_launcher-*.whl"))
    report = tmp_path / "plan.json"
    python = os.environ["NL_TEST_KERNEL_PYTHON"]
    plan = [sys.executable, "-m", "pip", "--python", python, "install", "--dry-run", "--quiet", "--report", str(report)]
    subprocess.run([*plan, str(wheel)], check=True, timeout=600)
    planned = {item["metadata"]["name"].lower().replace("_", "-") for item in json.loads(report.read_text())["install"]}
    assert "notebook-launcher" in planned, planned
    assert not planned & {"torch", "torch-xla"}, planned
