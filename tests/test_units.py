"""Pure logic, tested alone and fast: channel framing, line splitting, the record, error rebuilding."""

import base64
import os
import pickle
import re
import threading
import traceback

import cloudpickle
import pytest

from notebook_launcher.devices import CpuDevice, CudaDevice, XlaDevice
from notebook_launcher.errors import WorkerError, describe_exit
from notebook_launcher.launching.checks import check_port_number
from notebook_launcher.launching.environment import rank_environment, threads_per_rank
from notebook_launcher.launching.record import LaunchRecord
from notebook_launcher.launching.threads import run_in_thread
from notebook_launcher.wire import (
    ChannelWriter,
    FrameReader,
    LineReader,
    dumps_for_kernel,
    error_report,
    rebuild_exception,
)


def test_frames_survive_arbitrary_chunking_and_large_payloads():
    r, w = os.pipe()
    writer = ChannelWriter(w)
    big = os.urandom(300_000)
    sender = threading.Thread(target=lambda: [writer.send("result", big), writer.send("status", "x"), writer.close()])
    sender.start()
    reader, events = FrameReader(), []
    while chunk := os.read(r, 7919):
        events.extend(reader.feed(chunk))
    sender.join()
    os.close(r)
    assert [(kind, payload) for kind, payload, _, _ in events] == [("result", big), ("status", "x")]


def test_a_partial_frame_yields_nothing():
    r, w = os.pipe()
    ChannelWriter(w).send("status", "running")
    data = os.read(r, 4096)
    assert FrameReader().feed(data[:-1]) == []


def test_lines_split_across_chunks_and_multibyte_characters():
    lines = LineReader()
    text = "héllo wörld\nsecond"
    data = text.encode()
    out = "".join(lines.feed(data[i : i + 1]) for i in range(len(data))) + lines.finish()
    assert out == "héllo wörld\nsecond\n"


def test_invalid_utf8_is_replaced_not_fatal():
    assert LineReader().feed(b"bad \xff byte\n") == "bad \ufffd byte\n"


def test_record_picks_the_earliest_failure_not_the_first_reported():
    record = LaunchRecord(3)
    record.add_failure(0, RuntimeError("secondary: peer closed"), when=20.0)
    record.add_failure(2, ValueError("root cause"), when=10.0)
    record.finish()
    assert (record.status, record.failed_rank, str(record.failure)) == ("failed", 2, "root cause")
    assert [record.rank_status(r) for r in record.ranks] == ["failed", "stopped", "failed"]


def test_record_status_lifecycle():
    record = LaunchRecord(2, first_rank=2)
    assert record.status == "starting"
    record.set_rank_status(2, "running")
    assert record.status == "running"
    record.add_result(2, "a")
    record.finish()
    assert record.status == "stopped" and record.results == ["a", None]


@pytest.mark.parametrize(
    "exc, expected_str",
    [
        (ValueError("boom"), "[rank 3] boom"),
        (RuntimeError("a", "b"), "('a', 'b')"),
        (KeyError("missing"), "'missing'"),
        (OSError(2, "No such file"), "[Errno 2] No such file"),
    ],
)
def test_rebuilt_exception_keeps_type_names_rank_and_carries_traceback(exc, expected_str):
    try:
        raise exc
    except Exception as caught:
        report = error_report(caught)
    rebuilt = rebuild_exception(3, report)
    assert type(rebuilt) is type(exc)
    assert str(rebuilt) == expected_str
    if not str(rebuilt).startswith("[rank 3]"):
        assert rebuilt.__notes__ == ["raised on rank 3"]
    last = traceback.extract_tb(rebuilt.__traceback__)[-1]  # the rank's own frames, as a real traceback
    assert (last.name, last.line) == ("test_rebuilt_exception_keeps_type_names_rank_and_carries_traceback", "raise exc")


