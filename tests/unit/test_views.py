"""The launch's views rendered without a kernel: logs, chips, colours, charts, saved forms."""

import base64
import os
import re

from notebook_launcher.launching.record import LaunchRecord


def test_render_logs_displays_and_chips():
    from notebook_launcher.frontend.views.render import entries_html, status_chips
    from notebook_launcher.launching.record import LogLine

    chips = status_chips({1: "failed", 0: "done"})
    assert chips.index("rank 0: done") < chips.index("rank 1: failed")
    # with the stylesheet stripped (an untrusted notebook) the chips' text still reads apart
    assert re.sub(r"<[^>]+>", "", chips) == "rank 0: done rank 1: failed"
    entries = [
        LogLine(0, "stdout", "a<b>\n", 0.0),
        LogLine(1, "stderr", "oops\n", 0.0),
        LogLine(1, "stdout", "<table>", 0.0, bundle={"text/html": "<table><tr><td>7</td></tr></table>"}),
    ]
    log = entries_html(entries, prefix=True)
    assert "a&lt;b&gt;" in log and '<span class="nl-stderr">oops' in log
    assert "<table><tr><td>7</td></tr></table>" in log  # a rank's HTML display, drawn
    assert log.count('class="nl-prefix nl-rank-') == 3 and "[rank 1]" in log


def test_every_colour_of_a_launch_reads_on_light_and_dark_themes():
    """WCAG: text 4.5:1, lines 3:1. A prefix without the stylesheet is white on its rank's pill; with
    it, the rank's colour mixed 55/45 with the theme's text (checked in a browser in test_browser)."""
    from notebook_launcher.frontend.views.palette import (
        DARK_BACKGROUND,
        LIGHT_BACKGROUND,
        RANK_LINES,
        RANK_PILLS,
        STATUS_COLORS,
        contrast,
    )
    from notebook_launcher.frontend.views.render import entries_html, status_chips
    from notebook_launcher.launching.record import LogLine

    for color in (*RANK_PILLS, *STATUS_COLORS.values()):
        assert contrast("#ffffff", color) >= 4.5, color
    for color in RANK_LINES:
        assert min(contrast(LIGHT_BACKGROUND, color), contrast(DARK_BACKGROUND, color)) >= 3.0, color
    chips = status_chips({rank: status for rank, status in enumerate(STATUS_COLORS)})
    assert all(f"background:{color}" in chips for color in STATUS_COLORS.values())
    log = entries_html([LogLine(rank, "stdout", "x\n", 0.0) for rank in range(8)], prefix=True)
    assert all(f"color:#ffffff;background-color:{pill}" in log for pill in RANK_PILLS)


def _records(rows):
    return [{"rank": r, "step": s, "values": v, **({"attempt": a} if a else {})} for r, s, v, a in rows]


def test_a_long_runs_step_ticks_read_as_people_write_them_and_the_last_stays_in_the_chart():
    """Before, a run of 12,400 steps was labelled "1e+03", "2.5e+03" ... and its last label, centred
    on the plot's right edge, ran past the chart and was cut off."""
    from notebook_launcher.frontend.views.charts import CHAR_WIDTH, metrics_html, series_by_key

    long_run = series_by_key(_records([(0, s, {"loss": 1.0 + (s % 7)}, 0) for s in range(0, 12_401, 100)]))
    for chart in (metrics_html(long_run, width=360), _drawn(metrics_html(long_run, width=360, as_image=True))):
        ticks = re.findall(r'<text x="([0-9.]+)"[^>]*text-anchor="middle">([^<]+)</text>', chart)
        assert [label for _, label in ticks] == ["0", "2.5k", "5k", "7.5k", "10k", "12.5k"]
        x, label = ticks[-1]
        assert float(x) + CHAR_WIDTH * len(label) / 2 <= 360
        assert "e+" not in chart


def _drawn(image_html):
    return base64.b64decode(re.search(r'src="data:image/svg\+xml;base64,([^"]+)"', image_html).group(1)).decode()


