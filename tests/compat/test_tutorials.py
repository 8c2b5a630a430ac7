"""Hugging Face's tutorials, in their order of steps, on trainer_core in a real kernel.

Two patterns users copy: the Accelerate example notebook (``simple_nlp_example``: tokenized MRPC in
the kernel, the model made in the kernel and passed to the launch, ``prepare`` of model, optimizer and
both loaders, a linear warm-up schedule built AFTER ``prepare`` from the prepared loader's length, a
tqdm bar on the main process only, predictions and labels gathered, ``accelerator.print``) and the
course's "full training" chapter (loaders first in ``prepare``, a padding collator, ``get_scheduler``,
``gather_for_metrics`` into a metric's ``add_batch``). The only changes a user makes are the two
imports (``trainer_core.Accelerator``, our ``notebook_launcher``). Downloads have local stand-ins
(``accelerate_offline``: MRPC-shaped data, the GLUE metric, a tiny BERT whose positions stop at 64,
so sequences are padded to 64 instead of 128).
"""

from __future__ import annotations

from textwrap import dedent

import pytest
from paths import TESTS as HELPERS

from tests.kernel_session import KernelSession

pytestmark = pytest.mark.slow  # each tutorial run end to end (see conftest.py)

TESTS = str(HELPERS)

SETUP = dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import torch
    from torch.utils.data import DataLoader
    from trainer_core import Accelerator                      # was: from accelerate import Accelerator
    from notebook_launcher import notebook_launcher           # was: from accelerate import notebook_launcher
    from accelerate_offline import load_dataset, load as load_metric, make_tiny_bert  # stand-ins for downloads
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, get_linear_schedule_with_warmup,
                              set_seed)
    from tqdm.auto import tqdm
    import datasets, transformers

    model_checkpoint = make_tiny_bert({checkpoint!r})
    raw_datasets = load_dataset("glue", "mrpc")
    tokenizer = AutoTokenizer.from_pretrained(model_checkpoint)
