"""The kernel's warm rank actors on the cluster: one placement group, one ``RankHost`` per rank.

Creating actors costs seconds (each imports torch and starts its node's start server), so a pool
outlives its launch: the next launch with the same shape (ranks, resources, strategy) reuses it
and its ranks start in milliseconds. A pool is released (its actors killed, its placement group
removed, the cluster's resources free again) when a launch of another shape comes, when a launch
ends badly (a failure, a stop, an interrupt: a restart gets fresh actors on a new placement group),
after ``NOTEBOOK_LAUNCHER_RAY_KEEP_WARM`` seconds without a launch (default 600), and when the
kernel exits (Ray ends a driver's actors with it).

The placement group makes a launch start whole or not at all: it waits for the cluster to give
every rank its resources, up to ``rendezvous_timeout``, and says what was asked and what the
cluster has when it cannot.

Examples (in a kernel connected to a cluster)::

    pool = acquire(RayOptions(), ranks=4, timeout=300, stop_requested=lambda: False, waiting=print)
    pool.layout.describe()     # ['node 0 (10.0.0.1): ranks 0-1', 'node 1 (10.0.0.2): ranks 2-3']
    done_with(pool, healthy=True)
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..._version import __version__
from ...errors import LaunchError
from .head_watch import lost_reason
from .options import RayOptions
from .placement import Layout, Spot

__all__ = [
    "RankPool",
    "acquire",
    "done_with",
    "release_pool",
    "forget_pool",
    "wait_unused",
    "pool_info",
    "observe_pool",
]

_POLL = 0.2  # seconds between looks at a stop request while waiting for the cluster
_CONCURRENCY = 8  # actor calls at once: a poll waits while signals and starts go through
RELEASE_WAIT = 10.0  # seconds a release waits for the head to answer (it may be lost meanwhile)


class RankPool:
    """Warm actors for ``ranks`` ranks of one shape; ``actors[rank]`` carries ``rank``."""

    def __init__(self, key: tuple, group: Any, hosts: list[Any], layout: Layout) -> None:
        self.key = key
        self.placement_group = group
        self.layout = layout
        self.actors = [hosts[bundle] for bundle in layout.order]
        self.launches = 0

    def release(self) -> None:
        """Kill every actor and remove the placement group; the cluster has the resources back."""
        _remove(self.actors, self.placement_group)


def _remove(actors: list[Any], group: Any) -> None:
    """Kill ``actors`` and remove their placement ``group``, whatever is already gone.

    Both ask the head; one lost while they wait would hold the caller until Ray ends the process,
    so they run on a thread of their own, waited on for ``RELEASE_WAIT`` s at most.
    """
    if lost_reason(check_now=True) is not None:
        return  # the cluster went with its head: asking it would only wait
    releasing = threading.Thread(
        target=_kill_and_remove, args=(actors, group), name="notebook-launcher-ray-release", daemon=True
    )
    releasing.start()
    releasing.join(RELEASE_WAIT)


def _kill_and_remove(actors: list[Any], group: Any) -> None:
    import ray
    from ray.util.placement_group import remove_placement_group

    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # already dead with its node
            pass
    try:
        remove_placement_group(group)
    except Exception:  # removed already, or the cluster is gone
        pass


class _Registry:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pool: RankPool | None = None
        self.in_use = False
        self.unused = threading.Event()  # set while no launch holds the pool
        self.unused.set()
        self.timer: threading.Timer | None = None
        self.observers: list[Callable[[], None]] = []


_registry = _Registry()


def observe_pool(callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback()`` whenever the warm pool is made, taken, given back or released (the
    sidebar shows it); returns a function that stops it."""
    _registry.observers.append(callback)
    return lambda: _registry.observers.remove(callback) if callback in _registry.observers else None


def _changed() -> None:
    for callback in list(_registry.observers):
        try:
            callback()
        except Exception:  # an observer (a closed sidebar) must not break a launch
            pass


def _key(plan: RayOptions, ranks: int) -> tuple:
    return (ranks, tuple(sorted(plan.resources.items())), plan.strategy)


