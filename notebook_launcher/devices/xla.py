"""XLA ranks (TPU cores, or torch_xla's CPU device with ``PJRT_DEVICE=CPU``), started by torch_xla.

The count comes from the host, never from the XLA runtime (starting it in the kernel would make
the kernel unforkable): ``CPU_NUM_DEVICES`` under ``PJRT_DEVICE=CPU``, else the TPU cores the host
reports. torch_xla runs either one rank or one per core, nothing between.
"""

from __future__ import annotations

import os


class XlaDevice:
    name = "xla"
    backend = "xla"

    def count(self):
        if os.environ.get("PJRT_DEVICE", "").upper() == "CPU":
            return max(1, int(os.environ.get("CPU_NUM_DEVICES", "1")))
        from .inventory import tpu_cores

        cores, _ = tpu_cores()
        return max(cores, 1)

    def default_processes(self):
        return self.count()

    def process_rule(self, num_processes):
        """torch_xla's ``xmp.spawn`` takes nprocs=None (every core) or 1; anything else is refused."""
        if num_processes in (1, self.count()):
            return None
        return (f"num_processes={num_processes} is not possible with torch_xla: it runs either 1 process or one"
                f" rank per core ({self.count()} here); pass num_processes=None or 1")

    def describe(self):
        n = self.count()
        return f"{n} XLA device{'s' if n != 1 else ''}"
