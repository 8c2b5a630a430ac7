"""A real two-node Ray cluster on this machine, for the cluster tests, the notebook and the bench.

The head is on 127.0.0.5 and the second node joins it on 127.0.0.2 (other loopback addresses, so the
two nodes have different addresses, as on a real cluster); a driver (a kernel, a test) takes the
address it reaches the head from, loopback too. A cluster can take other loopback addresses
(``HEAD_LOSS``), and every port of its nodes is a free one, Ray's fixed default (the dashboard
agent's 52365) included: two test files run their clusters side by side. Not 127.0.0.1: Ray rewrites
that one address (and "localhost") to the machine's network address, so a head started there and
every driver of it talked over the machine's own interface. ``loopback_report`` lists every address
Ray reports, for the tests to check. Both nodes run ``ray start --block`` in a session of their own,
so ``stop`` ends exactly the processes this cluster started (never another Ray on the machine, as
``ray stop`` would).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
# a kernel cell: ranks that print "training" once, then all-reduce until they are ended
TRAIN_FOREVER = (
    "from notebook_launcher import notebook_launcher\n"
    "def train_forever():\n"
    "    import torch, torch.distributed as dist\n"
    "    dist.init_process_group('gloo')\n"
    "    print('training', flush=True)\n"
    "    while True:\n"
    "        dist.all_reduce(torch.ones(1))\n"
)
START_TIMEOUT = 180.0  # seconds for both nodes to come up on a loaded 2-core machine
HEAD = "127.0.0.5"  # the head's address (see the module docstring: not 127.0.0.1)
SECOND = "127.0.0.2"
HEAD_LOSS = ("127.0.0.6", "127.0.0.7")  # the head-loss tests' clusters, beside the shared one
# a kernel cell printing every address Ray reports (nodes, GCS, the node its driver took, the
# kernel's own link to that driver process)
LOOPBACK_REPORT = (
    "import ray as _ray\n"
    "from notebook_launcher.backends.ray.connect import driver_addresses as _driver_addresses\n"
    "_addresses = {n['NodeManagerAddress'] for n in _ray.nodes()}\n"
    "_driver = _driver_addresses()\n"
    "_addresses |= {_driver['gcs'].rpartition(':')[0], _driver['node'],"
    " _driver['client'].removeprefix('ray://').rpartition(':')[0]}\n"
    "print(sorted(_addresses))\n"
)


# Run as its own process: waits until argv[2] nodes of the cluster at argv[1] are alive, polling the
# head's GCS (ALIVE is state 0 of GcsNodeInfo), for at most argv[3] seconds; exit 1 when they are not.
_NODES_ALIVE = """
import sys, time
from ray._raylet import GcsClient
address, wanted, deadline = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
client = GcsClient(address=address)
alive = 0
while time.monotonic() < deadline:
    try:
        alive = sum(node.state == 0 for node in client.get_all_node_info(timeout=5).values())
    except Exception as err:  # the head still starting: ask again
        print(f"asking the head: {err}", flush=True)
    if alive >= wanted:
        sys.exit(0)
    time.sleep(0.2)
