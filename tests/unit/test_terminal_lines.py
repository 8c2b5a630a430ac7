"""A rank's output becomes the lines a terminal would show: progress bars, nested or not, redraw in place.

The byte streams are written by the real libraries (tqdm's nested bars, rich's progress, a rich
display that grows and shrinks by a row, Lightning's ``RichProgressBar``) in a child process whose
output is a pipe, with ipykernel's ``FORCE_COLOR=1`` as a rank has it; the reference is pyte, a
terminal emulator, fed the same bytes. A pipe read can end anywhere, inside an escape code or a
UTF-8 character, or between two frames of a display: every stream is also read split at every
point, and at random points, and must give the same lines.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from textwrap import dedent

import pyte
import pytest

from notebook_launcher.frontend.views.ansi import strip_ansi
from notebook_launcher.wire import LineReader

# tqdm's bars without their rate and times, so each run writes the same bytes: a shorter frame
# written over a longer row (a kept inner bar over "epochs: 0%| | 0/2") leaves its end on a
# terminal ("3/32"), in every run rather than when the rates' lengths happen to differ. Before, the
# log showed "3/3" and the comparison failed now and then.
STEADY = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}"

PROGRAMS = {
    "tqdm nested, inner bars erased": """
        from tqdm import tqdm
        tqdm = functools.partial(tqdm, bar_format=STEADY)
        for epoch in tqdm(range(3), desc="epochs", position=0, mininterval=0):
            for step in tqdm(range(4), desc="steps", position=1, leave=False, mininterval=0):
                pass
        print("trained", file=sys.stderr)
    """,
    "tqdm nested, inner bars kept": """
        from tqdm import tqdm
        tqdm = functools.partial(tqdm, bar_format=STEADY)
        for epoch in tqdm(range(2), desc="epochs", position=0, mininterval=0):
            for step in tqdm(range(3), desc="steps", position=1, mininterval=0):
                pass
    """,
    "tqdm three levels": """
        from tqdm import tqdm
        tqdm = functools.partial(tqdm, bar_format=STEADY)
        for a in tqdm(range(2), desc="outer", position=0, mininterval=0):
            for b in tqdm(range(2), desc="middle", position=1, leave=False, mininterval=0):
                for c in tqdm(range(3), desc="inner", position=2, leave=False, mininterval=0):
                    pass
        print("after the bars", file=sys.stderr)
    """,
    "tqdm one bar between prints": """
        from tqdm import tqdm
        tqdm = functools.partial(tqdm, bar_format=STEADY)
        print("before", file=sys.stderr, flush=True)
        for step in tqdm(range(5), desc="one", mininterval=0):
            pass
        print("after", file=sys.stderr)
    """,
    "a hand-made progress line that gets shorter": """
        for left in (100, 50, 5):
            print(f"\\rleft {left}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        print("\\x1b[1mbold 1000\\x1b[0m\\r9", file=sys.stderr)
    """,
    "rich progress with two tasks": """
        from rich.console import Console
        from rich.progress import Progress
        with Progress(console=Console(file=sys.stderr), auto_refresh=False) as progress:
            first = progress.add_task("download", total=3)
            second = progress.add_task("train", total=3)
            for _ in range(3):
                progress.advance(first)
                progress.advance(second)
                progress.refresh()
        print("done", file=sys.stderr)
    """,
    "rich display growing and shrinking by a row": """
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn
        columns = TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[metrics]}")
        print("before", file=sys.stderr, flush=True)
        with Progress(*columns, console=Console(file=sys.stderr), auto_refresh=False) as progress:
            for epoch in range(3):
                task = progress.add_task(f"Epoch {epoch}", total=4, metrics="")
                for step in range(4):
                    metrics = f"train_loss: 0.{step}" + " val_loss: 0.123456789" * 3 * bool(epoch)
                    progress.update(task, advance=1, metrics=metrics)
                    progress.refresh()
                validation = progress.add_task("Validation", total=2, metrics="")
                for step in range(2):
                    progress.advance(validation)
                    progress.refresh()
                progress.remove_task(validation)
                progress.refresh()
        print("after", file=sys.stderr)
    """,
    "rich Live table growing a row a frame": """
        from rich.console import Console
        from rich.live import Live
        from rich.table import Table
        table = Table("step", "loss")
        print("before", file=sys.stderr, flush=True)
        with Live(table, console=Console(file=sys.stderr), auto_refresh=False) as live:
            for step in range(12):
                table.add_row(str(step), f"{1 / (step + 1):.3f}")
                live.refresh()
        print("after", file=sys.stderr)
    """,
    "Lightning's RichProgressBar, val_loss wrapping onto a second row": """
        import logging, time, warnings
        warnings.filterwarnings("ignore")
        logging.disable(logging.WARNING)
        import lightning as L
        import torch
        from lightning.pytorch.callbacks import RichProgressBar

        class Model(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(4, 1)
            def training_step(self, batch, index):
                time.sleep(0.01)
                loss = self.layer(batch[0]).pow(2).mean()
                self.log("train_loss", loss, prog_bar=True)
                return loss
            def validation_step(self, batch, index):
                self.log("val_loss", self.layer(batch[0]).pow(2).mean(), prog_bar=True)
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), 0.1)

        bar = RichProgressBar(refresh_rate=1, console_kwargs={"file": sys.stderr, "width": 100})
        data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4)), batch_size=4)
        trainer = L.Trainer(max_epochs=2, callbacks=[bar], logger=False, enable_checkpointing=False,
                            enable_model_summary=False, accelerator="cpu")
        trainer.fit(Model(), data, data)
        print("fitted", file=sys.stderr)
    """,
}


@functools.cache
def _stream(program: str) -> bytes:
    """What ``program`` writes on stderr when stderr is a pipe, as a rank's is (run once per program)."""
    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "100"}
    source = f"import functools, sys\nSTEADY = {STEADY!r}\n" + dedent(program)
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, env=env, timeout=120, check=True)
    return done.stderr