def test_charts_have_ticks_grids_log_scales_attempts_and_matching_captions():
    from notebook_launcher.frontend.views.charts import metrics_html, series_by_key

    same = series_by_key(_records([(r, s, {"loss": float(s)}, 0) for r in (0, 1) for s in range(3)]))
    chart = metrics_html(same)
    assert chart.count("<polyline") == 1 and "nl-legend" not in chart  # identical ranks: one line
    assert "latest loss: all ranks: 2" in chart and 'stroke="currentColor"' in chart  # named as drawn
    # live, the ranks' equal values arrive one rank ahead of the other: still one line, no legend
    for arrived in range(1, 7):
        records = _records([(r, s, {"loss": 1.0}, 0) for s in range(4) for r in (0, 1)][:arrived])
        live = metrics_html(series_by_key(records))
        assert "nl-legend" not in live and live.count("<polyline") + live.count("<circle") == 1, arrived
    ticks = re.findall(r'text-anchor="middle">([^<]+)</text>', chart)
    assert ticks == ["0", "1", "2"]  # the step axis
    assert re.findall(r'text-anchor="end">([^<]+)</text>', chart) == ["0", "0.5", "1", "1.5", "2"]
    assert chart.count("<line ") == 5 + 3  # a grid line per tick
    differ = series_by_key(_records([(r, s, {"loss": float(s + r)}, 0) for r in (0, 1) for s in range(3)]))
    chart = metrics_html(differ)
    assert chart.count("<polyline") == 3 and "rank 0</span>" in chart and "rank 1</span>" in chart  # legend
    assert chart.count('class="nl-line nl-mean"') == 1 and "</span> mean</span>" in chart  # and their mean
    assert "latest loss: rank 0: 2, rank 1: 3, mean: 2.5" in chart
    constant = metrics_html(series_by_key(_records([(0, s, {"lr": 0.1}, 0) for s in range(4)])))
    assert "(constant)" in constant and ">0.1</text>" in constant
    assert metrics_html({}) == ""
    # a loss falling over four decades: a log scale with a tick per decade, not a flat line
    falling = metrics_html(series_by_key(_records([(0, s, {"loss": 10.0 ** (-s / 25)}, 0) for s in range(101)])))
    assert 'data-scale="log"' in falling and "(log scale)" in falling
    assert re.findall(r'text-anchor="end">([^<]+)</text>', falling) == ["0.0001", "0.001", "0.01", "0.1", "1"]
    assert "nl-smoothed" in falling and "nl-raw" in falling  # smoothed over the faint raw line
    # a restart: one series per attempt, the earlier one dashed, the latest values of the current one
    restarted = _records(
        [(0, s, {"loss": 5.0 - s}, 0) for s in range(4)] + [(0, s, {"loss": 4.0 - s}, 1) for s in range(3)]
    )
    chart = metrics_html(series_by_key(restarted))
    assert chart.count("<polyline") == 2 and chart.count('stroke-dasharray="4 3"') == 1
    assert "rank 0 · attempt 0" in chart and "rank 0 · attempt 1" in chart
    assert "latest loss: rank 0 · attempt 1: 2" in chart
    # the static form: a whole SVG document on a white card, ticks inside; labels as HTML around it
    image = metrics_html(differ, as_image=True)
    drawn = base64.b64decode(re.search(r'src="data:image/svg\+xml;base64,([^"]+)"', image).group(1)).decode()
    assert drawn.count("<polyline") == 3 and 'fill="#ffffff"' in drawn
    assert re.findall(r'text-anchor="middle">([^<]+)</text>', drawn) == ["0", "1", "2"]
    assert "<svg" not in image.replace(drawn, "")
    visible = re.sub(r"<[^>]+>", "\n", image)
    assert "latest loss: rank 0: 2, rank 1: 3" in visible and "rank 1" in visible
    assert 'alt="loss from 0 to 3, steps 0 to 2; latest' in image


def test_display_text_reads_html_displays_as_text():

    record = LaunchRecord(1)
    bundle = {
        "text/plain": "<IPython.core.display.HTML object>",
        "text/html": "<progress></progress> [3/10 00:01]<table><tr><th>Step</th><th>Loss</th></tr>"
        "<tr><td>2</td><td>0.5</td></tr></table>",
    }
    index, replaced = record.add_display(0, bundle, display_id="p", update=False)
    assert (index, replaced) == (0, False)
    assert record.lines(0)[0].text == "[3/10 00:01]\nStep Loss\n2 0.5\n"
    newer = {**bundle, "text/html": "[10/10 00:03]"}
    assert record.add_display(0, newer, display_id="p", update=True) == (0, True)  # replaced in place
    assert [line.text for line in record.lines(0)] == ["[10/10 00:03]\n"]
    assert record.add_display(0, {"text/plain": "x"}, display_id="q", update=True) == (1, False)


