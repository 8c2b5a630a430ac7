"""The launch's one output, checked from inside a real kernel: the live widget while a launch runs,
the static form beside it and alone at the end (what a saved notebook keeps), and notebook
machinery (tqdm, display, widgets) used from inside a rank."""

import os
import re
from textwrap import dedent

import pytest
from gates import gate_code, open_gates
from kernel_session import KernelSession

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _bundles(result):
    """The data of every display / display update the cell received, in order."""
    return [out["display"] for out in result.outputs if "display" in out]


TRAIN = dedent("""
    def chatty_training(hold):
        from trainer_core import Accelerator
        accelerator = Accelerator()
        rank = accelerator.process_index
        for step in range(5):
            print(f"step {step} on rank {rank}")
            accelerator.log({"loss": 1.0 / (step + 1) + rank, "lr": 0.1})
        print("careful <now>", file=sys.stderr)
        if hold:
            wait_at_gate()
        accelerator.wait_for_everyone()  # no rank leaves while its peer is still connecting its gloo mesh
        return {"rank": rank}
""")


def test_a_quick_launch_shows_its_static_form_and_never_builds_a_widget(kernel):
    kernel.ok(TRAIN)
    kernel.ok("from notebook_launcher.frontend.views import widget as widget_module\nwidget_module.BUILD_AFTER = 3600")
    try:
        result = kernel.ok(
            "job = launch(chatty_training, args=(False,), num_processes=2, display='widget'); job.wait()"
        )
    finally:
        kernel.ok("widget_module.BUILD_AFTER = 0.25")
    bundles = _bundles(result)
    assert bundles and all(WIDGET_MIME not in bundle for bundle in bundles)
    final = bundles[-1]
    plain, page = final["text/plain"], final["text/html"]
    for rank in (0, 1):
        assert f"[rank {rank}] step 4 on rank {rank}" in plain
        assert f"step 4 on rank {rank}" in page
    assert "careful &lt;now&gt;" in page and '<span class="nl-stderr">' in page
    assert 'data-key="loss"' in page and 'data-key="lr"' in page and 'class="nl-chart-image"' in page
    assert "succeeded in" in plain.splitlines()[0] and "rank 0 returned dict" in plain.splitlines()[-1]
    assert kernel.eval("job.view.built") is False


def test_a_cell_that_waits_gets_its_output_once_there_is_something_to_show(kernel, tmp_path):
    """``notebook_launcher`` blocks the cell, so its output can wait: a quick launch sends one display
    (its final form) instead of a display and an update; a longer one appears with its widget, while
    it runs. ``launch()`` returns at once and the cell goes on, so its output is displayed at once."""
    kernel.ok(TRAIN)
    kernel.ok(gate_code(tmp_path))
    kernel.ok("from notebook_launcher.frontend.views import widget as widget_module\nwidget_module.BUILD_AFTER = 3600")
    try:
        call = "(chatty_training, args=(False,), num_processes=2, display='widget')"
        quick = kernel.ok(f"notebook_launcher{call}")
        started = kernel.ok(f"job = launch{call}; job.wait()")
    finally:
        kernel.ok("widget_module.BUILD_AFTER = 0.25")
    (only,) = [out for out in quick.outputs if "display" in out]
    assert only["kind"] == "display_data" and "succeeded in" in only["display"]["text/plain"].splitlines()[0]
    kinds = [out["kind"] for out in started.outputs if "display" in out]
    assert kinds[0] == "display_data" and kinds[-1] == "update_display_data"

    msg_id = kernel.submit("notebook_launcher(chatty_training, args=(True,), num_processes=2, display='widget')")
    running = kernel.collect(msg_id, until=lambda result: any(WIDGET_MIME in b for b in _bundles(result)))
    first = next(out for out in running.outputs if "display" in out)
    assert first["kind"] == "display_data" and WIDGET_MIME in first["display"]  # shown as it is built
    open_gates(tmp_path, [0, 1])
    rest = kernel.collect(msg_id)
    assert "succeeded in" in _bundles(rest)[-1]["text/plain"]
    assert all(out["kind"] == "update_display_data" for out in rest.outputs if "display" in out)


