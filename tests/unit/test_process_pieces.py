"""Small mechanisms tested alone: threads, global state, a forked process's end, folders, watches."""

import os
import threading

from notebook_launcher.launching.threads import run_in_thread


def test_supervisor_threads_are_reused():
    seen, done = [], threading.Event()
    run_in_thread(lambda: seen.append(threading.get_ident()) or done.set())
    done.wait(5)
    first = seen[0]
    done.clear()
    run_in_thread(lambda: seen.append(threading.get_ident()) or done.set())
    done.wait(5)
    assert seen == [first, first]


def test_checkpoint_publishing_survives_a_crash_at_every_step_and_a_second_one(tmp_path, monkeypatch):
    """A crash between any two steps of a save, and then a second crash in the next save, always
    leaves a complete checkpoint that loading finds."""
    import os as os_module

    from trainer_core import atomic

    final = str(tmp_path / "ckpt")

    def save(label, crash_before_rename=None):
        tmp = atomic.begin(final)
        (tmp_path / "ckpt.tmp" / "weights").write_text(label)
        if crash_before_rename is None:
            atomic.publish(tmp, final)
            return
        renames = []
        real_rename = os_module.rename

        def rename(src, dst):
            if len(renames) == crash_before_rename:
                raise KeyboardInterrupt("crash")
            renames.append((src, dst))
            real_rename(src, dst)

        monkeypatch.setattr(atomic.os, "rename", rename)
        try:
            atomic.publish(tmp, final)
        except KeyboardInterrupt:
            pass
        finally:
            monkeypatch.setattr(atomic.os, "rename", real_rename)

    def loaded():
        return (tmp_path / os_module.path.basename(atomic.resolve(final)) / "weights").read_text()

    save("first")
    save("second", crash_before_rename=1)  # crashed after ckpt -> ckpt.prev, before ckpt.tmp -> ckpt
    assert not os_module.path.exists(final) and loaded() in ("first", "second")
    save("third", crash_before_rename=0)  # the next save crashes too, before any rename
    assert loaded() in ("first", "second", "third")
    save("fourth")
    assert loaded() == "fourth" and not os_module.path.exists(final + ".prev")


