"""One door for every front end of a launch: ``on_event(event)`` and ``flush()``. The views and
users' listeners keep one method per kind (``QuietListener``); the composite, the guard and the
delivery thread pass events through whole."""

from __future__ import annotations

from notebook_launcher.launching.delivery import DeliveredListener
from notebook_launcher.launching.listener import (
    CellWaits,
    CompositeListener,
    Finished,
    GuardedListener,
    LaunchListener,
    LiveLine,
    QuietListener,
    Shown,
    Started,
    hook,
)
from notebook_launcher.wire.events import Metric, Output, Reply, Status

EVENTS = [
    Started("the launch"),
    Status(0, 0.0, "running"),
    Output(0, 0.0, "stdout", "a\n"),
    LiveLine(0, "stdout", "50%"),
    Shown(0, 1, False),
    Metric(0, 0.0, {"loss": 1.0}, 1),
    Reply(0, 0.0, {"call": 1, "value": 2}),
    Finished("the launch"),
    CellWaits(True),
]


class Kinds(QuietListener):
    """Every typed method of a view, recording what it was called with."""

    def __init__(self):
        self.calls = []

    def __getattribute__(self, name):
        if (name.startswith("on_") and name != "on_event") or name == "cell_waits":
            return lambda *args: object.__getattribute__(self, "calls").append((name, args))
        return object.__getattribute__(self, name)


def test_every_kind_of_event_reaches_its_own_method_of_a_view():
    view = Kinds()
    for event in EVENTS:
        view.on_event(event)
    assert [name for name, _ in view.calls] == [
        "on_start",
        "on_status",
        "on_output",
        "on_live",
        "on_display",
        "on_metric",
        "on_reply",
        "on_finish",
        "cell_waits",
    ]
    assert view.calls[0][1] == ("the launch",) and view.calls[-1][1] == (True,)
    assert view.calls[2][1] == (EVENTS[2],)


def test_a_users_listener_may_take_every_event_at_one_method_and_finish_comes_once():
    class All:
        def __init__(self):
            self.events = []

        def on_event(self, event):
            self.events.append(type(event).__name__)

    listener = All()
    guarded = GuardedListener(listener)
    for event in [*EVENTS, Finished("again")]:
        guarded.on_event(event)
    assert listener.events == [type(event).__name__ for event in EVENTS]


def test_the_delivery_thread_passes_events_whole_and_in_order():
    class Lines:
        def __init__(self):
            self.seen = []

        def on_output(self, event):
            self.seen.append(event.text)

        def on_finish(self, launch):
            self.seen.append(f"end of {launch}")

    lines = Lines()
    delivered = DeliveredListener(GuardedListener(lines))
    for index in range(50):
        delivered.on_event(Output(0, 0.0, "stdout", f"{index}\n"))
    delivered.on_event(Finished("it"))
    assert lines.seen == [f"{index}\n" for index in range(50)] + ["end of it"]


def test_every_front_end_is_a_launch_listener_and_each_delivery_is_isolated():
    class Broken(QuietListener):
        def on_output(self, event):
            raise RuntimeError("cannot draw")

    class Count:
        def __init__(self):
            self.outputs = 0

        def on_output(self, event):
            self.outputs += 1

    count = Count()
    composite = CompositeListener(Broken(), GuardedListener(count))
    for member in (composite, Broken(), GuardedListener(count), DeliveredListener(GuardedListener(Count()))):
        assert isinstance(member, LaunchListener)
    composite.on_event(Output(0, 0.0, "stdout", "x\n"))
    composite.on_event(Output(0, 0.0, "stdout", "y\n"))
    assert count.outputs == 2


def test_each_kind_names_its_method():
    assert hook(Status(0, 0.0, "done")) == ("on_status", (Status(0, 0.0, "done"),))
    assert hook(Started("x")) == ("on_start", ("x",))
