"""DLRM's one training step, what train.py, engine.py, evaluation, export and the benchmark all build:
the model on the recipe's embedding path, its dense and table optimizers, mixed precision, and its
training checkpoint.

    step = TrainStep(recipe, {"num_embeddings": rows, "num_dense": 13}, device, rank, world)
    loss = step(labels, dense, sparse)          # one optimizer step on this rank's share of the batch

``model.embeddings: torchrec`` shards the tables over the processes with TorchRec (fused row-wise
Adagrad or SGD inside backward, the dense part in DDP); ``plain`` keeps every table in one fused
weight on each process (one lookup, row-wise Adagrad or SGD on the touched rows only; no fbgemm; DDP
over the whole model). Both give the same numbers on the same data. ``speed.compile`` compiles the
plain path's MLPs and interaction (one graph); ``speed.table_kernels: triton`` runs its table lookup
and row updates as Triton kernels (one process, CUDA; ``dlrm.table_kernels``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from zoo.errors import UserError

from dlrm import DEFAULT_RECIPE, MODEL_DIR  # noqa: F401 (step.DEFAULT_RECIPE, as before)

# What a DLRM training checkpoint's checkpoint.pt holds beside zoo's fields: the table sizes and dense
# width the data had, so that evaluation and export rebuild the model without the data.
CHECKPOINT_FIELDS = ("num_embeddings", "num_dense")
CHECKPOINT_WHAT = "a DLRM checkpoint"


class TrainStep:
    """A model ready to train or evaluate: the network, its optimizers, this rank's place."""

    def __init__(self, recipe: dict, meta: dict, device, rank: int, world: int):
        from zoo.recipe import run_config

        from dlrm.model import build_plain, hotness_of, table_sizes
        from dlrm.optim import dense_optimizer, plain_sparse_optimizer

        cfg, run = recipe["model"], run_config(recipe)
        self.recipe, self.device, self.rank, self.world = recipe, device, rank, world
        self.data_shape = {"num_embeddings": list(meta["num_embeddings"]), "num_dense": meta["num_dense"]}
        self.kind = cfg.get("embeddings", "torchrec")
        self.rows = table_sizes(cfg, meta["num_embeddings"])
        self.hotness = hotness_of(cfg, len(self.rows))
        self.amp = run.precision
        self.plan = None
        self.table_kernels = False  # the plain path's Triton table kernels (speed.table_kernels)
        if self.kind == "torchrec":
            from dlrm.sharding import build_torchrec, dense_parameters

            self.model, self.plan = build_torchrec(
                cfg,
                recipe["sparse_optimizer"],
                meta["num_embeddings"],
                meta["num_dense"],
                run.seed,
                device,
                world,
            )
            self.net = self.model  # the module whose weights a checkpoint holds, on both paths
            self.dense_opt = dense_optimizer(dense_parameters(self.model), recipe["optimizer"])
            self.sparse_opt = self.model.fused_optimizer
        elif self.kind == "plain":
            from zoo.torch import distributed_model

            # Sparse table gradients on one process; DDP all-reduces dense ones only (NCCL has no sparse).
            self.net = build_plain(
                cfg, meta["num_embeddings"], meta["num_dense"], run.seed, sparse_grad=world == 1
            ).to(device)
            if recipe.get("speed", {}).get("compile", False):
                self.net.compile_dense()
            tables = list(self.net.sparse.parameters())
            ids = {id(p) for p in tables}
            self.dense_opt = dense_optimizer(
                [p for p in self.net.parameters() if id(p) not in ids], recipe["optimizer"]
            )
            self.table_kernels = uses_table_kernels(recipe, self.net.sparse.weight, world)
            self.sparse_opt = plain_sparse_optimizer(
                tables,
                recipe["sparse_optimizer"],
                kernels_table=self.net.sparse if self.table_kernels else None,
            )
            self.model = distributed_model(self.net, device, static_graph=False) if world > 1 else self.net
        else:
            raise UserError(f"model.embeddings must be torchrec or plain, not {self.kind!r}")
        from zoo.torch import grad_scaler

        self.scaler = grad_scaler(device, self.amp)
        self.base_dense_lr = float(recipe["optimizer"]["lr"])
        self.base_sparse_lr = float(recipe["sparse_optimizer"]["lr"])

    def batches(self, split, global_batch: int, *, train: bool):
        """This rank's share of ``split`` (dlrm.data.Batches) in global batches of ``global_batch`` rows, ids
        mapped to this model's tables; ``train``: whole batches in the order ``train.shuffle`` says,
        else every row (a last partial batch padded)."""
        from zoo.recipe import run_config

        from dlrm.data import Batches

        shuffle = train and bool(self.recipe["train"].get("shuffle", True))
        return Batches(
            split,
            global_batch,
            self.rank,
            self.world,
            self.rows,
            self.hotness,
            drop_last=train,
            shuffle=shuffle,
            seed=run_config(self.recipe).seed,
        )

    def forward(self, dense, sparse):
        from zoo.torch import autocast

        with autocast(self.device, self.amp):
            dense = dense.to(self.device, non_blocking=True)
            return self.model(dense, sparse.to(self.device, non_blocking=True)).float()

    def set_lr(self, factor: float) -> None:
        for group in self.dense_opt.param_groups:
            group["lr"] = self.base_dense_lr * factor
        for group in self.sparse_opt.param_groups:
            group["lr"] = self.base_sparse_lr * factor

    def __call__(self, labels, dense, sparse) -> torch.Tensor:
        """One training step on this rank's batch; returns the local mean loss (detached)."""
        logits = self.forward(dense, sparse)
        loss = F.binary_cross_entropy_with_logits(logits, labels.to(self.device))
        self.dense_opt.zero_grad(set_to_none=True)
        if self.kind == "plain":
            self.sparse_opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.dense_opt)
        if self.kind == "plain":
            self.scaler.step(self.sparse_opt)
        else:
            self.sparse_opt.step()  # the update happened in backward; this sets the scheduled lr
        self.scaler.update()
        return loss.detach()

    # ---------------------------------------------------------------- checkpoints

    def tensor_state(self) -> dict:
        """What every rank writes its part of: the (sharded) weights and the sparse optimizer's state."""
        if self.kind == "torchrec":
            return {"model": self.model.state_dict(), "sparse_optim": self.sparse_opt.state_dict()["state"]}
        return {"model": self.net.state_dict(), "sparse_optim": self._plain_sparse_optim_state()}

    def _plain_sparse_optim_state(self) -> dict:
        """The fused table's optimizer state as one entry per table ({table: {"sum": rows}}, the
        per-table layout earlier plain checkpoints hold); views, so a load fills the state in place."""
        state = self.sparse_opt.state_dict()["state"]
        if not state:  # SGD keeps none
            return {}
        tables = self.net.sparse
        return {
            t: {key: value.split(tables.rows)[t] for key, value in state[0].items()}
            for t in range(len(tables.rows))
        }

    def save(self, path, position: dict, *, keep: int = 1, best: bool = False) -> None:
        """The training checkpoint folder ``path`` (zoo.torch.save_training_checkpoint_sharded): every rank
        its shards, rank 0 the dense optimizer, every rank's generators, the recipe, the data's table
        sizes and ``position`` (``epoch``, ``step`` and anything else to carry); ``keep`` and ``best`` as
        zoo.torch.save_training_checkpoint's (run.keep_checkpoints, ``best/``). A collective."""
        from zoo.rng import rng_state
        from zoo.torch import gather_objects, save_training_checkpoint_sharded

        rngs = gather_objects(rng_state(), self.world)
        state = {"optimizer": self.dense_opt.state_dict(), "rng": rngs, "recipe": self.recipe}
        save_training_checkpoint_sharded(
            path, self.tensor_state(), {**state, **self.data_shape, **position}, keep=keep, mark_best=best
        )

    def load(self, path, *, weights_only: bool = False, flag: str = "--resume") -> dict:
        """Restore ``path`` (a checkpoint of either embedding path for the weights); returns its state."""
        from zoo.torch import load_training_checkpoint_sharded

        tensors = self.tensor_state()
        sparse_full = self.sparse_opt.state_dict()
        if weights_only:
            tensors = {"model": tensors["model"]}
        state = load_training_checkpoint_sharded(path, tensors, checkpoint_fields(), CHECKPOINT_WHAT, flag)
        self.net.load_state_dict(tensors["model"])
        if not weights_only:
            self.dense_opt.load_state_dict(state["optimizer"])
            if self.kind == "torchrec":  # the plain path's state was loaded into its views in place
                self.sparse_opt.load_state_dict({**sparse_full, "state": tensors["sparse_optim"]})
        return state


