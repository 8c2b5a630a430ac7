"""A real Jupyter kernel for tests: run cells, read what the cell showed, interrupt, inspect processes.

The kernel is started with jupyter_client, as JupyterLab would start it. ``NL_TEST_KERNEL_PYTHON``
picks another interpreter for the kernel (to run the same tests against another ipykernel).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import tempfile
import time
from dataclasses import dataclass, field

import psutil
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager


@dataclass
class CellResult:
    """What one executed cell produced, in the order the front end would show it."""

    outputs: list = field(default_factory=list)
    error: dict | None = None
    value: str | None = None
    seconds: float = 0.0

    def text(self, name):
        return "".join(out["text"] for out in self.outputs if out.get("name") == name)

    @property
    def stdout(self):
        """What the cell printed, without the launcher's notices that it waited for its background
        warm-up (said only when the wait is long, as on a loaded machine: ``warmup.SAY_AFTER``);
        ``text("stdout")`` keeps them."""
        return _WARMUP_NOTICES.sub("", self.text("stdout"))

    @property
    def stderr(self):
        return self.text("stderr")

    @property
    def traceback(self):
        return _strip_ansi("\n".join(self.error["traceback"])) if self.error else ""

    def raise_for_error(self):
        if self.error:
            raise AssertionError(f"cell raised {self.error['ename']}: {self.error['evalue']}\n{self.traceback}")
        return self


_WARMUP_NOTICES = re.compile(
    r"^notebook-launcher: (?:this cell|the launch) (?:waits for the launcher's background import of .*"
    r" to finish \(once a kernel\)|waited \d+\.\d s for it)\n",
    re.M,
)


def _strip_ansi(text):
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


class KernelSession:
    """One running kernel. ``run(code)`` executes a cell and waits for it to be idle."""

    def __init__(self, cwd=None, env=None):
        self._spec_dir = None
        manager_args = {}
        python = os.environ.get("NL_TEST_KERNEL_PYTHON")
        if python:
            self._spec_dir = tempfile.TemporaryDirectory()
            kernel_dir = os.path.join(self._spec_dir.name, "nltest")
            os.makedirs(kernel_dir)
            with open(os.path.join(kernel_dir, "kernel.json"), "w") as file:
                json.dump(
                    {
                        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                        "display_name": "nltest",
                        "language": "python",
                    },
                    file,
                )
            manager_args = {
                "kernel_name": "nltest",
                "kernel_spec_manager": KernelSpecManager(kernel_dirs=[self._spec_dir.name]),
            }
        self.manager = KernelManager(**manager_args)
        # jupyter_client draws no widgets: launches show text unless a test asks for the widget
        kernel_env = {
            **os.environ,
            "NOTEBOOK_LAUNCHER_DISPLAY": os.environ.get("NOTEBOOK_LAUNCHER_DISPLAY", "text"),
            **(env or {}),
        }
        self.manager.start_kernel(cwd=cwd or os.getcwd(), env=kernel_env)
        self.client = self.manager.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)
        self.process = psutil.Process(self.manager.provisioner.process.pid)
        self._comm_stash = []
        handle, self._stacks_path = tempfile.mkstemp(prefix="nl-kernel-stacks-", suffix=".txt")
        os.close(handle)
        # silent: no execution count, no pre/post_run_cell hooks; the cells of a test see nothing of it
        self.client.execute(
            "import faulthandler as _nl_fh, signal as _nl_signal\n"
            f"_nl_fh.register(_nl_signal.SIGUSR2, file=open({self._stacks_path!r}, 'w'), all_threads=True)",
            silent=True,
            store_history=False,
        )

    def submit(self, code):
        """Send a cell without waiting; returns its message id."""
        # stop_on_error=False: tests raise in cells on purpose, and ipykernel 6 aborts requests that
        # arrive just after an error when the failed request asked for that (jupyter_client's default)
        return self.client.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)

    def collect(self, msg_id, timeout=120, until=None):
        """Read iopub for cell ``msg_id`` until it is idle (or ``until(result)`` is true)."""
        result = CellResult()
        start = time.monotonic()
        deadline = start + timeout
        while True:
            msg = self._next_iopub(deadline, lambda: f"cell still busy after {timeout} s; outputs: {result.outputs}")
            if msg is None or msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                result.outputs.append({"name": content["name"], "text": content["text"], "time": time.monotonic()})
            elif kind in ("display_data", "update_display_data"):
                result.outputs.append({"display": content["data"], "kind": kind, "time": time.monotonic()})
            elif kind == "execute_result":
                result.value = content["data"].get("text/plain")
            elif kind == "error":
                result.error = content
            elif kind == "status" and content["execution_state"] == "idle":
                result.seconds = time.monotonic() - start
                return result
            if until is not None and until(result):
                result.seconds = time.monotonic() - start
                return result

    def run(self, code, timeout=120):
        """Execute ``code`` as a cell and return its ``CellResult``."""
        return self.collect(self.submit(code), timeout)

    def ok(self, code, timeout=120):
        """Execute ``code`` and fail the test if the cell raised."""
        return self.run(code, timeout).raise_for_error()

    def eval(self, expression, timeout=60):
        """The value of ``expression`` in the kernel, through ``repr``/``ast.literal_eval``."""
        import ast

        result = self.ok(f"print(repr({expression}))", timeout)
        try:
            return ast.literal_eval(result.stdout.strip())
        except SyntaxError:
            raise AssertionError(f"eval of {expression!r} printed {result.outputs!r}") from None

    def first_message(self, match, timeout=30):
        """The first iopub message, of any cell, for which ``match(msg)`` is true (others are dropped)."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self._next_iopub(deadline, lambda: f"no matching message within {timeout} s")
            if msg is not None and match(msg):
                return msg

    def open_comm(self, target, data):
        """Open a comm to ``target`` as a front end would; returns its id."""
        import uuid

        comm_id = uuid.uuid4().hex
        self.client.session.send(
            self.client.shell_channel.socket, "comm_open", {"comm_id": comm_id, "target_name": target, "data": data}
        )
        return comm_id

    def send_comm(self, comm_id, data):
        self.client.session.send(self.client.shell_channel.socket, "comm_msg", {"comm_id": comm_id, "data": data})

    def comm_message(self, comm_id, match=lambda data: True, timeout=30):
        """The next message on comm ``comm_id`` whose data satisfies ``match`` (earlier ones are dropped).

        Returns the data, or None when the kernel closed the comm.
        """
        deadline = time.monotonic() + timeout
        while True:
            while self._comm_stash:
                msg = self._comm_stash.pop(0)
                if msg["content"].get("comm_id") != comm_id or msg["msg_type"] == "comm_open":
                    continue
                if msg["msg_type"] == "comm_close":
                    return None
                if match(msg["content"]["data"]):
                    return msg["content"]["data"]
            self._next_iopub(deadline, lambda: f"no matching message on comm {comm_id} within {timeout} s")

    def comms_opened_so_far(self, target):
        """The data of every comm the kernel has opened to ``target`` by the end of the last cell run."""
        return [
            msg["content"]["data"]
            for msg in self._comm_stash
            if msg["msg_type"] == "comm_open" and msg["content"].get("target_name") == target
        ]

    def comm_opened(self, target, timeout=30):
        """The data of the next comm the kernel opens to ``target`` (comms to others are dropped)."""
        deadline = time.monotonic() + timeout
        while True:
            for msg in list(self._comm_stash):
                if msg["msg_type"] == "comm_open":
                    self._comm_stash.remove(msg)
                    if msg["content"].get("target_name") == target:
                        return msg["content"]["data"]
            self._next_iopub(deadline, lambda: f"the kernel opened no comm to {target!r} within {timeout} s")

    def _next_iopub(self, deadline, timeout_message):
        """The next iopub message before ``deadline``; comm messages are kept for ``comm_message``
        (and None returned), so reading a cell's output never loses them."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{timeout_message()}\n{self.thread_stacks()}")
        try:
            msg = self.client.get_iopub_msg(timeout=remaining)
        except queue.Empty:
            return None
        if msg["msg_type"] in ("comm_open", "comm_msg", "comm_close"):
            self._comm_stash.append(msg)
            return None
        return msg

    def interrupt(self):
        self.manager.interrupt_kernel()

    def thread_stacks(self, timeout=10):
        """Every kernel thread's Python stack (faulthandler, registered on SIGUSR2 at start): what a
        cell that never ends was doing, for the failure message."""
        try:
            self.process.send_signal(signal.SIGUSR2)
        except psutil.Error as error:
            return f"the kernel's stacks: none ({error})"
        deadline, seen = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            # faulthandler writes from the kernel's signal handler: done once the text stops growing
            time.sleep(0.2)  # polling another process's file: an upper bound, not a synchronization
            with open(self._stacks_path) as file:
                text = file.read()
            if text and text == seen:
                break
            seen = text
        return f"the kernel's threads:\n{seen}"

    def children(self):
        """The kernel's live descendant processes (zombies excluded), except its spawn start server and
        its guardian: they stay between launches on purpose (the server's ranks do count)."""
        alive = []
        for child in self.process.children(recursive=True):
            try:
                if child.status() != psutil.STATUS_ZOMBIE and not is_kernel_helper(child):
                    alive.append(child)
            except psutil.NoSuchProcess:
                pass
        return alive

    def control(self, msg_type, content, timeout=30):
        """Send a control-channel request (``create_subshell_request``, say) and return its reply's content."""
        msg = self.client.session.msg(msg_type, content)
        self.client.control_channel.send(msg)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = self.client.control_channel.get_msg(timeout=deadline - time.monotonic())
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                return reply["content"]
        raise TimeoutError(f"no reply to {msg_type} within {timeout} s")

    def send_shell(self, msg_type, content, subshell=None):
        """Send a shell-channel message, to kernel subshell ``subshell`` (ipykernel ≥ 7) or the main shell."""
        msg = self.client.session.msg(msg_type, content)
        msg["header"]["subshell_id"] = subshell
        self.client.shell_channel.send(msg)
        return msg["header"]["msg_id"]

    def has_subshells(self):
        """Whether the kernel says it has subshells (ipykernel ≥ 7)."""
        info = self.client.kernel_info(reply=True, timeout=30)["content"]
        return "kernel subshells" in info.get("supported_features", [])

    def shutdown(self):
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)
        os.unlink(self._stacks_path)
        if self._spec_dir is not None:
            self._spec_dir.cleanup()


def is_start_server(process):
    """Whether ``process`` is a kernel's warm spawn start server (``notebook_launcher.rank.start_server``)."""
    try:
        return "notebook_launcher.rank.start_server" in process.cmdline()
    except psutil.Error:
        return False


def is_guardian(process):
    """Whether ``process`` is a kernel's guardian (``notebook_launcher.launching.guardian``)."""
    try:
        return "notebook-launcher-guardian" in process.cmdline()
    except psutil.Error:
        return False


def is_kernel_helper(process):
    """The processes a kernel keeps between launches: its start server and its guardian."""
    return is_start_server(process) or is_guardian(process)
