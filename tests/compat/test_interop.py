"""Real client libraries inside ranks: Lightning Fabric's DDP and Hugging Face's Trainer.

Ranks are not interactive sessions, so these libraries take their script paths there: Fabric
accepts strategy="ddp" under fork (it refuses it in an interactive session), and Trainer's progress
display either falls back to its console form or, when the kernel already chose the notebook form,
shows on rank 0 alone (as under torchrun) as one rich display that each update replaces.
"""

from __future__ import annotations

from textwrap import dedent

import pytest

FABRIC = dedent("""
    from lightning.fabric import Fabric   # imported in the kernel, as a notebook does
    def fabric_ddp():
        import torch
        fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
        fabric.launch()
        total = fabric.all_reduce(torch.tensor([fabric.global_rank + 1.0]), reduce_op="sum")
        return fabric.world_size, fabric.global_rank, total.item()
""")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_lightning_fabric_ddp_runs_in_a_launch(kernel, method):
    kernel.ok(FABRIC, timeout=180)
    kernel.ok(
        f"job = launch(fabric_ddp, num_processes=2, start_method={method!r}, display='none'); job.wait()", timeout=180
    )
    assert kernel.eval("job.results") == [(2, 0, 3.0), (2, 1, 3.0)]


TRAINER = dedent("""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
    class Tiny(torch.utils.data.Dataset):
        def __len__(self):
            return 32
        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"input_ids": torch.randint(0, 50, (8,), generator=g), "labels": torch.tensor(i % 2)}
    def hf_trainer(output_dir):
        config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=32, max_position_embeddings=16)
        model = BertForSequenceClassification(config)
        args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=4, num_train_epochs=2,
                                 report_to=[], use_cpu=True, logging_steps=1, save_strategy="no")
        trainer = Trainer(model=model, args=args, train_dataset=Tiny())
        result = trainer.train()
        return trainer.args.world_size, result.global_step
""")


def test_hugging_face_trainer_runs_on_two_ranks_and_its_progress_display_is_replaced_in_place(kernel, tmp_path):
    kernel.ok(TRAINER, timeout=300)
    kernel.ok(
        f"job = launch(hf_trainer, args=({str(tmp_path)!r},), num_processes=2, display='widget'); job.wait()",
        timeout=300,
    )
    assert kernel.eval("job.results") == [(2, 8), (2, 8)]  # 32 samples / (2 ranks x 4) x 2 epochs
    texts = kernel.eval("[line.text for line in job.lines(0)]")
    assert not any("IPython.core.display" in text for text in texts)
    displays = kernel.eval("[line.display_id for line in job.lines(0) if line.bundle is not None]")
    assert len(displays) == len(set(displays))  # every update replaced its display: no pile of tables
    page = kernel.eval("job.view.static['text/html']")
    assert "Epoch 2/2" in page  # the Trainer's progress display, its last update (the second epoch)
    # only rank 0 draws it, as under torchrun (transformers picked the notebook table for every
    # process when the kernel imported it: each rank drew its own)
    assert kernel.eval("[line.text for line in job.lines(1) if line.bundle is not None or 'Epoch' in line.text]") == []


RICH = dedent("""
    def uses_rich():
        from rich.console import Console
        from rich.progress import track
        console = Console()
        console.print("[bold magenta]hello[/] from rich")
        for _ in track(range(3), description="work"):
            pass
        return console.is_jupyter
""")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_rich_in_a_rank_writes_to_its_log_in_colour_as_in_a_script(kernel, method):
    """rich asks the builtin ``get_ipython`` whether it runs in a notebook; in a rank it must not
    (it would build a widget, which a rank cannot show). Its colour codes show as colours."""
    kernel.ok("from rich.console import Console\nConsole().print('the kernel itself is a notebook')")
    kernel.ok(RICH)
    kernel.ok(f"job = launch(uses_rich, num_processes=2, start_method={method!r}, display='widget'); job.wait()")
    assert kernel.eval("job.results") == [False, False]
    page = kernel.eval("job.view.static['text/html']")
    assert '<span style="font-weight:bold;color:#bc3fbc">hello</span> from rich' in page
    assert "\\x1b" not in page and "[1;35m" not in page
    plain = kernel.eval("job.view.static['text/plain']")
    assert "[rank 1] hello from rich" in plain and "\\x1b" not in plain


LIGHTNING = dedent("""
    import torch
    import lightning as L
    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
        def training_step(self, batch, _):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("loss", loss, prog_bar=True)
            return loss
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)
    def lightning_trainer():
        data = torch.utils.data.TensorDataset(torch.randn(32, 4))
        trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, logger=False,
                            enable_checkpointing=False)
        trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))
        return trainer.world_size, trainer.global_rank, trainer.global_step
""")


def test_lightning_trainer_with_its_default_progress_bar_runs_in_a_launch(kernel):
    kernel.ok(LIGHTNING, timeout=180)
    kernel.ok("job = launch(lightning_trainer, num_processes=2, display='widget'); job.wait()", timeout=300)
    assert kernel.eval("job.results") == [(2, 0, 8), (2, 1, 8)]
    assert "Epoch 1" in kernel.eval("job.logs(0)")


NESTED = dedent("""
    def nested_trainer(strategy):
        data = torch.utils.data.TensorDataset(torch.randn(32, 4))
        trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_epochs=1, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False)
        trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))
    def nested_fabric(strategy):
        from lightning.fabric import Fabric
        Fabric(accelerator="cpu", devices=2, strategy=strategy).launch(lambda fabric: fabric.global_rank)
""")


@pytest.mark.parametrize(
    ("method", "function", "strategy"),
    [("fork", "nested_trainer", "ddp_notebook"), ("spawn", "nested_fabric", "ddp_spawn")],
)
def test_a_lightning_strategy_that_starts_its_own_processes_says_what_to_use_in_a_launch(
    kernel, method, function, strategy
):
    """Before: Trainer(strategy="ddp_notebook") in a launch's ranks failed with a bare gloo
    "Connection reset by peer" (the processes it forked met at the launch's address)."""
    kernel.ok(LIGHTNING + NESTED, timeout=180)
    result = kernel.run(
        f"job = launch({function}, ({strategy!r},), num_processes=2, start_method={method!r}, display='none')\n"
        "job.wait()",
        timeout=300,
    )
    assert result.error is not None and result.error["ename"] == "RuntimeError"
    message = result.error["evalue"]
    assert f'strategy="{strategy}" starts processes of its own' in message
    assert 'Use Trainer(strategy="ddp", devices=2)' in message and "without a launch" in message
    assert kernel.ok("print('the kernel goes on')").stdout == "the kernel goes on\n"
