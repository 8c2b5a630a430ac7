"""The backend registry without starting a process: names, options, placement, sidebar status.

The sandbox backend (``tests/backend_sandbox``) stands for a third-party package: nothing of the
launcher names it. Runs in ``make check``.
"""

from __future__ import annotations

import pytest

from notebook_launcher import backends
from notebook_launcher.backends import (
    act_on_section,
    backend_for,
    backend_status,
    get_backend,
    observe_backends,
    register_backend,
)
from notebook_launcher.launching.plan import make_plan


def test_cluster_names_the_backend_and_none_is_this_machine():
    assert backend_for(None).name == "local"
    assert backend_for("ray").name == "ray"
    assert backend_for("ray://head:10001").name == "ray"
    for wrong in ("slurm", "local", "", 7, "://x"):
        with pytest.raises(ValueError, match="names no backend; registered: 'local' \\(cluster=None\\), 'ray'"):
            backend_for(wrong)


def test_a_registered_backend_plans_a_launch_with_its_own_options(sandbox):
    plan, notices = make_plan(print, (), 3, cluster="sandbox", env={"GREETING": "hi"})
    assert (plan.backend, plan.start_method, plan.num_processes, plan.device.name) == ("sandbox", "sandbox", 3, "cpu")
    assert plan.options.env == {"GREETING": "hi"}
    assert notices == ["sandbox: 3 ranks"]
    with pytest.raises(ValueError, match="env must be a dict of strings"):
        make_plan(print, (), 2, cluster="sandbox", env={"N": 1})
    with pytest.raises(ValueError, match="the sandbox runs CPU ranks only"):
        make_plan(print, (), 2, cluster="sandbox", device="cuda")


def test_a_keyword_of_another_backend_names_the_cluster_that_takes_it(sandbox):
    with pytest.raises(ValueError, match="resources_per_rank only applies with cluster='ray'; pass cluster='ray' too"):
        make_plan(print, (), 2, resources_per_rank={"GPU": 1})
    with pytest.raises(ValueError, match="env only applies with cluster='sandbox'"):
        make_plan(print, (), 2, env={})
    with pytest.raises(ValueError, match="placement_strategy only applies with cluster='ray'"):
        make_plan(print, (), 2, cluster="sandbox", placement_strategy="SPREAD")
    with pytest.raises(TypeError, match="unexpected keyword arguments: 'nodes'"):
        make_plan(print, (), 2, nodes=3)
    with pytest.raises(TypeError, match="unexpected keyword arguments: 'envs'"):
        make_plan(print, (), 2, cluster="ray", envs={})
    with pytest.raises(ValueError, match="resources_per_rank and placement_strategy only apply with cluster='ray'"):
        make_plan(print, (), 2, cluster="sandbox", resources_per_rank={}, placement_strategy="PACK")


def test_the_sidebar_gets_every_backends_status_and_its_changes(sandbox):
    """Every backend's status is sections under one schema (``backends.status``), the sandbox's
    too; a click on its button reaches its ``act``, which pushes the changed section."""
    import sandbox_backend

    status = backend_status()
    assert status["cluster"] is None  # this process is not connected to a Ray cluster
    (server,) = status["start_server"]["rows"]
    assert server["key"] == "server" and server["text"].startswith("Spawn start server: ")
    sandbox_section = status["sandbox"]
    assert sandbox_section["title"] == "Sandbox backend" and sandbox_section["actions"] == [
        {"id": "ping", "label": "Ping"}
    ]
    heard = []
    stop = observe_backends(lambda section, value: heard.append((section, value)))
    before = sandbox_backend.PINGS[0]
    act_on_section("sandbox", "ping")
    with pytest.raises(ValueError, match="no action 'jump'"):
        act_on_section("sandbox", "jump")
    with pytest.raises(ValueError, match="no backend shows a section 'nowhere'"):
        act_on_section("nowhere", "ping")
    stop()
    assert [name for name, _ in heard] == ["sandbox"]
    assert heard[0][1]["rows"][1]["text"] == f"pinged {before + 1} times"
    assert sandbox_backend.OBSERVERS == []


def test_a_bad_name_or_a_broken_backend_is_said_clearly(monkeypatch):
    monkeypatch.setattr(backends, "_known", dict(backends._known))
    monkeypatch.setattr(backends, "_loaded", dict(backends._loaded))
    with pytest.raises(ValueError, match="a backend's name is an identifier"):
        register_backend("my backend", "x:y")
    register_backend("broken", "no_such_module_here:Backend")
    with pytest.raises(ModuleNotFoundError):
        get_backend("broken")
    plan, _ = make_plan(print, (), 1, start_method="spawn")  # another backend's breakage stays its own
    assert plan.backend == "local"


def test_a_backend_loaded_after_the_sidebar_connected_is_shown_at_once(monkeypatch, sandbox):
    """The sidebar observes backends before a launch loads a package's one: its sections arrive
    as it loads, and its changes after that, until the sidebar stops observing."""
    import sandbox_backend

    monkeypatch.setattr(
        backends, "_loaded", {name: each for name, each in backends._loaded.items() if name != "sandbox"}
    )
    heard = []
    stop = observe_backends(lambda section, value: heard.append((section, value)))
    get_backend("sandbox")
    assert [name for name, _ in heard] == ["sandbox"] and heard[0][1]["title"] == "Sandbox backend"
    act_on_section("sandbox", "ping")
    stop()
    act_on_section("sandbox", "ping")
    assert [name for name, _ in heard] == ["sandbox", "sandbox"]
    assert sandbox_backend.OBSERVERS == []