print(f"{alive} of {wanted} nodes alive", flush=True)
sys.exit(1)
"""


def all_loopback(addresses) -> bool:
    """Whether every address is a loopback one (127.0.0.0/8 or ::1)."""
    import ipaddress

    return bool(addresses) and all(ipaddress.ip_address(address.strip("[]")).is_loopback for address in addresses)


def _free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


class LocalRayCluster:
    """Two Ray nodes (or ``nodes=1``: the head alone) with ``cpus`` CPUs each; ``address`` is what
    ``RAY_ADDRESS`` takes, ``client_address`` what Ray Client connects to; ``addresses`` are the
    head's and the second node's (loopback)."""

    def __init__(self, cpus: int = 2, nodes: int = 2, addresses: tuple[str, str] = (HEAD, SECOND)) -> None:
        self.cpus = cpus
        self.nodes = nodes  # 1: the head alone
        self.head, self.second = addresses
        self.port = _free_port(self.head)
        self.address = f"{self.head}:{self.port}"
        self.client_port = _free_port(self.head)
        self.client_address = f"ray://{self.head}:{self.client_port}"  # Ray Client
        self.temp_dir = tempfile.mkdtemp(prefix="nlray-", dir="/tmp")  # short: Ray puts sockets in it
        self.log = open(os.path.join(self.temp_dir, "nodes.log"), "wb")  # noqa: SIM115 -- closed in stop()
        self._nodes: list[subprocess.Popen] = []

    def start(self) -> LocalRayCluster:
        common = [
            "--block",
            "--num-cpus",
            str(self.cpus),
            "--object-store-memory",
            str(80 << 20),
            "--disable-usage-stats",
        ]
        self._start_node(
            self.head,
            [
                "--head",
                "--ray-client-server-port",
                str(self.client_port),
                "--port",
                str(self.port),
                "--include-dashboard=false",
                "--temp-dir",
                self.temp_dir,
                *common,
            ],
        )
        self._wait_for(lambda: self._listening(), "the head to listen")
        if self.nodes > 1:
            self._start_node(self.second, ["--address", self.address, *common])
        return self

    def add_node(self, address: str, cpus: int, resources: dict[str, float]) -> int:
        """Start one more node (on ``address``, a loopback address) with custom ``resources``; its index."""
        self._start_node(
            address,
            [
                "--block",
                "--address",
                self.address,
                "--num-cpus",
                str(cpus),
                "--resources",
                json.dumps(resources),
                "--object-store-memory",
                str(80 << 20),
                "--disable-usage-stats",
            ],
        )
        return len(self._nodes) - 1

    def kill_node(self, index: int) -> None:
        """SIGKILL node ``index`` and everything it started, as when its machine is lost."""
        root = psutil.Process(self._nodes[index].pid)
        _kill([root, *root.children(recursive=True)])
        self._nodes[index].wait(10)

    def hang_node(self, index: int) -> None:
        """SIGSTOP node ``index`` and everything it started, as when its machine hangs: its ports
        still accept connections, nothing answers on them."""
        root = psutil.Process(self._nodes[index].pid)
        for process in [root, *root.children(recursive=True)]:
            try:
                process.suspend()
            except psutil.NoSuchProcess:
                pass

    def _start_node(self, address: str, arguments: list[str]) -> None:
        """``ray start`` a node on ``address`` (its dashboard agent on a free port there) with ``arguments``."""
        arguments = [
            *arguments,
            "--node-ip-address",
            address,
            "--dashboard-agent-listen-port",
            str(_free_port(address)),
        ]
        # GRPC_ENABLE_FORK_SUPPORT=false: the head forks a server for each Ray Client connection
        # from a process busy in gRPC, whose fork handlers then crash that child now and then (a
        # gRPC check failure, "next_worker->state == KICKED"); without them the child just execs.
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "GRPC_ENABLE_FORK_SUPPORT": "false"}
        self._nodes.append(
            subprocess.Popen(
                [RAY, "start", *arguments], stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        )

    def _listening(self) -> bool:
        try:
            socket.create_connection((self.head, self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def wait_for_nodes(self, ray) -> None:
        """Block until both nodes are alive (``ray`` connected to this cluster)."""
        self._wait_for(lambda: sum(node["Alive"] for node in ray.nodes()) >= 2, "both nodes to join")
        self._wait_for(lambda: ray.cluster_resources().get("CPU", 0) >= 2 * self.cpus, "both nodes' CPUs")

    def wait_for_nodes_unconnected(self) -> None:
        """Block until every node is alive, as the head's GCS says, asked from a process of its own
        (so that this one never becomes a driver of the cluster: Ray would end it when a test kills
        the head). That process imports Ray once and asks until the nodes are there: ``ray status``
        in a loop imported Ray at every ask, seconds of CPU each that the starting nodes wanted."""
        watcher = subprocess.Popen(
            [sys.executable, "-c", _NODES_ALIVE, self.address, str(self.nodes), str(START_TIMEOUT)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            self._wait_for(lambda: watcher.poll() is not None, "every node to join")
        finally:
            watcher.kill()
            output = watcher.communicate()[0]
        if watcher.returncode != 0:
            raise TimeoutError(f"the nodes did not all join: {output[-2000:]}\n{self.logs()}")

    def _wait_for(self, condition, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not condition():
            for node in self._nodes:
                if node.poll() is not None:
                    raise RuntimeError(f"a Ray node exited ({node.returncode}) while waiting for {what}: {self.logs()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {START_TIMEOUT:g} s for {what}: {self.logs()}")
            time.sleep(0.2)  # a poll of another process's start-up, bounded by the deadline

    def logs(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-4000:]

    def client_server_logs(self) -> str:
        """The tails of the head's Ray Client server logs (the proxy's and each client's own server's)."""
        logs = sorted(Path(self.temp_dir).glob("session_*/logs/ray_client_server*"))
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in logs)

    def processes(self) -> list[psutil.Process]:
        """Every process this cluster started (the nodes and what they started), still running."""
        found = []
        for node in self._nodes:
            try:
                root = psutil.Process(node.pid)
                found += [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        return found

    def stop(self) -> None:
        """End both nodes and everything they started (SIGKILL: a test cluster keeps nothing worth a
        graceful shutdown, which takes Ray 15 s and more); remove the temporary directory."""
        for process in self.processes():
            try:
                process.resume()  # a hung node (``hang_node``) takes SIGKILL either way; its parent reaps it awake
            except psutil.NoSuchProcess:
                pass
        for _ in range(5):  # a process started while the others were being killed is found next round
            doomed = [process for process in self.processes() if _running(process)]
            if not doomed:
                break
            _kill(doomed)
        for node in self._nodes:
            node.wait(10)
        self.log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _kill(processes: list[psutil.Process]) -> None:
    """SIGKILL ``processes`` (those already gone are skipped) and reap them."""
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(processes, timeout=10)


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
