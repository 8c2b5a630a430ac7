"""The live widget, checked from inside a real kernel: chips, per-rank logs, metric charts, throttling,
and notebook machinery (tqdm, display, widgets) used from inside a rank."""

from textwrap import dedent

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def test_widget_shows_status_logs_and_metrics(kernel):
    result = kernel.ok(
        dedent("""
        def chatty_training():
            from trainer_core import Accelerator
            accelerator = Accelerator()
            rank = accelerator.process_index
            for step in range(5):
                print(f"step {step} on rank {rank}")
                accelerator.log({"loss": 1.0 / (step + 1) + rank, "lr": 0.1})
            print("careful <now>", file=sys.stderr)
            return {"rank": rank}
        job = launch(chatty_training, num_processes=2, display="widget")
        job.wait()
        view = job._view
    """)
    )
    shown = [out for out in result.outputs if "display" in out]
    assert shown and WIDGET_MIME in shown[0]["display"]
    assert kernel.eval("view.statuses") == {0: "done", 1: "done"}
    for rank in (0, 1):
        log = kernel.eval(f"view.logs[{rank}].value")
        assert f"step 4 on rank {rank}" in log
        assert '<span class="nl-stderr"' in log and "careful &lt;now&gt;" in log
    assert kernel.eval("view.tabs.get_title(1)") == "rank 1"
    charts = kernel.eval("view.metrics_box.value")
    assert 'data-key="loss"' in charts and 'data-key="lr"' in charts
    assert charts.count('data-rank="0"') == 2 and charts.count('data-rank="1"') == 1  # lr is the same on both ranks
    assert "latest loss: rank 0: 0.2, rank 1: 1.2" in charts
    header = kernel.eval("view.header.value")
    assert "2 ranks · cpu · fork" in header and "rank 1: done" in header
    summary = kernel.eval("view.summary.value")
    assert "succeeded in" in summary and "rank 0 returned dict" in summary and "loss 0.2" in summary


def test_widget_selects_the_failing_rank_and_shows_its_traceback(kernel):
    kernel.ok(
        dedent("""
        def second_rank_fails():
            if os.environ["RANK"] == "1":
                raise KeyError("label_column")
            threading.Event().wait()
        job = launch(second_rank_fails, num_processes=2, display="widget")
        try:
            job.wait()
        except KeyError:
            pass
        view = job._view
    """)
    )
    assert kernel.eval("view.tabs.selected_index") == 1
    log = kernel.eval("view.logs[1].value")
    assert "Traceback (most recent call last)" in log and "raise KeyError(&quot;label_column&quot;)" in log
    assert kernel.eval("view.statuses") == {0: "stopped", 1: "failed"}
    assert "failed after" in kernel.eval("view.summary.value")


def test_a_chatty_rank_is_throttled_and_bounded(kernel):
    kernel.ok(
        dedent("""
        def very_chatty():
            for i in range(20000):
                print(f"line {i}")
        t0 = time.monotonic()
        job = launch(very_chatty, num_processes=1, display="widget")
        job.wait()
        seconds = time.monotonic() - t0
        view = job._view
    """)
    )
    seconds = kernel.eval("seconds")
    assert kernel.eval("view.renders") <= 10 * seconds + 5
    assert kernel.eval("len(job.lines(0))") == 20000
    log = kernel.eval("view.logs[0].value")
    assert "line 19999" in log and "line 19000" not in log and "19600 earlier lines" in log


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
    assert "epoch: 100%" in kernel.eval("job._view.logs[0].value")


def test_display_and_widgets_inside_a_rank_are_safe(kernel):
    result = kernel.run(
        dedent("""
        def shows_things():
            from IPython.display import display
            display({"answer": 42})
            import ipywidgets
            ipywidgets.IntSlider()
        launch(shows_things, num_processes=1).wait()
    """)
    )
    assert result.error["ename"] == "RuntimeError"
    assert "widgets cannot be shown from inside a launched rank" in result.error["evalue"]
    assert "[rank 0] {'answer': 42}" in result.stdout
    assert kernel.ok("print('kernel still fine')").stdout == "kernel still fine\n"