class NeedsTwo(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")  # args=("a/b",), but unpickling calls NeedsTwo("a/b"): TypeError
        self.b = b


def test_an_exception_whose_init_takes_other_arguments_keeps_its_type():
    try:
        raise NeedsTwo("x", "y") from KeyError("first")
    except NeedsTwo as caught:
        report = error_report(caught)
    assert report["pickled"] is None  # the standard route fails...
    rebuilt = rebuild_exception(0, report)
    assert type(rebuilt) is NeedsTwo  # ...and it comes back all the same
    assert (str(rebuilt), rebuilt.b) == ("[rank 0] x/y", "y")
    assert type(rebuilt.__cause__) is KeyError and rebuilt.__cause__.args == ("first",)


class _Odd(ValueError):
    """Its ``__init__`` does not take its ``args``: it does not unpickle, so the report has its parts."""

    def __init__(self, message, extra):
        super().__init__(message)
        self.extra = extra


def test_a_report_whose_class_cannot_be_loaded_becomes_worker_error_with_the_rank_frames():
    try:
        raise _Odd("odd", 1)
    except ValueError as caught:
        report = error_report(caught)
    assert report["pickled"] is None and report["parts"] is not None
    report["parts"]["cls"] = b"not a pickle either"
    err = rebuild_exception(1, report)
    assert isinstance(err, WorkerError)
    assert str(err).startswith("rank 1 raised _Odd: odd (its class could not be loaded in the kernel")
    assert traceback.extract_tb(err.__traceback__)[-1].line == 'raise _Odd("odd", 1)'
    assert 'raise _Odd("odd", 1)' in err.remote_traceback
    assert pickle.loads(pickle.dumps(err)).rank == 1


def test_a_report_that_unpickles_carries_no_parts():
    """The parts are for an exception that does not load back; one that does is sent once."""
    try:
        raise ValueError("plain")
    except ValueError as caught:
        report = error_report(caught)
    assert report["pickled"] is not None and report["parts"] is None
    assert str(rebuild_exception(0, report)) == "[rank 0] plain"


def _entries(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def test_frames_are_rebuilt_with_their_real_lines_and_library_frames_marked_hidden():
    import json

    from notebook_launcher.tracebacks import frames_of, traceback_from

    try:
        json.loads("{")  # raises inside the standard library
    except ValueError as caught:
        frames = frames_of(caught.__traceback__)
    assert len(frames) > 2 and [frame["library"] for frame in frames] == [False] + [True] * (len(frames) - 1)
    rebuilt = traceback_from(frames)
    entries = traceback.extract_tb(rebuilt)
    assert entries[0].line.startswith('json.loads("{")') and entries[0].lineno == frames[0]["lineno"]
    assert [entry.filename for entry in entries] == [frame["filename"] for frame in frames]
    hidden = [tb.tb_frame.f_locals.get("__tracebackhide__", False) for tb in _entries(rebuilt)]
    assert hidden == [False] + [True] * (len(frames) - 1)
    assert rebuilt.tb_frame.f_code.co_firstlineno == frames[0]["firstlineno"]  # IPython numbers from it


def test_describe_exit_names_signal_and_code():
    assert describe_exit(2, -15) == "rank 2 was killed by signal SIGTERM"
    assert describe_exit(0, 0) == "rank 0 exited with code 0 without returning a result"


def test_dumps_for_kernel_falls_back_to_cloudpickle_for_local_classes():
    def make():
        class Local:
            pass

        return Local()

    data = dumps_for_kernel(make())
    assert type(pickle.loads(data)).__name__ == "Local"
    assert dumps_for_kernel([1, 2]) == pickle.dumps([1, 2], protocol=pickle.HIGHEST_PROTOCOL)


def test_rank_environment_for_second_node(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    env = rank_environment(
        local_rank=1,
        num_processes=4,
        node_rank=1,
        num_nodes=2,
        master_addr="10.0.0.1",
        master_port=1234,
        mixed_precision="fp16",
        device=CudaDevice(),
        threads=3,
    )
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["GROUP_RANK"]) == ("5", "8", "1", "1")
    assert "OMP_NUM_THREADS" not in env and "ACCELERATE_USE_CPU" not in env
    assert threads_per_rank(16, 3) == 5 and threads_per_rank(2, 4) == 1


def test_port_strings_in_accelerate_style_are_accepted():
    assert check_port_number("29500") == 29500
    assert check_port_number(None) is None
    with pytest.raises(ValueError, match="got 'abc'"):
        check_port_number("abc")


def test_supervisor_threads_are_reused():
    seen, done = [], threading.Event()
    run_in_thread(lambda: seen.append(threading.get_ident()) or done.set())
    done.wait(5)
    first = seen[0]
    done.clear()
    run_in_thread(lambda: seen.append(threading.get_ident()) or done.set())
    done.wait(5)
    assert seen == [first, first]


def test_cloudpickle_tracker_maps_classes_back():
    """The property spawn relies on: a class sent by value comes back as the very same class."""

    class Sent:
        pass

    copy = cloudpickle.loads(cloudpickle.dumps(Sent))
    assert cloudpickle.loads(cloudpickle.dumps(copy())).__class__ is Sent


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
    assert chart.count("<polyline") == 2 and "rank 0</span>" in chart and "rank 1</span>" in chart  # legend
    assert "latest loss: rank 0: 2, rank 1: 3" in chart
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
    assert drawn.count("<polyline") == 2 and 'fill="#ffffff"' in drawn
    assert re.findall(r'text-anchor="middle">([^<]+)</text>', drawn) == ["0", "1", "2"]
    assert "<svg" not in image.replace(drawn, "")
    visible = re.sub(r"<[^>]+>", "\n", image)
    assert "latest loss: rank 0: 2, rank 1: 3" in visible and "rank 1" in visible
    assert 'alt="loss from 0 to 3, steps 0 to 2; latest' in image


def test_display_text_reads_html_displays_as_text():
    from notebook_launcher.launching.record import LaunchRecord

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


def test_carriage_returns_rewrite_the_line():
    lines = LineReader()
    assert lines.feed(b"10%\r50%") == "" and lines.live == "50%"
    assert lines.feed(b"\r100%\r\n") == ""  # a bar's row, held until a later line shows no bar comes back to it
    assert lines.feed(b"windows line\r\nplain\n") == "100%\nwindows line\nplain\n"


def test_a_rank_log_stores_blocks_and_splits_only_what_is_asked_for():
    from notebook_launcher.launching.ranklog import RankLog

    log = RankLog(rank=3)
    log.add_text("stdout", "".join(f"line {i}\n" for i in range(10_000)), seq=0, when=1.0)
    log.add_text("stderr", "warn\x0cwith a form feed\n", seq=10_000, when=2.0)
    index, replaced = log.add_display({"text/plain": "shown"}, "d", False, seq=10_001, when=3.0)
    assert (log.count, index, replaced) == (10_002, 10_001, False)
    assert [(e.text, e.seq) for e in log.entries(9_999, 10_001)] == [
        ("line 9999\n", 9_999),
        ("warn\x0cwith a form feed\n", 10_000),
    ]
    assert log.add_display({"text/plain": "newer"}, "d", True, seq=10_002, when=4.0) == (10_001, True)
    assert log.entries(10_001)[0].text == "newer\n" and log.count == 10_002
    assert log.text("stderr") == "warn\x0cwith a form feed\n"


def test_tpu_host_detection_looks_at_the_host_only(tmp_path):
    from notebook_launcher.devices.probe import is_tpu_host, tpu_cores, xla_platform

    nothing = str(tmp_path / "accel*")
    assert is_tpu_host({"PJRT_DEVICE": "TPU"}, nothing) and is_tpu_host({"ISTPUVM": "1"}, nothing)
    assert not is_tpu_host({}, nothing) and not is_tpu_host({"PJRT_DEVICE": "CPU"}, nothing)
    assert xla_platform({"PJRT_DEVICE": "CPU"}, nothing) == "CPU" and xla_platform({}, nothing) is None
    (tmp_path / "accel0").touch()
    assert is_tpu_host({}, str(tmp_path / "accel*"))
    assert tpu_cores({"TPU_ACCELERATOR_TYPE": "v2-8"}) == (8, "v2-8")
    assert tpu_cores({}, accel_glob=str(tmp_path / "accel*")) == (1, None)


def test_xla_process_rule_and_environment(monkeypatch):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setenv("CPU_NUM_DEVICES", "8")
    device = XlaDevice()
    assert device.check_processes(1) is None and device.check_processes(8) is None
    assert "runs either 1 process or one rank per core (8 here)" in device.check_processes(4)
    assert "more than the 8 XLA devices found" in device.check_processes(9)
    env = rank_environment(
        local_rank=0,
        num_processes=8,
        node_rank=0,
        num_nodes=1,
        master_addr="x",
        master_port=1,
        mixed_precision="bf16",
        device=device,
        threads=1,
    )
    assert "RANK" not in env and "MASTER_PORT" not in env and env["WORLD_SIZE"] == "8"


def test_devices_decide_their_start_method_and_environment():
    """The device-specific rules live on the devices: fork-or-spawn for CPUs and GPUs, fork only for XLA."""
    from notebook_launcher.errors import LaunchError

    hazard = ["CUDA was initialized in this kernel"]
    for device in (CpuDevice(), CudaDevice()):
        assert device.resolve_start_method("auto", []) == ("fork", None)
        method, notice = device.resolve_start_method("auto", hazard)
        assert method == "spawn" and "CUDA was initialized" in notice
        with pytest.raises(LaunchError, match="cannot fork this kernel"):
            device.resolve_start_method("fork", hazard)
    assert XlaDevice().resolve_start_method("auto", []) == ("xla", None)
    with pytest.raises(ValueError, match="'spawn' is not possible on XLA"):
        XlaDevice().resolve_start_method("spawn", [])
    with pytest.raises(LaunchError, match="cannot start XLA ranks"):
        XlaDevice().resolve_start_method("fork", hazard)
    assert CpuDevice().rank_environment({"RANK": "0"}) == {"RANK": "0", "ACCELERATE_USE_CPU": "true"}
    assert CudaDevice().rank_environment({"RANK": "0"}) == {"RANK": "0"}


def test_checkpoint_publishing_survives_a_crash_at_every_step_and_a_second_one(tmp_path, monkeypatch):
    """A crash between any two steps of a save, and then a second crash in the next save, always
    leaves a complete checkpoint that loading finds."""
    import os as os_module

    from trainer_core import atomic

    final = str(tmp_path / "ckpt")

    def save(label, crash_before_rename=None):
        tmp = atomic.begin(final)
        (tmp_path / "ckpt.tmp" / "weights").write_text(label)
        if crash_before_rename is None:
            atomic.publish(tmp, final)
            return
        renames = []
        real_rename = os_module.rename

        def rename(src, dst):
            if len(renames) == crash_before_rename:
                raise KeyboardInterrupt("crash")
            renames.append((src, dst))
            real_rename(src, dst)

        monkeypatch.setattr(atomic.os, "rename", rename)
        try:
            atomic.publish(tmp, final)
        except KeyboardInterrupt:
            pass
        finally:
            monkeypatch.setattr(atomic.os, "rename", real_rename)

    def loaded():
        return (tmp_path / os_module.path.basename(atomic.resolve(final)) / "weights").read_text()

    save("first")
    save("second", crash_before_rename=1)  # crashed after ckpt -> ckpt.prev, before ckpt.tmp -> ckpt
    assert not os_module.path.exists(final) and loaded() in ("first", "second")
    save("third", crash_before_rename=0)  # the next save crashes too, before any rename
    assert loaded() in ("first", "second", "third")
    save("fourth")
    assert loaded() == "fourth" and not os_module.path.exists(final + ".prev")


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


def test_restoring_the_kernels_global_state_imports_nothing_new_when_a_flag_is_unchanged():
    """Every rank restores the kernel's settings at start; setting deterministic algorithms imports
    torch._inductor (about a second), so it is set only when it differs."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from notebook_launcher.rank.global_state import GlobalState\n"
        "GlobalState.capture().restore()\n"
        "print('torch._inductor' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


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
        import os

        rank = os.environ["RANK"]
        for step in range(12000):
            print(f"rank {rank}: step {step} loss 0.{step:05d}")

    job = launch(chatty, num_processes=8, display="none")
    job.wait()
    bundle = static_bundle(job)
    assert len(json.dumps(bundle).encode()) < 1_000_000
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


def test_a_display_with_nothing_the_launch_shows_is_not_sent():
    """The kernel refuses an empty bundle as a malformed event (the rank's failure): an object that
    displayed itself, or one with only formats the launch does not show, sends nothing."""
    from notebook_launcher.rank.displays import send_display

    sent = []
    channel = type("Channel", (), {"send": lambda self, *event: sent.append(event)})()
    send_display(channel, {}, None, False)
    send_display(channel, {"application/json": {"a": 1}}, None, False)
    assert sent == []
    send_display(channel, {"application/json": {}, "text/plain": "shown"}, "d1", True)
    assert sent == [("display", {"data": {"text/plain": "shown"}, "display_id": "d1", "update": True})]


def test_a_forked_process_reports_how_it_ended_and_can_be_waited_on_with_a_timeout():
    """``fork_process``: the code its target returns or exits with, -N for a signal, None while it runs."""
    import signal

    from notebook_launcher.backends.local.forked_process import fork_process

    def returns(code):
        return code

    def exits(code):
        raise SystemExit(code)

    def raises():
        raise ValueError("in the child")

    def blocks(fd):
        os.read(fd, 1)
        return 0

    ended = [
        fork_process(target, args) for target, args in ((returns, (3,)), (exits, (None,)), (exits, (4,)), (raises, ()))
    ]
    assert [process.wait(timeout=30) for process in ended] == [3, 0, 4, 1]
    read_end, write_end = os.pipe()
    running = fork_process(blocks, (read_end,))
    try:
        assert running.wait(timeout=0) is None and running.wait(timeout=0.05) is None
        os.kill(running.pid, signal.SIGKILL)
        assert running.wait(timeout=30) == -signal.SIGKILL
    finally:
        os.close(read_end)
        os.close(write_end)
    for process in [*ended, running]:
        process.release()
        assert process.exitcode is not None


def test_a_fixed_port_in_time_wait_is_free_to_launch_on_and_a_listening_one_is_not():
    """After a launch whose store ended its connections first, the port sits in TIME-WAIT for a
    minute: torch's store binds it again (SO_REUSEADDR), so the check must not call it in use."""
    import socket

    from notebook_launcher.errors import LaunchError
    from notebook_launcher.launching.ports import check_port_free

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    with pytest.raises(LaunchError, match=f"use_port={port} is already in use on 127.0.0.1"):
        check_port_free("127.0.0.1", port)
    served.close()  # the store's side closes first: its end of the port goes to TIME-WAIT
    client.recv(1)
    client.close()
    listener.close()
    check_port_free("127.0.0.1", port)


def test_a_file_at_the_snapshot_folders_name_gives_a_private_folder_instead(tmp_path, monkeypatch):
    """Before: FileExistsError, and the server extension was not loaded (saved launches froze)."""
    import stat
    import tempfile

    from notebook_launcher.frontend.saved_outputs import SNAPSHOTS_ENV
    from notebook_launcher.frontend.server_extension import snapshots_folder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(SNAPSHOTS_ENV, raising=False)
    squatter = tmp_path / f"notebook-launcher-snapshots-{os.getuid()}"
    squatter.write_text("put here by someone else")
    folder = snapshots_folder()
    mode = folder.lstat().st_mode
    assert folder != squatter and stat.S_ISDIR(mode) and not mode & 0o077
    assert squatter.read_text() == "put here by someone else"


class _RecordingComm:
    """The comm edge of a sidebar channel: what the kernel sends, and whether it closed it."""

    def __init__(self):
        self.sent, self.closed = [], False

    def on_msg(self, callback):
        self.receive = lambda data: callback({"content": {"data": data}})

    def on_close(self, callback):
        self.close_from_front_end = lambda: callback({})

    def send(self, message):
        self.sent.append(message["type"])

    def close(self):
        self.closed = True


def test_a_sidebar_that_went_silent_is_closed_instead_of_sent_to_for_ever():
    """Before: every sidebar comm ever opened (each page reload opens one) got every update."""
    from notebook_launcher.frontend.comm import _SidebarChannel, open_sidebars

    now = [0.0]
    before = open_sidebars()
    comm = _RecordingComm()
    channel = _SidebarChannel(comm, silent_after=90.0, clock=lambda: now[0])
    comm.receive({"type": "alive"})
    now[0] = 60.0
    channel._settings_changed({})
    assert comm.sent == ["settings"] and open_sidebars() == before + 1
    now[0] = 151.0  # 91 s without a word
    channel._settings_changed({})
    assert comm.sent == ["settings"] and comm.closed and open_sidebars() == before
    quiet = _RecordingComm()  # an older sidebar that never says it is alive: kept
    old = _SidebarChannel(quiet, silent_after=90.0, clock=lambda: now[0])
    now[0] = 10_000.0
    old._settings_changed({})
    assert quiet.sent == ["settings"] and not quiet.closed
    quiet.close_from_front_end()
    assert open_sidebars() == before


def test_a_head_that_stops_answering_is_lost_once_and_the_kernel_leaves_its_cluster():
    """The head watch with a fake probe and clock: answers keep it alive, three seconds of silence
    make it lost, ``on_lost`` runs once with a reason naming the address, and ``left`` is then set."""
    from notebook_launcher.backends.ray.head_watch import HeadWatch

    answers = iter([True, False, True, *[False] * 50])
    now = iter(range(1000))
    calls = []
    watch = HeadWatch(
        "10.0.0.1:6379", calls.append, probe=lambda address: next(answers), clock=lambda: next(now), every=0.01
    )
    watch.start()
    assert watch.left.wait(30), "the head was never taken as lost"
    watch.join(5)
    assert len(calls) == 1 and calls[0] == watch.reason
    assert calls[0].startswith("the Ray head at 10.0.0.1:6379 stopped answering at ")
    assert "this kernel leaves it and lives on" in calls[0]
    assert next(answers) is False and next(now) == 7  # lost at the 4th silent probe after the last answer
