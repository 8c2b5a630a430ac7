"""The ranks' compile lock holds one rank at a time, also after a wait; a graph a sibling compiled
already is loaded without it.

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

from notebook_launcher.compiling.serial import GraphMarks, RankCompileLock, serialized


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


def _rank(path, marks_folder):
    """One rank's wrapped compile: it records, per call, whether it held the lock while compiling."""
    lock, calls = RankCompileLock(path), []
    compile_graph = serialized(
        lambda name: calls.append((name, lock.depth > 0)) or name, lock, GraphMarks(marks_folder)
    )
    return compile_graph, calls


def test_a_graph_a_sibling_compiled_is_loaded_beside_the_lock_and_a_new_one_waits_for_it(tmp_path):
    path, marks = str(tmp_path / "compile.lock"), str(tmp_path / "marks" / "attempt")
    first, first_calls = _rank(path, marks)
    second, second_calls = _rank(path, marks)
    assert first("forward") == "forward" and first_calls == [("forward", True)]  # compiled under the lock, marked
    holder = RankCompileLock(path)
    with holder:  # a sibling compiling the next graph holds the lock
        assert second("forward") == "forward"  # marked: loaded at once, not waiting for the holder
        assert second_calls == [("forward", False)]
        finished = threading.Event()
        thread = threading.Thread(target=lambda: (second("backward"), finished.set()))
        thread.start()
        assert _waiter_on(path)  # not marked: it waits for the holder
        assert not finished.is_set()
        open(os.path.join(marks, "2"), "w").close()  # the holder compiled it meanwhile
    thread.join(timeout=30)
    assert second_calls == [("forward", False), ("backward", False)]  # then loaded it, without the lock


def test_without_marks_every_graph_is_taken_under_the_lock(tmp_path):
    compile_graph, calls = _rank(str(tmp_path / "compile.lock"), None)
    compile_graph("forward")
    compile_graph("forward")
    assert calls == [("forward", True), ("forward", True)]
