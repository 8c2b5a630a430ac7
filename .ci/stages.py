"""``make test``: every nox session of ``.ci/noxfile.py``, in stages; a stage's lanes run side by side.

On a 2-core machine the suite's time is CPU time, and some sessions leave much of it idle (measured
here, the CPU busy over a session run alone: main 92%, cluster 53%, browser 44%, check 56%, an XLA
session 54%). check runs beside the dry GPU pass and the docs site (mostly installs): the stage
takes about as long as check. The clusters beside the browsers did not pay: both took half as long
again as alone and a browser wait ran out (Ray's nodes and Chromium want the CPU at the same
moments), so main, the clusters, the browsers and each runtime (a CUDA build of torch on disk) have
a stage to themselves.

Each session is its own nox run, timed. The first lane of a stage is printed as it runs; the other
lanes' output is printed whole after it, under a header, so a log reads as one session's. A failed
session does not stop the others; the exit status is 1 when any failed, and a table of every
session, its lane, its result and its time ends the output.

Run: python .ci/stages.py            (``make test`` does, after building the environments)
     python .ci/stages.py --list     (the stages, without running them)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NOX = [str(REPO / ".venv-tools" / "bin" / "nox"), "-f", str(REPO / ".ci" / "noxfile.py")]

# A stage is a tuple of lanes; a lane is sessions run one after another.
STAGES: tuple[tuple[tuple[str, ...], ...], ...] = (
    (("check",), ("gpu_dry", "docs")),
    (("main",),),
    (("cluster",),),
    (("browser", "collaboration"),),
    (("kernel(runtime='colab')",),),
    (("kernel(runtime='kaggle')",),),
    (("xla(version='2.8')", "xla(version='2.9')"),),
)

# main keeps both cores busy; the clusters and the browsers crowd each other out (the docstring)
RUNS_ALONE = ("main", "cluster", "browser")
RUNTIMES = ("kernel(", "xla(")  # sessions holding a runtime's CUDA build of torch (gigabytes on disk)


@dataclass
class Outcome:
    """How one session ended."""

    session: str
    lane: str
    code: int
    seconds: float


def staged_sessions(stages=STAGES) -> list[str]:
    """Every session the stages name, in order.

    Examples:
        >>> staged_sessions(((("a",), ("b", "c")), (("d",),)))
        ['a', 'b', 'c', 'd']
    """
    return [session for stage in stages for lane in stage for session in lane]


def unstaged(listed: list[str], stages=STAGES) -> list[str]:
    """The sessions nox lists that no stage runs (a new session must be given a stage).

    Examples:
        >>> unstaged(["a", "b", "e"], ((("a",), ("b",)),))
        ['e']
    """
    named = set(staged_sessions(stages))
    return [session for session in listed if session not in named]


def crowded(stages=STAGES) -> list[str]:
    """The sessions that must have their stage to themselves but share it: main (both cores), the
    clusters and the browsers (each other's CPU), and the runtimes' sessions (their disk).

    Examples:
        >>> crowded(((("main",), ("docs",)), (("kernel(runtime='colab')",),), (("xla(version='2.8')", "a"), ("b",))))
        ['main', "xla(version='2.8')"]
    """
    shared = [session for stage in stages if len(stage) > 1 for lane in stage for session in lane]
    return [session for session in shared if session in RUNS_ALONE or session.startswith(RUNTIMES)]


def listed_sessions() -> list[str]:
    """The sessions of the noxfile, as ``nox --list --json`` names them."""
    out = subprocess.run([*NOX, "--list", "--json"], capture_output=True, text=True, check=True, cwd=REPO).stdout
    return [entry["session"] for entry in json.loads(out)]


def run_lane(lane: tuple[str, ...], live: bool, outcomes: list[Outcome], logs: dict[str, Path]) -> None:
    """Run ``lane``'s sessions one after another; output to this terminal when ``live``, else to a log."""
    label = " → ".join(lane)
    for session in lane:
        started = time.monotonic()
        if live:
            code = subprocess.run([*NOX, "-s", session], cwd=REPO).returncode
        else:
            log = logs.setdefault(session, Path(tempfile.mkstemp(prefix="nox-", suffix=".log")[1]))
            with log.open("w") as out:
                code = subprocess.run([*NOX, "-s", session], cwd=REPO, stdout=out, stderr=subprocess.STDOUT).returncode
        outcomes.append(Outcome(session, label, code, time.monotonic() - started))


def run_stage(stage: tuple[tuple[str, ...], ...], outcomes: list[Outcome]) -> None:
    """Run a stage's lanes side by side; print the buffered lanes' output once the live one ends."""
    logs: dict[str, Path] = {}
    others = [threading.Thread(target=run_lane, args=(lane, False, outcomes, logs), name=lane[0]) for lane in stage[1:]]
    for thread in others:
        thread.start()
    run_lane(stage[0], True, outcomes, logs)
    for thread in others:
        thread.join()
    for session, log in logs.items():
        print(f"\n===== {session} (ran beside {stage[0][0]}) =====", flush=True)
        sys.stdout.write(log.read_text(errors="replace"))
        sys.stdout.flush()
        log.unlink()


def table(outcomes: list[Outcome]) -> str:
    """The closing table: each session, its result and its time.

    Examples:
        >>> print(table([Outcome("check", "check", 0, 61.2), Outcome("docs", "gpu_dry → docs", 1, 5.0)]))
        session  lane            result  time
        check    check           passed  61 s
        docs     gpu_dry → docs  FAILED   5 s
    """
    rows = [("session", "lane", "result", "time")]
    rows += [(o.session, o.lane, "passed" if o.code == 0 else "FAILED", f"{o.seconds:.0f} s") for o in outcomes]
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    return "\n".join(
        "  ".join(
            [*(cell.ljust(width) for cell, width in zip(row[:3], widths[:3], strict=True)), row[3].rjust(widths[3])]
        )
        for row in rows
    )


def main(argv: list[str]) -> int:
    missing = unstaged(listed_sessions())
    if missing:
        print(f"stages.py: no stage runs {', '.join(missing)}: add it to STAGES", file=sys.stderr)
        return 2
    alone = crowded()
    if alone:
        print(f"stages.py: {', '.join(alone)} must have a stage to itself", file=sys.stderr)
        return 2
    if "--list" in argv:
        for number, stage in enumerate(STAGES, 1):
            print(f"stage {number}: " + "  ‖  ".join(" → ".join(lane) for lane in stage))
        return 0
    outcomes: list[Outcome] = []
    for stage in STAGES:
        run_stage(stage, outcomes)
    print("\n" + table(outcomes), flush=True)
    return 0 if all(outcome.code == 0 for outcome in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
