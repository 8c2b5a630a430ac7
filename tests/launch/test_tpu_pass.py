"""The TPU pass (bench/tpu/pass.py, ``make tpu-pass``) runs dry here on 2 CPU ranks, as a lent TPU
machine would run it on its chips: the same training launch, checks and report, under the same
containment (bench/gpu/contained.py), so a broken pass fails here, not on the TPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def test_the_tpu_pass_runs_dry_on_cpu_ranks_and_reports_every_check(tmp_path):
    report = tmp_path / "report"
    done = subprocess.run(
        [
            sys.executable,
            "bench/gpu/contained.py",
            str(tmp_path / "leftover.txt"),
            "--",
            sys.executable,
            "bench/tpu/pass.py",
            str(report),
        ],
        cwd=REPO,
        env={**os.environ, "TPU_PASS_DEVICE": "cpu"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((report / "report.json").read_text())
    assert result["passed"] and result["error"] is None
    assert [name for name, ok, _ in result["checks"] if ok] == [
        "every rank returned",
        "the loss fell",
        "gather saw every rank's batch",
        "load_state brought the saved weights back",
        "each rank on its own device",
    ]
    assert result["facts"]["device"] == "cpu" and "torch_tpu" in result["facts"]
    assert "**passed**" in (report / "report.md").read_text()
    assert not (tmp_path / "leftover.txt").exists() or not (tmp_path / "leftover.txt").read_text().strip()
