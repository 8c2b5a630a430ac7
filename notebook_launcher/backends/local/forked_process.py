"""A process forked with ``os.fork``, set up as multiprocessing sets up its own children.

A rank used to be a ``multiprocessing`` fork process. Its process object, start and bootstrap cost a
2-rank launch about 450 copy-on-write page faults between the kernel and the ranks (~7 µs each on
a virtual machine): the object and its finalizer made and later reaped in the kernel, a second pipe
per rank, and in the rank its own process object, parent handle and start-method switch. Here the
kernel forks directly, and the child does, with multiprocessing's own functions, what
multiprocessing's bootstrap does to the interpreter that matters to the code it runs: the kernel's
after-fork callbacks (locks, queues and proxies the child inherited), an empty list of children,
stdin reading /dev/null; and at its end what a multiprocessing child does before it exits: waits for
the threads that are not daemons, runs multiprocessing's finalizers (pools, queues the function
made) and flushes the standard streams. One difference, on purpose: the child is its own main
process, as a rank is under torchrun (``multiprocessing.current_process().name == "MainProcess"``,
``multiprocessing.parent_process() is None``).

Example (what ``fork_rank_process`` does)::

    process = fork_process(_fork_main, (spec, pipes, function, args, global_state))
    process.wait(timeout=1.0)  # its exit code, or None while it runs
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing.process as mp_process
import multiprocessing.util as mp_util
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from ...wire.readiness import wait_readable
from .base import StartedProcess, _open_pidfd

__all__ = ["fork_process", "ForkedProcess"]


def fork_process(target: Callable[..., int], args: tuple) -> ForkedProcess:
    """Fork a process that runs ``target(*args)`` and exits with the code it returns (or with the
    code of the ``SystemExit`` it raises; 1 for any other exception, printed on its stderr)."""
    sentinel = None if _pidfds_work() else os.pipe()  # without pidfds: readable once the child exits
    pid = os.fork()
    if pid == 0:
        if sentinel is not None:
            os.close(sentinel[0])
        _run_child(target, args)  # never returns
    if sentinel is not None:
        os.close(sentinel[1])
    return ForkedProcess(pid, sentinel[0] if sentinel is not None else -1)


class ForkedProcess(StartedProcess):
    """A child forked by ``fork_process``: waited on through its pidfd (or its sentinel pipe)."""

    def __init__(self, pid: int, fallback_sentinel: int) -> None:
        super().__init__(pid, fallback_sentinel)
        self._fallback = fallback_sentinel
        self.exitcode: int | None = None

    def wait(self, timeout: float | None = None) -> int | None:
        if self.exitcode is not None:
            return self.exitcode
        if timeout is not None and not wait_readable([self.sentinel], timeout):
            return None
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG if timeout is not None else 0)
        except ChildProcessError:  # reaped by someone else (a waitpid(-1) in the kernel): unknown
            self.exitcode = 255
            return self.exitcode
        if pid == 0:  # the sentinel pipe closed early: a process the child started still holds it
            return None
        self.exitcode = os.waitstatus_to_exitcode(status)
        return self.exitcode

    def release(self) -> None:
        self.wait()
        if self._fallback >= 0:
            os.close(self._fallback)
            self._fallback = -1
        super().release()


def _run_child(target: Callable[..., int], args: tuple) -> None:
    code = 1
    try:
        _start_as_a_child()
        code = target(*args)
    except SystemExit as exit_:
        code = _exit_code(exit_.code)
    except BaseException:  # the target's own failure, reported where a multiprocessing child reports it
        traceback.print_exc()
    finally:
        try:
            _end_as_a_child()
        finally:
            os._exit(code)


def _start_as_a_child() -> None:
    mp_process._children = set()  # type: ignore[attr-defined]  # the kernel's children are not this process's
    mp_process._process_counter = itertools.count(1)  # type: ignore[attr-defined]
    mp_process.BaseProcess._after_fork()  # type: ignore[attr-defined]  # finalizers cleared, after-fork callbacks run
    _stdin_from_devnull()


def _stdin_from_devnull() -> None:
    """Descriptor 0 reads /dev/null, as in a multiprocessing child: a read of stdin ends at once
    instead of waiting on the kernel's. The kernel's ``sys.stdin`` (descriptor 0) is kept: a new
    stream object would cost the child ~50 copied pages."""
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return
    if devnull != 0:
        os.dup2(devnull, 0)
        os.close(devnull)


def _end_as_a_child() -> None:
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # as an interpreter's end: the threads that are not daemons
        mp_util._exit_function()  # type: ignore[attr-defined]
    finally:
        mp_util._flush_std_streams()  # type: ignore[attr-defined]


def _exit_code(code: Any) -> int:
    """The exit status ``sys.exit(code)`` gives a process."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(str(code) + "\n")
    return 1


@functools.cache
def _pidfds_work() -> bool:
    """Whether this system has pidfds (Linux 5.3 and later); asked once."""
    pidfd = _open_pidfd(os.getpid())
    if pidfd is None:
        return False
    os.close(pidfd)
    return True
