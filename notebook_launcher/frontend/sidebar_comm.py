"""The kernel side of the JupyterLab sidebar: a comm target that reports and takes settings.

``register()`` runs when the package is imported in a kernel and on ``%load_ext notebook_launcher``.
It also opens a comm to the front end with a hello, so an open sidebar connects by itself. Each
sidebar that opens a comm gets the kernel's state (devices, settings, launches) and then an update
whenever a launch starts, a rank changes status, a launch ends, or the settings change (from code,
the in-cell picker or another sidebar). The messages are written down in ``messages``. Received
messages are only ever checked settings or a launch id to stop; nothing is executed.

Works with the standalone ``comm`` package (ipykernel ≥ 6.18) and falls back to the kernel's own comm
manager (ipykernel 6.17, as on Colab).
"""

from __future__ import annotations

import sys
import threading
import time

from ..backends import act_on_section, backend_status, observe_backends
from ..devices.inventory import device_inventory
from ..launching.handle import active_launches, find_launch, observe_launches
from .messages import HISTORY, launch_info
from .settings import SETTING_CHOICES, kernel_settings
from .shell_activity import free_since
from .shell_activity import register as register_shell_activity
from .subshells import handle_on_main_shell

__all__ = ["register", "open_sidebars", "TARGET", "SILENT_AFTER"]

TARGET = "notebook_launcher"
SILENT_AFTER = 90.0  # seconds: a sidebar that said it is alive and then nothing for this long is gone
_finished: list = []  # LaunchInfo of the last finished launches (snapshots: no results are kept alive)
_lock = threading.Lock()
_registered = False


def register(ipython=None) -> bool:
    """Register the comm target in the running kernel and greet the front end; False without a kernel."""
    global _registered
    if _registered:
        return True
    manager = _comm_manager(ipython)
    if manager is None:
        return False
    manager.register_target(TARGET, _open)
    register_shell_activity(ipython or _get_ipython())
    observe_launches(_remember)
    _registered = True
    _say_hello(manager)
    return True


def _comm_manager(ipython):
    ipython = ipython or _get_ipython()
    kernel = getattr(ipython, "kernel", None)
    if kernel is None:
        return None
    package = _comm_package()
    return package.get_comm_manager() if package is not None else getattr(kernel, "comm_manager", None)


def _comm_package():
    """The standalone ``comm`` package where the kernel uses it (ipykernel >= 6.18), else None.

    Under an older ipykernel (Colab's and Kaggle's 6.17) an installed ``comm`` package (ipywidgets 8
    brings it, as on Kaggle) makes managers and comms that reach no front end: the kernel's own
    (``kernel.comm_manager``, ``ipykernel.comm.Comm``) are the ones to use there.
    """
    ipykernel = sys.modules.get("ipykernel")
    if ipykernel is None or tuple(getattr(ipykernel, "version_info", (0,))) < (6, 18):
        return None
    try:
        import comm
    except ImportError:
        return None
    return comm


def _get_ipython():
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _say_hello(manager):
    """Open a comm to the front end; the sidebar answers by connecting, other front ends close it."""
    try:
        package = _comm_package()
        if package is not None:
            channel = package.create_comm(target_name=TARGET, data={"type": "hello"})
        else:
            from ipykernel.comm import Comm

            channel = Comm(target_name=TARGET, data={"type": "hello"})
        channel.on_close(lambda _msg: None)
    except Exception:  # greeting is a convenience: the sidebar can still connect on its own
        pass


def _remember(launch):
    if launch.done:
        with _lock:
            _finished[:] = ([info for info in _finished if info["id"] != launch.id] + [launch_info(launch)])[-HISTORY:]


def launches():
    """LaunchInfo of the running launches and the last finished ones, oldest first."""
    with _lock:
        finished = list(_finished)
    running = [launch_info(launch) for launch in active_launches()]
    ids = {info["id"] for info in running}
    return [info for info in finished if info["id"] not in ids] + running


def state():
    inventory = device_inventory()
    return {
        "type": "state",
        "history": HISTORY,
        "inventory": inventory,
        "settings": kernel_settings().as_dict(),
        "choices": {name: list(values) for name, values in SETTING_CHOICES.items()},
        "launches": launches(),
        "sections": backend_status(),  # each backend's (``backends.status``), drawn whatever the backend
    }


_channels: set = set()  # the open sidebar comms (``open_sidebars``)


