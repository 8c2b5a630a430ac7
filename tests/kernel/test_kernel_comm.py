"""The sidebar's kernel side, against a real kernel: state, settings, bad messages, launch updates."""

import pytest
from gates import gate_code, open_gates
from kernel_session import KernelSession

TARGET = "notebook_launcher"


def _state(kernel):
    comm = kernel.open_comm(TARGET, {"type": "get_state"})
    return comm, kernel.comm_message(comm, lambda d: d["type"] == "state")


def test_state_reports_devices_settings_and_choices(kernel):
    _comm, state = _state(kernel)
    assert state["inventory"]["cpu"]["count"] == kernel.eval("len(os.sched_getaffinity(0))")
    assert state["inventory"]["cuda"] == [] and state["inventory"]["device"] == "cpu"
    assert state["inventory"]["max_processes"] == state["inventory"]["cpu"]["count"]
    assert state["settings"] == {"num_processes": None, "start_method": "auto", "mixed_precision": "no"}
    assert state["choices"] == {"start_method": ["auto", "fork", "spawn"], "mixed_precision": ["no", "fp16", "bf16"]}
    assert kernel.eval("__import__('torch').cuda.is_initialized()") is False


def test_settings_round_trip_and_num_processes_none_uses_the_choice(kernel):
    comm, _ = _state(kernel)
    kernel.send_comm(
        comm, {"type": "set_settings", "request_id": "a", "settings": {"num_processes": 2, "mixed_precision": "bf16"}}
    )
    reply = kernel.comm_message(comm, lambda d: d["type"] == "reply")
    assert reply == {
        "type": "reply",
        "request_id": "a",
        "ok": True,
        "error": None,
        "settings": {"num_processes": 2, "start_method": "auto", "mixed_precision": "bf16"},
    }
    try:
        result = kernel.ok(
            "print(launch(lambda: (os.environ['WORLD_SIZE'], os.environ['ACCELERATE_MIXED_PRECISION'])).wait())"
        )
        assert result.stdout.strip() == "('2', 'bf16')"
    finally:
        kernel.send_comm(
            comm,
            {"type": "set_settings", "request_id": "b", "settings": {"num_processes": None, "mixed_precision": "no"}},
        )
        assert kernel.comm_message(comm, lambda d: d["type"] == "reply")["ok"] is True


@pytest.mark.parametrize(
    "message, error",
    [
        (
            {"type": "set_settings", "request_id": "x", "settings": {"num_processes": 99}},
            "num_processes must be an int from 1 to {max} (the devices found), or None; got 99",
        ),
        (
            {"type": "set_settings", "request_id": "x", "settings": {"num_processes": 2, "start_method": "thread"}},
            "start_method='thread' is not valid; use one of 'auto', 'fork', 'spawn'",
        ),
        (
            {"type": "set_settings", "request_id": "x", "settings": {"code": "import os; os.remove('x')"}},
            "unknown settings ['code']",
        ),
        ({"type": "set_settings", "request_id": "x", "settings": "2"}, "settings must be an object, got str"),
        ({"type": "execute", "request_id": "x", "code": "print(1)"}, "unknown message type 'execute'"),
    ],
)
def test_bad_messages_get_an_error_and_change_nothing(kernel, message, error):
    comm, before = _state(kernel)
    kernel.send_comm(comm, message)
    reply = kernel.comm_message(comm, lambda d: d["type"] == "reply")
    assert reply["ok"] is False and error.format(max=before["inventory"]["max_processes"]) in reply["error"]
    assert reply["settings"] == before["settings"]  # all-or-nothing: num_processes=2 was not applied


def test_launches_stream_updates_while_they_run(kernel, tmp_path):
    comm, _ = _state(kernel)
    kernel.ok(gate_code(tmp_path))
    kernel.ok("job = launch(wait_at_gate, num_processes=2, display='none')")
    job_id = kernel.eval("job.id")
    running = kernel.comm_message(comm, lambda d: d["type"] == "launch" and d["launch"]["status"] == "running")
    assert running["launch"]["id"] == job_id and running["launch"]["ranks"] == [0, 1]
    open_gates(tmp_path, [0, 1])
    done = kernel.comm_message(comm, lambda d: d["type"] == "launch" and d["launch"]["status"] == "succeeded")
    assert done["launch"]["rank_status"] == {"0": "done", "1": "done"}
    kernel.ok("job.wait()")
    _, state = _state(kernel)
    assert job_id in [launch["id"] for launch in state["launches"]]


