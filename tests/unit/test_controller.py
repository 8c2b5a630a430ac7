"""The launch policy alone: scripted events and a fake clock in, commands out (no process, no thread).

Each test is a row of DESIGN's fault table (or a rule of ``launching/controller.py``) as the policy
sees it; the same rows are tested end to end with real ranks in test_launch_faults.py, test_hangs.py
and test_restarts.py.
"""

import pickle

import pytest
from fake_clock import FakeClock

from notebook_launcher.backends.plans import FaultPolicy
from notebook_launcher.errors import LaunchError, LaunchStalled, LaunchTimeout, WorkerError
from notebook_launcher.launching.controller import (
    COLLATERAL_WAIT,
    EXIT_AFTER_RESULT,
    STACKS_WAIT,
    UNPICKLE_WAIT,
    AskStacks,
    Controller,
    Kill,
    Phase,
    ShowStatus,
    TellOtherNodes,
    Terminate,
)
from notebook_launcher.launching.record import LaunchRecord

STACK = {"pid": 7, "threads": [{"name": "MainThread", "main": True, "frames": [["train.py", 3, "train", "barrier()"]]}]}


def running(num_ranks=2, grace=2.0, **kwargs):
    clock = FakeClock()
    record = LaunchRecord(num_ranks)
    control = Controller(record, grace, clock, **kwargs)
    assert control.started() == []
    for rank in record.ranks:
        record.set_rank_status(rank, "running")
    return control, record, clock


def kinds(commands):
    return [type(command) for command in commands]


def test_a_rank_that_raises_is_the_failure_and_its_siblings_are_terminated_then_killed():
    """The rank that raised is exiting on its own: it is spared the SIGTERM (its exit writes a
    queue's last items), and killed with the rest only if it outlives the grace period."""
    control, record, clock = running(grace=2.0)
    error = ValueError("bad batch")
    commands = control.error(1, error, when=5.0)
    told = TellOtherNodes("rank 1 failed: ValueError: bad batch")
    assert commands == [ShowStatus(1, "failed"), told, Terminate((1,))]
    assert record.failure is error and record.failed_rank == 1
    assert control.phase is Phase.ENDING
    clock.now = 1.9
    assert control.tick() == []
    clock.now = 2.0
    assert control.tick() == [Kill()]
    assert control.deadline() is None


def test_every_rank_that_reported_is_spared_the_terminate_and_the_others_are_not():
    control, _, _ = running(num_ranks=3)
    control.result(0, when=1.0)
    commands = control.error(2, RuntimeError("boom"), when=2.0)
    assert commands[-1] == Terminate((0, 2))


def test_the_sibling_ended_by_the_launcher_is_stopped_not_a_second_failure():
    control, record, _ = running()
    control.error(0, RuntimeError("boom"), when=1.0)
    assert control.exited([1], exitcode=-15, signalled=True) == [ShowStatus(1, "stopped")]
    assert record.rank_status(1) == "stopped" and record.failed_rank == 0


@pytest.mark.parametrize(
    ("exitcode", "words"), [(-9, "killed by signal SIGKILL"), (3, "exited with code 3"), (0, "without returning")]
)
def test_a_rank_that_dies_or_exits_without_returning_fails_with_a_worker_error(exitcode, words):
    control, record, _ = running()
    commands = control.exited([0], exitcode=exitcode, signalled=False)
    assert kinds(commands) == [ShowStatus, TellOtherNodes, Terminate]
    failure = record.failure
    assert isinstance(failure, WorkerError) and failure.rank == 0 and words in str(failure)


def test_a_rank_that_lost_its_peer_waits_for_the_peers_own_failure_which_wins():
    control, record, clock = running()
    collateral = RuntimeError("Connection closed by peer")
    assert control.error(1, collateral, when=1.0) == []  # held
    assert control.deadline() == COLLATERAL_WAIT
    clock.now = 0.5
    commands = control.exited([0], exitcode=-9, signalled=False)
    assert Terminate((1,)) in commands  # rank 1 reported its error: it exits on its own
    assert record.failed_rank == 0 and "rank 1 failed after it" in "".join(record.failure.__notes__)
    assert control.deadline() == 0.5 + 2.0  # the kill after the grace; the held error is gone


def test_a_held_lost_peer_error_is_the_failure_when_no_peer_failed_in_time():
    control, record, clock = running()
    collateral = RuntimeError("Connection reset by peer")
    control.error(1, collateral, when=1.0)
    clock.now = COLLATERAL_WAIT
    assert kinds(control.tick()) == [ShowStatus, TellOtherNodes, Terminate]
    assert record.failure is collateral


def test_a_lost_peer_error_after_the_failure_is_a_note_on_it():
    control, record, _ = running(3)
    control.error(0, KeyError("x"), when=1.0)
    assert control.error(2, RuntimeError("Connection closed by peer"), when=2.0) == []
    assert "rank 2 failed after it" in record.failure.__notes__[0]


def test_every_rank_returned_the_ranks_get_a_while_to_exit_then_are_killed():
    control, record, _ = running(grace=2.0)
    assert control.result(0, when=1.0) == [ShowStatus(0, "done")]
    assert control.kill_at is None
    assert control.result(1, when=1.0) == [ShowStatus(1, "done")]
    assert control.kill_at == EXIT_AFTER_RESULT
    assert control.exited([0, 1], exitcode=0, signalled=False) == []
    assert control.unpickling  # the ranks have exited; their values are still awaited
    assert control.unpickled(1, 2) == [] and control.unpickled(0, 1) == []
    assert not control.unpickling
    assert record.results == [1, 2] and record.failure is None