def test_the_kernel_reads_busy_while_a_cell_waits_on_its_launch(kernel, tmp_path):
    """JupyterLab and Notebook 7 ask for a kernel subshell (on the control channel) when the running
    cell's widget first needs one; that request's "idle" must not stay the kernel's last word while
    the cell waits, or the status bar says Idle for the whole launch."""
    if not kernel.eval("getattr(get_ipython().kernel, '_supports_kernel_subshells', False)"):
        pytest.skip("this ipykernel has no subshells")
    kernel.ok(TRAIN)
    kernel.ok(gate_code(tmp_path))
    msg_id = kernel.submit("notebook_launcher(chatty_training, args=(True,), num_processes=2, display='widget')")
    kernel.collect(msg_id, until=lambda result: any(WIDGET_MIME in b for b in _bundles(result)))
    client = kernel.client
    request = client.session.msg("create_subshell_request", {})
    client.control_channel.send(request)
    subshell = client.get_control_msg(timeout=30)["content"]["subshell_id"]

    def status_of(parent_id, state):
        return lambda msg: (
            msg["msg_type"] == "status"
            and msg["parent_header"].get("msg_id") == parent_id
            and msg["content"]["execution_state"] == state
        )

    kernel.first_message(status_of(request["header"]["msg_id"], "idle"))
    kernel.first_message(status_of(msg_id, "busy"))  # the waiting cell's, said again at once
    client.control_channel.send(client.session.msg("delete_subshell_request", {"subshell_id": subshell}))
    client.get_control_msg(timeout=30)
    open_gates(tmp_path, [0, 1])
    assert "succeeded in" in _bundles(kernel.collect(msg_id))[-1]["text/plain"]


def test_the_cell_that_waits_sends_a_quick_launchs_one_output_itself(kernel, tmp_path):
    """A cell blocked in ``notebook_launcher`` sends a quick launch's one output (its final form)
    from its own thread just before the call returns (``cell_handoff``: the call returns sooner),
    also when an interrupt ends the launch; ``launch()``'s output, shown at its start, is updated by
    the supervisor's thread."""
    kernel.ok(gate_code(tmp_path))
    kernel.ok(
        dedent("""
        from notebook_launcher.frontend.views import widget as widget_module
        widget_module.BUILD_AFTER = 3600
        SHOWN_BY = []  # (shown by the cell's thread, the form's text)
        _show = widget_module.WidgetView._show
        def _recording_show(self, bundle):
            SHOWN_BY.append((threading.current_thread() is threading.main_thread(), bundle["text/plain"]))
            _show(self, bundle)
        widget_module.WidgetView._show = _recording_show
        def quick():
            return 1
        def blocks():
            wait_at_gate()
            threading.Event().wait()
    """)
    )
    try:
        quick = kernel.ok("notebook_launcher(quick, num_processes=2, display='widget')")
        (only,) = [out for out in quick.outputs if "display" in out]
        assert only["kind"] == "display_data" and "succeeded in" in only["display"]["text/plain"].splitlines()[0]
        assert kernel.eval("SHOWN_BY") == [(True, only["display"]["text/plain"])]

        kernel.ok("SHOWN_BY.clear()")
        msg_id = kernel.submit("notebook_launcher(blocks, num_processes=2, display='widget')")
        held = [os.open(tmp_path / f"gate{rank}", os.O_WRONLY) for rank in (0, 1)]  # both ranks are running
        try:
            kernel.interrupt()
            stopped = kernel.collect(msg_id, timeout=60)
        finally:
            for fd in held:
                os.close(fd)
        assert stopped.error["ename"] == "KeyboardInterrupt"
        (only,) = [out for out in stopped.outputs if "display" in out]
        assert "stopped after" in only["display"]["text/plain"]
        assert kernel.eval("SHOWN_BY") == [(True, only["display"]["text/plain"])]

        kernel.ok("SHOWN_BY.clear()")
        kernel.ok("job = launch(quick, num_processes=2, display='widget'); job.wait()")
        assert [by_cell for by_cell, _ in kernel.eval("SHOWN_BY")] == [True, False]
    finally:
        kernel.ok("widget_module.BUILD_AFTER = 0.25\nwidget_module.WidgetView._show = _show")


def _chart(charts_html, key):
    """The chart of metric ``key`` alone, out of the widget's charts: the built-in measures' charts
    (CPU % and RSS MB, by second) come beside the rank's own once the kernel has sampled the ranks
    twice, a second or more into the launch, which a loaded machine reaches before the test looks."""
    start = charts_html.index(f'<div class="nl-chart" data-key="{key}"')
    end = charts_html.find('<div class="nl-chart" ', start + 1)
    return charts_html[start : end if end != -1 else None]


def _as_shown(outputs):
    """(stream name or None, text) of each output as a notebook shows it: consecutive messages of one
    stream are one output (a loaded machine can let ipykernel's timed flush fall between the two
    writes of one ``print``)."""
    shown = []
    for out in outputs:
        if "name" in out and shown and shown[-1][0] == out["name"]:
            shown[-1] = (out["name"], shown[-1][1] + out["text"])
        else:
            shown.append((out.get("name"), out["text"] if "name" in out else out["display"]["text/plain"]))
    return shown


