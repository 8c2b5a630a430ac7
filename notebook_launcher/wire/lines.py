"""A rank's captured output as log lines, read the way a terminal would show it.

Most output is plain lines, taken at C speed: each read's complete lines are returned as one
string. Progress bars redraw: one bar redraws its row with a carriage return (``\\r``); nested bars
(tqdm's ``position=``, rich's multi-task progress, Lightning's bars) also move the cursor up
(``ESC[A``) and erase rows (``ESC[2K``) to redraw rows they left. A log cannot take a line back, so
a row is given out as a line only once the stream can no longer come back to it:

- a row drawn with a carriage return (a bar) is held while it is the row just above the cursor,
  since a bar below it may still move up to it;
- once the stream has moved the cursor up by N rows, the N + 1 rows above the cursor stay open: a
  redrawn region grows a row at a time (tqdm's next level, rich's next task, a metric that wraps
  Lightning's bar onto a second row), and its next redraw moves up one row further.

A row is given out when the cursor moves down past it, by the rule as it stands at that byte, so
what the log holds does not depend on where the pipe's reads split the stream.

Open rows are what ``live`` shows (the bars being drawn); ``settle`` gives out all but the cursor's
row (a ``%%dist`` call ended, so its bars are final) and ``finish`` all of them. A bar row left
blank by its redraw (tqdm's ``leave=False`` erases its row) is dropped; colour codes stay in the
text (the views render them), every other code is acted on or dropped.

Examples:
    >>> lines = LineReader()
    >>> lines.feed(b"a\\nb"), lines.feed(b"c\\nd\\n"), lines.finish()
    ('a\\n', 'bc\\nd\\n', '')
    >>> lines.feed(b" 10%\\r 50%"), lines.live, lines.feed(b"\\r100%\\n"), lines.finish()
    ('', ' 50%', '', '100%\\n')
    >>> nested = LineReader()
    >>> nested.feed(b"\\router 0/2\\n\\rinner 1/3\\x1b[A\\n\\rinner 3/3\\x1b[A\\router 1/2")
    ''
    >>> nested.live
    'outer 1/2\\ninner 3/3'
    >>> nested.finish()
    'outer 1/2\\ninner 3/3\\n'
"""

from __future__ import annotations

import codecs
import re

__all__ = ["ESCAPE", "LIVE_LIMIT", "LineReader", "last_frame"]

LIVE_LIMIT = 4096  # characters of the open rows that the live preview shows (their end)
OPEN_ROWS = 64  # the most rows a stream can keep open (a cursor move is clamped to it)

# an escape that is not a colour code: the stream moves the cursor or erases, so it needs a screen
_MOVES = re.compile(r"\x1b(?!\[[0-9;]*m)")
# a terminal code: a control sequence (ESC [ parameters, final byte), an OSC / DCS / PM / APC
# string, or a two-byte escape
ESCAPE = r"\x1b\[([0-?]*)[ -/]*([@-~])|\x1b[\]P^_].*?(?:\x07|\x1b\\)|\x1b[@-Z\\-_]"
_CODES = re.compile(ESCAPE, re.S)
# what acts on the screen: a carriage return, a line feed or a terminal code
_CONTROL = re.compile(r"[\r\n]|" + ESCAPE, re.S)
# an escape cut off at the end of a read, kept for the next one
_CUT = re.compile(r"\x1b(?:\[[0-?]*[ -/]*)?\Z")


