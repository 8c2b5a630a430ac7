"""Launches on a real two-node Ray cluster started on this machine (``ray_cluster``): ranks on both
nodes, collectives across them, errors, stops, a lost actor with a restart, and the clear errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from ray_cluster import HEAD, LOOPBACK_REPORT, SECOND, TRAIN_FOREVER, LocalRayCluster, all_loopback  # noqa: E402

from notebook_launcher import launch, notebook_launcher  # noqa: E402
from notebook_launcher.backends.ray.pool import pool_info, release_pool  # noqa: E402
from notebook_launcher.errors import LaunchError, WorkerError  # noqa: E402

pytestmark = pytest.mark.slow
TIMEOUT = 150.0  # seconds: a launch past it ends with LaunchTimeout and every rank's stack


@pytest.fixture(scope="module")
def cluster():
    """The cluster, with this process connected to it as a driver (as a kernel is)."""
    local = LocalRayCluster(cpus=2).start()
    saved = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = local.address
    try:
        ray.init(address=local.address, log_to_driver=False)
        local.wait_for_nodes(ray)
        addresses = {node["NodeManagerAddress"] for node in ray.nodes()} | {ray.util.get_node_ip_address()}
        addresses.add(str(ray.get_runtime_context().gcs_address).rpartition(":")[0])
        assert addresses == {HEAD, SECOND} and all_loopback(addresses), addresses
        yield local
    finally:
        release_pool()
        ray.shutdown()
        local.stop()
        if saved is None:
            os.environ.pop("RAY_ADDRESS", None)
        else:
            os.environ["RAY_ADDRESS"] = saved


def free_cpus():
    return ray.available_resources().get("CPU", 0)


def wait_until(condition, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.1)  # a poll of the cluster's state, bounded by the deadline


def where():
    """What a rank sees of its place in the job."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    print(f"rank {dist.get_rank()} on node {os.environ['NODE_RANK']}", flush=True)
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR")
    import psutil

    server = psutil.Process(os.getppid())  # the node's start server, whose parent is the rank's actor
    return {**{key: os.environ[key] for key in keys}, "sum": total.item(), "actor": server.ppid()}


def test_four_ranks_spread_over_two_nodes_all_reduce_and_print_and_return(cluster):
    job = launch(where, num_processes=4, cluster="ray", placement_strategy="SPREAD", display="none", timeout=TIMEOUT)
    first = job.wait()
    results = job.results
    assert [result["sum"] for result in results] == [10.0] * 4  # 1+2+3+4 across both nodes
    assert [result["RANK"] for result in results] == ["0", "1", "2", "3"]
    assert {result["NODE_RANK"] for result in results} == {"0", "1"}
    assert {result["GROUP_WORLD_SIZE"] for result in results} == {"2"}
    for node in ("0", "1"):  # ranks of one node are consecutive and numbered locally from 0
        on_node = [result for result in results if result["NODE_RANK"] == node]
        assert [result["LOCAL_RANK"] for result in on_node] == ["0", "1"]
        assert {result["LOCAL_WORLD_SIZE"] for result in on_node} == {"2"}
    nodes = {node["NodeManagerAddress"] for node in ray.nodes() if node["Alive"]}
    assert first["MASTER_ADDR"] in nodes and {r["MASTER_ADDR"] for r in results} == {first["MASTER_ADDR"]}
    for rank in range(4):
        log = job.logs(rank)
        assert f"rank {rank} on node {results[rank]['NODE_RANK']}" in log
        assert log.startswith(f"[notebook-launcher] rank {rank} runs on node {results[rank]['NODE_RANK']} (")

    # the next launch of the same shape reuses the warm actors: the same actor processes
    again = launch(where, num_processes=4, cluster="ray", placement_strategy="SPREAD", display="none", timeout=TIMEOUT)
    again.wait()
    assert [result["actor"] for result in again.results] == [result["actor"] for result in results]
    assert pool_info()["launches"] == 2 and pool_info()["in_use"] is False


