"""The numbering of cluster ranks over nodes and the environment each gets (pure: no Ray needed).

The GPU case cannot run here (no GPU); Ray's GPU ids are given as data, which is all this code sees."""

from __future__ import annotations

from notebook_launcher.backends.ray.options import RayOptions
from notebook_launcher.backends.ray.placement import Layout, Spot


def test_ranks_are_numbered_node_by_node_with_bundle_0_as_rank_0():
    spread = [
        Spot("10.0.0.2", "b", ()),
        Spot("10.0.0.1", "a", ()),
        Spot("10.0.0.2", "b", ()),
        Spot("10.0.0.1", "a", ()),
    ]
    layout = Layout.of(spread)
    assert layout.order == [0, 2, 1, 3]
    assert layout.master_addr == "10.0.0.2"
    assert [layout.node_rank(rank) for rank in range(4)] == [0, 0, 1, 1]
    assert layout.describe() == ["node 0 (10.0.0.2): ranks 0, 1", "node 1 (10.0.0.1): ranks 2, 3"]
    env = layout.environment(3, {"RANK": "3", "MASTER_ADDR": "127.0.0.1", "OMP_NUM_THREADS": "8"}, threads=2)
    assert env == {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "NODE_RANK": "1",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.0.0.2",
        "OMP_NUM_THREADS": "2",
    }


def test_every_rank_of_a_node_sees_the_gpus_of_its_node_in_local_rank_order():
    layout = Layout.of([Spot("n1", "a", ("3",)), Spot("n1", "a", ("1",)), Spot("n2", "b", ("0",))])
    assert layout.environment(0, {}, 1)["CUDA_VISIBLE_DEVICES"] == "3,1"  # cuda:LOCAL_RANK is its own GPU
    assert layout.environment(1, {}, 1)["CUDA_VISIBLE_DEVICES"] == "3,1"
    assert layout.environment(2, {}, 1)["CUDA_VISIBLE_DEVICES"] == "0"
    assert "CUDA_VISIBLE_DEVICES" not in Layout.of([Spot("n1", "a")]).environment(0, {}, 1)


def test_a_gpu_per_rank_makes_cuda_ranks_and_the_threads_follow_the_cpus():
    assert RayOptions(resources={"GPU": 1, "CPU": 4}).device == "cuda"
    assert RayOptions(resources={"GPU": 1, "CPU": 4}).cpus == 4
    assert RayOptions(resources={"CPU": 0.5}).cpus == 1
    assert RayOptions().describe(2) == "2 ranks x {'CPU': 1} (PACK)"
