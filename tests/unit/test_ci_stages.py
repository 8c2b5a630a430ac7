"""``make test``'s stages (``.ci/stages.py``): which sessions run side by side, and what it prints."""

from __future__ import annotations

import doctest
import importlib.util
import sys

from paths import REPO


def _stages():
    spec = importlib.util.spec_from_file_location("stages", REPO / ".ci" / "stages.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["stages"] = module  # a dataclass looks its module up while it is made
    spec.loader.exec_module(module)
    return module


def test_main_the_clusters_the_browsers_and_the_runtimes_each_have_a_stage_to_themselves():
    stages = _stages()
    assert stages.crowded() == []
    alone = {lane[0] for stage in stages.STAGES if len(stage) == 1 for lane in stage}
    assert {
        "main",
        "cluster",
        "browser",
        "kernel(runtime='colab')",
        "kernel(runtime='kaggle')",
        "xla(version='2.8')",
    } <= alone


def test_no_session_is_staged_twice_and_the_examples_hold():
    stages = _stages()
    named = stages.staged_sessions()
    assert len(named) == len(set(named)), named
    assert doctest.testmod(stages).failed == 0
