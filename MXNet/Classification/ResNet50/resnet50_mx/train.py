"""Train ResNet-50 v1.5 with Gluon: one process drives all its GPUs through a kvstore.

Parallelism:
  * one process, several GPUs: ``--gpus 0,1,2,3`` with kvstore ``device`` (or ``nccl``);
  * several processes / nodes: MXNet's parameter-server launcher. Every process runs this module;
    ``DMLC_ROLE`` (scheduler | server | worker), ``DMLC_PS_ROOT_URI``/``DMLC_PS_ROOT_PORT``,
    ``DMLC_NUM_WORKER`` and ``DMLC_NUM_SERVER`` come from the environment (``mxnet/tools/launch.py``
    or a cluster scheduler sets them). Scheduler and server processes serve inside ``import mxnet``
    and never reach the training loop; workers use kvstore ``dist_sync``;
  * ``--horovod``: Horovod's MXNet binding where it is installed (one process per GPU).

Checkpoints are written at the end of every epoch (parameters, trainer states, loss-scaler state,
epoch and step); the data order, augmentation and MXNet RNG of an epoch are seeded from the epoch
number, so ``--resume`` continues exactly the run that was interrupted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.contrib import amp as mx_amp
from zoo.cli import AMP_CHOICES, add_run_args, add_target_arg, entry_point, parse_args, resolve_resume
from zoo.cli import recipe_from_args as recipe_from_cli
from zoo.io import remove_stale_temps

from .data import BACKENDS, DataSpec, build_loader
from .evaluate import evaluate
from .model import LAYOUTS, build_model, count_parameters
from .records import check_dataset, read_classes, require_classes

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
DEFAULT_RECIPE = CONFIG_DIR / "resnet50_1gpu_90ep.yaml"
CHECKPOINT_NAME = "checkpoints/latest.json"  # in RESULTS_DIR: what --resume auto continues
LOG_EVERY = 20  # steps between reads of the loss (each read waits for the devices)


# ----------------------------------------------------------------------------- recipe and schedule
def learning_rate(step: int, *, base_lr: float, warmup_steps: int, total_steps: int, kind: str) -> float:
    """Linear warm-up from 0, then cosine (or linear) decay to 0 at ``total_steps``."""
    if warmup_steps and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if kind == "cosine":
        return 0.5 * base_lr * (1 + math.cos(math.pi * progress))
    if kind == "linear":
        return base_lr * (1 - progress)
    if kind == "constant":
        return base_lr
    raise SystemExit(f"unknown schedule kind {kind!r} (cosine, linear, constant)")


def smoothed_cross_entropy(F, logits, label, num_classes: int, smoothing: float):
    """Per-sample cross-entropy against one-hot labels smoothed by ``smoothing``."""
    off = smoothing / num_classes
    target = F.one_hot(label, num_classes, on_value=1.0 - smoothing + off, off_value=off)
    log_prob = F.log_softmax(logits.astype("float32"), axis=-1)
    return -F.sum(target * log_prob, axis=-1)


# ----------------------------------------------------------------------------- devices and processes
def parse_gpus(value: str | None) -> list[int]:
    """``"0,1"`` -> [0, 1]; ``"4"`` alone means the first four; empty/None means the CPU."""
    if value in (None, "", "cpu"):
        return []
    try:
        items = [int(v) for v in str(value).split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"--gpus must be a count or a comma list of GPU ids, got {value!r}") from None
    gpus = list(range(items[0])) if len(items) == 1 and "," not in str(value) else items
    available = mx.context.num_gpus()
    if gpus and max(gpus) >= available:
        raise SystemExit(f"--gpus {value} asks for GPU {max(gpus)} but this machine has {available} GPU(s)")
    return gpus


class Processes:
    """This process's place in the job and the kvstore that joins the processes / devices."""

    def __init__(self, kvstore: str, num_devices: int, horovod: bool):
        self.hvd = None
        self.kv = None
        role = os.environ.get("DMLC_ROLE")
        if horovod:
            try:
                import horovod.mxnet as hvd
            except ImportError as e:
                raise SystemExit(f"--horovod needs horovod built with MXNet support: {e}") from None
            hvd.init()
            self.hvd, self.rank, self.world, self.local_rank = hvd, hvd.rank(), hvd.size(), hvd.local_rank()
            return
        if role == "worker":
            kvstore = kvstore if kvstore.startswith("dist") else "dist_sync"
        elif kvstore.startswith("dist"):
            raise SystemExit(f"kvstore {kvstore} needs the DMLC_* environment of MXNet's launcher")
        if kvstore.startswith("dist") or num_devices > 1:
            self.kv = mx.kv.create(kvstore)
        self.rank = self.kv.rank if self.kv else 0
        self.world = self.kv.num_workers if self.kv else 1
        self.local_rank = 0

    @property
    def primary(self) -> bool:
        return self.rank == 0

    def barrier(self):
        if self.kv is not None and self.world > 1:
            self.kv._barrier()