def test_hugging_face_accelerate_runs_unchanged_on_ranks_of_both_nodes(cluster):
    """Accelerate's own Accelerator (not trainer_core's) in the actors: it reads the torchrun
    environment the launch set, prepares a model, optimizer and loader over two nodes, steps, and
    gathers across them."""
    pytest.importorskip("accelerate")

    def with_accelerate():
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader, TensorDataset

        accelerator = Accelerator(cpu=True)
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
        model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=4))
        for inputs, targets in loader:
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        weights = accelerator.gather(accelerator.unwrap_model(model).weight.detach().reshape(1, -1))
        return {
            "processes": accelerator.num_processes,
            "index": accelerator.process_index,
            "batches": len(loader),
            "same_weights": bool(torch.allclose(weights[0], weights[1])),
        }

    options = {"cluster": "ray", "placement_strategy": "STRICT_SPREAD", "display": "none", "timeout": TIMEOUT}
    job = launch(with_accelerate, num_processes=2, **options)
    job.wait()
    results = job.results
    assert [result["index"] for result in results] == [0, 1]
    assert all(result["processes"] == 2 and result["batches"] == 2 and result["same_weights"] for result in results)
    assert {job.place(0).node, job.place(1).node} == {0, 1}  # one rank on each node


def test_a_failing_rank_raises_its_own_exception_and_its_siblings_are_ended(cluster):
    def fails_on_rank_1():
        import torch.distributed as dist

        dist.init_process_group("gloo")
        if dist.get_rank() == 1:
            raise ValueError("no such column: label")
        dist.barrier()  # rank 0 waits here until it is ended
        return "unreachable"

    started = time.monotonic()
    with pytest.raises(ValueError, match=r"\[rank 1\] no such column") as caught:
        notebook_launcher(fails_on_rank_1, num_processes=2, cluster="ray", display="none", timeout=TIMEOUT)
    assert time.monotonic() - started < 60
    shown = "".join(traceback.format_exception(caught.value))
    assert 'raise ValueError("no such column: label")' in shown  # the rank's own frames
    assert pool_info() is None  # a failed launch releases its actors and placement group
    wait_until(lambda: free_cpus() == 4, "the cluster's CPUs to be free again")


def test_stop_ends_every_rank_and_frees_the_cluster_within_seconds(cluster):
    def sleeps():
        print("sleeping", flush=True)
        time.sleep(600)

    job = launch(sleeps, num_processes=2, cluster="ray", display="none", timeout=TIMEOUT)
    wait_until(lambda: all("sleeping" in job.logs(rank) for rank in range(2)), "both ranks to start")
    started = time.monotonic()
    job.stop()
    assert job.status == "stopped"
    assert time.monotonic() - started < 20
    wait_until(lambda: free_cpus() == 4, "the cluster's CPUs to be free again")
    assert pool_info() is None


def test_a_kernel_interrupt_ends_the_cluster_ranks_and_frees_the_cluster(cluster):
    """In a real kernel (connected through RAY_ADDRESS): interrupting the cell that waits on four
    ranks in a collective across both nodes raises KeyboardInterrupt there, with where each rank was
    (the cell's line read from the kernel: an actor has no copy of the cell), within seconds; the
    kernel's actors and placement group are gone, and the next launch works."""
    from kernel_session import KernelSession

    release_pool()  # this process's warm actors would hold the cluster's CPUs
    kernel = KernelSession(env={"RAY_ADDRESS": cluster.address})
    try:
        kernel.ok(TRAIN_FOREVER)
        msg_id = kernel.submit("notebook_launcher(train_forever, num_processes=4, cluster='ray')")
        kernel.collect(msg_id, timeout=120, until=lambda result: result.stdout.count("training") == 4)
        assert free_cpus() == 0
        kernel.interrupt()
        result = kernel.collect(msg_id, timeout=60)  # result.seconds: from the interrupt to the idle kernel
        assert result.error["ename"] == "KeyboardInterrupt"
        assert result.seconds < 20
        assert "every rank has ended; where the ranks were" in result.error["evalue"]
        for rank in range(4):
            assert re.search(rf"rank {rank}: in train_forever .*dist.all_reduce", result.error["evalue"])
        assert kernel.eval("__import__('notebook_launcher.backends.ray').backends.ray.pool_info()") is None
        # the kernel's driver process (on the head's loopback address) and the kernel's link to it: loopback too
        reported = kernel.ok(LOOPBACK_REPORT).stdout.strip()
        assert reported == str(sorted(["127.0.0.1", HEAD, SECOND])), reported
        wait_until(lambda: free_cpus() == 4, "the interrupted launch's actors to be released", timeout=20)
        again = "print(notebook_launcher(lambda: 'again', num_processes=2, cluster='ray'))"
        assert kernel.ok(again, timeout=120).stdout.strip().endswith("again")
    finally:
        kernel.shutdown()
    wait_until(lambda: free_cpus() == 4, "the kernel's actors to end with it")