def test_the_launch_output_skips_only_flushes_of_streams_with_nothing_to_send(kernel):
    """IPython flushes stdout and stderr before each display, a wait on the kernel's IO thread per
    stream; the launch's displays skip a stream with nothing pending, and only that: what the cell
    printed just before (held up to 0.2 s by ipykernel) still comes before the launch's output."""
    kernel.ok("def quick(): return 1")
    result = kernel.ok(
        dedent("""
        print("printed first")
        notebook_launcher(quick, num_processes=1, display="widget")
        print("printed after", file=sys.stderr)
        display({"text/plain": "a display of the cell's own"}, raw=True)
    """)
    )
    order = [text.splitlines()[0] if name is None else text for name, text in _as_shown(result.outputs)]
    assert order[0] == "printed first\n" and "succeeded in" in order[1], order
    assert order[2:] == ["printed after\n", "a display of the cell's own"], order
    assert kernel.eval("get_ipython().display_pub._flush_streams.__name__") == "flush_kernel_streams"
    assert kernel.eval("sys.stdout._flush_pending") is False  # nothing pending: a display skips it


def test_a_running_launch_shows_the_live_widget_beside_its_static_form(kernel, tmp_path):
    kernel.ok(gate_code(tmp_path))
    kernel.ok(TRAIN)
    msg_id = kernel.submit("job = launch(chatty_training, args=(True,), num_processes=2, display='widget')")
    kernel.collect(msg_id)
    kernel.ok("while not job.view.built or len(job.lines(0)) + len(job.lines(1)) < 12: job.join(0.02)")
    kernel.ok("job.view.render()")
    assert kernel.eval("[job.view.tabs.get_title(i) for i in range(3)]") == ["all ranks", "rank 0", "rank 1"]
    assert kernel.eval("job.view.tabs.selected_index") == 0
    everything = kernel.eval("''.join(w.value for w in job.view.all_box.inner.children)")
    assert "[rank 0]</span> step 4 on rank 0" in everything and "[rank 1]</span> step 4 on rank 1" in everything
    rank1 = kernel.eval("''.join(w.value for w in job.view.boxes[1].inner.children)")
    assert "step 4 on rank 1" in rank1 and "step 4 on rank 0" not in rank1
    assert "rank 1: running" in kernel.eval("job.view.header.value")
    assert 'data-key="loss"' in kernel.eval("job.view.metrics_box.value")
    static = kernel.eval("job.view.static['text/plain']")
    for rank in (0, 1):  # a snapshot of some moment: each rank's log up to there, whatever its peer had said
        steps = [int(step) for step in re.findall(rf"\[rank {rank}\] step (\d) on rank {rank}", static)]
        assert steps == list(range(len(steps))), static
    assert kernel.eval("sorted(job.view.shown)") == [
        "application/vnd.jupyter.widget-view+json",
        "text/html",
        "text/plain",
    ]  # the widget, with the static form beside it
    path = kernel.eval(f"job.view.save_log({str(tmp_path)!r})")
    with open(path, encoding="utf-8") as saved:
        assert "[rank 1] step 4 on rank 1\n" in saved.read()
    open_gates(tmp_path, [0, 1])
    kernel.ok("job.wait()")
    final = kernel.eval("job.view.shown")
    assert WIDGET_MIME not in final and "step 4 on rank 1" in final["text/plain"]
    assert kernel.eval("job.view.root.comm is None")  # the widget is closed: the static form remains


def test_a_failed_launch_keeps_what_ran_and_the_rank_traceback(kernel):
    kernel.ok(
        dedent("""
        def second_rank_fails():
            import torch.distributed as dist
            dist.init_process_group("gloo")
            print("before the failure on rank", os.environ["RANK"], flush=True)
            dist.barrier()  # rank 0 has printed: rank 1's failure would otherwise stop it first on a loaded machine
            if os.environ["RANK"] == "1":
                raise KeyError("label_column")
            threading.Event().wait()
        job = launch(second_rank_fails, num_processes=2, display="widget")
        try:
            job.wait()
        except KeyError:
            pass
        final = job.view.static
    """)
    )
    plain, page = kernel.eval("final['text/plain']"), kernel.eval("final['text/html']")
    assert "[rank 1] before the failure on rank 1" in plain and "[rank 0] before the failure on rank 0" in plain
    assert "rank 1: failed" in page and "rank 0: stopped" in page
    assert "failed after" in page and "rank 1 raised KeyError" in page
    # the cell raised the failure, with its traceback: the static form does not show it a second time
    assert "label_column" not in plain and "label_column" not in page and 'class="nl-traceback"' not in page


