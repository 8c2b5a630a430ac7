"""FIFO gates: a rank blocks until the test opens its gate, with no sleeps and no shared-gate race.

Each rank gets its own FIFO (``<dir>/gate<RANK>``): opening a FIFO for writing blocks until its reader
has opened it, so ``open_gates`` returns only once every rank has reached its gate and been released.
A single FIFO shared by two ranks would let the writer release one rank and leave the other, which
opened it later, blocked for ever.
"""

from __future__ import annotations

import os


def gate_code(directory):
    """Cell code defining ``wait_at_gate()`` (call it inside the launched function) and making the FIFOs."""
    return (
        f"GATE_DIR = {str(directory)!r}\n"
        "def wait_at_gate():\n"
        "    with open(os.path.join(GATE_DIR, 'gate' + os.environ['RANK'])) as f:\n"
        "        f.read()\n"
        "for _r in range(8):\n"
        "    os.mkfifo(os.path.join(GATE_DIR, f'gate{_r}'))\n"
    )


def open_gates(directory, ranks):
    """Release ``ranks`` (each open waits until that rank is at its gate)."""
    for rank in ranks:
        with open(os.path.join(directory, f"gate{rank}"), "w") as fifo:
            fifo.write("go")
