"""The GPU pass ends what its stages started and nothing else (no GPU needed: its stages run on CPUs).

Before, ``bench/gpu/pass.sh`` recorded every pid at its start and, at its end, ``kill -9``-ed every
new process whose command line named the checkout, ``ipykernel``, ``notebook_launcher`` or
``pytest``, whoever had started it: another user's pip install, a person's kernels, the guardians
of other kernels (which then failed the pass as "left running"). The stranger here is such a
process, started by this test (not by the pass) while the pass runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
from paths import REPO

CONTAINED = REPO / "bench" / "gpu" / "contained.py"


def _wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.05)  # a poll of a file another process writes, bounded by the deadline


def test_a_strangers_kernel_started_during_the_pass_survives_it_and_the_pass_passes(tmp_path):
    report = tmp_path / "report"
    env = {**os.environ, "GPU_PYTHON": sys.executable, "GPU_PASS_ONLY": "environment"}
    stranger = None
    passing = subprocess.Popen(
        ["bash", str(REPO / "bench" / "gpu" / "pass.sh"), str(report)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        log = report / "logs.txt"
        _wait_for(lambda: log.exists() and "===== environment" in log.read_text(), 60, "stage started")
        stranger = subprocess.Popen(  # what the old pass matched: the checkout, ipykernel, pytest
            [sys.executable, "-c", "import time; time.sleep(300)", "-m", "ipykernel_launcher", "pytest", str(REPO)]
        )
        output, _ = passing.communicate(timeout=240)
        assert passing.returncode == 0, output
        assert stranger.poll() is None, "the pass killed a process it did not start"
        assert "Left running after the pass: nothing" in (report / "report.md").read_text()
    finally:
        for process in (passing, stranger):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def test_a_stage_has_what_it_left_running_recorded_and_ended_and_its_exit_code_kept(tmp_path):
    """A stage whose processes outlive it (a background job, a daemon in a session of its own)."""
    leftover, pids = tmp_path / "leftover.txt", tmp_path / "pids"
    script = f"sleep 300 & echo $! > {pids}; (setsid sleep 301 & echo $! >> {pids}); exit 3"
    stranger = subprocess.Popen(["sleep", "302"])
    try:
        done = subprocess.run([sys.executable, str(CONTAINED), str(leftover), "--", "bash", "-c", script], timeout=60)
        assert done.returncode == 3
        started = [int(pid) for pid in pids.read_text().split()]
        assert len(started) == 2
        recorded = leftover.read_text()
        assert {int(line.split()[0]) for line in recorded.splitlines()} == set(started), recorded
        assert "sleep 30" in recorded  # each with its command line (setsid's, if caught before its exec)
        assert not [pid for pid in started if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
        assert stranger.poll() is None and str(stranger.pid) not in recorded
    finally:
        stranger.kill()
        stranger.wait()


def test_a_descendant_that_ends_by_itself_soon_after_its_stage_is_not_left_running(tmp_path):
    """A kernel's guardian tidies up (its ranks' cgroups, compile caches) for a moment after its
    kernel is gone, and under load that moment outlasted the stage: the dry pass then failed with
    the guardian "left running". A descendant that ends within ``SETTLE`` is not recorded."""
    leftover, pids = tmp_path / "leftover.txt", tmp_path / "pids"
    script = f"(setsid sleep 2 & echo $! > {pids}); exit 0"
    done = subprocess.run([sys.executable, str(CONTAINED), str(leftover), "--", "bash", "-c", script], timeout=60)
    assert done.returncode == 0
    assert pids.read_text().strip() and not (leftover.exists() and leftover.read_text())


def test_a_pass_within_a_budget_runs_what_fits_and_reports_the_rest_as_skipped(tmp_path):
    """A lent machine's time is counted: with ``GPU_PASS_BUDGET`` a stage gets at most what is left,
    one that would get under 20 s is not started but reported as skipped, and the pass then fails."""
    runs = {}
    for budget in ("200", "10"):
        report = tmp_path / budget
        env = {**os.environ, "GPU_PYTHON": sys.executable, "GPU_PASS_ONLY": "environment", "GPU_PASS_BUDGET": budget}
        done = subprocess.run(
            ["bash", str(REPO / "bench" / "gpu" / "pass.sh"), str(report)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        runs[budget] = (done.returncode, (report / "report.md").read_text())
    assert runs["200"][0] == 0 and "| environment | 0 |" in runs["200"][1], runs["200"]
    assert runs["10"][0] != 0 and "| environment | skipped |" in runs["10"][1], runs["10"]
