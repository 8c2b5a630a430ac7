"""Run one stage of the GPU pass and end whatever it left running, and nothing else.

    python bench/gpu/contained.py LEFTOVER_FILE -- COMMAND...

This process becomes a child subreaper (Linux), so every process the stage starts stays its
descendant even when its own parent exits (a kernel's ranks, a daemonised helper). When the
command returns, it gives the descendants ``SETTLE`` seconds to end by themselves (a kernel's
guardian tidies up for a moment after its kernel is gone: that is not left running); then, or at
once when this process is told to stop (SIGTERM from the stage's time limit), it appends each
descendant still running to LEFTOVER_FILE ("pid command line"), sends it SIGTERM, then SIGKILL
after a grace period, and exits with the command's code. Processes it did not start (a
person's JupyterLab, another user's pip, a kernel of the same checkout) are never looked at: the
pass used to kill every new process whose command line named the checkout, ipykernel,
notebook_launcher or pytest.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time

import psutil

GRACE = 5.0  # seconds between SIGTERM and SIGKILL (the stage's time limit allows 10 more)
SETTLE = 10.0  # seconds descendants of a stage that returned have to end by themselves


def become_subreaper() -> None:
    """PR_SET_CHILD_SUBREAPER, as ``notebook_launcher.rank.descendants`` does; written here because
    the kit stage runs before the package's dependencies are installed, so it cannot be imported."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1)


def _descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _command_line(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline()) or process.name()
    except psutil.Error:
        return "?"


def _running() -> list[psutil.Process]:
    return [p for p in _descendants() if _status(p) not in (psutil.STATUS_ZOMBIE, None)]


def end_descendants(leftover_file: str, settle: float = 0.0, stopped: list[float] | None = None) -> None:
    """Record, then end, every descendant still running after ``settle`` seconds in which it may end
    by itself (cut short once ``stopped`` is not empty); zombies are only reaped."""
    deadline = time.monotonic() + settle
    running = _running()
    while running and time.monotonic() < deadline and not stopped:
        psutil.wait_procs(running, timeout=0.2)
        running = _running()  # and any started meanwhile
    if running:
        with open(leftover_file, "a") as file:
            for process in running:
                file.write(f"{process.pid} {_command_line(process)}\n")
    for process in running:
        _signal(process, signal.SIGTERM)
    _, alive = psutil.wait_procs(running, timeout=GRACE)
    for process in alive + _descendants():  # and any started meanwhile
        _signal(process, signal.SIGKILL)
    psutil.wait_procs(_descendants(), timeout=GRACE)  # reaps what was reparented here


def _status(process: psutil.Process) -> str | None:
    try:
        return process.status()
    except psutil.Error:
        return None


def _signal(process: psutil.Process, signum: int) -> None:
    try:
        process.send_signal(signum)
    except psutil.Error:
        pass


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    leftover_file, command = argv[0], argv[2:]
    become_subreaper()
    child = subprocess.Popen(command)
    stopped: list[float] = []

    def stop(signum, frame):  # the stage ran past its limit: end the command first, then the rest
        stopped.append(time.monotonic())
        if child.returncode is None:
            child.terminate()

    signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            try:
                code = child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if stopped and time.monotonic() - stopped[0] > GRACE:  # it ignores SIGTERM
                    child.kill()
    finally:
        end_descendants(leftover_file, settle=SETTLE, stopped=stopped)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
