"""What a launch measures of each rank by itself (no user code): the pace a rank's Accelerator
reports (step and work time, steps/s, samples/s, tokens/s), its CPU and memory read from the
kernel, and the straggler among the ranks, shown live, in the finished form and in ``Launch.metrics``."""

from __future__ import annotations

from textwrap import dedent

PACED = dedent("""
    import torch, torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset
    from trainer_core import Accelerator

    def paced(slow_rank, release, most_steps=5000):
        accelerator = Accelerator(cpu=True)
        ids = torch.randint(0, 50, (8 * most_steps, 16))  # most_steps batches of 4 on each of 2 ranks
        model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(), torch.nn.Linear(128, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        model, optimizer, data = accelerator.prepare(model, optimizer, DataLoader(TensorDataset(ids), batch_size=4))
        for (batch,) in data:
            if accelerator.process_index == slow_rank:
                time.sleep(0.03)  # its own work is slower: the other rank waits for it in backward()
            accelerator.backward(model(batch).float().pow(2).mean())
            optimizer.step()
            optimizer.zero_grad()
            done = torch.tensor([float(release is not None and os.path.exists(release))])
            dist.all_reduce(done, op=dist.ReduceOp.MAX)  # every rank stops at the same step
            if done.item():
                break
        return accelerator.throughput()
""")


def test_every_rank_is_measured_and_the_slow_one_is_named_live_and_at_the_end(kernel, tmp_path):
    release = tmp_path / "release"
    kernel.ok(PACED)
    kernel.ok(f"job = launch(paced, args=(1, {str(release)!r}), num_processes=2, display='widget')")
    kernel.ok("while 1 not in job.stragglers: job.join(0.05)", timeout=120)
    assert list(kernel.eval("job.stragglers")) == [1]
    kernel.ok("job.view.render()")
    header = kernel.eval("job.view.header.value")
    assert "rank 1: running · slow" in header and "rank 0: running · slow" not in header
    assert "rank 1 is slow: work time" in header and "× the median of the other ranks" in header
    release.touch()
    results = kernel.eval("job.wait(timeout=120) and job.results")
    for figures in results:
        assert figures["steps"] > 3 and figures["samples"] >= 4 * figures["steps"]
        assert figures["tokens"] == 16 * figures["samples"] and figures["tokens_per_second"] > 0
        assert 0 < figures["work_time"] <= figures["step_time"]
    assert results[1]["work_time"] > 1.2 * results[0]["work_time"]  # its sleep is its own work
    assert results[0]["step_time"] > 0.02  # the fast rank waited for it: alike step times

    keys = kernel.eval("sorted({(m['rank'], k, m.get('x', 'step')) for m in job.metrics for k in m['values']})")
    for rank in (0, 1):
        for key in ("step time ms", "work time ms", "steps/s", "samples/s", "tokens/s"):
            assert (rank, key, "step") in keys
        for key in ("CPU %", "RSS MB"):
            assert (rank, key, "seconds") in keys  # sampled by the kernel, drawn over seconds
    rss = kernel.eval("[m['values']['RSS MB'] for m in job.metrics if 'RSS MB' in m['values']]")
    assert all(50 < mb < 8000 for mb in rss)

    final = kernel.eval("job.view.static")
    assert "⚠ rank 1 is slow: work time" in final["text/plain"]
    page = final["text/html"]
    assert "rank 1: done · slow" in page and 'data-key="CPU %"' in page and 'data-key="work time ms"' in page
    assert "RSS MB</b> · by second" in page
    assert page.index('data-key="step time ms"') < page.index('data-key="CPU %"')  # the pace before the system


def test_the_measures_can_be_turned_off_and_the_function_still_reads_its_pace(kernel):
    kernel.ok(PACED)
    kernel.ok("os.environ['NOTEBOOK_LAUNCHER_MEASURES'] = 'off'")
    try:
        kernel.ok("job = launch(paced, args=(0, None, 80), num_processes=2, display='none')")  # 2.4 s or more
        results = kernel.eval("job.wait(timeout=120) and job.results")
        assert kernel.eval("job.metrics") == []
    finally:
        kernel.ok("del os.environ['NOTEBOOK_LAUNCHER_MEASURES']")
    assert [figures["steps"] for figures in results] == [80, 80]


MLP = dedent("""
    import torch, torch.distributed
    from trainer_core import Accelerator

    def mlp_mfu(until_reported, accumulate):
        accelerator = Accelerator(cpu=True, gradient_accumulation_steps=accumulate)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 32))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
        model, optimizer = accelerator.prepare(model, optimizer)
        batch = torch.randn(16, 64)
        for _ in range(200_000):
            with accelerator.accumulate(model):
                accelerator.backward(model(batch).pow(2).mean())
                optimizer.step()
                optimizer.zero_grad()
            reported = accelerator.throughput()["steps_per_second"] is not None or not until_reported
            done = torch.tensor([float(reported and accelerator.step >= 20)])
            torch.distributed.all_reduce(done, op=torch.distributed.ReduceOp.MIN)  # both ranks stop together
            if done.item():
                break
        return accelerator.throughput()
""")


def test_mfu_is_the_hand_counted_flops_over_the_peak_and_is_charted_per_rank(kernel):
    """MFU from the first step's counted FLOPs: a 64-256-32 MLP on 16 samples does 2·16·(64·256 +
    256·32) FLOPs forward, three times that a step (forward and backward), times the accumulated
    batches. A CPU has no peak in the table, so ``NOTEBOOK_LAUNCHER_PEAK_TFLOPS`` gives one."""
    forward = 2 * 16 * (64 * 256 + 256 * 32)
    kernel.ok(MLP)
    kernel.ok("os.environ['NOTEBOOK_LAUNCHER_PEAK_TFLOPS'] = '0.01'")
    try:
        kernel.ok("job = launch(mlp_mfu, args=(1, 2), num_processes=2, display='widget'); job.wait(timeout=120)")
    finally:
        kernel.ok("del os.environ['NOTEBOOK_LAUNCHER_PEAK_TFLOPS']")
    for figures in kernel.eval("job.results"):
        assert figures["flops_per_step"] == 3 * forward * 2  # two batches a step
        hand = figures["flops_per_step"] * figures["steps_per_second"] / 0.01e12
        assert abs(figures["mfu"] - hand) <= 0.1 * hand, figures
    charted = kernel.eval("[(r['rank'], r['values']['MFU %']) for r in job.metrics if 'MFU %' in r['values']]")
    assert {rank for rank, _ in charted} == {0, 1} and all(value > 0 for _, value in charted)
    final = kernel.eval("job.view.static['text/html']")
    assert 'data-key="MFU %"' in final and "mean" in final.split('data-key="MFU %"', 1)[1]  # per rank and their mean
    # no peak known (a CPU, no variable): nothing counted, nothing charted
    kernel.ok("job = launch(mlp_mfu, args=(1, 1), num_processes=2, display='text'); job.wait(timeout=120)")
    assert [figures["mfu"] for figures in kernel.eval("job.results")] == [None, None]
    assert not kernel.eval("[r for r in job.metrics if 'MFU %' in r['values']]")
