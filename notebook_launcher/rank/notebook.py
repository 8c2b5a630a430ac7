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
* nothing goes out through the kernel's connection (ipykernel forwards what a process forked from
  a kernel sends): opening a widget comm is refused with a message that says what to do instead,
  and so is changing or closing a widget the kernel made (the notebook's widget would no longer
  match the kernel's); text written to a stream of the kernel's kept from a cell goes to the rank's log;
* ``input()`` and ``getpass.getpass()`` (ipykernel's, which ask the notebook on the kernel's copied
  stdin socket) raise ``EOFError``, as in a script whose stdin is empty, saying what to do instead;
* tqdm's notebook bars the kernel already imported become text bars (one live line per rank);
* Hugging Face Trainer's progress table, which transformers picked when the kernel imported it, is
  drawn by rank 0 alone: the other ranks get the console callback, which draws nothing off rank 0,
  as under torchrun;
* ``exit()``/``quit()`` (the shell's, which only ask an interactive shell to close) end the rank as
  ``sys.exit()`` does, as in a script.

A spawned rank is a fresh interpreter with no shell: only the first part and the refusal of
``input()`` apply there, and its ``display()`` is IPython's replaced by one that sends display
events (``displays.py``).
"""

from __future__ import annotations

import builtins
import functools
import os
import sys
from typing import Any

from ..import_hooks import after_import
from ..wire.script_exit import ScriptExit, shells_exit
from .capture import flush_output
from .displays import DISPLAYED_MIME_TYPES, WIDGETS_REFUSED, route_displays_without_a_shell, send_display

__all__ = [
    "make_safe",
    "WIDGETS_REFUSED",
    "WIDGET_CHANGE_REFUSED",
    "CONNECTION_REFUSED",
    "INPUT_REFUSED",
    "DISPLAYED_MIME_TYPES",
]

WIDGET_CHANGE_REFUSED = (
    "a widget made in the kernel cannot be changed or closed from inside a launched rank (the rank"
    " has no connection to the notebook); return what it should show and set the widget after the launch"
)
CONNECTION_REFUSED = "a launched rank cannot send to the notebook through the kernel's connection"
INPUT_REFUSED = (
    "there is nothing to read inside a launched rank: it has no connection to the notebook and its"
    " stdin is empty, as under torchrun without a terminal; pass what it needs as an argument"
)

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
    shell = _kernel_shell()
    look_like_a_script(shell)
    if shell is not None:
        _route_display(shell, channel)
        _exit_ends_the_rank(shell)
    else:
        route_displays_without_a_shell(channel)
    _refuse_comms()
    _refuse_sending()
    _refuse_input()
    _text_progress_bars()
    _progress_table_on_rank_zero_only()


def _progress_table_on_rank_zero_only() -> None:
    """Off global rank 0, Trainers made from now on take transformers' console progress callback
    (which draws only on the world's process zero) instead of the notebook table it fixed at import."""
    trainer: Any = sys.modules.get("transformers.trainer")
    if trainer is None or os.environ.get("RANK", "0") == "0":
        return
    console = getattr(trainer, "ProgressCallback", None)
    if console is not None and getattr(trainer, "DEFAULT_PROGRESS_CALLBACK", console) is not console:
        trainer.DEFAULT_PROGRESS_CALLBACK = console


def _exit_ends_the_rank(shell: Any) -> None:
    """The cells' ``exit``/``quit`` (in this rank's copy of the namespace) become a script's."""
    for name in ("exit", "quit"):
        if shells_exit(shell.user_ns.get(name)) is not None:
            shell.user_ns[name] = ScriptExit(name)


def _kernel_shell() -> Any:
    """The IPython shell this process inherited from the kernel, or None (a spawned rank)."""
    interactive: Any = sys.modules.get("IPython.core.interactiveshell")
    if interactive is None or not interactive.InteractiveShell.initialized():
        return None
    return interactive.InteractiveShell.instance()


def look_like_a_script(shell: Any) -> None:
    """Remove the markers by which libraries tell an interactive session from a script (``shell``:
    the kernel's IPython shell, or None)."""
    for marker in ("ps1", "ps2"):
        if hasattr(sys, marker):
            delattr(sys, marker)
    for name in _LIGHTNING_INTERACTIVE_FLAGS:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "_IS_INTERACTIVE"):
            module._IS_INTERACTIVE = False  # type: ignore[attr-defined]
    if shell is None:
        return
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


def _route_display(shell: Any, channel: Any) -> None:
    def publish(data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
        send_display(channel, data, (transient or {}).get("display_id"), update)

    shell.display_pub.publish = publish
    shell.display_pub.clear_output = lambda wait=False: None


def _refuse(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError(WIDGETS_REFUSED)


def _refuse_comms() -> None:
    """Opening a comm (a widget) is refused where it starts, ``comm.create_comm``; ipywidgets 7
    makes ipykernel's ``Comm`` itself, which the kernel's refused session stops (``_refuse_sending``)."""
    comm: Any = sys.modules.get("comm")
    if comm is not None and hasattr(comm, "create_comm"):
        comm.create_comm = _refuse


def _refuse_sending() -> None:
    """Whatever would go out through the kernel's connection is stopped at its one way out, the
    kernel's ``Session.send`` (one attribute of one object: a class attribute set in a forked rank
    costs it ~40 copied pages). Comms (a widget opened, changed or closed, whichever ipykernel and
    ipywidgets) raise a ``RuntimeError`` saying what to do instead; text written to one of the
    kernel's own streams (a ``sys.stdout`` kept from a cell), and the result or traceback of a
    ``get_ipython().run_cell``, goes to the rank's log, as a script would print it; anything else
    raises. Without this, ipykernel sends it from the rank, as from any process forked from a
    kernel (its IOPub thread forwards what forked processes send to the notebook)."""
    kernel_class = getattr(sys.modules.get("ipykernel.kernelbase"), "Kernel", None)
    if kernel_class is None or not kernel_class.initialized():  # no kernel was copied (a spawned rank)
        return
    session = getattr(kernel_class.instance(), "session", None)
    if session is not None:
        session.send = _send_nothing


_REFUSED_MESSAGES = {
    "comm_open": WIDGETS_REFUSED,
    "comm_msg": WIDGET_CHANGE_REFUSED,
    "comm_close": WIDGET_CHANGE_REFUSED,
}


def _send_nothing(stream: Any, msg_or_type: Any, content: Any = None, *args: Any, **kwargs: Any) -> None:
    message = msg_or_type if isinstance(msg_or_type, dict) else {"msg_type": msg_or_type, "content": content}
    kind = message.get("msg_type") or message.get("header", {}).get("msg_type")
    printed = _as_printed(kind, message.get("content") or {})
    if printed is None:
        raise RuntimeError(_REFUSED_MESSAGES.get(kind, f"{CONNECTION_REFUSED} (a {kind!r} message)"))
    fd, text = printed
    flush_output()  # what the rank printed before comes first
    data = memoryview(text.encode("utf-8", "replace"))
    while data:
        data = data[os.write(fd, data) :]


def _as_printed(kind: Any, body: dict) -> tuple[int, str] | None:
    """(descriptor, text) a script would print for a message that carries text (a kernel stream's
    output; a result or a traceback of ``get_ipython().run_cell``); None for the others."""
    if kind == "stream":
        return (2 if body.get("name") == "stderr" else 1), str(body.get("text", ""))
    if kind == "execute_result":
        return 1, f"{(body.get('data') or {}).get('text/plain', '')}\n"
    if kind == "error":
        lines = body.get("traceback") or [f"{body.get('ename')}: {body.get('evalue')}"]
        return 2, "\n".join(str(line) for line in lines) + "\n"
    return None


def _no_input(prompt: Any = "") -> str:
    raise EOFError(INPUT_REFUSED)


def _no_password(prompt: Any = "Password: ", stream: Any = None) -> str:
    raise EOFError(INPUT_REFUSED)


def _refuse_input() -> None:
    """``input()`` and ``getpass.getpass()`` raise ``EOFError`` (a script with an empty stdin gets
    one too) with what to do instead: in a forked rank they are ipykernel's, which would ask the
    notebook through the kernel's copied stdin socket and wait for an answer that never comes."""
    builtins.input = _no_input
    getpass: Any = sys.modules.get("getpass")
    if getpass is not None:
        getpass.getpass = _no_password


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
