"""The user's own listeners: ``launch(..., listeners=[...])`` and ``Launch.subscribe``, fed by real
rank processes (gloo-free: plain prints, and metrics from trainer_core's Accelerator) with typed
events (``event.rank``, ``event.status``, ``event.text``, ``event.step``, ...)."""

from __future__ import annotations

import os
import threading
import time

from notebook_launcher import launch


class Recorder:
    """Keeps every call, in order, from whichever thread made it."""

    def __init__(self):
        self.calls = []
        self._lock = threading.Lock()

    def _keep(self, *call):
        with self._lock:
            self.calls.append(call)

    def on_start(self, launch):
        self._keep("start", launch.status)

    def on_status(self, event):
        self._keep("status", event.rank, event.status)

    def on_output(self, event):
        self._keep("output", event.rank, event.stream, event.text)

    def on_metric(self, event):
        self._keep("metric", event.rank, event.step, dict(event.values))

    def on_finish(self, launch):
        self._keep("finish", launch.status)

    def of(self, kind):
        return [call[1:] for call in self.calls if call[0] == kind]


def train_and_log(steps):
    from trainer_core import Accelerator

    accelerator = Accelerator(cpu=True)
    for step in range(steps):
        print(f"step {step}")
        accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
    return accelerator.process_index


def wait_at_gate(gate):
    print("before the gate")
    with open(gate) as fifo:  # blocks until the test opens it for writing
        fifo.read()
    print("after the gate")
    return "through"


def test_listeners_get_every_ranks_status_output_metrics_and_the_end():
    recorder = Recorder()
    job = launch(train_and_log, args=(3,), num_processes=2, display="none", listeners=[recorder])
    assert job.wait() == 0
    assert recorder.calls[0] == ("start", "starting")
    assert recorder.calls[-1] == ("finish", "succeeded")
    assert recorder.of("finish") == [("succeeded",)]
    for rank in (0, 1):
        statuses = [status for who, status in recorder.of("status") if who == rank]
        assert statuses == ["running", "done"], statuses
        text = "".join(text for who, stream, text in recorder.of("output") if who == rank and stream == "stdout")
        assert text == "step 0\nstep 1\nstep 2\n"
    # trainer_core's metrics reach the kernel through its logger and the rank's relay
    assert [(step, values) for rank, step, values in recorder.of("metric") if rank == 0] == [
        (0, {"loss": 1.0}),
        (1, {"loss": 0.5}),
        (2, {"loss": 1.0 / 3}),
    ]


def test_a_listener_subscribed_while_it_runs_gets_what_comes_after_and_the_end(tmp_path):
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    job = launch(wait_at_gate, args=(str(gate),), num_processes=1, display="none")
    recorder = Recorder()
    stop = job.subscribe(recorder)
    assert recorder.calls[0][0] == "start"
    with open(gate, "w") as fifo:  # the rank is at its gate: let it through
        fifo.write("go")
    assert job.wait() == "through"
    stop()
    assert "after the gate\n" in "".join(text for _, _, text in recorder.of("output"))
    assert recorder.of("finish") == [("succeeded",)] and recorder.calls[-1][0] == "finish"


def test_a_listener_subscribed_after_the_end_gets_the_start_and_the_end_once():
    job = launch(print, args=("hi",), num_processes=1, display="none")
    job.wait()
    recorder = Recorder()
    job.subscribe(recorder)()
    assert recorder.calls == [("start", "succeeded"), ("finish", "succeeded")]


def test_a_listener_that_raises_is_reported_and_dropped_and_the_launch_goes_on(capfd):
    class Broken:
        calls = 0

        def on_output(self, event):
            Broken.calls += 1
            raise RuntimeError("the listener's own bug")

    def many_lines():
        for line in range(20):
            print("line", line, flush=True)
        return "all printed"

    job = launch(many_lines, num_processes=2, display="none", listeners=[Broken()])
    assert job.wait() == "all printed"
    assert Broken.calls == 1
    err = capfd.readouterr().err
    assert "raised in on_output and is no longer called (RuntimeError: the listener's own bug)" in err
    assert "the launch goes on" in err and "raise RuntimeError" in err  # with its traceback


def test_an_unsubscribed_listener_hears_nothing_more(tmp_path):
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    job = launch(wait_at_gate, args=(str(gate),), num_processes=1, display="none")
    recorder = Recorder()
    job.subscribe(recorder)()  # subscribed, then stopped at once
    with open(gate, "w") as fifo:
        fifo.write("go")
    job.wait()
    assert [call[0] for call in recorder.calls] == ["start"]


def show_and_draw():
    import sys

    from IPython.display import display

    display("a table")
    sys.stderr.write("progress 50%\r")
    sys.stderr.flush()
    return "shown"


