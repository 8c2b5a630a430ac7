"""Helpers for tests where kernels act as the nodes of one launch (over loopback)."""

from __future__ import annotations

SECRET = "secret='a-secret-both-cells-share'"  # the launch argument every node's cell passes


def free_port(kernel):
    """A free port on 127.0.0.1, picked in ``kernel`` (node 0's)."""
    kernel.ok("from notebook_launcher.launching.ports import free_port\nport = free_port('127.0.0.1')")
    return kernel.eval("port")
