"""A rank's output: file descriptors 1 and 2 become the pipes to the kernel, and Python's streams
send what they write, in order, on the rank's channel (``ordered_output``).

A captured ``print`` must cost what printing to a file costs, so ``sys.stdout``/``sys.stderr`` are
block-buffered: a line is one ``memcpy``, not one system call. Nothing is lost for it:

* a flusher thread writes what the buffers hold every ``FLUSH_INTERVAL`` seconds (the kernel's
  ``NOTEBOOK_LAUNCHER_FLUSH_INTERVAL``, read and checked there), so the cell shows output while the
  rank runs;
* the bootstrap flushes before it reports a result or an exception, and at exit;
* ``os._exit`` flushes first (``multiprocessing`` and users call it);
* SIGTERM — how the launcher ends ranks — is blocked in every thread and taken by the flusher
  thread with ``sigtimedwait``: it flushes, then lets the default action end the process, so a
  terminated rank loses no line and still ends at once, even while blocked in a collective. A
  SIGTERM the launcher did not send (another program, a memory watchdog, a neighbour) is named on
  the rank's stderr first — which process sent it — so "killed by signal SIGTERM" has a cause.

The same thread answers the kernel's request for the rank's stacks (``STACKS_SIGNAL``, blocked in
every thread as well): it sends every other thread's stack (``stacks.collect_stacks``) through the
channel, so a rank blocked in a collective can still say where it is. (A thread that unblocks it
answers from the main thread instead of dying.) Processes the rank starts get the default signal
state: nothing blocked, SIGINT a KeyboardInterrupt or its default.

Only SIGKILL (the grace period ran out, or the out-of-memory killer) loses what was printed in
the last ``FLUSH_INTERVAL``. C code writing to the descriptors (gloo, NCCL) is not buffered here.

Example (what the bootstrap does)::

    capture = Capture.install(pipes, channel)   # fds 1/2 → the pipes; sys.stdout/sys.stderr batched
    ...
    capture.flush()
"""

from __future__ import annotations

import _signal
import _thread
import fcntl
import os
import signal
import sys
import termios
import threading
import time
from typing import Any

from ..choices import FLUSH_INTERVAL
from ..wire import SIGNAL_SENDER_MARK, STACKS_SIGNAL
from .descendants import PRCTL
from .ordered_output import RankStreams

__all__ = [
    "Capture",
    "OUTPUT_THREAD",
    "WATCHED_SIGNALS",
    "flush_output",
    "before_forking_ranks",
    "wait_until_read",
]

OUTPUT_THREAD = "rank-output"  # the output thread's name (as the system shows it: /proc/<pid>/task/*/comm)
_PR_SET_NAME = 15

_real_exit = os._exit
# A forked rank calls the C module with plain ints: signal's wrappers turn every result into enum
# members, and each object a forked rank touches costs it a copy-on-write page fault.
WATCHED_SIGNALS = frozenset({int(signal.SIGTERM), int(STACKS_SIGNAL)})
_ALL_SIGNALS = frozenset(int(number) for number in signal.valid_signals())


