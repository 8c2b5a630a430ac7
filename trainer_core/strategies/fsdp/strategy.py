"""Fully sharded data parallel (FSDP2, torch's ``fully_shard``): each rank holds 1/N of the model.

``setup_module`` makes units of the submodules the plugin's wrap policy picks, then of the root:
their parameters become ``DTensor`` shards, gathered for each unit's forward and backward and
freed after; gradients are reduce-scattered, so each rank keeps (and steps) only its shard of the
gradients and the optimizer state. ``fully_shard`` replaces the parameter objects, so optimizers
built before ``prepare`` are pointed at the new ones (``PreparedObjects.note_moved``); an optimizer
left pointing at the old ones would update nothing.

Examples:
    >>> from trainer_core.strategies.fsdp.plugin import FullyShardedDataParallelPlugin
    >>> from trainer_core.state import DistributedState
    >>> strategy = FSDP2Strategy(DistributedState.from_environment(use_cpu=True), FullyShardedDataParallelPlugin())
    >>> strategy.name
    'fsdp'
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..parallel import ParallelStrategy
from .plugin import FullyShardedDataParallelPlugin

__all__ = ["FSDP2Strategy", "wrapped_units"]


class FSDP2Strategy(ParallelStrategy):
    name = "fsdp"
    shards_state = True

    @classmethod
    def for_plugin(cls, state: Any, plugin: Any, mesh: Any = None) -> FSDP2Strategy:
        return cls(state, plugin, mesh)

    def __init__(self, state: Any, plugin: FullyShardedDataParallelPlugin, mesh: Any = None) -> None:
        super().__init__(state)
        self.plugin = plugin
        self.shard_mesh = mesh["dp_shard"] if mesh is not None else None  # None: every rank

    def compile(self, model: torch.nn.Module, settings: Any) -> torch.nn.Module:
        """In place (``module.compile()``), as Accelerate compiles FSDP2 models: the sharded module
        stays the module that the optimizer, the state dicts and the checkpoints know."""
        from ...compiling import compile_in_place

        compile_in_place(model, settings)
        return model

    def data_shard(self) -> tuple[int, int]:
        """On a mesh, the ranks that differ only in their tensor-parallel coordinate share batches."""
        if self.shard_mesh is None:
            return super().data_shard()
        return self.shard_mesh.get_local_rank(), self.shard_mesh.size()

    def setup_module(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, OffloadPolicy, fully_shard

        if isinstance(model, FSDPModule):
            return model
        plugin = self.plugin
        _check_devices(model, self.state.device, plugin.cpu_ram_efficient_loading)
        full = model.state_dict() if plugin.cpu_ram_efficient_loading and self.state.is_main_process else None
        units = wrapped_units(model, plugin)
        if plugin.activation_checkpointing:
            _checkpoint_activations(model, units)
        options: dict[str, Any] = {
            "mesh": self.shard_mesh,
            "reshard_after_forward": plugin.reshard_after_forward,
            "offload_policy": CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
            if plugin.cpu_offload
            else OffloadPolicy(),
        }
        policy = plugin.mixed_precision()
        if policy is not None:
            options["mp_policy"] = policy
        if not plugin.cpu_offload and not plugin.cpu_ram_efficient_loading:
            model = model.to(self.state.device)
        for unit in units:
            _check_one_dtype(unit)
            fully_shard(unit, **options)
        _check_one_dtype(model)
        fully_shard(model, **options)
        if plugin.cpu_ram_efficient_loading:
            _load_from_rank_0(model, full, self.state.device, plugin.cpu_offload)
        return model

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        return _gradient_sync(model, False)

    def clip_grad_norm(self, parameters: Any, max_norm: float, norm_type: float = 2) -> Any:
        """torch's ``clip_grad_norm_``, also when the gradients live on different meshes (with tensor
        parallelism: the split layers on the 2-D mesh, the plain ones on "dp_shard"), which it cannot
        stack: each mesh's norm is computed whole, then combined, and every gradient scaled alike."""
        parameters = [p for p in parameters if p.grad is not None]
        groups: dict[Any, list[torch.Tensor]] = {}
        for parameter in parameters:
            groups.setdefault(getattr(parameter.grad, "device_mesh", None), []).append(parameter.grad)
        if len(groups) <= 1:
            return super().clip_grad_norm(parameters, max_norm, norm_type)
        from torch.nn.utils import get_total_norm

        norms = [get_total_norm(grads, norm_type) for grads in groups.values()]
        whole = [norm.full_tensor() if hasattr(norm, "full_tensor") else norm for norm in norms]
        total = get_total_norm(whole, norm_type)
        coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        with torch.no_grad():
            for grads in groups.values():
                for grad in grads:  # a scale applies to each shard as to the whole tensor
                    (grad.to_local() if hasattr(grad, "to_local") else grad).mul_(coefficient.to(grad.device))
        return total

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model  # fully_shard changes the module in place: it is the user's module

    def module_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The full weights, gathered to rank 0 on the CPU (a collective: every rank calls it);
        the other ranks get ``{}``, as with Accelerate."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def load_module_state_dict(self, model: torch.nn.Module, state_dict: dict[str, Any]) -> None:
        """Full weights (on rank 0 at least) into the shards of every rank."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(model, state_dict, options=options)

    def save_training_state(self, models: list, optimizers: list, directory: str) -> bool:
        """Write the models and optimizers in their sharded form (every rank; see ``checkpoint``)."""
        from .checkpoint import save_sharded

        kind = self.plugin.state_dict_type
        save_sharded(models, _paired(models, optimizers), directory, kind, self.state.is_main_process)
        return True

    def load_training_state(self, models: list, optimizers: list, directory: str) -> bool:
        from .checkpoint import load_sharded

        kind = self.plugin.state_dict_type
        load_sharded(models, _paired(models, optimizers), directory, kind, self.state.is_main_process)
        return True


def _paired(models: list, optimizers: list) -> list[tuple[torch.nn.Module, torch.optim.Optimizer]]:
    """Each optimizer with the model whose parameters it updates (the state dict functions need both)."""
    pairs = []
    for optimizer in optimizers:
        inner = getattr(optimizer, "optimizer", optimizer)
        updated = {id(p) for group in inner.param_groups for p in group["params"]}
        owner = next((model for model in models if any(id(p) in updated for p in model.parameters())), None)
        if owner is None:
            raise ValueError("an optimizer updates none of the prepared models' parameters: prepare its model too")
        pairs.append((owner, inner))
    return pairs


def wrapped_units(model: torch.nn.Module, plugin: FullyShardedDataParallelPlugin) -> list[torch.nn.Module]:
    """The submodules that become FSDP units of their own (inner ones first), as the plugin's policy says.

    A container without a forward of its own (``ModuleList``, ``ModuleDict``) is never a unit, whatever
    the policy: ``fully_shard`` cannot run one (the size-based policy would pick a list of blocks);
    its children are picked on their own.

    Examples:
        >>> from trainer_core.strategies.fsdp.plugin import FullyShardedDataParallelPlugin
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 2))
        >>> plugin = FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap="Linear")
        >>> [type(unit).__name__ for unit in wrapped_units(model, plugin)]
        ['Linear', 'Linear']
    """
    picks = _policy(model, plugin)
    units = [module for name, module in model.named_modules() if name and picks(module) and _runs(module)]
    return list(reversed(units))  # children before their parents: fully_shard wants the inner ones first


def _runs(module: torch.nn.Module) -> bool:
    """Whether ``module`` has a forward ``fully_shard`` can hook (a bare list or dict of modules has not)."""
    containers = (torch.nn.ModuleList, torch.nn.ModuleDict)
    return not (isinstance(module, containers) and type(module).forward is torch.nn.Module.forward)


def _policy(model: torch.nn.Module, plugin: FullyShardedDataParallelPlugin) -> Callable[[torch.nn.Module], bool]:
    policy = plugin.auto_wrap_policy
    if callable(policy):
        return policy
    if policy == "transformer_based_wrap":
        names = set(plugin.transformer_cls_names_to_wrap or getattr(model, "_no_split_modules", None) or [])
        if not names:
            raise ValueError(
                "auto_wrap_policy='transformer_based_wrap' needs transformer_cls_names_to_wrap (the model has no"
                " _no_split_modules)"
            )
        present = {type(module).__name__ for module in model.modules()}
        missing = sorted(names - present)
        if missing:
            raise ValueError(
                f"transformer_cls_names_to_wrap names classes the model does not have: {', '.join(missing)}"
            )
        return lambda module: type(module).__name__ in names
    if policy == "size_based_wrap":
        threshold = plugin.min_num_params
        return lambda module: sum(p.numel() for p in module.parameters()) >= threshold
    return lambda module: False


def _check_devices(model: torch.nn.Module, device: torch.device, rank_0_loads: bool) -> None:
    """A model on another accelerator than this rank's cannot be sharded here: say so."""
    for name, parameter in model.named_parameters():
        kind = parameter.device.type
        if kind == "meta" and rank_0_loads:
            continue
        if kind not in ("cpu", device.type):
            raise ValueError(
                f"FSDP cannot shard parameter {name!r} on device {parameter.device}: this rank trains on"
                f" {device}; create the model on the CPU (or on 'meta' with cpu_ram_efficient_loading)"
            )