def test_listeners_get_typed_frozen_events():
    import dataclasses

    from notebook_launcher.launching.listener import LiveLine, Metric, Output, Shown, Status

    seen = []

    class Types:
        def on_status(self, event):
            seen.append(event)

        def on_output(self, event):
            seen.append(event)

        def on_live(self, event):
            seen.append(event)

        def on_display(self, event):
            seen.append(event)

    job = launch(show_and_draw, num_processes=1, display="none", listeners=[Types()])
    assert job.wait() == "shown"
    kinds = {type(event) for event in seen}
    assert {Status, Shown, LiveLine} <= kinds and kinds <= {Status, Output, LiveLine, Shown, Metric}
    shown = next(event for event in seen if isinstance(event, Shown))
    assert "a table" in job.line(shown.rank, shown.index).text and not shown.replaced
    live = [event for event in seen if isinstance(event, LiveLine) and event.text]
    assert live and live[0].stream == "stderr" and "progress 50%" in live[0].text
    try:
        dataclasses.replace(seen[0]).rank = 5  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("a listener's event can be changed under the other listeners")


def print_for_ever():
    line = 0
    while True:
        print("line", line, flush=True)
        line += 1


def test_a_listener_that_blocks_never_stalls_the_launch_and_is_reported(capfd):
    """An ``on_output`` that blocks: before, the supervisor's thread waited in it, so no output was
    read (``line_count`` froze), the ranks stalled on full pipes, and ``stop(timeout=20)`` returned
    False. Now the launch reads on, stops in time, and the listener is named as slow."""
    release = threading.Event()

    class Blocking:
        calls = 0

        def on_output(self, event):
            Blocking.calls += 1
            release.wait(300)

    job = launch(print_for_ever, num_processes=2, display="none", listeners=[Blocking()])
    slow = "has been in on_output for 5 s; the launch goes on and its events wait"
    dropped = "events waiting: it is no longer called and misses the rest"
    err = ""
    try:
        deadline = time.monotonic() + 120
        while job.line_count(0) < 20_000 or dropped not in err:  # lines far past what a pipe holds
            assert time.monotonic() < deadline, f"output stalled at {job.line_count(0)} lines"
            assert not job.done
            job.join(0.1)
            err += capfd.readouterr().err
        assert job.stop(timeout=20), "the launch did not stop behind the blocked listener"
        assert Blocking.calls == 1
    finally:
        release.set()
    err += capfd.readouterr().err
    assert "notebook_launcher: the listener <" in err and err.count(slow) == 1
    assert err.index(slow) < err.index(dropped) and err.count(dropped) == 1


def test_a_listener_still_busy_at_the_end_is_named_and_the_launch_ends_without_it(capfd):
    release = threading.Event()

    class Slow:
        def on_status(self, event):
            release.wait(300)

    job = launch(print, args=("hi",), num_processes=1, display="none", listeners=[Slow()])
    try:
        job.wait(timeout=60)
    finally:
        release.set()
    assert "was still in on_status when the launch ended; the launch did not wait for it" in capfd.readouterr().err


def test_a_view_that_raises_starves_no_listener_of_its_events(capfd):
    """The cell's view is fed first; before, one that raised on an event (a widget that could not
    draw it) kept that event from every listener after it. Each delivery is now its own: the
    listeners get every event, and the view's error is reported on the kernel's stderr."""
    from notebook_launcher.api import plan_launch, start_launch
    from notebook_launcher.launching.listener import QuietListener

    class BrokenView(QuietListener):
        def on_status(self, event):
            raise RuntimeError("the view cannot draw a status")

        def on_output(self, event):
            raise RuntimeError("the view cannot draw a line")

    recorder = Recorder()
    plan, notices = plan_launch(train_and_log, (3,), 2)
    job = start_launch(plan, notices, BrokenView(), [recorder])
    assert job.wait() == 0
    assert recorder.of("finish") == [("succeeded",)]
    for rank in (0, 1):
        assert [status for who, status in recorder.of("status") if who == rank] == ["running", "done"]
        text = "".join(text for who, stream, text in recorder.of("output") if who == rank and stream == "stdout")
        assert text == "step 0\nstep 1\nstep 2\n"
    assert "BrokenView.on_output raised; the others go on" in capfd.readouterr().err


def test_the_kernels_observers_hear_persistent_workers_as_workers_from_their_start():
    """``kind`` is given when a launch is made: the sidebar's first message about persistent
    workers (sent from their ``on_start``) already says "workers", never "launch" first."""
    from notebook_launcher.launching.registry import observe_launches
    from notebook_launcher.workers import start_workers

    heard = []
    forget = observe_launches(lambda launch: heard.append(launch.kind))
    try:
        workers = start_workers(1, backend=None, display="none")
        workers.stop()
    finally:
        forget()
    assert heard and set(heard) == {"workers"}, heard
