"""The checks every argument of a launch goes through before any process starts.

Each is a small function whose message names the argument, what was wrong with it and what to
do; ``plan.make_plan`` calls them in order.

Examples:
    >>> check_seconds("timeout", 30)
    30.0
    >>> check_seconds("timeout", float("nan"), none_ok=True)
    Traceback (most recent call last):
    ...
    ValueError: timeout must be a number of seconds > 0 and at most 2592000 (30 days), or None for no limit, got nan
"""

from __future__ import annotations

import math
import os

from ..choices import is_int

__all__ = [
    "MAX_SECONDS",
    "SECRET_VARIABLE",
    "check_address",
    "check_count",
    "check_endpoint",
    "check_flush_interval",
    "check_function",
    "check_nodes",
    "check_port_number",
    "check_prefix",
    "check_rdzv_conf",
    "check_secret",
    "check_seconds",
    "check_working_directory",
]


def check_working_directory():
    """The kernel's working directory, which every rank starts in; a deleted one is refused by name
    (``os.getcwd()`` fails in the kernel, and a spawned rank cannot even load torch there).

    Examples:
        >>> check_working_directory() == os.getcwd()
        True
    """
    try:
        return os.getcwd()
    except FileNotFoundError:
        raise FileNotFoundError(
            "the kernel's working directory was deleted, and every rank starts in it: os.chdir() to a folder"
            " that exists (the notebook's, say) and launch again"
        ) from None


def check_function(function, args):
    if not callable(function):
        raise TypeError(f"function must be callable, got {type(function).__name__}: {function!r}")
    kind = _lazy_kind(function)
    if kind:
        raise TypeError(
            f"function {getattr(function, '__qualname__', function)!r} is {kind}: calling it on a rank would only"
            " create that object, not run the body. Launch a plain function (e.g. one that runs it with"
            " asyncio.run(...) or list(...))"
        )
    if not isinstance(args, (tuple, list)):
        raise TypeError(
            f"args must be a tuple or list of positional arguments, got {type(args).__name__}"
            f" (for one argument write args=({args!r},))"
        )


def _lazy_kind(function):
    """What calling ``function`` makes instead of running it ("a generator function", ...), or ""."""
    import inspect

    for test, kind in (
        (inspect.isasyncgenfunction, "an async generator function"),
        (inspect.iscoroutinefunction, "an async def function"),
        (inspect.isgeneratorfunction, "a generator function"),
    ):
        if test(function):
            return kind
    return ""


def check_address(name, address):
    """A host name or IP address (not empty: an empty one would bind every interface)."""
    if not isinstance(address, str) or not address.strip() or any(char.isspace() for char in address):
        raise ValueError(f"{name} must be a host name or IP address such as '127.0.0.1', got {address!r}")


def check_endpoint(endpoint):
    """c10d's ``host:port`` (or "" for ``master_addr:use_port``)."""
    if endpoint in (None, ""):
        return ""
    host, _, port = str(endpoint).rpartition(":") if isinstance(endpoint, str) else ("", "", "")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"rdzv_endpoint must be 'host:port' (or '' for master_addr:use_port), got {endpoint!r}")
    check_address("rdzv_endpoint's host", host.strip("[]"))
    return endpoint


def check_flush_interval(default):
    """``NOTEBOOK_LAUNCHER_FLUSH_INTERVAL`` (seconds between a rank's output flushes), or ``default``
    when it is unset. Read in the kernel, so a bad value is one clear error here rather than a failure
    of every rank, and each rank is told the value instead of reading its environment.

    Examples:
        >>> check_flush_interval(0.05)  # unset
        0.05
    """
    import os

    value = os.environ.get("NOTEBOOK_LAUNCHER_FLUSH_INTERVAL")
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (0 < seconds <= 86400):
        raise ValueError(
            f"NOTEBOOK_LAUNCHER_FLUSH_INTERVAL must be a number of seconds in (0, 86400], got {value!r};"
            f" unset it for the default ({default})"
        )
    return seconds


def check_port_number(use_port):
    """None or a port number; digit strings (Accelerate's ``use_port="29500"`` style) become ints."""
    port = int(use_port) if isinstance(use_port, str) and use_port.isdigit() else use_port
    if port is not None and (not is_int(port) or not 0 < port < 65536):
        raise ValueError(f"use_port must be None or a port number in 1..65535, got {use_port!r}")
    return port


