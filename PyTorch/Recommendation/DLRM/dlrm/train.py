"""Train DLRM / DLRM-DCNv2 on prepared Criteo shards: ``python -m dlrm.train --data-dir D``.

train.py wires: the recipe (its run: section, the shared flags), the data, the step (dlrm.step.TrainStep:
TorchRec-sharded or plain embeddings), the loggers; then the loop of dlrm.engine between evaluations,
checkpoints and the AUC target. Evaluation: exact ROC AUC over the whole validation split;
``--target-auc`` stops once reached. Writes metrics.jsonl, tensorboard/, mlperf.log (dlrm_dcnv2, ruleset
6.0.0; a resumed run writes mlperf_resume<N>.log) and the sharded checkpoint folder ``checkpoint/``
(zoo.torch.save_training_checkpoint_sharded) under --results-dir.
"""

from __future__ import annotations

import argparse
import pathlib

from zoo.cli import (
    Preemption,
    add_run_args,
    add_target_arg,
    entry_point,
    parse_args,
    recipe_from_args,
    resolve_resume,
)
from zoo.errors import UserError

MLPERF_BENCHMARK = "dlrm_dcnv2"


def build_parser() -> argparse.ArgumentParser:
    from dlrm import DEFAULT_RECIPE

    parser = argparse.ArgumentParser(prog="python -m dlrm.train", description=__doc__.split("\n\n")[0])
    add_run_args(parser, default_recipe=DEFAULT_RECIPE, data_help="prepared Criteo shards ($DATA_DIR)")
    add_target_arg(parser, "auc", unit="ROC AUC fraction, MLPerf's unit", example=0.80275)
    parser.add_argument("--epochs", type=int, default=None, help="epochs to train (run.epochs)")
    parser.add_argument(
        "--steps", type=int, default=None, help="optimizer steps to train instead (run.steps)"
    )
    parser.add_argument("--max-steps", dest="steps", type=int, help="the same as --steps")
    parser.add_argument(
        "--batch-size", type=int, default=None, help="samples per GPU (run.batch_per_gpu; global: x GPUs)"
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    return parser


def counted_in(args) -> None:
    """--epochs and --steps each count the run: the one given clears the recipe's other (a --set wins)."""
    if args.steps is not None:
        args.set.insert(0, "run.epochs=null")
    if args.epochs is not None:
        args.set.insert(0, "run.steps=null")


@entry_point
def main(argv=None) -> dict:
    args = parse_args(build_parser(), argv, renamed={"--target-accuracy": "--target-auc"})
    counted_in(args)
    recipe = recipe_from_args(args)
    if not args.data_dir:
        raise UserError("give --data-dir (or set DATA_DIR): scripts/download_data.sh prepares one")
    return train(
        recipe, pathlib.Path(args.data_dir), pathlib.Path(args.results_dir), args.resume, args.device
    )


def next_stop(done: int, run, epoch_steps: int, total: int) -> int:
    """Where training next stops: the epoch's end, the next evaluation or checkpoint counted in steps,
    or the run's end."""
    stops = [total, (done // epoch_steps + 1) * epoch_steps]
    for every in (run.eval_every, run.checkpoint_every):
        if every is not None and every.unit == "steps":
            stops.append((done // every.count + 1) * every.count)
    return min(stops)


def due(every, done: int, epoch_steps: int) -> bool:
    """Whether ``every`` (run.eval_every / run.checkpoint_every) falls after step ``done``."""
    if every is None:
        return False
    if every.unit == "steps":
        return every.due(0, done)
    return done % epoch_steps == 0 and every.due(done // epoch_steps, done)


def log_mlperf_settings(
    mlperf, recipe: dict, global_batch: int, train_samples: int, eval_samples: int
) -> None:
    """The MLPerf log's settings: global batch, data sizes, the optimizer and its schedule."""
    schedule, opt = recipe["schedule"], recipe["optimizer"]
    mlperf.global_batch_size(global_batch)
    mlperf.gradient_accumulation_steps(1)
    mlperf.train_samples(train_samples)
    mlperf.eval_samples(eval_samples)
    mlperf.hyperparameters(
        opt_name=opt.get("name", "adagrad"),
        opt_base_learning_rate=float(opt["lr"]),
        opt_adagrad_learning_rate_decay=0.0,
        opt_weight_decay=0.0,
        opt_adagrad_initial_accumulator_value=0.0,
        opt_adagrad_epsilon=1e-8,
        opt_learning_rate_warmup_steps=int(schedule.get("warmup_steps", 0)),
        opt_learning_rate_decay_start_step=int(schedule.get("decay_start", 0)),
        opt_learning_rate_decay_steps=int(schedule.get("decay_steps", 0)),
    )


def train(recipe: dict, data_dir: pathlib.Path, results_dir: pathlib.Path, resume, device_name=None) -> dict:
    """The training run; returns {"auc", "step", "samples", "status"} (auc None if never evaluated)."""
    from zoo.recipe import run_config

    from dlrm.data import Split, read_meta

    # Everything a run reads is checked before it writes anything into the results folder; the recipe
    # and the data before torch is imported (bad input ends in a second).
    run = run_config(recipe)
    meta = read_meta(data_dir)
    train_split, val_split = Split(data_dir, "train", meta), Split(data_dir, "val", meta)

    import torch
    from zoo.io import atomic_write
    from zoo.log import MetricsLogger
    from zoo.mlperf import MLPerfLogger, log_path
    from zoo.retention import improves
    from zoo.rng import set_rng_state
    from zoo.torch import (
        SHARDED_CHECKPOINT_NAME,
        close_distributed,
        fast_math,
        init_distributed,
        recover_sharded_checkpoint,
    )

    from dlrm.engine import evaluate, train_one_epoch
    from dlrm.step import TrainStep, check_recipe, read_checkpoint

    check_recipe(recipe)
    env, device = init_distributed(device_name)
    checkpoint = results_dir / SHARDED_CHECKPOINT_NAME
    recover_sharded_checkpoint(checkpoint)  # a run killed while saving left its last whole checkpoint aside
    resume_from = resolve_resume(resume, checkpoint)
    state = read_checkpoint(resume_from) if resume_from is not None else {"step": 0}
    fast_math(device)
    global_batch = run.batch_per_gpu * env.world_size
    results_dir.mkdir(parents=True, exist_ok=True)
    mlperf_path = log_path(results_dir, resumed=resume_from is not None) if env.is_primary else None
    status, metrics, done = "aborted", None, int(state["step"])
    with MLPerfLogger(mlperf_path, MLPERF_BENCHMARK, enabled=env.is_primary) as mlperf:
        mlperf.cache_clear()
        mlperf.init_start()
        mlperf.seed(run.seed)
        torch.manual_seed(run.seed)
        step = TrainStep(recipe, meta, device, env.rank, env.world_size)
        batches = step.batches(train_split, global_batch, train=True)
        val_batches = step.batches(val_split, int(recipe["eval"]["batch_size"]), train=False)
        total = run.steps if run.steps is not None else run.epochs * batches.count
        log_mlperf_settings(mlperf, recipe, global_batch, train_split.rows, val_split.rows)
        if resume_from is not None:
            step.load(resume_from)
            set_rng_state(state["rng"][env.rank] if env.rank < len(state["rng"]) else state["rng"][0])
        if env.is_primary and step.plan:
            with atomic_write(results_dir / "sharding_plan.txt") as tmp:
                tmp.write_text(step.plan)
        mlperf.init_stop()
        mlperf.run_start()
        logger = MetricsLogger(
            results_dir / "metrics.jsonl", enabled=env.is_primary, total_steps=total, desc="train"
        )

        best, improved = state.get("best", {}), False

        def save_checkpoint(improved: bool) -> None:  # improved: the evaluation just done beat the others
            position = {"epoch": done // batches.count, "step": done, "best": best}
            step.save(checkpoint, position, keep=run.keep_checkpoints, best=improved)

        mlperf.epoch_start(done // batches.count + 1, samples=done * global_batch)
        preemption = Preemption(env.world_size, device)  # SIGTERM: checkpoint after the step, then exit 143
        with preemption:  # a SIGTERM during an evaluation is taken after the next step
            while done < total:
                last = next_stop(done, run, batches.count, total)
                done, preempted = train_one_epoch(
                    step, batches, run, first=done, last=last, schedule=recipe["schedule"], logger=logger,
                    stop=preemption.requested,
                )  # fmt: skip
                if preempted:  # the checkpoint of this very step: --resume auto continues with the next
                    save_checkpoint(False)
                    preemption.stop()
                epoch = (done - 1) // batches.count + 1  # MLPerf's epoch_num of the steps just trained
                samples = done * global_batch
                improved = False
                if done == total or due(run.eval_every, done, batches.count):
                    mlperf.eval_start(epoch, samples=samples)
                    metrics = evaluate(step, val_batches)
                    mlperf.eval_stop(epoch, samples=samples)
                    mlperf.eval_accuracy(metrics["auc"], epoch, samples=samples)
                    logger.log(done, metrics, phase="eval")
                    improved = improves("auc", metrics["auc"], best.get("auc"))
                    best = {"auc": max(best.get("auc", 0.0), metrics["auc"])}
                    if run.target.reached(metrics["auc"]):
                        status = "success"
                        break
                if done < total and (improved or due(run.checkpoint_every, done, batches.count)):
                    save_checkpoint(improved)
                if done < total and done % batches.count == 0:
                    mlperf.epoch_stop(epoch, samples=samples)
                    mlperf.epoch_start(epoch + 1, samples=samples)
        mlperf.epoch_stop((max(done, 1) - 1) // batches.count + 1, samples=done * global_batch)
        if status != "success":
            status = "aborted" if run.target.value is not None else "success"
        save_checkpoint(improved)
        mlperf.run_stop(status)
        logger.close()
    close_distributed()
    auc = metrics["auc"] if metrics else None
    return {"auc": auc, "step": done, "samples": done * global_batch, "status": status}


if __name__ == "__main__":
    main()
