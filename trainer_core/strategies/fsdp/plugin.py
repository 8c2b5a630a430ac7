"""``FullyShardedDataParallelPlugin``: how the Accelerator shards a model with FSDP2, in Accelerate's names.

``Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(...))`` makes ``prepare`` shard the model
with torch's ``fully_shard`` (FSDP2): each rank holds 1/N of every parameter, its gradient and its
optimizer state. Accelerate's own plugin instance is accepted too (its attributes are read by
name); an option this plugin does not support is refused by name instead of being ignored.

Examples:
    >>> plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap",
    ...                                         transformer_cls_names_to_wrap=["Block"])
    >>> plugin.fsdp_version, plugin.reshard_after_forward, plugin.state_dict_type
    (2, True, 'SHARDED_STATE_DICT')
    >>> FullyShardedDataParallelPlugin(fsdp_version=1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: fsdp_version=1 is not supported: trainer_core shards with FSDP2 (fsdp_version=2); ...
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import torch

__all__ = ["FullyShardedDataParallelPlugin", "fsdp_plugin_from"]

WRAP_POLICIES = ("transformer_based_wrap", "size_based_wrap", "no_wrap")
STATE_DICT_TYPES = ("SHARDED_STATE_DICT", "FULL_STATE_DICT")
_RESHARD_NAMES = {"FULL_SHARD": True, "HYBRID_SHARD": True, "SHARD_GRAD_OP": False, "NO_SHARD": False}
_DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}
# options of Accelerate's plugin with no meaning for FSDP2 here, and the values that mean "not used"
_IGNORED: dict[str, tuple[Any, ...]] = {
    "use_orig_params": (None, True, False),
    "sync_module_states": (None, True, False),
    "limit_all_gathers": (None, True, False),
    "forward_prefetch": (None, False),
    "backward_prefetch": (None,),
    "ignored_modules": (None, [], ()),
    "param_init_fn": (None,),
    "device_id": (None,),
    "activation_checkpointing_offload": (None, False),
    "cpu_offload": (None, False),
}


@dataclass
class FullyShardedDataParallelPlugin:
    """How ``prepare`` shards a model (FSDP2).

    Args:
        fsdp_version: 2 (FSDP1 is not offered: its full state dict crashes on CPUs).
        auto_wrap_policy: which submodules become units of their own before the root:
            "transformer_based_wrap" (modules whose class is named in ``transformer_cls_names_to_wrap``,
            or the model's ``_no_split_modules``), "size_based_wrap" (modules with at least
            ``min_num_params`` parameters of their own subtree), "no_wrap", a callable
            ``(module) -> bool``, or None ("transformer_based_wrap" when class names are given).
        transformer_cls_names_to_wrap: class names (a list, or one comma-separated string).
        min_num_params: the size-based policy's threshold.
        reshard_after_forward: free the gathered parameters after forward (True, ZeRO-3-like) or keep
            them until backward (False, ZeRO-2-like); Accelerate's sharding strategy names work too.
        mixed_precision_policy: torch's ``MixedPrecisionPolicy``, a dict of its arguments, or "bf16"
            / "fp16" (parameters in that dtype for compute, gradients reduced in fp32).
        activation_checkpointing: recompute each wrapped unit's activations in backward.
        state_dict_type: how ``save_state`` writes the model and optimizer: "SHARDED_STATE_DICT"
            (each rank its shards, ``torch.distributed.checkpoint``) or "FULL_STATE_DICT".
        cpu_ram_efficient_loading: only rank 0's model holds real weights (the others may be on the
            "meta" device); ``prepare`` shards it and sends each rank its part.
        cpu_offload: keep the shards (and the optimizer step) on the CPU between uses.
    """

    fsdp_version: int = 2
    auto_wrap_policy: str | Callable[[torch.nn.Module], bool] | None = None
    transformer_cls_names_to_wrap: list[str] | str | None = None
    min_num_params: int = 100_000_000
    reshard_after_forward: bool | str = True
    mixed_precision_policy: Any = None
    activation_checkpointing: bool = False
    state_dict_type: str = "SHARDED_STATE_DICT"
    cpu_ram_efficient_loading: bool = False
    cpu_offload: bool = False
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.fsdp_version != 2:
            raise ValueError(
                f"fsdp_version={self.fsdp_version!r} is not supported: trainer_core shards with FSDP2"
                " (fsdp_version=2); FSDP1's full state dict with offload_to_cpu crashes on CPUs"
            )
        if isinstance(self.transformer_cls_names_to_wrap, str):
            names = self.transformer_cls_names_to_wrap.split(",")
            self.transformer_cls_names_to_wrap = [name.strip() for name in names if name.strip()]
        if self.auto_wrap_policy is None and self.transformer_cls_names_to_wrap:
            self.auto_wrap_policy = "transformer_based_wrap"
        if isinstance(self.auto_wrap_policy, str):
            self.auto_wrap_policy = _wrap_policy_name(self.auto_wrap_policy)
        if isinstance(self.reshard_after_forward, str):
            self.reshard_after_forward = _reshard(self.reshard_after_forward)
        self.state_dict_type = _one_of(
            "state_dict_type", str(self.state_dict_type).upper().split(".")[-1], STATE_DICT_TYPES
        )
        for name, value in self.extra.items():
            if value not in _IGNORED.get(name, ()):
                raise ValueError(f"FSDP option {name}={value!r} is not supported by trainer_core's FSDP2 path")

    argument_name = "fsdp_plugin"

    def mixed_precision(self) -> Any:
        """The ``MixedPrecisionPolicy`` for ``fully_shard`` (None: parameters keep their dtype)."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        policy = self.mixed_precision_policy
        if policy is None or isinstance(policy, MixedPrecisionPolicy):
            return policy
        if isinstance(policy, str):
            dtypes = {
                "bf16": torch.bfloat16,
                "bfloat16": torch.bfloat16,
                "fp16": torch.float16,
                "float16": torch.float16,
            }
            if policy not in dtypes:
                raise ValueError(
                    f"mixed_precision_policy must be 'bf16', 'fp16', a dict or a MixedPrecisionPolicy, got {policy!r}"
                )
            return MixedPrecisionPolicy(param_dtype=dtypes[policy], reduce_dtype=torch.float32)
        if isinstance(policy, dict):
            return MixedPrecisionPolicy(**policy)
        return MixedPrecisionPolicy(  # Accelerate's FSDP1-style MixedPrecision: its dtypes
            param_dtype=getattr(policy, "param_dtype", None), reduce_dtype=getattr(policy, "reduce_dtype", None)
        )