class LineReader:
    """Splits a captured byte stream into text lines (UTF-8, undecodable bytes replaced).

    ``feed`` returns the lines a chunk made final, as one string (each line ending with a newline):
    splitting into single lines is left to whoever needs them, so a rank printing hundreds of
    thousands of lines a second costs the kernel a few string operations per read. A stream that
    moves the cursor is read on a ``_Screen`` from then on.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial: list[str] = []  # the line being written, in the pieces it came in
        self._held = ""  # a finished bar row, held while a bar below it could move up to it
        self._screen: _Screen | None = None
        self._cut = ""  # an escape code cut off at the end of the last read

    def feed(self, chunk: bytes) -> str:
        """Add bytes; return the lines they made final ("" when none).

        Plain output looks at each byte once: a long line without a newline (megabytes of it) is
        kept in pieces and joined once, when its newline comes.
        """
        new = self._decoder.decode(chunk)
        if self._screen is None and not self._cut and not _MOVES.search(new):
            return self._plain(new)
        if self._screen is None:
            self._screen = _Screen(self._held, "".join(self._partial))
            self._held, self._partial = "", []
        new, self._cut = _split_cut(self._cut + new)
        self._screen.write(new)
        return self._screen.take()

    def _plain(self, new: str) -> str:
        cut = new.rfind("\n") + 1
        if not cut:
            if new:
                self._partial.append(new)
            return ""
        complete = "".join(self._partial) + new[:cut] if self._partial else new[:cut]
        self._partial = [new[cut:]] if cut < len(new) else []
        held, self._held = self._held, ""
        if "\r" not in complete:
            return held + complete
        rows = complete.split("\n")[:-1]
        if _drawn(rows[-1]):
            last = rows.pop()
            self._held = "" if _cleared(last) else last_frame(last) + "\n"
        return held + "".join(last_frame(row) + "\n" for row in rows if not _cleared(row))

    @property
    def live(self) -> str:
        """The rows still open (bars being drawn, the line being written), "" when none: their last
        ``LIVE_LIMIT`` characters, found from the end, so a preview costs the same however long the
        line is."""
        if self._screen is not None:
            return self._screen.live()
        current = last_frame(_tail(self._partial, LIVE_LIMIT + 1))  # (+1: a carriage return it ends with)
        return (self._held + current if current else self._held.rstrip("\n"))[-LIVE_LIMIT:]

    def settle(self) -> str:
        """Give out every open row above the cursor's (a call ended: its bars are final)."""
        if self._screen is not None:
            return self._screen.take() + self._screen.commit(0)
        held, self._held = self._held, ""
        return held

    @property
    def open(self) -> bool:
        """Whether a row is still open: a bar being drawn, or a line being written."""
        if self._screen is not None:
            return any(self._screen.rows)
        return bool(self._held or self._partial)

    def interrupt(self) -> str:
        """Another stream wrote where this one's cursor is: give out every open row as it shows now
        (the cursor's row too), and go on from a new row, as a terminal does when stdout prints
        below a bar that stderr drew. Nothing is given out twice.

        Examples:
            >>> err = LineReader()
            >>> err.feed(b"progress 1/2\\rprogress 2/2\\r"), err.interrupt(), err.feed(b"done\\n")
            ('', 'progress 2/2\\n', 'done\\n')
        """
        if self._screen is not None:
            return self._screen.take() + self._screen.interrupt()
        return self._last_line("")

    def finish(self) -> str:
        """What is left after the stream ended, as last lines ("" when nothing is)."""
        rest = self._cut + self._decoder.decode(b"", final=True)
        self._cut = ""
        if self._screen is not None:
            self._screen.write(rest)
            return self._screen.take() + self._screen.commit(0, final=True)
        return self._last_line(rest)

    def _last_line(self, rest: str) -> str:
        """The held lines and the open row (with ``rest``) as it shows, ended; nothing stays open."""
        held, self._held = self._held, ""
        line = "".join(self._partial) + rest
        self._partial = []
        frame = last_frame(line)
        return held + (frame + "\n" if frame and not _cleared(line) else "")


