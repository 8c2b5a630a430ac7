"""Where ranks go and what they get, decided without starting one: environments, ports, devices."""

import pytest

from notebook_launcher.devices import CpuDevice, CudaDevice, XlaDevice
from notebook_launcher.launching.checks import check_port_number
from notebook_launcher.wire.environment import rank_environment, threads_per_rank


def test_rank_environment_for_second_node(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    env = rank_environment(
        local_rank=1,
        num_processes=4,
        node_rank=1,
        num_nodes=2,
        master_addr="10.0.0.1",
        master_port=1234,
        mixed_precision="fp16",
        device=CudaDevice(),
        threads=3,
    )
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["GROUP_RANK"]) == ("5", "8", "1", "1")
    assert "OMP_NUM_THREADS" not in env and "ACCELERATE_USE_CPU" not in env
    assert threads_per_rank(16, 3) == 5 and threads_per_rank(2, 4) == 1


def test_ranks_meet_at_a_barrier_after_init_process_group_unless_the_kernel_says_otherwise(monkeypatch):
    """Without torch's barrier a rank returning right after ``init_process_group`` can break its
    peer's gloo connections (tests/launch/test_results.py); a kernel's own setting is kept, and
    XLA ranks (who meet through torch_xla's runtime) get none."""
    monkeypatch.delenv("TORCH_DIST_INIT_BARRIER", raising=False)
    where = dict(local_rank=0, num_processes=2, node_rank=0, num_nodes=1, master_addr="127.0.0.1")
    where.update(master_port=29500, mixed_precision="no", threads=1)
    assert rank_environment(device=CpuDevice(), **where)["TORCH_DIST_INIT_BARRIER"] == "1"
    assert "TORCH_DIST_INIT_BARRIER" not in rank_environment(device=XlaDevice(), **where)
    monkeypatch.setenv("TORCH_DIST_INIT_BARRIER", "0")
    assert "TORCH_DIST_INIT_BARRIER" not in rank_environment(device=CpuDevice(), **where)


def test_port_strings_in_accelerate_style_are_accepted():
    assert check_port_number("29500") == 29500
    assert check_port_number(None) is None
    with pytest.raises(ValueError, match="got 'abc'"):
        check_port_number("abc")


def test_tpu_host_detection_looks_at_the_host_only(tmp_path):
    from notebook_launcher.devices.probe import is_tpu_host, tpu_cores, xla_platform

    nothing = str(tmp_path / "accel*")
    assert is_tpu_host({"PJRT_DEVICE": "TPU"}, nothing) and is_tpu_host({"ISTPUVM": "1"}, nothing)
    assert not is_tpu_host({}, nothing) and not is_tpu_host({"PJRT_DEVICE": "CPU"}, nothing)
    assert xla_platform({"PJRT_DEVICE": "CPU"}, nothing) == "CPU" and xla_platform({}, nothing) is None
    (tmp_path / "accel0").touch()
    assert is_tpu_host({}, str(tmp_path / "accel*"))
    assert tpu_cores({"TPU_ACCELERATOR_TYPE": "v2-8"}) == (8, "v2-8")
    assert tpu_cores({}, accel_glob=str(tmp_path / "accel*")) == (1, None)


def test_xla_process_rule_and_environment(monkeypatch):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setenv("CPU_NUM_DEVICES", "8")
    device = XlaDevice()
    assert device.check_processes(1) is None and device.check_processes(8) is None
    assert "runs either 1 process or one rank per core (8 here)" in device.check_processes(4)
    assert "more than the 8 XLA devices found" in device.check_processes(9)
    env = rank_environment(
        local_rank=0,
        num_processes=8,
        node_rank=0,
        num_nodes=1,
        master_addr="x",
        master_port=1,
        mixed_precision="bf16",
        device=device,
        threads=1,
    )
    assert "RANK" not in env and "MASTER_PORT" not in env and env["WORLD_SIZE"] == "8"


def test_devices_decide_their_start_method_and_environment():
    """The device-specific rules live on the devices: fork-or-spawn for CPUs and GPUs, fork only for XLA."""
    from notebook_launcher.errors import LaunchError

    hazard = ["CUDA was initialized in this kernel"]
    for device in (CpuDevice(), CudaDevice()):
        assert device.resolve_start_method("auto", []) == ("fork", None)
        method, notice = device.resolve_start_method("auto", hazard)
        assert method == "spawn" and "CUDA was initialized" in notice
        with pytest.raises(LaunchError, match="cannot fork this kernel"):
            device.resolve_start_method("fork", hazard)
    assert XlaDevice().resolve_start_method("auto", []) == ("xla", None)
    with pytest.raises(ValueError, match="'spawn' is not possible on XLA"):
        XlaDevice().resolve_start_method("spawn", [])
    with pytest.raises(LaunchError, match="cannot start XLA ranks"):
        XlaDevice().resolve_start_method("fork", hazard)
    assert CpuDevice().rank_environment({"RANK": "0"}) == {"RANK": "0", "ACCELERATE_USE_CPU": "true"}
    assert CudaDevice().rank_environment({"RANK": "0"}) == {"RANK": "0"}


def test_a_fixed_port_in_time_wait_is_free_to_launch_on_and_a_listening_one_is_not():
    """After a launch whose store ended its connections first, the port sits in TIME-WAIT for a
    minute: torch's store binds it again (SO_REUSEADDR), so the check must not call it in use."""
    import socket

    from notebook_launcher.errors import LaunchError
    from notebook_launcher.launching.ports import check_port_free

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    with pytest.raises(LaunchError, match=f"use_port={port} is already in use on 127.0.0.1"):
        check_port_free("127.0.0.1", port)
    served.close()  # the store's side closes first: its end of the port goes to TIME-WAIT
    client.recv(1)
    client.close()
    listener.close()
    check_port_free("127.0.0.1", port)


def test_colabs_single_tpu_chip_runs_one_rank_by_default_and_says_why_two_cannot(monkeypatch):
    """Colab's TPU runtime is one v5e chip (``TPU_ACCELERATOR_TYPE=v5litepod-1``): with no
    ``num_processes`` (and no device named) the launch plans one XLA rank; asking for two says there
    is one device. Host facts only: no TPU here, and none is needed to plan."""
    from notebook_launcher.launching.plan import make_plan

    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-1")
    plan, _ = make_plan(print, (), None)
    assert (plan.device.name, plan.num_processes, plan.start_method) == ("xla", 1, "xla")
    plan, _ = make_plan(print, (), 1, device="xla")
    assert plan.num_processes == 1
    with pytest.raises(ValueError, match="num_processes=2 is more than the 1 XLA device found; use at most 1"):
        make_plan(print, (), 2, device="xla")
