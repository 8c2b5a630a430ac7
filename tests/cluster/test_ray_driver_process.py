"""The kernel's Ray driver process (``backends/ray/driver_process.py``) on its own: what the kernel is
told when it cannot connect, and that nothing of it is left behind.

The "head" here is a listening socket that never answers Ray: the driver process waits on it as on
a hung head, so the tests decide how the wait ends.
"""

from __future__ import annotations

import socket
import threading
import time

import psutil
import pytest

pytest.importorskip("ray")

from notebook_launcher.backends.ray.driver_process import DriverEnded, DriverProcess


@pytest.fixture
def silent_head():
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"127.0.0.1:{server.getsockname()[1]}"


def _driver_children():
    return [
        child
        for child in psutil.Process().children()
        if child.is_running() and any(part.endswith("driver_main.py") for part in child.cmdline())
    ]


def _started(timeout=60.0):
    deadline = time.monotonic() + timeout
    while not (found := _driver_children()):
        assert time.monotonic() < deadline, "the driver process never started"
        time.sleep(0.02)  # a poll of another process's start, bounded by the deadline
    return found[0]


def test_a_head_lost_while_the_driver_connects_ends_the_wait_and_the_process(silent_head):
    told = threading.Event()
    result = {}

    def start():
        try:
            DriverProcess.start(silent_head, timeout=120, lost=lambda: "the head is gone" if told.is_set() else None)
        except DriverEnded as err:
            result["error"] = str(err)

    starting = threading.Thread(target=start)
    starting.start()
    driver = _started()
    told.set()
    starting.join(10)
    assert not starting.is_alive()
    assert result["error"] == "the head is gone"
    assert not driver.is_running() or driver.status() == psutil.STATUS_ZOMBIE


def test_a_driver_process_that_dies_while_connecting_is_said_with_how_it_ended(silent_head):
    result = {}

    def start():
        try:
            DriverProcess.start(silent_head, timeout=120)
        except DriverEnded as err:
            result["error"] = str(err)

    starting = threading.Thread(target=start)
    starting.start()
    _started().kill()  # as Ray's own end of a driver that lost its head
    starting.join(30)
    assert not starting.is_alive()
    assert result["error"].startswith("Ray's driver process ended (killed by signal 9) while it connected")
    assert not _driver_children()


def test_a_driver_that_does_not_connect_in_time_is_ended(silent_head):
    with pytest.raises(DriverEnded, match=r"did not connect within 3 s"):
        DriverProcess.start(silent_head, timeout=3)
    assert not _driver_children()
