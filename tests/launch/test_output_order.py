"""A rank's stdout and stderr keep the order the rank wrote them in, as a terminal and a plain cell do.

Real kernels, real forked and spawned ranks: ``print`` alternating with ``print(file=sys.stderr)``,
``logging`` (to stderr) and ``warnings`` between prints. The order must hold in the launch's lines,
``logs()``, the text the cell shows and the static form the notebook saves.
"""

from __future__ import annotations

import itertools
import json
import re
from textwrap import dedent

import pytest

from tests.kernel_session import KernelSession

WRITER = dedent("""
    import logging, sys, warnings
    def writer():
        logging.basicConfig(level=logging.INFO, format="log %(message)s", force=True)
        for i in range(3):
            print(f"out {i}")
            print(f"err {i}", file=sys.stderr)
        print("before the log")
        logging.info("a log record")
        print("before the warning")
        warnings.warn("a warning", stacklevel=1)
        print("last")
        sys.stdout.flush()  # as in any Python program, before writing to the buffer beneath
        sys.stdout.buffer.write(b"bytes to stdout\\n")
        print("after the bytes", file=sys.stderr)
""")

EXPECTED = [
    ("stdout", "out 0"),
    ("stderr", "err 0"),
    ("stdout", "out 1"),
    ("stderr", "err 1"),
    ("stdout", "out 2"),
    ("stderr", "err 2"),
    ("stdout", "before the log"),
    ("stderr", "log a log record"),
    ("stdout", "before the warning"),
    ("stderr", "warning"),  # warnings' two lines: the "UserWarning: a warning" line and its source line
    ("stdout", "last"),
    ("stdout", "bytes to stdout"),
    ("stderr", "after the bytes"),
]


