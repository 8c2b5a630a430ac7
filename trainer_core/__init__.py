"""trainer_core: an Accelerator that runs the same training code on 1 CPU, N CPUs and N GPUs.

Example:
    >>> from trainer_core import Accelerator, set_seed
    >>> set_seed(0)
    >>> accelerator = Accelerator()
    >>> accelerator.num_processes
    1
"""

from .accelerator import Accelerator
from .seeding import set_seed
from .state import DistributedState

__all__ = ["Accelerator", "set_seed", "DistributedState"]
