"""``make test``'s stages (``.ci/stages.py``): which sessions run side by side, and what it prints."""

from __future__ import annotations

import doctest
import importlib.util
import os
import sys

from paths import REPO


def _stages():
    spec = importlib.util.spec_from_file_location("stages", REPO / ".ci" / "stages.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["stages"] = module  # a dataclass looks its module up while it is made
    spec.loader.exec_module(module)
    return module


def test_main_the_clusters_and_the_browsers_each_lead_a_stage_of_their_own():
    """Nothing at their priority runs beside them: another lane of their stage runs niced."""
    stages = _stages()
    assert stages.crowded() == []
    leaders = [stage[0][0] for stage in stages.STAGES]
    assert {"main", "cluster", "browser"} <= set(leaders)
    assert stages.crowded(((("browser",), ("cluster",)),)) == ["cluster"]


def test_no_session_is_staged_twice_and_the_examples_hold():
    stages = _stages()
    named = stages.staged_sessions()
    assert len(named) == len(set(named)), named
    assert doctest.testmod(stages).failed == 0


def test_one_runtimes_environment_at_a_time_each_built_before_its_session():
    stages = _stages()
    assert stages.misbuilt() == []
    built = [entry.removeprefix(stages.BUILD) for stage in stages.STAGES for lane in stage for entry in lane]
    built = [session for session in built if session.startswith(stages.RUNTIMES)]
    assert sorted(set(built)) == sorted(s for s in stages.staged_sessions() if s.startswith(stages.RUNTIMES))
    # a runtime built beside a session running another one would hold two on disk
    both = ((("kernel(runtime='colab')",), ("build:xla(version='2.8')",)), (("xla(version='2.8')",),))
    assert stages.misbuilt(both) == ["stage 1 holds kernel(runtime='colab') and xla"]
    # built beside one stage, it may wait through the next for its session, if nothing else runs one
    late = ((("main",), ("build:kernel(runtime='colab')",)), (("cluster",),), (("kernel(runtime='colab')",),))
    assert stages.misbuilt(late) == []
    between = ((("main",), ("build:kernel(runtime='colab')",)), (("b",), ("xla(version='2.8')",)))
    assert stages.misbuilt(between) == ["stage 2 holds kernel(runtime='colab') and xla"]
    assert stages.misbuilt(between[:1]) == ["kernel(runtime='colab') is built in stage 1 and never run"]


def test_a_build_runs_its_session_with_install_only_and_a_session_without(monkeypatch):
    stages = _stages()
    monkeypatch.setattr(stages, "NOX", [sys.executable, "-c", "import sys; print(sys.argv[1:])"])
    outcomes, logs = [], {}
    stages.run_lane(("build:kernel(runtime='colab')", "kernel(runtime='colab')"), False, outcomes, logs)
    try:
        said = {entry: log.read_text() for entry, log in logs.items()}
    finally:
        for log in logs.values():
            log.unlink()
    assert said == {
        "build:kernel(runtime='colab')": "['-s', \"kernel(runtime='colab')\", '--install-only']\n",
        "kernel(runtime='colab')": "['-s', \"kernel(runtime='colab')\"]\n",
    }
    assert [(o.session, o.code) for o in outcomes] == [(entry, 0) for entry in said]


def test_a_stages_other_lanes_run_at_the_lowest_priority_and_its_first_at_its_own(monkeypatch, capfd):
    stages = _stages()
    monkeypatch.setattr(stages, "NOX", [sys.executable, "-c", "import os; print(os.nice(0))"])
    outcomes, logs = [], {}
    stages.run_lane(("beside",), False, outcomes, logs)
    niced = logs["beside"].read_text()
    logs["beside"].unlink()
    stages.run_lane(("first",), True, outcomes, logs)
    assert int(niced) == min(os.nice(0) + 19, 19)
    assert int(capfd.readouterr().out) == os.nice(0)
    assert [(o.session, o.code) for o in outcomes] == [("beside", 0), ("first", 0)]