def acquire(
    plan: RayOptions,
    ranks: int,
    timeout: float,
    stop_requested: Callable[[], bool],
    waiting: Callable[[str], None],
) -> RankPool:
    """The warm pool for this shape, or a new one once the cluster gives every rank its resources.

    Raises:
        LaunchError: the cluster did not give the resources within ``timeout`` s, an actor could not
            start, a stop was requested while waiting, or another launch holds the pool.
    """
    key = _key(plan, ranks)
    with _registry.lock:
        if _registry.in_use:
            raise LaunchError("another cluster launch of this kernel is running; wait for it or stop it first")
        if _registry.timer is not None:
            _registry.timer.cancel()
            _registry.timer = None
        pool = _registry.pool
        other_shape = pool is not None and pool.key != key
        if other_shape:
            _registry.pool = None
        _registry.in_use = True
        _registry.unused.clear()
    try:
        if other_shape:
            assert pool is not None
            pool.release()
            pool = None
        if pool is None:
            pool = _create(plan, ranks, time.monotonic() + timeout, timeout, stop_requested, waiting)
    except BaseException:
        with _registry.lock:
            _registry.in_use = False
            _registry.unused.set()
        _changed()
        raise
    with _registry.lock:
        _registry.pool = pool
    pool.launches += 1
    _changed()
    return pool


def done_with(pool: RankPool, healthy: bool) -> None:
    """The launch that acquired ``pool`` has ended: keep it warm if ``healthy``, else release it."""
    try:
        _keep_or_release(pool, healthy)
    finally:
        _changed()


def _keep_or_release(pool: RankPool, healthy: bool) -> None:
    keep = float(os.environ.get("NOTEBOOK_LAUNCHER_RAY_KEEP_WARM", "600"))
    with _registry.lock:
        if healthy and keep > 0 and _registry.pool is pool:
            _registry.timer = threading.Timer(keep, release_pool)
            _registry.timer.daemon = True
            _registry.timer.start()
            _registry.in_use = False
            _registry.unused.set()
            return
        if _registry.pool is pool:
            _registry.pool = None
    try:
        pool.release()
    finally:
        with _registry.lock:
            _registry.in_use = False
            _registry.unused.set()


def release_pool() -> bool:
    """Release the kernel's warm actors now (unless a launch is using them); True if there were any.

    Examples:
        >>> release_pool() in (True, False)
        True
    """
    with _registry.lock:
        pool = _registry.pool
        if pool is None or _registry.in_use:
            return False
        _registry.pool = None
        if _registry.timer is not None:
            _registry.timer.cancel()
            _registry.timer = None
    pool.release()
    _changed()
    return True


def forget_pool() -> None:
    """Drop the warm pool without asking the cluster anything (its head is lost: the actors went
    with it); a launch holding it ends on its own."""
    with _registry.lock:
        _registry.pool = None
        if _registry.timer is not None:
            _registry.timer.cancel()
            _registry.timer = None
    _changed()


def wait_unused(timeout: float) -> bool:
    """Wait up to ``timeout`` s until no launch holds the pool; whether none does."""
    return _registry.unused.wait(timeout)


def pool_info() -> dict | None:
    """The warm pool as the sidebar shows it, or None."""
    pool = _registry.pool
    if pool is None:
        return None
    return {
        "ranks": len(pool.actors),
        "nodes": pool.layout.describe(),
        "launches": pool.launches,
        "in_use": _registry.in_use,
    }


def _create(
    plan: RayOptions,
    ranks: int,
    deadline: float,
    timeout: float,
    stop_requested: Callable[[], bool],
    waiting: Callable[[str], None],
) -> RankPool:
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    asked = plan.describe(ranks)
    group = placement_group([dict(plan.resources) for _ in range(ranks)], strategy=plan.strategy)
    hosts: list[Any] = []
    try:
        waiting(f"waiting for the Ray cluster to place {asked}")
        _wait_for(ray, [group.ready()], deadline, stop_requested, lambda: _not_placed(ray, asked, timeout))
        resources = dict(plan.resources)
        options = {
            "num_cpus": resources.pop("CPU", 1),
            "num_gpus": resources.pop("GPU", 0),
            "max_concurrency": _CONCURRENCY,
        }
        if resources:
            options["resources"] = resources
        from .host import RankHost  # the node side: imported by the kernel only when it makes actors

        actor_class = ray.remote(RankHost)
        for bundle in range(ranks):
            strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=bundle)
            hosts.append(actor_class.options(scheduling_strategy=strategy, **options).remote())
        waiting(f"starting {ranks} rank actor{'s' if ranks != 1 else ''} on the Ray cluster (each imports torch)")
        spots = _wait_for(
            ray,
            [host.ready.remote() for host in hosts],
            deadline,
            stop_requested,
            lambda: LaunchError(f"the rank actors did not start within rendezvous_timeout={timeout:g} s"),
        )
        _same_version(spots)
    except BaseException:
        _remove(hosts, group)
        raise
    return RankPool(_key(plan, ranks), group, hosts, Layout.of([Spot(**spot) for spot in spots]))


