"""The torch_xla host process: forked from the kernel, it runs ``xmp.spawn`` and every XLA rank.

torch_xla decides how ranks run: one process per chip (TPU v4 and later), four processes of two
threads (v2/v3), or, for ``nprocs=1``, in the calling process. The host calls
``xmp.spawn(..., start_method="fork")`` (never the kernel, which would start the XLA runtime there);
every rank inherits the host's channel.

Because ranks may be threads of one process, their file descriptors are shared: Python output is
told apart by a thread-aware ``sys.stdout``/``sys.stderr`` that sends each rank's lines as its own
events, and frames are written under a lock shared by all processes of the host. Output written by
C code to the descriptors is shown as the first rank's. ``xmp.spawn`` returns nothing: return values
come back through the channel, as under fork and spawn.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import sys
import threading

from ..wire import OUTPUT, last_frame
from .bootstrap import DESCENDANTS_GRACE, die_with_parent, prepare_process, run_rank
from .descendants import end_descendants

_host = None  # set in the host before xmp.spawn; rank processes inherit it by fork, threads share it


class _Host:
    def __init__(self, channel, router, function, args):
        self.pid = os.getpid()
        self.channel, self.router, self.function, self.args = channel, router, function, args


def host_main(specs, pipes, function, args, nprocs):
    global _host
    lock = multiprocessing.get_context("fork").Lock()
    channel = prepare_process(specs[0], pipes, channel_lock=lock)
    router = RankOutput(channel, sys.stdout, sys.stderr)
    sys.stdout, sys.stderr = router.stream("stdout"), router.stream("stderr")
    import torch_xla.distributed.xla_multiprocessing as xmp

    # xmp.spawn pickles its args for some layouts: everything travels through _host instead
    _host = _Host(channel, router, function, args)
    xmp.spawn(_rank_main, nprocs=nprocs, start_method="fork")
    end_descendants(DESCENDANTS_GRACE)
    sys.exit(0)


def _rank_main(index):
    import torch_xla.runtime as xr

    host = _host
    assert host is not None, "set by host_main before xmp.spawn"
    if os.getpid() != host.pid:  # a rank process of the host's: it must not outlive the host either
        die_with_parent(host.pid)
    rank = xr.global_ordinal()
    host.router.bind(rank)
    try:
        run_rank(host.channel, rank, lambda: (host.function, host.args))
    finally:
        host.router.release(rank)


class RankOutput:
    """``sys.stdout``/``sys.stderr`` for a process whose ranks are threads or forks of it.

    Text written on a thread bound to a rank becomes that rank's lines (sent as events, a carriage
    return rewriting the line as on a terminal); text from unbound threads goes to the process's own
    streams.

    Examples:
        >>> from notebook_launcher.wire import ChannelWriter, FrameReader
        >>> r, w = os.pipe()
        >>> out = RankOutput(ChannelWriter(w), sys.stdout, sys.stderr)
        >>> out.bind(3); print("hello", file=out.stream("stdout"))
        >>> [(kind, payload, rank) for kind, payload, _, rank in FrameReader().feed(os.read(r, 4096))]
        [('output', ('stdout', 'hello\\n'), 3)]
    """

    def __init__(self, channel, stdout, stderr):
        self._channel = channel
        self._fallback = {"stdout": stdout, "stderr": stderr}
        self._local = threading.local()
        self._partial = {}
        self._lock = threading.Lock()

    def stream(self, name):
        return _RankStream(self, name)

    def bind(self, rank):
        self._local.rank = rank

    def release(self, rank):
        """Send what the rank left without a newline, and unbind the thread."""
        for name in ("stdout", "stderr"):
            with self._lock:
                rest = self._partial.pop((rank, name), "")
            if rest:
                self._channel.send(OUTPUT, (name, last_frame(rest) + "\n"), rank=rank)
        self._local.rank = None

    def write(self, name, text):
        rank = getattr(self._local, "rank", None)
        if rank is None:
            return self._fallback[name].write(text)
        with self._lock:
            *lines, self._partial[(rank, name)] = (self._partial.get((rank, name), "") + text).split("\n")
        for line in lines:
            self._channel.send(OUTPUT, (name, last_frame(line) + "\n"), rank=rank)
        return len(text)

    def fileno(self, name):
        return self._fallback[name].fileno()


class _RankStream(io.TextIOBase):
    def __init__(self, output, name):
        self._output = output
        self._name = name

    def write(self, text):
        return self._output.write(self._name, text)

    def flush(self):
        pass

    def fileno(self):
        return self._output.fileno(self._name)

    def isatty(self):
        return False

    @property
    def encoding(self):  # type: ignore[override]
        return "utf-8"