def test_a_background_launch_that_fails_keeps_the_rank_traceback(kernel):
    kernel.ok(
        dedent("""
        def fails_alone():
            raise KeyError("label_column")
        job = launch(fails_alone, num_processes=1, display="widget")
        deadline = time.monotonic() + 60
        while "raised KeyError" not in job.view.static["text/plain"] and time.monotonic() < deadline:
            time.sleep(0.02)   # nobody waits: it ends in the background, and the view's last form says so
        final = job.view.static
    """)
    )
    plain, page = kernel.eval("final['text/plain']"), kernel.eval("final['text/html']")
    assert "Cell In[" in plain and 'raise KeyError("label_column")' in plain
    assert 'class="nl-traceback"' in page and "rank 0 raised KeyError" in page
    assert plain.count("label_column") == 2  # the line that raised, and the message: once


def test_an_interrupted_launch_keeps_what_ran(kernel):
    kernel.ok(
        dedent("""
        def prints_then_blocks():
            print("got this far on rank", os.environ["RANK"], flush=True)
            threading.Event().wait()
    """)
    )
    msg_id = kernel.submit("notebook_launcher(prints_then_blocks, num_processes=2, display='widget')")

    def both_ranks_shown(result):
        return any(
            "got this far on rank 0" in bundle.get("text/plain", "")
            and "got this far on rank 1" in bundle.get("text/plain", "")
            for bundle in _bundles(result)
        )

    seen = kernel.collect(msg_id, timeout=60, until=both_ranks_shown)  # the static form beside the widget
    kernel.interrupt()
    rest = kernel.collect(msg_id, timeout=30)
    assert rest.error["ename"] == "KeyboardInterrupt"
    final = (_bundles(seen) + _bundles(rest))[-1]
    assert WIDGET_MIME not in final
    assert "[rank 0] got this far on rank 0" in final["text/plain"] and "stopped after" in final["text/plain"]


def test_the_static_form_caps_each_rank_and_says_where_the_rest_is(kernel):
    kernel.ok("def many_lines():\n    for i in range(2300):\n        print(f'line {i}')")
    kernel.ok("job = launch(many_lines, num_processes=1, display='widget'); job.wait(); final = job.view.static")
    plain = kernel.eval("final['text/plain']")
    assert "… 300 earlier lines of rank 0 not shown" in plain and "last_launch().logs(0)" in plain
    assert "[rank 0] line 299\n" not in plain and "[rank 0] line 300\n" in plain and "[rank 0] line 2299" in plain
    assert kernel.eval("len(job.lines(0))") == 2300


def test_a_chatty_rank_is_throttled_and_bounded(kernel, tmp_path):
    kernel.ok(gate_code(tmp_path))
    kernel.ok(
        dedent("""
        def very_chatty():
            for i in range(20000):
                print(f"line {i}")
            wait_at_gate()
        t0 = time.monotonic()
        job = launch(very_chatty, num_processes=1, display="widget")
    """)
    )
    kernel.ok("while not job.view.built or len(job.lines(0)) < 20000: job.join(0.02)")
    open_gates(tmp_path, [0])
    kernel.ok("job.wait(); seconds = time.monotonic() - t0")
    seconds = kernel.eval("seconds")
    assert kernel.eval("job.view.renders") <= 10 * seconds + 5
    assert kernel.eval("len(job.lines(0))") == 20000
    assert kernel.eval("(job.view.boxes[0].lines_shown, job.view.boxes[0].hidden)") == (2000, 18000)


def test_auto_display_is_the_widget_in_a_kernel(kernel):
    kernel.ok(
        "from notebook_launcher.frontend.views import select_view\nsaved = os.environ.pop('NOTEBOOK_LAUNCHER_DISPLAY')"
    )
    try:
        assert kernel.eval("type(select_view('auto')).__name__") == "WidgetView"
    finally:
        kernel.ok("os.environ['NOTEBOOK_LAUNCHER_DISPLAY'] = saved")
    assert kernel.eval("type(select_view('auto')).__name__") == "TextView"


def test_tqdm_auto_in_a_rank_becomes_one_live_text_line(kernel):
    """tqdm.auto is imported in the kernel (where it picks the notebook widget bar) before forking."""
    kernel.ok(
        dedent("""
        from tqdm.auto import tqdm
        def with_progress():
            total = 0
            for i in tqdm(range(200), desc="epoch"):
                total += i
            return total
        job = launch(with_progress, num_processes=2, display="widget")
        value = job.wait()
    """)
    )
    assert kernel.eval("value") == sum(range(200))
    lines = kernel.eval("[(l.stream, l.text) for l in job.lines(0)]")
    assert len(lines) == 1
    stream, text = lines[0]
    assert stream == "stderr" and text.startswith("epoch: 100%") and "200/200" in text and "\r" not in text
    assert "epoch: 100%" in kernel.eval("job.view.static['text/html']")


