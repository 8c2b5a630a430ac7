"""A running launch's saved form, rewritten once the kernel that wrote it is gone.

A notebook saved mid-launch keeps the latest static form, which says "running · 4.3 s · as of
16:21:05, before the launch ended". If that kernel then dies, no later form will ever come: the
Jupyter server, which keeps the forms (``saved_outputs``), rewrites this one to say that the launch
ended with its kernel, and when (no later than the next form was due), and turns every running
rank's chip and log title into "ended with the kernel". The rewrite is exact: it matches only what
``static.header_text`` and ``render.status_chips`` write.

Examples:
    >>> head = "notebook_launcher · launch ab12cd34 · 2 ranks · cpu · fork · running · 4.3 s · as of 16:21:05, before the launch ended"
    >>> ended_with_kernel({"text/plain": head}, within=1)["text/plain"].split(" · ", 5)[5]
    'ended with its kernel: ran 4.3 s or more, last heard of at 16:21:05, gone within 1 s of that'
"""  # noqa: E501

from __future__ import annotations

import re

from .render import chip_html

__all__ = ["ended_with_kernel", "ENDED"]

ENDED = "ended with the kernel"  # a rank's chip once its kernel is gone
_STATE = re.compile(r"(?:starting|running) · ([0-9.]+) s · as of ([0-9:]+), before the launch ended")
_CHIP = re.compile(  # as chip_html writes it (and as it did before its text colour joined the style)
    r'<span class="nl-chip nl-(?:starting|running)" style="background:#[0-9a-f]{6}(?:;color:#ffffff[^"]*)?">'
    r"rank ([0-9]+): (?:starting|running)(?: · slow)?</span>"
)

_RANK_LOG = re.compile(r"(<summary>rank [0-9]+(?: · [^<·]+)?) · (?:starting|running) · ")


def ended_with_kernel(bundle: dict, within: float) -> dict:
    """``bundle`` (a running launch's static form) as it reads once its kernel is gone; ``within``:
    the longest gap between two forms, so the latest time the kernel can have died after this one."""

    def state(match: re.Match) -> str:
        return (
            f"ended with its kernel: ran {match[1]} s or more, last heard of at {match[2]},"
            f" gone within {within:.0f} s of that"
        )

    out = dict(bundle)
    if "text/plain" in out:
        out["text/plain"] = _STATE.sub(state, out["text/plain"])
    if "text/html" in out:
        page = _RANK_LOG.sub(lambda m: f"{m[1]} · {ENDED} · ", _STATE.sub(state, out["text/html"]))
        out["text/html"] = _CHIP.sub(lambda m: chip_html(int(m[1]), "stopped", ENDED), page)
    return out
