"""The static form of a launch: what a saved, exported or headless notebook shows.

``static_bundle(launch)`` gives the ``text/plain`` and ``text/html`` parts of the launch's one
output. Front ends that draw widgets show the live widget while the launch runs; everything else
(nbconvert, GitHub, nbviewer, papermill, a notebook reopened after a kernel restart) shows this:

* ``text/plain`` — every rank's lines prefixed ``[rank N]`` in the order they came, the last
  ``MAX_LINES`` of each rank (a marker says how many earlier lines are left out and where the
  full log is), the last metric values, and the summary or the failing rank's traceback;
* ``text/html`` — the same laid out like the widget: a chip per rank, each rank's log, the metric
  charts as inline SVG, the summary and the traceback.

A launch that was stopped, stalled or timed out also shows where every rank was (their stacks); a
running launch shows the stacks last asked for (``Launch.stacks()``, the widget's "Stacks" button).

Examples:
    >>> from notebook_launcher import launch
    >>> job = launch(lambda: print("hello"), num_processes=1, display="none")
    >>> _ = job.wait()
    >>> print(static_bundle(job)["text/plain"].splitlines()[1])
    [rank 0] hello
"""

from __future__ import annotations

import base64
import html
import time
from collections.abc import Iterable, Iterator
from typing import Any

from ...launching.listener import LaunchState
from ...telemetry import BUILT_IN
from .ansi import strip_ansi
from .charts import metrics_html, series_by_key
from .compact import compact_bundle
from .render import CSS, capped_log, entries_html, hint_html, status_chips, traceback_html
from .said_once import collapsed, collapsing, ranks_label
from .text import line_prefix

__all__ = [
    "static_bundle",
    "log_lines",
    "summary_text",
    "failure_text",
    "header_text",
    "notes_html",
    "places_text",
    "stragglers_text",
    "stacks_section",
    "stacks_html",
    "MAX_LINES",
]

MAX_LINES = 2000  # per rank, in the static form of up to two ranks (the full log stays on the Launch)
FEWEST_LINES = 200  # per rank, however many ranks
ALL_RANKS_LINES = 1000  # the newest lines of all ranks together, in the log above the ranks' own
DOWNLOAD_LIMIT = 512 * 1024  # bytes of log text the finished form also carries as a download link
FOLDED_FROM = 2  # with more ranks, each rank's log is folded under one log of all of them
_SYMBOL = {"succeeded": "✔", "failed": "✘", "stopped": "■"}


def header_text(launch: LaunchState, recorded: bool = False) -> str:
    """The launch in one line; ``recorded``: for a form that may be read later, a running launch's
    state says when it was taken ("running · 4.3 s · as of 16:21:05, before the launch ended")."""
    plan = launch.plan
    state = _ended(launch) if launch.done else f"{launch.status} · {launch.elapsed:.1f} s"
    if recorded and not launch.done:
        state = f"{state} · as of {time.strftime('%H:%M:%S')}, before the launch ended"
    if launch.attempt:
        state = f"restart {launch.attempt} of {plan.faults.max_restarts} · {state}"
    if launch.waiting and not launch.done:
        state = f"{state} · {launch.waiting}"
    return (
        f"notebook_launcher · launch {launch.id} · {len(launch.ranks)} rank{'s' if len(launch.ranks) != 1 else ''}"
        f" · {plan.device.name} · {plan.start_method} · {state}"
    )


def stragglers_text(launch: LaunchState) -> str:
    """The ranks that lag the others, with why; "" when none does.

    Examples:
        >>> from types import SimpleNamespace
        >>> stragglers_text(SimpleNamespace(stragglers={2: "work time 250 ms, 2.5× the median"}))
        'rank 2 is slow: work time 250 ms, 2.5× the median'
    """
    return " · ".join(f"rank {rank} is slow: {why}" for rank, why in sorted(launch.stragglers.items()))


def notes_html(launch: LaunchState) -> str:
    """The lines under the chips, live and saved alike: the ranks that lag, and where the ranks run."""
    slow, where = stragglers_text(launch), places_text(launch)
    return (f'<div class="nl-stragglers">⚠ {html.escape(slow)}</div>' if slow else "") + (
        f'<div class="nl-places">{html.escape(where)}</div>' if where else ""
    )


