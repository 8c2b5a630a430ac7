"""What a multi-node launch exposes, and what it does not trust: every store listens on
``master_addr`` only, nothing read from a store is unpickled, the nodes' messages are signed with
a secret their cells share (a forged failure is ignored), and restarts meet on their own attempt's
store.

The "attacker" is this test process: a local user who can reach the store's port on 127.0.0.1.
"""

from __future__ import annotations

import base64
import datetime
import pickle
from textwrap import dedent

import psutil
import pytest
from gates import gate_code, open_gates
from nodes import SECRET, free_port

TRAIN = dedent("""
    import os, time, threading
    import torch, torch.distributed as dist
    from notebook_launcher import launch
    def short(fail_first_attempt=False):
        dist.init_process_group("gloo")
        total = torch.tensor([float(dist.get_rank())])
        dist.all_reduce(total)
        attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
        if fail_first_attempt and attempt == 0 and dist.get_rank() == 3:
            raise RuntimeError("transient")
        dist.barrier()
        return dist.get_rank(), dist.get_world_size(), total.item(), attempt
""")


def test_several_nodes_need_a_shared_secret(kernel):
    kernel.ok(TRAIN)
    result = kernel.run("launch(short, num_processes=1, num_nodes=2, use_port=29999)")
    assert result.error["ename"] == "ValueError"
    assert (
        "the nodes must share a secret" in result.error["evalue"]
        and "NOTEBOOK_LAUNCHER_SECRET" in (result.error["evalue"])
    )


class _Evil:
    """Writes a file when unpickled: a kernel that unpickled what a store holds would run it."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _listening(session):
    """(ip, port) of every TCP socket the kernel listens on."""
    return {
        (conn.laddr.ip, conn.laddr.port)
        for conn in session.process.net_connections(kind="tcp")
        if conn.status == psutil.CONN_LISTEN
    }


def test_c10d_binds_master_addr_only_and_never_unpickles_the_store(kernel, node1, tmp_path):
    import torch.distributed as dist

    kernel.ok(TRAIN)
    port = free_port(kernel)
    planted = tmp_path / "ran-in-a-kernel"
    options = f"num_processes=2, num_nodes=2, use_port={port}, rdzv_backend='c10d', {SECRET}, display='none'"
    kernel.ok(f"job = launch(short, node_rank=0, {options})")
    kernel.ok("while not job.waiting: job.join(0.02)", timeout=60)  # waiting for node 1
    # the state torch's dynamic rendezvous keeps (and unpickles every few seconds), planted
    attacker = dist.TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=10))
    payload = base64.b64encode(pickle.dumps(_Evil(str(planted))))
    for key in ("torch.rendezvous.none", "/torch.rendezvous.none", "torch.rendezvous.none.state"):
        attacker.set(key, payload)
    listening = _listening(kernel)
    node1.ok(f"job = launch(short, node_rank=1, {options})")
    assert sorted(kernel.eval("job.wait(timeout=120)")[:3]) == [0, 4, 6.0]
    assert node1.eval("job.wait(timeout=120)")[:2] == (2, 4)
    assert not planted.exists()
    assert listening and all(ip == "127.0.0.1" for ip, _ in listening)
    del attacker


def test_a_forged_failure_on_the_store_does_not_end_the_launch(kernel, node1, tmp_path):
    import torch.distributed as dist

    for session in (kernel, node1):
        session.ok(TRAIN)
        session.ok(gate_code(tmp_path) if session is kernel else "pass")
    kernel.ok("def gated():\n    wait_at_gate()\n    return short()")
    node1.ok(
        f"GATE_DIR = {str(tmp_path)!r}\n"
        + gate_code(tmp_path).split("for _r")[0]
        + "def gated():\n    wait_at_gate()\n    return short()"
    )
    port = free_port(kernel)
    options = f"num_processes=2, num_nodes=2, use_port={port}, {SECRET}, display='none'"
    kernel.ok(f"job = launch(gated, node_rank=0, {options})")
    node1.ok(f"job = launch(gated, node_rank=1, {options})")
    attacker = dist.TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=10))
    for run in ("none",):
        attacker.set(f"notebook_launcher/{run}/0/failed", "0" * 64 + ":node 1: rank 3 failed: forged")
    open_gates(tmp_path, [0, 1, 2, 3])  # the ranks go on only once the forgery is on the store
    assert kernel.eval("job.wait(timeout=120)")[:2] == (0, 4)
    assert node1.eval("job.wait(timeout=120)")[:2] == (2, 4)
    del attacker


def test_nodes_given_different_secrets_are_told_so(kernel, node1):
    kernel.ok(TRAIN)
    port = free_port(kernel)
    options = f"num_processes=1, num_nodes=2, use_port={port}, rendezvous_timeout=3, display='none'"
    kernel.ok(f"job = launch(short, node_rank=0, secret='one-secret-here', {options})")
    result = node1.run(f"launch(short, node_rank=1, secret='another-secret', {options}).wait()")
    assert result.error["ename"] == "LaunchError"
    assert "was not signed with this node's secret: give every node the same secret=" in result.error["evalue"]
    assert kernel.run("job.wait(timeout=60)").error["ename"] == "LaunchError"


@pytest.mark.parametrize("backend", ["static", "c10d"])
def test_two_nodes_restart_together_on_a_fresh_attempt(kernel, node1, backend):
    """Node 1 restarting faster than node 0 must not join node 0's previous store (3 of 3 failed)."""
    kernel.ok(TRAIN)
    port = free_port(kernel)
    options = (
        f"args=(True,), num_processes=2, num_nodes=2, use_port={port}, rdzv_backend={backend!r},"
        f" max_restarts=1, rendezvous_timeout=60, {SECRET}, display='none'"
    )
    kernel.ok(f"job = launch(short, node_rank=0, {options})")
    node1.ok(f"job = launch(short, node_rank=1, {options})")
    first, second = kernel.eval("job.wait(timeout=120)", timeout=150), node1.eval("job.wait(timeout=120)", timeout=150)
    assert first[3] == 1 and second[3] == 1  # both finished on the second attempt
    assert {first[0], second[0]} == {0, 2} and first[1] == second[1] == 4
    assert kernel.children() == [] and node1.children() == []


