"""``%dist start`` accepts a connection only after its token, compared as bytes before anything is
unpickled: a process of the same user that connects while the workers start (the attacker here, a
second process) must not get the kernel to run its pickle."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from textwrap import dedent
from types import SimpleNamespace

from notebook_launcher.workers.starting import _accept

ATTACKER = dedent("""
    import os, pickle, socket, sys
    from multiprocessing.connection import Connection

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {sys.argv[2]}",))

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(sys.argv[1])
    connection = Connection(sock.detach())
    connection.send((Payload(), 0, os.getpid()))        # the old hello's shape, with a pickle that runs code
    connection.send_bytes(b"x" * 16)                     # then a token of the right length, the wrong bytes
    connection.recv_bytes()                              # held open until the kernel closes it
""")

RANK = dedent("""
    import os, socket, sys
    from multiprocessing.connection import Connection
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(sys.argv[1])
    connection = Connection(sock.detach())
    connection.send_bytes(bytes.fromhex(sys.argv[2]))    # what serve() sends: the token, then (rank, pid)
    connection.send((0, os.getpid()))
    connection.recv_bytes()
""")


def test_a_connection_without_the_token_is_closed_before_anything_it_sent_is_unpickled(tmp_path):
    address, marker, token = str(tmp_path / "socket"), tmp_path / "pwned", os.urandom(16)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(address)
    server.listen(8)
    accepted = []
    starting = SimpleNamespace(done=False)  # the launch whose ranks connect: still running
    accepting = threading.Thread(target=lambda: accepted.append(_accept(server, token, starting, 1)))
    accepting.start()
    processes = []
    try:
        processes.append(subprocess.Popen([sys.executable, "-c", ATTACKER, address, str(marker)]))
        assert processes[0].wait(timeout=60) != 0  # the kernel closed its connection: its recv failed
        processes.append(subprocess.Popen([sys.executable, "-c", RANK, address, token.hex()]))
        accepting.join(timeout=60)
        assert not accepting.is_alive()
        connections, pids = accepted[0]
        assert list(connections) == [0] and pids == {0: processes[1].pid}
        connections[0].close()
        processes[1].wait(timeout=60)
    finally:
        server.close()
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert not marker.exists()  # the attacker's pickle never ran in the kernel
