"""What runs inside every rank, however it was started: set up, run the function, report.

The bootstrap
1. leads a process group of its own (the kernel's interrupt no longer reaches it: the kernel stops
   the ranks itself; the processes the rank starts join its group, which is ended with it) and asks
   Linux to kill the rank if the kernel dies, so nothing is orphaned;
2. makes the pipes from the kernel its file descriptors 1 and 2 (C-level output: gloo, NCCL,
   subprocesses) and sends what ``sys.stdout`` / ``sys.stderr`` write on its channel, batched and in
   the order written, without losing a line (``capture``), so all of it arrives tagged with this rank;
3. applies the rank's environment, caps intra-op threads, and makes the notebook machinery a fork
   inherits (display, widgets, tqdm's notebook bars) safe to use (``notebook``);
4. runs ``function(*args)`` and sends back the return value, or the exception with its traceback;
5. ends the processes the function started and left running (``descendants``); the programs they
   start carry the rank's mark in their environment, by which the kernel finds those that left the
   rank's process group should the rank die first (``marked``).

Example (what a start method calls in the new process)::

    exit_code = run_rank_process(spec, pipes, load_payload=lambda: (train, (3, 1e-3)))
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..compiling.serial import compile_one_at_a_time
from ..interrupt_routing import take_own_interrupts
from ..wire import (
    ERROR,
    RESULT,
    STACKS,
    STATUS,
    ChannelWriter,
    dumps_for_kernel,
    error_report,
    set_rank_channel,
    set_tensor_prefix,
)
from ..wire.spec import RankPipes, RankSpec
from .capture import Capture, flush_output
from .containers import join as join_cgroup
from .descendants import PRCTL, become_subreaper, end_descendants
from .marked import mark_rank
from .nested_launchers import refuse_nested_launchers
from .notebook import make_safe
from .stacks import collect_stacks

__all__ = ["RankSpec", "RankPipes", "run_rank_process", "prepare_process", "run_rank"]

_PR_SET_PDEATHSIG = 1
DESCENDANTS_GRACE = 1.0  # seconds the rank's own processes get to end after SIGTERM once it is done
_SIGKILL = int(signal.SIGKILL)


def run_rank_process(spec: RankSpec, pipes: RankPipes, load_payload: Callable[[], tuple[Callable, tuple]]) -> int:
    """Run one rank to the end and return its exit code (0 with a result sent, 1 with an error sent)."""
    channel = prepare_process(spec, pipes)
    code = run_rank(channel, spec.rank, load_payload)
    end_descendants(DESCENDANTS_GRACE)
    return code


def prepare_process(spec: RankSpec, pipes: RankPipes, channel_lock: Any = None) -> ChannelWriter:
    """Set up a launched process (signals, output, environment, threads); return its channel.

    ``channel_lock`` is for processes whose forks share the channel (torch_xla's rank processes).
    """
    join_cgroup(spec.cgroup)  # first: every process the rank starts is born in it
    lead_own_group()
    # The kernel's interrupt reaches the kernel's process group, which the rank has left; a SIGINT
    # sent to the rank itself is a KeyboardInterrupt, as in a script (and the default of its children).
    take_own_interrupts()
    become_the_main_thread()
    die_with_parent(spec.parent_pid)
    become_subreaper()
    channel = ChannelWriter(pipes.events, rank=spec.rank, lock=channel_lock)
    capture = Capture.install(pipes, channel, frozenset({spec.parent_pid, spec.launcher_pid}), spec.flush_interval)
    apply_environment(spec.env, spec.encoded_env)
    compile_one_at_a_time()  # the kernel's ranks compile each graph once between them (``compiling``)
    mark_rank(spec.launcher_pid or spec.parent_pid)
    _cap_threads(spec.threads)
    _forget_accelerate_state()
    set_rank_channel(channel)
    set_tensor_prefix(spec.tensor_prefix)
    capture.on_stacks_request = lambda: channel.send(STACKS, collect_stacks(capture.thread_ident))
    make_safe(channel)
    refuse_nested_launchers()
    return channel


def run_rank(channel: ChannelWriter, rank: int, load_payload: Callable[[], tuple[Callable, tuple]]) -> int:
    """Run the function as ``rank`` and report its return value or exception; returns an exit code."""
    channel.send(STATUS, "running", rank=rank)
    pid = os.getpid()
    try:
        function, args = load_payload()
        try:
            value = function(*args)
        except SystemExit as exit_:
            if exit_.code not in (None, 0):
                raise
            value = None  # sys.exit() / sys.exit(0): a clean end, as under torchrun
        _leave_if_forked(pid, rank)
        payload = _pickle_result(value)
    except BaseException as exc:  # the rank's failure, whatever it is, goes back to the kernel
        _leave_if_forked(pid, rank)
        flush_output()
        channel.send(ERROR, _report(exc), rank=rank)
        code = 1
    else:
        flush_output()
        channel.send(RESULT, payload, rank=rank)
        code = 0
    _close_process_group()
    flush_output()
    return code


def _leave_if_forked(pid: int, rank: int) -> None:
    """A process the function forked (``os.fork()``) that returns into the launcher is not the rank:
    it must not report in the rank's name. It ends here, saying so, as its own exit."""
    if os.getpid() != pid:
        print(
            f"notebook_launcher: a process forked by rank {rank} returned from the function; it exits"
            " here (only the rank itself reports a result)",
            file=sys.stderr,
        )
        flush_output()
        os._exit(0)


def _report(exc: BaseException) -> dict:
    """The error report of ``exc``; a minimal one when the full one cannot be made."""
    try:
        return error_report(exc, skip_frame=run_rank.__code__)
    except BaseException as err:  # an exception that breaks every formatting must still be reported
        failure = _safe(repr, err)
        return {
            "type": _safe(lambda: type(exc).__qualname__),
            "message": _safe(str, exc),
            "text": f"(its traceback could not be formatted: {failure})",
        }


def _safe(make: Callable[..., Any], *args: Any) -> str:
    try:
        return str(make(*args))
    except BaseException:
        return "?"


def _pickle_result(value: Any) -> bytes:
    try:
        return dumps_for_kernel(value)
    except Exception as err:
        raise TypeError(
            f"the function's return value ({type(value).__qualname__}) cannot be sent back to"
            f" the kernel: {type(err).__name__}: {err}"
        ) from err


def lead_own_group() -> None:
    """Make this rank the leader of a process group of its own, which the processes it starts join:
    the kernel (and, if the kernel dies, its guardian) ends the whole group, so nothing the rank
    started is orphaned, whichever way the rank ends (``backends.local.guardian``)."""
    try:
        os.setpgid(0, 0)
    except OSError:  # already a group or session leader: the group is its own anyway
        pass


def become_the_main_thread() -> None:
    """The thread a rank was forked from (a daemon supervisor thread of the kernel) is the rank's
    main thread: named so, and no daemon. Threads inherit the daemon flag of the thread that makes
    them, so a thread the function starts is no daemon either, and the rank waits for it before it
    exits, as a script does (at most ``controller.EXIT_AFTER_RESULT`` seconds once every rank returned)."""
    main = threading.current_thread()
    main.name = "MainThread"
    if hasattr(main, "_daemonic"):  # CPython's flag behind ``daemon``, which a started thread refuses to change
        main._daemonic = False


def apply_environment(env: dict, encoded: tuple = ()) -> None:
    """Add ``env`` to this process's environment, as ``os.environ.update(env)`` does: for Python
    (``os.environ``) and for C code and child processes (``putenv``). ``encoded``: the same pairs as
    byte strings, made before the fork, set directly on POSIX (a third fewer page copies).

    Examples:
        >>> from notebook_launcher.wire.spec import encoded_environment
        >>> apply_environment({"EXAMPLE_RANK": "3"}, encoded_environment({"EXAMPLE_RANK": "3"}))
        >>> os.environ["EXAMPLE_RANK"], os.environb[b"EXAMPLE_RANK"]
        ('3', b'3')
        >>> del os.environ["EXAMPLE_RANK"]
    """
    data = getattr(os.environ, "_data", None)
    if not encoded or not isinstance(data, dict):
        os.environ.update(env)
        return
    for key, value in encoded:
        os.putenv(key, value)
    data.update(encoded)


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel's death kill this rank (Linux), and exit now if it already died."""
    if PRCTL is not None:
        PRCTL(_PR_SET_PDEATHSIG, _SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)


def _forget_accelerate_state() -> None:
    """Start Hugging Face Accelerate's singletons empty, as in a spawned rank or under torchrun.

    A forked rank inherits the kernel's: after any Accelerator was built in the kernel (one
    process), Accelerate's state in the rank would say one process and no process group.
    """
    state = sys.modules.get("accelerate.state")
    if state is None:
        return
    for name in ("PartialState", "AcceleratorState", "GradientState"):
        shared: Any = getattr(getattr(state, name, None), "_shared_state", None)
        if hasattr(shared, "clear"):
            shared.clear()


def _cap_threads(threads: int) -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


def _close_process_group() -> None:
    """Tear down a process group the function left open, so the rank exits without warnings."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    try:
        dist.destroy_process_group()
    except Exception:  # the rank's own outcome is already reported; this is tidying up
        pass