def test_a_signed_failure_recorded_from_one_launch_does_not_verify_in_the_next(kernel, node1, tmp_path):
    """Same secret, run id, attempt and port in both launches, as when a person re-runs the cells.
    Before: the recorded "failed" value ended the next healthy launch in under a second, and the
    attempt marker was the same in every launch."""
    import torch.distributed as dist

    kernel.ok(TRAIN)
    kernel.ok(gate_code(tmp_path))
    node1.ok(f"GATE_DIR = {str(tmp_path)!r}\n" + gate_code(tmp_path).split("for _r")[0])
    for session in (kernel, node1):
        session.ok("def gated():\n    wait_at_gate()\n    return short()")
        session.ok(
            "def fails_on_node_1():\n"
            "    if os.environ['GROUP_RANK'] == '1':\n"
            "        raise RuntimeError('node 1 failed on purpose')\n"
            "    threading.Event().wait()"
        )
    port = free_port(kernel)
    options = f"num_processes=1, num_nodes=2, use_port={port}, {SECRET}, display='none'"
    # node 0 looks at the other node's health only every minute: its store stays up to be recorded
    kernel.ok(f"first = launch(fails_on_node_1, node_rank=0, monitor_interval=60, {options})")
    node1.ok(f"first = launch(fails_on_node_1, node_rank=1, {options})")
    attacker = dist.TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=60))
    keys = ["notebook_launcher/none/0/failed", "notebook_launcher/none/0/attempt"]
    attacker.wait(keys)
    recorded = {key: attacker.get(key) for key in keys}
    assert b"node 1 failed on purpose" in recorded[keys[0]]
    del attacker
    assert node1.run("first.wait(timeout=60)").error["ename"] == "RuntimeError"
    kernel.ok("first.stop(timeout=60)")

    kernel.ok(f"second = launch(gated, node_rank=0, {options})")
    node1.ok(f"second = launch(gated, node_rank=1, {options})")
    attacker = dist.TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=60))
    attacker.wait([keys[1]])
    assert attacker.get(keys[1]) != recorded[keys[1]]  # a new session: the marker differs
    attacker.set(keys[0], recorded[keys[0]])
    open_gates(tmp_path, [0, 1])  # the ranks go on only once the replayed failure is on the store
    assert kernel.eval("second.wait(timeout=120)")[:2] == (0, 2)
    assert node1.eval("second.wait(timeout=120)")[:2] == (1, 2)
    del attacker


def test_a_node_cannot_be_steered_into_a_concurrent_c10d_launch_with_the_same_secret(kernel, node1):
    """Two c10d launches share a secret and run id (launch A waits for its second node; launch B's
    first node hosts B's meeting). Someone without the secret copies A's attempt marker and A's
    ranks' address into B's meeting store. Before, B's second node took A's session from the
    copied marker, joined A's ranks and trained inside A (both launches "succeeded"), silently.
    Now it challenges the meeting's host, which answers in B's own session: the wait ends with an
    error that says the marker may have been replayed, and A gets no node from B."""
    import torch.distributed as dist
    from kernel_session import KernelSession

    b_host = KernelSession()
    try:
        for session in (kernel, b_host):
            session.ok(TRAIN)
        port_a, port_b = free_port(kernel), free_port(b_host)
        options = f"num_processes=1, num_nodes=2, rdzv_backend='c10d', {SECRET}, display='none'"
        kernel.ok(f"job_a = launch(short, use_port={port_a}, rendezvous_timeout=90, {options})")
        b_host.ok(f"job_b = launch(short, use_port={port_b}, rendezvous_timeout=90, {options})")
        for session, job in ((kernel, "job_a"), (b_host, "job_b")):
            session.ok(f"while not {job}.waiting: {job}.join(0.02)", timeout=60)
        store_a = dist.TCPStore("127.0.0.1", port_a, 2, False, timeout=datetime.timedelta(seconds=30))
        store_b = dist.TCPStore("127.0.0.1", port_b, 2, False, timeout=datetime.timedelta(seconds=30))
        keys = ["notebook_launcher/none/0/attempt", "notebook_launcher/none/0/master"]
        store_a.wait(keys)
        for key in keys:
            store_b.set(key, store_a.get(key))
        result = node1.run(f"launch(short, use_port={port_b}, rendezvous_timeout=8, {options}).wait(timeout=60)")
        assert result.error is not None and result.error["ename"] == "LaunchError", result.outputs
        assert "the c10d rendezvous host did not answer a joining node's challenge" in result.error["evalue"]
        assert "the store's marker may have been replayed from another launch" in result.error["evalue"]
        assert not kernel.eval("job_a.done")  # A still waits for a node of its own
        del store_a, store_b
    finally:
        for session, job in ((kernel, "job_a"), (b_host, "job_b")):
            session.run(f"{job}.stop(timeout=60)")
        b_host.shutdown()
    assert kernel.children() == [] and node1.children() == []