def open_sidebars() -> int:
    """How many sidebars this kernel sends to (each open page's one, until it closes or goes silent)."""
    with _lock:
        return len(_channels)


class _SidebarChannel:
    def __init__(self, comm, silent_after=None, clock=time.monotonic, page=None, shell_free_since=free_since):
        self._comm = comm
        self._shell_free_since = shell_free_since  # its messages wait behind a running cell
        self.page = page  # the browser tab it is on (kept across reloads), when the sidebar says
        self._clock = clock
        self._silent_after = SILENT_AFTER if silent_after is None else silent_after
        self._heard = clock()
        self._says_alive = False  # a sidebar that never said so (an older one) is never dropped
        with _lock:
            _channels.add(self)
        self._stop_observing = observe_launches(self._launch_changed)
        self._stop_settings = kernel_settings().observe(self._settings_changed)
        self._stop_backends = observe_backends(self._backend_changed)
        self._handlers = {
            "get_state": lambda data: self._send(state()),
            "set_settings": self._set_settings,
            "stop_launch": self._stop_launch,
            "section_action": self._act,
            "alive": self._alive,
        }
        comm.on_msg(self._on_msg)
        comm.on_close(lambda _msg: self._close())
        handle_on_main_shell(comm)  # settings before a cell run after them; no "Idle" during a cell

    def _close(self):
        with _lock:
            if self not in _channels:
                return
            _channels.discard(self)
        self._stop_observing()
        self._stop_settings()
        self._stop_backends()

    def _on_msg(self, msg):
        self._heard = self._clock()
        data = msg.get("content", {}).get("data") or {}
        kind = data.get("type") if isinstance(data, dict) else None
        handler = self._handlers.get(kind) if isinstance(kind, str) else None
        if handler is None:
            expected = ", ".join(repr(name) for name in self._handlers)
            self._reply(data, f"unknown message type {kind!r}; expected one of {expected}")
        else:
            handler(data)

    def _alive(self, data):
        self._says_alive = True

    def _send(self, message):
        """Send, unless the sidebar went silent: then its comm is closed and nothing is sent to it again."""
        heard = max(self._heard, self._shell_free_since(self._clock))  # not silent while it cannot be heard
        if self._says_alive and self._clock() - heard > self._silent_after:
            self._close()
            try:
                self._comm.close()
            except Exception:  # the kernel's connection is going
                pass
            return
        self._comm.send(message)

    def _set_settings(self, data):
        try:
            kernel_settings().update(data.get("settings"), device_inventory()["max_processes"])
        except ValueError as err:
            self._reply(data, str(err))
        else:
            self._reply(data, None)

    def _stop_launch(self, data):
        launch = find_launch(str(data.get("id")))
        if launch is None:
            self._reply(data, f"no running launch with id {data.get('id')!r}")
            return
        launch.request_stop(by="the sidebar's Stop")
        self._reply(data, None)

    def _reply(self, data, error):
        request = data.get("request_id") if isinstance(data, dict) else None
        self._send(
            {
                "type": "reply",
                "request_id": request,
                "ok": error is None,
                "error": error,
                "settings": kernel_settings().as_dict(),
            }
        )

    def _launch_changed(self, launch):
        self._send({"type": "launch", "launch": launch_info(launch)})

    def _settings_changed(self, settings):
        self._send({"type": "settings", "settings": settings})

    def _backend_changed(self, name, section):
        self._send({"type": "section", "name": name, "section": section})

    def _act(self, data):
        try:
            act_on_section(str(data.get("section")), str(data.get("action")))
        except ValueError as err:
            self._reply(data, str(err))
        except Exception as err:  # the backend failed doing it: said, never raised into the kernel
            self._reply(data, f"{type(err).__name__}: {err}")
        else:
            self._reply(data, None)


def _open(comm, open_msg):
    data = (open_msg or {}).get("content", {}).get("data") or {}
    page = data.get("page") if isinstance(data, dict) and isinstance(data.get("page"), str) else None
    if page is not None:
        _close_page(page)
    _SidebarChannel(comm, page=page)
    comm.send(state())


def _close_page(page):
    """Close the sidebars an earlier load of ``page`` left open: the close it sent as it went was
    lost (its connection ended first), so the kernel would send to it until it went silent."""
    with _lock:
        left = [channel for channel in _channels if channel.page == page]
    for channel in left:
        channel._close()
        try:
            channel._comm.close()
        except Exception:  # the page's connection is gone
            pass