def test_a_lost_actor_is_named_and_a_restart_resumes_from_the_checkpoint(cluster, tmp_path):
    checkpoint = tmp_path / "step.txt"

    def resumable(path):
        import signal

        import psutil
        import torch.distributed as dist

        dist.init_process_group("gloo")
        step = int(Path(path).read_text()) if os.path.exists(path) else 0
        dist.barrier()  # every rank has read the checkpoint before rank 0 writes the next one
        if dist.get_rank() == 0:
            Path(path).write_text(str(step + 5))
        dist.barrier()
        if step == 0 and dist.get_rank() == 1:
            actor = psutil.Process(os.getppid()).ppid()
            os.kill(actor, signal.SIGKILL)  # the actor dies, as with its node
            time.sleep(600)
        return step

    job = launch(
        resumable, (str(checkpoint),), num_processes=2, cluster="ray", max_restarts=1, display="none", timeout=TIMEOUT
    )
    assert job.wait() == 5 and job.results == [5, 5] and job.attempt == 1
    log = job.logs(1)
    assert "rank 1 on node" in log and "its Ray actor died" in log


def test_a_node_lost_mid_run_fails_the_launch_naming_the_rank_and_its_node(cluster):
    """A third node (127.0.0.3) carries both ranks; it is killed, with everything it started, while
    one waits in a collective for the other: the launch fails within seconds, naming a rank and that node, the
    warm pool is dropped, and the cluster marks the node lost (the sidebar shows it so)."""
    from notebook_launcher.backends.ray.info import cluster_info

    node = cluster.add_node("127.0.0.3", cpus=2, resources={"doomed": 2})
    wait_until(lambda: ray.cluster_resources().get("doomed", 0) == 2, "the third node to join", timeout=90)

    def waits_in_a_collective():
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        print("waiting", flush=True)
        if dist.get_rank() == 0:
            time.sleep(600)
        dist.all_reduce(torch.ones(1))  # rank 1 waits here for rank 0 until the node is lost

    job = launch(
        waits_in_a_collective,
        num_processes=2,
        cluster="ray",
        resources_per_rank={"CPU": 1, "doomed": 1},
        display="none",
        timeout=TIMEOUT,
    )
    wait_until(lambda: all("waiting" in job.logs(rank) for rank in range(2)), "both ranks to start", timeout=90)
    killed = time.monotonic()
    cluster.kill_node(node)
    with pytest.raises(WorkerError) as caught:
        job.wait()
    assert time.monotonic() - killed < 30
    failed = caught.value.rank
    # before: "killed by signal SIGKILL (it may have run out of memory)"
    assert "was lost: its Ray actor on node 0 (127.0.0.3) died (its node may be gone)" in str(caught.value)
    assert "out of memory" not in str(caught.value)
    note = f"rank {failed} on node 0 (127.0.0.3): its Ray actor died"
    assert note in job.logs(failed)
    assert pool_info() is None
    wait_until(
        lambda: any(n["address"] == "127.0.0.3" and not n["alive"] for n in cluster_info()["nodes"]),
        "Ray to mark the node lost",
        timeout=120,
    )


