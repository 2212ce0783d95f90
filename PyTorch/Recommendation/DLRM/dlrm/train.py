"""Train DLRM / DLRM-DCNv2 on prepared Criteo shards: ``python -m dlrm.train --data-dir D``.

Embeddings: ``model.embeddings: torchrec`` shards the tables over the processes with TorchRec
(fused row-wise Adagrad or SGD, the dense part in DDP); ``plain`` keeps every table in one fused
weight on each process (one lookup, row-wise Adagrad or SGD on the touched rows only; no fbgemm;
DDP over the whole model). Both give the same numbers on the same data. ``speed.compile``
compiles the plain path's MLPs and interaction (one graph); ``speed.table_kernels: triton`` runs
its table lookup and row updates as Triton kernels (one process, CUDA; ``dlrm.table_kernels``).
Evaluation: exact ROC AUC over the whole validation split; ``--target-auc`` stops once reached.
Writes metrics.jsonl, tensorboard/, mlperf.log (dlrm_dcnv2, ruleset 6.0.0) and the sharded
checkpoint directory ``checkpoint/`` under --results-dir.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import time

import numpy as np
import torch
import torch.nn.functional as F
from zoo.cli import add_run_args, add_target_arg, entry_point, parse_args, recipe_from_args, resolve_resume

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_RECIPE = MODEL_DIR / "configs" / "dlrm_dcnv2_small.yaml"
CHECKPOINT_NAME = "checkpoint"
MLPERF_BENCHMARK = "dlrm_dcnv2"


class Run:
    """A model ready to train or evaluate: the network, its optimizers, this rank's place."""

    def __init__(self, recipe: dict, meta: dict, device, rank: int, world: int):
        from dlrm.model import build_plain, hotness_of, table_sizes
        from dlrm.optim import dense_optimizer, plain_sparse_optimizer

        cfg = recipe["model"]
        self.recipe, self.device, self.rank, self.world = recipe, device, rank, world
        self.kind = cfg.get("embeddings", "torchrec")
        self.rows = table_sizes(cfg, meta["num_embeddings"])
        self.hotness = hotness_of(cfg, len(self.rows))
        self.amp = recipe.get("amp", "fp32")
        seed = int(recipe.get("seed", 0))
        self.plan = None
        self.table_kernels = False  # the plain path's Triton table kernels (speed.table_kernels)
        if self.kind == "torchrec":
            from dlrm.sharding import build_torchrec, dense_parameters

            self.model, self.plan = build_torchrec(
                cfg,
                recipe["sparse_optimizer"],
                meta["num_embeddings"],
                meta["num_dense"],
                seed,
                device,
                world,
            )
            self.dense_opt = dense_optimizer(dense_parameters(self.model), recipe["optimizer"])
            self.sparse_opt = self.model.fused_optimizer
        elif self.kind == "plain":
            from zoo.torch import distributed_model

            # Sparse table gradients on one process; DDP all-reduces dense ones only (NCCL has no sparse).
            self.net = build_plain(
                cfg, meta["num_embeddings"], meta["num_dense"], seed, sparse_grad=world == 1
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
            raise SystemExit(f"error: model.embeddings must be torchrec or plain, not {self.kind!r}")
        from zoo.torch import grad_scaler

        self.scaler = grad_scaler(device, self.amp)
        self.base_dense_lr = float(recipe["optimizer"]["lr"])
        self.base_sparse_lr = float(recipe["sparse_optimizer"]["lr"])

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

    def step(self, labels, dense, sparse) -> torch.Tensor:
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

    def save(self, path: pathlib.Path, progress: dict) -> None:
        """Write the sharded checkpoint directory ``path`` (each rank its shards, rank 0 the
        replicated dense optimizer), replacing the previous one only once complete."""
        import torch.distributed.checkpoint as dcp

        tmp = path.with_name(path.name + ".tmp")
        if self.rank == 0 and tmp.exists():
            shutil.rmtree(tmp)
        _barrier()
        dcp.save(self.tensor_state(), checkpoint_id=str(tmp))
        if self.rank == 0:
            torch.save(self.dense_opt.state_dict(), tmp / "dense_optimizer.pt")
            (tmp / "progress.json").write_text(json.dumps(progress))
            old = path.with_name(path.name + ".old")
            if path.exists():
                path.rename(old)
            tmp.rename(path)
            if old.exists():
                shutil.rmtree(old)
        _barrier()

    def load(self, path: pathlib.Path, *, weights_only: bool = False) -> dict:
        """Restore ``path`` (a checkpoint of either embedding path for the weights); returns its progress."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException

        progress_file = pathlib.Path(path) / "progress.json"
        if not progress_file.is_file():
            raise SystemExit(f"error: {path} is not a DLRM checkpoint (no progress.json)")
        state = self.tensor_state()
        sparse_full = self.sparse_opt.state_dict()
        if weights_only:
            state = {"model": state["model"]}
        try:
            dcp.load(state, checkpoint_id=str(path))
        except (Exception, CheckpointException) as e:  # a multi-page report: its last line says why
            first = _last_line(e)
            raise SystemExit(f"error: {path} does not fit this model/recipe: {first}") from None
        target = self.model if self.kind == "torchrec" else self.net
        target.load_state_dict(state["model"])
        if not weights_only:
            self.dense_opt.load_state_dict(
                torch.load(pathlib.Path(path) / "dense_optimizer.pt", weights_only=True)
            )
            if self.kind == "torchrec":  # the plain path's state was loaded into its views in place
                self.sparse_opt.load_state_dict({**sparse_full, "state": state["sparse_optim"]})
        return json.loads(progress_file.read_text())


def _last_line(error: BaseException) -> str:
    """The last non-empty line of an error's text (DCP's reports hold every rank's traceback)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(error).__name__


def _barrier():
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()


def _all_mean(value: torch.Tensor) -> float:
    import torch.distributed as dist

    value = value.detach().float().cpu().clone()
    if dist.is_initialized():
        dist.all_reduce(value)
        value /= dist.get_world_size()
    return float(value)


def evaluate_auc(run: Run, batches, logger=None) -> tuple[float, float, int]:
    """(ROC AUC, mean log loss, samples) over every row of ``batches``' split, gathered from all ranks."""
    import torch.distributed as dist
    from sklearn.metrics import roc_auc_score

    run.model.eval()
    probs, labels, weights = [], [], []
    with torch.no_grad():
        for i in range(batches.count):
            label, dense, sparse, weight = batches.get(i)
            probs.append(torch.sigmoid(run.forward(dense, sparse)).cpu())
            labels.append(label)
            weights.append(weight)
            if logger is not None:
                logger.progress(i + 1, batches.global_batch)
    run.model.train()
    local = torch.stack([torch.cat(probs), torch.cat(labels), torch.cat(weights)])
    if dist.is_initialized():
        gathered = [torch.empty_like(local) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, local)
        local = torch.cat(gathered, dim=1)
    prob, label, weight = (t.double().numpy() for t in local)
    keep = weight > 0
    prob, label = prob[keep], label[keep]
    if len(np.unique(label)) < 2:
        raise SystemExit("error: the validation split holds only one class: AUC is undefined")
    clipped = np.clip(prob, 1e-7, 1 - 1e-7)
    logloss = float(-np.mean(label * np.log(clipped) + (1 - label) * np.log(1 - clipped)))
    return float(roc_auc_score(label, prob)), logloss, int(keep.sum())


def table_kernels_of(recipe: dict) -> str:
    """``speed.table_kernels``: torch (default) or triton (``dlrm.table_kernels``)."""
    kernels = recipe.get("speed", {}).get("table_kernels", "torch")
    if kernels not in ("torch", "triton"):
        raise SystemExit(f"error: speed.table_kernels must be torch or triton, not {kernels!r}")
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
    embeddings = recipe["model"].get("embeddings", "torchrec")
    if recipe.get("amp") == "fp16" and embeddings == "torchrec":
        raise SystemExit(
            "error: --amp fp16 needs loss scaling, which TorchRec's fused embedding optimizers do not undo: "
            "use --amp bf16 or fp32 (or model.embeddings=plain)"
        )
    if recipe.get("amp") == "fp16" and embeddings == "plain" and table_kernels_of(recipe) == "triton":
        raise SystemExit(
            "error: --amp fp16 needs loss scaling, and speed.table_kernels=triton updates the tables inside "
            "backward, before a scaler could skip a step: use --amp bf16 or fp32 (or speed.table_kernels=torch)"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dlrm.train", description=__doc__.split("\n\n")[0])
    add_run_args(parser, default_recipe=DEFAULT_RECIPE, data_help="prepared Criteo shards ($DATA_DIR)")
    add_target_arg(parser, "auc", unit="ROC AUC fraction, MLPerf's unit", example=0.80275)
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="epochs to train (default: the recipe's; --max-steps for less)",
    )
    parser.add_argument(
        "--max-steps", type=int, default=None, help="stop after this many steps (default: the recipe's)"
    )
    parser.add_argument(
        "--batch-size", type=int, default=None, help="global batch size (default: the recipe's)"
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    return parser


@entry_point
def main(argv=None) -> None:
    args = parse_args(build_parser(), argv, renamed={"--target-accuracy": "--target-auc"})
    recipe = recipe_from_args(
        args,
        {
            "target_auc": "eval.target_auc",
            "epochs": "train.epochs",
            "max_steps": "train.max_steps",
            "batch_size": "train.batch_size",
        },
    )
    if not args.data_dir:
        raise SystemExit("error: give --data-dir (or set DATA_DIR): scripts/download_data.sh prepares one")
    train(recipe, pathlib.Path(args.data_dir), pathlib.Path(args.results_dir), args.resume, args.device)


def train(recipe: dict, data_dir: pathlib.Path, results_dir: pathlib.Path, resume, device_name=None) -> dict:
    """The training run; returns {"auc", "step", "samples", "status"} (auc None if never evaluated)."""
    from zoo.log import MetricsLogger
    from zoo.mlperf import MLPerfLogger
    from zoo.torch import close_distributed, fast_math, init_distributed

    from dlrm.data import Batches, Split, read_meta
    from dlrm.optim import lr_factor

    check_recipe(recipe)
    env, device = init_distributed(device_name)
    primary = env.rank == 0
    checkpoint = results_dir / CHECKPOINT_NAME
    resume_from = resolve_resume(resume, checkpoint)
    if resume_from is not None and not (resume_from / "progress.json").is_file():
        raise SystemExit(f"error: {resume_from} is not a DLRM checkpoint (no progress.json)")
    meta = read_meta(data_dir)
    # Saved with each checkpoint: export and evaluation rebuild the tables without the data.
    data_shape = {"num_embeddings": meta["num_embeddings"], "num_dense": meta["num_dense"]}
    train_split, val_split = Split(data_dir, "train"), Split(data_dir, "val")
    fast_math(device)
    tcfg, ecfg = recipe["train"], recipe.get("eval", {})
    global_batch = int(tcfg["batch_size"])
    target = ecfg.get("target_auc")
    results_dir.mkdir(parents=True, exist_ok=True)
    mlperf_path = results_dir / "mlperf.log"
    if primary and mlperf_path.exists():
        # One run per file, as the checker reads it: a resumed run keeps the earlier log beside its own.
        if resume_from is None:
            mlperf_path.unlink()
        else:
            part = 1
            while mlperf_path.with_name(f"mlperf.{part}.log").exists():
                part += 1
            mlperf_path.rename(mlperf_path.with_name(f"mlperf.{part}.log"))
    status, auc, step = "aborted", None, 0
    with MLPerfLogger(mlperf_path, MLPERF_BENCHMARK, enabled=primary) as mlperf:
        mlperf.cache_clear()
        mlperf.init_start()
        seed = int(recipe.get("seed", 0))
        mlperf.seed(seed)
        torch.manual_seed(seed)
        run = Run(recipe, meta, device, env.rank, env.world_size)
        batches = Batches(
            train_split,
            global_batch,
            env.rank,
            env.world_size,
            run.rows,
            run.hotness,
            drop_last=True,
            shuffle=bool(tcfg.get("shuffle", True)),
            seed=seed,
        )
        val_batches = Batches(
            val_split,
            int(ecfg.get("batch_size", global_batch)),
            env.rank,
            env.world_size,
            run.rows,
            run.hotness,
            drop_last=False,
        )
        epochs = float(tcfg.get("epochs", 1))
        total = int(epochs * batches.count)
        if tcfg.get("max_steps"):
            total = min(total, int(tcfg["max_steps"]))
        every = int(ecfg.get("every_steps") or batches.count)
        mlperf.global_batch_size(global_batch)
        mlperf.gradient_accumulation_steps(1)
        mlperf.train_samples(train_split.rows)
        mlperf.eval_samples(val_split.rows)
        opt = recipe["optimizer"]
        mlperf.hyperparameters(
            opt_name=opt.get("name", "adagrad"),
            opt_base_learning_rate=float(opt["lr"]),
            opt_adagrad_learning_rate_decay=0.0,
            opt_weight_decay=0.0,
            opt_adagrad_initial_accumulator_value=0.0,
            opt_adagrad_epsilon=1e-8,
            opt_learning_rate_warmup_steps=int(recipe.get("schedule", {}).get("warmup_steps", 0)),
            opt_learning_rate_decay_start_step=int(recipe.get("schedule", {}).get("decay_start", 0)),
            opt_learning_rate_decay_steps=int(recipe.get("schedule", {}).get("decay_steps", 0)),
        )
        if resume_from is not None:
            step = int(run.load(resume_from)["step"])
        if primary and run.plan:
            (results_dir / "sharding_plan.txt").write_text(run.plan)
        mlperf.init_stop()
        mlperf.run_start()
        logger = MetricsLogger(
            results_dir / "metrics.jsonl", enabled=primary, total_steps=total, desc="train"
        )
        log_every = int(tcfg.get("log_every", 10))
        checkpoint_every = int(tcfg.get("checkpoint_every", 0))
        losses, started = [], time.perf_counter()
        epoch = step // batches.count
        mlperf.epoch_start(epoch + 1, samples=step * global_batch)
        while step < total:
            epoch, position = divmod(step, batches.count)
            if position == 0 and step:
                mlperf.epoch_stop(epoch, samples=step * global_batch)
                mlperf.epoch_start(epoch + 1, samples=step * global_batch)
            labels, dense, sparse, _ = batches.get(int(batches.order(epoch)[position]))
            run.set_lr(lr_factor(step, recipe.get("schedule", {})))
            losses.append(run.step(labels, dense, sparse))
            step += 1
            logger.progress(step, global_batch)
            if step % log_every == 0 or step == total:
                loss = _all_mean(torch.stack(losses).mean())
                elapsed = time.perf_counter() - started
                logger.log(
                    step,
                    {"loss": loss, "samples_per_s": len(losses) * global_batch / elapsed},
                    units={"samples_per_s": " samples/s"},
                )
                losses, started = [], time.perf_counter()
            if checkpoint_every and step % checkpoint_every == 0 and step < total:
                run.save(checkpoint, {"step": step, **data_shape})
            if step % every == 0 or step == total:
                mlperf.eval_start(epoch + 1, samples=step * global_batch)
                auc, logloss, n = evaluate_auc(run, val_batches)
                mlperf.eval_stop(epoch + 1, samples=step * global_batch)
                mlperf.eval_accuracy(auc, epoch + 1, samples=step * global_batch)
                logger.log(step, {"auc": auc, "logloss": logloss, "samples": n}, phase="eval")
                if target is not None and auc >= float(target):
                    status = "success"
                    break
                started = time.perf_counter()
        mlperf.epoch_stop(epoch + 1, samples=step * global_batch)
        if status != "success":
            status = "aborted" if target is not None else "success"
        run.save(checkpoint, {"step": step, "auc": auc, **data_shape})
        mlperf.run_stop(status)
        logger.close()
    close_distributed()
    return {"auc": auc, "step": step, "samples": step * global_batch, "status": status}


if __name__ == "__main__":
    main()