def test_a_return_value_that_cannot_be_unpickled_is_the_ranks_failure():
    control, record, _ = running()
    control.result(0, when=1.0)
    commands = control.unreadable(0, pickle.UnpicklingError("not a pickle"), when=1.0)
    assert kinds(commands) == [ShowStatus, TellOtherNodes, Terminate]
    assert "could not be unpickled" in str(record.failure)


def test_a_value_whose_unpickling_blocks_fails_its_rank_when_the_wait_runs_out():
    """Unpickling runs the value's code; a value that never finishes must not keep the launch
    "running" for ever. A value arriving after the wait is ignored."""
    control, record, clock = running()
    control.result(0, when=1.0)
    assert control.deadline() == UNPICKLE_WAIT
    clock.now = UNPICKLE_WAIT
    assert kinds(control.tick()) == [ShowStatus, TellOtherNodes, Terminate]
    assert "still being unpickled in the kernel after 120 s" in str(record.failure)
    assert not control.unpickling and control.unpickled(0, "late") == []
    assert record.results == [None, None]


def test_a_stop_does_not_wait_for_values_being_unpickled():
    control, _, _ = running()
    control.result(0, when=1.0)
    assert control.unpickling
    control.stop()
    assert not control.unpickling


def test_a_stall_asks_for_stacks_then_fails_with_them():
    control, record, clock = running(faults=FaultPolicy(stall_timeout=30.0))
    clock.now = 10.0
    control.activity()
    assert control.deadline() == 40.0
    clock.now = 40.0
    assert control.tick() == [AskStacks((0, 1))]
    assert control.stacks(0, STACK) == []
    clock.now = 40.0 + STACKS_WAIT
    assert kinds(control.tick()) == [TellOtherNodes, Terminate]
    failure = record.failure
    assert isinstance(failure, LaunchStalled) and failure.ranks == [0, 1]
    assert failure.stacks is not None and failure.stacks.missing == [1]


def test_stacks_that_all_arrive_end_the_wait_at_once():
    control, record, clock = running(faults=FaultPolicy(timeout=5.0))
    clock.now = 5.0
    assert control.tick() == [AskStacks((0, 1))]
    control.stacks(0, STACK)
    assert kinds(control.stacks(1, STACK)) == [TellOtherNodes, Terminate]
    assert isinstance(record.failure, LaunchTimeout)


def test_ranks_still_busy_after_another_returned_show_a_waiting_line():
    control, record, clock = running()
    control.result(0, when=1.0)
    clock.now = 42.0
    control.tick()
    assert record.waiting == "waiting for rank 1: another rank returned 42 s ago"


def test_a_stop_ends_every_rank_and_a_second_kills_at_once():
    control, record, _ = running()
    assert control.stop() == [Terminate()]
    assert control.stop() == []
    assert control.kill() == [Kill()]
    assert control.exited([0, 1], exitcode=-9, signalled=True) == [ShowStatus(0, "stopped"), ShowStatus(1, "stopped")]
    record.finish()
    assert record.status == "stopped"
    assert not control.leaves_quietly()


def test_a_stop_with_stacks_asks_first():
    control, _, clock = running()
    assert control.stop(with_stacks=True) == [AskStacks((0, 1))]
    clock.now = STACKS_WAIT
    assert control.tick() == [Terminate()]


def test_a_stop_while_starting_takes_effect_once_started():
    clock = FakeClock()
    control = Controller(LaunchRecord(2), 2.0, clock)
    assert control.stop() == []
    assert control.started() == [Terminate()]


def test_another_nodes_failure_ends_this_node_without_echoing_it_back():
    reported = []
    control, record, clock = running(
        num_nodes=2, failure_elsewhere=lambda: reported[0] if reported else None, faults=FaultPolicy()
    )
    assert control.tick() == []
    reported.append("node 1: rank 3 failed: OSError: disk")
    assert control.tick() == []  # not due yet: the next look is monitor_interval later
    clock.now = FaultPolicy().monitor_interval
    assert control.tick() == [Terminate()]
    assert isinstance(record.failure, LaunchError) and "another node failed" in str(record.failure)


def test_a_launcher_fault_is_the_failure_and_the_ranks_end():
    control, record, _ = running()
    assert control.fault(OSError("no more pipes")) == []
    assert isinstance(record.failure, LaunchError) and "OSError: no more pipes" in str(record.failure)
    assert control.end() == [Terminate()]


def test_a_rank_that_sends_garbage_fails_with_what_it_sent():
    control, record, _ = running()
    assert kinds(control.reject(1, "a malformed event (int)")) == [ShowStatus, TellOtherNodes, Terminate]
    assert str(record.failure).endswith("rank 1 sent a malformed event (int)")


def test_asking_for_stacks_skips_ranks_that_returned_or_ended():
    control, _, _ = running(3)
    control.result(0, when=1.0)
    control.exited([0], exitcode=0, signalled=False)
    assert control.ask_stacks() == [AskStacks((1, 2))]


def test_the_policy_imports_no_mechanism():
    """The controller decides; it must not reach processes, descriptors, signals or threads itself."""
    import ast
    import inspect

    from notebook_launcher.launching import controller

    tree = ast.parse(inspect.getsource(controller))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"os", "select", "signal", "psutil", "threading", "subprocess", "time"}


def test_the_hint_ends_the_stall_message_the_user_reads():
    control, record, clock = running(faults=FaultPolicy(stall_timeout=30.0, stall_hint="try NCCL_P2P_DISABLE=1"))
    clock.now = 30.0
    control.tick()
    clock.now = 30.0 + STACKS_WAIT
    control.tick()
    assert isinstance(record.failure, LaunchStalled)
    assert str(record.failure).endswith("; try NCCL_P2P_DISABLE=1")
