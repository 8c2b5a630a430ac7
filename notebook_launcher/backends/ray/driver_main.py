"""The kernel's Ray driver process (``driver_process``): run as a script, with Ray alone imported.

``python driver_main.py ADDRESS`` connects to the cluster at ADDRESS ("host:port" or "auto") as a
Ray driver, serves Ray Client on a free loopback port, and writes one line to its standard output:
``{"client": "ray://127.0.0.1:PORT", "gcs": "HOST:PORT", "node": "HOST"}`` (the node address it
took), or ``{"error": "..."}`` when it could not connect. It then serves until its standard input
ends (the kernel stopped it, or ended), and leaves the cluster.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
from typing import Any

LOOPBACK = "127.0.0.1"
PORT_TRIES = 5  # a free port found, then taken by another process before the server binds it: try another


def _init_options() -> dict:
    return {"log_to_driver": False, "logging_level": logging.WARNING, "configure_logging": False}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def main(address: str) -> int:
    try:
        import ray
        from ray.util.client.server.server import serve

        ray.init(address=address, **_init_options())
        gcs = str(ray.get_runtime_context().gcs_address)
        node = str(ray.util.get_node_ip_address())
    except Exception as err:  # said to the kernel, which raises it there
        print(json.dumps({"error": f"{type(err).__name__}: {err}"}), flush=True)
        return 1

    def connect(job_config: Any = None, **kwargs: Any) -> Any:
        # Ray's server leaves the cluster when its last client goes; a client that comes back after
        # that connects again to the same cluster (never to a cluster Ray would find by itself)
        if not ray.is_initialized():
            return ray.init(address=gcs, job_config=job_config, **_init_options())
        return None

    for attempt in range(PORT_TRIES):
        port = _free_port()
        try:
            server = serve(LOOPBACK, port, ray_connect_handler=connect)
            break
        except RuntimeError as err:  # gRPC could not bind the port
            if attempt == PORT_TRIES - 1:
                print(json.dumps({"error": f"no port for Ray Client: {err}"}), flush=True)
                return 1
    print(json.dumps({"client": f"ray://{LOOPBACK}:{port}", "gcs": gcs, "node": node}), flush=True)
    sys.stdin.buffer.read()  # until the kernel closes it, or ends
    server.grpc_server.stop(0)
    if ray.is_initialized():
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
