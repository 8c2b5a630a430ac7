"""A checkpoint's markers never make the library take a file it did not write (issue 61, round 3).

An empty ``COMPLETE`` used to be read as an old release's marker, and every entry no newer than it
as the library's: the next ``save_state(dir)`` then removed the user's notebook and data. Three
ways there: a crash between creating the marker and writing its list, a folder that already held
an empty ``COMPLETE`` (a pipeline's sentinel), files moved (older mtime) into an old checkpoint.
Also here: a save folder that is a symbolic link, a full disk during the publish, unfinished
numbered checkpoints, and the working directory as the save folder. Real Accelerators and files;
crashes are injected at every file operation of a save (an ``open``, a ``write``, a rename...).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from test_checkpoint_files import still_there, user_files

from trainer_core import Accelerator, atomic
from trainer_core.checkpoint import CheckpointNotWritten
from trainer_core.project import ProjectConfiguration


def prepared():
    accelerator = Accelerator(cpu=True)
    return accelerator, accelerator.prepare(nn.Linear(3, 3))


def fill(model, value):
    with torch.no_grad():
        model.weight.fill_(value)


def loaded(accelerator, model, folder):
    fill(model, -1.0)
    accelerator.load_state(str(folder))
    return float(model.weight.detach()[0, 0])


def an_old_release_checkpoint(folder: Path):
    """A checkpoint as releases before 0.2 left it: its files and an empty ``COMPLETE``."""
    accelerator, model = prepared()
    fill(model, 1.0)
    accelerator.save_state(str(folder))
    (folder / "COMPLETE").write_text("")
    return accelerator, model


def test_an_empty_complete_in_the_users_folder_is_theirs_and_nothing_of_theirs_is_removed(tmp_path):
    """A pipeline's empty ``COMPLETE`` sentinel beside a notebook and its data: before, the save
    took every file as an old checkpoint's and removed them all."""
    files = {**user_files(tmp_path), "COMPLETE": b""}
    (tmp_path / "COMPLETE").write_bytes(b"")
    accelerator, _ = prepared()
    with pytest.raises(FileExistsError, match=r"would replace COMPLETE, which the library did not write"):
        accelerator.save_state(str(tmp_path))
    assert still_there(tmp_path, files)
    assert not (tmp_path.parent / f"{tmp_path.name}.tmp").exists()  # the refused copy is not left behind
    assert not (tmp_path.parent / f"{tmp_path.name}.prev").exists()


def test_files_moved_into_an_old_release_checkpoint_are_never_taken_for_its_own(tmp_path):
    """``mv`` keeps a file's mtime, so files older than the old marker were counted as the
    library's and removed by the next save."""
    accelerator, model = an_old_release_checkpoint(tmp_path)
    files = user_files(tmp_path)
    for name in files:
        os.utime(tmp_path / name, (0, 0))  # as old as any file can be: older than the marker
    os.utime(tmp_path / "data", (0, 0))
    with pytest.raises(FileExistsError, match=r"would replace COMPLETE, .* did not write \(its COMPLETE is empty"):
        accelerator.save_state(str(tmp_path))
    assert still_there(tmp_path, files)
    assert loaded(accelerator, model, tmp_path) == 1.0  # the old checkpoint still loads


def test_an_old_release_checkpoint_alone_in_its_folder_is_still_replaced(tmp_path):
    folder = tmp_path / "ckpt"
    accelerator, model = an_old_release_checkpoint(folder)
    (tmp_path / "train.ipynb").write_text("{}")  # beside the folder, not in it
    fill(model, 2.0)
    accelerator.save_state(str(folder))
    assert loaded(accelerator, model, folder) == 2.0
    assert atomic.written(str(folder)) and (folder / "COMPLETE").read_text().startswith("[")
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "train.ipynb"]


class Crash(BaseException):
    """The process dies here (a SIGKILL, the OOM killer, a power cut): nothing after it runs."""