def checkpoint_fields() -> tuple:
    """The fields a DLRM training checkpoint's checkpoint.pt must hold."""
    from zoo.torch import SHARDED_STATE_FIELDS

    return (*SHARDED_STATE_FIELDS, *CHECKPOINT_FIELDS)


def read_checkpoint(path, flag: str = "--resume") -> dict:
    """The checkpoint.pt state of the checkpoint folder ``path`` (no tensors loaded): a wrong path ends
    in one line before a run writes anything."""
    from zoo.torch import load_training_checkpoint_sharded

    return load_training_checkpoint_sharded(path, None, checkpoint_fields(), CHECKPOINT_WHAT, flag)


def table_kernels_of(recipe: dict) -> str:
    """``speed.table_kernels``: torch (default) or triton (``dlrm.table_kernels``)."""
    kernels = recipe.get("speed", {}).get("table_kernels", "torch")
    if kernels not in ("torch", "triton"):
        raise UserError(f"speed.table_kernels must be torch or triton, not {kernels!r}")
    return kernels


def uses_table_kernels(recipe: dict, weight: torch.Tensor, world: int) -> bool:
    """Whether the plain path's fused table runs the Triton kernels: ``speed.table_kernels:
    triton`` on one process (under DDP the table's gradient must be dense for the all-reduce) with
    the table on a CUDA device (or under Triton's interpreter); otherwise the torch path."""
    if table_kernels_of(recipe) != "triton" or world > 1:
        return False
    from dlrm.table_kernels import runs_kernels

    return runs_kernels(weight)


def check_recipe(recipe: dict) -> None:
    """Refuse, before any work, a combination the run cannot do."""
    from zoo.recipe import run_config

    run = run_config(recipe)
    embeddings = recipe["model"].get("embeddings", "torchrec")
    if run.accumulation != 1:
        raise UserError(
            f"run.accumulation must be 1, not {run.accumulation}: the table optimizers update inside "
            "backward, every micro-batch"
        )
    if run.precision == "fp16" and embeddings == "torchrec":
        raise UserError(
            "--amp fp16 needs loss scaling, which TorchRec's fused embedding optimizers do not undo: "
            "use --amp bf16 or fp32 (or model.embeddings=plain)"
        )
    if run.precision == "fp16" and embeddings == "plain" and table_kernels_of(recipe) == "triton":
        raise UserError(
            "--amp fp16 needs loss scaling, and speed.table_kernels=triton updates the tables inside "
            "backward, before a scaler could skip a step: use --amp bf16 or fp32 (or speed.table_kernels=torch)"
        )
