"""The supervisor: one thread per launch that starts the ranks, reads them, and ends them.

One loop waits on every rank's pipes and exit descriptor (and a wake-up pipe for ``stop()``):

* output and events are read without blocking and handed to the record and the view;
* the first failure (an exception, a death, an exit without a result) or a stop request ends the
  launch: every rank still alive, and every process it started, gets SIGTERM, then SIGKILL after
  the grace period — a rank stuck in a collective cannot hold the cell;
* when every rank has ended, its pipes are drained (what it wrote before dying is kept), every
  descriptor is closed and every process reaped. Nothing outlives the launch.

Ranks are started from this thread, not the caller's: Linux's parent-death signal (set in each
rank) fires when the *thread* that started the rank ends, and supervisor threads never end (they
are reused, see ``threads``). The loop runs in a copy of the caller's context so that output
reaches the launching cell.
"""

from __future__ import annotations

import contextvars
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import wait

import psutil

from ..wire import DISPLAY, ERROR, METRIC, OUTPUT, RESULT, STATUS, FrameReader, LineReader
from ..errors import LaunchError, WorkerError, describe_exit, rebuild_exception
from .threads import run_in_thread
from ..frontend.views.base import display_text
from ..rank.bootstrap import WorkerPipes, WorkerSpec

__all__ = ["Supervisor"]

_START_LOCK = threading.Lock()  # a fork must not copy another launch's half-made pipes
_READ_LIMIT = 1 << 20  # bytes read from one pipe per round, so one chatty rank cannot starve the rest
_EXIT_AFTER_RESULT = 10.0  # seconds a rank that returned may take to exit before it is ended


class _Worker:
    """The kernel's side of one started process: its pipe read ends, their decoders, and the ranks
    it carries (one under fork and spawn; every local rank for a torch_xla host). Output on its
    file descriptors belongs to its first rank; events name their own rank."""

    def __init__(self, ranks, process, pipes):
        self.ranks = ranks
        self.rank = ranks[0]
        self.process = process
        self.pipes = {"events": pipes.events, "stdout": pipes.stdout, "stderr": pipes.stderr}
        self.frames = FrameReader()
        self.lines = {"stdout": LineReader(), "stderr": LineReader()}
        self.exitcode = None
        self.exited = False
        self.signalled = False