""")

EXAMPLE_NOTEBOOK = dedent("""
    def tokenize_function(examples):
        return tokenizer(examples["sentence1"], examples["sentence2"], truncation=True, padding="max_length",
                         max_length=64)

    tokenized_datasets = raw_datasets.map(tokenize_function, batched=True,
                                          remove_columns=["idx", "sentence1", "sentence2"])
    tokenized_datasets = tokenized_datasets.rename_column("label", "labels")
    tokenized_datasets.set_format("torch")
    model = AutoModelForSequenceClassification.from_pretrained(model_checkpoint, num_labels=2)

    def create_dataloaders(train_batch_size=8, eval_batch_size=32):
        train_dataloader = DataLoader(tokenized_datasets["train"], shuffle=True, batch_size=train_batch_size)
        eval_dataloader = DataLoader(tokenized_datasets["validation"], shuffle=False, batch_size=eval_batch_size)
        return train_dataloader, eval_dataloader

    metric = load_metric("glue", "mrpc")
    hyperparameters = {"learning_rate": 2e-5, "num_epochs": 3, "train_batch_size": 8, "eval_batch_size": 32, "seed": 42}

    def training_function(model):
        accelerator = Accelerator()
        if accelerator.is_main_process:
            datasets.utils.logging.set_verbosity_warning()
            transformers.utils.logging.set_verbosity_info()
        else:
            datasets.utils.logging.set_verbosity_error()
            transformers.utils.logging.set_verbosity_error()
        train_dataloader, eval_dataloader = create_dataloaders(
            train_batch_size=hyperparameters["train_batch_size"], eval_batch_size=hyperparameters["eval_batch_size"]
        )
        set_seed(hyperparameters["seed"])
        optimizer = torch.optim.AdamW(params=model.parameters(), lr=hyperparameters["learning_rate"])
        model, optimizer, train_dataloader, eval_dataloader = accelerator.prepare(
            model, optimizer, train_dataloader, eval_dataloader
        )
        num_epochs = hyperparameters["num_epochs"]
        lr_scheduler = get_linear_schedule_with_warmup(
            optimizer=optimizer, num_warmup_steps=100, num_training_steps=len(train_dataloader) * num_epochs
        )
        progress_bar = tqdm(range(num_epochs * len(train_dataloader)), disable=not accelerator.is_main_process)
        for epoch in range(num_epochs):
            model.train()
            for step, batch in enumerate(train_dataloader):
                outputs = model(**batch)
                accelerator.backward(outputs.loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
                progress_bar.update(1)
            model.eval()
            all_predictions, all_labels = [], []
            for step, batch in enumerate(eval_dataloader):
                with torch.no_grad():
                    outputs = model(**batch)
                all_predictions.append(accelerator.gather(outputs.logits.argmax(dim=-1)))
                all_labels.append(accelerator.gather(batch["labels"]))
            all_predictions = torch.cat(all_predictions)[: len(tokenized_datasets["validation"])]
            all_labels = torch.cat(all_labels)[: len(tokenized_datasets["validation"])]
            eval_metric = metric.compute(predictions=all_predictions, references=all_labels)
            accelerator.print(f"epoch {epoch}:", eval_metric)
""")

COURSE_CHAPTER = dedent("""
    from transformers import DataCollatorWithPadding, get_scheduler

    def tokenize_function(example):
        return tokenizer(example["sentence1"], example["sentence2"], truncation=True)

    tokenized_datasets = raw_datasets.map(tokenize_function, batched=True)
    tokenized_datasets = tokenized_datasets.remove_columns(["sentence1", "sentence2", "idx"])
    tokenized_datasets = tokenized_datasets.rename_column("label", "labels")
    tokenized_datasets.set_format("torch")
    data_collator = DataCollatorWithPadding(tokenizer=tokenizer)

    def training_function():
        accelerator = Accelerator()
        train_dataloader = DataLoader(tokenized_datasets["train"], shuffle=True, batch_size=8, collate_fn=data_collator)
        eval_dataloader = DataLoader(tokenized_datasets["validation"], batch_size=8, collate_fn=data_collator)
        model = AutoModelForSequenceClassification.from_pretrained(model_checkpoint, num_labels=2)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5)
        train_dl, eval_dl, model, optimizer = accelerator.prepare(train_dataloader, eval_dataloader, model, optimizer)
        num_epochs = 3
        num_training_steps = num_epochs * len(train_dl)
        lr_scheduler = get_scheduler("linear", optimizer=optimizer, num_warmup_steps=0,
                                     num_training_steps=num_training_steps)
        progress_bar = tqdm(range(num_training_steps), disable=not accelerator.is_local_main_process)
        model.train()
        for epoch in range(num_epochs):
            for batch in train_dl:
                outputs = model(**batch)
                accelerator.backward(outputs.loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
                progress_bar.update(1)
        metric = load_metric("glue", "mrpc")
        model.eval()
        for batch in eval_dl:
            with torch.no_grad():
                outputs = model(**batch)
            predictions = torch.argmax(outputs.logits, dim=-1)
            metric.add_batch(*accelerator.gather_for_metrics((predictions, batch["labels"])))
        accelerator.print("evaluated:", metric.compute())
        return lr_scheduler.get_last_lr()[0], progress_bar.n
""")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    session = KernelSession()
    session.ok(SETUP.format(tests=TESTS, checkpoint=str(tmp_path_factory.mktemp("tiny-bert"))), timeout=180)
    yield session
    session.shutdown()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_the_accelerate_example_notebook_runs_as_written(kernel, method):
    """Before: ``TypeError: PreparedOptimizer is not an Optimizer`` at the schedule, on every rank."""
    kernel.ok(EXAMPLE_NOTEBOOK, timeout=180)
    result = kernel.ok(
        f"notebook_launcher(training_function, (model,), num_processes=2, start_method={method!r})", timeout=300
    )
    printed = [line for line in result.stdout.splitlines() if ": {'accuracy'" in line]
    assert [line.split(":")[0] for line in printed] == ["[rank 0] epoch 0", "[rank 0] epoch 1", "[rank 0] epoch 2"]
    bars = [line for line in result.stderr.splitlines() if "it/s]" in line or "s/it]" in line]
    assert bars and all(line.startswith("[rank 0] ") for line in bars)  # the main process's bar alone
    assert bars[-1].split("] ", 1)[1].startswith("100%")


def test_the_course_full_training_chapter_runs_as_written(kernel):
    kernel.ok(COURSE_CHAPTER, timeout=180)
    result = kernel.ok(
        "last_lr, steps = notebook_launcher(training_function, num_processes=2)\nprint('RESULT', last_lr, steps)",
        timeout=300,
    )
    assert "[rank 0] evaluated: {'accuracy'" in result.stdout and "[rank 1] evaluated" not in result.stdout
    last_lr, steps = result.stdout.split("RESULT ", 1)[1].split()
    assert float(last_lr) == 0.0  # the linear schedule ran to its end on the prepared optimizer
    assert int(steps) == 3 * 6  # 96 rows / (2 ranks x 8) per epoch, 3 epochs
