"""FSDP2 + tensor parallelism on a 2 x 2 mesh of real gloo ranks (4 processes), through the
Accelerator's ParallelismConfig, as Accelerate users write it: the weights of one process, the
same batches within a tensor-parallel group, clear errors for meshes that cannot be built."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from ranks import on_ranks, seeded_order
from test_fsdp import _assert_same_weights, _data
from torch.utils.data import DataLoader

from trainer_core import Accelerator, FullyShardedDataParallelPlugin, ParallelismConfig, set_seed


class MLP(nn.Module):
    """The tensor-parallel pair (``up`` split by columns, ``down`` by rows) between two plain layers."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(6, 16)
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.down(F.relu(self.up(self.embed(x)))))


CLIP = 0.3  # below most of the gradient norms here: clipping scales the gradients of both meshes


def train(parallel, batch_size, from_accelerate=False):
    """Two epochs of MLP with Adam; rank 0 returns the full weights. ``parallel``: a 2 x 2 mesh, the
    pair split over "tp" with torch's parallelize_module, FSDP2 over "dp_shard"."""
    set_seed(7)
    config, plugin = None, None
    if parallel:
        if from_accelerate:
            from accelerate.parallelism_config import ParallelismConfig as AccelerateConfig

            config = AccelerateConfig(dp_shard_size=2, tp_size=2)
        else:
            config = ParallelismConfig(dp_shard_size=2, tp_size=2)
        plugin = FullyShardedDataParallelPlugin()
    accelerator = Accelerator(parallelism_config=config, fsdp_plugin=plugin)
    model = MLP()
    if parallel:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        tp_mesh = accelerator.torch_device_mesh["tp"]
        parallelize_module(model, tp_mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = DataLoader(_data(), batch_size=batch_size, shuffle=True, generator=seeded_order())
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    norms, first_batches = [], []
    for _ in range(2):
        for x, y in loader:
            first_batches.append(float(x.sum()))
            accelerator.backward(F.cross_entropy(model(x), y))
            norms.append(float(accelerator.clip_grad_norm_(model.parameters(), CLIP)))
            optimizer.step()
            optimizer.zero_grad()
    coordinates = (accelerator.data_parallel_rank, accelerator.tensor_parallel_rank) if parallel else (0, 0)
    if parallel:  # Accelerate's flattened data-parallel dimension names the same coordinate
        assert accelerator.torch_device_mesh["dp"].get_local_rank() == accelerator.data_parallel_rank
    return {
        "weights": accelerator.get_state_dict(model),
        "norms": norms,
        "batches": first_batches,
        "coordinates": coordinates,
        "placements": {name: str(getattr(p, "placements", "")) for name, p in model.named_parameters()},
    }


@pytest.mark.parametrize("from_accelerate", [False, True])
def test_fsdp2_with_tensor_parallel_on_a_2x2_mesh_reaches_the_weights_of_one_process(from_accelerate):
    """Global batch 16, fp32, Adam, gradients clipped: 4 ranks (FSDP2 over 2, each layer of the pair
    split over 2) end where one process does, to 1e-5, with the same gradient norms; the two ranks of a
    tensor-parallel group see the same batches, the two groups different ones."""
    single = on_ranks(train, False, 16, num_processes=1)[0]
    ranks = on_ranks(train, True, 8, from_accelerate, num_processes=4)
    assert sorted(rank["coordinates"] for rank in ranks) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    by_coordinates = {rank["coordinates"]: rank for rank in ranks}
    assert by_coordinates[(0, 0)]["batches"] == by_coordinates[(0, 1)]["batches"]
    assert by_coordinates[(1, 0)]["batches"] == by_coordinates[(1, 1)]["batches"]
    assert by_coordinates[(0, 0)]["batches"] != by_coordinates[(1, 0)]["batches"]
    placements = ranks[0]["placements"]
    assert placements["up.weight"] == "(_StridedShard(dim=0, sf=2), Shard(dim=0))"  # FSDP over TP's column split
    assert placements["down.weight"] == "(Shard(dim=0), Shard(dim=1))"
    assert placements["head.weight"] == "(Shard(dim=0),)"  # a plain layer: FSDP only
    _assert_same_weights(single["weights"], ranks[0]["weights"], atol=1e-5)
    torch.testing.assert_close(torch.tensor(ranks[0]["norms"]), torch.tensor(single["norms"]), atol=1e-5, rtol=0)
    assert sum(norm > CLIP for norm in single["norms"]) >= len(single["norms"]) / 2  # clipping was at work
    assert all(rank["weights"] == {} for rank in ranks[1:])  # gathered to rank 0, as with FSDP alone


def mesh_error(sizes, sharded):
    try:
        plugin = FullyShardedDataParallelPlugin() if sharded else None
        Accelerator(parallelism_config=ParallelismConfig(**sizes), fsdp_plugin=plugin)
    except ValueError as error:
        return str(error)
    return None


def test_meshes_that_cannot_be_built_are_refused_by_name():
    """A mesh of another size than the launch, tensor parallelism without FSDP, FSDP with no ranks
    to shard over, and Accelerate's dimensions trainer_core does not run: each says what to change."""
    assert (
        "spans 4 ranks (dp_shard_size=2 x tp_size=2) but the launch has 2 processes"
        in on_ranks(mesh_error, {"dp_shard_size": 2, "tp_size": 2}, True)[0]
    )
    assert "ParallelismConfig needs fsdp_plugin" in on_ranks(mesh_error, {"tp_size": 2}, False)[0]
    assert "has no ranks to shard over" in on_ranks(mesh_error, {"tp_size": 2}, True)[0]
    for name, words in (("cp_size", "context"), ("sp_size", "sequence"), ("dp_replicate_size", "replicated")):
        with pytest.raises(ValueError, match=f"{name}=2\\): {words}"):
            ParallelismConfig(**{name: 2})
    with pytest.raises(ValueError, match="sizes are ints >= 1"):
        ParallelismConfig(tp_size=0)
