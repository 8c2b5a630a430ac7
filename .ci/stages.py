"""``make test``: every nox session of ``.ci/noxfile.py``, in stages; a stage's lanes run side by side.

On a 2-core machine the suite's time is CPU time, and some sessions leave much of it idle (measured
here, the CPU busy over a session run alone: main 92%, cluster 87% on two workers, browser 44 to
50%, check 56%, a runtime's kernel tests 75%). A stage's first lane has the CPU first; its other
lanes run at the lowest priority (nice 19), so they take what it leaves idle and barely slow it.
The clusters beside the browsers at the same priority did not pay: both took half as long again as
alone and a browser wait ran out. So main, the clusters and the browsers each lead a stage of their
own (``crowded``): beside check run the dry GPU pass and the docs site (mostly installs) and
Colab's runtime (built, then its kernel tests), beside main the build of Kaggle's (nox's
``--install-only``: 24 s of two cores for one, downloads and unpacking), beside the browsers
Kaggle's kernel tests and then the XLA sessions. One runtime's environment (a CUDA build of torch,
4 to 10 GB) is on disk at a time (``misbuilt``): Kaggle's waits through the clusters' stage.

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

# A stage is a tuple of lanes; a lane is sessions run one after another. The first lane has the CPU
# first: the others run at the lowest priority (nice 19) and take what it leaves idle. "build:"
# before a runtime's session builds its environment only (nox --install-only), so that the session
# itself, later in its lane or in a later stage, only runs its tests.
BUILD = "build:"
STAGES: tuple[tuple[tuple[str, ...], ...], ...] = (
    (("check",), ("gpu_dry", "docs"), ("build:kernel(runtime='colab')", "kernel(runtime='colab')")),
    (("main",), ("build:kernel(runtime='kaggle')",)),
    (("cluster",),),
    (("browser", "collaboration"), ("kernel(runtime='kaggle')", "xla(version='2.8')", "xla(version='2.9')")),
)

# sessions that lead their stage, one a stage: main keeps both cores busy, the clusters nearly (87%
# on two workers), and the browsers' waits ran out with the clusters beside them at the same priority
LEADS = ("main", "cluster", "browser")
RUNTIMES = ("kernel(", "xla(")  # sessions holding a runtime's CUDA build of torch (gigabytes on disk)
NICE = ("nice", "-n", "19")  # what runs a stage's other lanes


def runtime_of(entry: str) -> str | None:
    """The runtime whose environment a lane's entry builds or uses (the XLA sessions share theirs), or None.

    Examples:
        >>> runtime_of("build:xla(version='2.9')"), runtime_of("kernel(runtime='colab')"), runtime_of("main")
        ('xla', "kernel(runtime='colab')", None)
    """
    session = entry.removeprefix(BUILD)
    if session.startswith("xla("):
        return "xla"
    return session if session.startswith(RUNTIMES) else None


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
    return [session for stage in stages for lane in stage for session in lane if not session.startswith(BUILD)]


def unstaged(listed: list[str], stages=STAGES) -> list[str]:
    """The sessions nox lists that no stage runs (a new session must be given a stage).

    Examples:
        >>> unstaged(["a", "b", "e"], ((("a",), ("b",)),))
        ['e']
    """
    named = set(staged_sessions(stages))
    return [session for session in listed if session not in named]


def crowded(stages=STAGES) -> list[str]:
    """The sessions that must lead their stage and do not: main, the clusters and the browsers
    (each in the first lane of a stage, one a stage), so that nothing at their priority runs beside them.

    Examples:
        >>> crowded(((("main",), ("build:x",)), (("docs",), ("cluster",)), (("browser", "main"),)))
        ['cluster', 'main']
    """
    crowd = []
    for stage in stages:
        leading = [session for session in stage[0] if session in LEADS][1:]
        behind = [session for lane in stage[1:] for session in lane if session in LEADS]
        crowd += leading + behind
    return crowd


def misbuilt(stages=STAGES) -> list[str]:
    """What breaks the runtimes' disk rule: one runtime's environment on disk at a time (the XLA
    sessions' shared one counts as one). A stage's runtimes are in one lane, one after another; a
    runtime built (``build:``) stays on disk until its session has run (which removes it, on CI),
    in the same lane or a later stage, and nothing builds or runs another runtime before that.

    Examples:
        >>> misbuilt(((("main",), ("build:kernel(a)",)), (("c",),), (("b",), ("kernel(a)", "build:xla(1)", "xla(1)"))))
        []
        >>> misbuilt(((("kernel(a)",), ("build:kernel(b)",)), (("cluster",),), (("kernel(b)",),)))
        ['stage 1 holds kernel(a) and kernel(b)']
        >>> misbuilt(((("main",), ("build:kernel(b)",)), (("b",), ("xla(1)", "kernel(b)"))))
        ['stage 2 holds kernel(b) and xla']
        >>> misbuilt(((("main",), ("build:kernel(b)",)),))
        ['kernel(b) is built in stage 1 and never run']
    """
    problems, held, built_in = [], None, 0
    for number, stage in enumerate(stages, 1):
        lanes = [[entry for entry in lane if runtime_of(entry)] for lane in stage]
        lanes = [lane for lane in lanes if lane]
        if len(lanes) > 1:
            side_by_side = {runtime_of(entry) for lane in lanes for entry in lane} | ({held} if held else set())
            problems.append(f"stage {number} holds {' and '.join(sorted(side_by_side))}")
        for entry in (entry for lane in lanes for entry in lane):
            runtime = runtime_of(entry)
            if held and runtime != held:
                problems.append(f"stage {number} holds {held} and {runtime}")
            held = runtime if entry.startswith(BUILD) else None
            built_in = number if held else built_in
    if held:
        problems.append(f"{held} is built in stage {built_in} and never run")
    return list(dict.fromkeys(problems))


def listed_sessions() -> list[str]:
    """The sessions of the noxfile, as ``nox --list --json`` names them."""
    out = subprocess.run([*NOX, "--list", "--json"], capture_output=True, text=True, check=True, cwd=REPO).stdout
    return [entry["session"] for entry in json.loads(out)]


def run_lane(lane: tuple[str, ...], live: bool, outcomes: list[Outcome], logs: dict[str, Path]) -> None:
    """Run ``lane``'s sessions one after another: the stage's first lane (``live``) with its output to
    this terminal, another at the lowest priority with its output to a log."""
    label = " → ".join(lane)
    for entry in lane:
        session = entry.removeprefix(BUILD)
        command = [*NOX, "-s", session, *(["--install-only"] if entry.startswith(BUILD) else [])]
        command = command if live else [*NICE, *command]
        started = time.monotonic()
        if live:
            code = subprocess.run(command, cwd=REPO).returncode
        else:
            log = logs.setdefault(entry, Path(tempfile.mkstemp(prefix="nox-", suffix=".log")[1]))
            with log.open("w") as out:
                code = subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT).returncode
        outcomes.append(Outcome(entry, label, code, time.monotonic() - started))


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
    behind = crowded()
    if behind:
        print(f"stages.py: {', '.join(behind)} must lead a stage of its own", file=sys.stderr)
        return 2
    problems = misbuilt()
    if problems:
        print(f"stages.py: {'; '.join(problems)}", file=sys.stderr)
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
