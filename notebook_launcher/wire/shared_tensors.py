"""Large CPU tensors travel from a rank to the kernel through shared memory, not through the pipe.

Pickling a 200 MB state dict through a pipe costs seconds (the bytes are copied into the pickle,
through the pipe in 1 MiB pieces, and out again). Instead, when a rank pickles its return value,
each CPU tensor storage of at least ``MIN_BYTES`` is copied once into a file of its own in
``/dev/shm`` (a memory file system), and the pickle carries only the file's name; the kernel maps
the file, unlinks it at once and builds the tensor on the mapped memory, so it costs one copy in
the rank and none in the kernel. As with ``torch.multiprocessing``'s reductions, views of one
storage stay views of one storage, and ``nn.Parameter`` stays a parameter.

Files are named after the launch (``<dir>/notebook-launcher-<kernel pid>-<id>-...``): the kernel
removes whatever a rank wrote but the kernel never loaded (a rank killed after writing, a value the
kernel could not unpickle) when the attempt ends, and files of kernels that have died on the next
launch. When shared memory is short (a container's 64 MB ``/dev/shm``) a tensor goes in-band, as
before: space is reserved with ``posix_fallocate`` first, so a full file system is an error the
rank sees, never a SIGBUS.

Example (a rank's side, then the kernel's):
    >>> import io, pickle, torch
    >>> prefix = new_prefix()
    >>> sharer = TensorSharer(prefix)
    >>> class Sharing(pickle.Pickler):
    ...     reducer_override = staticmethod(sharer.reduce)
    >>> weights = torch.arange(1 << 20, dtype=torch.float32)
    >>> buffer = io.BytesIO(); Sharing(buffer, protocol=5).dump({"w": weights, "head": weights[:4]})
    >>> len(buffer.getvalue()) < 1000  # the 4 MB are in a shared file, not in the pickle
    True
    >>> loaded = pickle.loads(buffer.getvalue())
    >>> torch.equal(loaded["w"], weights), loaded["head"].data_ptr() == loaded["w"].data_ptr()
    (True, True)
    >>> remove_leftovers(prefix)  # loading unlinked the file already
    0
"""

from __future__ import annotations

import contextlib
import glob
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from ..scratch import pid_alive

__all__ = ["MIN_BYTES", "TensorSharer", "keeping_files", "new_prefix", "remove_leftovers", "sweep_dead_kernels"]

MIN_BYTES = 1 << 20  # smaller storages are cheaper in the pickle than in a file of their own
_NAME = "notebook-launcher-"


def scratch_dir() -> str | None:
    """Where shared files go: ``NOTEBOOK_LAUNCHER_SHARED_DIR`` if set ("off": nowhere, every
    tensor goes in-band), else ``/dev/shm`` when it is there and writable, else the temp directory."""
    chosen = os.environ.get("NOTEBOOK_LAUNCHER_SHARED_DIR")
    if chosen:
        return None if chosen == "off" else chosen
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


def new_prefix() -> str | None:
    """A fresh path prefix for the files of one launch attempt of this kernel (None: sharing is off)."""
    where = scratch_dir()
    return None if where is None else os.path.join(where, f"{_NAME}{os.getpid()}-{os.urandom(5).hex()}-")


def remove_leftovers(prefix: str | None) -> int:
    """Unlink every file under ``prefix``; returns how many there were."""
    if prefix is None:
        return 0
    where, start = os.path.split(prefix)
    removed = 0
    try:
        entries = [entry.path for entry in os.scandir(where) if entry.name.startswith(start)]
    except FileNotFoundError:
        return 0
    for path in entries:
        try:
            os.unlink(path)
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def sweep_dead_kernels() -> int:
    """Unlink the files of kernels that died before they could (their pid no longer runs)."""
    removed, where = 0, scratch_dir()
    if where is None:
        return 0
    for path in glob.glob(os.path.join(where, _NAME + "*")):
        pid = os.path.basename(path)[len(_NAME) :].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            try:
                os.unlink(path)
                removed += 1
            except OSError:
                pass
    return removed