def test_a_cluster_that_cannot_place_the_ranks_says_what_was_asked_and_what_it_has(cluster):
    with pytest.raises(LaunchError) as caught:
        notebook_launcher(
            print, num_processes=2, cluster="ray", resources_per_rank={"CPU": 3}, display="none", rendezvous_timeout=3
        )
    message = str(caught.value)
    assert "could not place 2 ranks x {'CPU': 3} (PACK) within rendezvous_timeout=3 s" in message
    assert "2 nodes have {'CPU': 4} in all" in message
    wait_until(lambda: free_cpus() == 4, "the placement group to be removed")


def test_cluster_arguments_are_checked_before_anything_starts():
    with pytest.raises(
        ValueError, match=r"cluster='slurm' names no backend; registered: 'local' \(cluster=None\), 'ray'"
    ):
        launch(print, num_processes=2, cluster="slurm")
    with pytest.raises(ValueError, match="cluster='ray://' is not valid"):
        launch(print, num_processes=2, cluster="ray://")
    with pytest.raises(TypeError, match="unexpected keyword arguments: 'resources'"):
        launch(print, num_processes=2, cluster="ray", resources={"GPU": 1})
    with pytest.raises(TypeError, match="unexpected keyword arguments: 'placement'"):
        launch(print, num_processes=2, placement="SPREAD")
    with pytest.raises(ValueError, match="num_processes must be a whole number of ranks"):
        launch(print, cluster="ray")
    with pytest.raises(ValueError, match="resources_per_rank only applies with cluster='ray'"):
        launch(print, num_processes=2, resources_per_rank={"GPU": 1})
    with pytest.raises(ValueError, match="placement_strategy='round' is not valid"):
        launch(print, num_processes=2, cluster="ray", placement_strategy="round")
    with pytest.raises(ValueError, match="start_method='fork' does not apply"):
        launch(print, num_processes=2, cluster="ray", start_method="fork")


def _in_fresh_python(code, **env):
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env={**os.environ, **env}
    )
    return done.stdout + done.stderr


def test_no_cluster_at_the_address_is_a_clear_error_at_once():
    code = (
        "from notebook_launcher import launch\n"
        "try:\n    launch(print, num_processes=2, cluster='ray', display='none')\n"
        "except Exception as err:\n    print(type(err).__name__, err)\n"
    )
    output = _in_fresh_python(code, RAY_ADDRESS="127.0.0.1:1")
    assert "LaunchError no Ray cluster could be reached at '127.0.0.1:1'" in output
    client = _in_fresh_python(code.replace("cluster='ray'", "cluster='ray://127.0.0.1:1'"))
    assert "LaunchError no Ray cluster could be reached at 'ray://127.0.0.1:1'" in client


def test_without_ray_installed_the_error_says_how_to_install_it():
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from notebook_launcher import launch\n"
        "try:\n    launch(print, num_processes=2, cluster='ray', display='none')\n"
        "except Exception as err:\n    print(type(err).__name__, err)\n"
    )
    assert "pip install 'notebook-launcher[ray]'" in _in_fresh_python(code)


def test_the_notebook_drives_four_ranks_on_the_cluster_and_its_saved_output_holds_every_rank(cluster, tmp_path):
    import nbformat
    from notebook_runs import run_notebook

    release_pool()  # this process's warm actors would hold the cluster's CPUs
    printed = run_notebook("ray_cluster.ipynb", tmp_path, RAY_ADDRESS=cluster.address)
    assert "accuracy from 4 ranks on the cluster: 0." in printed and "warm launch:" in printed
    saved = nbformat.read(tmp_path / "ray_cluster.ipynb", as_version=4)
    cell = next(c for c in saved.cells if "accuracy = notebook_launcher(" in c.source)
    (shown,) = [o.data["text/plain"] for o in cell.outputs if o.output_type in ("display_data", "execute_result")]
    assert "4 ranks · cpu · ray · succeeded" in shown
    for rank in range(4):
        assert f"[rank {rank}] [notebook-launcher] rank {rank} runs on node" in shown
        assert f"[rank {rank}] rank {rank} on node" in shown
    assert "[rank 0] epoch 2: loss" in shown
    wait_until(lambda: free_cpus() == 4, "the notebook's actors to be released")