def _terminal(stream: bytes) -> list[str]:
    """The rows a terminal shows for ``stream`` (a pty turns each line feed into CR LF), on a screen
    wider than the 100 columns the libraries draw for, so that no row wraps."""
    screen = pyte.Screen(400, 100)
    screen.set_mode(pyte.modes.LNM)
    pyte.Stream(screen).feed(stream.decode())
    return [row.rstrip() for row in screen.display if row.strip()]


def _log(stream: bytes, size: int) -> tuple[list[str], int]:
    """The log lines read from ``stream`` in reads of ``size`` bytes, and the most rows shown live."""
    reader, text, most = LineReader(), "", 0
    for start in range(0, len(stream), size):
        text += reader.feed(stream[start : start + size])
        most = max(most, len(reader.live.splitlines()))
    text += reader.finish()
    return [strip_ansi(line).rstrip() for line in text.splitlines() if line.strip()], most


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_log_holds_what_a_terminal_shows_at_the_end(name):
    stream = _stream(PROGRAMS[name])
    assert b"\x1b[A" in stream or name.startswith(("tqdm one", "a hand-made")) or b"\x1b[2K" in stream
    expected = _terminal(stream)
    for size in (len(stream), 1, 5, 64):
        lines, _ = _log(stream, size)
        assert lines == expected, f"read in pieces of {size} bytes"


