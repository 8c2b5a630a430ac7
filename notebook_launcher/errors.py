"""The error types a launch can raise, each its own type so it can be caught.

Three kinds of failure reach the user:

* ``LaunchError`` — the launcher refused or could not start (fork unsafe, an argument that cannot be
  pickled, a fixed port in use). Nothing ran.
* the rank's own exception — rebuilt as the same type, its message prefixed with the rank and the
  rank's traceback attached as ``__cause__`` (a ``WorkerTraceback``).
* ``WorkerError`` — a rank died (signal, exit code, no result) or raised something that cannot be rebuilt.

How a rank's exception is reported and rebuilt is in ``wire`` (both ends of the pipe).
"""

from __future__ import annotations

import signal

__all__ = [
    "add_note",
    "LaunchError",
    "LaunchStalled",
    "LaunchTimeout",
    "WorkerError",
    "WorkerTraceback",
    "describe_exit",
    "lost_a_peer",
]


class LaunchError(RuntimeError):
    """The launcher could not start the workers; nothing ran.

    Examples:
        >>> try:
        ...     raise LaunchError("fork is unsafe: CUDA was initialized by Cell In[3], line 2")
        ... except LaunchError as err:
        ...     print(err)
        fork is unsafe: CUDA was initialized by Cell In[3], line 2
    """


class WorkerError(RuntimeError):
    """A rank failed in a way that cannot be shown as its own exception.

    Attributes:
        rank: the global rank that failed.
        exitcode: the process exit code (negative: killed by that signal), or None.
        exc_type: the name of the worker's exception type, when it raised one.
        remote_traceback: the worker's formatted traceback, when there is one.

    Examples:
        >>> err = WorkerError(1, "rank 1 was killed by SIGKILL", exitcode=-9)
        >>> err.rank, err.exitcode
        (1, -9)
    """

    def __init__(self, rank, message, *, exitcode=None, exc_type=None, remote_traceback=None):
        super().__init__(message)
        self.rank = rank
        self.exitcode = exitcode
        self.exc_type = exc_type
        self.remote_traceback = remote_traceback

    def __reduce__(self):
        return (_make_worker_error, (self.rank, str(self), self.exitcode, self.exc_type, self.remote_traceback))


def _make_worker_error(rank, message, exitcode, exc_type, remote_traceback):
    return WorkerError(rank, message, exitcode=exitcode, exc_type=exc_type, remote_traceback=remote_traceback)


class WorkerTraceback(Exception):
    """The traceback of an exception raised in a worker, shown as the cause of the re-raised one.

    Examples:
        >>> print(WorkerTraceback("Traceback (most recent call last):\\n  ...\\nValueError: boom\\n"))
        <BLANKLINE>
        Traceback (most recent call last):
          ...
        ValueError: boom
        <BLANKLINE>
    """

    def __init__(self, text):
        super().__init__(text)
        self.text = text

    def __str__(self):
        return "\n" + self.text.rstrip("\n") + "\n"


def describe_exit(rank, exitcode, lost=None):
    """Say in words how a rank's process ended (``lost``: what took it, when not the rank itself).

    Examples:
        >>> describe_exit(1, -9)
        'rank 1 was killed by signal SIGKILL (it may have run out of memory)'
        >>> describe_exit(0, 3)
        'rank 0 exited with code 3 without returning a result'
        >>> describe_exit(1, -9, "its start server (pid 42) was killed by signal SIGKILL")
        'rank 1 was lost: its start server (pid 42) was killed by signal SIGKILL'
    """
    if lost:
        return f"rank {rank} was lost: {lost}"
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = str(-exitcode)
        hint = " (it may have run out of memory)" if -exitcode == signal.SIGKILL else ""
        return f"rank {rank} was killed by signal {name}{hint}"
    return f"rank {rank} exited with code {exitcode} without returning a result"


class LaunchStalled(LaunchError):
    """No rank made progress for ``stall_timeout`` seconds (or some ranks returned and the others
    did not within it): the launch was ended. ``ranks`` never finished; ``stacks`` shows where
    every live rank was.

    Examples:
        >>> err = LaunchStalled("ranks 1 never finished", ranks=[1], stacks=None)
        >>> isinstance(err, LaunchError), err.ranks
        (True, [1])
    """

    def __init__(self, message, ranks=(), stacks=None):
        super().__init__(message)
        self.ranks = list(ranks)
        self.stacks = stacks


class LaunchTimeout(LaunchError):
    """The launch ran longer than its ``timeout`` and was ended; ``stacks`` shows where the ranks were."""

    def __init__(self, message, ranks=(), stacks=None):
        super().__init__(message)
        self.ranks = list(ranks)
        self.stacks = stacks


_PEER_LOST = (  # how gloo and NCCL say that another rank went away
    "Connection reset by peer",
    "Connection closed by peer",
    "Connection refused",
    "remote process exited",
    "Socket Timeout",
)


def lost_a_peer(exception: BaseException) -> bool:
    """Whether a rank's error only says that a collective lost another rank (gloo/NCCL wording), so
    the other rank's own failure, if it comes, is the real cause.

    Examples:
        >>> lost_a_peer(RuntimeError("[rank 0] Read error [127.0.0.1]:16790: Connection reset by peer"))
        True
        >>> lost_a_peer(ValueError("[rank 1] bad batch"))
        False
    """
    text = str(exception)
    return isinstance(exception, RuntimeError) and any(marker in text for marker in _PEER_LOST)


def add_note(exception: BaseException, note: str) -> None:
    """``exception.add_note(note)`` where Python has it (3.11+). On 3.10 the note is kept in
    ``__notes__`` as 3.11 keeps it, where tracebacks do not show it.

    Examples:
        >>> error = ValueError("bad batch")
        >>> add_note(error, "rank 1 failed after it")
        >>> error.__notes__
        ['rank 1 failed after it']
    """
    if hasattr(exception, "add_note"):
        exception.add_note(note)
    else:
        exception.__notes__ = [*getattr(exception, "__notes__", []), note]  # type: ignore[attr-defined]
