"""Fork start: each rank is a copy of the kernel, so cell-defined code and data need no pickling.

Data built in the kernel is shared copy-on-write. Before forking, lazy imports that every rank would
otherwise do on its own (``torch._dynamo``, pulled in by building an optimizer) are done once in
the kernel, so the ranks inherit them: measured, this takes seconds off every launch. Usually the
background warm-up (``starters.warmup``) has done it by the time a launch starts; a launch waits
for it to finish. No device is touched.
"""

from __future__ import annotations

import importlib
import multiprocessing
import sys

from ..interrupt_routing import interrupts_blocked
from ..rank.bootstrap import run_rank_process
from ..rank.global_state import GlobalState
from .base import ProcessStarter, StartedProcess
from .warmup import TORCH_MODULES, wait_for_warmup


class ForkStarter(ProcessStarter):
    name = "fork"

    def prepare(self, plan):
        # Python reseeds ``random`` in every forked child: the ranks get the kernel's state back
        self._global_state = GlobalState.lost_in_a_fork()
        wait_for_warmup(waiter="notebook-launcher: the launch")
        if "torch" in sys.modules:
            for module in TORCH_MODULES:
                importlib.import_module(module)

    def start(self, plan, specs, pipes):
        (spec,) = specs
        context = multiprocessing.get_context("fork")
        process = context.Process(
            target=_fork_main,
            args=(spec, pipes, plan.function, plan.args, self._global_state),
            name=f"notebook-launcher-rank-{spec.rank}",
        )
        with interrupts_blocked():  # the rank holds an interrupt meant for the kernel until it has its group
            process.start()
        return ForkedProcess(process)


def _fork_main(spec, pipes, function, args, global_state):
    global_state.restore()
    sys.exit(run_rank_process(spec, pipes, lambda: (function, args)))


class ForkedProcess(StartedProcess):
    def __init__(self, process):
        self._process = process
        super().__init__(process.pid, process.sentinel)

    def wait(self, timeout=None):
        self._process.join(timeout)
        return self._process.exitcode

    def release(self):
        self._process.join()
        self._process.close()
        super().release()
