"""XLA start (TPUs; torch_xla's CPU device for tests): one host process runs torch_xla's ``xmp.spawn``.

The kernel forks one *host* process (``rank/xla_host.py``), which calls torch_xla's ``xmp.spawn``;
torch_xla decides how ranks run. Everything after the start is the same as for fork and spawn.
"""

from __future__ import annotations

import importlib

from ...errors import LaunchError
from ...kernel_streams import flush_kernel_streams
from ...rank.capture import before_forking_ranks
from ...rank.xla_host import host_main
from .base import ProcessStarter
from .caller_state import keep_caller_state
from .fork import fork_rank_process


class XlaStarter(ProcessStarter):
    name = "xla"

    def prepare(self, plan):
        """Import torch_xla in the kernel (it does not start the runtime) so the host inherits it."""
        try:
            importlib.import_module("torch_xla")
            importlib.import_module("torch_xla.distributed.xla_multiprocessing")
        except ImportError as err:
            raise LaunchError(
                f"device 'xla' needs torch_xla in this kernel ({err}); on Colab or Kaggle TPUs it is"
                f" preinstalled, elsewhere: pip install torch_xla (matching your torch)"
            ) from err
        before_forking_ranks()
        keep_caller_state()

    def groups(self, plan):
        """Every local rank in one host process: torch_xla starts them."""
        return [list(range(plan.num_processes))]

    def start(self, plan, specs, pipes):
        nprocs = 1 if plan.num_processes == 1 else None
        flush_kernel_streams()
        return fork_rank_process(host_main, (specs, pipes, plan.function, plan.args, nprocs))