class Capture:
    def __init__(self, launchers: frozenset[int] = frozenset(), interval: float = FLUSH_INTERVAL) -> None:
        self.launchers = launchers  # the processes whose SIGTERM is the launcher's own
        self.on_stacks_request: Any = None  # set by the bootstrap once the channel exists
        self.thread_ident: int | None = None  # the output thread's (left out of the stacks)
        self.interval = interval

    @classmethod
    def install(
        cls, pipes: Any, channel: Any, launchers: frozenset[int] = frozenset(), interval: float = FLUSH_INTERVAL
    ) -> Capture:
        """Point descriptors 1/2 at the rank's output pipes, and ``sys.stdout``/``sys.stderr`` at
        ``channel`` (batched, in the order written).

        ``launchers``: the pids whose SIGTERM ends the rank without comment (the kernel, a start server);
        ``interval``: seconds between flushes.
        """
        global _rank_streams
        capture = cls(launchers, interval)
        old = (sys.stdout, sys.stderr)
        for source, target in ((pipes.stdout, 1), (pipes.stderr, 2)):
            if source != target:
                os.dup2(source, target)
                os.close(source)
        # the rank's streams for the rest of its life: nothing to close
        streams = _take_made_streams() or RankStreams.make()
        streams.output.attach(channel)
        _rank_streams = streams
        sys.stdout, sys.stderr = streams.stdout, streams.stderr
        _repoint_logging(old)
        capture._start_flusher()
        os._exit = _flushing_exit  # type: ignore[assignment]
        return capture

    def flush(self) -> None:
        flush_output()

    def _start_flusher(self) -> None:
        if not hasattr(signal, "sigtimedwait"):  # not Linux: flush on the timer only
            threading.Thread(target=self._flush_every_interval, daemon=True, name=OUTPUT_THREAD).start()
            return
        # a thread that unblocks the stacks signal must not die of it (its default action ends the process)
        _signal.signal(int(STACKS_SIGNAL), lambda *_: self._answer_stacks())
        _signal.pthread_sigmask(_signal.SIG_BLOCK, WATCHED_SIGNALS)
        _start_children_with_default_signals()
        # A bare thread: threading's start() waits until the new thread runs, a scheduling round
        # trip (measured 0.2-0.6 ms of a busy 2-core machine) on every rank's way to the function.
        # Signals that arrive before it runs stay pending (blocked everywhere) until it takes them.
        _thread.start_new_thread(self._flush_and_watch_signals, ())

    def _answer_stacks(self) -> None:
        if self.on_stacks_request is not None:
            try:
                self.on_stacks_request()
            except Exception:  # a rank must not die of being looked at
                pass

    def _flush_every_interval(self) -> None:
        while True:
            time.sleep(self.interval)
            flush_output()

    def _flush_and_watch_signals(self) -> None:
        self.thread_ident = threading.get_ident()
        _name_this_thread(OUTPUT_THREAD)
        # Every other signal goes to the other threads: one that interrupts sigtimedwait as its
        # timeout runs out makes CPython return the siginfo it never filled in (garbage, once read
        # as a SIGTERM from process 1599919808: a subprocess's SIGCHLD under a handler did it).
        _signal.pthread_sigmask(_signal.SIG_BLOCK, _ALL_SIGNALS)
        watched = WATCHED_SIGNALS
        while True:
            received = signal.sigtimedwait(watched, self.interval)
            flush_output()
            if received is not None and received.si_signo not in watched:
                received = None  # the same garbage, should a signal still interrupt the wait
            if received is not None and received.si_signo == STACKS_SIGNAL:
                self._answer_stacks()
                continue
            if received is not None:
                if received.si_pid not in self.launchers or received.si_code not in _SENT_BY_A_PROCESS:
                    _name_the_sender(received.si_pid, received.si_code)
                # SIGTERM keeps its default action: unblocked on this thread and sent to it, it ends
                # the process with the status a terminated process has
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
                signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
                return


_SENT_BY_A_PROCESS = {0: "kill", -1: "sigqueue", -6: "tgkill"}  # si_code values whose si_pid is the sender
_OTHER_ORIGINS = {0x80: "the kernel", -2: "a POSIX timer", -3: "a message queue", -4: "async I/O", -5: "SIGIO"}


def _name_the_sender(pid: int, code: int = 0) -> None:
    """Say on the rank's stderr which process sent the SIGTERM that is about to end it (or, when
    no process sent it, what did: ``si_code``)."""
    if code not in _SENT_BY_A_PROCESS:
        origin = _OTHER_ORIGINS.get(code, "an unknown origin")
        text = f"{SIGNAL_SENDER_MARK}rank process {os.getpid()} got a SIGTERM from {origin} (si_code {code})\n"
        try:
            os.write(2, text.encode())
        except OSError:
            pass
        return
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            command = file.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        command = ""
    if pid == os.getpid():
        who = "this rank itself"
    else:
        who = f"process {pid}" + (f" ({command[:200]})" if command else " (gone already)")
        who += f" with {_SENT_BY_A_PROCESS[code]}()"
    try:
        os.write(2, f"{SIGNAL_SENDER_MARK}rank process {os.getpid()} was sent SIGTERM by {who}\n".encode())
    except OSError:
        pass


def _name_this_thread(name: str) -> None:
    """Give the calling thread its system name (``top -H``, ``py-spy`` and /proc show it)."""
    if PRCTL is not None:
        PRCTL(_PR_SET_NAME, name.encode()[:15])


def flush_output() -> None:
    """Send what ``sys.stdout`` and ``sys.stderr`` hold (and the rank's own streams, should the
    function have replaced those)."""
    streams: list[Any] = [sys.stdout, sys.stderr]
    if _rank_streams is not None:
        streams += [stream for stream in (_rank_streams.stdout, _rank_streams.stderr) if stream not in streams]
    for stream in streams:
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def wait_until_read(timeout: float = 1.0) -> None:
    """Wait (up to ``timeout`` s) until the kernel has read what this rank wrote to its output pipes.

    What C code wrote to descriptors 1 and 2 travels apart from the events, and the kernel reads
    the pipes in no fixed order; a display sent once that output has been read is shown after it.
    (Python's streams travel with the events, in order.)"""
    deadline = time.monotonic() + timeout
    for fd in (1, 2):
        while time.monotonic() < deadline:
            try:
                unread = int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)
            except OSError:  # not a pipe (a file, a terminal): nothing to wait for
                break
            if unread == 0:
                break
            time.sleep(0.0005)  # the kernel reads its pipes within a millisecond or so


