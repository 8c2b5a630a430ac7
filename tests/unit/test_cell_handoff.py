"""The last form of a quick launch is left for the cell that waits for it, and shown exactly once,
whichever thread gets there first (``frontend.views.cell_handoff``)."""

import threading

from notebook_launcher.frontend.views.cell_handoff import CellHandoff


def _recording():
    shown = []
    return shown, CellHandoff(lambda bundle: shown.append((bundle, threading.current_thread().name)))


def _in_thread(function, name="supervisor"):
    thread = threading.Thread(target=function, name=name)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_without_a_waiting_cell_the_form_is_shown_at_once_by_the_thread_that_made_it():
    shown, handoff = _recording()
    _in_thread(lambda: handoff.show("final"))
    assert shown == [("final", "supervisor")]
    handoff.cell_waits(True)
    handoff.cell_waits(False)
    assert shown == [("final", "supervisor")]  # nothing left over, nothing shown twice


def test_a_waiting_cell_shows_what_was_left_for_it_when_it_stops_waiting():
    shown, handoff = _recording()
    handoff.cell_waits(True)
    _in_thread(lambda: handoff.show("final"))
    assert shown == []
    handoff.cell_waits(False)
    assert shown == [("final", threading.current_thread().name)]
    handoff.cell_waits(True)
    handoff.cell_waits(False)
    assert len(shown) == 1


def test_a_form_that_must_not_wait_is_shown_at_once_even_while_the_cell_waits():
    shown, handoff = _recording()
    handoff.cell_waits(True)
    _in_thread(lambda: handoff.show("replaces a widget", leave_for_cell=False))
    assert shown == [("replaces a widget", "supervisor")]


def test_a_form_made_after_the_cell_stopped_waiting_is_not_lost():
    """A wait that ended early (a timeout, a second interrupt) leaves nobody to show it: the thread
    that made the form shows it."""
    shown, handoff = _recording()
    handoff.cell_waits(True)
    handoff.cell_waits(False)
    _in_thread(lambda: handoff.show("final"))
    assert shown == [("final", "supervisor")]


def test_the_form_is_shown_exactly_once_whichever_thread_comes_first():
    for _ in range(300):
        shown, handoff = _recording()
        handoff.cell_waits(True)
        start = threading.Barrier(2)

        def supervisor(handoff=handoff, start=start):
            start.wait()
            handoff.show("final")

        thread = threading.Thread(target=supervisor)
        thread.start()
        start.wait()
        handoff.cell_waits(False)  # races the supervisor's show()
        thread.join(timeout=10)
        assert [bundle for bundle, _ in shown] == ["final"]


def test_a_failing_show_in_the_cell_is_printed_not_raised(capfd):
    """The cell's call must end with the launch's result or error, not with the view's failure."""

    def broken(bundle):
        raise ValueError("the front end is gone")

    handoff = CellHandoff(broken)
    handoff.cell_waits(True)
    handoff.show("final")
    handoff.cell_waits(False)
    assert "ValueError: the front end is gone" in capfd.readouterr().err
