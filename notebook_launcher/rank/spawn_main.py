"""Entry point of a spawned rank: ``python -m notebook_launcher.rank.spawn_main PAYLOAD_FD SPEC``."""

from __future__ import annotations

import base64
import mmap
import os
import pickle
import sys

import cloudpickle

from .bootstrap import RankPipes, run_rank_process
from .capture import flush_output


def main(payload_fd, encoded_spec):
    spec, events_fd = pickle.loads(base64.b64decode(encoded_spec))
    return run_rank_process(spec, RankPipes(events=events_fd, stdout=1, stderr=2), payload_loader(int(payload_fd)))


def payload_loader(payload_fd: int):
    """A function that loads ``(function, args)`` from the payload file the kernel wrote (its
    ``sys.path`` first, so modules importable in the kernel are importable here; then the kernel's
    random state and torch flags, ``rank.global_state``, so the rank starts as a forked one would).

    ``payload_fd`` is the rank's inherited descriptor of that file (``scratch.anonymous_file``),
    closed once it is read. It is read through a mapping of its own, not the descriptor's offset,
    which the other ranks share."""

    def load_payload():
        try:
            with mmap.mmap(payload_fd, 0, access=mmap.ACCESS_READ) as view:
                kernel_path = pickle.load(view)  # mmap has read and readline
                sys.path.extend(entry for entry in kernel_path if entry not in sys.path)
                pickle.load(view).restore()
                return cloudpickle.load(view)
        finally:
            os.close(payload_fd)

    return load_payload


def exit_now(code):
    """Exit as a forked rank does: the function's threads are joined and ``atexit`` handlers run
    (loggers, trackers flush), but not the interpreter's module teardown, which takes a fraction of
    a second once torch is loaded."""
    import atexit
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    finally:
        flush_output()
        os._exit(code)


if __name__ == "__main__":
    exit_now(main(*sys.argv[1:]))
