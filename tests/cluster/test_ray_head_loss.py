"""A kernel outlives its Ray head: the head of a real two-node cluster is killed mid-launch.

Its own file: the head is killed, so the cluster cannot be the one ``test_ray_cluster`` shares.
Ray ends a driver process that has not left a cluster whose head is gone once
``gcs_rpc_server_reconnect_timeout_s`` has passed (60 s by default); the kernel here has it at
``RAY_DEADLINE`` so that surviving past it is shown in a bounded wait.
"""

from __future__ import annotations

import re
import time

import psutil
import pytest

pytest.importorskip("ray")

from kernel_session import KernelSession
from ray_cluster import HEAD_LOSS, TRAIN_FOREVER, LocalRayCluster

pytestmark = pytest.mark.slow
RAY_DEADLINE = 30  # seconds after the head's loss at which Ray ends a driver still connected


def _wait_for(find, what, timeout=120.0):
    """``find()``'s first true value, polled until ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not (found := find()):
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.02)  # a poll of another process's state, bounded by the deadline
    return found


def _ends_naming_the_head(kernel, msg_id, cluster, since):
    """Cell ``msg_id`` ends within 30 s of ``since`` (the head's loss) with an error naming the head."""
    result = kernel.collect(msg_id, timeout=60)
    assert result.error is not None, result.stdout
    assert f"the Ray head at {cluster.address}" in result.error["evalue"], result.error["evalue"]
    assert time.monotonic() - since < 30
    return result


def _driver_process(kernel):
    """The kernel's Ray driver process (``driver_main.py``, its child), or None before it starts."""
    for child in kernel.process.children():
        try:
            if any(part.endswith("driver_main.py") for part in child.cmdline()):
                return child
        except psutil.NoSuchProcess:
            pass
    return None


def _client_connected(kernel, driver):
    """Whether the kernel's Ray Client has connected to the server its driver process serves."""
    try:
        serving = {c.laddr.port for c in driver.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        links = kernel.process.net_connections("tcp")
    except psutil.NoSuchProcess:
        return False
    return any(c.raddr and c.raddr.port in serving and c.status == psutil.CONN_ESTABLISHED for c in links)


@pytest.mark.parametrize("moment", ["as its driver process starts", "once the kernel's Ray Client is connected"])
def test_a_head_killed_while_the_first_cluster_launch_connects_leaves_the_kernel_alive(moment):
    """The head node is SIGKILLed while the kernel's first cluster launch connects. Before, Ray's
    core worker inside the kernel ended the kernel about a second later ("Failed to register worker
    to Raylet": the whole process, faster than any watch): 3 of 3. The driver now runs in a process
    of its own; the cell ends naming the head, and the kernel lives with its variables. The head
    alone is cluster enough: the ranks never start."""
    cluster = LocalRayCluster(cpus=2, nodes=1, addresses=HEAD_LOSS).start()
    cluster.wait_for_nodes_unconnected()
    kernel = KernelSession(
        env={"RAY_ADDRESS": cluster.address, "RAY_gcs_rpc_server_reconnect_timeout_s": str(RAY_DEADLINE)}
    )
    try:
        kernel.ok("kept = 'a variable the user keeps'\n" + TRAIN_FOREVER)
        msg_id = kernel.submit("notebook_launcher(train_forever, num_processes=2, cluster='ray')")
        driver = _wait_for(lambda: _driver_process(kernel), "the kernel's Ray driver process")
        if moment != "as its driver process starts":
            _wait_for(lambda: _client_connected(kernel, driver), "the kernel's Ray Client to connect")
        cluster.kill_node(0)
        _ends_naming_the_head(kernel, msg_id, cluster, since=time.monotonic())
        assert kernel.process.status() != psutil.STATUS_ZOMBIE
        assert kernel.eval("kept", timeout=30) == "a variable the user keeps"
        _wait_for(lambda: not driver.is_running() or driver.status() == psutil.STATUS_ZOMBIE, "the driver to end", 30)
        local = "print(notebook_launcher(lambda: 'local again', num_processes=2))"
        assert kernel.ok(local, timeout=120).stdout.strip().endswith("local again")
    finally:
        kernel.shutdown()
        cluster.stop()


def test_a_lost_head_ends_the_launch_in_seconds_and_the_kernel_lives_to_launch_again():
    """Two ranks, one per node, in a collective; the head node is SIGKILLed (its machine lost).
    The cell ends within seconds with an error that names the lost head; the kernel is alive past
    Ray's deadline with its variables; a local launch works; and a cluster launch works again on a
    new cluster (the kernel left the dead one, so it can connect anew)."""
    cluster = LocalRayCluster(cpus=1, addresses=HEAD_LOSS).start()
    cluster.wait_for_nodes_unconnected()
    second = None
    kernel = KernelSession(
        env={"RAY_ADDRESS": cluster.address, "RAY_gcs_rpc_server_reconnect_timeout_s": str(RAY_DEADLINE)}
    )
    try:
        kernel.ok("kept = 'a variable the user keeps'\n" + TRAIN_FOREVER)
        msg_id = kernel.submit("notebook_launcher(train_forever, num_processes=2, cluster='ray')")
        kernel.collect(msg_id, timeout=180, until=lambda result: result.stdout.count("training") == 2)
        cluster.kill_node(0)
        lost_at = time.monotonic()
        result = kernel.collect(msg_id, timeout=60)
        assert result.error is not None, result.stdout
        assert re.search(
            # the head as Ray reports it to the kernel: on loopback, where the cluster was started
            rf"the Ray head at {re.escape(cluster.address)} .*: the cluster is gone; this kernel leaves it",
            result.error["evalue"],
        ), result.error["evalue"]
        assert time.monotonic() - lost_at < 30

        while time.monotonic() < lost_at + RAY_DEADLINE + 5:  # samples the kernel past Ray's deadline
            assert kernel.eval("kept", timeout=20) == "a variable the user keeps"
        assert kernel.eval("__import__('ray').is_initialized()") is False

        local = "print(notebook_launcher(lambda: 'local again', num_processes=2))"
        assert kernel.ok(local, timeout=120).stdout.strip().endswith("local again")

        cluster.stop()
        second = LocalRayCluster(cpus=2, nodes=1, addresses=HEAD_LOSS).start()  # a head alone is cluster enough here
        second.wait_for_nodes_unconnected()
        kernel.ok(f"import os; os.environ['RAY_ADDRESS'] = {second.address!r}")
        again = "print(notebook_launcher(lambda: 'cluster again', num_processes=2, cluster='ray'))"
        assert kernel.ok(again, timeout=180).stdout.strip().endswith("cluster again")
    finally:
        kernel.shutdown()
        cluster.stop()
        if second is not None:
            second.stop()


def test_a_hung_head_is_noticed_and_the_cell_ends_naming_it():
    """The head node is SIGSTOPped mid-launch (a hung machine): its port still accepts connections,
    so the head watch's old probe, a TCP connect, kept saying it answered and the cell ran on. The
    probe now asks for a gRPC handshake, which only the running server gives."""
    cluster = LocalRayCluster(cpus=1, addresses=HEAD_LOSS).start()
    cluster.wait_for_nodes_unconnected()
    kernel = KernelSession(
        env={"RAY_ADDRESS": cluster.address, "RAY_gcs_rpc_server_reconnect_timeout_s": str(RAY_DEADLINE)}
    )
    try:
        kernel.ok(TRAIN_FOREVER)
        msg_id = kernel.submit("notebook_launcher(train_forever, num_processes=2, cluster='ray')")
        kernel.collect(msg_id, timeout=180, until=lambda result: result.stdout.count("training") == 2)
        cluster.hang_node(0)
        _ends_naming_the_head(kernel, msg_id, cluster, since=time.monotonic())
        assert kernel.eval("1 + 1", timeout=30) == 2  # the kernel goes on
    finally:
        kernel.shutdown()
        cluster.stop()


def test_a_head_that_hangs_while_a_launch_waits_for_its_placement_ends_the_cell_naming_it():
    """The launch asks for more than the cluster has, so it waits for its placement group; the head
    then hangs. Before, the cell ran on past ``rendezvous_timeout`` (the wait's last words ask the
    lost head for its resources, and the port-only probe never saw it go)."""
    cluster = LocalRayCluster(cpus=1, nodes=1, addresses=HEAD_LOSS).start()
    cluster.wait_for_nodes_unconnected()
    kernel = KernelSession(
        env={"RAY_ADDRESS": cluster.address, "RAY_gcs_rpc_server_reconnect_timeout_s": str(RAY_DEADLINE)}
    )
    try:
        kernel.ok("from notebook_launcher import launch")
        kernel.ok("job = launch(lambda: 1, num_processes=4, cluster='ray', rendezvous_timeout=120, display='none')")
        kernel.ok("while 'to place' not in job.waiting: job.join(0.05)", timeout=120)
        cluster.hang_node(0)
        hung_at = time.monotonic()
        result = kernel.run("job.wait()", timeout=90)
        assert result.error is not None, result.stdout
        assert f"the Ray head at {cluster.address}" in result.error["evalue"], result.error["evalue"]
        assert time.monotonic() - hung_at < 30  # well inside rendezvous_timeout
        assert kernel.eval("1 + 1", timeout=30) == 2
    finally:
        kernel.shutdown()
        cluster.stop()


def test_a_hung_head_is_named_when_the_first_cluster_launch_connects_and_an_interrupt_ends_the_next_try():
    """The head hangs (SIGSTOP) before the kernel's first cluster launch: its port still accepts
    connections, so the launch starts to connect, and Ray's ``init`` would wait on it. The head is
    watched from the first call: the cell ends naming it within seconds. A second try is interrupted
    while it connects: the cell ends at once, and no driver process is left."""
    cluster = LocalRayCluster(cpus=1, nodes=1, addresses=HEAD_LOSS).start()
    cluster.wait_for_nodes_unconnected()
    kernel = KernelSession(env={"RAY_ADDRESS": cluster.address})
    try:
        kernel.ok("from notebook_launcher import notebook_launcher")
        cluster.hang_node(0)
        hung_at = time.monotonic()
        msg_id = kernel.submit("notebook_launcher(lambda: 1, num_processes=1, cluster='ray')")
        _ends_naming_the_head(kernel, msg_id, cluster, since=hung_at)

        msg_id = kernel.submit("notebook_launcher(lambda: 1, num_processes=1, cluster='ray')")
        driver = _wait_for(lambda: _driver_process(kernel), "the kernel's Ray driver process")
        kernel.interrupt()
        interrupted_at = time.monotonic()
        result = kernel.collect(msg_id, timeout=30)
        assert result.error is not None and result.error["ename"] == "KeyboardInterrupt", result.error
        assert time.monotonic() - interrupted_at < 10
        _wait_for(lambda: not driver.is_running() or driver.status() == psutil.STATUS_ZOMBIE, "the driver to end", 10)
        assert kernel.eval("1 + 1", timeout=30) == 2
    finally:
        kernel.shutdown()
        cluster.stop()
