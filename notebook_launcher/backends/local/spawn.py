"""Spawn start: each rank is a fresh interpreter; the function and args travel by value (cloudpickle).

Used when the kernel cannot be forked (CUDA already initialized there) or when asked for. Functions
and classes defined in notebook cells work because cloudpickle sends them by value. The payload is
pickled once, in the kernel, before any rank starts, so an argument that cannot be pickled is
reported by name and nothing runs. It is held in an anonymous file (``scratch.anonymous_file``:
no folder names it, so no other process of the user finds the arguments there) whose descriptor
each rank inherits. Each rank is ``python -m notebook_launcher.rank.spawn_main`` with its pipes
and the payload passed as file descriptors and its environment set before the interpreter starts
(so ``OMP_NUM_THREADS`` applies to torch's thread pool).
"""

from __future__ import annotations

import base64
import os
import pickle
import subprocess
import sys

from ...scratch import anonymous_file
from ..payload import payload_file_bytes
from .base import ProcessStarter, StartedProcess


class SpawnStarter(ProcessStarter):
    name = "spawn"

    def __init__(self):
        self._payload = None

    def prepare(self, plan):
        self._payload = anonymous_file(payload_file_bytes(plan.function, plan.args))

    @property
    def payload_fd(self) -> int:
        """The descriptor of the payload file, which a rank inherits."""
        assert self._payload is not None, "prepare() runs before start()"
        return self._payload.fileno()

    def start(self, plan, specs, pipes):
        (spec,) = specs
        payload = self.payload_fd
        death_r, death_w = os.pipe()
        encoded = base64.b64encode(pickle.dumps((spec, pipes.events))).decode()
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", "notebook_launcher.rank.spawn_main", str(payload), encoded],
                stdin=subprocess.DEVNULL,
                stdout=pipes.stdout,
                stderr=pipes.stderr,
                pass_fds=(pipes.events, death_w, payload),
                env={**os.environ, **spec.env},
            )
        finally:
            os.close(death_w)
        return SpawnedProcess(popen, death_r)

    def cleanup(self):
        if self._payload is not None:
            self._payload.close()
            self._payload = None
        super().cleanup()


class SpawnedProcess(StartedProcess):
    def __init__(self, popen, death_pipe):
        self._popen = popen
        self._death_pipe = death_pipe
        super().__init__(popen.pid, death_pipe)

    def wait(self, timeout=None):
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def release(self):
        self._popen.wait()
        os.close(self._death_pipe)
        super().release()