def test_an_empty_log_box_does_not_say_no_output_over_a_progress_bar_or_a_chart():
    import ipywidgets

    from notebook_launcher.frontend.views.logbox import LogBox

    box = LogBox(ipywidgets, prefix=False)
    box.render()
    assert "no output yet" in box.note_html
    box.set_live(" 40%|████      | 4/10")  # a tqdm bar still drawing its first line
    box.render()
    assert box.note_html == "" and "40%" in box.live_html
    quiet = LogBox(ipywidgets, prefix=False)
    quiet.charted = True  # metrics logged, nothing printed
    quiet.render()
    assert "no output yet" not in quiet.note_html and "charted" in quiet.note_html
    box.close()
    quiet.close()


def test_the_finished_form_carries_its_log_as_a_download_only_while_small(monkeypatch):
    """The download link holds the lines the form shows; a log too big to carry twice gets none, and
    the form says so and where the lines are."""
    from notebook_launcher import launch
    from notebook_launcher.frontend.views import static

    job = launch(lambda: print("x" * 100), num_processes=1, display="none")
    job.wait()
    link = re.search(r'href="data:text/plain;charset=utf-8;base64,([^"]+)"', static.static_bundle(job)["text/html"])
    assert base64.b64decode(link.group(1)).decode() == "[rank 0] " + "x" * 100 + "\n"
    monkeypatch.setattr(static, "DOWNLOAD_LIMIT", 100)
    page = static.static_bundle(job)["text/html"]
    assert "nl-download" not in page.replace("nl-download-note", "")
    assert "the log (0.0 MiB) is too big to carry here: notebook_launcher.last_launch().logs(rank)" in page


def test_a_saved_launch_of_eight_chatty_ranks_stays_under_a_megabyte_and_keeps_every_line():
    """8 ranks x 12,000 lines (200 lines/s for a minute): the static form, which the notebook saves,
    keeps each rank's newest lines within 1 MB; ``logs(rank)`` still has every line."""
    import json

    from notebook_launcher import launch
    from notebook_launcher.frontend.views.static import static_bundle

    def chatty():

        rank = os.environ["RANK"]
        for step in range(12000):
            print(f"rank {rank}: step {step} loss 0.{step:05d}")

    job = launch(chatty, num_processes=8, display="none")
    job.wait()
    bundle = static_bundle(job)
    assert len(json.dumps(bundle).encode()) < 700_000  # 1.2 MB with a 368 KB link to 4,000 of the lines
    # a window of the log is not offered as the log: no link, and the count of lines kept
    assert "nl-download" not in bundle["text/html"].replace("nl-download-note", "")
    assert "4000 of the 96000 lines are kept here: notebook_launcher.last_launch().logs(rank)" in bundle["text/html"]
    assert "rank 7: step 11999 loss" in bundle["text/plain"] and "rank 0: step 11999 loss" in bundle["text/html"]
    assert "11500 earlier lines of rank 3 not shown" in bundle["text/plain"]
    assert all(job.logs(rank).count("\n") == 12000 for rank in range(8))


def test_terminal_codes_show_as_a_terminal_shows_their_colours():
    from notebook_launcher.frontend.views.ansi import ansi_html, strip_ansi

    nested_bar = "\x1b[A\x1b[2K\r 50%|\x1b[32m█████\x1b[0m     | 5/10\x1b]8;;https://x\x07link\x1b]8;;\x07"
    assert strip_ansi(nested_bar) == "\r 50%|█████     | 5/10link"
    assert ansi_html(nested_bar) == '\r 50%|<span style="color:#0dbc79">█████</span>     | 5/10link'
    assert ansi_html("\x1b[38;5;196mred\x1b[39m \x1b[48;2;1;2;3m<bg>\x1b[m") == (
        '<span style="color:#ff0000">red</span> <span style="background-color:#010203">&lt;bg&gt;</span>'
    )
    assert ansi_html("\x1b[1mbold \x1b[3mboth\x1b[22m italic\x1b[0m") == (
        '<span style="font-weight:bold">bold </span><span style="font-weight:bold;font-style:italic">both</span>'
        '<span style="font-style:italic"> italic</span>'
    )
    assert ansi_html("no codes & <tags>") == "no codes &amp; &lt;tags&gt;"


