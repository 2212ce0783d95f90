"""PyTorch set-up every PyTorch model shares: process group, device, autocast, seeding, parameter
groups, DistributedDataParallel, the replica check. Imports torch lazily (``zoo`` stays framework-free).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import random
import sys

import numpy as np

from zoo.dist import DistEnv, get_dist_env
from zoo.errors import UserError


def init_distributed(device: str | None = None, *, timeout_minutes: float = 30):
    """``(DistEnv, torch.device)``: the device (``device``, else ``cuda:LOCAL_RANK`` where CUDA is,
    else cpu), and the process group joined when torchrun / SLURM / MPI started several processes
    (NCCL on GPUs, gloo on the CPU)."""
    import torch
    import torch.distributed as dist

    env = get_dist_env()
    if device:
        chosen = torch.device(device)
        if chosen.type == "cuda" and chosen.index is None:
            chosen = torch.device("cuda", env.local_rank)
    elif torch.cuda.is_available():
        chosen = torch.device("cuda", env.local_rank)
    else:
        chosen = torch.device("cpu")
    if chosen.type == "cuda":
        torch.cuda.set_device(chosen)
    if env.world_size > 1 and not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", env.master_addr)
        os.environ.setdefault("MASTER_PORT", str(env.master_port))
        dist.init_process_group(
            "nccl" if chosen.type == "cuda" else "gloo",
            init_method="env://",
            rank=env.rank,
            world_size=env.world_size,
            timeout=datetime.timedelta(minutes=timeout_minutes),
        )
    return env, chosen


def close_distributed() -> None:
    """Barrier and leave the process group, if one was joined."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def fast_math(device) -> None:
    """cuDNN autotuning and TF32 matmuls/convolutions on a GPU; flush denormals on the CPU (they make
    CPU convolutions many times slower)."""
    import torch

    if torch.device(device).type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        torch.set_flush_denormal(True)


def triton_interpreted() -> bool:
    """Whether Triton kernels run in Triton's interpreter, and so take CPU tensors (the CPU tests).

    Triton chooses at decoration time: ``TRITON_INTERPRET=1`` must be set before ``triton`` is first
    imported. Set later, kernels of a module imported afterwards are interpreted but ``triton.language``'s
    own jitted functions (``tl.sum`` ...) are not, and a launch fails: that case counts as not
    interpreted, so callers take their torch path on a CPU.
    """
    import importlib.util

    if os.environ.get("TRITON_INTERPRET") != "1" or importlib.util.find_spec("triton") is None:
        return False
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.sum, InterpretedFunction)


def amp_dtype(amp: str):
    """``bf16`` / ``fp16`` / ``fp32`` -> the torch dtype autocast computes in (None for fp32)."""
    import torch

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}
    if amp not in dtypes:
        raise UserError(f"amp must be one of bf16, fp16, fp32, not {amp!r}")
    return dtypes[amp]


def autocast(device, amp: str):
    """``torch.autocast`` for ``amp`` on ``device``'s type; a no-op context for fp32."""
    import torch

    dtype = amp_dtype(amp)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


def grad_scaler(device, amp: str):
    """A GradScaler that scales only for fp16 (bf16 and fp32 need none)."""
    import torch

    return torch.amp.GradScaler(torch.device(device).type, enabled=amp == "fp16")


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's (CPU and every CUDA device's) generators."""
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def parameter_groups(model, weight_decay: float, **decayed_group_options) -> list[dict]:
    """Two optimizer groups: weights (matrices, convolutions, embeddings) decayed; biases and
    normalisation parameters (every tensor of one dimension or less) not. Frozen parameters are left
    out. ``decayed_group_options`` go into the first group (e.g. ``adapt=True`` for LAMB); the second
    gets the opposite boolean for each."""
    decay, plain = [], []
    for param in model.parameters():
        if param.requires_grad:
            (plain if param.ndim <= 1 else decay).append(param)
    opposite = {k: (not v) if isinstance(v, bool) else v for k, v in decayed_group_options.items()}
    return [
        {"params": decay, "weight_decay": weight_decay, **decayed_group_options},
        {"params": plain, "weight_decay": 0.0, **opposite},
    ]


def distributed_model(
    model,
    device,
    *,
    bucket_mb: int = 25,
    static_graph: bool = True,
    bucket_view: bool = True,
    broadcast_buffers: bool = False,
):
    """DistributedDataParallel with the zoo's defaults (measured in ResNet-50's PERF.md): every step
    uses every parameter (static graph), gradients are views into the buckets, and normalisation
    statistics stay per GPU (no broadcast of rank 0's buffers every forward)."""
    import warnings

    import torch

    device = torch.device(device)
    with warnings.catch_warnings():
        # torch 2.14 renames broadcast_buffers (a FutureWarning); 2.11, on the GPU machines, knows only it.
        warnings.filterwarnings("ignore", message=".*broadcast_buffers.*", category=FutureWarning)
        return torch.nn.parallel.DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=bucket_mb,
            static_graph=static_graph,
            gradient_as_bucket_view=bucket_view,
            broadcast_buffers=broadcast_buffers,
        )


