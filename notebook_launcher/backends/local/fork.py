"""Fork start: each rank is a copy of the kernel, so cell-defined code and data need no pickling.

Data built in the kernel is shared copy-on-write. Before forking, lazy imports that every rank would
otherwise do on its own (``torch._dynamo``, pulled in by building an optimizer) are done once in
the kernel, so the ranks inherit them: measured, this takes seconds off every launch. Usually the
background warm-up (``backends.local.warmup``) has done it by the time a launch starts; a launch waits
for it to finish. A function that compiles (``compiling.expected``) has torch and Inductor imported
here too: seconds of CPU once, instead of once per rank. No device is touched.
"""

from __future__ import annotations

import importlib
import sys

from ...compiling import COMPILER_MODULES, compiles
from ...interrupt_routing import interrupts_blocked
from ...kernel_streams import flush_kernel_streams
from ...rank.bootstrap import run_rank_process
from ...rank.capture import WATCHED_SIGNALS, before_forking_ranks
from ...rank.global_state import GlobalState
from .base import ProcessStarter
from .caller_state import keep_caller_state
from .forked_process import fork_process
from .frozen_gc import frozen_for_fork
from .served_sockets import close_descriptors, served_sockets
from .warmup import TORCH_MODULES, wait_for_warmup


class ForkStarter(ProcessStarter):
    name = "fork"

    def prepare(self, plan):
        # Python reseeds ``random`` in every forked child: the ranks get the kernel's state back
        self._global_state = GlobalState.lost_in_a_fork()
        before_forking_ranks()
        keep_caller_state()
        self._flushed = False
        wait_for_warmup(waiter="notebook-launcher: the launch")
        modules: tuple[str, ...] = TORCH_MODULES if "torch" in sys.modules else ()
        if compiles(plan.function):  # torch and Inductor imported here once, not in every rank
            modules = COMPILER_MODULES
        for module in modules:
            importlib.import_module(module)

    def start(self, plan, specs, pipes):
        (spec,) = specs
        if not self._flushed:  # here, after the launch's own display (which flushes them too)
            flush_kernel_streams()
            self._flushed = True
        return fork_rank_process(_fork_main, (spec, pipes, plan.function, plan.args, self._global_state))


def fork_rank_process(target, args):
    """Fork a process that runs ``target(*args)`` and sets itself up as a rank (``rank.bootstrap``);
    the started ``ForkedProcess`` (``forked_process``). Call ``before_forking_ranks`` and
    ``flush_kernel_streams`` once per launch first. The process first closes its copies of the
    kernel's server sockets (``served_sockets``), read in the process itself: a list noted in the
    kernel before the fork misses a connection the kernel accepted since, and names descriptors the
    kernel may have closed and reused since (a socket the function should keep).

    The kernel's objects are frozen for the garbage collector while it forks (``frozen_gc``: a
    rank's collections never examine, and so never copy, them). The process holds an interrupt
    meant for the kernel until it leads its own group, and is born
    with the signals its output thread takes blocked: a thread that a library's fork handler starts
    in it (libtorch's, once the kernel ran parallel ops) would otherwise take the kernel's SIGTERM
    (ending it unflushed) and its requests for stacks (never answered).
    """
    with interrupts_blocked(also=WATCHED_SIGNALS), frozen_for_fork():
        return fork_process(_without_served_sockets, (target, args))


def _without_served_sockets(target, args):
    close_descriptors(served_sockets())
    return target(*args)


def _fork_main(spec, pipes, function, args, global_state):
    global_state.restore()
    return run_rank_process(spec, pipes, lambda: (function, args))