def _flushing_exit(code: int) -> None:
    flush_output()
    _real_exit(code)


def _repoint_logging(old_streams: tuple) -> None:
    """Logging handlers made in the kernel hold the kernel's streams; send them to this rank's.

    Walks the handlers the kernel noted before forking (``before_forking_ranks``), else logging's
    registry of live handlers, rather than every logger: in a forked kernel each object touched
    costs a copy-on-write page fault, and a kernel with torch loaded has ~100 loggers.
    """
    logging: Any = sys.modules.get("logging")
    if logging is None:  # nothing configured logging before this rank started
        return
    new = {id(old_streams[0]): sys.stdout, id(old_streams[1]): sys.stderr}
    refs = _noted_handlers if _noted_handlers is not None else list(getattr(logging, "_handlerList", ()))
    for ref in refs:
        handler = ref()
        if isinstance(handler, logging.StreamHandler) and id(getattr(handler, "stream", None)) in new:
            # not setStream: it would flush the kernel's stream, whose copy here is not this rank's to send
            handler.stream = new[id(handler.stream)]


_noted_handlers: tuple | None = None
_made_streams: RankStreams | None = None
_rank_streams: RankStreams | None = None  # this rank's (None outside a rank)


def before_forking_ranks() -> None:
    """In the kernel, before forking ranks: what each forked rank would otherwise work out or build
    for itself, in a process where each object it touches or allocates costs a copy-on-write page
    (measured: its two streams took 0.3 ms and 85 page faults of every rank's start).

    Notes which logging handlers write to ``sys.stdout`` or ``sys.stderr`` (each rank repoints those
    without walking every handler), and makes the rank's two streams once per kernel: nothing in the
    kernel writes through them, so each rank inherits them empty.
    """
    global _made_streams
    _note_stream_handlers()
    if _made_streams is None:
        _made_streams = RankStreams.make()


def _take_made_streams() -> RankStreams | None:
    """The streams the kernel made for its ranks (``before_forking_ranks``), in a rank forked from
    it; None elsewhere. Taken once: a launch from inside this rank gets streams of its own."""
    global _made_streams
    made, _made_streams = _made_streams, None
    return made


def _note_stream_handlers() -> None:
    global _noted_handlers
    logging: Any = sys.modules.get("logging")
    if logging is None:
        _noted_handlers = None
        return
    streams = {id(sys.stdout), id(sys.stderr)}
    handlers = [(ref, ref()) for ref in list(getattr(logging, "_handlerList", ()))]
    _noted_handlers = tuple(
        ref
        for ref, handler in handlers
        if isinstance(handler, logging.StreamHandler) and id(getattr(handler, "stream", None)) in streams
    )


def _default_signals_in_child() -> None:
    """A process forked from a rank (a DataLoader worker) has no flusher and is no rank: it gets the
    default signal state, so SIGTERM and SIGINT end it as they would end any process."""
    if _in_rank and hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, STACKS_SIGNAL})
        try:
            signal.signal(STACKS_SIGNAL, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
        except ValueError:  # not the main thread of the interpreter: the mask is what matters most
            pass


_in_rank = False


def _start_children_with_default_signals() -> None:
    """Programs a rank starts (``subprocess``, multiprocessing's spawn) inherit the calling thread's
    signal mask through ``exec``, and the rank blocks SIGTERM: ``p.terminate()`` would do nothing
    and the launcher's SIGTERM would not end them. So the rank's ``fork_exec`` unblocks SIGTERM in
    the calling thread for the moment it starts a child (handlers are reset by ``exec`` anyway)."""
    global _in_rank
    _in_rank = True
    try:
        import _posixsubprocess
    except ImportError:  # not POSIX
        return
    start = _posixsubprocess.fork_exec
    if getattr(start, "_default_signals", False):
        return

    def fork_exec(*args: Any, **kwargs: Any) -> Any:
        # the stacks signal has a handler in the rank, so unblocking it for this moment is harmless;
        # a SIGTERM already waiting stays blocked here, for the flusher to take (flush, name its sender)
        unblocked = {STACKS_SIGNAL} if signal.SIGTERM in signal.sigpending() else {signal.SIGTERM, STACKS_SIGNAL}
        previous = signal.pthread_sigmask(signal.SIG_UNBLOCK, unblocked)
        try:
            return start(*args, **kwargs)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    fork_exec._default_signals = True  # type: ignore[attr-defined]
    _posixsubprocess.fork_exec = fork_exec  # multiprocessing looks it up at each call
    subprocess = sys.modules.get("subprocess")
    if subprocess is not None and getattr(subprocess, "_fork_exec", None) is start:  # imported by name
        subprocess._fork_exec = fork_exec  # type: ignore[attr-defined]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_default_signals_in_child)
