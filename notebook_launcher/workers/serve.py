"""What a persistent worker rank runs: answer the kernel's calls, one after another, until told to stop.

A worker is an ordinary launched rank (same start methods, capture, notebook safety and cleanup)
whose function is ``serve``. It connects back to the kernel over a Unix socket in a private
directory, proves it belongs to this launch with a token, and then loops: receive a call, run it,
flush its output, and answer on the rank's event channel (``REPLY``), after the output, so the
kernel shows every line a call printed before the call returns. The namespace that ``exec``
calls run in lives as long as the worker.

A call may be interrupted: while one runs, SIGINT raises ``KeyboardInterrupt`` in it (once per call,
however many SIGINTs arrive: the kernel's interrupt can reach the rank both from the terminal's
process group and from the kernel), and the worker goes on to the next call. Between calls SIGINT
is ignored, as in every rank.

Example (what ``start_workers`` launches)::

    launch(serve, args=(address, token), num_processes=2)
"""

from __future__ import annotations

import os
import pickle
import socket
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from ..rank.capture import flush_output
from ..wire import REPLY, dumps_for_kernel, error_report, rank_channel
from .hello import send_hello
from .interrupts import CountedInterrupts
from .source import run_source

__all__ = ["serve"]


def serve(address: str, token: bytes) -> None:
    """Answer calls from the kernel at ``address`` until it says stop or goes away."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    connection = Connection(sock.detach())
    send_hello(connection, token, int(os.environ["RANK"]), os.getpid())
    namespace: dict[str, Any] = {"__name__": "__main__"}
    channel = rank_channel()
    assert channel is not None, "serve runs in a launched rank"
    while True:
        try:
            call_id, kind, payload = connection.recv()
        except (EOFError, OSError):  # the kernel closed the connection: the workers are stopped
            return
        if kind == "stop":
            return
        reply = _answer(call_id, kind, payload, namespace)
        flush_output()
        channel.send(REPLY, reply)


def _answer(call_id: int, kind: str, payload: Any, namespace: dict) -> dict:
    try:
        with CountedInterrupts():
            value = _CALLS[kind](payload, namespace)
        return {"call": call_id, "value": dumps_for_kernel(value)}
    except SystemExit as exc:
        if exc.code in (None, 0):  # as a script's sys.exit(0): the cell ended well on this rank; the worker lives on
            return {"call": call_id, "value": dumps_for_kernel(None)}
        return {"call": call_id, "error": error_report(exc, skip_frame=_answer.__code__)}
    except BaseException as exc:  # the call's failure goes to the kernel; the worker lives on
        return {"call": call_id, "error": error_report(exc, skip_frame=_answer.__code__)}


def _run(payload: bytes, namespace: dict) -> Any:
    import cloudpickle  # noqa: F401  (functions sent by value need it to unpickle)

    function, args = pickle.loads(payload)
    return function(*args)


def _exec(payload: dict, namespace: dict) -> Any:
    value = run_source(payload["source"], namespace, payload["filename"], payload["first_line"])
    if payload.get("as_text"):
        return None if value is None else _shown(value)
    return value


def _pull(name: str, namespace: dict) -> Any:
    try:
        return namespace[name]
    except KeyError:
        raise NameError(f"name {name!r} is not defined on this rank") from None


def _push(payload: bytes, namespace: dict) -> None:
    namespace.update(pickle.loads(payload))


_CALLS: dict[str, Callable[[Any, dict], Any]] = {"run": _run, "exec": _exec, "pull": _pull, "push": _push}


def _shown(value: Any) -> str:
    """The text IPython would show for ``value`` as a cell's result."""
    try:
        from IPython.lib.pretty import pretty

        return pretty(value)
    except ImportError:
        return repr(value)
