"""Make the notebook machinery a forked rank inherits from the kernel safe to use.

A forked rank holds copies of the kernel's IPython shell, its ZeroMQ sockets and its comm
machinery. Used from the rank, they would write into the kernel's connection from a second
process and corrupt it. ``make_safe()`` (run by the worker bootstrap) therefore:

* sends ``display()`` output (and matplotlib's inline figures, which go through it) to the kernel
  over the launch channel as a "display" event, shown in the rank's output;
* refuses to open widget comms, with a message that says what to do instead;
* turns tqdm's notebook progress bars back into text bars, which the launcher captures as one live
  line per rank.

A spawned rank is a fresh interpreter with none of this, so there is nothing to do there.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["make_safe", "WIDGETS_REFUSED"]

WIDGETS_REFUSED = (
    "widgets cannot be shown from inside a launched rank (it has no connection to the notebook);"
    " print, or log metrics with accelerator.log(...), and the launch shows them"
)


def make_safe(channel):
    _route_display(channel)
    _refuse_comms()
    _text_progress_bars()


def _route_display(channel):
    interactive = sys.modules.get("IPython.core.interactiveshell")
    if interactive is None or not interactive.InteractiveShell.initialized():
        return
    shell = interactive.InteractiveShell.instance()

    def publish(data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
        bundle = {key: value for key, value in data.items() if key in ("text/plain", "image/png", "text/html")}
        if "application/vnd.jupyter.widget-view+json" in data:
            bundle = {"text/plain": f"<{WIDGETS_REFUSED}>"}
        channel.send("display", bundle)

    shell.display_pub.publish = publish


def _refuse(*args, **kwargs):
    raise RuntimeError(WIDGETS_REFUSED)


def _refuse_comms():
    comm: Any = sys.modules.get("comm")
    if comm is not None and hasattr(comm, "create_comm"):
        comm.create_comm = _refuse
    kernel_comm: Any = sys.modules.get("ipykernel.comm")
    if kernel_comm is not None and hasattr(kernel_comm, "Comm"):
        kernel_comm.Comm.__init__ = _refuse


def _text_progress_bars():
    """tqdm's notebook bar is a subclass of the text bar; without its overrides it is the text bar."""
    notebook = sys.modules.get("tqdm.notebook")
    if notebook is None:
        return
    cls = notebook.tqdm_notebook
    for name in [name for name in vars(cls) if name not in ("__module__", "__doc__", "__qualname__")]:
        if callable(getattr(cls, name, None)) or isinstance(vars(cls)[name], (staticmethod, classmethod, property)):
            delattr(cls, name)
    for module_name in ("tqdm.auto", "tqdm.autonotebook"):
        module: Any = sys.modules.get(module_name)
        if module is not None:
            from tqdm.std import tqdm, trange

            module.tqdm, module.trange = tqdm, trange