class _Screen:
    """The bottom of a terminal: the rows a stream may still rewrite, and its cursor.

    A row is a list of text pieces (appending is cheap however long the row grows), over what the
    row showed before it was written from its start again (a shorter frame leaves the end of a
    longer one, as on a terminal). ``bars`` marks rows drawn after a carriage return; ``reach`` is
    the furthest the stream has moved above the lowest row drawn.
    """

    def __init__(self, held: str, partial: str) -> None:
        self.rows: list[_Row] = [_Row([held.rstrip("\n")])] if held else []
        self.bars: list[bool] = [True] if held else []
        self.rows.append(_Row())
        self.bars.append(False)
        self.cursor = len(self.rows) - 1
        self.start: str | None = "line"  # at its row's start after a "line" feed or a "return"; None: after text
        self.reach = 0
        self.hidden = False  # the stream hid the cursor (a live display, rich's, draws its frames)
        self.given: list[str] = []  # lines given out by cursor moves down, not yet taken
        self.write(partial)

    def write(self, text: str) -> None:
        position = 0
        for match in _CONTROL.finditer(text):
            self._put(text[position : match.start()])
            position = match.end()
            code = match.group(0)
            if code == "\r":
                self.start = "return"
            elif code == "\n":
                self._down(1)
            elif match.group(2):
                self._act(match.group(1), match.group(2), code)
        self._put(text[position:])

    def _put(self, text: str) -> None:
        if not text:
            return
        if self.start is not None:
            under = self.shown(self.cursor)
            row = self.rows[self.cursor] = _Row([text])
            row.under = under
            self.bars[self.cursor] = self.bars[self.cursor] or self.start == "return"
            self.start = None
        else:
            self.rows[self.cursor].append(text)

    def _act(self, parameters: str, final: str, code: str) -> None:
        count = min(int(parameters), OPEN_ROWS) if parameters.isdigit() and int(parameters) else 1
        if final == "m":
            self._put(code)
        elif final in "AF":
            self.cursor = max(0, self.cursor - count)
            # how far above the lowest row drawn (rich moves up one row per code)
            self.reach = max(self.reach, min(len(self.rows) - 1 - self.cursor, OPEN_ROWS))
            self.start = "return" if final == "F" else self.start
        elif final in "BE":
            self._down(count)
            self.start = "return" if final == "E" else self.start
        elif final == "K" and (parameters in ("1", "2") or self.start is not None):
            self.rows[self.cursor] = _Row()  # the whole row, or the rest of it from its start
        elif final == "K":
            self.rows[self.cursor].under = ""  # the rest of the row, from the end of what was written
        elif final == "J":
            del self.rows[self.cursor + 1 :], self.bars[self.cursor + 1 :]
            if self.start is not None:
                self.rows[self.cursor] = _Row()
        elif final == "G" and count == 1:
            self.start = "return"
        elif parameters == "?25" and final in "hl":
            self.hidden = final == "l"
            self.reach = 0 if self.hidden else self.reach  # a new live display: its first frame is drawn yet

    def _down(self, count: int) -> None:
        self.cursor += count
        while len(self.rows) <= self.cursor:
            self.rows.append(_Row())
            self.bars.append(False)
        self.start = "line"
        if self.cursor > self.keep() or len(self.rows) > OPEN_ROWS:
            self.given.append(self.commit(self.keep()))

    def keep(self) -> int:
        """How many rows above the cursor stay open: one more than the stream has moved up (a
        redrawn region grows a row at a time, and its next redraw moves up that much further), or,
        for a stream that never moved up, the bar just above the cursor. A stream that hid the cursor
        and has not moved up since keeps every row: rich's ``Live`` hides it, draws its first frame
        and only then moves up to redraw it."""
        if self.hidden and not self.reach:
            return OPEN_ROWS
        if self.reach:
            return self.reach + 1
        return 1 if self.cursor and self.bars[self.cursor - 1] else 0

    def take(self) -> str:
        """The lines given out since the last ``take``."""
        given, self.given = "".join(self.given), []
        return given

    def commit(self, keep: int, final: bool = False) -> str:
        """Give out the rows above the open ones (with ``final``, every row) as lines."""
        cut = len(self.rows) if final else max(0, self.cursor - keep, len(self.rows) - OPEN_ROWS)
        if final:
            while cut and not self.rows[cut - 1]:
                cut -= 1  # the empty rows the cursor ended on
        shown = [(self.shown(index), bar) for index, bar in enumerate(self.bars[:cut])]
        lines = [text + "\n" for text, bar in shown if not (bar and _blank(text))]
        del self.rows[:cut], self.bars[:cut]
        if not self.rows:
            self.rows, self.bars = [_Row()], [False]
        self.cursor = max(0, self.cursor - cut)
        return "".join(lines)

    def interrupt(self) -> str:
        """Give out every row, the cursor's too (another stream wrote there); the cursor goes on
        from the start of a new row."""
        lines = self.commit(0, final=True)
        self.start = "line"
        return lines

    def shown(self, index: int) -> str:
        """What row ``index`` shows: its text, and the end of what it showed before, beyond it."""
        row = self.rows[index]
        return _overlay(row.under, "".join(row)) if row.under else "".join(row)

    def live(self) -> str:
        """The open rows' last ``LIVE_LIMIT`` characters, read from the end (a row megabytes long
        costs no more than a short one)."""
        last = len(self.rows)
        while last and not self.rows[last - 1]:
            last -= 1  # the empty rows below the text
        shown: list[str] = []
        size = 0
        for index in reversed(range(last)):
            row = self.rows[index]
            shown.append(_tail([self.shown(index)] if row.under else row, LIVE_LIMIT - size))
            size += len(shown[-1]) + 1
            if size >= LIVE_LIMIT:
                break
        return "\n".join(reversed(shown))[-LIVE_LIMIT:]