def test_a_kernel_without_the_package_closes_the_comm_until_load_ext():
    session = KernelSession()
    try:
        comm = session.open_comm(TARGET, {"type": "get_state"})
        assert session.comm_message(comm) is None  # no such target: the kernel closes the comm
        session.ok("%load_ext notebook_launcher")
        comm = session.open_comm(TARGET, {"type": "get_state"})
        assert session.comm_message(comm)["type"] == "state"
    finally:
        session.shutdown()


def test_device_picker_and_set_defaults_change_what_launches_use(kernel):
    """For Colab, Kaggle and VS Code, which have no sidebar; called as the README writes it."""
    result = kernel.ok(
        "from notebook_launcher import notebook_launcher, kernel_settings\nnotebook_launcher.device_picker()"
    )
    assert len([out for out in result.outputs if "display" in out]) == 1  # shown once, not twice
    kernel.ok("picker = __import__('notebook_launcher').device_picker()")
    assert kernel.eval("picker.fields['num_processes'].value") == "default"  # not blank
    assert kernel.eval("picker.fields['num_processes'].label") == "default (1)"
    try:
        kernel.ok("picker.fields['num_processes'].value = '2'\npicker.fields['mixed_precision'].value = 'bf16'")
        assert kernel.eval("kernel_settings().as_dict()") == {
            "num_processes": 2,
            "start_method": "auto",
            "mixed_precision": "bf16",
        }
        assert kernel.ok("print(launch(lambda: os.environ['WORLD_SIZE']).wait())").stdout.strip() == "2"
        error = kernel.run("notebook_launcher.set_defaults(num_processes=64)").error
        assert error["ename"] == "ValueError" and "num_processes must be an int from 1 to" in error["evalue"]
        assert kernel.eval("kernel_settings().num_processes") == 2
    finally:
        kernel.ok("notebook_launcher.set_defaults(num_processes=None, mixed_precision='no')")


def test_the_device_picker_follows_the_sidebar_and_set_defaults(kernel):
    """Sidebar → picker as well as picker → settings: the dropdowns show what launches will use."""
    kernel.ok("picker = __import__('notebook_launcher').device_picker()")
    comm, _ = _state(kernel)
    try:
        kernel.send_comm(comm, {"type": "set_settings", "request_id": "p", "settings": {"mixed_precision": "fp16"}})
        assert kernel.comm_message(comm, lambda d: d["type"] == "reply")["ok"] is True
        kernel.ok("from notebook_launcher import set_defaults\nset_defaults(num_processes=1, start_method='spawn')")
        values = "{name: field.value for name, field in picker.fields.items()}"
        assert kernel.eval(values) == {"num_processes": "1", "start_method": "spawn", "mixed_precision": "fp16"}
        kernel.ok("picker.widget.close()\nset_defaults(num_processes=None)")  # a closed picker lets go
        assert kernel.eval("picker.fields['num_processes'].value") == "1"
    finally:
        kernel.ok("set_defaults(num_processes=None, start_method='auto', mixed_precision='no')")


def test_importing_the_package_greets_the_front_end():
    """An open sidebar connects by itself: the kernel opens a comm to it when the package is imported."""
    session = KernelSession()
    try:
        session.ok("import notebook_launcher")
        assert session.comm_opened(TARGET) == {"type": "hello"}
        assert session.eval("'torch' in __import__('sys').modules") is False
    finally:
        session.shutdown()


def test_importing_trainer_core_alone_sets_nothing_up_in_the_kernel():
    """trainer_core is a library: importing it (and making an Accelerator) opens no comm, registers no
    magics and starts no warm-up; the launcher's own import still does all three afterwards."""
    session = KernelSession()
    try:
        session.ok("import threading, trainer_core\naccelerator = trainer_core.Accelerator()")
        state = (
            "([name for name in get_ipython().magics_manager.magics['line'] if name == 'dist'],"
            " 'notebook-launcher-warmup' in [t.name for t in threading.enumerate()])"
        )
        assert session.eval(state) == ([], False)
        assert session.comms_opened_so_far(TARGET) == []
        session.ok("from notebook_launcher import notebook_launcher")
        assert session.comm_opened(TARGET) == {"type": "hello"}
        assert session.eval(state)[0] == ["dist"]
    finally:
        session.shutdown()