def test_a_kernel_gone_ends_every_running_chip_slow_or_written_before_chips_carried_their_text_colour():
    from notebook_launcher.frontend.views.epitaph import ENDED, ended_with_kernel
    from notebook_launcher.frontend.views.palette import STATUS_COLORS
    from notebook_launcher.frontend.views.render import status_chips

    older = f'<span class="nl-chip nl-running" style="background:{STATUS_COLORS["running"]}">rank 3: running</span>'
    page = status_chips({0: "running", 1: "running", 2: "done"}, slow=[1]) + " " + older
    ended = ended_with_kernel({"text/html": page}, within=10)["text/html"]
    assert [f"rank {rank}: {ENDED}" in ended for rank in (0, 1, 3)] == [True, True, True], ended
    assert "rank 2: done" in ended and "running" not in ended
    assert ended.count("color:#ffffff") == 4  # every chip reads white on its colour without the stylesheet


def test_ranks_that_differ_get_their_mean_over_the_steps_they_share_and_none_over_wall_time():
    from notebook_launcher.frontend.views.charts import metrics_html, series_by_key

    # rank 1 a step ahead: the mean covers the steps both logged
    records = _records([(r, s, {"loss": float(10 * r + s)}, 0) for r in (0, 1) for s in range(20 + r)])
    chart = metrics_html(series_by_key(records), smoothing=0)
    (mean,) = re.findall(r'<polyline class="nl-line nl-mean"[^>]*points="([^"]+)"', chart)
    assert len(mean.split()) == 20 and 'stroke-width="2.6"' in chart
    assert "mean: 24" in chart  # (19 + 29) / 2 at step 19
    # an earlier attempt is not averaged in; one rank alone has no mean
    restarted = _records([(r, s, {"loss": float(r + s)}, a) for a in (0, 1) for r in (0, 1) for s in range(5)])
    assert metrics_html(series_by_key(restarted)).count("nl-mean") == 1
    alone = _records([(0, s, {"loss": float(s)}, 0) for s in range(5)])
    assert "nl-mean" not in metrics_html(series_by_key(alone))
    # over wall time the ranks share no x: no mean rather than a made-up one
    timed = [
        {"rank": r, "step": s, "attempt": 0, "time": 100.0 + s + 0.3 * r, "values": {"loss": float(r + s)}}
        for r in (0, 1)
        for s in range(10)
    ]
    assert "nl-mean" not in metrics_html(series_by_key(timed, x="time"))


def test_clipping_outliers_leaves_a_spike_out_of_the_scale_and_says_so():
    from notebook_launcher.frontend.views.charts import metrics_html, series_by_key

    spiky = _records([(0, s, {"loss": 1000.0 if s == 50 else 1.0 + 0.01 * s}, 0) for s in range(100)])
    whole = metrics_html(series_by_key(spiky), smoothing=0, clip=False)
    clipped = metrics_html(series_by_key(spiky), smoothing=0, clip=True)
    assert "outliers clipped" not in whole and "outliers clipped" in clipped
    assert 'data-scale="log"' in whole and 'data-scale="linear"' in clipped  # the spike no longer sets the scale
    top = re.findall(r'text-anchor="end">([^<]+)</text>', clipped)[-1]
    assert float(top) <= 2.5, top
    (points,) = re.findall(r'points="([^"]+)"', clipped)
    heights = [float(point.split(",")[1]) for point in points.split()]
    assert min(heights) >= 8 - 0.01  # the spike drawn at the plot's top edge, not above the chart
    assert "latest loss: rank 0: 1.99" in clipped  # values read as they are
    few = _records([(0, s, {"loss": 1000.0 if s == 5 else 1.0}, 0) for s in range(10)])
    assert "outliers clipped" not in metrics_html(series_by_key(few), clip=True)  # too few to tell
    os.environ["NOTEBOOK_LAUNCHER_CHART_CLIP"] = "on"
    try:
        assert "outliers clipped" in metrics_html(series_by_key(spiky), as_image=True)
    finally:
        del os.environ["NOTEBOOK_LAUNCHER_CHART_CLIP"]
