"""Inside a rank: look like a script, and make the notebook machinery a fork inherits safe.

A rank is not interactive: nobody types into it. Libraries that take a notebook path when they
think they are in one (tqdm.auto's widget bar, Hugging Face Trainer's HTML progress table,
Lightning Fabric's refusal of ``strategy="ddp"``) must take their script path there. ``make_safe()``
(run by the rank bootstrap) therefore makes a rank look like a script:

* ``sys.ps1``/``sys.ps2`` (Python's "interactive" markers) are removed, and Lightning's cached
  ``_IS_INTERACTIVE`` flags, computed when the kernel imported it, are cleared;
* ``get_ipython()`` (IPython's function and the builtin name cells see) still returns the shell
  (``display()`` keeps working), but its ``config`` no longer says ``IPKernelApp``, the marker
  tqdm.autonotebook and transformers test for notebooks, and its class is not the
  ``ZMQInteractiveShell`` rich tests for; IPython, ipykernel and matplotlib's inline backend (which
  configures the shell for figures, whatever the kernel imported) get the shell itself.

A forked rank also holds copies of the kernel's IPython shell, its ZeroMQ sockets and its comm
machinery; used from the rank they would corrupt the kernel's connection. So:

* ``display()`` (and matplotlib's inline figures, which go through it) sends the mime bundle to the
  kernel as a "display" event, with its display id: the rank's tab shows it, an update replaces it;
* opening a widget comm is refused with a message that says what to do instead;
* tqdm's notebook bars the kernel already imported become text bars (one live line per rank).

A spawned rank is a fresh interpreter with no shell: only the first part applies there, and its
``display()`` is IPython's replaced by one that sends display events (``displays.py``).
"""

from __future__ import annotations

import builtins
import functools
import sys
from typing import Any

from ..import_hooks import after_import
from .displays import DISPLAYED_MIME_TYPES, WIDGETS_REFUSED, route_displays_without_a_shell, send_display

__all__ = ["make_safe", "WIDGETS_REFUSED", "DISPLAYED_MIME_TYPES"]

# The modules of Lightning that compute, or import, its "interactive session" flag at import time. Looked
# up by name: iterating sys.modules in a forked rank would touch (and so copy) thousands of pages.
_LIGHTNING_INTERACTIVE_FLAGS = tuple(
    f"{package}.{module}"
    for package, modules in (
        ("lightning.fabric", ("utilities.imports", "connector", "strategies.launchers.multiprocessing")),
        ("lightning_fabric", ("utilities.imports", "connector", "strategies.launchers.multiprocessing")),
        ("lightning.pytorch", ("trainer.connectors.accelerator_connector", "callbacks.progress.rich_progress")),
        ("pytorch_lightning", ("trainer.connectors.accelerator_connector", "callbacks.progress.rich_progress")),
    )
    for module in modules
)


# modules that get the real shell from get_ipython(): they configure it, and never mistake a rank for a notebook
_SHELL_FAMILY = ("IPython", "ipykernel", "matplotlib_inline")


def make_safe(channel: Any) -> None:
    look_like_a_script()
    _route_display(channel)
    route_displays_without_a_shell(channel)
    _refuse_comms()
    _text_progress_bars()


def look_like_a_script() -> None:
    """Remove the markers by which libraries tell an interactive session from a script."""
    for marker in ("ps1", "ps2"):
        if hasattr(sys, marker):
            delattr(sys, marker)
    for name in _LIGHTNING_INTERACTIVE_FLAGS:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "_IS_INTERACTIVE"):
            module._IS_INTERACTIVE = False  # type: ignore[attr-defined]
    interactive: Any = sys.modules.get("IPython.core.interactiveshell")
    if interactive is None or not interactive.InteractiveShell.initialized():
        return
    shell = interactive.InteractiveShell.instance()
    script_like = _ScriptLikeShell(shell)

    def get_ipython() -> Any:
        """The script-like shell, except to the shell's own family (matplotlib's inline backend
        configures the real shell, and refuses anything else)."""
        caller = sys._getframe(1).f_globals.get("__name__") or ""
        return shell if caller.partition(".")[0] in _SHELL_FAMILY else script_like

    getipython: Any = sys.modules.get("IPython.core.getipython")
    ipython: Any = sys.modules.get("IPython")
    for module in (getipython, ipython):
        if module is not None:
            module.get_ipython = get_ipython
    if hasattr(builtins, "get_ipython"):  # the name IPython puts in every cell's namespace (rich reads it)
        builtins.get_ipython = get_ipython


class _ScriptLikeShell:
    """The kernel's shell as a rank sees it: the same, except that its config has no IPKernelApp."""

    def __init__(self, shell: Any) -> None:
        self._shell = shell

    @functools.cached_property
    def config(self) -> Any:
        """Made when first read: a forked rank copies each page it touches, and most never read it."""
        config = self._shell.config
        return type(config)({key: value for key, value in config.items() if key != "IPKernelApp"})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shell, name)


def _route_display(channel: Any) -> None:
    interactive: Any = sys.modules.get("IPython.core.interactiveshell")
    if interactive is None or not interactive.InteractiveShell.initialized():
        return
    shell = interactive.InteractiveShell.instance()

    def publish(data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
        send_display(channel, data, (transient or {}).get("display_id"), update)

    shell.display_pub.publish = publish
    shell.display_pub.clear_output = lambda wait=False: None


def _refuse(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError(WIDGETS_REFUSED)


def _refuse_comms() -> None:
    comm: Any = sys.modules.get("comm")
    if comm is not None and hasattr(comm, "create_comm"):
        comm.create_comm = _refuse
    kernel_comm: Any = sys.modules.get("ipykernel.comm")
    if kernel_comm is not None and hasattr(kernel_comm, "Comm"):
        kernel_comm.Comm.__init__ = _refuse


def _text_progress_bars() -> None:
    """tqdm's notebook bar, whenever the rank has it (imported by the kernel before the fork, or by
    the rank later, as ``tqdm.auto`` does), becomes the text bar it subclasses."""
    after_import("tqdm.notebook", _strip_notebook_bar)


def _strip_notebook_bar(notebook: Any) -> None:
    cls = notebook.tqdm_notebook
    for name in [name for name in vars(cls) if name not in ("__module__", "__doc__", "__qualname__")]:
        if callable(getattr(cls, name, None)) or isinstance(vars(cls)[name], (staticmethod, classmethod, property)):
            delattr(cls, name)
    for module_name in ("tqdm.auto", "tqdm.autonotebook"):
        module: Any = sys.modules.get(module_name)
        if module is not None:
            from tqdm.std import tqdm, trange

            module.tqdm, module.trange = tqdm, trange