def _check_one_dtype(unit: torch.nn.Module) -> None:
    """One FSDP unit's own parameters (those not in an inner unit) must share a dtype."""
    from torch.distributed.fsdp import FSDPModule

    inner = {id(p) for m in unit.modules() if m is not unit and isinstance(m, FSDPModule) for p in m.parameters()}
    dtypes: dict[torch.dtype, str] = {}
    for name, parameter in unit.named_parameters():
        if id(parameter) not in inner:
            dtypes.setdefault(parameter.dtype, name)
    if len(dtypes) > 1:
        found = ", ".join(f"{dtype} ({name})" for dtype, name in dtypes.items())
        raise ValueError(
            f"the parameters of one FSDP unit ({type(unit).__name__}) have different dtypes: {found}; cast the"
            " model to one dtype, or wrap the differing submodules as units of their own"
        )


def _checkpoint_activations(model: torch.nn.Module, units: list[torch.nn.Module]) -> None:
    """Recompute each unit's activations in backward; the composable form keeps parameter names as they
    were (a wrapper module would rename them, and checkpoints and re-pointed optimizers go by name)."""
    from torch.distributed._composable import checkpoint

    for unit in units or [model]:
        checkpoint(unit)


def _load_from_rank_0(model: torch.nn.Module, full: dict | None, device: torch.device, offload: bool) -> None:
    """After sharding a model whose real weights only rank 0 has: give every rank its shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    if any(p.device.type == "meta" for p in model.parameters()) or any(
        b.device.type == "meta" for b in model.buffers()
    ):
        model.to_empty(device="cpu" if offload else device)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, full or {}, options=options)


@contextlib.contextmanager
def _gradient_sync(model: torch.nn.Module, sync: bool) -> Iterator[None]:
    """Gradients accumulate unsharded (no reduce-scatter) inside, until the sync step's backward."""
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(model, FSDPModule):
        yield
        return
    model.set_requires_gradient_sync(sync)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)
