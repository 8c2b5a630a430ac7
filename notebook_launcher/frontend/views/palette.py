"""The launch's colours, chosen to read on light and dark themes, trusted or not (WCAG contrast).

A rank has one hue, in three strengths: ``rank_line`` (chart lines and legend swatches, at least
3:1 against white and against a dark theme's #111, as graphics need), ``rank_pill`` (a background
under white text, at least 4.5:1) and, where the stylesheet is kept, its prefix text mixed with the
theme's own text colour (``prefix_css``: 55 % of the hue, at least 4.5:1 on either theme). No one
colour of text reaches 4.5:1 on both white and #111, so an untrusted notebook, which keeps style
attributes but not the stylesheet, shows a rank's prefix as white text on its pill. Status chips
are white text on ``STATUS_COLORS``.

Examples:
    >>> contrast("#ffffff", "#000000")
    21.0
    >>> all(contrast("#ffffff", color) >= 4.5 for color in STATUS_COLORS.values())
    True
    >>> rank_line(9) == rank_line(1)
    True
"""

from __future__ import annotations

__all__ = [
    "SHARED_PILL",
    "RANK_LINES",
    "RANK_PILLS",
    "STATUS_COLORS",
    "contrast",
    "rank_line",
    "rank_pill",
    "prefix_css",
    "prefix_class",
    "LIGHT_BACKGROUND",
    "DARK_BACKGROUND",
]

LIGHT_BACKGROUND = "#ffffff"
DARK_BACKGROUND = "#111111"  # JupyterLab Dark's page; its cells sit on #212121, lighter still

# matplotlib's tab10 without grey and olive; orange, pink and cyan darkened to reach 3:1 on white
RANK_LINES = ("#1f77b4", "#e06f0c", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#d06db2", "#139dab")
# the same hues, dark enough for white text
SHARED_PILL = "#5c6370"  # the prefix of a line several ranks said ("[ranks 0–7]"): no one rank's colour
RANK_PILLS = ("#1f77b4", "#b75b0a", "#248624", "#d62728", "#8e62b5", "#8c564b", "#aa5991", "#0f818c")
STATUS_COLORS = {
    "starting": "#757575",
    "running": "#1a77c9",
    "done": "#2e7d32",
    "failed": "#d32f2f",
    "stopped": "#bf5600",
}
_TEXT_SHARE = 55  # percent of a rank's hue in its prefix text; the rest is the theme's text colour


def rank_line(rank: int) -> str:
    return RANK_LINES[rank % len(RANK_LINES)]


def rank_pill(rank: int) -> str:
    return RANK_PILLS[rank % len(RANK_PILLS)]


def prefix_css() -> str:
    """Rules that turn each rank's prefix from a pill (its style attribute) into coloured text
    mixed with the theme's text colour (``currentColor``), where the stylesheet is kept."""
    return "".join(
        f".nl-root .nl-prefix.nl-rank-{index} {{ color: color-mix(in srgb, {color} {_TEXT_SHARE}%, currentColor)"
        " !important; background: none !important; padding: 0 !important; }\n"
        for index, color in enumerate(RANK_LINES)
    )


def prefix_class(rank: int) -> str:
    return f"nl-rank-{rank % len(RANK_LINES)}"


def _luminance(color: str) -> float:
    channels = [int(color.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(first: str, second: str) -> float:
    """WCAG 2 contrast ratio of two ``#rrggbb`` colours (1 to 21)."""
    high, low = sorted((_luminance(first), _luminance(second)), reverse=True)
    return round((high + 0.05) / (low + 0.05), 2)
