"""One line for what several ranks say, alone: which lines join, and how they read."""

from __future__ import annotations

from notebook_launcher.frontend.views.render import entries_html
from notebook_launcher.frontend.views.said_once import SaidOnce, collapsed
from notebook_launcher.frontend.views.static import log_lines
from notebook_launcher.launching.ranklog import LogLine


def _line(rank, text, when, stream="stdout", seq=0, bundle=None):
    return LogLine(rank, stream, text + "\n", when, seq, bundle)


def test_a_line_joins_only_a_recent_one_of_other_ranks_on_its_stream():
    lines = [
        _line(0, "epoch 1 done", 1.0),
        _line(1, "epoch 1 done", 1.5),
        _line(1, "epoch 1 done", 1.6),  # rank 1 said it again: a line of its own
        _line(2, "epoch 1 done", 1.7, stream="stderr"),  # another stream
        _line(3, "epoch 1 done", 9.0),  # long after: a new line
        _line(2, "shown", 9.1, bundle={"text/html": "<b>shown</b>"}),
        _line(3, "shown", 9.2, bundle={"text/html": "<b>shown</b>"}),  # displays never join
    ]
    shown = collapsed(lines)
    assert [(line.text.strip(), line.ranks or (line.rank,)) for line in shown] == [
        ("epoch 1 done", (0, 1)),
        ("epoch 1 done", (1,)),
        ("epoch 1 done", (2,)),
        ("epoch 1 done", (3,)),
        ("shown", (2,)),
        ("shown", (3,)),
    ]


def test_a_joined_line_reads_with_its_ranks_in_text_and_html():
    lines = [_line(rank, "warning: something", 1.0 + rank / 100) for rank in (0, 1, 2, 5)]
    (said,) = collapsed(lines)
    assert list(log_lines([said])) == ["[ranks 0–2, 5] warning: something\n"]
    assert list(log_lines([said], "{rank}> ")) == ["0–2, 5> warning: something\n"]
    page = entries_html([said], prefix=True)
    assert ">[ranks 0–2, 5]</span> warning: something" in page and "background-color:#5c6370" in page


def test_the_widget_redraws_the_first_line_when_another_rank_says_it():
    said = SaidOnce()
    assert said.take(_line(0, "ready", 1.0), (0, 0))[0] == (0, 0)
    key, joined = said.take(_line(1, "ready", 1.2), (1, 0))
    assert key == (0, 0) and joined.ranks == (0, 1)
