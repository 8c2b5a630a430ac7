"""What a backend is, and what the launch core drives of it.

A backend is where ranks run (``local``: processes on this machine; ``ray``: actors on a Ray
cluster). It is one package that gives the launch a ``Backend``: its options (a frozen, checked
dataclass: the keywords of ``launch`` only it takes), its placement (the device, rank count and
start method of a launch), its ``Starter`` and its status for the sidebar. The supervisor then drives
what the starter makes:

* a ``Meeting`` — where the ranks of one attempt meet (their store);
* a ``RankGroup`` — the ranks of one attempt, wherever they run: the supervisor waits on its
  ``waitables()``, lets it ``read()`` what is ready into a ``RankSink``, and carries the
  controller's commands out on it (``ask_stacks``, ``terminate``, ``kill``).

Nothing here imports a backend; the registry in ``backends`` (its ``__init__``) finds them by name.
A backend class may subclass these protocols to inherit the defaults of their optional members
(no status, one carrier per rank, nothing to prepare or clean, a meeting that is one store);
``backends.remote`` is the base of a rank group whose ranks are not local processes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..devices import Device
    from ..wire.spec import RankSeat, RankSpec
    from .plans import LaunchPlan
    from .status import StatusSection

__all__ = [
    "Backend",
    "Placement",
    "PlacementRequest",
    "Starter",
    "Meeting",
    "Place",
    "RankGroup",
    "RankSink",
    "StatusListener",
]


@dataclass(frozen=True)
class PlacementRequest:
    """What the user asked for, before a backend resolves it (``Backend.place``)."""

    num_processes: Any = None  # None: the backend's (or the kernel's) default
    device: str = "auto"
    start_method: str = "auto"
    mixed_precision: str = "no"
    num_nodes: int = 1
    default_num_processes: int | None = None  # the kernel's choice (sidebar, ``set_defaults``)


@dataclass(frozen=True)
class Placement:
    """Where a launch's ranks run, as its backend resolved it.

    Examples:
        >>> from notebook_launcher.devices import CpuDevice
        >>> Placement(CpuDevice(), 2, "fork").notices
        ()
    """

    device: Device
    num_processes: int
    start_method: str
    notices: tuple[str, ...] = ()  # one-line messages for the user ("auto" chose spawn, ...)
    stall_hint: str | None = None  # the likely cause of a stall on this device, for LaunchStalled


StatusListener = Callable[[str, Any], None]  # (the sidebar section's name, its new section or None)


class Backend(Protocol):
    """One place ranks can run, registered by name (``register_backend``, in ``backends``).

    ``launch(..., cluster=name)`` (or ``"name://address"``) picks it; ``cluster=None`` is "local".
    Its keywords (``option_names``) are passed through ``launch`` untouched, so a new backend adds
    no keyword to ``launch`` or ``make_plan``.
    """

    name: str
    option_names: tuple[str, ...]

    def check_options(self, cluster: str | None, options: Mapping[str, Any]) -> Any:
        """The backend's checked options (a frozen dataclass) from ``cluster`` and its keywords.

        Raises ``ValueError``/``TypeError`` naming the bad one, before anything starts."""
        ...

    def place(self, options: Any, request: PlacementRequest) -> Placement:
        """The device, rank count and start method of a launch; raises ``ValueError`` when the
        request cannot be placed."""
        ...

    def starter(self, plan: LaunchPlan) -> Starter:
        """A new ``Starter`` for ``plan`` (not prepared yet)."""
        ...

    def in_kernel(self) -> None:
        """The package was imported in a Jupyter kernel: start what makes the first launch fast
        (by default, nothing)."""
        return None

    def status(self) -> dict[str, StatusSection | None]:
        """The sidebar's sections this backend fills: section name → its ``backends.status``
        section, or None while there is nothing to show; by default none."""
        return {}

    def act(self, section: str, action: str) -> None:
        """A button of one of its sections was clicked (``backends.status.action``). Raises
        ``LookupError`` for a section that is not its own (the default: it has none), and
        ``ValueError`` with what to tell the user when the action cannot be done."""
        raise LookupError(section)

    def observe(self, listener: StatusListener) -> Callable[[], None]:
        """Call ``listener(section, value)`` whenever a section of ``status`` changes; returns the
        function that stops it. By default the status never changes."""
        return lambda: None


class RankSink(Protocol):
    """Where a rank group delivers what its ranks sent, in the order they sent it."""

    def on_event(self, ranks: Sequence[int], event: Any) -> None:
        """One decoded event from the process (or actor) carrying ``ranks``; not checked yet."""

    def on_text(self, rank: int, stream: str, text: str) -> None:
        """Complete lines ``rank`` wrote to ``stream`` ("stdout" or "stderr")."""

    def on_live(self, rank: int, stream: str, text: str) -> None:
        """The unfinished last line of ``stream`` (a progress bar redrawing itself)."""

    def on_exit(self, ranks: Sequence[int], exitcode: int | None, signalled: bool, lost: str | None = None) -> None:
        """The carrier of ``ranks`` ended, after everything it sent was delivered; ``signalled``:
        this group ended it (``terminate`` or ``kill``); ``lost``: what took it, when that was not
        the rank itself (its start server died, its Ray actor or node was lost)."""


class RankGroup(Protocol):
    """The ranks of one attempt of a launch, as the supervisor drives them."""

    def start(self, specs: list[RankSpec]) -> None:
        """Start one carrier (a process, an actor) for the ranks ``specs`` describe."""

    def waitables(self) -> list[Any]:
        """What to wait on (``wire.readiness.wait_readable``) for news from the live ranks."""

    def read(self, ready: list[Any], sink: RankSink) -> None:
        """Read what the ``ready`` waitables hold and deliver it to ``sink``."""

    @property
    def live_ranks(self) -> list[int]:
        """The ranks whose carrier has not ended."""

    def ask_stacks(self, ranks: Sequence[int]) -> None:
        """Ask ``ranks`` for their stacks; the answers arrive as events."""

    def pids(self) -> dict[int, int]:
        """rank → pid of each live rank that is a process of its own on this machine (the kernel
        reads its CPU and memory); {} where the ranks are elsewhere (the default)."""
        return {}

    def terminate(self, spare: Collection[int] = ()) -> None:
        """Ask every live rank to end (SIGTERM), with whatever it started; a carrier whose ranks
        are all in ``spare`` (they reported and are exiting on their own) is left to exit."""

    def kill(self) -> None:
        """End every live rank, and what a terminated one left, now (SIGKILL)."""

    def wait_exits(self, deadline: float | None) -> None:
        """Wait for the terminated ranks to end until ``deadline`` (monotonic), then kill the rest."""

    def close(self, sink: RankSink) -> None:
        """Everything has ended: deliver what is left, release every resource; nothing outlives it."""


@dataclass(frozen=True)
class Place:
    """Where a rank runs when its launch's ranks are not all on this machine: the node's rank in
    the launch and its address.

    Examples:
        >>> place = Place(1, "10.0.0.2")
        >>> str(place), place.short
        ('node 1 (10.0.0.2)', 'node 1')
    """

    node: int
    address: str

    def __str__(self) -> str:
        return f"node {self.node} ({self.address})"

    @property
    def short(self) -> str:
        return f"node {self.node}"


class Meeting(Protocol):
    """Where the ranks of one attempt meet (their store), and how this kernel hears of the other
    nodes' launches: the kernel's own ``backends.local.rendezvous.Rendezvous``, or a cluster's."""

    node_rank: int = 0  # the rank of this kernel's node among the launch's
    master_addr: str = ""  # where the store is, once ``open`` has returned

    def open(self, stop_requested: Callable[[], bool], waiting: Callable[[str], None]) -> int:
        """Host or join the ranks' store before they start; its port."""
        ...

    def waitables(self) -> list:
        """What the supervisor's loop also waits on: when one is ready, it calls ``serve``. By
        default nothing (the store serves itself)."""
        return []

    def serve(self) -> None:
        """A rank wants the store (one of ``waitables`` is ready): serve it."""
        return None

    def failure_elsewhere(self) -> str | None:
        """Another node's reported failure, if any; by default, with one kernel driving every
        rank, there is no other node to hear from."""
        return None

    def report_failure(self, reason: str) -> None:
        """Tell the other nodes this node's launch failed (by default there are none)."""
        return None

    def leave(self, stop_requested: Callable[[], bool], waiting: Callable[[str], None]) -> None:
        """This node's ranks have all returned (by default nobody waits for it)."""
        return None

    def close(self) -> None:
        """Stop hosting (or leave) the store."""
        ...

    def places(self) -> dict[int, Place]:
        """Where each rank of this attempt runs, once ``open`` has returned; {} (the default) when
        the ranks this kernel drives are on its own machine."""
        return {}


