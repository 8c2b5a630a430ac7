"""Torch counts GPUs through NVML in any process that imports the package, so counting never
initializes CUDA there (``torch.cuda.is_available()`` and ``device_count()`` read
``PYTORCH_NVML_BASED_CUDA_CHECK``). Imported first by the package, before anything could import torch.

``SET_HERE`` says whether the package set the variable (rather than the user or the environment):
the Jupyter server extension removes it again, so the server's kernels do not inherit the server's.

Examples:
    >>> import os
    >>> os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"]
    '1'
"""

import os

__all__ = ["SET_HERE"]

SET_HERE = "PYTORCH_NVML_BASED_CUDA_CHECK" not in os.environ
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
