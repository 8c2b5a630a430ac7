"""The GPU pass's one report: report.md (for a person, or a session's note) and report.json in the
report folder, made from what the stages of bench/gpu/pass.sh left in its work folder (each
stage's log, stages.tsv, step.json, leftover.txt) and pytest's junit.xml in the report folder.

Standard library only: it runs with whatever python the pass ran.

Run: python bench/gpu/report.py WORK_DIR REPORT_DIR
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def stages(folder: Path) -> list[dict]:
    """Each stage's name, exit code ("skipped" where the pass's budget ran out first), seconds and
    limit (124/137: it ran past its limit)."""
    rows = []
    for line in (folder / "stages.tsv").read_text().splitlines():
        name, code, millis, limit = line.split("\t")
        exit_code = int(code) if code.lstrip("-").isdigit() else code
        rows.append({"stage": name, "exit": exit_code, "seconds": int(millis) / 1000, "limit": int(limit)})
    return rows


def tests(path: Path) -> list[dict]:
    """pytest's outcome of each GPU test (passed, failed, error, skipped with the reason)."""
    if not path.exists():
        return []
    found = []
    for case in ET.parse(path).iter("testcase"):
        outcome, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                detail = (node.get("message") or node.text or "").strip()
        found.append(
            {
                "test": f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}",
                "outcome": outcome,
                "seconds": float(case.get("time") or 0),
                "detail": detail[:2000],
            }
        )
    return found


def _log(folder: Path, stage: str) -> str:
    path = folder / f"{stage}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def environment(folder: Path) -> dict:
    for line in reversed(_log(folder, "environment").splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {}


def table(text: str) -> str:
    """A bench's printed table: its output from the first blank-line-led title on."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if not line.strip()]
    return "\n".join(lines[starts[0] + 1 :]).strip() if starts else text.strip()


def notebook(folder: Path, stage: str) -> str:
    lines = [line for line in _log(folder, stage).splitlines() if line.strip()]
    return "\n".join(lines[-12:])


def build(folder: Path, report_dir: Path) -> dict:
    step_path = folder / "step.json"
    found = tests(report_dir / "junit.xml")
    return {
        "environment": environment(folder),
        "stages": stages(folder),
        "tests": found,
        "counts": {kind: sum(t["outcome"] == kind for t in found) for kind in ("passed", "failed", "error", "skipped")},
        "notebook": notebook(folder, "notebook"),
        "quickstart": notebook(folder, "quickstart"),
        "launch_bench": table(_log(folder, "bench-launch")),
        "gpu_launch_bench": table(_log(folder, "bench-gpu-launch")),
        "step_bench": json.loads(step_path.read_text()) if step_path.exists() else None,
        "step_table": table(_log(folder, "bench-step")),
        "compile_table": table(_log(folder, "bench-compile")) if (folder / "bench-compile.log").exists() else "",
        "left_running": [line for line in (folder / "leftover.txt").read_text().splitlines() if line.strip()],
    }


def markdown(report: dict) -> str:
    env = report["environment"]
    gpus = ", ".join(f"{g['name']} ({g['memory.total']} MiB, sm {g['compute_cap']})" for g in env.get("gpus", []))
    out = [
        "# GPU pass",
        "",
        f"- Machine: {gpus or 'no GPU (a dry run: the GPU tests skip, the benches run on CPU ranks)'};"
        f" {env.get('cpus')} CPUs; Python {env.get('python')}",
        f"- A forked child's CUDA after the parent ran torch.cuda.is_available() without NVML:"
        f" {env.get('fork_after_is_available', 'not probed')}",
        f"- ... after the parent counted GPUs through NVML: {env.get('fork_after_nvml_count', 'not probed')}",
        f"- torch {env.get('packages', {}).get('torch')} (CUDA {env.get('torch_cuda')}, NCCL {env.get('nccl')});"
        + "".join(f" {k} {v};" for k, v in env.get("packages", {}).items() if k != "torch"),
        "",
        "| stage | exit | seconds | limit |",
        "|---|---|---|---|",
    ]
    out += [f"| {s['stage']} | {s['exit']} | {s['seconds']:.1f} | {s['limit']} |" for s in report["stages"]]
    counts = report["counts"]
    out += ["", f"## GPU tests: {', '.join(f'{v} {k}' for k, v in counts.items())}", ""]
    for t in report["tests"]:
        line = f"- {t['outcome']}: `{t['test']}` ({t['seconds']:.1f} s)"
        if t["outcome"] != "passed":
            line += f": {t['detail'].splitlines()[0] if t['detail'] else ''}"
        out.append(line)
    sections = (
        ("notebooks/mnist_gpu.ipynb (last lines)", "notebook"),
        ("notebooks/quickstart.ipynb (last lines)", "quickstart"),
        ("Launch bench (a no-op on 2 CPU ranks)", "launch_bench"),
        ("Launch bench (a first collective on the GPUs)", "gpu_launch_bench"),
        ("Step bench", "step_table"),
        ("torch.compile's first step (bench/compile_start.py)", "compile_table"),
    )
    for title, key in sections:  # a stage skipped or not run leaves no section
        if report[key]:
            out += ["", f"## {title}", "", "```", report[key], "```"]
    left = report["left_running"]
    out += ["", f"Left running after the pass: {'nothing' if not left else ''}"] + [f"- `{line}`" for line in left]
    return "\n".join(out) + "\n"


def main() -> None:
    work, folder = Path(sys.argv[1]), Path(sys.argv[2])
    report = build(work, folder)
    (folder / "report.json").write_text(json.dumps(report, indent=1))
    text = markdown(report)
    (folder / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