NESTED_BARS = dedent("""
    def nested_bars():
        from tqdm import tqdm
        for epoch in tqdm(range(3), desc="epochs", position=0, mininterval=0):
            for step in tqdm(range(20), desc="steps", position=1, leave=False, mininterval=0):
                pass
        return epoch
""")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_nested_tqdm_bars_in_a_rank_redraw_in_place(kernel, method):
    """tqdm's nested bars move the cursor up to redraw the outer bar: the log keeps what a terminal
    would show at the end (the outer bar's last frame; the inner bars erased themselves), not one
    line per inner update."""
    kernel.ok(NESTED_BARS)
    kernel.ok(f"job = launch(nested_bars, num_processes=2, start_method={method!r}, display='widget'); job.wait()")
    assert kernel.eval("job.results") == [2, 2]
    for rank in (0, 1):
        texts = kernel.eval(f"[line.text for line in job.lines({rank})]")
        assert len(texts) == 1 and texts[0].startswith("epochs: 100%") and "3/3" in texts[0], texts
    page = kernel.eval("job.view.static['text/html']")
    assert "steps:" not in page and "epochs:   0%" not in page and "\\x1b" not in page
    assert "epochs: 100%" in page


def test_tqdm_auto_imported_only_inside_the_rank_works_in_a_fresh_kernel():
    """The rank looks like a script, so tqdm.auto picks its text bar there (the kernel never imported tqdm)."""
    session = KernelSession()
    try:
        session.ok("from notebook_launcher import notebook_launcher, last_launch")
        session.ok(
            dedent("""
            def with_auto_bar():
                from tqdm.auto import tqdm
                return sum(tqdm(range(50), desc="fresh"))
        """)
        )
        assert session.eval("notebook_launcher(with_auto_bar, num_processes=2)") == sum(range(50))
        loaded = session.eval(
            "[m for m in ('tqdm.auto', 'tqdm.autonotebook', 'tqdm.notebook') if m in __import__('sys').modules]"
        )
        assert loaded == []  # the rank imported tqdm.auto itself
        assert session.eval("last_launch().logs(0)").startswith("fresh: 100%")
    finally:
        session.shutdown()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_rich_displays_inside_a_rank_render_and_updates_replace_them(kernel, method):
    """A spawned rank has no IPython shell: its display() is the launcher's, and behaves the same."""
    result = kernel.run(
        dedent("""
        def shows_things():
            from IPython.display import display, HTML
            display({"answer": 42}, raw=False)
            progress = display(HTML("<b>step 1 of 3</b>"), display_id=True)
            progress.update(HTML("<b>step 3 of 3</b>"))
            import ipywidgets
            display(ipywidgets.IntSlider())
        job = launch(shows_things, num_processes=1, display="widget", start_method=METHOD)
        job.wait()
    """).replace("METHOD", repr(method))
    )
    refused = "widgets cannot be shown from inside a launched rank"
    lines = kernel.eval("[line.text for line in job.lines(0)]")
    if method == "fork":  # the kernel's comm machinery, copied: opening a comm is refused at once
        assert result.error["ename"] == "RuntimeError" and refused in result.error["evalue"]
        assert lines == ["{'answer': 42}\n", "step 3 of 3\n"]
    else:  # no kernel to reach: the widget is made, and showing it says why it cannot be
        assert result.error is None
        assert lines[:2] == ["{'answer': 42}\n", "step 3 of 3\n"] and refused in lines[2]
    page = kernel.eval("job.view.static['text/html']")
    log = page.split('<div class="nl-static-log"', 1)[1].split("</details>", 1)[0]  # rank 0's log
    assert "<b>step 3 of 3</b>" in log and "step 1 of 3" not in log  # the update replaced the display
    assert kernel.ok("print('kernel still fine')").stdout == "kernel still fine\n"