def test_a_hung_rank_on_the_cluster_ends_with_a_timeout_that_shows_where_it_was(cluster):
    from notebook_launcher.errors import LaunchTimeout

    def stuck_on_rank_1():
        import torch.distributed as dist

        dist.init_process_group("gloo")
        if dist.get_rank() == 1:
            waits_for_ever()
        return "done"

    def waits_for_ever():
        time.sleep(600)

    with pytest.raises(LaunchTimeout) as caught:
        notebook_launcher(stuck_on_rank_1, num_processes=2, cluster="ray", display="none", timeout=30)
    assert "rank 1 had not finished" in str(caught.value)
    assert "rank 1: in waits_for_ever" in str(caught.value)  # its stack, asked of its actor
    wait_until(lambda: free_cpus() == 4, "the cluster's CPUs to be free again")


def test_a_kernel_connected_through_ray_client_gets_its_ranks_lines_and_results(cluster):
    """Ray Client (``ray://``) is how a laptop reaches a remote cluster; a fresh interpreter here
    connects through it (this process is already a driver of the cluster)."""
    release_pool()  # this process's warm actors would hold the cluster's CPUs
    code = (
        "from notebook_launcher import launch\n"
        "def hello():\n"
        "    import os\n"
        "    print('hello from rank', os.environ['RANK'], flush=True)\n"
        "    return int(os.environ['NODE_RANK'])\n"
        f"job = launch(hello, num_processes=2, cluster={cluster.client_address!r}, placement_strategy='SPREAD',"
        " display='none', timeout=120)\n"
        "print('value', job.wait(), job.results)\n"
        "print('logs', [job.logs(rank) for rank in range(2)])\n"
    )
    output = _in_fresh_python(code, RAY_ADDRESS="", NOTEBOOK_LAUNCHER_RAY_KEEP_WARM="0")
    assert "value 0 [0, 1]" in output, output + cluster.client_server_logs()
    assert "hello from rank 0" in output and "hello from rank 1" in output, output
    wait_until(lambda: free_cpus() == 4, "the actors to be released (NOTEBOOK_LAUNCHER_RAY_KEEP_WARM=0)", timeout=90)


CLUSTER_CELL = """
import os
from notebook_launcher import notebook_launcher
{gates}
def on_the_cluster():
    print("rank", os.environ["RANK"], "waits", flush=True)
    wait_at_gate()
    return os.environ["NODE_RANK"]
print("nodes:", notebook_launcher(on_the_cluster, num_processes=4, cluster="ray", placement_strategy="SPREAD"))
"""


def section_shown(sidebar):
    return sidebar.locator('[data-testid="nl-section-cluster"]').is_visible()


