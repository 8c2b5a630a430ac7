"""The base of the views: a ``LaunchListener`` (``launching.listener``) that shows nothing
(``display="none"``).

A view receives ``on_start(launch)`` from the cell's thread, the rank events (``on_status``,
``on_output``, ``on_live``, ``on_display``, ``on_metric``, ``flush``) from the supervisor's thread,
and ``on_finish(launch)`` once the launch has ended and been cleaned up; ``launch`` is a
``LaunchState``. ``cell_waits(True/False)`` comes from the cell's thread as it starts and stops
waiting on the launch (a view may leave its last form for that thread: ``cell_handoff``).
"""

from __future__ import annotations

from ...launching.listener import CompositeListener, QuietListener

__all__ = ["LaunchView", "CompositeView"]


class LaunchView(QuietListener):
    """Receives a launch's events from its supervisor thread. Override what you show."""


CompositeView = CompositeListener