def places_text(launch: LaunchState) -> str:
    """Which ranks run on which node, for a launch on a cluster; "" for one on this machine.

    Examples:
        >>> from types import SimpleNamespace
        >>> from notebook_launcher.backends.base import Place
        >>> places = {0: Place(0, "10.0.0.1"), 1: Place(0, "10.0.0.1"), 2: Place(1, "10.0.0.2")}
        >>> places_text(SimpleNamespace(ranks=[0, 1, 2], place=places.get))
        'ranks 0, 1 on node 0 (10.0.0.1) · rank 2 on node 1 (10.0.0.2)'
    """
    by_place: dict[Any, list[int]] = {}
    for rank in launch.ranks:
        place = launch.place(rank)
        if place is not None:
            by_place.setdefault(place, []).append(rank)
    return " · ".join(
        f"rank{'s' if len(ranks) != 1 else ''} {', '.join(map(str, ranks))} on {place}"
        for place, ranks in sorted(by_place.items(), key=lambda item: item[0].node)
    )


def _ended(launch: LaunchState) -> str:
    """How the launch ended and how long it took, in a few words ("failed after 1.2 s")."""
    elapsed = f"{launch.elapsed:.1f} s"
    return {"failed": f"failed after {elapsed}", "stopped": f"stopped after {elapsed}"}.get(
        launch.status, f"succeeded in {elapsed}"
    )


def summary_text(launch: LaunchState) -> str:
    """One line: how the launch ended, how long it took, and what came back. A failure is named by
    its rank and type: its message is in the traceback, shown once (below, or as the cell's error)."""
    if not launch.done:
        return f"running for {launch.elapsed:.1f} s"
    if launch.status == "failed":
        exc = launch.exception
        rank = launch.failed_rank
        who = f"rank {rank} raised" if rank is not None else "the launch failed with"
        return f"{_ended(launch)}: {who} {type(exc).__name__}"
    if launch.status == "stopped":
        return _ended(launch)
    last = _last_metrics(launch.metrics)
    returned = ""
    if launch.reports_return_type:
        returned = f"; rank {launch.ranks[0]} returned {type(launch.results[0]).__name__}"
    return f"{_ended(launch)}{returned}" + (f"; last {last}" if last else "")


def failure_text(exception: BaseException | None, traceback: Any) -> str:
    """The failing rank's traceback as IPython prints it (without colours), or Python's own format."""
    if exception is None:
        return ""
    if traceback is None:
        return f"{type(exception).__name__}: {exception}"
    try:
        from IPython.core.ultratb import VerboseTB

        try:
            formatter = VerboseTB(theme_name="nocolor")  # IPython 9
        except TypeError:
            formatter = VerboseTB(color_scheme="NoColor")  # IPython 7 and 8
        return formatter.text(type(exception), exception, traceback)
    except Exception:  # no IPython, or a formatter that cannot cope: Python's own layout
        import traceback as tb_module

        return "".join(tb_module.format_exception(type(exception), exception, traceback))


def _last_metrics(metrics: list) -> str:
    """The first rank's latest value of each metric the function logged (the built-in measures are
    in the charts, not in the summary).

    Examples:
        >>> _last_metrics([{"rank": 0, "values": {"loss": 0.5, "CPU %": 99.0}}, {"rank": 1, "values": {"loss": 0.7}}])
        'loss 0.5'
    """
    latest: dict = {}
    first_rank = min((record["rank"] for record in metrics), default=None)
    for record in metrics:
        if record["rank"] == first_rank:
            latest.update((key, value) for key, value in record["values"].items() if key not in BUILT_IN)
    return ", ".join(f"{key} {value:.4g}" for key, value in latest.items())


def _hidden_note(launch: LaunchState, rank: int, hidden: int) -> str:
    return (
        f"… {hidden} earlier lines of rank {rank} not shown (all of them:"
        f" notebook_launcher.last_launch().logs({rank}), or the launch's .logs({rank})) …"
    )