def test_the_widget_and_the_sidebar_show_which_node_each_rank_runs_on_in_a_browser(cluster, browser, tmp_path):
    """In JupyterLab (a kernel connected through RAY_ADDRESS): the live widget's tabs name each
    rank's node, the sidebar lists the cluster's nodes, what is free and the kernel's warm actors,
    and the finished launch's saved form says where each rank ran. One log pane is shown under
    the tab bar, and a click on a rank's tab shows that rank's lines alone."""
    from browser import CHROMIUM, VISIBLE_PANES, LabServer, open_notebook, run_all, screenshot
    from gates import gate_code, open_gates

    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed")
    release_pool()  # this process's warm actors would hold the cluster's CPUs
    lost_earlier = any(not node["Alive"] for node in ray.nodes())
    gates = tmp_path / "gates"
    gates.mkdir()
    (tmp_path / "lab").mkdir()
    lab = LabServer(tmp_path / "lab")
    try:
        page = open_notebook(browser, lab, "cluster.ipynb", [CLUSTER_CELL.format(gates=gate_code(gates))])
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="notebook-launcher-sidebar"]').click()
        sidebar = page.locator("#notebook-launcher-sidebar")
        # connected before the cell runs: a kernel busy in a cell answers no new comm until it ends
        sidebar.get_by_role("button", name="Load notebook_launcher").click()
        sidebar.get_by_text("Spawn start server:").wait_for(timeout=30_000)
        assert not section_shown(sidebar)  # no cluster yet: this kernel has not connected to one
        run_all(page)
        page.locator(".nl-chip", has_text="rank 3: running").first.wait_for(timeout=120_000)
        tabs = page.locator(".lm-TabBar-tabLabel", has_text="rank")
        tabs.filter(has_text="rank 3 · node 1").wait_for(timeout=30_000)
        assert [tabs.nth(i).inner_text() for i in range(tabs.count())] == [
            "all ranks",
            "rank 0 · node 0",
            "rank 1 · node 0",
            "rank 2 · node 1",
            "rank 3 · node 1",
        ]
        page.wait_for_function(f"() => ({VISIBLE_PANES})().some(text => text.includes('rank 3 waits'))")
        panes = page.evaluate(VISIBLE_PANES)
        assert len(panes) == 1 and "[rank 0] rank 0 waits" in panes[0], panes
        tabs.filter(has_text="rank 3 · node 1").click()
        page.wait_for_function(f"() => ({VISIBLE_PANES})().every(text => !text.includes('rank 0 waits'))")
        panes = page.evaluate(VISIBLE_PANES)
        assert len(panes) == 1 and "rank 3 waits" in panes[0], panes
        places = page.locator(".nl-places").first.inner_text()
        found = re.fullmatch(r"ranks 0, 1 on node 0 \((\S+)\) · ranks 2, 3 on node 1 \((\S+)\)", places)
        assert found and set(found.groups()) == {HEAD, SECOND}, places  # every place on loopback

        section = sidebar.locator('[data-testid="nl-section-cluster"]')  # the Ray backend's (backends.status)
        assert section_shown(sidebar)
        section.get_by_text("Warm rank actors: 4").wait_for(timeout=30_000)
        assert section.locator("h4").inner_text() == f"Ray cluster · {cluster.address}"
        nodes = section.locator('[data-key="node"]').all_inner_texts()  # the live ones
        assert sorted(nodes) == sorted([f"{HEAD} (head) · CPU 2", f"{SECOND} · CPU 2"])
        if lost_earlier:  # the node lost by an earlier test of this module
            assert section.locator('[data-key="lost"]').inner_text() == "Lost: 127.0.0.3"
        assert section.locator('[data-key="free"]').inner_text() == "Free: CPU 0 of 4"
        assert section.locator('[data-key="warm"]').inner_text().endswith("· 1 launch · in use")
        assert section.get_by_role("button").count() == 0  # no release while a launch uses them
        chip = sidebar.locator(".nl-launch-running .nl-rank").nth(3)
        assert chip.get_attribute("title") == f"rank 3 runs on node 1 ({found.group(2)})"
        screenshot(sidebar, "sidebar-ray-cluster.png")

        open_gates(gates, range(4))
        page.get_by_text("nodes: 0").wait_for(timeout=60_000)
        section.get_by_text("· idle").wait_for(timeout=30_000)  # kept warm for the next launch
        section.get_by_role("button", name="Release warm actors").click()  # the section's action
        section.get_by_text("Warm rank actors: none").wait_for(timeout=30_000)
        wait_until(lambda: free_cpus() == 4, "the released actors' CPUs")
        summary = page.locator(".nl-static details.nl-ranklog > summary", has_text="rank 2 · node 1")
        where = re.escape(found.group(2))
        assert re.fullmatch(rf"rank 2 · node 1 \({where}\) · done · \d+ lines?", summary.first.inner_text())
    finally:
        lab.stop()
    wait_until(lambda: free_cpus() == 4, "the kernel's actors to be released with it")
