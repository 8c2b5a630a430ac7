"""A backend that lives outside notebook_launcher, as a third-party package would: ranks are
spawned processes with extra environment variables, under the name ``cluster="sandbox"``.

It is built from the launcher's public pieces only (``backends.base`` and the local process
starter) and is registered without editing any file of the launcher: ``register_backend`` or the
entry point in ``sandbox_backend-1.0.dist-info``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from notebook_launcher.backends.base import Placement, PlacementRequest
from notebook_launcher.backends.local.spawn import SpawnStarter
from notebook_launcher.devices import CpuDevice

OBSERVERS: list = []


@dataclasses.dataclass(frozen=True)
class SandboxOptions:
    env: dict = dataclasses.field(default_factory=dict)  # added to every rank's environment


class SandboxStarter(SpawnStarter):
    name = "sandbox"

    def __init__(self, env: dict) -> None:
        super().__init__()
        self._env = env

    def start(self, plan, specs, pipes):
        specs = [dataclasses.replace(spec, env={**spec.env, **self._env}) for spec in specs]
        return super().start(plan, specs, pipes)


class SandboxBackend:
    name = "sandbox"
    option_names = ("env",)

    def check_options(self, cluster: str | None, options: Mapping[str, Any]) -> SandboxOptions:
        env = options.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ValueError(f"env must be a dict of strings, got {env!r}")
        return SandboxOptions(dict(env))

    def place(self, options: SandboxOptions, request: PlacementRequest) -> Placement:
        if request.device not in ("auto", "cpu"):
            raise ValueError(f"the sandbox runs CPU ranks only, not device={request.device!r}")
        count = request.num_processes or 2
        return Placement(CpuDevice(), count, "sandbox", notices=(f"sandbox: {count} ranks",))

    def starter(self, plan):
        return SandboxStarter(plan.options.env)

    def in_kernel(self) -> None:
        pass

    def status(self) -> dict:
        return {"sandbox": {"registered": True}}

    def observe(self, listener: Callable[[str, Any], None]) -> Callable[[], None]:
        OBSERVERS.append(listener)
        return lambda: OBSERVERS.remove(listener)
