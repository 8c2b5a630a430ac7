"""``DeepSpeedPlugin``: train with DeepSpeed ZeRO through the Accelerator, in Accelerate's names.

``Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=3))`` makes ``prepare`` hand the model
and its optimizer to ``deepspeed.initialize``: ZeRO-1 shards the optimizer state over the ranks,
ZeRO-2 the gradients too, ZeRO-3 the parameters too. A DeepSpeed config (a dict, a JSON file's
path) may be given instead of or with the plugin's fields; its ``"auto"`` values are filled in at
``prepare`` by Accelerate's rules (``resolve_config``). Accelerate's plugin instance is accepted
too. DeepSpeed itself is an optional extra: ``pip install notebook-launcher[deepspeed]``.

Examples:
    >>> plugin = DeepSpeedPlugin(zero_stage=3, gradient_clipping=0.5)
    >>> plugin.config["zero_optimization"]["stage"], plugin.config["gradient_clipping"]
    (3, 0.5)
    >>> DeepSpeedPlugin(zero_stage=4)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: zero_stage=4 is not a ZeRO stage: use 0, 1, 2 or 3
"""

from __future__ import annotations

import copy
import json
import warnings
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DeepSpeedPlugin", "deepspeed_plugin_from", "resolve_config", "import_deepspeed"]

_OFFLOAD_DEVICES = ("none", "cpu")
_HIDDEN_SIZE_KEYS = {
    "zero_optimization.reduce_bucket_size": lambda h: h * h,
    "zero_optimization.stage3_prefetch_bucket_size": lambda h: int(0.9 * h * h),
    "zero_optimization.stage3_param_persistence_threshold": lambda h: 10 * h,
}


@dataclass
class DeepSpeedPlugin:
    """What ``prepare`` asks of DeepSpeed.

    Args:
        hf_ds_config: a DeepSpeed config: a dict or a JSON file's path (it must have
            ``zero_optimization``); the fields below fill its ``"auto"`` values and missing keys.
        gradient_accumulation_steps: micro-batches per optimizer step; "auto" (or None, or absent
            from ``hf_ds_config``) takes the Accelerator's. A number here or in the config wins over
            the Accelerator's, as with Accelerate.
        gradient_clipping: the gradient-norm limit DeepSpeed applies at each step; "auto" (or None)
            means 1.0, Accelerate's default (and DeepSpeed's when ``hf_ds_config`` does not say);
            0 turns clipping off.
        zero_stage: 0, 1 (optimizer state sharded), 2 (and gradients) or 3 (and parameters).
        is_train_batch_min: with several loaders, the smallest batch size sets
            ``train_micro_batch_size_per_gpu`` (else the largest).
        offload_optimizer_device, offload_param_device: "none" or "cpu" (stage 2/3; parameters: 3).
        zero3_save_16bit_model: ``stage3_gather_16bit_weights_on_model_save`` in the config.
        zero3_init_flag: accepted for Accelerate code; the model is built whole and partitioned at
            ``prepare`` (construct it under ``deepspeed.zero.Init`` yourself to never hold it whole).
    """

    hf_ds_config: Any = None
    gradient_accumulation_steps: int | str | None = None
    gradient_clipping: float | str | None = None
    zero_stage: int | None = None
    is_train_batch_min: bool = True
    offload_optimizer_device: str = "none"
    offload_param_device: str = "none"
    zero3_save_16bit_model: bool = False
    zero3_init_flag: bool | None = None
    config: dict = field(init=False, repr=False)

    def __post_init__(self) -> None:
        config = _config_dict(self.hf_ds_config)
        given = bool(config)
        if "zero_optimization" not in config and config:
            raise ValueError("the DeepSpeed config has no 'zero_optimization' section: add one with its 'stage'")
        config.setdefault("zero_optimization", {})
        zero = config["zero_optimization"]
        stage = self.zero_stage if self.zero_stage is not None else zero.get("stage", 2)
        if stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage={stage!r} is not a ZeRO stage: use 0, 1, 2 or 3")
        self.zero_stage = zero["stage"] = stage
        for name, key in (("offload_optimizer_device", "offload_optimizer"), ("offload_param_device", "offload_param")):
            device = getattr(self, name)
            device = zero.get(key, {}).get("device", device) if device == "none" else device
            if device not in _OFFLOAD_DEVICES:
                raise ValueError(
                    f"{name}={device!r} is not supported: use 'none' or 'cpu' (NVMe offload is not offered)"
                )
            setattr(self, name, device)
            if device != "none":
                zero.setdefault(key, {})["device"] = device
        if self.zero3_save_16bit_model:
            zero["stage3_gather_16bit_weights_on_model_save"] = True
        steps = self.gradient_accumulation_steps
        if steps is not None and steps != "auto":
            config["gradient_accumulation_steps"] = steps
        config.setdefault("gradient_accumulation_steps", "auto")
        clipping = self.gradient_clipping
        if clipping not in (None, "auto"):
            config["gradient_clipping"] = clipping  # 0 too: DeepSpeed's own default is 1.0
        elif not given:
            config.setdefault("gradient_clipping", "auto")  # a config of the user's clips only if it says so
        config.setdefault("train_micro_batch_size_per_gpu", "auto")
        config.setdefault("train_batch_size", "auto")
        config["steps_per_print"] = float("inf")  # DeepSpeed's own progress lines would flood every rank's log
        self.config = config

    argument_name = "deepspeed_plugin"

    def accumulation_steps(self, requested: int) -> int:
        """The micro-batches per step: a number in the config wins over the Accelerator's
        ``requested`` (warned when both were set and differ), as with Accelerate."""
        steps = self.config["gradient_accumulation_steps"]
        if steps == "auto":
            return requested
        if requested not in (1, steps):
            warnings.warn(
                f"gradient_accumulation_steps={requested} but the DeepSpeed config says {steps}: using {steps}",
                stacklevel=3,
            )
        return int(steps)

    @property
    def deepspeed_config(self) -> dict:
        """The config under Accelerate's attribute name."""
        return self.config


