"""Weights on disk: one raw file per tensor plus ``index.json``, mapped into memory when used.

The layout is Accelerate's offload folder (``{name}.dat`` holding the tensor's bytes, and
``index.json`` giving each one's dtype and shape), so either library can read a folder the other
wrote. A tensor is read with ``torch.from_file`` as a private mapping of its file: the pages come
in as the forward pass touches them and leave when the tensor is dropped.

Examples:
    >>> import tempfile, torch
    >>> folder = OffloadFolder(tempfile.mkdtemp())
    >>> folder.write("layer.weight", torch.arange(6.0).reshape(2, 3))
    >>> folder.flush()
    >>> OffloadFolder(folder.path).read("layer.weight")
    tensor([[0., 1., 2.],
            [3., 4., 5.]])
"""

from __future__ import annotations

import ctypes
import json
import math
import os

import torch

__all__ = ["OffloadFolder"]

_INDEX = "index.json"


class OffloadFolder:
    """A folder of offloaded tensors; ``write`` then ``flush`` (the index), ``read`` maps one."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        os.makedirs(self.path, exist_ok=True)
        index_path = os.path.join(self.path, _INDEX)
        self.index: dict[str, dict] = {}
        if os.path.exists(index_path):
            with open(index_path) as file:
                self.index = json.load(file)

    def __contains__(self, name: str) -> bool:
        return name in self.index

    def write(self, name: str, tensor: torch.Tensor) -> None:
        """Store ``tensor`` (any device) under ``name``."""
        tensor = tensor.detach().to("cpu").contiguous()
        with open(self._file(name), "wb") as file:
            file.write(ctypes.string_at(tensor.data_ptr(), tensor.numel() * tensor.element_size()))
        self.index[name] = {"dtype": str(tensor.dtype).replace("torch.", ""), "shape": list(tensor.shape)}

    def flush(self) -> None:
        """Write the index (after the tensors, so a folder with an index is complete)."""
        partial = os.path.join(self.path, _INDEX + ".partial")
        with open(partial, "w") as file:
            json.dump(self.index, file, indent=2)
        os.replace(partial, os.path.join(self.path, _INDEX))

    def read(self, name: str) -> torch.Tensor:
        """The tensor stored under ``name``, mapped from its file (not read into memory up front)."""
        info = self.index[name]
        shape = tuple(info["shape"])
        dtype = getattr(torch, info["dtype"])
        count = math.prod(shape)
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        # a private (copy-on-write) mapping of the file: pages are read as they are touched
        return torch.from_file(self._file(name), shared=False, size=count, dtype=dtype).reshape(shape)

    def _file(self, name: str) -> str:
        return os.path.join(self.path, f"{name}.dat")