class Supervisor:
    """Runs one launch on its own thread; see the module docstring."""

    def __init__(self, plan, starter, record, view, launch):
        self._plan = plan
        self._starter = starter
        self._record = record
        self.view = view
        self._launch = launch
        self._workers = []
        self._reported = set()  # ranks that sent a result or an error
        self._watch = {}
        self._doomed = []
        self._terminating = False
        self._kill_at = None
        self._stop_requested = False
        self._wake_r, self._wake_w = os.pipe()
        self._done = threading.Event()

    def start(self):
        context = contextvars.copy_context()
        run_in_thread(lambda: context.run(self._run))

    def request_stop(self):
        """Ask the loop to end every rank; returns at once."""
        if self._done.is_set():
            return
        self._stop_requested = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:  # the loop already closed the pipe: it is finishing anyway
            pass

    def join(self, timeout=None):
        """Wait until the launch has ended and everything is cleaned up; False on timeout."""
        return self._done.wait(timeout)

    # -- the thread ---------------------------------------------------------------------------

    def _run(self):
        try:
            self._start_ranks()
            self._loop()
        except BaseException as exc:  # a launcher fault must still end the ranks and reach the user
            error = LaunchError(f"the launcher failed: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            self._record.add_failure(None, error, time.time())
        finally:
            self._shutdown()

    def _start_ranks(self):
        plan = self._plan
        self._watch[self._wake_r] = (None, "wake")
        for group in self._starter.groups(plan):
            if self._stop_requested:
                break
            specs = [WorkerSpec(plan.global_rank(local), local, plan.environment(local), os.getpid(), plan.threads)
                     for local in group]
            with _START_LOCK:
                ours, theirs = _make_pipes()
                try:
                    process = self._starter.start(plan, specs, theirs)
                except BaseException:
                    _close_all(ours)
                    raise
                finally:
                    _close_all(theirs)
            worker = _Worker([spec.rank for spec in specs], process, ours)
            self._workers.append(worker)
            for kind, fd in worker.pipes.items():
                self._watch[fd] = (worker, kind)
            self._watch[process.sentinel] = (worker, "exit")
        if self._stop_requested:
            self._record.mark_stopped()
            self._terminate()

    def _loop(self):
        refresh = None
        while any(not worker.exited for worker in self._workers):
            deadlines = [d for d in (self._kill_at, refresh) if d is not None]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            for fd in wait(list(self._watch), timeout):
                if fd in self._watch:
                    self._handle(fd, *self._watch[fd])
            if self._kill_at is not None and time.monotonic() >= self._kill_at:
                self._kill_remaining()
            delay = self._notify("flush")
            refresh = None if delay is None else time.monotonic() + delay

    def _handle(self, fd, worker, kind):
        if kind == "wake":
            os.read(fd, 64)
            self._record.mark_stopped()
            self._terminate()
        elif kind == "exit":
            self._on_exit(worker)
        else:
            self._read(worker, kind, drain=False)

    # -- reading --------------------------------------------------------------------------------

    def _read(self, worker, kind, drain):
        fd = worker.pipes.get(kind)
        if fd is None:
            return
        total = 0
        while drain or total < _READ_LIMIT:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                self._close_pipe(worker, kind)
                return
            total += len(chunk)
            self._consume(worker, kind, chunk)

    def _consume(self, worker, kind, chunk):
        if kind == "events":
            for event in worker.frames.feed(chunk):
                self._on_event(worker, *event)
        else:
            reader = worker.lines[kind]
            for line in reader.feed(chunk):
                self._on_line(worker, kind, line)
            self._notify("on_live", worker.rank, kind, reader.live)

    def _close_pipe(self, worker, kind):
        fd = worker.pipes.pop(kind)
        self._watch.pop(fd, None)
        os.close(fd)
        if kind != "events":
            for line in worker.lines[kind].finish():
                self._on_line(worker, kind, line)

    def _on_line(self, worker, stream, text):
        self._record.add_output(worker.rank, stream, text)
        self._notify("on_output", worker.rank, stream, text)

    def _on_event(self, worker, kind, payload, when, rank):
        rank = worker.rank if rank is None else rank
        if kind == STATUS:
            self._record.set_rank_status(rank, payload)
            self._notify("on_status", rank, payload)
        elif kind == OUTPUT:
            stream, text = payload
            self._record.add_output(rank, stream, text)
            self._notify("on_output", rank, stream, text)
        elif kind == METRIC:
            self._record.add_metric(rank, payload, when)
            self._notify("on_metric", rank, payload)
        elif kind == DISPLAY:
            self._record.add_output(rank, "stdout", display_text(payload))
            self._notify("on_display", rank, payload)
        elif kind == RESULT:
            self._reported.add(rank)
            self._on_result(rank, payload, when)
        elif kind == ERROR:
            self._reported.add(rank)
            self._fail(rank, rebuild_exception(rank, payload), when)

    def _on_result(self, rank, payload, when):
        try:
            value = pickle.loads(payload)
        except Exception as err:
            self._fail(rank, WorkerError(rank, f"rank {rank}'s return value could not be unpickled in"
                                               f" the kernel: {type(err).__name__}: {err}"), when)
            return
        self._record.add_result(rank, value)
        self._notify("on_status", rank, "done")
        if len(self._reported) == self._plan.num_processes and self._kill_at is None:
            self._kill_at = time.monotonic() + max(self._plan.grace_period, _EXIT_AFTER_RESULT)

    def _on_exit(self, worker):
        worker.exitcode = worker.process.wait()
        worker.exited = True
        self._watch.pop(worker.process.sentinel, None)
        for kind in list(worker.pipes):
            self._read(worker, kind, drain=True)
        for kind in list(worker.pipes):
            self._close_pipe(worker, kind)
        for rank in worker.ranks:
            if rank in self._reported:
                continue
            if worker.signalled:
                self._record.set_rank_status(rank, "stopped")
                self._notify("on_status", rank, "stopped")
            else:
                message = describe_exit(rank, worker.exitcode)
                self._fail(rank, WorkerError(rank, message, exitcode=worker.exitcode), time.time())

    def _fail(self, rank, exception, when):
        self._record.add_failure(rank, exception, when)
        self._notify("on_status", rank, "failed")
        self._terminate()

    # -- ending -----------------------------------------------------------------------------------

    def _terminate(self):
        """SIGTERM every live rank and its descendants now; SIGKILL whatever is left after the grace."""
        if self._terminating:
            return
        self._terminating = True
        for worker in self._workers:
            if worker.exited:
                continue
            worker.signalled = True
            tree = _process_tree(worker.process.pid)
            self._doomed.extend(tree)
            for process in tree:
                _signal(process, signal.SIGTERM)
        self._kill_at = time.monotonic() + self._plan.grace_period

    def _kill_remaining(self):
        for worker in self._workers:
            if not worker.exited:
                worker.signalled = True
                self._doomed.extend(_process_tree(worker.process.pid))
        for process in self._doomed:
            _signal(process, signal.SIGKILL)
        self._kill_at = None

    def _shutdown(self):
        try:
            if any(not worker.exited for worker in self._workers):
                self._terminate()
                self._finish_exits()
            self._end_stragglers()
            for worker in self._workers:
                for kind in list(worker.pipes):
                    self._read(worker, kind, drain=True)
                    if kind in worker.pipes:
                        self._close_pipe(worker, kind)
                worker.process.release()
        finally:
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._starter.cleanup()
            self._record.finish()
            self._notify("flush")
            self._notify("on_finish", self._launch)
            self._done.set()

    def _finish_exits(self):
        """After a launcher fault: wait for the signalled ranks (bounded), then kill what is left."""
        for worker in self._workers:
            if worker.exited:
                continue
            if worker.process.wait(max(0.0, self._kill_at - time.monotonic())) is None:
                self._kill_remaining()
                worker.process.wait()
            worker.exited = True

    def _end_stragglers(self):
        """Descendants of ranks that were signalled must not survive their rank."""
        alive = [process for process in self._doomed if _running(process)]
        if alive:
            _, alive = psutil.wait_procs(alive, timeout=self._plan.grace_period)
            for process in alive:
                _signal(process, signal.SIGKILL)
            psutil.wait_procs(alive, timeout=5)

    def _notify(self, method, *args):
        try:
            return getattr(self.view, method)(*args)
        except Exception:  # a broken view must not stop the supervision of the ranks
            traceback.print_exc(file=sys.__stderr__)
            return None


def _make_pipes():
    """Three pipes for one rank: (kernel read ends, rank write ends)."""
    ends = [os.pipe() for _ in range(3)]
    for read_end, _ in ends:
        os.set_blocking(read_end, False)
    ours = WorkerPipes(*(read_end for read_end, _ in ends))
    theirs = WorkerPipes(*(write_end for _, write_end in ends))
    return ours, theirs


def _close_all(pipes):
    for fd in (pipes.events, pipes.stdout, pipes.stderr):
        try:
            os.close(fd)
        except OSError:
            pass


def _process_tree(pid):
    try:
        root = psutil.Process(pid)
        return [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _signal(process, signum):
    try:
        process.send_signal(signum)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass


def _running(process):
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