class CrashingFiles:
    """Counts a save's file operations (each ``open``, ``write``, rename, replace, removal, link,
    folder creation) and dies before the ``crash_at``-th: a file can be created and never written."""

    OS_CALLS = ("rename", "replace", "remove", "unlink", "link", "rmdir", "makedirs")

    def __init__(self, monkeypatch, crash_at=None):
        self.crash_at = crash_at
        self.done = 0
        for name in self.OS_CALLS:
            monkeypatch.setattr(atomic.os, name, self._counted(getattr(os, name)))
        monkeypatch.setattr(atomic.shutil, "rmtree", self._counted(atomic.shutil.rmtree))
        monkeypatch.setattr(atomic, "open", self._open, raising=False)

    def step(self):
        if self.done == self.crash_at:
            raise Crash(f"crash before file operation {self.done}")
        self.done += 1

    def _counted(self, real):
        def operation(*args, **kwargs):
            self.step()
            return real(*args, **kwargs)

        return operation

    def _open(self, path, mode="r", *args, **kwargs):
        self.step()
        file = open(path, mode, *args, **kwargs)  # noqa: SIM115 (closed by the caller's with)
        if "w" in mode:
            real_write = file.write

            def write(data):
                self.step()
                return real_write(data)

            file.write = write
        return file


def no_empty_marker(*folders):
    for folder in folders:
        for marker in atomic.COMPLETE, atomic.WRITING:
            path = Path(folder) / marker
            if path.is_file():
                assert path.read_text().strip(), f"{path} is empty"


@pytest.mark.parametrize("where", ["beside the user's files", "in a folder of its own"])
def test_a_crash_at_every_file_operation_of_a_save_then_the_next_saves_keep_every_user_file(
    tmp_path, monkeypatch, where
):
    """Every crash point of a second save (the marker created but not written among them), then two
    more saves and loads: the old or new weights load after the crash, the next saves succeed and
    load, no empty marker is ever left, and the user's files (in the folder or beside it) are as
    they were."""
    points = 0
    while True:
        case = tmp_path / f"crash-{points}"
        folder = case if where == "beside the user's files" else case / "ckpt"
        files = user_files(case)
        accelerator, model = prepared()
        fill(model, 1.0)
        accelerator.save_state(str(folder))
        fill(model, 2.0)
        with monkeypatch.context() as patch:
            crashing = CrashingFiles(patch, crash_at=points)
            try:
                accelerator.save_state(str(folder))
                finished = True
            except Crash:
                finished = False
        no_empty_marker(folder, f"{folder}.prev", f"{folder}.tmp")
        assert loaded(accelerator, model, folder) in (1.0, 2.0), f"crash {points}"
        for value in (3.0, 4.0):
            fill(model, value)
            accelerator.save_state(str(folder))
            assert loaded(accelerator, model, folder) == value, f"crash {points}"
            assert still_there(case, files), f"crash {points}"
        assert not os.path.exists(f"{folder}.tmp") and not os.path.exists(f"{folder}.prev")
        if finished:
            break
        points += 1
    assert points == crashing.done > 15  # every operation of the save was a crash point


def test_a_save_folder_that_is_a_link_stays_a_link_and_the_checkpoint_goes_where_it_points(tmp_path):
    """A folder on a mounted drive, linked from the project: the link was renamed to ``.prev`` and
    a real folder published on the local disk, and every later save failed."""
    drive = tmp_path / "drive" / "checkpoints"
    drive.mkdir(parents=True)
    project = tmp_path / "project"
    project.mkdir()
    link = project / "ckpt"
    link.symlink_to(drive)
    accelerator, model = prepared()
    for value in (1.0, 2.0, 3.0):
        fill(model, value)
        assert accelerator.save_state(str(link)) == str(link)
        assert link.is_symlink() and os.readlink(link) == str(drive)
        assert loaded(accelerator, model, link) == value
    assert sorted(os.listdir(project)) == ["ckpt"]
    assert sorted(os.listdir(drive.parent)) == ["checkpoints"]
    assert "model.safetensors" in atomic.written(str(drive))


def test_a_link_to_a_folder_that_is_not_there_is_refused_and_nothing_is_made(tmp_path):
    link = tmp_path / "ckpt"
    link.symlink_to(tmp_path / "unmounted" / "drive")
    accelerator, _ = prepared()
    with pytest.raises(FileNotFoundError, match=r"links to .*unmounted/drive, which is not a folder"):
        accelerator.save_state(str(link))
    assert sorted(os.listdir(tmp_path)) == ["ckpt"] and link.is_symlink()


class FullDisk:
    """A disk that fills at the ``at``-th write of a marker during the publish (a stand-in: the
    machine's disk cannot be filled by a test; the file size limit of the next test fails earlier
    writes, not these small ones)."""

    def __init__(self, monkeypatch, at):
        self.at = at
        self.writes = 0
        monkeypatch.setattr(atomic, "open", self._open, raising=False)

    def _open(self, path, mode="r", *args, **kwargs):
        if "w" in mode and os.path.basename(path).endswith(".writing"):
            self.writes += 1
            if self.writes == self.at:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return open(path, mode, *args, **kwargs)


