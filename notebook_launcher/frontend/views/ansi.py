"""Terminal escape codes in a rank's output, shown as a terminal would show their colours.

Ranks inherit ipykernel's ``FORCE_COLOR=1``, so rich, Lightning's progress bar, tqdm's nested bars
and coloured loggers write ANSI escape codes. In the widget and the static form's HTML, colour and
style codes (SGR) become spans with inline styles (an untrusted notebook keeps style attributes);
every other code — hyperlinks, window titles, and the cursor moves and line erases that
``wire.lines.LineReader`` already acted on — is dropped. The plain-text forms drop them all.

Examples:
    >>> ansi_html("\\x1b[1;31mfailed\\x1b[0m <here>")
    '<span style="font-weight:bold;color:#cd3131">failed</span> &lt;here&gt;'
    >>> strip_ansi("\\x1b[2K\\x1b[Awork \\x1b[35m100%\\x1b[0m")
    'work 100%'
"""

from __future__ import annotations

import html
import re

from ...wire.lines import ESCAPE

__all__ = ["ansi_html", "strip_ansi"]

_ESCAPE = re.compile(ESCAPE, re.S)
# the 16 colours as VS Code's terminal draws them: readable on a light and on a dark background
_PALETTE = (
    "#000000", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5",
    "#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#e5e5e5",
)  # fmt: skip
_STYLES = {1: "font-weight:bold", 2: "opacity:0.7", 3: "font-style:italic", 4: "text-decoration:underline"}
_RESETS = {22: (1, 2), 23: (3,), 24: (4,)}


def strip_ansi(text: str) -> str:
    """``text`` without any terminal escape code."""
    return _ESCAPE.sub("", text) if "\x1b" in text else text


def ansi_html(text: str) -> str:
    """``text`` escaped for HTML, its colour and style codes as styled spans, other codes dropped."""
    if "\x1b" not in text:
        return html.escape(text, quote=False)
    state = _State()
    parts: list[str] = []
    position = 0
    for match in _ESCAPE.finditer(text):
        parts.append(state.wrap(text[position : match.start()]))
        if match.group(2) == "m":
            state.apply(match.group(1))
        position = match.end()
    parts.append(state.wrap(text[position:]))
    return "".join(parts)


class _State:
    """The colour and styles in force at a point of the text."""

    def __init__(self) -> None:
        self.styles: set[int] = set()
        self.fg: str | None = None
        self.bg: str | None = None

    def wrap(self, segment: str) -> str:
        if not segment:
            return ""
        escaped = html.escape(segment, quote=False)
        css = [_STYLES[code] for code in sorted(self.styles)]
        css += [f"color:{self.fg}"] if self.fg else []
        css += [f"background-color:{self.bg}"] if self.bg else []
        return f'<span style="{";".join(css)}">{escaped}</span>' if css else escaped

    def apply(self, parameters: str) -> None:
        codes = [int(code) if code.isdigit() else 0 for code in parameters.split(";")]
        while codes:
            code = codes.pop(0)
            if code == 0:
                self.styles.clear()
                self.fg = self.bg = None
            elif code in _STYLES:
                self.styles.add(code)
            elif code in _RESETS:
                self.styles.difference_update(_RESETS[code])
            elif 30 <= code <= 37 or 90 <= code <= 97:
                self.fg = _PALETTE[code - 30 if code < 90 else code - 82]
            elif 40 <= code <= 47 or 100 <= code <= 107:
                self.bg = _PALETTE[code - 40 if code < 100 else code - 92]
            elif code in (39, 49):
                self.fg, self.bg = (None, self.bg) if code == 39 else (self.fg, None)
            elif code in (38, 48):
                colour = _extended(codes)
                self.fg, self.bg = (colour, self.bg) if code == 38 else (self.fg, colour)


def _extended(codes: list[int]) -> str | None:
    """A 256-colour (``5;n``) or true-colour (``2;r;g;b``) value, taken off the front of ``codes``."""
    if codes[:1] == [5] and len(codes) >= 2:
        index = codes[1]
        del codes[:2]
        return _palette_256(index)
    if codes[:1] == [2] and len(codes) >= 4:
        red, green, blue = (min(255, value) for value in codes[1:4])
        del codes[:4]
        return f"#{red:02x}{green:02x}{blue:02x}"
    codes.clear()
    return None


def _palette_256(index: int) -> str:
    if index < 16:
        return _PALETTE[index]
    if index < 232:
        index -= 16
        steps = [0, 95, 135, 175, 215, 255]
        red, green, blue = steps[index // 36], steps[index // 6 % 6], steps[index % 6]
        return f"#{red:02x}{green:02x}{blue:02x}"
    grey = 8 + 10 * (min(index, 255) - 232)
    return f"#{grey:02x}{grey:02x}{grey:02x}"