def gather_objects(obj, world: int) -> list:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` in one process. A collective: every
    rank calls it."""
    if world == 1:
        return [obj]
    import torch.distributed as dist

    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def broadcast_flag(flag: bool, world: int, device) -> bool:
    """Rank 0's ``flag`` on every rank (e.g. "target reached: stop"); a collective."""
    if world == 1:
        return flag
    import torch
    import torch.distributed as dist

    t = torch.tensor([int(flag)], device=device)
    dist.broadcast(t, 0)
    return bool(t.item())


def weights_checksum(model) -> float:
    """A float64 sum over every parameter: equal on replicas that hold equal weights."""
    import torch

    with torch.no_grad():
        return float(torch.stack([p.detach().double().sum() for p in model.parameters()]).sum())


def replicas_agree(model) -> bool | None:
    """True when every rank holds the same weights (checksums all-gathered), None in one process."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return None
    device = next(model.parameters()).device
    mine = torch.tensor([weights_checksum(model)], dtype=torch.float64, device=device)
    gathered = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    return all(bool(g == gathered[0]) for g in gathered)


def check_replicas_agree(model, env: DistEnv | None = None) -> None:
    """End the run with a one-line error if the ranks' weights differ; say so once when they agree."""
    agree = replicas_agree(model)
    if agree is None:
        return
    env = env or get_dist_env()
    if not agree:
        raise UserError(f"weights differ across the {env.world_size} ranks")
    if env.is_primary:
        print(f"weights identical on all {env.world_size} ranks", flush=True)


CHECKPOINT_NAME = "checkpoint.pt"  # RESULTS_DIR/checkpoint.pt: what --resume auto continues


def save_training_checkpoint(path, state: dict, *, keep: int = 1, mark_best: bool = False) -> None:
    """``torch.save(state)`` written to a temporary file beside ``path`` and renamed over it: a run killed
    mid-write leaves the previous checkpoint whole (the temporary is removed by the next run's
    ``zoo.cli.resolve_resume``). Call it on the rank that owns the state (rank 0 for replicated models).

    ``keep`` (the recipe's ``run.keep_checkpoints``): above 1, numbered copies of the newest ``keep``
    stay beside ``path`` (``checkpoint_step000000600.pt``); ``mark_best`` (this checkpoint's evaluation beat
    every earlier one on ``run.target.metric``): it also becomes ``best.pt`` (zoo.retention).

    The fields every model's training state holds, so that one reader serves them all: ``model``
    (state_dict), ``optimizer``, ``rng`` (zoo.rng.rng_state), ``epoch`` and ``step`` (optimizer steps
    done), ``recipe``; and where the model has them ``scheduler``, ``scaler``, ``step_in_epoch``,
    ``best`` ({metric: value}) and the model's own fields."""
    import torch

    from zoo.io import atomic_write

    with atomic_write(path) as tmp:
        torch.save(state, tmp)
    retain(path, state["step"], keep=keep, mark_best=mark_best)


def retain(path, step: int, *, keep: int = 1, mark_best: bool = False) -> None:
    """What stays of the checkpoint ``path`` just written at ``step`` (a file or a sharded folder): the
    newest ``keep`` and, where ``mark_best``, ``best.pt`` / ``best/`` beside it (zoo.retention)."""
    from zoo.retention import keep_newest
    from zoo.retention import mark_best as copy_to_best

    keep_newest(path, step, keep)
    if mark_best:
        copy_to_best(path)


TRAINING_STATE_FIELDS = ("model", "optimizer", "rng", "epoch", "step", "recipe")


def load_training_checkpoint(path, needed, what: str, flag: str = "--resume") -> dict:
    """A training checkpoint (``torch.save`` of a dict) loaded on the CPU, for ``flag PATH``.

    A file that cannot be unpickled (text, truncated, another format) or a dict without every key of
    ``needed`` (TRAINING_STATE_FIELDS for a checkpoint of save_training_checkpoint) ends in one line:
    ``error: --resume PATH is not <what> (...)``, ``what`` with its article ("an SSD training
    checkpoint"). Call it before the results folder is written, so a wrong file leaves nothing behind.
    """
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing to a user
        reason = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise UserError(f"{flag} {path} is not {what} (cannot be read: {reason})") from None
    missing = sorted(set(needed) - set(state)) if isinstance(state, dict) else sorted(needed)
    if missing:
        raise UserError(f"{flag} {path} is not {what} (no {', '.join(missing)})")
    return state


SHARDED_CHECKPOINT_NAME = "checkpoint"  # RESULTS_DIR/checkpoint/: a sharded training checkpoint (a folder)
# The fields of a sharded checkpoint's checkpoint.pt: TRAINING_STATE_FIELDS less the model, which is in the shards.
SHARDED_STATE_FIELDS = tuple(field for field in TRAINING_STATE_FIELDS if field != "model")


def save_training_checkpoint_sharded(
    path, sharded: dict, state: dict, *, async_group=None, keep: int = 1, mark_best: bool = False
):
    """A training checkpoint whose tensors are sharded over the ranks (TorchRec's embedding tables, too large
    for one process to gather), as the folder ``path``: ``sharded`` (each rank writes its shards through
    ``torch.distributed.checkpoint``: the model and any optimizer state that lives with the shards) and
    ``checkpoint.pt``, rank 0's ``state`` through :func:`save_training_checkpoint` (SHARDED_STATE_FIELDS
    and the model's own). The folder is written as ``path.tmp`` and renamed over ``path`` once complete,
    so a run killed mid-write leaves the previous checkpoint whole. A collective: every rank calls it.

    ``async_group`` (a gloo process group, or ``False`` in one process) writes the shards in the background
    (``torch.distributed.checkpoint.async_save``) and returns a :class:`PendingCheckpoint` to ``wait()`` on
    before the next save or the end; None (default) writes them now and returns None. ``keep`` and
    ``mark_best`` as :func:`save_training_checkpoint` (``checkpoint_step000000600/``, ``best/``), once the
    folder is in place."""
    import pathlib
    import shutil

    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    path = pathlib.Path(path)
    primary = not dist.is_initialized() or dist.get_rank() == 0
    tmp, old = path.with_name(path.name + ".tmp"), path.with_name(path.name + ".old")
    recover_sharded_checkpoint(
        path
    )  # a save killed midway: its whole checkpoint back in place, the rest gone

    def finish():
        if primary:
            save_training_checkpoint(tmp / CHECKPOINT_NAME, state)
            if path.exists():
                path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old, ignore_errors=True)
            retain(path, state["step"], keep=keep, mark_best=mark_best)
        if dist.is_initialized():
            dist.barrier()

    if async_group is not None:
        # The shards are copied to host memory here; writing them goes on in the background.
        future = dcp.async_save(sharded, checkpoint_id=str(tmp), process_group=async_group or None)
        return PendingCheckpoint(future, finish)
    dcp.save(sharded, checkpoint_id=str(tmp))
    finish()
    return None


def recover_sharded_checkpoint(path) -> None:
    """Put back what a :func:`save_training_checkpoint_sharded` killed at any instant left beside ``path``:
    a kill between its two renames leaves ``path.old`` (the previous checkpoint) and a finished ``path.tmp``
    (its ``checkpoint.pt`` is written last) with no ``path``: the newer whole one is renamed into place;
    an unfinished ``path.tmp`` and a leftover ``path.old`` are removed. Call it before resolving a resume,
    on every rank (rank 0 renames; the others wait)."""
    import pathlib
    import shutil

    import torch.distributed as dist

    path = pathlib.Path(path)
    tmp, old = path.with_name(path.name + ".tmp"), path.with_name(path.name + ".old")
    if not dist.is_initialized() or dist.get_rank() == 0:
        if not path.exists():
            for whole in (tmp, old):
                if (whole / CHECKPOINT_NAME).is_file():
                    whole.rename(path)
                    print(
                        f"{path}: put back from {whole.name}, left by a run killed while saving",
                        file=sys.stderr,
                    )
                    break
        for stale in (tmp, old):
            shutil.rmtree(stale, ignore_errors=True)
    if dist.is_initialized():
        dist.barrier()


class PendingCheckpoint:
    """A sharded checkpoint still being written (``save_training_checkpoint_sharded(..., async_group=)``):
    ``wait()`` (a collective: every rank calls it) blocks until every shard is written, then rank 0 writes
    checkpoint.pt and renames the folder into place. Until then the previous checkpoint is the whole one."""

    def __init__(self, future, finish):
        self._future, self._finish = future, finish

    def wait(self) -> None:
        self._future.result()
        self._finish()


def load_training_checkpoint_sharded(
    path, sharded: dict | None, needed, what: str, flag: str = "--resume"
) -> dict:
    """Read the folder of :func:`save_training_checkpoint_sharded`: fill ``sharded`` (this run's state dict,
    with the same keys; in place, resharded to this run's ranks) and return its ``checkpoint.pt`` state.
    ``sharded`` None reads the state alone: a run checks what it resumes before it writes anything.

    A path that is not such a folder, a state without every key of ``needed`` (SHARDED_STATE_FIELDS and the
    model's own), or shards that do not fit ``sharded`` end in one line: ``error: --resume PATH is not
    <what> (...)`` or ``... does not fit this model``. A collective: every rank calls it."""
    import pathlib

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    path = pathlib.Path(path)
    if not (path / CHECKPOINT_NAME).is_file():
        found = f"no {CHECKPOINT_NAME} in it" if path.is_dir() else "not a folder"
        raise UserError(f"{flag} {path} is not {what} ({found})")
    state = load_training_checkpoint(path / CHECKPOINT_NAME, needed, what, flag)
    if sharded is None:
        return state
    try:
        dcp.load(sharded, checkpoint_id=str(path))
    # DCP's CheckpointException (a BaseException) reports every rank's traceback: its last line says why.
    except (Exception, CheckpointException) as e:  # noqa: BLE001
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        reason = lines[-1][:300] if lines else type(e).__name__
        raise UserError(f"{flag} {path} does not fit this model: {reason}") from None
    return state