def test_nothing_a_forked_rank_does_goes_out_through_the_kernels_connection(kernel):
    """A forked rank holds copies of the kernel's widgets, streams and connection, and ipykernel
    forwards what a forked process sends: a widget it changed moved the notebook's slider (not the
    kernel's), a print to a kept kernel stream reached the cell, and ``input()`` asked the notebook
    for an answer that never reaches the rank. The first is refused with what to do instead, the
    print lands in the rank's log, ``input()`` raises ``EOFError``; the kernel goes on."""
    kernel.ok(
        dedent("""
        import ipywidgets
        slider = ipywidgets.IntSlider(value=1)
        def moves_the_slider():
            slider.value = 10 + int(os.environ["RANK"])
        def asks():
            answers = []
            for ask in (lambda: input("name? "), lambda: __import__("getpass").getpass()):
                try:
                    ask()
                except EOFError as err:
                    answers.append(str(err))
            return answers
    """)
    )
    comm_id = kernel.eval("slider.comm.comm_id")
    moved = kernel.run("notebook_launcher(moves_the_slider, num_processes=2)")
    refused = "a widget made in the kernel cannot be changed or closed from inside a launched rank"
    assert moved.error["ename"] == "RuntimeError" and refused in moved.error["evalue"]
    assert kernel.eval("slider.value") == 1
    sent = [msg for msg in kernel._comm_stash if msg["content"].get("comm_id") == comm_id]
    assert [msg["msg_type"] for msg in sent] == ["comm_open"]  # the kernel's own; nothing from a rank

    kernel.ok("kept_stdout = sys.stdout")  # the kernel's own stream, kept from a cell
    printed = kernel.ok(
        dedent("""
        def prints_to_the_kernels_stream():
            print("through the kept stream", file=kept_stdout, flush=True)
        job = launch(prints_to_the_kernels_stream, num_processes=2, display="none")
        job.wait()
    """)
    )
    assert "through the kept stream" not in printed.stdout  # not sent to the notebook from the rank
    assert kernel.eval("[line.text for line in job.lines(1)]") == ["through the kept stream\n"]
    ran = kernel.ok(
        dedent("""
        def runs_cells():
            shell = get_ipython()
            return type(shell.run_cell("6 * 7").error_in_exec), type(shell.run_cell("1 / 0").error_in_exec)
        job = launch(runs_cells, num_processes=1, display="none")
        errors = job.wait()
    """)
    )
    assert "42" not in ran.stdout and "ZeroDivisionError" not in ran.stdout + ran.stderr
    assert kernel.eval("errors[0] is type(None) and errors[1] is ZeroDivisionError")
    log = kernel.eval("job.logs(0)")
    assert log.startswith("42\n") and "ZeroDivisionError" in log  # as a script would print them

    answers = kernel.eval("notebook_launcher(asks, num_processes=2)")
    assert len(answers) == 2 and all("there is nothing to read inside a launched rank" in text for text in answers)
    kernel.ok("slider.value = 3")  # the kernel's widget still talks to the notebook
    assert any(
        msg["msg_type"] == "comm_msg" and msg["content"]["data"].get("state") == {"value": 3}
        for msg in kernel._comm_stash
        if msg["content"].get("comm_id") == comm_id
    )


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("show", ["plt.show()", "display(plt.gcf())"])
def test_a_ranks_matplotlib_figure_shows_as_a_png_though_the_kernel_never_imported_pyplot(kernel, method, show):
    """The kernel's inline backend (ipykernel's MPLBACKEND) reaches the rank; it configures the
    rank's shell (fork) or none (spawn), and plt.show() or display(figure) gives the rank's tab a
    PNG either way: base64 text, as a notebook holds it (a spawned rank's was the repr of bytes)."""
    assert kernel.eval("'matplotlib.pyplot' in __import__('sys').modules") is False
    kernel.ok(
        dedent("""
        def plots():
            import matplotlib.pyplot as plt
            from IPython.display import display
            plt.plot([3, 1, 2])
            SHOW
            return "plotted"
        job = launch(plots, num_processes=1, display="widget", start_method=METHOD)
        value = job.wait()
        shown = [line.bundle for line in job.lines(0) if line.bundle is not None]
    """)
        .replace("METHOD", repr(method))
        .replace("SHOW", show)
    )
    assert kernel.eval("value") == "plotted"
    assert kernel.eval("[sorted(bundle) for bundle in shown]") == [["image/png", "text/plain"]]
    assert kernel.eval("__import__('base64').b64decode(shown[0]['image/png'])[:4]") == b"\x89PNG"
    assert '<img src="data:image/png;base64,iVBORw0KGgo' in kernel.eval("job.view.static['text/html']")
    assert kernel.eval("'matplotlib.pyplot' in __import__('sys').modules") is False


def test_a_ranks_prints_and_displays_keep_the_order_it_made_them_in(kernel):
    """Output and displays travel on different pipes; each rank's log still has them in its order."""
    kernel.ok(
        dedent("""
        def mixed():
            from IPython.display import HTML, display
            for i in range(30):
                print("printed", i)
                display(HTML(f"<b>shown {i}</b>"))
        expected = [x for i in range(30) for x in (f"printed {i}", f"<b>shown {i}</b>")]
        out_of_order = []
        for _ in range(4):
            job = launch(mixed, num_processes=2, display="none")
            job.wait()
            for rank in (0, 1):
                lines = job.lines(rank)
                made = [line.text.strip() if line.bundle is None else line.bundle["text/html"] for line in lines]
                if made != expected:
                    out_of_order.append(made)
    """)
    )
    assert kernel.eval("out_of_order") == []


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_clear_output_display_print_loop_keeps_each_display_in_its_place(kernel, method):
    """The live-plot loop of many notebooks (``clear_output(wait=True)``, ``display(fig)``,
    ``print``), and a display below a row drawn with ``\\r``. Before, a spawned rank (no shell:
    IPython's ``clear_output`` writes erase codes and a carriage return) put each display one place
    early (6 of 6 runs): the printed line, marked as redrawn, was held until the next display came."""
    kernel.ok(
        dedent("""
        def live_plot():
            import sys
            from IPython.display import HTML, clear_output, display
            for i in range(4):
                clear_output(wait=True)
                display(HTML(f"<b>figure {i}</b>"))
                print(f"step {i}")
            print("drawn 1/2", end="\\r", file=sys.stderr)
            display(HTML("<b>below the bar</b>"))
        """)
    )
    kernel.ok(f"job = launch(live_plot, num_processes=1, display='none', start_method={method!r}); job.wait()")
    made = kernel.eval(
        "[line.text.strip() if line.bundle is None else line.bundle['text/html'] for line in job.lines(0)]"
    )
    expected = [x for i in range(4) for x in (f"<b>figure {i}</b>", f"step {i}")]
    assert made == [*expected, "drawn 1/2", "<b>below the bar</b>"]


