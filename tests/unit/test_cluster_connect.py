"""Connecting the kernel to a Ray cluster through Ray Client: the head's server for this client
failing to start (a Ray flake seen on loaded CI machines) is tried again, anything else is said at once.

Ray itself is stood in for here: the flake cannot be caused on demand. The real connection is
tested in test_ray_cluster.py."""

from __future__ import annotations

import socket

import pytest

from notebook_launcher.backends.ray import connect as connecting
from notebook_launcher.errors import LaunchError


class FlakyRay:
    """``ray.init`` failing with the given errors first, as Ray Client reports them, then connecting."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.tries = 0

    def is_initialized(self) -> bool:
        return False

    def init(self, **_):
        self.tries += 1
        if self.failures:
            raise self.failures.pop(0)


@pytest.fixture
def head(monkeypatch):
    """A listening address, so the check that something answers passes; the module's state restored."""
    monkeypatch.setattr(connecting, "connected_address", "")
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"ray://127.0.0.1:{server.getsockname()[1]}"


def server_failed(port: int) -> ConnectionAbortedError:
    return ConnectionAbortedError(
        "Initialization failure from server:\nRuntimeError: Starting Ray client server failed. See"
        f" ray_client_server_{port}.err for detailed logs."
    )


def test_a_client_server_that_failed_to_start_is_tried_again(head, monkeypatch):
    ray = FlakyRay(server_failed(23000), server_failed(23001))
    monkeypatch.setattr(connecting, "import_ray", lambda: ray)
    assert connecting.connect(head) is ray
    assert ray.tries == 3 and connecting.connected_address == head


def test_a_client_server_that_died_before_the_head_looked_at_it_is_tried_again(head, monkeypatch):
    zombie = ConnectionAbortedError(
        'Initialization failure from server:\nTraceback (most recent call last):\n  File ".../proxier.py",'
        " line 396, in start_specific_server\n    cmd = psutil_proc.cmdline()\npsutil.ZombieProcess: PID still"
        " exists but it's a zombie (pid=5525)"
    )
    ray = FlakyRay(zombie)
    monkeypatch.setattr(connecting, "import_ray", lambda: ray)
    assert connecting.connect(head) is ray and ray.tries == 2


def test_a_client_server_that_keeps_failing_is_a_clear_error(head, monkeypatch):
    ray = FlakyRay(*(server_failed(23000 + n) for n in range(5)))
    monkeypatch.setattr(connecting, "import_ray", lambda: ray)
    refused = r"(?s)could be reached at 'ray://[\d.:]+' \(3 tries\): .*Starting Ray client server"
    with pytest.raises(LaunchError, match=refused):
        connecting.connect(head)
    assert ray.tries == connecting.CLIENT_ATTEMPTS


def test_other_failures_are_not_tried_again(head, monkeypatch):
    ray = FlakyRay(RuntimeError("Version mismatch: the client runs Python 3.11, the server 3.12"))
    monkeypatch.setattr(connecting, "import_ray", lambda: ray)
    with pytest.raises(LaunchError, match="Version mismatch"):
        connecting.connect(head)
    assert ray.tries == 1
