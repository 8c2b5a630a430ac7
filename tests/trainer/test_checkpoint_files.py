"""Checkpoints never lose a file the library did not write, nor the checkpoint just written.

``save_state(os.getcwd())`` used to replace the whole folder (the notebook, its data and a saved
model went with it), and a new run numbering from 0 in a used ``project_dir`` had its first
checkpoint pruned at once. Real Accelerators, real files, crashes injected at every step of a save.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from ranks import on_ranks

from trainer_core import Accelerator, atomic
from trainer_core.project import ProjectConfiguration


def user_files(folder: Path) -> dict[str, bytes]:
    """A notebook, its data, a folder of the user's and a model saved by hand, as a person keeps them."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    files = {
        "train.ipynb": b'{"cells": []}',
        "data/digits.csv": b"1,2,3\n",
        "my_model.pt": b"weights I saved myself",
    }
    for name, content in files.items():
        (folder / name).write_bytes(content)
    return files


def still_there(folder: Path, files: dict[str, bytes]) -> bool:
    return all((folder / name).read_bytes() == content for name, content in files.items())


def weights_after_saving_twice(folder):
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(3, 3))
    with torch.no_grad():
        model.weight.fill_(1.0)
    accelerator.save_state(folder)
    with torch.no_grad():
        model.weight.fill_(2.0)
    accelerator.save_state(folder)
    with torch.no_grad():
        model.weight.fill_(0.0)
    accelerator.load_state(folder)
    return model.weight.detach().clone()


def test_save_state_into_a_folder_of_the_users_keeps_every_file_of_theirs(tmp_path):
    files = user_files(tmp_path)
    restored = weights_after_saving_twice(str(tmp_path))
    assert still_there(tmp_path, files)
    assert torch.equal(restored, torch.full((3, 3), 2.0))
    ours = atomic.written(str(tmp_path))
    assert "model.safetensors" in ours and not {"train.ipynb", "data", "my_model.pt"} & set(ours)
    assert not (tmp_path.parent / f"{tmp_path.name}.tmp").exists()
    assert not (tmp_path.parent / f"{tmp_path.name}.prev").exists()


def test_a_file_of_the_users_a_checkpoint_would_replace_is_refused_and_nothing_is_touched(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"the user's own")
    files = user_files(tmp_path)
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(nn.Linear(3, 3))
    with pytest.raises(FileExistsError, match=r"would replace model\.safetensors, which the library did not write"):
        accelerator.save_state(str(tmp_path))
    assert (tmp_path / "model.safetensors").read_bytes() == b"the user's own" and still_there(tmp_path, files)
    assert not (tmp_path / atomic.COMPLETE).exists()


def test_folders_in_the_way_that_the_library_did_not_make_are_refused_not_removed(tmp_path):
    (tmp_path / "ckpt.tmp").mkdir()
    (tmp_path / "ckpt.tmp" / "notes.txt").write_text("mine")
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(nn.Linear(3, 3))
    with pytest.raises(FileExistsError, match=r"ckpt\.tmp is in the way of the checkpoint and was not written by it"):
        accelerator.save_state(str(tmp_path / "ckpt"))
    assert (tmp_path / "ckpt.tmp" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("crash_at", range(15))  # a save beside user files makes 14 of them
def test_a_crash_at_any_step_of_a_save_beside_user_files_leaves_a_checkpoint_and_their_files(
    tmp_path, monkeypatch, crash_at
):
    """The save into a folder holding the user's files is interrupted before its ``crash_at``-th
    file operation (rename, replace, remove, link): loading then finds the old or the new weights,
    and the user's files are untouched."""
    files = user_files(tmp_path)
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(3, 3))
    with torch.no_grad():
        model.weight.fill_(1.0)
    accelerator.save_state(str(tmp_path))
    with torch.no_grad():
        model.weight.fill_(2.0)
    calls = []

    def crashing(real):
        def operation(*args, **kwargs):
            if len(calls) == crash_at:
                raise KeyboardInterrupt("crash")
            calls.append(real.__name__)
            return real(*args, **kwargs)

        return operation

    for name in ("rename", "replace", "remove", "link", "rmdir"):
        monkeypatch.setattr(atomic.os, name, crashing(getattr(os, name)))
    try:
        accelerator.save_state(str(tmp_path))
    except KeyboardInterrupt:
        pass
    monkeypatch.undo()
    with torch.no_grad():
        model.weight.fill_(0.0)
    accelerator.load_state(str(tmp_path))
    assert float(model.weight.detach()[0, 0]) in (1.0, 2.0)
    assert still_there(tmp_path, files)
    accelerator.save_state(str(tmp_path))  # the next save cleans up after the crash
    assert still_there(tmp_path, files) and atomic.resolve(str(tmp_path)) == str(tmp_path)