class _Row(list):
    """A row's text pieces, and ``under``: what the row showed when it was last written from its
    start (a terminal overwrites a row; it does not clear it)."""

    under = ""


def last_frame(line: str) -> str:
    """What a terminal shows of ``line``: each frame after a carriage return written over the row,
    so a shorter frame leaves the end of a longer one (as a terminal and Jupyter show it).

    Examples:
        >>> last_frame(" 10%\\r 50%\\r"), last_frame("loss 0.125\\rloss 0.5")
        (' 50%', 'loss 0.525')
    """
    line = line[:-1] if line.endswith("\r") else line
    if "\r" not in line:
        return line
    frames = line.split("\r")
    shown = frames[0]
    for frame in frames[1:]:
        shown = _overlay(shown, frame)
    return shown


def _overlay(under: str, over: str) -> str:
    """``over`` written from the start of a row that showed ``under``: ``over``, then the rest of
    ``under`` (without its colours, when either has any: columns are counted without codes)."""
    if "\x1b" not in under and "\x1b" not in over:
        return over + under[len(over) :]
    plain = _CODES.sub("", under)
    width = len(_CODES.sub("", over))
    return over + plain[width:] if width < len(plain) else over


def _drawn(row: str) -> bool:
    """Whether a row was drawn after a carriage return (a bar), not just ended by one ("\\r\\n")."""
    return "\r" in row.rstrip("\r")


def _cleared(row: str) -> bool:
    """A bar row its last redraw left blank (tqdm's ``leave=False``)."""
    return _drawn(row) and not _CODES.sub("", last_frame(row)).strip()


def _blank(text: str) -> bool:
    return not _CODES.sub("", text).strip()


def _tail(pieces: list[str], size: int) -> str:
    """The last ``size`` characters of the text ``pieces`` make, joining only the pieces needed."""
    parts: list[str] = []
    length = 0
    for piece in reversed(pieces):
        parts.append(piece)
        length += len(piece)
        if length >= size:
            break
    return "".join(reversed(parts))[-size:] if size > 0 else ""


def _split_cut(text: str) -> tuple[str, str]:
    """``text`` without an escape code cut off at its end, and that code."""
    match = _CUT.search(text)
    return (text[: match.start()], match.group(0)) if match else (text, "")
