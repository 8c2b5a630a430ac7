"""One rank's log, kept as blocks: what one read of a pipe delivered, not one object per line.

A rank can print hundreds of thousands of lines a second; the kernel must take them as fast, or the
rank blocks on a full pipe. So each read's complete lines are stored as one text block (one
append, whatever the number of lines), counted with ``str.count`` and split into ``LogLine``
entries only when someone asks for them (``entries``; a view asks only for the lines it shows).
A rank's ``display()`` is an entry of its own, which a later update by its display id replaces.

Every line gets a sequence number, unique across the ranks of a launch (``Sequence``), so the
logs of all ranks can be merged in the order they arrived.

Examples:
    >>> log = RankLog(rank=0)
    >>> log.add_text("stdout", "a\\nb\\n", seq=0, when=0.0)
    2
    >>> [entry.text for entry in log.entries(1)], log.count
    (['b\\n'], 2)
"""

from __future__ import annotations

import bisect
import re
from html.parser import HTMLParser
from typing import NamedTuple

__all__ = ["LogLine", "RankLog", "display_text", "html_text"]


class LogLine(NamedTuple):
    """One entry of a rank's log.

    ``stream`` is "stdout" or "stderr"; ``time`` is when the kernel got it; ``seq`` orders entries
    of all ranks by arrival. A rank's ``display()`` is an entry too: ``bundle`` holds its mime
    bundle and ``text`` its text form; a display updated by its ``display_id`` replaces its entry.
    """

    rank: int
    stream: str
    text: str
    time: float
    seq: int = 0
    bundle: dict | None = None
    display_id: str | None = None
    ranks: tuple[int, ...] = ()  # a line several ranks said, as "all ranks" shows it once (views.said_once)


class _Block:
    __slots__ = ("display_id", "entry", "first", "lines", "rank", "seq", "stream", "text", "time")

    def __init__(
        self, rank: int, first: int, seq: int, stream: str, text: str, when: float, entry: LogLine | None = None
    ) -> None:
        self.rank, self.first, self.seq, self.stream, self.text, self.time = rank, first, seq, stream, text, when
        self.entry = entry  # a display: its one entry
        self.lines: list[str] | None = None  # the text split into lines, once asked for

    def size(self) -> int:
        return 1 if self.entry is not None else self.text.count("\n")

    def line(self, offset: int) -> LogLine:
        if self.entry is not None:
            return self.entry
        if self.lines is None:
            self.lines = [line + "\n" for line in self.text.split("\n")[:-1]]
        return LogLine(self.rank, self.stream, self.lines[offset], self.time, self.seq + offset)


class RankLog:
    """Not thread-safe by itself: ``LaunchRecord`` holds the lock. ``rank`` is the number the rank
    has now; each entry keeps the one it was written under (a restart can renumber a node's ranks)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.count = 0
        self._blocks: list[_Block] = []
        self._starts: list[int] = []
        self._displays: dict[str, _Block] = {}

    def _append(self, block: _Block, size: int) -> None:
        self._blocks.append(block)
        self._starts.append(self.count)
        self.count += size

    def add_text(self, stream: str, text: str, seq: int, when: float) -> int:
        """Add complete lines (``text`` ends with a newline); returns how many."""
        size = text.count("\n")
        if size:
            self._append(_Block(self.rank, self.count, seq, stream, text, when), size)
        return size

    def add_display(self, data: dict, display_id: str | None, update: bool, seq: int, when: float) -> tuple[int, bool]:
        """A display (or, with ``update``, a new version of the one shown under ``display_id``)."""
        block = self._displays.get(display_id) if display_id is not None else None
        if update and block is not None:
            assert block.entry is not None
            block.entry = block.entry._replace(text=display_text(data), bundle=data, time=when)
            return block.first, True
        entry = LogLine(self.rank, "stdout", display_text(data), when, seq, data, display_id)
        block = _Block(self.rank, self.count, seq, "stdout", entry.text, when, entry)
        self._append(block, 1)
        if display_id is not None:
            self._displays[display_id] = block
        return block.first, False

    def seal(self) -> None:
        """Forget which entries the display ids name: an update from now on is shown as new."""
        self._displays.clear()

    def entries(self, start: int = 0, stop: int | None = None) -> list[LogLine]:
        """Entries ``start`` to ``stop`` (the end by default), as ``LogLine``."""
        stop = self.count if stop is None else min(stop, self.count)
        if start >= stop:
            return []
        out: list[LogLine] = []
        index = bisect.bisect_right(self._starts, start) - 1
        while index < len(self._blocks) and self._starts[index] < stop:
            block = self._blocks[index]
            size = self.count - block.first if index == len(self._blocks) - 1 else self._starts[index + 1] - block.first
            for offset in range(max(0, start - block.first), min(size, stop - block.first)):
                out.append(block.line(offset))
            index += 1
        return out

    def text(self, stream: str | None = None) -> str:
        """The whole log as text (only one stream's lines with ``stream``)."""
        return "".join(block.text for block in self._blocks if stream in (None, block.stream))


def display_text(data: dict) -> str:
    """How a rank's ``display()`` bundle reads in its log: its text, ending with a newline.

    Its text/plain form, unless that is only an object's default repr and the bundle has HTML, whose
    text is used instead (Hugging Face Trainer's progress table reads as its numbers, not as
    ``<IPython.core.display.HTML object>``).

    Examples:
        >>> display_text({"text/plain": "{'answer': 42}", "image/png": "..."})
        "{'answer': 42}\\n"
        >>> display_text({"text/plain": "<IPython.core.display.HTML object>",
        ...               "text/html": "<b>step</b> 10 <i>loss</i> 0.3"})
        'step 10 loss 0.3\\n'
    """
    plain = data.get("text/plain")
    if (plain is None or _DEFAULT_REPR.fullmatch(plain)) and "text/html" in data:
        plain = html_text(data["text/html"])
    return (plain if plain is not None else "<display>").rstrip("\n") + "\n"


_DEFAULT_REPR = re.compile(r"<[\w.]+ object( at 0x[0-9a-f]+)?>")


def html_text(markup: str) -> str:
    """The readable text of an HTML fragment: block ends and table rows become line breaks."""
    parser = _TextOf()
    parser.feed(markup)
    lines = [" ".join("".join(line).split()) for line in parser.lines]
    return "\n".join(line for line in lines if line)


class _TextOf(HTMLParser):
    _BREAKS = frozenset({"br", "p", "div", "tr", "li", "h1", "h2", "h3", "h4", "table", "thead", "tbody"})

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[list[str]] = [[]]
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("style", "script"):
            self._skip += 1
        elif tag in self._BREAKS:
            self.lines.append([])
        elif tag in ("td", "th"):
            self.lines[-1].append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("style", "script"):
            self._skip = max(0, self._skip - 1)
        elif tag in self._BREAKS:
            self.lines.append([])

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.lines[-1].append(data)