def numbered_run(project_dir, start, saves, total_limit):
    """A run in ``project_dir`` that saves ``saves`` numbered checkpoints; with ``start`` None it
    does not ``load_state()`` first (a new run); returns what each save wrote and what load_state()
    then finds."""
    accelerator = Accelerator(
        project_config=ProjectConfiguration(project_dir, automatic_checkpoint_naming=True, total_limit=total_limit)
    )
    model = accelerator.unwrap_model(accelerator.prepare(nn.Linear(2, 2)))
    if start is not None:
        accelerator.load_state()
    written = []
    for value in range(saves):
        with torch.no_grad():
            model.weight.fill_(float(value))
        written.append(os.path.basename(accelerator.save_state()))
    with torch.no_grad():
        model.weight.fill_(-1.0)
    loaded = os.path.basename(accelerator.load_state())
    return written, loaded, float(model.weight[0, 0])


def test_a_new_run_in_a_used_project_numbers_after_its_checkpoints_and_keeps_its_own(tmp_path):
    old = on_ranks(numbered_run, str(tmp_path), None, 5, 3)[0]
    assert old[0] == [f"checkpoint_{i}" for i in range(5)]
    new = on_ranks(numbered_run, str(tmp_path), None, 2, 3)[0]
    assert new[0] == ["checkpoint_5", "checkpoint_6"]  # not checkpoint_0, pruned at once as the oldest
    assert new[1:] == ("checkpoint_6", 1.0)  # load_state() resumes the new run, not the old one
    kept = sorted(os.listdir(tmp_path / "checkpoints"))
    assert kept == ["checkpoint_4", "checkpoint_5", "checkpoint_6"]


def test_the_checkpoint_just_written_is_never_pruned(tmp_path):
    """Even when its number is not among the highest (a run that set ``iteration`` back itself)."""
    from trainer_core import project

    config = ProjectConfiguration(str(tmp_path), automatic_checkpoint_naming=True, total_limit=1)
    for number in (3, 8):
        folder = os.path.join(config.checkpoints_dir, f"checkpoint_{number}")
        atomic.publish(atomic.begin(folder), folder)
    project.prune_checkpoints(config, keep=os.path.join(config.checkpoints_dir, "checkpoint_3"))
    assert sorted(os.listdir(config.checkpoints_dir)) == ["checkpoint_3", "checkpoint_8"]


def test_a_save_that_cannot_write_says_so_once_and_leaves_no_partial_copy(tmp_path):
    """A write that fails mid-save (here a real file size limit, RLIMIT_FSIZE, which fails writes
    past it with EFBIG as a full disk fails them with ENOSPC): before, torch's or safetensors' own
    error chained to the OSError under it, and the unfinished ``.tmp`` copy kept the disk full."""
    import resource
    import signal

    from trainer_core.checkpoint import CheckpointNotWritten

    files = user_files(tmp_path)
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(512, 512))  # 1 MiB of weights
    accelerator.save_state(str(tmp_path))  # a first, complete checkpoint
    before = {name: (tmp_path / name).read_bytes() for name in atomic.written(str(tmp_path))}
    with torch.no_grad():
        model.weight.fill_(3.0)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit: EFBIG, not the signal's end
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))
    try:
        with pytest.raises(CheckpointNotWritten) as caught:
            accelerator.save_state(str(tmp_path))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    message = str(caught.value)
    assert message.startswith(f"save_state could not write the checkpoint for {tmp_path} (File too large;")
    assert "Nothing was published" in message and caught.value.__suppress_context__
    assert not (tmp_path.parent / f"{tmp_path.name}.tmp").exists()
    assert still_there(tmp_path, files)
    assert {name: (tmp_path / name).read_bytes() for name in atomic.written(str(tmp_path))} == before
