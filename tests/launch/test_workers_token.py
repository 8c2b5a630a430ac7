"""``%dist start`` accepts a connection only after its token, compared as bytes, and never unpickles
what a connection sends before it is a proven rank: a process of the same user that connects while
the workers start (the attacker here, a second process) must not get the kernel to run its pickle,
find the token in a file, or hold up the start by connecting and saying nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
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
    from notebook_launcher.workers.hello import send_hello
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(sys.argv[1])
    connection = Connection(sock.detach())
    send_hello(connection, bytes.fromhex(sys.argv[2]), int(sys.argv[3]), os.getpid())  # what serve() sends
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
        processes.append(subprocess.Popen([sys.executable, "-c", RANK, address, token.hex(), "0"]))
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


def test_connections_that_say_nothing_hold_up_no_worker(tmp_path):
    """Three silent connections made before the rank's: each held the start 10 s (30 s here),
    read one after another; now every hello is read as its bytes arrive."""
    address, token = str(tmp_path / "socket"), os.urandom(16)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(address)
    server.listen(8)
    silent = []
    rank = None
    try:
        for _ in range(3):
            silent.append(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            silent[-1].connect(address)
        rank = subprocess.Popen([sys.executable, "-c", RANK, address, token.hex(), "0"])
        started = time.monotonic()
        connections, pids = _accept(server, token, SimpleNamespace(done=False), 1)
        took = time.monotonic() - started
        assert pids == {0: rank.pid}
        assert took < 20.0, f"the start waited {took:.1f} s behind connections that said nothing"
        for sock in silent:  # the silent ones were closed once every rank had connected
            sock.settimeout(10)
            assert sock.recv(1) == b""
        connections[0].close()
        rank.wait(timeout=60)
    finally:
        server.close()
        for sock in silent:
            sock.close()
        if rank is not None and rank.poll() is None:
            rank.kill()
            rank.wait()


SCAN = dedent("""
    import os, sys, tempfile
    token, pids = bytes.fromhex(sys.argv[1]), sys.argv[2:]
    found = []
    root = tempfile.gettempdir()
    for folder, folders, files in os.walk(root):
        if folder.count(os.sep) - root.count(os.sep) >= 3:
            folders[:] = []
        for name in files:
            path = os.path.join(folder, name)
            try:
                if os.path.isfile(path) and os.path.getsize(path) < 64 << 20:
                    with open(path, "rb") as file:
                        if token in file.read():
                            found.append(path)
            except OSError:
                pass
    for pid in pids:
        for what in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as file:
                    data = file.read()
                if token in data or token.hex().encode() in data:
                    found.append(f"/proc/{pid}/{what}")
            except OSError:
                pass
    print(found)
""")


def test_spawned_workers_token_is_in_no_file_and_no_command_line_another_process_can_read(kernel):
    """Before, a spawn launch's payload file (``$TMPDIR/notebook-launcher-<pid>-*.pkl``, the
    workers' function and arguments, their token among them) stayed for the workers' lifetime: a
    process of the same user read it. The scan is such a process: it reads every file of the
    temporary folder and each rank's command line and environment, looking for the token's bytes."""
    kernel.ok(
        dedent("""
        import secrets
        import notebook_launcher.workers.starting as starting
        tokens = []
        class RecordingSecrets:  # only to tell the test which token to look for
            def token_bytes(self, size):
                tokens.append(secrets.token_bytes(size))
                return tokens[-1]
        starting.secrets = RecordingSecrets()
        from notebook_launcher import start_workers
        workers = start_workers(2, start_method="spawn", display="none")
        starting.secrets = secrets
        """),
        timeout=240,
    )
    try:
        token = kernel.eval("tokens[0].hex()")
        pids = [str(pid) for pid in kernel.eval("sorted(workers.pids.values())")]
        assert len(pids) == 2 and kernel.eval("workers.run(lambda: 7)") == [7, 7]
        scan = subprocess.run([sys.executable, "-c", SCAN, token, *pids], capture_output=True, text=True, timeout=120)
        assert scan.returncode == 0, scan.stderr
        assert scan.stdout.strip() == "[]", f"the token can be read at {scan.stdout.strip()}"
    finally:
        kernel.ok("workers.stop()")
