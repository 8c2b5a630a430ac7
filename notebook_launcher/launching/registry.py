"""The launches of this kernel: which run, which came last, and who is told when one changes.

The sidebar observes them (``observe_launches``); ``last_launch()`` reaches what
``notebook_launcher()`` kept besides rank 0's value; at interpreter exit every running launch is
stopped.
"""

from __future__ import annotations

import atexit
import multiprocessing.util  # noqa: F401 -- its exit handler must be registered before ours (below)
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .listener import QuietListener

if TYPE_CHECKING:
    from ..wire.events import Status
    from .handle import Launch

__all__ = ["register", "active_launches", "last_launch", "find_launch", "observe_launches", "Observed"]

_ACTIVE: weakref.WeakSet[Launch] = weakref.WeakSet()
_OBSERVERS: list[Callable[[Launch], None]] = []
_LAST: list[Launch | None] = [None]


def register(launch: Launch) -> None:
    """``launch`` has started: it is the last launch, and active until done."""
    _LAST[0] = launch
    _ACTIVE.add(launch)


def active_launches() -> list[Launch]:
    """Launches of this kernel that have not finished yet."""
    return [launch for launch in list(_ACTIVE) if not launch.done]


def last_launch() -> Launch | None:
    """The most recent launch of this kernel (running or finished), or None.

    ``notebook_launcher()`` returns rank 0's value; this reaches everything else it kept.

    Examples:
        >>> from notebook_launcher import notebook_launcher, last_launch
        >>> notebook_launcher(lambda: print("hi"), num_processes=1, display="none")
        >>> last_launch().logs(0)
        'hi\\n'
    """
    return _LAST[0]


def find_launch(launch_id: str) -> Launch | None:
    """The running launch with this id, or None."""
    return next((launch for launch in active_launches() if launch.id == launch_id), None)


def observe_launches(callback: Callable[[Launch], None]) -> Callable[[], None]:
    """Call ``callback(launch)`` when any launch of this kernel starts, a rank changes status, or it ends.

    Returns a function that stops the calls. Callbacks run on the launch's supervisor thread.
    """
    _OBSERVERS.append(callback)
    return lambda: _OBSERVERS.remove(callback) if callback in _OBSERVERS else None


class Observed(QuietListener):
    """Tells the observers of launches when this one starts, a rank changes status, or it ends."""

    def __init__(self) -> None:
        self._launch: Any = None

    def on_start(self, launch: Any) -> None:
        self._launch = launch
        self._tell(launch)

    def on_status(self, event: Status) -> None:
        self._tell(self._launch)

    def changed(self) -> None:
        self._tell(self._launch)

    def on_finish(self, launch: Any) -> None:
        self._tell(launch)

    @staticmethod
    def _tell(launch: Any) -> None:
        for callback in list(_OBSERVERS):
            try:
                callback(launch)
            except Exception:  # an observer (the sidebar) must never break a launch
                pass


# atexit runs handlers last-registered first: this one must end the ranks before multiprocessing's
# own handler joins its children (forked ranks), which would otherwise wait for them for ever.
@atexit.register
def _stop_all() -> None:
    for launch in active_launches():
        launch.stop()
