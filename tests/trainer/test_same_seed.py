"""The same script with the same seed trains the same model under trainer_core as under Accelerate.

Users port a run and compare curves, so a prepared loader draws the shuffle order and consumes the
global RNG exactly as Accelerate's does (``trainer_core/compat/shuffle.py``): the script below — shuffled
loader, dropout, two epochs — runs with Accelerate's ``Accelerator`` and with ours, on 2 CPU ranks
and in one process, and the final weights must be equal (fp32). A checkpoint taken mid-run and
resumed in a new launch reaches the uninterrupted run's weights too.
"""

from __future__ import annotations

import pytest
import torch
from ranks import on_ranks


def train(library, epochs=2, folder=None, stop_after=None, resume=False):
    import sys

    import torch.nn.functional as F
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    if "accelerate.state" in sys.modules:  # a forked rank starts without the test process's Accelerate state
        sys.modules["accelerate.state"].AcceleratorState._reset_state(True)
    if library == "accelerate":
        from accelerate import Accelerator
        from accelerate.utils import set_seed
    else:
        from trainer_core import Accelerator, set_seed
    set_seed(42)
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.3), nn.ReLU(), nn.Linear(16, 1))
    data = TensorDataset(torch.randn(96, 8), torch.randn(96, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    accelerator = Accelerator(cpu=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    first = 0
    if resume:
        accelerator.load_state(folder)
        first = stop_after
    for _epoch in range(first, epochs):
        if stop_after is not None and not resume and _epoch == stop_after:
            accelerator.save_state(folder)
            return None
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    weights = accelerator.unwrap_model(model).state_dict()
    return {name: value.clone() for name, value in weights.items()}


def _assert_equal(a, b):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=0)


@pytest.mark.parametrize("processes", [2, 1])
def test_the_same_seed_reaches_accelerates_weights(processes):
    theirs = on_ranks(train, "accelerate", num_processes=processes)
    ours = on_ranks(train, "trainer_core", num_processes=processes)
    _assert_equal(theirs[0], ours[0])
    if processes == 2:
        _assert_equal(ours[0], ours[1])  # DDP: every rank holds the same model
    longer = on_ranks(train, "trainer_core", 3, num_processes=processes)[0]
    assert not torch.equal(longer["0.weight"], ours[0]["0.weight"])  # the weights compared are trained ones


def test_a_run_resumed_from_its_checkpoint_reaches_the_uninterrupted_weights(tmp_path):
    whole = on_ranks(train, "trainer_core", 3)[0]
    on_ranks(train, "trainer_core", 3, str(tmp_path), 1)
    resumed = on_ranks(train, "trainer_core", 3, str(tmp_path), 1, True)[0]
    _assert_equal(whole, resumed)


def epoch_orders(library, break_at, size, workers, even_batches):
    """Each epoch's batches of a shuffled loader, the first epoch left with ``break`` after step
    ``break_at`` (Accelerate's ``early_stopping.py`` example leaves an epoch so), then a draw from
    the global RNG."""
    import sys

    from accelerate import DataLoaderConfiguration
    from torch.utils.data import DataLoader, TensorDataset

    if "accelerate.state" in sys.modules:
        sys.modules["accelerate.state"].AcceleratorState._reset_state(True)
    if library == "accelerate":
        from accelerate import Accelerator
        from accelerate.utils import set_seed
    else:
        from trainer_core import Accelerator, set_seed
    set_seed(42)
    loader = DataLoader(TensorDataset(torch.arange(float(size))), batch_size=4, shuffle=True, num_workers=workers)
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(even_batches=even_batches))
    loader = accelerator.prepare(loader)
    epochs = []
    for epoch in range(3):
        epochs.append([])
        for step, (x,) in enumerate(loader):
            epochs[-1].append(x.tolist())
            if epoch == 0 and step == break_at:
                break
    return epochs, torch.rand(1).item()


@pytest.mark.parametrize(
    ("processes", "break_at", "size", "workers", "even_batches"),
    [(2, 3, 40, 0, True), (2, 4, 40, 0, True), (2, 2, 42, 2, True), (2, 2, 42, 0, False), (1, 3, 40, 0, True)],
)
def test_an_epoch_left_early_is_followed_by_accelerates_next_epoch_order(
    processes, break_at, size, workers, even_batches
):
    """Before, a prepared loader drew the whole epoch's order from the sampler when the epoch began
    (two ``randperm`` draws of the generator); Accelerate draws it as batches are asked for, so after
    a ``break`` its generator had drawn one, and every later epoch's order differed (2 processes)."""
    args = (break_at, size, workers, even_batches)
    theirs = on_ranks(epoch_orders, "accelerate", *args, num_processes=processes)
    ours = on_ranks(epoch_orders, "trainer_core", *args, num_processes=processes)
    assert ours == theirs
    assert len(ours[0][0][0]) == break_at + 1  # the break happened (at step 4 of 40 samples: the last step)