def test_the_stacks_action_shows_where_each_rank_is_in_the_widget_and_the_saved_form(kernel, tmp_path):
    """What the "Stacks" button runs (``take_stacks``), on a background launch whose ranks wait."""
    kernel.ok(gate_code(tmp_path))
    kernel.ok("def parked_at_gate():\n    wait_at_gate()")
    kernel.ok("job = launch(parked_at_gate, num_processes=2, display='widget')")
    kernel.ok("while not job.view.built or job.rank_status(1) != 'running': job.join(0.02)")
    assert kernel.eval("[b.description for b in job.view.actions.children[:4]]") == [
        "Stacks",
        "Save log",
        "Log as text",
        "Stop",
    ]
    kernel.ok("job.view.take_stacks()")
    kernel.ok("while 'parked_at_gate' not in job.view.static['text/plain']: job.join(0.02)", timeout=30)
    static = kernel.eval("job.view.static['text/plain']")
    assert "where the ranks were at " in static and "in parked_at_gate" in static and "wait_at_gate()" in static
    # the widget draws them at its next render (the static form is made first)
    kernel.ok("while 'parked_at_gate' not in job.view.stacks_box.value: job.join(0.02)", timeout=30)
    assert "parked_at_gate" in kernel.eval("job.view.stacks_box.value")
    open_gates(tmp_path, [0, 1])
    kernel.ok("job.wait()")
    final = kernel.eval("job.view.static['text/html']")
    assert '<details class="nl-stacks"><summary>where the ranks were at ' in final  # kept, folded


def test_eight_ranks_finish_about_as_tall_as_they_ran(kernel):
    """The finished form of many ranks keeps one capped log of all of them, each rank's folded."""
    kernel.ok(
        dedent("""
        def talks():
            for i in range(30):
                print(f"line {i} of rank", os.environ["RANK"])
        job = launch(talks, num_processes=8, display="widget")
        job.wait()
        page = job.view.static["text/html"]
    """)
    )
    page = kernel.eval("page")
    assert page.count('<details class="nl-ranklog" open>') == 1 and "all ranks · 240 lines" in page
    assert page.count('<details class="nl-ranklog">') == 8  # folded
    assert "[rank 7]" in page and "line 29 of rank 7" in page


CHORUS = dedent("""
    def chorus():
        import torch.distributed as dist
        dist.init_process_group("gloo")
        dist.barrier()
        print("epoch 1 done")
        print(f"rank {dist.get_rank()} has its own line")
        wait_at_gate()
""")


@pytest.mark.parametrize("collapse", ["on", "off"])
def test_all_ranks_shows_a_line_every_rank_said_once_and_each_rank_keeps_its_own(kernel, tmp_path, collapse):
    """ "[ranks 0–3] epoch 1 done" once in "all ranks", live and in the finished form; each rank's tab
    and log, ``logs(rank)`` and the finished form's text keep the line;
    NOTEBOOK_LAUNCHER_COLLAPSE_LINES=off shows every rank's."""
    kernel.ok(gate_code(tmp_path))
    kernel.ok(CHORUS)
    kernel.ok(f"os.environ['NOTEBOOK_LAUNCHER_COLLAPSE_LINES'] = {collapse!r}")
    try:
        kernel.ok("job = launch(chorus, num_processes=4, display='widget')")
        kernel.ok("while not job.view.built or sum(job.line_count(r) for r in range(4)) < 8: job.join(0.02)")
        kernel.ok("job.view.render()")
        every = kernel.eval("''.join(w.value for w in job.view.all_box.inner.children)")
        rank2 = kernel.eval("''.join(w.value for w in job.view.boxes[2].inner.children)")
        open_gates(tmp_path, range(4))
        final, page = kernel.eval(
            "job.wait(timeout=120) or (job.view.static['text/plain'], job.view.static['text/html'])"
        )
    finally:
        kernel.ok("del os.environ['NOTEBOOK_LAUNCHER_COLLAPSE_LINES']")
    if collapse == "on":  # live, and in the finished form's log of all ranks (its per-rank logs keep it)
        assert every.count("epoch 1 done") == 1 and ">[ranks 0–3]</span> epoch 1 done" in every
        assert page.count(">[ranks 0–3]</span> epoch 1 done") == 1
    else:
        assert every.count("epoch 1 done") == 4 and "[ranks 0–3]" not in every and "[ranks 0–3]" not in page
    said = [line for line in final.splitlines() if line.endswith("epoch 1 done")]  # the text keeps every line
    assert sorted(said) == [f"[rank {rank}] epoch 1 done" for rank in range(4)]
    assert "epoch 1 done" in rank2 and "rank 2 has its own line" in rank2
    assert "epoch 1 done\nrank 0 has its own line\n" in kernel.eval("job.logs(0)")  # older torch: gloo's lines too
    assert "[rank 3] rank 3 has its own line" in final


