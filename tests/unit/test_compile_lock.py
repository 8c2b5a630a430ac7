"""The ranks' compile lock holds one rank at a time, also after a wait.

A rank that waited for a sibling's compile used to go on under a shared hold, beside every other
holder; the sibling, taking the lock again for its next graph, then found it held (shared) and went
on too, so both compiled that graph (seen in CI: 3 compiles of 2 graphs). Here a second open of the
file stands for a sibling rank: ``flock`` holds apply to each open of the file, in one process as
in two.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time

from notebook_launcher.compiling.serial import RankCompileLock


def _can_share(path):
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _waiter_on(path, timeout=30):
    """Whether a process waits for a ``flock`` of ``path`` (Linux lists waiters in /proc/locks
    with "->"), polled until ``timeout``."""
    inode = f":{os.stat(path).st_ino} "
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open("/proc/locks") as locks:
            if any("->" in line and "FLOCK" in line and inode in line for line in locks):
                return True
        time.sleep(0.01)  # a poll of the kernel's lock table, bounded by the deadline
    return False


def test_a_rank_that_waited_for_the_lock_holds_it_alone(tmp_path):
    path = str(tmp_path / "compile.lock")
    compiling, waiting = RankCompileLock(path), RankCompileLock(path)
    holds, done = threading.Event(), threading.Event()

    def sibling():
        with waiting:
            holds.set()
            done.wait(timeout=30)

    with compiling:
        thread = threading.Thread(target=sibling)
        thread.start()
        assert _waiter_on(path)  # the sibling waits for the compiling rank
    assert holds.wait(timeout=30)  # the sibling got the lock once it was free
    try:
        assert not _can_share(path)  # and nobody else goes on beside it, not even to load
    finally:
        done.set()
        thread.join(timeout=30)
    assert _can_share(path)  # released with its last exit


def test_a_rank_re_enters_its_own_lock(tmp_path):
    lock = RankCompileLock(str(tmp_path / "compile.lock"))
    with lock, lock:
        assert lock.depth == 2 and not _can_share(lock.path)
    assert lock.depth == 0 and _can_share(lock.path)
