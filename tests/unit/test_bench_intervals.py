"""The interval the benchmarks print beside their figures (``bench/intervals.py``)."""

import importlib.util
import random
from statistics import median

from paths import REPO

# loaded from its file: the bench folder on sys.path would put its modules (kernel, faults) before others
_PATH = REPO / "bench" / "intervals.py"
_SPEC = importlib.util.spec_from_file_location("bench_intervals", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
_intervals = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_intervals)
bootstrap_interval = _intervals.bootstrap_interval
verdict = _intervals.verdict


def test_identical_rounds_leave_no_doubt():
    assert bootstrap_interval([2.0] * 50, median) == (2.0, 2.0)


def test_the_interval_holds_the_figure_and_widens_with_the_noise():
    draw = random.Random(3)
    spread = [draw.gauss(0.0, 1.0) for _ in range(200)]
    steady = [10.0 + 0.1 * value for value in spread]
    noisy = [10.0 + 2.0 * value for value in spread]
    low, high = bootstrap_interval(steady, median)
    assert low <= median(steady) <= high
    noisy_low, noisy_high = bootstrap_interval(noisy, median)
    assert noisy_high - noisy_low > high - low


def test_a_report_is_the_same_on_every_run():
    rounds = [float(index * 7 % 13) for index in range(100)]
    assert bootstrap_interval(rounds, median) == bootstrap_interval(rounds, median)


def test_a_target_is_met_only_when_the_whole_interval_is_within_it():
    assert verdict((1.13, 1.19), 1.2) == "met"
    assert verdict((1.14, 1.2), 1.2) == "met"
    assert verdict((1.21, 1.3), 1.2) == "NOT met"
    assert verdict((1.15, 1.24), 1.2).startswith("not decided")