# ----------------------------------------------------------------------------- checkpoints
def checkpoint_dir(results_dir: str | os.PathLike) -> Path:
    return Path(results_dir) / "checkpoints"


def save_checkpoint(results_dir, epoch: int, net, trainer, state: dict) -> Path:
    """Write epoch_NNN.{params,states,json}; ``latest.json`` last, so a torn write is never resumed."""
    from zoo.io import atomic_write

    folder = checkpoint_dir(results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"epoch_{epoch:03d}"
    with atomic_write(folder / f"{stem}.params") as tmp:
        net.save_parameters(str(tmp))
    with atomic_write(folder / f"{stem}.states") as tmp:
        trainer.save_states(str(tmp))
    state = dict(state, params=f"{stem}.params", states=f"{stem}.states")
    text = json.dumps(state, indent=1)
    for name in (f"{stem}.json", "latest.json"):
        with atomic_write(folder / name) as tmp:
            Path(tmp).write_text(text)
    return folder / f"{stem}.json"


def read_checkpoint_state(path: str | os.PathLike) -> tuple[Path, dict]:
    """``path`` is a checkpoint's .json, or a results/checkpoints folder (its latest.json)."""
    path = Path(path)
    if path.is_dir():
        path = (
            path / "latest.json" if (path / "latest.json").is_file() else path / "checkpoints" / "latest.json"
        )
    if not path.is_file():
        raise SystemExit(f"error: no checkpoint to resume at {path}")
    try:
        state = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise SystemExit(
            f"error: {path} is not an MXNet ResNet-50 training checkpoint (--resume takes a results folder "
            "or its checkpoints/epoch_NNN.json)"
        ) from None
    missing = [
        key
        for key in ("epoch", "step", "params", "states")
        if not isinstance(state, dict) or key not in state
    ]
    if missing:
        raise SystemExit(f"error: {path} is not an MXNet ResNet-50 training checkpoint (no '{missing[0]}')")
    return path.parent, state


def check_resume_fits(folder: Path, state: dict, *, num_classes: int, layout: str) -> None:
    """A one-line error, before anything is written, when the checkpoint is not this run's network."""
    from .checkpoint import read_params

    for key, ours in (("num_classes", num_classes), ("layout", layout)):
        if key in state and state[key] != ours:
            raise SystemExit(
                f"error: cannot resume from {folder}: it has {key} {state[key]}, this run {ours} "
                "(use the checkpoint's recipe, or --resume none)"
            )
    for name in ("params", "states"):
        if not (folder / state[name]).is_file():
            raise SystemExit(f"error: cannot resume from {folder}: {state[name]} is missing")
    found = int(read_params(folder / state["params"])["fc.weight"].shape[0])
    if found != num_classes:
        raise SystemExit(
            f"error: cannot resume from {folder}: its weights have {found} classes, this run {num_classes}"
        )


# ----------------------------------------------------------------------------- MLPerf log
def mlperf_log_path(results_dir, resumed_after: int) -> Path:
    """Where this job's MLPerf log goes. The compliance checker takes one run per file, so each job has
    its own: ``mlperf.log`` from scratch, ``mlperf.resumed_after_epoch_NNN.log`` when continuing."""
    name = f"mlperf.resumed_after_epoch_{resumed_after:03d}.log" if resumed_after else "mlperf.log"
    return Path(results_dir) / name


def log_mlperf_settings(mlperf, recipe: dict, *, seed, global_batch, base_lr, train_samples, eval_samples):
    """The run's settings as MLPerf keys (the resnet ruleset's names); ``eval_samples`` None: no evaluation."""
    opt = recipe["optimizer"]
    name = opt.get("name", "sgd")
    prefix = "sgd_" if name == "sgd" else ""  # the ruleset spells the SGD keys sgd_opt_*
    mlperf.seed(seed)
    mlperf.global_batch_size(global_batch)
    mlperf.gradient_accumulation_steps(1)
    mlperf.train_samples(train_samples)
    if eval_samples is not None:
        mlperf.eval_samples(eval_samples)
    mlperf.hyperparameters(
        opt_name=name,
        **{
            f"{prefix}opt_base_learning_rate": base_lr,
            f"{prefix}opt_momentum": opt.get("momentum", 0.9),
            f"{prefix}opt_weight_decay": opt.get("weight_decay", 1e-4),
        },
        opt_learning_rate_warmup_epochs=float(recipe["schedule"].get("warmup_epochs", 0)),
        model_bn_span=int(recipe["data"]["batch_size"]),  # BatchNorm statistics are per device
    )


# ----------------------------------------------------------------------------- the run
def check_data(spec: DataSpec, evaluating: bool) -> dict:
    """Check the RecordIO files the run reads (records.check_dataset) and that the recipe's class count
    is the data's; returns what was found per split ({} for synthetic data)."""
    if spec.backend == "synthetic":
        return {}
    if spec.data_dir is None:
        raise SystemExit(
            f"error: --data-backend {spec.backend} needs --data-dir (or use --data-backend synthetic)"
        )
    splits = ["train", "val"] if evaluating else ["train"]
    checked = check_dataset(spec.data_dir, splits, threads=spec.threads)
    require_classes(
        spec.data_dir,
        checked,
        spec.num_classes,
        "the recipe (model.num_classes, --num-classes)",
        "pass --num-classes {count}",
    )
    return checked


def build_trainer(net, recipe: dict, procs: Processes, amp: str, base_lr: float):
    opt = recipe["optimizer"]
    params = net.collect_params()
    if opt.get("no_decay_bn_bias", True):
        for name, param in params.items():
            if name.endswith(("gamma", "beta", "bias")):
                param.wd_mult = 0.0
    options = {
        "learning_rate": base_lr,
        "momentum": opt.get("momentum", 0.9),
        "wd": opt.get("weight_decay", 1e-4),
    }
    name = opt.get("name", "sgd")  # any Gluon optimizer taking momentum: sgd, nag
    if procs.hvd is not None:
        trainer = procs.hvd.DistributedTrainer(params, name, options)
        procs.hvd.broadcast_parameters(params, root_rank=0)
    else:
        trainer = gluon.Trainer(params, name, options, kvstore=procs.kv, update_on_kvstore=False)
    if amp != "fp32":
        mx_amp.init_trainer(trainer)
    if procs.hvd is None and procs.kv is not None:
        # Create the kvstore and broadcast rank 0's weights now, and wait for the broadcast. Left to
        # the first step() (Gluon's default), a worker's broadcast pull of a key could be answered
        # after the first gradient push to that key had been merged, so that worker took the
        # gradient sum for its weights (fc.weight, the first gradient ready, on loaded machines).
        trainer._init_kvstore()
        trainer._init_params()
        mx.nd.waitall()
        procs.barrier()
    return trainer


def loss_scaler_state(trainer) -> dict | None:
    scaler = getattr(trainer, "_amp_loss_scaler", None)
    if scaler is None:
        return None
    return {k: getattr(scaler, k) for k in ("_loss_scale", "_next_loss_scale", "_unskipped")}


def restore_loss_scaler(trainer, state: dict | None):
    scaler = getattr(trainer, "_amp_loss_scaler", None)
    if scaler is not None and state:
        for key, value in state.items():
            setattr(scaler, key, value)


def train_step(net, trainer, data, label, ctx, *, num_classes, smoothing, amp, step_batch):
    """Forward, backward and update on ``data`` split over ``ctx``; returns (loss sum, correct) as
    NDArrays on ``ctx[0]`` so that nothing here waits for the devices."""
    datas = gluon.utils.split_and_load(data, ctx, even_split=False)
    labels = gluon.utils.split_and_load(label, ctx, even_split=False)
    with autograd.record():
        outputs = [net(x) for x in datas]
        losses = [
            smoothed_cross_entropy(mx.nd, o, y, num_classes, smoothing)
            for o, y in zip(outputs, labels, strict=True)
        ]
        if amp != "fp32":  # the scaling must be recorded too
            with mx_amp.scale_loss(losses, trainer) as scaled:
                autograd.backward(scaled)
        else:
            autograd.backward(losses)
    trainer.step(step_batch)
    loss = mx.nd.add_n(*[v.sum().as_in_context(ctx[0]) for v in losses])
    hits = mx.nd.add_n(
        *[
            (o.argmax(axis=1) == y.astype(o.dtype)).astype("float32").sum().as_in_context(ctx[0])
            for o, y in zip(outputs, labels, strict=True)
        ]
    )
    return loss, hits


def _drain(pending: list, loss_sum: float, correct: int, counted: int):
    """Add the pending per-step (loss, hits, images) NDArrays to the running totals."""
    for loss, hits, images in pending:
        loss_sum += float(loss.asscalar())
        correct += int(hits.asscalar())
        counted += images
    pending.clear()
    return loss_sum, correct, counted


def run(recipe: dict, args) -> dict:
    """Train as the recipe says; returns the final metrics (train loss, top1/top5 if evaluated)."""
    from zoo.log import MetricsLogger
    from zoo.mlperf import CLOSED_TARGETS, MLPerfLogger

    amp = recipe.get("amp") or "fp32"
    if amp not in AMP_CHOICES:
        hint = " (no AMP is now fp32)" if amp == "none" else ""
        raise SystemExit(f"error: recipe amp must be one of {', '.join(AMP_CHOICES)}, got {amp!r}{hint}")
    gpus = parse_gpus(recipe.get("gpus"))
    procs = Processes(recipe.get("kvstore", "device"), len(gpus), recipe.get("horovod", False))
    if procs.hvd is not None:
        gpus = [procs.local_rank]
    ctx = [mx.gpu(g) for g in gpus] or [mx.cpu()]
    if amp == "fp16" and not gpus:
        raise SystemExit(
            "--amp fp16 needs a GPU (MXNet's float16 kernels are GPU-only); on CPU use --amp bf16"
        )
    if amp != "fp32":
        # Must precede building the network: AMP rewrites the operator namespaces.
        mx_amp.init(target_dtype="float16" if amp == "fp16" else "bfloat16")

    data_cfg, model_cfg, sched = recipe["data"], recipe["model"], recipe["schedule"]
    spec = DataSpec(
        backend=data_cfg["backend"],
        data_dir=data_cfg.get("dir"),
        batch_size=int(data_cfg["batch_size"]) * len(ctx),
        image_size=int(data_cfg["image_size"]),
        num_classes=int(model_cfg["num_classes"]),
        num_parts=procs.world,
        part_index=procs.rank,
        threads=int(data_cfg.get("threads", 4)),
        synthetic_batches=int(data_cfg.get("synthetic_batches", 20)),
        layout=model_cfg.get("input_layout", "NCHW"),
        random_resized_crop=bool(data_cfg.get("random_resized_crop", True)),
        min_random_area=float(data_cfg.get("min_random_area", 0.08)),
        mirror=bool(data_cfg.get("mirror", True)),
    )
    evaluating = recipe.get("evaluate", True) and spec.backend != "synthetic"
    # Everything a run reads is checked before it writes anything: the data (the C++ reader would
    # crash on a bad record), its class count, the checkpoint it continues.
    checked = check_data(spec, evaluating)
    results = Path(recipe["results_dir"])
    resume_state = read_checkpoint_state(recipe["resume"]) if recipe.get("resume") else None
    if resume_state:
        check_resume_fits(*resume_state, num_classes=spec.num_classes, layout=model_cfg.get("layout", "NCHW"))
    resumed_after = resume_state[1]["epoch"] if resume_state else 0
    mlperf_log = mlperf_log_path(results, resumed_after)
    if procs.primary:
        mlperf_log.unlink(missing_ok=True)  # a run started over (or resumed again) replaces its job's log
        remove_stale_temps(checkpoint_dir(results))  # a checkpoint write killed midway left these
    with MLPerfLogger(mlperf_log, "resnet", enabled=procs.primary) as mlperf:
        mlperf.cache_clear(False)  # the page cache is not dropped: the first epoch may read from it
        mlperf.init_start()
        seed = int(recipe.get("seed", 0))
        global_batch = spec.batch_size * procs.world
        base_lr = float(recipe["optimizer"]["lr_per_256"]) * global_batch / 256

        mx.random.seed(seed)
        net = build_model(
            spec.num_classes,
            layout=model_cfg.get("layout", "NCHW"),
            input_layout=spec.layout,
            zero_init_last_gamma=model_cfg.get("zero_init_last_gamma", False),
        )
        net.initialize(mx.init.MSRAPrelu(factor_type="in", slope=0.0), ctx=ctx)
        trainer = build_trainer(net, recipe, procs, amp, base_lr)

        start_epoch, step, best = 0, 0, {}
        if resume_state:
            folder, state = resume_state
            try:
                net.load_parameters(str(folder / state["params"]), ctx=ctx)
                trainer.load_states(str(folder / state["states"]))
            except (AssertionError, OSError, mx.base.MXNetError) as e:
                reason = str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__
                raise SystemExit(f"cannot resume from {folder}: {reason}") from None
            restore_loss_scaler(trainer, state.get("loss_scaler"))
            start_epoch, step, best = state["epoch"], state["step"], state.get("best", {})
        if model_cfg.get("hybridize", True):
            net.hybridize(static_alloc=True, static_shape=True)

        first = build_loader(spec, train=True, epoch=start_epoch, seed=seed, ctx=ctx[0])
        steps_per_epoch = first.batches
        if recipe.get("steps_per_epoch"):
            steps_per_epoch = min(steps_per_epoch, int(recipe["steps_per_epoch"]))
        epochs = int(sched["epochs"])
        total_steps = epochs * steps_per_epoch
        warmup = int(round(float(sched.get("warmup_epochs", 0)) * steps_per_epoch))
        num_classes, smoothing = spec.num_classes, float(recipe["loss"].get("label_smoothing", 0.0))
        logger = MetricsLogger(
            str(results / "metrics.jsonl"),
            enabled=procs.primary,
            total_steps=total_steps,
            desc="train",
        )
        if procs.primary:
            print(
                f"ResNet-50 v1.5: {count_parameters(net):,} parameters, {procs.world} process(es) x "
                f"{len(ctx)} device(s) ({', '.join(map(str, ctx))}), global batch {global_batch}, lr {base_lr:g}, "
                f"amp {amp}, kvstore {procs.kv.type if procs.kv else 'none'}, {steps_per_epoch} steps/epoch",
                file=sys.stderr,
            )
        log_mlperf_settings(
            mlperf,
            recipe,
            seed=seed,
            global_batch=global_batch,
            base_lr=base_lr,
            train_samples=first.num_samples,
            eval_samples=checked["val"].records if evaluating else None,
        )
        mlperf.init_stop()
        mlperf.run_start()
        metrics: dict = {}
        # The run's status: success once validation top-1 reaches the target (MLPerf's 75.9% without one).
        quality = float(recipe.get("target_top1") or 100 * CLOSED_TARGETS["resnet"])
        status = "aborted"
        for epoch in range(start_epoch, epochs):
            mlperf.epoch_start(epoch + 1, samples=step * global_batch)
            mx.random.seed(seed + 1000 * epoch + procs.rank)
            loader = (
                first
                if epoch == start_epoch
                else build_loader(spec, train=True, epoch=epoch, seed=seed, ctx=ctx[0])
            )
            loss_sum, correct, seen, counted, tic, pending = 0.0, 0, 0, 0, time.time(), []
            for i, (data, label, _pad) in enumerate(loader):
                if i >= steps_per_epoch:
                    break
                lr = learning_rate(
                    step, base_lr=base_lr, warmup_steps=warmup, total_steps=total_steps, kind=sched["kind"]
                )
                trainer.set_learning_rate(lr)
                # Gradients are summed over devices and workers by the kvstore: normalise by the global batch.
                loss, hits = train_step(
                    net,
                    trainer,
                    data,
                    label,
                    ctx,
                    num_classes=num_classes,
                    smoothing=smoothing,
                    amp=amp,
                    step_batch=global_batch if procs.hvd is None else spec.batch_size,
                )
                step += 1
                seen += data.shape[0]
                pending.append((loss, hits, data.shape[0]))
                if len(pending) >= LOG_EVERY:  # reading values waits for the devices: only now and then
                    loss_sum, correct, counted = _drain(pending, loss_sum, correct, counted)
                logger.progress(
                    i + 1, data.shape[0] * procs.world, {"loss": loss_sum / max(1, counted), "lr": lr}
                )
            loss_sum, correct, counted = _drain(pending, loss_sum, correct, counted)
            # BatchNorm's running statistics are written by the engine outside the static graph's
            # dependency tracking: wait for every pending write before reading or saving them.
            mx.nd.waitall()
            elapsed = time.time() - tic
            mlperf.epoch_stop(epoch + 1, samples=step * global_batch)
            metrics = {
                "loss": loss_sum / max(1, seen),
                "train_top1": correct / max(1, seen),
                "images_per_s": seen * procs.world / max(elapsed, 1e-9),
            }
            if evaluating:
                mlperf.eval_start(epoch + 1, samples=step * global_batch)
                val = build_loader(spec, train=False, epoch=epoch, seed=seed, ctx=ctx[0])
                with MetricsLogger(enabled=procs.primary, total_steps=val.batches, desc="eval") as progress:
                    metrics.update(evaluate(net, val, ctx, progress))
                mlperf.eval_stop(epoch + 1, samples=step * global_batch)
                mlperf.eval_accuracy(metrics["top1"], epoch + 1, samples=step * global_batch)
                if metrics["top1"] > best.get("top1", -1):
                    best = {"top1": metrics["top1"], "top5": metrics["top5"], "epoch": epoch + 1}
            logger.log(step, dict(metrics, epoch=epoch + 1), units={"images_per_s": " img/s"}, phase="epoch")
            procs.barrier()
            if procs.primary and recipe.get("checkpoint", True):
                state = {
                    "epoch": epoch + 1,
                    "step": step,
                    "best": best,
                    "metrics": metrics,
                    "loss_scaler": loss_scaler_state(trainer),
                    "num_classes": num_classes,
                    "classes": read_classes(spec.data_dir),
                    "layout": model_cfg.get("layout", "NCHW"),
                    "input_layout": spec.layout,
                    "image_size": spec.image_size,
                    "amp": amp,
                }
                save_checkpoint(results, epoch, net, trainer, state)
            procs.barrier()
            if 100 * metrics.get("top1", 0) >= quality:  # top1 is a fraction, the target a percentage
                status = "success"
                if recipe.get("target_top1"):
                    break
            if recipe.get("stop_after") and epoch + 1 - start_epoch >= int(recipe["stop_after"]):
                break  # a time-limited job: --resume continues from here
        mlperf.run_stop(status)
        logger.close()
    results.mkdir(parents=True, exist_ok=True)
    if procs.primary:
        net.save_parameters(str(results / "final.params"))
    if procs.world > 1:  # every worker's copy, to check that the replicas agree
        net.save_parameters(str(results / f"final.rank{procs.rank}.params"))
    return dict(metrics, best=best, step=step, rank=procs.rank)


# ----------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="train.sh",
        description="Train ResNet-50 v1.5 (MXNet Gluon). Flags override the recipe; --set key=value overrides any key.",
    )
    add_run_args(
        p,
        default_recipe=DEFAULT_RECIPE,
        data_help="folder with train.rec/.idx and val.rec/.idx ($DATA_DIR; scripts/download_data.sh)",
    )
    add_target_arg(p, "top1", unit="%", example=75.9)
    p.add_argument("--data-backend", choices=BACKENDS, help="input pipeline")
    p.add_argument("--synthetic", action="store_true", help="same as --data-backend synthetic")
    p.add_argument("--gpus", help="GPU count ('0': CPU) or comma list of ids ('2,3'; one id: '2,')")
    p.add_argument(
        "--kvstore", help="device | nccl | dist_sync | dist_device_sync (dist_*: set by the launcher)"
    )
    p.add_argument("--horovod", action="store_true", help="Horovod instead of the kvstore (where installed)")
    p.add_argument("--layout", choices=LAYOUTS, help="convolution layout (NHWC is fastest on GPU)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--batch-size", type=int, help="per device")
    p.add_argument("--image-size", type=int)
    p.add_argument("--num-classes", type=int)
    p.add_argument("--lr-per-256", type=float, help="learning rate per 256 images of global batch")
    p.add_argument(
        "--steps-per-epoch", type=int, help="cap the steps of each epoch (smoke tests, benchmarks)"
    )
    p.add_argument("--seed", type=int)
    p.add_argument("--no-eval", action="store_true", help="skip validation after each epoch")
    p.add_argument("--no-hybridize", action="store_true", help="run the network imperatively")
    p.add_argument("--stop-after", type=int, help="end this job after N epochs (for time-limited jobs)")
    return p


