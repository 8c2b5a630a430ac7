"""Check a downloaded GPU kit before it travels: one wheel per pinned line (and DeepSpeed's), one
version of each, no torch or CUDA wheel (the device's own torch must stay), within the size that
fits the device tool's 64 MiB working tree beside the repository.

Run: python bench/gpu/kit_check.py KIT_DIR bench/gpu/kit.txt
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

LIMIT_MIB = 40  # the repository takes a few MiB of the 64 MiB that travel

FORBIDDEN = re.compile(r"^(torch|nvidia_|triton)", re.IGNORECASE)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def pinned(requirements: Path) -> dict[str, str]:
    pins = {}
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonical(name)] = version
    return pins


def problems(kit: Path, requirements: Path) -> list[str]:
    """What is wrong with the kit, as sentences; empty when it may travel."""
    wheels = {}
    found = []
    for wheel in sorted(kit.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        if canonical(name) in wheels:
            found.append(f"two versions of {name}: {wheels[canonical(name)]} and {version}")
        wheels[canonical(name)] = version
        if FORBIDDEN.match(name):
            found.append(f"{wheel.name} would replace the device's own torch stack")
    expected = {**pinned(requirements), "deepspeed": None}
    for name, version in expected.items():
        if name not in wheels:
            found.append(f"no wheel for {name}")
        elif version is not None and wheels[name] != version:
            found.append(f"{name} is {wheels[name]}, pinned {version}")
    found += [f"{name} is not in {requirements}" for name in wheels if name not in expected]
    size = sum(wheel.stat().st_size for wheel in kit.glob("*.whl")) / 2**20
    if size > LIMIT_MIB:
        found.append(f"the kit is {size:.1f} MiB, over {LIMIT_MIB} MiB")
    return found


def main() -> None:
    kit, requirements = Path(sys.argv[1]), Path(sys.argv[2])
    found = problems(kit, requirements)
    for problem in found:
        print(f"gpu kit: {problem}", file=sys.stderr)
    size = sum(wheel.stat().st_size for wheel in kit.glob("*.whl")) / 2**20
    print(f"gpu kit: {len(list(kit.glob('*.whl')))} wheels, {size:.1f} MiB in {kit}")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