def resolve_config(
    plugin: DeepSpeedPlugin,
    *,
    batch_sizes: list[int | None],
    num_processes: int,
    gradient_accumulation_steps: int,
    mixed_precision: str,
    split_batches: bool = False,
    model: Any = None,
    client_optimizer: bool = True,
    placeholders: dict[str, Any] | None = None,
) -> dict:
    """The plugin's config with every ``"auto"`` filled, as Accelerate's ``prepare`` fills it: the
    micro-batch from the loaders' batch sizes, the global batch, accumulation, clipping (1.0), the
    precision's ``bf16``/``fp16`` sections, hidden-size buckets from ``model.config``, and the
    optimizer's and schedule's values from ``DummyOptim``/``DummyScheduler`` (``placeholders``,
    dotted keys: ``placeholders.placeholder_values``).

    Examples:
        >>> config = resolve_config(DeepSpeedPlugin(zero_stage=2), batch_sizes=[8], num_processes=2,
        ...                         gradient_accumulation_steps=4, mixed_precision="bf16")
        >>> config["train_micro_batch_size_per_gpu"], config["train_batch_size"], config["bf16"]
        (8, 64, {'enabled': True})
    """
    config = copy.deepcopy(plugin.config)
    micro = config["train_micro_batch_size_per_gpu"]
    if micro == "auto":
        micro = _micro_batch(batch_sizes, num_processes, split_batches, plugin.is_train_batch_min)
        config["train_micro_batch_size_per_gpu"] = micro
    if config["gradient_accumulation_steps"] == "auto":
        config["gradient_accumulation_steps"] = gradient_accumulation_steps
    if config["train_batch_size"] == "auto":
        config["train_batch_size"] = micro * config["gradient_accumulation_steps"] * num_processes
    if config.get("gradient_clipping") == "auto":
        config["gradient_clipping"] = 1.0
    zero = config["zero_optimization"]
    if zero.get("stage3_gather_16bit_weights_on_model_save") == "auto":
        zero["stage3_gather_16bit_weights_on_model_save"] = False
    _fill_precision(config, mixed_precision)
    _fill_hidden_size(config, model)
    _fill_optimizer(config, client_optimizer)
    _fill_auto(config, placeholders or {})
    leftover = sorted(key for key, value in _flatten(config).items() if value == "auto")
    if leftover:
        raise ValueError(f"DeepSpeed config values left 'auto' that cannot be filled: {', '.join(leftover)}")
    return config


def deepspeed_plugin_from(plugin: Any) -> DeepSpeedPlugin | None:
    """Our plugin from ours, a config dict or JSON path, Accelerate's plugin (its resolved config) or None.

    Examples:
        >>> deepspeed_plugin_from({"zero_optimization": {"stage": 1}}).zero_stage
        1
    """
    if plugin is None or isinstance(plugin, DeepSpeedPlugin):
        return plugin
    if isinstance(plugin, (dict, str)):
        return DeepSpeedPlugin(hf_ds_config=plugin)
    if getattr(plugin, "enable_msamp", False):
        raise ValueError("DeepSpeedPlugin(enable_msamp=True) is not supported: MS-AMP fp8 training is not offered")
    config = getattr(plugin, "deepspeed_config", None)
    if not isinstance(config, dict):
        raise TypeError(
            f"deepspeed_plugin must be a DeepSpeedPlugin, a config dict or path, not {type(plugin).__name__}"
        )
    clipping = getattr(plugin, "gradient_clipping", None)
    return DeepSpeedPlugin(
        hf_ds_config=copy.deepcopy(config),
        # Accelerate leaves a clipping of 0 out of its config, where DeepSpeed then clips at 1.0: say it
        gradient_clipping=clipping if isinstance(clipping, (int, float)) else None,
        is_train_batch_min=bool(getattr(plugin, "is_train_batch_min", True)),
        zero3_init_flag=getattr(plugin, "zero3_init_flag", None),
    )