def recipe_from_args(args) -> dict:
    """The recipe with the flags applied; ``resume`` is the checkpoint .json (or folder) to continue, or None."""
    recipe = recipe_from_cli(
        args,
        {
            "data_dir": "data.dir",
            "data_backend": "data.backend",
            "gpus": "gpus",
            "kvstore": "kvstore",
            "layout": "model.layout",
            "epochs": "schedule.epochs",
            "batch_size": "data.batch_size",
            "image_size": "data.image_size",
            "num_classes": "model.num_classes",
            "lr_per_256": "optimizer.lr_per_256",
            "seed": "seed",
            "target_top1": "target_top1",
        },
    )
    for flag in ("steps_per_epoch", "stop_after"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise SystemExit(f"error: --{flag.replace('_', '-')} must be a positive integer, not {value}")
    target = recipe.get("target_top1")
    if target is not None and not 1 < float(target) <= 100:
        raise SystemExit(f"error: --target-top1 is a percentage in (1, 100], e.g. 75.9; got {target}")
    if args.synthetic:
        recipe["data"]["backend"] = "synthetic"
    elif args.data_dir and not args.data_backend and recipe["data"]["backend"] == "synthetic":
        recipe["data"]["backend"] = "recordio"
    recipe["horovod"] = args.horovod
    recipe["steps_per_epoch"] = args.steps_per_epoch
    recipe["stop_after"] = args.stop_after
    recipe["evaluate"] = not args.no_eval
    recipe["model"]["hybridize"] = not args.no_hybridize
    recipe["results_dir"] = args.results_dir
    resume_from = resolve_resume(args.resume, Path(args.results_dir) / CHECKPOINT_NAME)
    recipe["resume"] = str(resume_from) if resume_from else None
    if isinstance(recipe.get("gpus"), int):
        recipe["gpus"] = str(recipe["gpus"]) if recipe["gpus"] > 0 else None
    return recipe


@entry_point
def main(argv=None):
    args = parse_args(build_parser(), argv)
    recipe = recipe_from_args(args)
    result = run(recipe, args)
    if result.get("rank", 0) == 0:
        shown = {k: v for k, v in result.items() if k in ("loss", "train_top1", "top1", "top5", "best")}
        print(json.dumps(shown))


if __name__ == "__main__":
    main()