def test_the_live_charts_smoothing_and_x_axis_are_the_readers_and_the_pointer_reads_values(kernel, tmp_path):
    kernel.ok(gate_code(tmp_path))
    kernel.ok(
        dedent("""
        def logs_then_waits():
            from trainer_core import Accelerator
            accelerator = Accelerator()
            for step in range(30):
                accelerator.log({"loss": 1.0 / (step + 1) + accelerator.process_index}, step=step)
            print("logged")
            wait_at_gate()
    """)
    )
    kernel.ok("job = launch(logs_then_waits, num_processes=2, display='widget')")
    kernel.ok("while not job.view.built or len(job.metrics) < 60 or job.line_count(1) < 1: job.join(0.02)")
    kernel.ok("job.view.render()")
    chart = _chart(kernel.eval("job.view.metrics_box.value"), "loss")
    assert "nl-smoothed" in chart and "by second" not in chart  # 0.6 and steps by default
    assert "<title>step 15\\nrank 0: 0.0625\\nrank 1: 1.06\\nmean: 0.562</title>" in chart.replace("\n", "\\n")
    assert "outliers clipped" not in chart
    kernel.ok("job.view.chart_controls.smoothing_choice.value = 0.0; job.view.chart_controls.axis.value = 'time'")
    kernel.ok("job.view.render()")
    chart = kernel.eval("job.view.metrics_box.value")
    assert "nl-smoothed" not in chart and "loss</b> · by second" in chart and "<title>second " in chart
    kernel.ok("job.view.chart_controls.clip_box.value = True; job.view.render()")
    assert "outliers clipped" in kernel.eval("job.view.metrics_box.value")
    open_gates(tmp_path, [0, 1])
    final = kernel.eval("job.wait(timeout=60) or job.view.static['text/html']")
    assert 'data-key="loss"' in final and "nl-readout" not in final  # the saved form: an image, no pointer


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_finished_tqdm_bar_shows_above_the_line_printed_after_it_while_the_launch_runs(kernel, tmp_path, method):
    """tqdm's last frame, and a row ended by ``\\r`` alone, come before the print that follows them in
    the live widget (the rank's tab and "all ranks"), with no open row left drawn below that print:
    a person in the browser once saw the finished bar under the line printed after it."""
    kernel.ok("import os, sys\n" + gate_code(tmp_path))
    kernel.ok(
        dedent(r"""
        from tqdm.auto import tqdm
        def bar_then_print():
            print("before")
            for _ in tqdm(range(30), desc="epoch", mininterval=0):
                pass
            print("after the bar", flush=True)
            print("bar 1/2", end="\r", file=sys.stderr, flush=True)
            print("after the open row", flush=True)
            wait_at_gate()
    """)
    )
    kernel.ok(f"job = launch(bar_then_print, num_processes=2, start_method={method!r}, display='widget')")
    texts = ("before", "epoch: 100%", "after the bar", "bar 1/2", "after the open row")
    try:
        kernel.ok("while not job.view.built or job.line_count(1) < 5: job.join(0.02)")
        for box in ("job.view.boxes[1]", "job.view.all_box"):
            # the launcher's thread renders too: wait (bounded) until the box shows every line
            shown_code = f"''.join(view.value for view in {box}._views)"
            kernel.ok(
                f"deadline = time.monotonic() + 30\n"
                f"while not all(t in {shown_code} for t in {texts!r}) and time.monotonic() < deadline:\n"
                f"    job.view.render(); job.join(0.02)"
            )
            shown = kernel.eval(shown_code)
            order = [shown.find(text) for text in texts]
            assert -1 not in order and order == sorted(order), (box, shown)
            assert kernel.eval(f"{box}.live_html") == "", box  # nothing left open below the prints
    finally:
        open_gates(tmp_path, [0, 1])
        kernel.ok("job.wait(timeout=60)")
