"""A backend that lives outside notebook_launcher, as a third-party package would: each rank is a
subprocess of its own that this package starts, reads and signals, under ``cluster="sandbox"``.

It is written from the seam alone (``backends.base``: the protocols and their defaults;
``backends.remote``: a rank group whose carriers report from threads; ``backends.payload``: the
function and arguments by value; ``backends.status``: its sidebar section; ``wire.spec``: the
rank's spec) and the rank's entry point
(``python -m notebook_launcher.rank.spawn_main``), never from the local backend. Its store is a
plain torch ``TCPStore`` on loopback. It is registered without editing any file of the launcher:
``register_backend`` or the entry point in ``sandbox_backend-1.0.dist-info``.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import os
import pickle
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from typing import Any

from notebook_launcher.backends.base import Backend, Meeting, Placement, PlacementRequest, Starter
from notebook_launcher.backends.payload import payload_file_bytes
from notebook_launcher.backends.remote import Carrier, RemoteRankGroup, Signal
from notebook_launcher.backends.status import StatusSection, action, row, section
from notebook_launcher.devices import CpuDevice
from notebook_launcher.wire import STACKS_SIGNAL
from notebook_launcher.wire.spec import RankSeat, RankSpec

OBSERVERS: list = []
PINGS = [0]  # clicks on its sidebar section's button
_SIGNALS = {"stacks": STACKS_SIGNAL, "terminate": signal.SIGTERM, "kill": signal.SIGKILL}


@dataclasses.dataclass(frozen=True)
class SandboxOptions:
    env: dict = dataclasses.field(default_factory=dict)  # added to every rank's environment


class SandboxGroup(RemoteRankGroup):
    """Each rank a subprocess; one thread per rank moves its three pipes into the group's inbox."""

    def __init__(self, payload_fd: int, grace_period: float) -> None:
        super().__init__(grace_period)
        self._payload_fd = payload_fd
        self._pumps: list[threading.Thread] = []

    def _start_carrier(self, carrier: Carrier, specs: list[RankSpec]) -> None:
        (spec,) = specs
        events_r, events_w = os.pipe()
        encoded = base64.b64encode(pickle.dumps((spec, events_w))).decode()
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", "notebook_launcher.rank.spawn_main", str(self._payload_fd), encoded],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(events_w, self._payload_fd),
                env={**os.environ, **spec.env},
            )
        except BaseException:
            os.close(events_r)
            raise
        finally:
            os.close(events_w)
        carrier.handle = popen
        pump = threading.Thread(target=self._pump, args=(carrier, popen, events_r), daemon=True)
        pump.start()
        self._pumps.append(pump)

    def _pump(self, carrier: Carrier, popen: subprocess.Popen, events_r: int) -> None:
        streams = {events_r: "events", popen.stdout.fileno(): "stdout", popen.stderr.fileno(): "stderr"}
        with selectors.DefaultSelector() as selector:
            for fd in streams:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                for key, _ in selector.select():
                    data = os.read(key.fd, 65536)
                    if data:
                        self.deliver(carrier, streams[key.fd], data)
                    else:
                        selector.unregister(key.fd)
        os.close(events_r)
        popen.stdout.close()
        popen.stderr.close()
        self.ended(carrier, popen.wait())

    def _signal(self, carrier: Carrier, what: Signal) -> None:
        popen = carrier.handle
        if popen.poll() is not None:
            return
        try:  # the rank leads its process group: a signal that ends it ends what it started
            if what == "stacks":
                os.kill(popen.pid, _SIGNALS[what])
            else:
                os.killpg(popen.pid, _SIGNALS[what])
        except ProcessLookupError:
            pass

    def _join(self) -> None:
        for pump in self._pumps:
            pump.join()


class SandboxMeeting(Meeting):
    """The ranks meet at a TCPStore this kernel hosts on loopback (one kernel drives every rank)."""

    def __init__(self, plan: Any) -> None:
        self._plan = plan
        self._store: Any = None

    def open(self, stop_requested: Callable[[], bool], waiting: Callable[[str], None]) -> int:
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=self._plan.rendezvous.timeout)
        self.master_addr = "127.0.0.1"
        self._store = dist.TCPStore(
            self.master_addr, 0, self._plan.world_size, True, timeout=timeout, wait_for_workers=False
        )
        return self._store.port

    def close(self) -> None:
        self._store = None


class SandboxStarter(Starter):
    name = "sandbox"

    def __init__(self, env: dict) -> None:
        self._env = env
        self._payload: Any = None

    def prepare(self, plan: Any) -> None:
        self._payload = tempfile.TemporaryFile()  # noqa: SIM115 (held until cleanup)
        self._payload.write(payload_file_bytes(plan.function, plan.args, "cluster='sandbox'", "plain values"))
        self._payload.flush()

    def meeting(self, plan: Any, attempt: int) -> Meeting:
        return SandboxMeeting(plan)

    def rank_spec(self, plan: Any, seat: RankSeat) -> RankSpec:
        env = {**seat.env, **self._env}
        return RankSpec(seat.rank, seat.local_rank, env, os.getpid(), plan.threads, None, launcher_pid=os.getpid())

    def rank_group(self, plan: Any) -> SandboxGroup:
        return SandboxGroup(self._payload.fileno(), plan.grace_period)

    def cleanup(self) -> None:
        if self._payload is not None:
            self._payload.close()
            self._payload = None


class SandboxBackend(Backend):
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

    def starter(self, plan: Any) -> Starter:
        return SandboxStarter(plan.options.env)

    def status(self) -> dict[str, StatusSection | None]:
        return {"sandbox": _section()}

    def act(self, section: str, action: str) -> None:
        if section != "sandbox":
            raise LookupError(section)
        if action != "ping":
            raise ValueError(f"the sandbox has no action {action!r}")
        PINGS[0] += 1
        for listener in list(OBSERVERS):
            listener("sandbox", _section())

    def observe(self, listener: Callable[[str, Any], None]) -> Callable[[], None]:
        OBSERVERS.append(listener)
        return lambda: OBSERVERS.remove(listener)


def _section() -> StatusSection:
    """Its sidebar section: drawn by the sidebar as any backend's, with no change to the front end."""
    rows = [
        row("ranks are subprocesses of this package", "note", key="about"),
        row(f"pinged {PINGS[0]} times", key="pings"),
    ]
    return section("Sandbox backend", "ok", rows, [action("ping", "Ping")])
