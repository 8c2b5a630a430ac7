"""The sharding ``accelerate launch`` chose, read from the environment it sets, for code it runs.

``accelerate launch --use_deepspeed ...`` / ``--use_fsdp ...`` (or ``accelerate config``) tells the
script's ``Accelerator()`` what to shard with through environment variables
(``ACCELERATE_USE_DEEPSPEED``, ``ACCELERATE_DEEPSPEED_CONFIG_FILE``, ``ACCELERATE_USE_FSDP``,
``FSDP_VERSION``, ``FSDP_STATE_DICT_TYPE``, ...). An ``Accelerator()`` given no plugin takes them
the same way: Accelerate's own plugin classes read the variables (so every name means what it
means there), and trainer_core converts the result as it converts a plugin passed in.

Examples:
    >>> launch_plugins({}) == (None, None)
    True
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["launch_plugins"]


def _asked(environment: Mapping[str, str], name: str) -> bool:
    return environment.get(name, "false").lower() in ("1", "true", "yes")


def launch_plugins(environment: Mapping[str, str] | None = None) -> tuple[Any, Any]:
    """(FSDP plugin, DeepSpeed plugin) of Accelerate's classes as ``accelerate launch`` set them up,
    each None where it did not ask for one. ``environment`` (``os.environ`` by default) is where the
    two switches are looked up; Accelerate's classes read their settings from ``os.environ``."""
    environment = os.environ if environment is None else environment
    wanted = [(name, cls) for name, cls in _PLUGINS if _asked(environment, name)]
    if not wanted:
        return None, None
    try:
        import accelerate.utils as accelerate_utils
    except ImportError as err:
        names = " and ".join(f"{name}=true" for name, _ in wanted)
        raise ImportError(
            f"{names} (set by `accelerate launch`) asks for sharding configured by Accelerate's variables;"
            " reading them needs the accelerate package: pip install accelerate, or pass the plugin to Accelerator()"
        ) from err
    made = {name: getattr(accelerate_utils, cls)() for name, cls in wanted}
    return made.get("ACCELERATE_USE_FSDP"), made.get("ACCELERATE_USE_DEEPSPEED")


_PLUGINS = (
    ("ACCELERATE_USE_FSDP", "FullyShardedDataParallelPlugin"),
    ("ACCELERATE_USE_DEEPSPEED", "DeepSpeedPlugin"),
)
