"""The process that runs a detached launch: the kernel of its ranks, apart from the notebook's.

    python -m notebook_launcher.detached.host [--detach] FOLDER

The notebook's kernel starts it with ``--detach``: it forks at once into a session of its own and
the first process exits, so the host is no child of the kernel and a kernel's restart (which ends
the kernel's process group) does not reach it; the kernel may then go away. It runs the plan in ``FOLDER/plan.pkl`` as a
kernel runs a launch — the same supervision, restarts, containment and clean-up — with the
journal as its view, and writes the end (``end.pkl``) before it exits. SIGINT or SIGTERM
(``DetachedLaunch.stop()``) stops the launch as the Stop button does. Its ranks end with it: if it
is killed, the launcher's guardian and the ranks' parent-death signal end them, and the next
launch's sweep removes shared memory it left.
"""

from __future__ import annotations

import linecache
import os
import signal
import sys
import traceback
from typing import Any

from .folder import LaunchFolder
from .journal import JournalListener

__all__ = ["main", "outcome"]


def main(path: str) -> int:
    import cloudpickle
    import psutil

    from ..api import start_launch

    folder = LaunchFolder(path)
    folder.write_host(os.getpid(), psutil.Process().create_time())
    payload = cloudpickle.loads(folder.read_bytes("plan.pkl"))
    plan = payload["plan"]
    linecache.cache.update(payload["sources"])  # the kernel's cells: the ranks' tracebacks show their lines
    journal = JournalListener(folder.open_appending("journal.jsonl"))
    try:
        job = start_launch(plan, (), journal)
    except BaseException as err:  # the launch could not start: that is its end
        folder.write_bytes("end.pkl", _pickled(outcome("failed", {}, None, err)))
        raise

    def stop(signum: int, frame: Any) -> None:
        job.request_stop(by="DetachedLaunch.stop()")

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while not job.join(1.0):
        pass
    returned = {
        rank: value for rank, value in zip(job.ranks, job.results, strict=True) if job.rank_status(rank) == "done"
    }
    try:
        job.wait()
        end = outcome(job.status, returned, None, None)
    except BaseException as err:
        end = outcome(job.status, returned, job.failed_rank, err)
    end["elapsed"] = job.elapsed
    folder.write_bytes("end.pkl", _pickled(end))
    journal.close()
    return 0


def outcome(status: str, results: dict, failed_rank: int | None, error: BaseException | None) -> dict:
    """What a detached launch ended with, as the kernels that follow it read it: the status, the
    value of each rank that returned (by rank), and what ``wait()`` raised with its text (the rank's frames), should the
    exception itself not pickle."""
    text = "".join(traceback.format_exception(error)) if error is not None else ""
    return {"status": status, "results": results, "failed_rank": failed_rank, "error": error, "text": text}


def _pickled(end: dict) -> bytes:
    import cloudpickle

    try:
        return cloudpickle.dumps(end)
    except Exception as err:  # a value or an exception that does not pickle: say so, keep the rest
        values = {}
        for rank, value in end["results"].items():
            try:
                cloudpickle.dumps(value)
                values[rank] = value
            except Exception:
                values[rank] = None
        error = end["error"]
        if error is not None:
            try:
                cloudpickle.dumps(error)
            except Exception:
                error = RuntimeError(f"{type(error).__name__}: {error}")
        note = f"(part of the end could not be pickled: {type(err).__name__}: {err})"
        return cloudpickle.dumps({**end, "results": values, "error": error, "text": end["text"] + note})


def _leave_the_starter() -> None:
    """Go on in a child in a session of its own, the starting process exiting now."""
    if os.fork() != 0:
        os._exit(0)
    os.setsid()


if __name__ == "__main__":
    if sys.argv[1] == "--detach":
        _leave_the_starter()
    sys.exit(main(sys.argv[-1]))