def import_deepspeed() -> Any:
    """``deepspeed``, or an ``ImportError`` that says how to install it.

    Examples:
        >>> callable(import_deepspeed)
        True
    """
    try:
        import deepspeed
    except ImportError as error:
        raise ImportError(
            "deepspeed_plugin needs DeepSpeed, which is not installed: pip install 'notebook-launcher[deepspeed]'"
        ) from error
    _skip_shared_memory_op(deepspeed)
    return deepspeed


SHARED_MEMORY_OP = "deepspeed_shm_comm"


def _skip_shared_memory_op(deepspeed: Any) -> None:
    """Keep DeepSpeed from compiling its shared-memory all-reduce when its backend starts.

    On a CPU machine DeepSpeed's communication backend first probes every op it has by running the
    C compiler, then compiles this op with the C++ compiler (~30 s on two cores) before the first
    step. torch guards that build with a lock file in ~/.cache/torch_extensions: a rank ended while
    it builds (a stop, a sibling's failure) leaves the file behind, and every later launch then
    waits on it for ever. The op serves only DeepSpeed's tensor-parallel inference all-reduce
    (``LOCAL_SIZE`` set), never training, where the process group's all-reduce does the work; so
    it is marked unavailable, which DeepSpeed reads from its ``__compatible_ops__`` table (an
    editable cache, filled on first access) before building anything.
    """
    table = deepspeed.ops.__dict__.get("__compatible_ops__")
    if table is None:  # not probed yet: skip the probe too (it only answers this question)
        deepspeed.ops.__compatible_ops__ = {SHARED_MEMORY_OP: False}
    else:
        table[SHARED_MEMORY_OP] = False


def _config_dict(source: Any) -> dict:
    if source is None or source == "none":
        return {}
    if isinstance(source, dict):
        return copy.deepcopy(source)
    if isinstance(source, str):
        with open(source, encoding="utf-8") as handle:
            return json.load(handle)
    inner = getattr(source, "config", None)  # Accelerate's HfDeepSpeedConfig
    if isinstance(inner, dict):
        return copy.deepcopy(inner)
    raise TypeError(f"hf_ds_config must be a dict or a JSON file's path, not {type(source).__name__}")


def _micro_batch(batch_sizes: list[int | None], num_processes: int, split_batches: bool, smallest: bool) -> int:
    if not batch_sizes:
        raise ValueError(
            "DeepSpeed needs train_micro_batch_size_per_gpu: pass a DataLoader to the same prepare() call as the"
            " model, or set it in the DeepSpeed config"
        )
    if any(size is None for size in batch_sizes):
        raise ValueError(
            "a DataLoader given to prepare() has batch_size=None: set train_micro_batch_size_per_gpu in the"
            " DeepSpeed config"
        )
    sizes = [size // num_processes if split_batches else size for size in batch_sizes if size is not None]
    return min(sizes) if smallest else max(sizes)


def _fill_precision(config: dict, mixed_precision: str) -> None:
    wanted = {"fp16": mixed_precision == "fp16", "bf16": mixed_precision == "bf16"}
    for name, enabled in wanted.items():
        other = "bf16" if name == "fp16" else "fp16"
        section = config.setdefault(name, {})
        if enabled and str(config.get(other, {}).get("enabled", False)).lower() == "true":
            raise ValueError(f"mixed_precision={mixed_precision!r} but the DeepSpeed config enables {other}")
        if section.get("enabled", "auto") == "auto" or enabled:
            section["enabled"] = enabled
        if name == "fp16" and enabled:
            section.setdefault("auto_cast", True)


def _fill_optimizer(config: dict, client_optimizer: bool) -> None:
    """A torch optimizer given to prepare (DeepSpeed calls it untested), one the config names, or
    none (a model prepared for evaluation only)."""
    if not client_optimizer:
        return
    if "optimizer" in config:
        raise ValueError("the DeepSpeed config names an optimizer and prepare() was given one too: remove one of them")
    config["zero_allow_untested_optimizer"] = True
    if config["zero_optimization"].get("offload_optimizer", {}).get("device", "none") != "none":
        config.setdefault("zero_force_ds_cpu_optimizer", False)  # the user's torch optimizer steps on the CPU


def _fill_auto(config: dict, values: dict[str, Any]) -> None:
    """Each dotted key of ``values`` whose entry in ``config`` is ``"auto"`` (others are left as written)."""
    for dotted, value in values.items():
        *parents, leaf = dotted.split(".")
        node: Any = config
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get(leaf) == "auto":
            node[leaf] = value


def _fill_hidden_size(config: dict, model: Any) -> None:
    flat = _flatten(config)
    wanted = [key for key in _HIDDEN_SIZE_KEYS if flat.get(key) == "auto"]
    if not wanted:
        return
    model_config = getattr(model, "config", None)
    sizes = getattr(model_config, "hidden_sizes", None) or [getattr(model_config, "hidden_size", None)]
    if not sizes or sizes[0] is None:
        raise ValueError(
            f"DeepSpeed config values {', '.join(wanted)} are 'auto', which needs the model's config.hidden_size;"
            " this model has none: give them numbers"
        )
    hidden = max(sizes)
    for key in wanted:
        config["zero_optimization"][key.split(".", 1)[1]] = _HIDDEN_SIZE_KEYS[key](hidden)


def _flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