class _SharedFile:
    """One storage written to a file; pickled as the call that maps it in the kernel.

    Pickle memoizes it, so tensors that share a storage share the mapped storage after loading.
    """

    __slots__ = ("nbytes", "path")

    def __init__(self, path: str, nbytes: int) -> None:
        self.path, self.nbytes = path, nbytes

    def __reduce__(self) -> tuple:
        return map_shared_file, (self.path, self.nbytes)


class TensorSharer:
    """Turns large CPU tensors into shared files while a rank pickles (a pickler's ``reducer_override``).

    One sharer serves every pickling attempt of one value, so a retry (by value with cloudpickle)
    reuses the files the first attempt wrote.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._files: dict[int, tuple[Any, _SharedFile]] = {}  # storage pointer -> (storage, file)
        self._full = False  # shared memory ran out: the rest goes in-band

    def reduce(self, obj: Any) -> Any:
        """The reduction of ``obj`` if it is a tensor worth sharing, else ``NotImplemented``."""
        torch = sys.modules.get("torch")
        if torch is None or self._full or not isinstance(obj, torch.Tensor) or not _shareable(obj, torch):
            return NotImplemented
        storage = obj.untyped_storage()
        if storage.nbytes() < MIN_BYTES:
            return NotImplemented
        shared = self._file_for(storage)
        if shared is None:
            return NotImplemented
        parameter = isinstance(obj, torch.nn.Parameter)
        return rebuild_tensor, (
            shared,
            obj.dtype,
            tuple(obj.size()),
            tuple(obj.stride()),
            obj.storage_offset(),
            obj.requires_grad,
            parameter,
        )

    def _file_for(self, storage: Any) -> _SharedFile | None:
        key = storage.data_ptr()
        if key in self._files:
            return self._files[key][1]
        path = f"{self.prefix}{os.getpid()}-{len(self._files)}"
        nbytes = storage.nbytes()
        try:
            _write(path, storage, nbytes)
        except OSError:
            self._full = True
            return None
        shared = _SharedFile(path, nbytes)
        self._files[key] = (storage, shared)  # the storage is kept so its pointer is not reused
        return shared


def _shareable(tensor: Any, torch: Any) -> bool:
    return (
        type(tensor) in (torch.Tensor, torch.nn.Parameter)
        and tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and not tensor.is_quantized
        and not tensor.is_conj()
        and not tensor.is_neg()
        and (tensor.is_leaf or not tensor.requires_grad)  # a non-leaf keeps torch's own error
        and not getattr(tensor, "__dict__", None)  # attributes set on the tensor: torch's pickling keeps them
    )


def _write(path: str, storage: Any, nbytes: int) -> None:
    import torch

    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, nbytes)  # tmpfs reserves the pages now, or says ENOSPC
        except OSError:
            os.unlink(path)
            raise
    finally:
        os.close(fd)
    target = torch.UntypedStorage.from_file(path, shared=True, nbytes=nbytes)
    target.copy_(storage)


_keeping = threading.local()


@contextlib.contextmanager
def keeping_files() -> Iterator[None]:
    """Load shared tensors on this thread without unlinking their files: a rank checking that what
    it pickled loads back leaves the files for the kernel.

    Examples:
        >>> with keeping_files():
        ...     pass
    """
    _keeping.on = True
    try:
        yield
    finally:
        _keeping.on = False


def map_shared_file(path: str, nbytes: int) -> Any:
    """Map a shared file as a storage and unlink it (the mapping keeps the memory alive)."""
    import torch

    try:
        return torch.UntypedStorage.from_file(path, shared=True, nbytes=nbytes)
    finally:
        if not getattr(_keeping, "on", False):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def rebuild_tensor(
    storage: Any,
    dtype: Any,
    size: tuple,
    stride: tuple,
    offset: int,
    requires_grad: bool,
    parameter: bool,
) -> Any:
    """The tensor a rank returned, on its mapped storage."""
    import torch

    tensor = torch.empty((0,), dtype=dtype).set_(storage, offset, size, stride)
    if parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad) if requires_grad else tensor
