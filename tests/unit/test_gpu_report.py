"""The GPU pass's report and kit check, from files such a pass leaves (no processes, no GPU)."""

from __future__ import annotations

import importlib.util
import json

from paths import REPO


def _load(name):
    """A module of bench/gpu, loaded from its file (its folder on sys.path would shadow others)."""
    path = REPO / "bench" / "gpu" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kit_check = _load("kit_check")
report = _load("report")

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_gpu" name="test_forks" time="1.5"/>
<testcase classname="tests.test_gpu_training" name="test_bf16" time="0.9">
  <failure message="assert 1.16 &lt; 1.12">trace</failure></testcase>
<testcase classname="tests.test_gpu_training" name="test_fsdp2" time="0.0">
  <skipped message="sharding over GPUs needs two"/></testcase>
</testsuite></testsuites>"""


def test_the_report_says_what_ran_what_failed_and_what_was_left(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    (work / "stages.tsv").write_text("kit\t0\t3000\t60\ngpu-tests\t1\t98100\t200\nbench-step\t124\t120000\t120\n")
    facts = {"python": "3.12.3", "cpus": 16, "torch_cuda": "13.0", "nccl": "2.28.9", "packages": {"torch": "2.11"}}
    facts["gpus"] = [{"name": "NVIDIA H100 80GB HBM3", "memory.total": "81559", "compute_cap": "9.0"}]
    (work / "environment.log").write_text("a warning first\n" + json.dumps(facts) + "\n")
    (work / "notebook.log").write_text("noise\n\ndigits test accuracy after 2 epochs on 1 processes: 0.945\n")
    (work / "bench-step.log").write_text("warning\n\nTraining step, a table\nno   1.000x  met\n")
    (work / "leftover.txt").write_text("4242 python -m ipykernel_launcher\n")
    (out / "junit.xml").write_text(JUNIT)

    built = report.build(work, out)
    text = report.markdown(built)
    assert built["counts"] == {"passed": 1, "failed": 1, "error": 0, "skipped": 1}
    assert "NVIDIA H100 80GB HBM3 (81559 MiB, sm 9.0)" in text
    assert "| gpu-tests | 1 | 98.1 | 200 |" in text and "| bench-step | 124 | 120.0 | 120 |" in text
    assert "- failed: `test_gpu_training::test_bf16` (0.9 s): assert 1.16 < 1.12" in text
    assert "- skipped: `test_gpu_training::test_fsdp2` (0.0 s): sharding over GPUs needs two" in text
    assert "accuracy after 2 epochs on 1 processes: 0.945" in text
    assert "Training step, a table\nno   1.000x  met" in text and "warning" not in built["step_table"]
    assert "- `4242 python -m ipykernel_launcher`" in text


def _wheel(kit, name):
    (kit / name).write_bytes(b"wheel")


def test_the_kit_check_names_a_missing_an_extra_and_a_wrong_wheel(tmp_path):
    pins = tmp_path / "kit.txt"
    pins.write_text("# comment\nipykernel==7.4.0\npyzmq==27.3.0  # a binary one\n")
    kit = tmp_path / "kit"
    kit.mkdir()
    for name in ("ipykernel-7.4.0-py3-none-any.whl", "deepspeed-0.19.8-py3-none-any.whl"):
        _wheel(kit, name)
    assert kit_check.problems(kit, pins) == ["no wheel for pyzmq"]
    _wheel(kit, "pyzmq-27.2.0-cp312-abi3-manylinux_2_28_x86_64.whl")
    _wheel(kit, "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert kit_check.problems(kit, pins) == [
        "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl would replace the device's own torch stack",
        "pyzmq is 27.2.0, pinned 27.3.0",
        f"torch is not in {pins}",
    ]