def _one_of(option: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{option} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _wrap_policy_name(policy: str) -> str:
    """Ours or Accelerate's names (``TRANSFORMER_BASED_WRAP``, torch's ``transformer_auto_wrap_policy``)."""
    policy = policy.lower().replace("transformer_auto_wrap_policy", "transformer_based_wrap")
    return _one_of("auto_wrap_policy", policy.replace("size_based_auto_wrap_policy", "size_based_wrap"), WRAP_POLICIES)


def _reshard(name: str) -> bool:
    """Accelerate's sharding strategy names as FSDP2's reshard_after_forward."""
    return _RESHARD_NAMES[_one_of("reshard_after_forward", name.upper().split(".")[-1], tuple(_RESHARD_NAMES))]


def fsdp_plugin_from(plugin: Any) -> FullyShardedDataParallelPlugin | None:
    """Our plugin from ours, Accelerate's (read by attribute name) or None.

    Examples:
        >>> fsdp_plugin_from(None) is None
        True
    """
    if plugin is None or isinstance(plugin, FullyShardedDataParallelPlugin):
        return plugin
    ours = {spec.name for spec in fields(FullyShardedDataParallelPlugin)} - {"extra"}
    values = {name: getattr(plugin, name) for name in ours if hasattr(plugin, name)}
    sharding = getattr(plugin, "sharding_strategy", None)  # Accelerate's FSDP1 name for reshard_after_forward
    if sharding is not None and "reshard_after_forward" not in values:
        values["reshard_after_forward"] = str(sharding)
    if values.get("reshard_after_forward") is None:
        values.pop("reshard_after_forward", None)
    if values.get("min_num_params") in (None, 0):
        values.pop("min_num_params", None)
    extra = {name: getattr(plugin, name) for name in _IGNORED if hasattr(plugin, name)}
    offload = values.get("cpu_offload")
    if offload is not None and not isinstance(offload, bool):  # FSDP1's CPUOffload or FSDP2's policy object
        values["cpu_offload"] = bool(getattr(offload, "offload_params", type(offload).__name__ == "CPUOffloadPolicy"))
    policy = values.get("auto_wrap_policy")
    if callable(policy):  # Accelerate resolves its names to torch's FSDP1 policy functions
        name = getattr(getattr(policy, "func", policy), "__name__", "")
        if name in ("transformer_auto_wrap_policy", "size_based_auto_wrap_policy"):
            values["auto_wrap_policy"] = name
    extra.pop("cpu_offload", None)
    return FullyShardedDataParallelPlugin(**values, extra=extra)
