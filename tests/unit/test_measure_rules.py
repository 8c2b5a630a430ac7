"""The built-in measures' rules alone: the pace meter on a fake clock, the straggler watch, and how
the charts draw what the kernel samples."""

from __future__ import annotations

import torch

from notebook_launcher.frontend.views.charts import metrics_html, series_by_key
from notebook_launcher.telemetry import Stragglers
from trainer_core.data import DataState
from trainer_core.throughput import SAMPLES, STEP_TIME, TOKENS, WORK_TIME, Throughput


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_pace_counts_steps_samples_and_its_own_work_and_reports_once_a_second():
    clock, shown = _Clock(), []
    meter = Throughput(lambda values, step: shown.append((step, values)), clock=clock)
    for _ in range(10):  # 10 steps of 0.25 s, 0.2 s of each waiting in backward()
        meter.batch((torch.zeros(8, 3), torch.zeros(8)))
        clock.now += 0.05
        with meter.syncing():
            clock.now += 0.2
        meter.stepped()
    assert [step for step, _ in shown] == [4, 8]  # the first step opens the window; a report a second
    figures = shown[-1][1]
    assert round(figures[STEP_TIME], 6) == 250.0 and round(figures[WORK_TIME], 6) == 50.0
    assert round(figures[SAMPLES], 6) == 32.0 and TOKENS not in figures  # float batches carry no token ids
    assert meter.figures()["samples"] == 80 and meter.figures()["tokens"] is None


def test_only_the_outermost_loader_counts_in_the_pace():
    """An evaluation loop inside the training loop does not inflate samples/s."""
    counted = []
    state = DataState(type("Meter", (), {"batch": lambda self, batch: counted.append(batch)})())
    state.begin("train")
    state.took("a training batch")
    state.begin("eval")
    state.took("an evaluation batch")
    state.end("eval")
    assert counted == ["a training batch"]


def test_a_rank_is_a_straggler_only_while_it_stays_slow_and_only_beside_others():
    watch = Stragglers()
    assert not any(watch.report(0, 500.0) for _ in range(5))  # alone: no one to lag behind
    for _ in range(2):
        watch.report(1, 100.0)
        watch.report(0, 500.0)
    assert watch.flagged == {}  # two slow reports are noise
    watch.report(1, 100.0)
    assert watch.report(0, 500.0) and list(watch.flagged) == [0]
    assert watch.report(0, 119.0) and watch.flagged == {}  # back under 1.2× the others: no longer


def test_what_the_kernel_samples_is_drawn_over_seconds_after_the_ranks_metrics():
    metrics = [{"rank": 0, "step": s, "values": {"loss": 1.0 / (s + 1)}} for s in range(3)]
    metrics += [{"rank": 0, "step": 0.5 * s, "x": "seconds", "values": {"CPU %": 90.0 + s}} for s in range(5000)]
    page = metrics_html(series_by_key(metrics))
    assert page.index('data-key="loss"') < page.index('data-key="CPU %"')
    assert "CPU %</b> · by second" in page and "loss</b> · by second" not in page
    cpu = page[page.index('data-key="CPU %"') :]
    points = cpu[cpu.index('points="') :].split('"')[1].split()
    assert len(points) <= 720  # two a pixel of a 360-pixel chart, however long the run


def test_the_kernel_samples_a_long_launch_less_often():
    """A day-long launch (or persistent workers) keeps a few thousand samples a rank, not 86,400."""
    from notebook_launcher.telemetry import SystemSampler

    clock = _Clock()
    sampler = SystemSampler(clock=clock)
    count = 0
    while clock.now < 86_400:
        clock.now = sampler.due()
        sampler.sample({})
        count += 1
    assert 4_000 < count < 7_000


class _FakeNvml:
    """NVML as the driver's library answers, for two devices (a stand-in: there is no GPU or NVIDIA
    driver here; the GPU pass reads the real one in tests/gpu)."""

    def __init__(self, processes=None, fail_init=False):
        from types import SimpleNamespace

        self._ns = SimpleNamespace
        self.processes = processes or {}
        self.fail_init = fail_init
        self.initialised = 0

    def nvmlInit(self):
        self.initialised += 1
        if self.fail_init:
            raise OSError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"gpu{index}"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return {"GPU-aaaa": "gpu0", "GPU-bbbb": "gpu1"}[uuid]

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [self._ns(pid=pid) for pid, owner in self.processes.items() if owner == handle]

    def nvmlDeviceGetUtilizationRates(self, handle):
        return self._ns(gpu={"gpu0": 97, "gpu1": 12}[handle])

    def nvmlDeviceGetMemoryInfo(self, handle):
        return self._ns(used={"gpu0": 30 * 2**30, "gpu1": 2**30}[handle])

    def nvmlDeviceGetPowerUsage(self, handle):
        return {"gpu0": 612_400, "gpu1": 70_000}[handle]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return {"gpu0": 0x1 | 0x20, "gpu1": 0x1}[handle]  # gpu0: idle flag and a thermal slowdown


def test_each_ranks_gpu_is_read_where_nvml_lists_its_process_else_by_its_visible_index():
    from notebook_launcher.telemetry.gpu import GpuSampler

    nvml = _FakeNvml(processes={200: "gpu0"})  # rank 1 (pid 200) holds a context on gpu0
    sample = GpuSampler(nvml, environ={}).sample({0: 100, 1: 200})
    assert sample[1] == {"GPU %": 97.0, "GPU memory MB": 30720.0, "GPU power W": 612.4, "GPU throttled": 1.0}
    assert sample[0]["GPU %"] == 97.0  # rank 0 has no context yet: local index 0, gpu0
    # CUDA_VISIBLE_DEVICES by UUID, reversed: local index 0 is gpu1, which is not throttled (idle is no slowdown)
    sample = GpuSampler(nvml, environ={"CUDA_VISIBLE_DEVICES": "GPU-bbbb,GPU-aaaa"}).sample({4: 100})
    assert sample == {4: {"GPU %": 12.0, "GPU memory MB": 1024.0, "GPU power W": 70.0, "GPU throttled": 0.0}}
    assert GpuSampler(nvml, environ={"CUDA_VISIBLE_DEVICES": "1"}).sample({0: 100, 1: 101}).keys() == {0}


def test_without_nvml_the_gpu_sampler_gives_nothing_and_stops_trying():
    from notebook_launcher.telemetry.gpu import GpuSampler

    nvml = _FakeNvml(fail_init=True)
    sampler = GpuSampler(nvml, environ={})
    assert sampler.sample({0: 100}) == {} and sampler.sample({0: 100}) == {}
    assert nvml.initialised == 1
    assert GpuSampler(environ={}).sample({0: 100}) == {}  # the real pynvml, on this machine with no driver
