"""Entry point of a spawned rank: ``python -m notebook_launcher.rank.spawn_main PAYLOAD SPEC``."""

from __future__ import annotations

import base64
import pickle
import sys

import cloudpickle

from .bootstrap import WorkerPipes, run_worker


def main(payload_path, encoded_spec):
    spec, events_fd = pickle.loads(base64.b64decode(encoded_spec))

    def load_payload():
        with open(payload_path, "rb") as file:
            kernel_path = pickle.load(file)
            sys.path.extend(entry for entry in kernel_path if entry not in sys.path)
            return cloudpickle.load(file)

    return run_worker(spec, WorkerPipes(events=events_fd, stdout=1, stderr=2), load_payload)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
