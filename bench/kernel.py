"""A minimal real-kernel driver for the benchmarks: run a cell, return its stdout, fail loudly."""

from __future__ import annotations

import json
import queue

from jupyter_client import KernelManager


class BenchKernel:
    def __init__(self):
        self.manager = KernelManager()
        self.manager.start_kernel()
        self.client = self.manager.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def run(self, code, timeout=600):
        msg_id = self.client.execute(code)
        out, error = [], None
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"cell did not finish in {timeout} s") from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and content["name"] == "stdout":
                out.append(content["text"])
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}"
            elif kind == "status" and content["execution_state"] == "idle":
                break
        if error:
            raise RuntimeError(f"benchmark cell failed: {error}")
        return "".join(out)

    def close(self):
        """Shut the kernel down, and end what it started (a hung launch's ranks), by its own tree."""
        import psutil

        try:
            family = psutil.Process(self.manager.provisioner.process.pid).children(recursive=True)
        except psutil.Error:
            family = []
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)
        for process in family:
            try:
                process.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(family, timeout=10)


def run_rounds(setup, one_round, report, rounds, round_timeout=600):
    """In one fresh kernel: run ``setup``, then ``one_round`` ``rounds`` times, then ``report``, which
    must print one JSON line; return it decoded."""
    kernel = BenchKernel()
    try:
        kernel.run(setup)
        for _ in range(rounds):
            kernel.run(one_round, timeout=round_timeout)
        return json.loads(kernel.run(report).strip().splitlines()[-1])
    finally:
        kernel.close()
