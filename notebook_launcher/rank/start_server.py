"""The warm start server: a CUDA-free process with torch imported that forks spawn-path ranks.

A spawned rank is a fresh interpreter that imports torch on its own: seconds per launch, on the
path every user lands on once a cell has touched CUDA. The kernel instead starts this server once
(``python -m notebook_launcher.rank.start_server``, lazily, on the first spawn launch), which
imports torch and the rank bootstrap and never touches a device; every later spawn-path rank is a
fork of it, ready in milliseconds, with a device runtime that is still uninitialized (so CUDA works
in the rank). It is single-threaded, so forking it is safe.

The kernel talks to it over a Unix socket pair (``SOCK_SEQPACKET``: one message per request). A
request carries the rank's spec, the modules to import before forking it (Inductor, for a function
that compiles: once, and every later rank has it), the payload file, the kernel's current
environment and working directory, and four descriptors: the rank's event, stdout and stderr pipes,
and an *exit pipe*. The server forks, answers with the rank's pid, reaps the rank when it exits and
writes its exit code to the exit pipe (the kernel waits on it, as on a child of its own).

It dies with the kernel (``PR_SET_PDEATHSIG``) and ends when the kernel closes the socket; its
ranks die with it. It ignores SIGINT, as ranks do: an interrupt reaches the kernel's whole process
group, and the kernel stops ranks itself.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import pickle
import selectors
import signal
import socket
import struct
import sys
import time

PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "cloudpickle", "notebook_launcher.rank.bootstrap")
_EXIT_CODE = struct.Struct("<i")
MAX_MESSAGE = 1 << 20


def main(control_fd: int, kernel_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from .bootstrap import die_with_parent

    die_with_parent(kernel_pid)
    control = socket.socket(fileno=control_fd)
    info = _preload()
    gc.freeze()  # what it imported is never examined by a rank's collections (``backends.local.frozen_gc``)
    control.send(pickle.dumps({"ready": info}))
    Server(control).serve()


def _preload() -> dict:
    started = time.monotonic()
    loaded = _import_all(PRELOAD)
    torch = sys.modules.get("torch")
    cuda_touched = bool(torch is not None and torch.cuda.is_initialized())
    return {
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "torch": getattr(torch, "__version__", None),
        "preloaded": loaded,
        "seconds": round(time.monotonic() - started, 3),
        "cuda_initialized": cuda_touched,
    }


def _import_all(names: tuple[str, ...]) -> list[str]:
    """Import ``names`` (the ranks forked after inherit them); those imported."""
    loaded = []
    for name in names:
        try:
            __import__(name)
            loaded.append(name)
        except Exception:  # a rank imports what it needs itself if this failed
            pass
    return loaded


class Server:
    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.exit_pipes: dict[int, int] = {}  # rank pid -> write end of its exit pipe
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up byte is what matters

    def serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.control, selectors.EVENT_READ, "request")
        selector.register(self.wake_r, selectors.EVENT_READ, "child")
        while True:
            for key, _ in selector.select():
                if key.data == "child":
                    os.read(self.wake_r, 4096)
                    self._reap()
                elif not self._handle_request():
                    return  # the kernel closed the socket: its ranks end with this process

    def _handle_request(self) -> bool:
        try:
            message, fds, _flags, _address = socket.recv_fds(self.control, MAX_MESSAGE, 8)
        except OSError:
            return False
        if not message:
            for fd in fds:
                os.close(fd)
            return False
        request = pickle.loads(message)
        if len(fds) != 5:
            for fd in fds:
                os.close(fd)
            self.control.send(pickle.dumps({"error": f"a request carries 5 descriptors, not {len(fds)}"}))
            return True
        events, stdout, stderr, exit_w, payload = fds
        _import_all(request.get("preload", ()))
        try:
            pid = os.fork()
        except OSError as err:
            for fd in fds:
                os.close(fd)
            self.control.send(pickle.dumps({"error": f"fork failed: {err}"}))
            return True
        if pid == 0:
            self._become_rank(request, events, stdout, stderr, exit_w, payload)
        for fd in (events, stdout, stderr, payload):
            os.close(fd)
        self.exit_pipes[pid] = exit_w
        self.control.send(pickle.dumps({"pid": pid}))
        self._reap()  # a rank that ended at once
        return True

    def _reap(self) -> None:
        while self.exit_pipes:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            exit_w = self.exit_pipes.pop(pid, None)
            if exit_w is not None:
                try:
                    os.write(exit_w, _EXIT_CODE.pack(os.waitstatus_to_exitcode(status)))
                except OSError:  # the kernel stopped waiting (its launch ended without it)
                    pass
                os.close(exit_w)

    def _become_rank(self, request: dict, events: int, stdout: int, stderr: int, exit_w: int, payload: int) -> None:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (self.wake_r, self.wake_w, exit_w, *self.exit_pipes.values()):
                os.close(fd)
            self.control.close()
            os.environ.clear()
            os.environ.update(request["env"])
            try:
                os.chdir(request["cwd"])
            except OSError:
                pass
            from .bootstrap import RankPipes, run_rank_process
            from .spawn_main import payload_loader

            spec = dataclasses.replace(request["spec"], parent_pid=os.getppid())
            code = run_rank_process(spec, RankPipes(events, stdout, stderr), payload_loader(payload))
        except BaseException:  # before the rank's own error reporting took over: say why on its stderr
            import traceback

            text = traceback.format_exc().encode()
            for fd in (stderr, 2):  # the rank's pipe, or fd 2 once the capture moved it there
                try:
                    os.write(fd, text)
                    break
                except OSError:
                    continue
        finally:
            from .spawn_main import exit_now

            exit_now(code)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