def _same_version(spots: list[dict]) -> None:
    """Refuse nodes running another notebook-launcher than the kernel's (the two sides of the rank
    channel must agree); takes the "version" out of each spot.

    Examples:
        >>> _same_version([{"version": __version__, "address": "10.0.0.1"}])
        >>> _same_version([{"version": "0.0.1", "address": "10.0.0.2"}])
        Traceback (most recent call last):
        ...
        notebook_launcher.errors.LaunchError: node 10.0.0.2 runs notebook-launcher 0.0.1 and this kernel ...
    """
    versions = [(spot["address"], spot.pop("version", "an older version")) for spot in spots]
    others = sorted({(address, version) for address, version in versions if version != __version__})
    if others:
        nodes = "; ".join(f"node {address} runs notebook-launcher {version}" for address, version in others)
        raise LaunchError(
            f"{nodes} and this kernel {__version__}: install notebook-launcher=={__version__} on every node"
        )


def _wait_for(
    ray: Any, refs: list, deadline: float, stop_requested: Callable[[], bool], late: Callable[[], Exception]
) -> list:
    """``ray.get(refs)`` once all are ready, watching for a stop, the head's loss and the deadline."""
    pending = list(refs)
    while pending:
        if stop_requested():
            raise LaunchError("stopped while waiting for the Ray cluster")
        if (reason := lost_reason()) is not None:  # its head is gone: nothing it would say comes
            raise LaunchError(reason)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise late()
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=min(_POLL, remaining))
    try:
        return ray.get(refs)
    except Exception as err:  # an actor died while starting (its node, an import error there)
        hint = ""
        if "No module named 'notebook_launcher'" in str(err):
            hint = f"; every node needs notebook-launcher=={__version__} (and torch) installed"
        raise LaunchError(
            f"a rank actor could not start on the Ray cluster: {type(err).__name__}: {err}{hint}"
        ) from None


def _not_placed(ray: Any, asked: str, timeout: float) -> LaunchError:
    total = _resources(ray.cluster_resources)
    free = _resources(ray.available_resources)
    nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
    return LaunchError(
        f"the Ray cluster could not place {asked} within rendezvous_timeout={timeout:g} s: its {nodes}"
        f" node{'s' if nodes != 1 else ''} have {total} in all, {free} free. Ask for fewer ranks or"
        " resources, another placement_strategy, or add nodes"
    )


def _resources(read: Callable[[], dict]) -> dict:
    """``resource_amounts`` of what ``read()`` gives ({} if the cluster cannot be read)."""
    try:
        return resource_amounts(read())
    except Exception:
        return {}


def resource_amounts(resources: dict) -> dict:
    """CPU, GPU and custom resources, for a message: not memory, and not the names Ray makes for
    nodes and placement groups ("node:10.0.0.1", "CPU_group_0_<id>", "bundle_group_<id>").

    Examples:
        >>> resource_amounts({"CPU": 4.0, "GPU": 0.5, "memory": 1e9, "node:10.0.0.1": 1.0, "CPU_group_ab12": 2.0})
        {'CPU': 4, 'GPU': 0.5}
    """
    return {
        name: (int(amount) if float(amount).is_integer() else amount)
        for name, amount in sorted(resources.items())
        if "memory" not in name
        and "_group_" not in name
        and not name.startswith(("node:", "accelerator_type", "bundle_group"))
    }