def _in_order(entries: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The entries with warnings' lines taken as one, so they compare with ``EXPECTED``."""
    merged: list[tuple[str, str]] = []
    for stream, text in entries:
        if "UserWarning: a warning" in text:
            merged.append((stream, "warning"))
        elif not (merged and merged[-1] == ("stderr", "warning") and stream == "stderr" and "warnings.warn" in text):
            merged.append((stream, text))
    return merged


@pytest.fixture(scope="module")
def kernel():
    session = KernelSession()
    yield session
    session.shutdown()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_ranks_two_streams_keep_the_order_it_wrote_them_in(kernel, method):
    """In 20 launches before the fix, fork gave out, out, out, err, err, err in 18 and spawn in 14:
    each stream was batched apart and the kernel read the two pipes in no fixed order."""
    kernel.ok(WRITER)
    result = kernel.ok(
        dedent(f"""
        from notebook_launcher import launch
        from notebook_launcher.frontend.views.static import static_bundle
        import json
        runs = []
        for _ in range(5):
            job = launch(writer, num_processes=2, start_method={method!r}, display="text")
            job.wait()
            runs.append([[line.stream, line.text.rstrip("\\n")] for line in job.lines(1)])
        logs = job.logs(1)
        saved = static_bundle(job)["text/plain"]
        print("RESULT", json.dumps([runs, logs, saved]))
    """),
        timeout=300,
    )
    runs, logs, saved = json.loads(result.stdout.split("RESULT ", 1)[1])
    for run in runs:
        assert _in_order([tuple(entry) for entry in run]) == EXPECTED
    assert logs.index("out 0") < logs.index("err 0") < logs.index("out 1") < logs.index("err 2")
    assert logs.index("before the log") < logs.index("log a log record") < logs.index("before the warning")
    # the saved form shows the ranks' lines as they came, so rank 0's may fall among rank 1's
    saved_rank_1 = [
        line for line in saved.splitlines() if line.startswith("[rank 1] ") and re.search(r"(out|err) \d", line)
    ]
    alternating = [f"{stream} {i}" for i in range(3) for stream in ("out", "err")]
    assert [re.sub(r".*?((out|err) \d).*", r"\1", line) for line in saved_rank_1][-6:] == alternating
    # what the cell showed while it ran: the stream outputs, in the order the front end got them
    shown = [
        (output["name"], line)
        for output in result.outputs
        if output.get("output_type", "stream") == "stream"
        for line in output["text"].splitlines()
        if line.startswith("[rank 1] ") and re.search(r"(out|err) \d$", line)
    ]
    assert [text.removeprefix("[rank 1] ") for _, text in shown[-6:]] == alternating
    assert [stream for stream, _ in shown[-6:]] == ["stdout", "stderr"] * 3


def test_output_a_forked_child_of_a_rank_writes_reaches_the_log_and_leaves_the_channel_whole(kernel):
    """A DataLoader worker or ``os.fork()`` child inherits the rank's streams: it writes to the
    descriptors (frames from two processes on one channel would interleave), and what the rank had
    not yet sent when it forked is sent once, by the rank."""
    result = kernel.ok(
        dedent("""
        import os, sys
        from notebook_launcher import launch
        def forks():
            print("before the fork")  # still buffered when the child is forked
            pid = os.fork()
            if pid == 0:
                print("x" * 100_000)  # more than a frame's worth on the descriptor
                print("from the child")
                sys.stdout.flush()
                os._exit(0)
            os.waitpid(pid, 0)
            print("after the child")
            return "ok"
        job = launch(forks, num_processes=1, start_method="fork", display="none")
        job.wait()
        texts = [line.text.rstrip("\\n") for line in job.lines(0)]
        print("RESULT", json.dumps([job.results, texts.count("before the fork"), "from the child" in texts,
                                    texts[-1], sum(len(t) for t in texts if set(t) == {"x"})]))
    """),
        timeout=120,
    )
    results, befores, child_line, last, xs = json.loads(result.stdout.split("RESULT ", 1)[1])
    assert results == ["ok"] and befores == 1 and child_line and last == "after the child" and xs == 100_000


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_line_c_code_is_half_way_through_does_not_take_in_a_python_line(kernel, method):
    """C code writes to descriptor 1 in pieces (gloo's "[Gloo] Rank " then "1 is connected ..."), and
    Python's lines travel apart: a Python line read in between stays a line of its own, and the C
    line stays whole. Before, the two met in one reader: "[Gloo] Rank training" then "1 is connected"."""
    result = kernel.ok(
        dedent(f"""
        import os, sys, json
        from notebook_launcher import launch
        def half_lines():
            from notebook_launcher.rank.capture import wait_until_read
            os.write(1, b"[C] half ")
            wait_until_read()  # the kernel has read the half line before the Python line is sent
            print("python line", flush=True)
            sys.stdout.flush()
            os.write(1, b"and the rest\\n")
        job = launch(half_lines, num_processes=1, start_method={method!r}, display="none")
        job.wait()
        print("RESULT", json.dumps(sorted(line.text.rstrip("\\n") for line in job.lines(0))))
    """),
        timeout=120,
    )
    lines = json.loads(result.stdout.split("RESULT ", 1)[1])
    assert lines == ["[C] half and the rest", "python line"]


REDRAWN = dedent("""
    import sys
    from tqdm import tqdm

    class Tee:
        '''Writes to a rank's stream and keeps a copy, named by stream, in a list both share.'''
        def __init__(self, stream, name, kept):
            self.stream, self.name, self.kept = stream, name, kept
        def write(self, text):
            self.kept.append((self.name, text))
            return self.stream.write(text)
        def __getattr__(self, name):
            return getattr(self.stream, name)

    def redrawn():
        kept = []
        stdout, stderr = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = Tee(stdout, "stdout", kept), Tee(stderr, "stderr", kept)
        try:
            print("to stderr", file=sys.stderr)
            for i in (1, 2):
                print(f"progress {i}/2", end="\\r", file=sys.stderr)
            print("after")
            for _ in tqdm(range(3), desc="closed", mininterval=0, ascii=True, file=sys.stderr):
                pass
            print("after the bar")
            print("bar 1/2", end="\\r", file=sys.stderr)
            print("between")
            print("bar done", file=sys.stderr)
        finally:
            sys.stdout, sys.stderr = stdout, stderr
        return kept
""")


def as_jupyter_shows(written: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The rows a plain cell shows for writes to two streams: Jupyter keeps consecutive writes to
    one stream in one output, whose text a terminal (pyte) renders on its own."""
    rows: list[tuple[str, str]] = []
    for stream, run in itertools.groupby(written, key=lambda write: write[0]):
        rows += [(stream, row) for row in terminal_rows("".join(text for _, text in run))]
    return rows


def terminal_rows(written: str) -> list[str]:
    """What a terminal shows after being sent ``written``: pyte's screen, its non-empty rows."""
    import pyte

    screen = pyte.Screen(200, 100)
    screen.set_mode(pyte.modes.LNM)  # a pty turns each line feed into CR LF
    pyte.Stream(screen).feed(written)
    return [row.rstrip() for row in screen.display if row.strip()]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_line_rewritten_with_a_carriage_return_keeps_its_place_among_the_other_streams_lines(kernel, method):
    """A row drawn with ``\\r`` on stderr (a hand-made progress line, a closed tqdm bar) is still
    open when stdout prints: a terminal shows it above the print. Before, the kernel held it until
    stderr's next line, so it came after the print (24 of 24 runs): to stderr, after, progress 2/2.
    The reference is a plain cell's rendering of the same writes: each run of writes to one stream
    drawn by pyte (one terminal fed both streams would draw "after" over the open row, which
    Jupyter, keeping the streams apart, never does)."""
    from notebook_launcher.frontend.views.ansi import strip_ansi

    kernel.ok(REDRAWN)
    result = kernel.ok(
        dedent(f"""
        from notebook_launcher import launch
        from notebook_launcher.frontend.views.static import static_bundle
        import json
        job = launch(redrawn, num_processes=1, start_method={method!r}, display="text")
        job.wait()
        lines = [[line.stream, line.text.rstrip("\\n")] for line in job.lines(0)]
        print("RESULT", json.dumps([job.results[0], lines, job.logs(0), static_bundle(job)["text/plain"]]))
    """),
        timeout=120,
    )
    written, lines, logs, saved = json.loads(result.stdout.split("RESULT ", 1)[1])
    shown = [(stream, strip_ansi(text).rstrip()) for stream, text in lines if text.strip()]
    assert shown == as_jupyter_shows([(stream, text) for stream, text in written])
    order = ["to stderr", "progress 2/2", "after", "closed: 100%", "after the bar", "bar 1/2", "between", "bar done"]
    streams = ["stderr", "stderr", "stdout", "stderr", "stdout", "stderr", "stdout", "stderr"]
    assert len(lines) == len(order), lines
    for (stream, text), expected, expected_stream in zip(lines, order, streams, strict=True):
        assert text.startswith(expected) and stream == expected_stream, lines
    for shown in (logs, saved):
        assert [shown.index(text) for text in order] == sorted(shown.index(text) for text in order)


RICH_LIVE = dedent("""
    import io, sys
    def live_table():
        from rich.console import Console
        from rich.live import Live
        from rich.table import Table

        class Tee(io.TextIOBase):
            '''Writes to the rank's stdout and keeps a copy: the bytes a terminal would have been sent.'''
            def __init__(self, stream):
                self.stream, self.kept = stream, io.StringIO()
            def write(self, text):
                self.kept.write(text)
                return self.stream.write(text)
            def flush(self):
                self.stream.flush()

        tee = Tee(sys.stdout)  # the rank's stdout itself: Live puts a proxy in its place
        table = Table("step", "loss")
        with Live(table, console=Console(file=tee, force_terminal=True, width=60), auto_refresh=False) as live:
            for step in range(10):
                table.add_row(str(step), f"{1 / (step + 1):.3f}")
                live.refresh()
                sys.stdout.flush()  # each frame its own output event, as a slow loop sends them
        return tee.kept.getvalue()
""")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_rich_live_table_that_keeps_growing_leaves_what_a_terminal_shows(kernel, method):
    """rich's ``Live`` hides the cursor, draws a frame, then moves up a row at a time to redraw it a
    row taller. Before, every stale frame stayed in the log (a table the terminal shows in 14 rows
    left 10 frames of it). The reference is pyte fed the bytes the rank wrote."""
    from notebook_launcher.frontend.views.ansi import strip_ansi

    kernel.ok(RICH_LIVE)
    result = kernel.ok(
        dedent(f"""
        from notebook_launcher import launch
        import json
        job = launch(live_table, num_processes=1, start_method={method!r}, display="text")
        job.wait()
        print("RESULT", json.dumps([job.results[0], [line.text for line in job.lines(0)]]))
    """),
        timeout=120,
    )
    written, lines = json.loads(result.stdout.split("RESULT ", 1)[1])
    terminal = terminal_rows(written)
    assert len(terminal) == 14
    assert [strip_ansi(line).rstrip() for line in lines if line.strip()] == terminal