class Starter(Protocol):
    """One way of starting ranks (fork, spawn, torch_xla, a cluster's actors), made by ``Backend.starter``."""

    name: str

    def prepare(self, plan: LaunchPlan) -> None:
        """Run in the kernel before anything starts; may raise ``LaunchError``. By default nothing."""
        return None

    def groups(self, plan: LaunchPlan) -> list[list[int]]:
        """Which local ranks each started carrier (process, actor) carries; by default one each."""
        return [[local] for local in range(plan.num_processes)]

    def meeting(self, plan: LaunchPlan, attempt: int) -> Meeting:
        """Where the ranks of ``attempt`` meet (``Meeting``)."""
        ...

    def rank_spec(self, plan: LaunchPlan, seat: RankSeat) -> RankSpec:
        """The spec a rank of this backend starts with, for ``seat`` (its rank and the torchrun
        environment of a rank of this machine): the pids, thread budget and where large results go
        are the backend's to say. Called once the meeting is open, for every rank, before any starts."""
        ...

    def rank_group(self, plan: LaunchPlan) -> RankGroup:
        """A new, empty group of ranks for one attempt; ``RankGroup.start`` fills it."""
        ...

    def cleanup(self) -> None:
        """Release what ``prepare`` made, after every rank has ended (by default nothing)."""
        return None