def test_restoring_the_kernels_global_state_imports_nothing_new_when_a_flag_is_unchanged():
    """Every rank restores the kernel's settings at start; setting deterministic algorithms imports
    torch._inductor (about a second), so it is set only when it differs."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from notebook_launcher.rank.global_state import GlobalState\n"
        "GlobalState.capture().restore()\n"
        "print('torch._inductor' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_a_forked_process_reports_how_it_ended_and_can_be_waited_on_with_a_timeout():
    """``fork_process``: the code its target returns or exits with, -N for a signal, None while it runs."""
    import signal

    from notebook_launcher.backends.local.forked_process import fork_process

    def returns(code):
        return code

    def exits(code):
        raise SystemExit(code)

    def raises():
        raise ValueError("in the child")

    def blocks(fd):
        os.read(fd, 1)
        return 0

    ended = [
        fork_process(target, args) for target, args in ((returns, (3,)), (exits, (None,)), (exits, (4,)), (raises, ()))
    ]
    assert [process.wait(timeout=30) for process in ended] == [3, 0, 4, 1]
    read_end, write_end = os.pipe()
    running = fork_process(blocks, (read_end,))
    try:
        assert running.wait(timeout=0) is None and running.wait(timeout=0.05) is None
        os.kill(running.pid, signal.SIGKILL)
        assert running.wait(timeout=30) == -signal.SIGKILL
    finally:
        os.close(read_end)
        os.close(write_end)
    for process in [*ended, running]:
        process.release()
        assert process.exitcode is not None


def test_a_file_at_the_snapshot_folders_name_gives_a_private_folder_instead(tmp_path, monkeypatch):
    """Before: FileExistsError, and the server extension was not loaded (saved launches froze)."""
    import stat
    import tempfile

    from notebook_launcher.frontend.saved_outputs import SNAPSHOTS_ENV
    from notebook_launcher.frontend.server_extension import snapshots_folder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(SNAPSHOTS_ENV, raising=False)
    squatter = tmp_path / f"notebook-launcher-snapshots-{os.getuid()}"
    squatter.write_text("put here by someone else")
    folder = snapshots_folder()
    mode = folder.lstat().st_mode
    assert folder != squatter and stat.S_ISDIR(mode) and not mode & 0o077
    assert squatter.read_text() == "put here by someone else"


class _RecordingComm:
    """The comm edge of a sidebar channel: what the kernel sends, and whether it closed it."""

    def __init__(self):
        self.sent, self.closed = [], False

    def on_msg(self, callback):
        self.receive = lambda data: callback({"content": {"data": data}})

    def on_close(self, callback):
        self.close_from_front_end = lambda: callback({})

    def send(self, message):
        self.sent.append(message["type"])

    def close(self):
        self.closed = True


def test_a_sidebar_that_went_silent_is_closed_instead_of_sent_to_for_ever():
    """Before: every sidebar comm ever opened (each page reload opens one) got every update."""
    from notebook_launcher.frontend.sidebar_comm import _SidebarChannel, open_sidebars

    now = [0.0]
    before = open_sidebars()
    comm = _RecordingComm()
    channel = _SidebarChannel(comm, silent_after=90.0, clock=lambda: now[0])
    comm.receive({"type": "alive"})
    now[0] = 60.0
    channel._settings_changed({})
    assert comm.sent == ["settings"] and open_sidebars() == before + 1
    now[0] = 151.0  # 91 s without a word
    channel._settings_changed({})
    assert comm.sent == ["settings"] and comm.closed and open_sidebars() == before
    quiet = _RecordingComm()  # an older sidebar that never says it is alive: kept
    old = _SidebarChannel(quiet, silent_after=90.0, clock=lambda: now[0])
    now[0] = 10_000.0
    old._settings_changed({})
    assert quiet.sent == ["settings"] and not quiet.closed
    quiet.close_from_front_end()
    assert open_sidebars() == before


def test_a_sidebar_is_not_silent_while_its_messages_wait_behind_a_running_cell():
    """Its messages are handled on the main shell: during a cell that blocks for minutes they wait
    in the queue. Before, every sidebar was dropped 90 s into such a launch."""
    from notebook_launcher.frontend.sidebar_comm import _SidebarChannel

    now = [0.0]
    free_since = [float("-inf")]  # when the main shell could last hear it
    comm = _RecordingComm()
    channel = _SidebarChannel(comm, silent_after=90.0, clock=lambda: now[0], shell_free_since=lambda _: free_since[0])
    comm.receive({"type": "alive"})
    now[0] = 10.0
    free_since[0] = 10.0  # a cell starts and blocks: the shell hears nothing
    for now[0] in (100.0, 500.0):
        free_since[0] = now[0]
        channel._settings_changed({})
    assert comm.sent == ["settings", "settings"] and not comm.closed
    now[0] = 560.0  # the cell ended at 500 s; the queued alive messages would be heard at once
    channel._settings_changed({})
    assert comm.sent == ["settings"] * 3 and not comm.closed
    now[0] = 591.0  # 91 s after the shell was free again, still nothing: gone
    channel._settings_changed({})
    assert comm.closed


def test_a_head_that_stops_answering_is_lost_once_and_the_kernel_leaves_its_cluster():
    """The head watch with a fake probe and clock: answers keep it alive, three seconds of silence
    make it lost, ``on_lost`` runs once with a reason naming the address, and ``left`` is then set."""
    from notebook_launcher.backends.ray.head_watch import HeadWatch

    answers = iter([True, False, True, *[False] * 50])
    now = iter(range(1000))
    calls = []
    watch = HeadWatch(
        "10.0.0.1:6379", calls.append, probe=lambda address: next(answers), clock=lambda: next(now), every=0.01
    )
    watch.start()
    assert watch.left.wait(30), "the head was never taken as lost"
    watch.join(5)
    assert len(calls) == 1 and calls[0] == watch.reason
    assert calls[0].startswith("the Ray head at 10.0.0.1:6379 stopped answering at ")
    assert "this kernel leaves it and lives on" in calls[0]
    assert next(answers) is False and next(now) == 7  # lost at the 4th silent probe after the last answer