def lines_kept(ranks: int, max_lines: int = MAX_LINES) -> int:
    """How many of its last lines each rank's log keeps in the static form: ``max_lines`` for up to
    two ranks, fewer for more (at least ``FEWEST_LINES``), so a saved launch of 8 chatty ranks stays
    under a megabyte; every line stays in ``logs(rank)`` and in "Save log".

    Examples:
        >>> lines_kept(2), lines_kept(8), lines_kept(64)
        (2000, 500, 200)
    """
    return max(FEWEST_LINES, 2 * max_lines // max(2, ranks))


def all_ranks_kept(ranks: int, max_lines: int = MAX_LINES) -> int:
    """How many of the newest lines of all ranks together the all-ranks log keeps: ``max_lines`` for
    up to two ranks (it is the only log then), ``ALL_RANKS_LINES`` at most for more.

    Examples:
        >>> all_ranks_kept(2), all_ranks_kept(8)
        (2000, 1000)
    """
    return max_lines if ranks <= FOLDED_FROM else min(max_lines, ALL_RANKS_LINES)


def static_bundle(launch: LaunchState, max_lines: int = MAX_LINES) -> dict:
    """The text/plain and text/html forms of the launch as it is now."""
    counts = {rank: launch.line_count(rank) for rank in launch.ranks}
    max_lines = lines_kept(len(launch.ranks), max_lines)
    entries = launch.interleaved(last=max_lines)
    if launch.done and launch.kind == "call":  # a finished %%dist cell: no launch frame
        template = launch.plan.log_line_prefix
        return compact_bundle(launch, entries, [line[:-1] for line in log_lines(entries, template)])
    # the cell that waits on the launch raises the failure: its traceback is shown there, once
    shown_in_cell = launch.waited_on
    failure = failure_text(launch.exception, launch.failure_traceback) if launch.done and not shown_in_cell else ""
    return {
        "text/plain": _plain(launch, counts, entries, failure, max_lines),
        "text/html": _html(launch, counts, entries, failure, max_lines),
    }


def _plain(launch: LaunchState, counts: dict, entries: list, failure: str, max_lines: int) -> str:
    lines = [header_text(launch, recorded=True)]
    slow = stragglers_text(launch)
    if slow:
        lines.append(f"⚠ {slow}")
    where = places_text(launch)
    if where:
        lines.append(where)
    lines += [_hidden_note(launch, rank, n - max_lines) for rank, n in counts.items() if n > max_lines]
    template = launch.plan.log_line_prefix
    lines += [line[:-1] for line in log_lines(entries, template)]  # the text keeps every rank's line
    last = _last_metrics(launch.metrics)
    if last and not launch.done:
        lines.append(f"metrics: {last}")
    if launch.done:
        lines.append(f"{_SYMBOL.get(launch.status, '')} {summary_text(launch)}")
    if failure:
        lines.append(failure.rstrip())
    title, stacks, _ = stacks_section(launch)
    if stacks and not _stacks_told_in_cell(launch):
        lines.append(f"{title}:\n{stacks}")
    return "\n".join(lines)


def stacks_section(launch: LaunchState) -> tuple[str, str, bool]:
    """The stacks the form shows, as (title, text, open): those taken when the launch was stopped,
    stalled or timed out ("where the ranks were"), or the last ones asked for while it ran
    (``Launch.stacks()``, the widget's "Stacks" button), folded once the launch has succeeded."""
    stacks = launch.last_stacks
    if not stacks:
        return "", "", False
    if _stacks_told_in_cell(launch):  # the cell's error names where each rank was: not again, unfolded
        return "every thread of every rank as it ended", str(stacks), False
    if launch.done and launch.status != "succeeded":
        return "where the ranks were", str(stacks), True
    taken = time.strftime("%H:%M:%S", time.localtime(stacks.taken_at)) if stacks.taken_at else "earlier"
    return f"where the ranks were at {taken}", str(stacks), not launch.done


def _stacks_told_in_cell(launch: LaunchState) -> bool:
    """The launch ended badly while a cell waited on it: that cell's error says where the ranks were."""
    return launch.done and launch.status != "succeeded" and launch.waited_on


def _html(launch: LaunchState, counts: dict, entries: list, failure: str, max_lines: int) -> str:
    statuses = {rank: launch.rank_status(rank) for rank in launch.ranks}
    symbol = _SYMBOL.get(launch.status, "")
    head = html.escape(header_text(launch, recorded=True).split(" · ", 1)[1])
    parts = [
        f"<style>{CSS}</style>",
        f'<div class="nl-head"><b>notebook_launcher</b> · {head}</div>',
        f"<div>{status_chips(statuses, launch.stragglers)}</div>",
    ]
    parts.append(notes_html(launch))
    quiet = launch.done and not any(counts.values())
    if quiet:  # nothing printed: one line, not a box per rank
        parts.append(hint_html("no rank printed anything"))
    many = len(launch.ranks) > FOLDED_FROM and not quiet
    if many:  # as tall as the live widget: the newest lines of all ranks in one capped log, each rank's folded
        newest = entries[-all_ranks_kept(len(launch.ranks)) :]
        every = entries_html(collapsed(newest) if collapsing() else newest, prefix=True)
        title = (
            f"all ranks · {len(newest)} lines"
            if len(newest) == len(entries)
            else f"all ranks · newest {len(newest)} lines"
        )
        log = capped_log(every, label="all ranks log")
        parts.append(f'<details class="nl-ranklog" open><summary>{title}</summary>{log}</details>')
    for rank in [] if quiet else launch.ranks:
        own = [entry for entry in entries if entry.rank == rank]
        hidden = counts[rank] - max_lines
        body = (hint_html(_hidden_note(launch, rank, hidden)) if hidden > 0 else "") + (
            entries_html(own) or hint_html("no output")
        )
        plural = "s" if counts[rank] != 1 else ""
        place = launch.place(rank)
        where = f" · {html.escape(str(place))}" if place is not None else ""
        parts.append(
            f'<details class="nl-ranklog"{"" if many else " open"}>'
            f"<summary>rank {rank}{where} · {statuses[rank]} · {counts[rank]}"
            f" line{plural}</summary>"
            f"{capped_log(body, label=f'rank {rank} log')}</details>"
        )
    parts.append(metrics_html(series_by_key(launch.metrics), as_image=True))
    if launch.done:
        parts.append(
            f'<div class="nl-summary">{symbol} {html.escape(summary_text(launch))}{_download(launch, entries)}</div>'
        )
    if failure:
        parts.append(traceback_html(failure))
    title, stacks, unfolded = stacks_section(launch)
    if stacks:
        parts.append(stacks_html(title, stacks, unfolded))
    return f'<div class="nl-root nl-static" data-launch="{launch.id}">{"".join(parts)}</div>'


def log_lines(entries: Iterable[Any], template: str | None = None) -> Iterator[str]:
    """Log entries as the lines of a plain log: ``[rank N] text`` (or ``template``'s prefix, as
    ``line_prefix`` makes it), each ending with a newline, no terminal codes.

    Examples:
        >>> from types import SimpleNamespace
        >>> list(log_lines([SimpleNamespace(rank=1, text="\\x1b[32mok\\x1b[0m")]))
        ['[rank 1] ok\\n']
    """
    for entry in entries:
        ranks = getattr(entry, "ranks", ())
        if len(ranks) > 1:  # a line several ranks said (said_once)
            label = ranks_label(ranks)
            prefix = f"[{label}] " if template is None else line_prefix(template, label.split(" ", 1)[1])
        else:
            prefix = line_prefix(template, entry.rank)
        yield f"{prefix}{strip_ansi(entry.text.rstrip(chr(10)))}\n"


def _download(launch: LaunchState, entries: list) -> str:
    """A link that downloads the launch's log as a ``.log`` file (the finished form's "Save log"),
    when this form holds every line of every rank and they are small enough to carry twice;
    otherwise where every line is. A window of the log is never offered as the log (8 chatty ranks
    once saved a 368 KB link to 4,000 of their 96,000 lines). An untrusted notebook drops the
    link's target, so the form never relies on it."""
    if not entries:
        return ""
    total = sum(launch.line_count(rank) for rank in launch.ranks)
    where = "notebook_launcher.last_launch().logs(rank) has every line while the kernel runs"
    if len(entries) < total:
        return f' · <span class="nl-download-note">{len(entries)} of the {total} lines are kept here: {where}</span>'
    data = "".join(log_lines(entries)).encode()
    if len(data) > DOWNLOAD_LIMIT:
        return (
            f' · <span class="nl-download-note">the log ({len(data) / 2**20:.1f} MiB) is too big to carry here:'
            f" {where}</span>"
        )
    href = "data:text/plain;charset=utf-8;base64," + base64.b64encode(data).decode()
    plural = "s" if len(entries) != 1 else ""
    return (
        f' · <a class="nl-download" download="notebook_launcher-{launch.id}.log" href="{href}">'
        f"download the log ({len(entries)} line{plural})</a>"
    )


def stacks_html(title: str, stacks: str, unfolded: bool = True) -> str:
    """A foldable section with the stacks as text."""
    return (
        f'<details class="nl-stacks"{" open" if unfolded else ""}><summary>{html.escape(title)}</summary>'
        f'<pre class="nl-log">{html.escape(stacks)}</pre></details>'
    )
