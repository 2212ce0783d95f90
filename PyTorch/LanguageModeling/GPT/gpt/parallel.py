"""How the model is spread over the processes, from the recipe's ``parallel:`` section, with PyTorch's own
pieces: a (dp, tp) ``DeviceMesh``; tensor parallelism over DTensor (``parallelize_module``: attention's
q/k/v and the MLP's input projections column-wise, their output projections row-wise, so each rank holds
``heads / tp`` heads and ``ffn_dim / tp`` MLP columns); activation checkpointing (none, selective, full);
``torch.compile`` per block; FSDP2 (``fully_shard``) over the data-parallel ranks, each block a unit, with
bf16 parameters and fp32 gradient reduction under ``run.precision: bf16``.

    parallel:
      tensor: 1                     # tensor-parallel degree (divides heads, kv_heads, ffn_dim, processes)
      reshard_after_forward: true   # FSDP2: free gathered weights after the forward (ZeRO-3) or keep them (ZeRO-2)
      checkpointing: none           # none | selective (keep matmul and attention outputs) | full
      compile: false               # torch.compile each block
"""

from __future__ import annotations

import dataclasses

import torch
import zoo.recipe
from zoo.errors import UserError

from gpt.model import CHECKPOINTING, GPT


@dataclasses.dataclass(frozen=True)
class Layout:
    """This process's place: ``dp`` data-parallel ranks x ``tp`` tensor-parallel ranks; ``mesh`` is None
    in one process."""

    dp: int
    tp: int
    dp_rank: int
    tp_rank: int
    mesh: object = None

    @property
    def world(self) -> int:
        return self.dp * self.tp


def parallel_settings(section: dict) -> dict:
    """``recipe["parallel"]`` checked: tensor >= 1, checkpointing a known mode, booleans."""
    known = ("tensor", "reshard_after_forward", "checkpointing", "compile")
    unknown = sorted(set(section) - set(known))
    if unknown:
        raise UserError(f"unknown parallel key(s) {', '.join(unknown)} (known: {', '.join(known)})")
    tensor = section["tensor"]
    if isinstance(tensor, bool) or not isinstance(tensor, int) or tensor < 1:
        raise UserError(f"parallel.tensor must be a positive integer, not {tensor!r}")
    if section["checkpointing"] not in CHECKPOINTING:
        raise UserError(
            f"parallel.checkpointing must be one of {', '.join(CHECKPOINTING)}, not {section['checkpointing']!r}"
        )
    return {
        "tensor": tensor,
        "reshard_after_forward": zoo.recipe.flag(
            section["reshard_after_forward"], "parallel.reshard_after_forward"
        ),
        "checkpointing": section["checkpointing"],
        "compile": zoo.recipe.flag(section["compile"], "parallel.compile"),
    }


def check_layout(settings: dict, world: int) -> int:
    """The tensor-parallel degree, once it divides the ``world`` processes."""
    if world % settings["tensor"]:
        raise UserError(f"parallel.tensor {settings['tensor']} does not divide the {world} processes")
    return settings["tensor"]


def build_layout(settings: dict, world: int, rank: int, device) -> Layout:
    """The (dp, tp) split of ``world`` processes; the DeviceMesh when there is more than one."""
    tp = check_layout(settings, world)
    dp = world // tp
    if world == 1:
        return Layout(dp=1, tp=1, dp_rank=0, tp_rank=0)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(torch.device(device).type, (dp, tp), mesh_dim_names=("dp", "tp"))
    return Layout(dp=dp, tp=tp, dp_rank=rank // tp, tp_rank=rank % tp, mesh=mesh)


def apply_tensor_parallel(model: GPT, mesh) -> None:
    """Shard every block's attention heads and MLP columns over ``mesh`` (1-D, the tp ranks)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    cfg, tp = model.cfg, mesh.size()
    for name, value in (("heads", cfg.heads), ("kv_heads", cfg.kv_heads), ("ffn_dim", cfg.ffn_dim)):
        if value % tp:
            raise UserError(f"parallel.tensor {tp} does not divide model.{name} {value}")
    plan = {
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(),
        "mlp.w1": ColwiseParallel(),
        "mlp.w2": RowwiseParallel(),
    }
    if cfg.shape == "llama":
        plan["mlp.w3"] = ColwiseParallel()
    for block in model.blocks:
        parallelize_module(block, mesh, plan)


def apply_fsdp(model: GPT, mesh, precision: str, reshard_after_forward: bool) -> None:
    """FSDP2 over ``mesh`` (the dp ranks): each block a unit, then the root (embeddings, norm, output)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    options = {"mesh": mesh, "reshard_after_forward": reshard_after_forward}
    if precision == "bf16":
        options["mp_policy"] = policy
    for block in model.blocks:
        fully_shard(block, **options)
    fully_shard(model, **options)


def parallelize(model: GPT, settings: dict, layout: Layout, precision: str) -> GPT:
    """Apply the recipe's parallelism to ``model`` in place (tensor parallel, checkpointing, compile, FSDP2)."""
    if layout.tp > 1:
        apply_tensor_parallel(model, layout.mesh["tp"])
    model.checkpointing = settings["checkpointing"]
    if settings["compile"]:
        for block in model.blocks:
            block.compile()
    if layout.dp > 1:
        apply_fsdp(model, layout.mesh["dp"], precision, settings["reshard_after_forward"])
    return model


def uses_fsdp_precision(layout: Layout, precision: str) -> bool:
    """Whether FSDP2's policy computes in bf16 (then the step runs without autocast)."""
    return layout.dp > 1 and precision == "bf16"


def total_grad_norm(parameters) -> torch.Tensor:
    """The global 2-norm of the gradients, over plain tensors and DTensors of any mesh (one reduction per
    sharding layout): what clip_grad_norm_ computes where all parameters live on one mesh."""
    from torch.distributed.tensor import DTensor

    groups = {}
    for param in parameters:
        if param.grad is None:
            continue
        grad = param.grad
        key = (
            (id(grad.device_mesh), tuple(grad.placements))
            if isinstance(grad, DTensor)
            else ("plain", grad.device)
        )
        groups.setdefault(key, []).append(grad)
    squares = []
    for grads in groups.values():
        norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        squares.append(norm.float().pow(2))
    return torch.stack(squares).sum().sqrt()


def clip_grads(parameters, max_norm: float) -> torch.Tensor:
    """Scale the gradients so that their global norm is at most ``max_norm``; returns the norm before."""
    from torch.distributed.tensor import DTensor

    parameters = [p for p in parameters if p.grad is not None]
    norm = total_grad_norm(parameters)
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    with torch.no_grad():
        for param in parameters:
            grad = param.grad._local_tensor if isinstance(param.grad, DTensor) else param.grad
            grad.mul_(scale.to(grad.device, grad.dtype))
    return norm
