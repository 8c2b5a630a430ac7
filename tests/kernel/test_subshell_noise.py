"""A subshell deleted while requests to it are queued (what JupyterLab does when a launch's widget,
a target's last comm, closes) leaves no "Task was destroyed but it is pending!" in a cell once the
package is imported; a user's own asyncio complaint still shows. Needs ipykernel ≥ 7 (subshells)."""

from __future__ import annotations

import time

import pytest

NOISE = ("Task was destroyed but it is pending", "never retrieved", "was never awaited")


def _delete_subshells_under_requests(kernel, rounds=20, requests=20):
    """Subshells made, sent requests and deleted at once while the main shell runs a cell; the
    text of every stream message the kernel published meanwhile."""
    cell = kernel.submit("import time\ntime.sleep(3)")
    for _ in range(rounds):
        subshell = kernel.control("create_subshell_request", {})["subshell_id"]
        for _ in range(requests):
            kernel.send_shell("kernel_info_request", {}, subshell)
        kernel.control("delete_subshell_request", {"subshell_id": subshell})
    texts = []
    deadline = time.monotonic() + 60
    while True:
        msg = kernel._next_iopub(deadline, lambda: "the cell never ended")
        if msg is None:
            continue
        if msg["msg_type"] == "stream":
            texts.append(msg["content"]["text"])
        ours = msg["parent_header"].get("msg_id") == cell
        if ours and msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            collected = kernel.run("import gc; gc.collect()")  # tasks dropped but not yet collected
            return [*texts, collected.stderr]


def test_a_subshell_deleted_under_its_messages_leaves_no_asyncio_noise_in_a_cell(subshell_kernel):
    kernel = subshell_kernel
    before = _delete_subshells_under_requests(kernel)
    if not any(noise in text for text in before for noise in NOISE):
        pytest.skip("this ipykernel no longer drops a deleted subshell's messages noisily")
    kernel.ok("import notebook_launcher")
    after = _delete_subshells_under_requests(kernel)
    assert not [text for text in after if any(noise in text for noise in NOISE)], after

    own = kernel.run(  # a task of the user's own, left pending in a loop of a thread of theirs
        "import asyncio, gc, threading\n"
        "async def mine():\n    await asyncio.sleep(60)\n"
        "def leave_pending():\n"
        "    loop = asyncio.new_event_loop()\n"
        "    task = loop.create_task(mine())\n"
        "    loop.run_until_complete(asyncio.sleep(0))\n"
        "    loop.close()\n"
        "thread = threading.Thread(target=leave_pending)\n"
        "thread.start(); thread.join(); gc.collect()"
    )
    assert "Task was destroyed but it is pending" in own.stderr and "mine()" in own.stderr, own.outputs
