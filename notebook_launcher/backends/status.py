"""What a backend shows in the sidebar: sections under one schema that the sidebar draws whatever
the backend, so a new backend touches no file of the front end (TypeScript included).

A section has a title (a heading; "" for a one-line section), a state (one word the sidebar styles:
``ok``, ``busy``, ``idle``, ``off``, ``warn``, ``error``), rows (one line of text each, with a style
and a key that tests and styles may pick it by) and actions (buttons; a click reaches the backend's
``Backend.act(section, action)``). ``Backend.status()`` maps each of its sections' names to one, or
to None while there is nothing to show (the section is hidden).

Examples:
    >>> section("Ray cluster · 127.0.0.1:6379", "ok", [row("127.0.0.1 (head) · CPU 2", key="node")],
    ...         [action("release", "Release warm actors")])["rows"][0]
    {'text': '127.0.0.1 (head) · CPU 2', 'style': 'item', 'key': 'node', 'hint': ''}
    >>> section("", "sleepy")
    Traceback (most recent call last):
    ValueError: state must be one of ok, busy, idle, off, warn, error, not 'sleepy'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypedDict

__all__ = ["StatusRow", "StatusAction", "StatusSection", "STATES", "ROW_STYLES", "section", "row", "action"]

STATES = ("ok", "busy", "idle", "off", "warn", "error")
ROW_STYLES = ("item", "note", "warn", "error")  # a listed thing (a node, a server), a remark, a problem
_WORD = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")  # a key or an action's id: safe in a CSS class


class StatusRow(TypedDict):
    text: str
    style: str  # one of ROW_STYLES
    key: str  # what the row is ("node", "free", ...): a word, or ""
    hint: str  # a tooltip, or ""


class StatusAction(TypedDict):
    id: str  # passed back to ``Backend.act``
    label: str  # the button's text


class StatusSection(TypedDict):
    title: str
    state: str  # one of STATES
    rows: list[StatusRow]
    actions: list[StatusAction]


def row(text: str, style: str = "item", key: str = "", hint: str = "") -> StatusRow:
    """One line of a section."""
    _check("style", style, ROW_STYLES)
    if key and not _WORD.match(key):
        raise ValueError(f"a row's key is a lower-case word, not {key!r}")
    return {"text": str(text), "style": style, "key": key, "hint": str(hint)}


def action(id: str, label: str) -> StatusAction:
    """A button of a section: ``label`` shown, ``id`` passed to ``Backend.act`` when clicked."""
    if not _WORD.match(id):
        raise ValueError(f"an action's id is a lower-case word, not {id!r}")
    return {"id": id, "label": str(label)}


def section(
    title: str, state: str, rows: Sequence[StatusRow] = (), actions: Sequence[StatusAction] = ()
) -> StatusSection:
    """A sidebar section (the module docstring)."""
    _check("state", state, STATES)
    return {"title": str(title), "state": state, "rows": list(rows), "actions": list(actions)}


def _check(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
