"""The sidebar's comm over kernel subshells (ipykernel ≥ 7), as a page reloaded during a launch uses
it: opened on a subshell of its own while the main shell runs a cell, it gets the kernel's state at
once (before: the open waited behind the cell); its messages are still handled on the main shell,
in order with the cells, whatever subshell they arrive on (before: on the deleted one, dropped)."""

from __future__ import annotations

import time
import uuid

TARGET = "notebook_launcher"


def test_a_sidebar_opened_on_a_subshell_during_a_cell_gets_its_state_and_its_settings_keep_their_order(
    subshell_kernel,
):
    kernel = subshell_kernel
    kernel.ok("import notebook_launcher")
    cell = kernel.submit(
        "import time\ntime.sleep(12)\nfrom notebook_launcher.frontend.settings import kernel_settings\n"
        "print('num_processes at the end of the cell:', kernel_settings().num_processes)"
    )
    subshell = kernel.control("create_subshell_request", {})["subshell_id"]
    comm = uuid.uuid4().hex
    asked = time.monotonic()
    kernel.send_shell("comm_open", {"comm_id": comm, "target_name": TARGET, "data": {"type": "get_state"}}, subshell)
    state = kernel.comm_message(comm, lambda data: data["type"] == "state", timeout=30)
    answered_after = time.monotonic() - asked
    assert state["settings"]["num_processes"] is None
    # the subshell goes (the page deletes it once answered); settings sent on another subshell (the
    # comm target's, as JupyterLab sends them) are handled on the main shell, after the cell
    kernel.control("delete_subshell_request", {"subshell_id": subshell})
    targets = kernel.control("create_subshell_request", {})["subshell_id"]
    settings = {"type": "set_settings", "request_id": "s", "settings": {"num_processes": 2}}
    kernel.send_shell("comm_msg", {"comm_id": comm, "data": settings}, targets)
    done = kernel.collect(cell, timeout=60)
    reply = kernel.comm_message(comm, lambda data: data["type"] == "reply", timeout=30)
    assert "num_processes at the end of the cell: None" in done.stdout, done.outputs
    assert reply["ok"] and reply["settings"]["num_processes"] == 2
    assert answered_after < 10, answered_after  # while the cell slept (12 s)