def test_settings_changed_from_code_are_pushed_to_the_sidebar(kernel):
    comm, _ = _state(kernel)
    kernel.ok("from notebook_launcher import set_defaults\nset_defaults(start_method='spawn')")
    try:
        pushed = kernel.comm_message(comm, lambda d: d["type"] == "settings")
        assert pushed["settings"]["start_method"] == "spawn"
    finally:
        kernel.ok("set_defaults(start_method='auto')")


def test_sidebar_stop_ends_a_background_launch_and_names_its_cell(kernel):
    """After ``job = launch(...)`` returned, the kernel is idle: the sidebar's Stop is a comm request."""
    comm, _ = _state(kernel)
    kernel.ok("job = launch(lambda: threading.Event().wait(), num_processes=2, display='none')")
    cell = kernel.eval("job.cell")
    assert cell == kernel.eval("get_ipython().execution_count") - 3  # the launching cell; two eval cells since
    running = kernel.comm_message(comm, lambda d: d["type"] == "launch" and d["launch"]["status"] == "running")
    assert running["launch"]["cell"] == cell and running["launch"]["waited_on"] is False
    kernel.send_comm(comm, {"type": "stop_launch", "request_id": "s", "id": running["launch"]["id"]})
    assert kernel.comm_message(comm, lambda d: d["type"] == "reply")["ok"] is True
    kernel.comm_message(comm, lambda d: d["type"] == "launch" and d["launch"]["status"] == "stopped")
    assert kernel.eval("(job.done, job.status)") == (True, "stopped")
    assert kernel.children() == []
    kernel.send_comm(comm, {"type": "stop_launch", "request_id": "t", "id": "nope"})
    reply = kernel.comm_message(comm, lambda d: d["type"] == "reply")
    assert reply["ok"] is False and "no running launch with id 'nope'" in reply["error"]


def test_a_reloaded_page_replaces_its_earlier_sidebar_even_when_its_close_was_lost():
    """A page closes its comm as it goes, but under load its connection can end before that close
    is sent: the kernel then sent every update to the gone page until it went silent (seen as
    "sidebars: 2" in the browser reload test). The sidebar names its page (kept across reloads);
    a new comm of the same page replaces the earlier one, another page's is kept."""
    session = KernelSession()
    try:
        session.ok("import notebook_launcher")
        first = session.open_comm(TARGET, {"type": "get_state", "page": "tab-1"})
        assert session.comm_message(first, lambda d: d["type"] == "state")
        other = session.open_comm(TARGET, {"type": "get_state", "page": "tab-2"})
        assert session.comm_message(other, lambda d: d["type"] == "state")
        again = session.open_comm(TARGET, {"type": "get_state", "page": "tab-1"})  # tab 1 reloaded
        assert session.comm_message(first) is None  # the kernel closed the gone page's comm first
        assert session.comm_message(again, lambda d: d["type"] == "state")
        count = "__import__('notebook_launcher.frontend.sidebar_comm').frontend.sidebar_comm.open_sidebars()"
        assert session.eval(count) == 2
        session.send_comm(other, {"type": "alive"})
        session.ok("notebook_launcher.set_defaults(num_processes=1)")
        assert session.comm_message(other, lambda d: d["type"] == "settings")  # tab 2 still hears
    finally:
        session.shutdown()


def test_a_sidebar_is_still_sent_to_after_a_cell_blocked_past_its_silence_limit(kernel):
    """The sidebar's "alive" messages wait behind a cell that blocks on a launch (they are handled
    on the main shell): the kernel does not count that as silence. Before, every sidebar was
    dropped 90 s into such a launch (here the limit is 1 s and the launch takes 3)."""
    kernel.ok("import notebook_launcher.frontend.sidebar_comm as sidebar_comm\nsidebar_comm.SILENT_AFTER = 1.0")
    try:
        comm, _ = _state(kernel)
        kernel.send_comm(comm, {"type": "alive"})
        kernel.ok("pass")  # heard: the alive message was handled before this cell
        kernel.ok("notebook_launcher(lambda: time.sleep(3), num_processes=1, display='none')")
        done = kernel.comm_message(comm, lambda d: d["type"] == "launch" and d["launch"]["status"] == "succeeded")
        assert done is not None, "the kernel closed the sidebar's comm while the cell blocked"
    finally:
        kernel.ok("sidebar_comm.SILENT_AFTER = 90.0")