def _pieces(stream: bytes, cuts: list[int]) -> list[str]:
    """The log lines read from ``stream`` cut at ``cuts``."""
    reader, text, start = LineReader(), "", 0
    for cut in [*cuts, len(stream)]:
        text += reader.feed(stream[start:cut])
        start = cut
    text += reader.finish()
    return [strip_ansi(line).rstrip() for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("name", [name for name in PROGRAMS if "rich" in name or "nested" in name])
def test_where_the_reads_split_a_stream_changes_nothing_in_the_log(name):
    """Every split point (two reads), and 200 random splits into ten reads. Before: a rich display
    that grew by a row (a validation bar, Lightning's metrics wrapping) left a stale frame of its
    top row in the log for each read that ended between frames; read in one piece it left none."""
    import random

    stream = _stream(PROGRAMS[name])
    expected = _terminal(stream)
    for cut in range(len(stream) + 1):
        assert _pieces(stream, [cut]) == expected, f"split at byte {cut} of {len(stream)}"
    rng = random.Random(len(stream))
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(stream)), 9))
        assert _pieces(stream, cuts) == expected, f"split at {cuts}"


def test_a_growing_rich_live_table_is_shown_live_as_its_latest_frame_only():
    """Before: a ``Live`` table of 12 rows left every earlier frame in the log (each a row longer;
    a terminal shows 18 lines): rich hides the cursor and draws its first frame before it first
    moves up, so that frame's rows were given out as final, and it moves up one row per code."""
    stream = _stream(PROGRAMS["rich Live table growing a row a frame"])
    lines, most = _log(stream, 64)
    assert len(lines) == len(_terminal(stream)) == 18
    assert most <= 17  # the newest frame: 12 rows, the header's 3 and the bottom border, plus the row below


def test_nested_bars_are_shown_live_on_their_own_rows_then_give_their_last_frames():
    stream = _stream(PROGRAMS["tqdm nested, inner bars kept"])
    lines, most_live_rows = _log(stream, 7)
    assert most_live_rows >= 2  # the outer and the inner bar, both being drawn
    assert [line.split(":")[0] for line in lines] == ["steps", "steps", "epochs"]  # as a terminal leaves them
    assert all("100%" in line for line in lines)


def test_a_bar_row_is_held_only_until_a_later_line_shows_nothing_comes_back_to_it():
    reader = LineReader()
    assert reader.feed(b"\rbar 10%\rbar 100%\n") == ""  # a bar below could still move up to it
    assert reader.live == "bar 100%"
    assert reader.feed(b"next line\n") == "bar 100%\nnext line\n"
    assert reader.feed(b"\rcleared bar\r           \r\n") == ""  # a bar erased by its last frame
    assert reader.feed(b"plain\n") == "plain\n"


def test_settle_gives_out_the_finished_rows_when_a_call_ends():
    reader = LineReader()
    reader.feed(b"\router 1/1\n\rinner 2/2\x1b[A\n\rinner 2/2\n")
    assert reader.settle() == "outer 1/1\ninner 2/2\n"
    assert reader.live == "" and reader.finish() == ""


def test_cursor_moves_cannot_grow_the_open_rows_without_bound():
    reader = LineReader()
    text = reader.feed(b"\x1b[1000000B" + b"row\n" * 200 + b"\x1b[99999999A")
    assert text.count("row") >= 200 - 64 and len(reader.live.splitlines()) <= 64
    rest = reader.finish()
    assert (text + rest).count("row") == 200


def test_plain_output_stays_on_the_fast_path():
    reader = LineReader()
    assert reader.feed(b"\x1b[32mgreen\x1b[0m\n" * 3) == "\x1b[32mgreen\x1b[0m\n" * 3
    assert reader._screen is None  # colour codes alone do not need a screen


def test_a_long_line_after_cursor_moves_is_read_in_linear_time():
    """40 MiB without a newline, in 64 KiB reads, on a stream that moved the cursor before: each
    read's live preview joins only the end of the row (joining all of it at every read copied 13 GB)."""
    reader = LineReader()
    reader.feed(b"\rbar\x1b[A\n")
    piece = b"x" * 65536
    for _ in range(640):
        reader.feed(piece)
        assert len(reader.live) <= 4096
    assert reader.live.endswith("x" * 100)
    assert reader.finish().count("x") == 640 * 65536
