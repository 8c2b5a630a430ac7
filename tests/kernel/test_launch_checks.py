"""Bad input and fork safety: refused before any rank starts, with a message that says what to do."""

from textwrap import dedent

import pytest


@pytest.mark.parametrize(
    "call, ename, words",
    [
        ("launch(f, num_processes=0)", "ValueError", "num_processes must be at least 1, got 0 (found 2 CPUs)"),
        ("launch(f, num_processes=-2)", "ValueError", "num_processes must be at least 1, got -2"),
        ("launch(f, num_processes=1.5)", "ValueError", "num_processes must be an int, got float 1.5"),
        ("launch(f, num_processes=True)", "ValueError", "num_processes must be an int, got bool"),
        (
            "launch(f, mixed_precision='fp8')",
            "ValueError",
            "mixed_precision='fp8' is not valid; use one of 'no', 'fp16', 'bf16'",
        ),
        (
            "launch(f, start_method='forkserver')",
            "ValueError",
            "start_method='forkserver' is not valid; use one of 'auto', 'fork', 'spawn'",
        ),
        (
            "launch(f, device='tpu9')",
            "ValueError",
            "device='tpu9' is not valid; use one of 'auto', 'cpu', 'cuda', 'xla', 'tpu'",
        ),
        ("launch(f, device='cuda')", "ValueError", "no CUDA GPU was found"),
        ("launch(f, display='fancy')", "ValueError", "display='fancy' is not valid"),
        ("launch(f, use_port=70000)", "ValueError", "use_port must be None or a port number in 1..65535, got 70000"),
        ("launch(f, num_nodes=2)", "ValueError", "pass use_port="),
        (
            "launch(f, num_nodes=2, node_rank=2, use_port=29555)",
            "ValueError",
            "node_rank must be an int in [0, 2), got 2",
        ),
        ("launch(f, grace_period=-1)", "ValueError", "grace_period must be a number of seconds >= 0"),
        ("launch(42)", "TypeError", "function must be callable, got int"),
        (
            "launch(f, args=5)",
            "TypeError",
            "args must be a tuple or list of positional arguments, got int (for one argument write args=(5,))",
        ),
        ("launch(f, args='ab')", "TypeError", "args must be a tuple or list"),
        # non-finite and absurd times: NaN never fires a timer, inf is "None", huge overflows later
        ("launch(f, stall_timeout=float('nan'))", "ValueError", "stall_timeout must be a number of seconds > 0"),
        ("launch(f, timeout=float('inf'))", "ValueError", "or None for no limit, got inf"),
        ("launch(f, grace_period=float('nan'))", "ValueError", "grace_period must be a number of seconds >= 0"),
        ("launch(f, grace_period=float('inf'))", "ValueError", "grace_period must be"),
        ("launch(f, timeout=1e300)", "ValueError", "at most 2592000 (30 days)"),
        (
            "launch(f, timeout=10**400)",
            "ValueError",
            "at most 2592000 (30 days), or None for no limit, got an int of 401",
        ),
        ("launch(f, rendezvous_timeout=1e300)", "ValueError", "rendezvous_timeout must be"),
        ("launch(f, rdzv_conf={'join_timeout': -1})", "ValueError", "rdzv_conf['join_timeout'] must be"),
        ("launch(f, master_addr='')", "ValueError", "master_addr must be a host name or IP address"),
        ("launch(f, master_addr=None)", "ValueError", "master_addr must be a host name or IP address"),
        ("launch(f, rdzv_endpoint='nohost')", "ValueError", "rdzv_endpoint must be 'host:port'"),
        (
            "launch(f, num_processes=10**6)",
            "ValueError",
            "num_processes=1000000 is more than 8 ranks on 2 CPUs",
        ),
        ("launch(gen)", "TypeError", "is a generator function: calling it on a rank would only create"),
        ("launch(coro)", "TypeError", "is an async def function"),
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(kernel, call, ename, words, tmp_path):
    marker = tmp_path / "ran"
    kernel.ok(f"def f(*a):\n    open({str(marker)!r}, 'w').close()")
    kernel.ok("def gen():\n    yield 1\nasync def coro():\n    pass")
    result = kernel.run(call)
    assert result.error["ename"] == ename
    assert words in result.error["evalue"]
    assert kernel.children() == []
    assert not marker.exists()  # nothing ran


def test_unpicklable_argument_under_spawn_is_named_before_any_rank_starts(kernel, tmp_path):
    marker = tmp_path / "ran"
    kernel.ok(f"def touch(arg):\n    open({str(marker)!r}, 'w').close()")
    result = kernel.run("launch(touch, args=(threading.Lock(),), num_processes=2, start_method='spawn')")
    assert result.error["ename"] == "LaunchError"
    assert result.error["evalue"].startswith("argument 0 (lock) cannot be pickled for start_method='spawn'")
    assert "use start_method='fork'" in result.error["evalue"]
    assert not marker.exists()


def test_a_fixed_port_in_use_is_a_clear_error(kernel):
    kernel.ok(
        dedent("""
        import socket
        busy = socket.socket(); busy.bind(("127.0.0.1", 0)); busy.listen()
        busy_port = busy.getsockname()[1]
    """)
    )
    result = kernel.run("launch(lambda: 0, num_processes=2, use_port=busy_port)")
    assert result.error["ename"] == "LaunchError"
    assert f"use_port={kernel.eval('busy_port')} is already in use on 127.0.0.1" in result.error["evalue"]
    kernel.ok("busy.close()")


def test_a_fixed_free_port_is_used_as_given(kernel):
    kernel.ok("from notebook_launcher.launching.ports import free_port\nport = free_port('127.0.0.1')")
    result = kernel.ok(
        "print(notebook_launcher(lambda: os.environ['MASTER_PORT'], num_processes=2, use_port=str(port)))"
    )
    assert result.stdout.strip() == str(kernel.eval("port"))


def test_a_process_group_in_the_kernel_blocks_fork_and_auto_spawns(kernel, tmp_path):
    """A real hazard: an initialized torch.distributed group in the kernel itself."""
    kernel.ok(
        dedent(f"""
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="file://{tmp_path}/store", rank=0, world_size=1)
    """)
    )
    forced = kernel.run("launch(lambda: 0, num_processes=2, start_method='fork')")
    assert forced.error["ename"] == "LaunchError"
    assert "a torch.distributed process group is initialized in this kernel" in forced.error["evalue"]
    auto = kernel.ok("job = launch(lambda: 'spawned', num_processes=2); print(job.wait(), job.plan.start_method)")
    assert auto.stdout.strip() == "spawned spawn"
    assert "workers are spawned instead of forked" in auto.stderr
    assert len(auto.stderr.strip().splitlines()) == 1
    kernel.ok("dist.destroy_process_group()")


def test_cuda_initialized_in_the_kernel_names_the_cell_and_line(kernel):
    """CUDA cannot be initialized on this CPU-only machine, so the detector's inputs are forced:
    ``torch.cuda.is_initialized`` is replaced and the site recorder (the wrapper that ``install()``
    puts around ``torch._C._cuda_init``) is called from a cell. The check, the message and the
    spawn fallback are the real ones."""
    kernel.ok(
        dedent("""
        import torch
        from notebook_launcher.devices import cuda_init_site
        fake_cuda_init = cuda_init_site.recording(lambda: None)
        real_is_initialized = torch.cuda.is_initialized
    """)
    )
    cell = kernel.ok("x = 1\nfake_cuda_init()   # stands for model.cuda()")
    kernel.ok("torch.cuda.is_initialized = lambda: True")
    try:
        forced = kernel.run("launch(lambda: 0, num_processes=2, start_method='fork')")
        assert forced.error["ename"] == "LaunchError"
        evalue = forced.error["evalue"]
        assert "CUDA was initialized in this kernel by Cell In[" in evalue
        assert "], line 2: fake_cuda_init()   # stands for model.cuda()" in evalue
        assert "start_method='spawn'" in evalue
        auto = kernel.ok("print(launch(lambda: 0, num_processes=2).wait())")
        assert auto.stdout.strip() == "0"
        assert auto.stderr.startswith("notebook_launcher: CUDA was initialized in this kernel by Cell In[")
    finally:
        kernel.ok("torch.cuda.is_initialized = real_is_initialized")
    assert cell.error is None


def test_importing_the_package_does_not_initialize_cuda_or_import_torch():
    import subprocess
    import sys

    code = (
        "import sys, notebook_launcher; print('torch' in sys.modules);"
        "import trainer_core, torch;"
        "print(torch.cuda.is_initialized(), __import__('os').environ['PYTORCH_NVML_BASED_CUDA_CHECK'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "1"]


def test_mixed_precision_is_case_insensitive_as_in_accelerate(kernel):
    kernel.ok("job = launch(lambda: os.environ['ACCELERATE_MIXED_PRECISION'], mixed_precision='BF16', display='none')")
    assert kernel.eval("job.wait(timeout=60)") == "bf16"


def test_a_bad_flush_interval_is_refused_in_the_kernel_not_in_every_rank(kernel):
    kernel.ok("os.environ['NOTEBOOK_LAUNCHER_FLUSH_INTERVAL'] = 'abc'")
    try:
        result = kernel.run("launch(lambda: 0, num_processes=2)")
    finally:
        kernel.ok("del os.environ['NOTEBOOK_LAUNCHER_FLUSH_INTERVAL']")
    assert result.error["ename"] == "ValueError"
    assert (
        "NOTEBOOK_LAUNCHER_FLUSH_INTERVAL must be a number of seconds in (0, 86400], got 'abc'"
        in result.error["evalue"]
    )
    assert kernel.children() == []


def test_a_deleted_working_directory_is_named_and_the_next_launch_works(kernel, tmp_path):
    """Every rank starts in the kernel's working directory: a deleted one was a bare FileNotFoundError
    (fork) or "the launcher failed" with a start server dying on torch's import (spawn)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    kernel.ok(f"here = os.getcwd()\nos.chdir({str(gone)!r})")
    gone.rmdir()
    try:
        for method in ("fork", "spawn"):
            result = kernel.run(f"notebook_launcher(lambda: 5, num_processes=2, start_method={method!r})")
            assert result.error["ename"] == "FileNotFoundError", result.error
            assert "the kernel's working directory was deleted" in result.error["evalue"]
            assert "os.chdir()" in result.error["evalue"]
            assert kernel.children() == []
    finally:
        kernel.ok("os.chdir(here)")
    assert kernel.eval("notebook_launcher(lambda: 5, num_processes=2)") == 5
