"""A kernel outlives its Ray head: the head of a real two-node cluster is killed mid-launch.

Its own file: the head is killed, so the cluster cannot be the one ``test_ray_cluster`` shares.
Ray ends a driver process that has not left a cluster whose head is gone once
``gcs_rpc_server_reconnect_timeout_s`` has passed (60 s by default); the kernel here has it at
``RAY_DEADLINE`` so that surviving past it is shown in a bounded wait.
"""

from __future__ import annotations

import re
import time

import pytest

pytest.importorskip("ray")

from kernel_session import KernelSession
from ray_cluster import TRAIN_FOREVER, LocalRayCluster

pytestmark = pytest.mark.slow
RAY_DEADLINE = 30  # seconds after the head's loss at which Ray ends a driver still connected


def test_a_lost_head_ends_the_launch_in_seconds_and_the_kernel_lives_to_launch_again():
    """Two ranks, one per node, in a collective; the head node is SIGKILLed (its machine lost).
    The cell ends within seconds with an error that names the lost head; the kernel is alive past
    Ray's deadline with its variables; a local launch works; and a cluster launch works again on a
    new cluster (the kernel left the dead one, so it can connect anew)."""
    cluster = LocalRayCluster(cpus=1).start()
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
        second = LocalRayCluster(cpus=2, nodes=1).start()  # a head alone is cluster enough here
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
    cluster = LocalRayCluster(cpus=1).start()
    cluster.wait_for_nodes_unconnected()
    kernel = KernelSession(
        env={"RAY_ADDRESS": cluster.address, "RAY_gcs_rpc_server_reconnect_timeout_s": str(RAY_DEADLINE)}
    )
    try:
        kernel.ok(TRAIN_FOREVER)
        msg_id = kernel.submit("notebook_launcher(train_forever, num_processes=2, cluster='ray')")
        kernel.collect(msg_id, timeout=180, until=lambda result: result.stdout.count("training") == 2)
        cluster.hang_node(0)
        hung_at = time.monotonic()
        result = kernel.collect(msg_id, timeout=60)
        assert result.error is not None, result.stdout
        assert f"the Ray head at {cluster.address}" in result.error["evalue"], result.error["evalue"]
        assert time.monotonic() - hung_at < 30
        assert kernel.eval("1 + 1", timeout=30) == 2  # the kernel goes on
    finally:
        kernel.shutdown()
        cluster.stop()


def test_a_head_that_hangs_while_a_launch_waits_for_its_placement_ends_the_cell_naming_it():
    """The launch asks for more than the cluster has, so it waits for its placement group; the head
    then hangs. Before, the cell ran on past ``rendezvous_timeout`` (the wait's last words ask the
    lost head for its resources, and the port-only probe never saw it go)."""
    cluster = LocalRayCluster(cpus=1, nodes=1).start()
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