def check_nodes(num_nodes, node_rank, use_port, backend="static", endpoint=""):
    if not is_int(num_nodes) or num_nodes < 1:
        raise ValueError(f"num_nodes must be a positive int, got {num_nodes!r}")
    if not is_int(node_rank) or not 0 <= node_rank < num_nodes:
        raise ValueError(f"node_rank must be an int in [0, {num_nodes}), got {node_rank!r}")
    if num_nodes > 1 and use_port is None and not (backend == "c10d" and endpoint):
        raise ValueError("with num_nodes > 1 every node must agree on the port: pass use_port= (and master_addr=)")


MAX_SECONDS = 30 * 24 * 3600.0  # the longest time any setting may name (30 days)


def check_seconds(name, value, none_ok=False, zero_ok=False):
    """A finite number of seconds (> 0, or >= 0 with ``zero_ok``, at most ``MAX_SECONDS``), or None
    with ``none_ok``. NaN and infinity are refused: NaN compares false with every deadline (a timer
    that never fires), and "no limit" is None.

    Examples:
        >>> check_seconds("timeout", 10**400)
        Traceback (most recent call last):
        ...
        ValueError: timeout must be a number of seconds > 0 and at most 2592000 (30 days), got an int of 401 digits
    """
    if value is None and none_ok:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    finite = number and (isinstance(value, int) or math.isfinite(value))  # an int is finite, if too big for a float
    if not finite or value < 0 or (value == 0 and not zero_ok) or value > MAX_SECONDS:
        allowed = (
            "a number of seconds "
            + (">= 0" if zero_ok else "> 0")
            + f" and at most {MAX_SECONDS:.0f} (30 days)"
            + (", or None for no limit" if none_ok else "")
        )
        shown = f"an int of {len(str(abs(value)))} digits" if number and finite and abs(value) > 10**30 else repr(value)
        raise ValueError(f"{name} must be {allowed}, got {shown}")
    return float(value)


def check_count(name, value):
    if not is_int(value) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return value


# torch elastic's own tuning of its dynamic rendezvous: accepted (torchrun and Accelerate pass them),
# nothing to tune in ours
_TORCH_RDZV_KNOBS = (
    "last_call_timeout",
    "close_timeout",
    "read_timeout",
    "keep_alive_interval",
    "keep_alive_max_attempt",
    "timeout",
    "is_host",
    "use_libuv",
)


def check_rdzv_conf(conf):
    if conf is None:
        return {}
    if not isinstance(conf, dict):
        raise ValueError(f"rdzv_conf must be a dict of rendezvous settings or None, got {type(conf).__name__}")
    unknown = sorted(str(key) for key in conf if key not in ("join_timeout", *_TORCH_RDZV_KNOBS))
    if unknown:
        raise ValueError(
            f"rdzv_conf has settings notebook_launcher does not know: {', '.join(unknown)}; it takes"
            " join_timeout (torch elastic's own tuning settings are accepted and have no effect)"
        )
    return {key: value for key, value in conf.items() if key == "join_timeout"}


SECRET_VARIABLE = "NOTEBOOK_LAUNCHER_SECRET"


def check_secret(secret, num_nodes):
    """The key that signs the nodes' messages: ``secret`` or ``NOTEBOOK_LAUNCHER_SECRET``, the same on
    every node (required with several nodes); a random one a single node keeps to itself."""
    import os
    import secrets

    if secret is None:
        secret = os.environ.get(SECRET_VARIABLE)
    if secret is None:
        if num_nodes > 1:
            raise ValueError(
                "with num_nodes > 1 the nodes must share a secret that signs their messages (the rendezvous"
                f" store itself has no authentication): pass the same secret= on every node, or set {SECRET_VARIABLE};"
                " e.g. secrets.token_hex(16), sent to the other machines as you would a password"
            )
        return secrets.token_bytes(16)
    if isinstance(secret, str):
        secret = secret.encode()
    if not isinstance(secret, bytes) or len(secret) < 8:
        raise ValueError(f"secret must be a str or bytes of at least 8 characters (got {type(secret).__name__})")
    return secret


def check_prefix(template):
    """torchrun's ``log_line_prefix_template``: may use {rank}, {local_rank} and {role_name}."""
    if template is None:
        return
    if not isinstance(template, str):
        raise ValueError(f"log_line_prefix_template must be a str or None, got {type(template).__name__}")
    try:
        template.format(rank=0, local_rank=0, role_name="default")
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(
            f"log_line_prefix_template={template!r} may use only {{rank}}, {{local_rank}} and {{role_name}}: {err}"
        ) from None