def test_a_disk_that_fills_as_the_publish_begins_leaves_nothing_and_says_so(tmp_path, monkeypatch):
    files = user_files(tmp_path)
    accelerator, model = prepared()
    fill(model, 1.0)
    accelerator.save_state(str(tmp_path))
    fill(model, 2.0)
    with monkeypatch.context() as patch:
        FullDisk(patch, at=2)  # after the .tmp's WRITING: the new checkpoint's own COMPLETE
        with pytest.raises(CheckpointNotWritten, match=r"\(No space left on device;.*Nothing was published"):
            accelerator.save_state(str(tmp_path))
    assert not (tmp_path.parent / f"{tmp_path.name}.tmp").exists()  # before: a sealed .tmp stayed
    assert not (tmp_path.parent / f"{tmp_path.name}.prev").exists()
    assert still_there(tmp_path, files) and loaded(accelerator, model, tmp_path) == 1.0


def test_a_disk_that_fills_as_the_new_complete_is_written_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    files = user_files(tmp_path)
    accelerator, model = prepared()
    fill(model, 1.0)
    accelerator.save_state(str(tmp_path))
    fill(model, 2.0)
    with monkeypatch.context() as patch:
        # the .tmp's WRITING and COMPLETE, the .prev's two, the folder's WRITING, then its COMPLETE
        disk = FullDisk(patch, at=6)
        with pytest.raises(CheckpointNotWritten, match=r"cut short while replacing the previous checkpoint"):
            accelerator.save_state(str(tmp_path))
        assert disk.writes == 6
    assert loaded(accelerator, model, tmp_path) == 1.0 and still_there(tmp_path, files)
    fill(model, 3.0)
    accelerator.save_state(str(tmp_path))  # the next save finishes the job
    assert loaded(accelerator, model, tmp_path) == 3.0 and still_there(tmp_path, files)
    assert not (tmp_path.parent / f"{tmp_path.name}.prev").exists()


def test_an_unfinished_numbered_checkpoint_does_not_count_against_total_limit_and_is_removed(tmp_path):
    """A ``checkpoint_2.tmp`` left by a crashed save counted as one of the ``total_limit`` kept,
    so a complete one was pruned in its place, and it was never cleaned."""
    config = ProjectConfiguration(str(tmp_path), automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(cpu=True, project_config=config)
    model = accelerator.prepare(nn.Linear(3, 3))
    for _ in range(2):
        accelerator.save_state()
    crashed = atomic.begin(os.path.join(config.checkpoints_dir, "checkpoint_2"))
    (Path(crashed) / "model.safetensors").write_bytes(b"half a model")
    accelerator.save_state()
    assert sorted(os.listdir(config.checkpoints_dir)) == ["checkpoint_1", "checkpoint_3"]
    fill(model, 5.0)
    accelerator.save_state()
    assert sorted(os.listdir(config.checkpoints_dir)) == ["checkpoint_3", "checkpoint_4"]
    fill(model, 0.0)
    assert os.path.basename(accelerator.load_state()) == "checkpoint_4" and float(model.weight[0, 0]) == 5.0


def test_pruning_a_checkpoint_keeps_what_someone_else_put_in_its_folder(tmp_path):
    config = ProjectConfiguration(str(tmp_path), automatic_checkpoint_naming=True, total_limit=1)
    accelerator = Accelerator(cpu=True, project_config=config)
    accelerator.prepare(nn.Linear(3, 3))
    first = accelerator.save_state()
    (Path(first) / "notes.txt").write_text("lr 1e-3 looked best")
    accelerator.save_state()
    assert (Path(first) / "notes.txt").read_text() == "lr 1e-3 looked best"
    assert os.listdir(first) == ["notes.txt"]  # the checkpoint's files went, the person's note stayed


def test_saving_into_the_working_directory_leaves_the_process_in_it(tmp_path, monkeypatch):
    """An empty save folder that is the working directory was renamed to ``.prev`` and removed,
    leaving the process in a deleted directory (``os.getcwd()`` then fails)."""
    folder = tmp_path / "run"
    folder.mkdir()
    monkeypatch.chdir(folder)
    accelerator, model = prepared()
    for value in (1.0, 2.0):
        fill(model, value)
        accelerator.save_state(os.getcwd())
        assert os.getcwd() == str(folder) and os.path.samefile(os.curdir, folder)
    assert loaded(accelerator, model, folder) == 2.0
    assert sorted(os.listdir(tmp_path)) == ["run"]
