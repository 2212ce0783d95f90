"""Train the Transformer: parse, build, resume, then the loop of engine.py per epoch, checkpoints, the
BLEU target. Label-smoothed cross entropy, Adam with inverse-square-root warm-up, token-count batches,
gradient accumulation, mixed precision, DDP (the step: transformer.step).

    python -m transformer.train --data-dir DATA --results-dir results [--target-bleu 25.0]
    torchrun --nproc_per_node 8 -m transformer.train --recipe configs/transformer_big_wmt14_8gpu.yaml

Writes RESULTS_DIR/checkpoint.pt (zoo.torch.save_training_checkpoint: model, optimizer, schedule, scaler,
every rank's generators, epoch, step, position in the epoch, best BLEU, recipe), metrics.jsonl +
tensorboard/ (MetricsLogger), mlperf.log (benchmark "transformer", ruleset 0.7.0; a resumed run writes
mlperf_resume<N>.log), model.pt (the weights and what evaluation needs) and, with
train.keep_checkpoints N, copies of the last N end-of-epoch checkpoints (checkpoint_epochEEE.pt).
"""

from __future__ import annotations

import argparse
import pathlib
import shutil

from zoo.cli import entry_point
from zoo.errors import UserError

MODEL_NAME = "model.pt"
TRAINING_KIND = "transformer-training"  # the checkpoint field that tells this model's state from another's


def build_parser() -> argparse.ArgumentParser:
    from zoo.cli import add_run_args, add_target_arg

    from transformer import DEFAULT_RECIPE

    parser = argparse.ArgumentParser(
        prog="python -m transformer.train", description="Train the Transformer on a prepared data folder."
    )
    add_run_args(parser, default_recipe=DEFAULT_RECIPE, data_help="prepared data folder ($DATA_DIR)")
    add_target_arg(parser, "bleu", unit="BLEU points", example=25.0)
    parser.add_argument("--epochs", type=int, default=None, help="epochs (run.epochs; default: the recipe's)")
    parser.add_argument(
        "--synthetic", action="store_true", help="the generated number-words task, no download"
    )
    parser.add_argument("--device", default=None, help="cpu, cuda (default: cuda:LOCAL_RANK where CUDA is)")
    return parser


def check_run(run, recipe: dict, recipe_path) -> None:
    """The Transformer counts its run in epochs and evaluates at an epoch's end; its position table
    (``model.max_positions``) covers the longest sentence it trains on (``data.max_length``)."""
    longest, positions = recipe["data"]["max_length"], recipe["model"]["max_positions"]
    if longest is not None and longest > positions:
        raise UserError(
            f"data.max_length {longest} is longer than model.max_positions {positions}: "
            f"the position table has no row for the last tokens ({recipe_path})"
        )
    if run.epochs is None:
        raise UserError(
            f"run.steps: the Transformer's run is counted in epochs: set run.epochs ({recipe_path})"
        )
    if run.eval_every is not None and run.eval_every.unit != "epochs":
        raise UserError(
            f"run.eval_every must be 'N epochs' or null: BLEU is scored at an epoch's end ({recipe_path})"
        )


def saves_at_epoch_end(every, epoch: int, steps: int) -> bool:
    """run.checkpoint_every at an epoch's end: "N steps" saves there too (the end-of-epoch copies
    transformer.average reads), "N epochs" when due; null saves only at the run's end."""
    return every is not None and (every.unit == "steps" or every.due(epoch, steps))


def read_training_checkpoint(path) -> dict:
    """A checkpoint.pt written by this training, loaded; a UserError where it is not one."""
    from zoo.torch import TRAINING_STATE_FIELDS, load_training_checkpoint

    needed = (*TRAINING_STATE_FIELDS, "kind", "scheduler", "scaler", "step_in_epoch", "best")
    state = load_training_checkpoint(path, needed, "a Transformer training checkpoint")
    if state["kind"] != TRAINING_KIND:
        raise UserError(f"--resume {path} is not a Transformer training checkpoint (kind {state['kind']!r})")
    return state


def prepared_data(args, results: pathlib.Path, env) -> pathlib.Path:
    """The data folder: --data-dir, or the number-words task generated into RESULTS_DIR (--synthetic)."""
    import torch.distributed as dist

    from transformer.data import make_numbers

    if not args.synthetic:
        return pathlib.Path(args.data_dir)
    data_dir = results / "synthetic_data"
    if env.is_primary and not (data_dir / "meta.json").is_file():
        make_numbers(data_dir)
    if env.world_size > 1:
        dist.barrier()
    return data_dir


def read_data(data_dir: pathlib.Path, recipe: dict) -> tuple:
    """(tokenizer, the train split's Pairs, the sentence count of the evaluation split) of ``data_dir``,
    checked (transformer.data.read_shard) before a run writes anything."""
    from transformer.data import Pairs, load_tokenizer, read_parallel

    tokenizer = load_tokenizer(data_dir)
    train_set = Pairs(data_dir, "train", recipe["data"]["max_length"], tokenizer.get_vocab_size())
    langs, eval_split = recipe["data"]["langs"], recipe["eval"]["split"]
    eval_size = len(
        read_parallel(data_dir / f"{eval_split}.{langs[0]}", data_dir / f"{eval_split}.{langs[1]}")[0]
    )
    return tokenizer, train_set, eval_size


def save_model(path, model, recipe: dict, vocab_size: int) -> None:
    """model.pt: the weights and what evaluation, averaging and export need to rebuild the model."""
    import torch
    from zoo.io import atomic_write

    state = {
        "kind": "transformer",
        "model": model.state_dict(),
        "model_recipe": recipe["model"],
        "langs": recipe["data"]["langs"],
        "vocab_size": vocab_size,
        "eval": recipe["eval"],
    }
    with atomic_write(path) as tmp:
        torch.save(state, tmp)


def keep_epoch_copy(results: pathlib.Path, epoch: int, keep: int) -> None:
    """checkpoint_epochEEE.pt beside checkpoint.pt (what transformer.average reads); the last ``keep`` stay."""
    from zoo.io import atomic_write
    from zoo.torch import CHECKPOINT_NAME

    with atomic_write(results / f"checkpoint_epoch{epoch:03d}.pt") as tmp:
        shutil.copyfile(results / CHECKPOINT_NAME, tmp)
    for old in sorted(results.glob("checkpoint_epoch*.pt"))[:-keep]:
        old.unlink()


def log_mlperf_settings(
    mlperf, recipe: dict, run, world_size: int, train_samples: int, eval_samples: int
) -> None:
    """The MLPerf log's initialisation events: seed, global batch (tokens), data sizes, Adam's settings."""
    opt_cfg = recipe["optimizer"]
    mlperf.cache_clear()
    mlperf.init_start()
    mlperf.seed(run.seed)
    mlperf.global_batch_size(run.batch_per_gpu * world_size * run.accumulation)
    mlperf.gradient_accumulation_steps(run.accumulation)
    mlperf.train_samples(train_samples)
    mlperf.eval_samples(eval_samples)
    mlperf.hyperparameters(
        opt_name="adam",
        opt_base_learning_rate=opt_cfg["lr"],
        opt_learning_rate_warmup_steps=opt_cfg["warmup_steps"],
        opt_adam_beta_1=opt_cfg["betas"][0],
        opt_adam_beta_2=opt_cfg["betas"][1],
        opt_adam_epsilon=opt_cfg["eps"],
    )
    mlperf.event("max_sequence_length", recipe["data"]["max_length"], {"method": "discard"})
    mlperf.init_stop()


@entry_point
def main(argv=None) -> dict:
    from zoo.cli import Preemption, parse_args, recipe_from_args, resolve_resume

    args = parse_args(build_parser(), argv)

    from zoo.recipe import run_config
    from zoo.torch import CHECKPOINT_NAME

    # The recipe, the flags, the paths and the data are checked before torch is imported: bad input
    # ends in a second.
    recipe = recipe_from_args(args)
    run = run_config(recipe, args.recipe)
    check_run(run, recipe, args.recipe)
    results = pathlib.Path(args.results_dir)
    resume_from = resolve_resume(args.resume, results / CHECKPOINT_NAME)
    # Everything a run reads is checked before it writes anything into the results folder.
    data = None
    if not args.synthetic:
        if not args.data_dir:
            raise UserError("pass --data-dir (or set DATA_DIR), or --synthetic")
        if not pathlib.Path(args.data_dir).is_dir():
            raise UserError(f"data dir {args.data_dir} does not exist")
        data = read_data(pathlib.Path(args.data_dir), recipe)

    from zoo.io import atomic_write
    from zoo.log import MetricsLogger
    from zoo.mlperf import MLPerfLogger, log_path
    from zoo.retention import improves
    from zoo.rng import rng_state, set_rng_state
    from zoo.torch import (
        check_replicas_agree,
        close_distributed,
        fast_math,
        gather_objects,
        init_distributed,
        save_training_checkpoint,
        seed_everything,
    )

    from transformer.engine import evaluate, train_one_epoch
    from transformer.model import build_model
    from transformer.step import TrainStep

    state = read_training_checkpoint(resume_from) if resume_from is not None else None
    env, device = init_distributed(args.device)
    fast_math(device)
    results.mkdir(parents=True, exist_ok=True)
    data_dir = prepared_data(args, results, env)
    tokenizer, train_set, eval_size = data or read_data(data_dir, recipe)
    eval_split = recipe["eval"]["split"]
    seed_everything(run.seed)

    model = build_model(recipe["model"], tokenizer.get_vocab_size()).to(device)
    step = TrainStep(model, recipe, device, world_size=env.world_size)
    position = {"epoch": 0, "step": 0, "step_in_epoch": 0, "best": {"bleu": 0.0}}
    if state is not None:
        step.load_state_dict(state, resume_from)
        position = {key: state[key] for key in position}
        set_rng_state(state["rng"][env.rank] if env.rank < len(state["rng"]) else state["rng"][0])

    def save_checkpoint(best: bool = False):  # best: the evaluation just done beat the earlier ones
        rngs = gather_objects(rng_state(), env.world_size)
        if env.is_primary:
            save_training_checkpoint(
                results / CHECKPOINT_NAME,
                {"kind": TRAINING_KIND, **step.state_dict(), "rng": rngs, **position, "recipe": recipe},
                keep=run.keep_checkpoints,
                mark_best=best,
            )

    metrics = signature = None
    mlperf_path = log_path(results, resumed=resume_from is not None) if env.is_primary else None
    with (
        MLPerfLogger(mlperf_path, "transformer", enabled=env.is_primary) as mlperf,
        MetricsLogger(results / "metrics.jsonl", enabled=env.is_primary) as logger,
        Preemption(env.world_size, device) as preemption,  # SIGTERM: checkpoint the update, exit 143
    ):
        log_mlperf_settings(mlperf, recipe, run, env.world_size, len(train_set), eval_size)
        mlperf.run_start()
        status = "aborted"
        step.net.train()
        for epoch in range(position["epoch"] + 1, run.epochs + 1):
            mlperf.epoch_start(epoch)
            preempted = train_one_epoch(
                step,
                train_set,
                epoch,
                run,
                env=env,
                logger=logger,
                position=position,
                save_checkpoint=save_checkpoint,
                stop=preemption.requested,
            )
            if preempted:  # mid-epoch: --resume auto continues with this epoch's next update
                save_checkpoint()
                preemption.stop()
            mlperf.epoch_stop(epoch)
            position.update(epoch=epoch, step_in_epoch=0)
            last = epoch == run.epochs
            reached = False
            improved = (
                False  # the first evaluation is the best so far (the position's initial best is a floor)
            )
            best_before = position["best"]["bleu"] if (results / "best.pt").exists() else None
            if last or (run.eval_every and run.eval_every.due(epoch, position["step"])):
                mlperf.eval_start(epoch)
                metrics = signature = None
                if env.is_primary:
                    metrics, signature = evaluate(model, tokenizer, data_dir, recipe, device, run.precision)
                metrics = gather_objects(metrics, env.world_size)[0]  # rank 0's, on every rank
                mlperf.eval_stop(epoch)
                mlperf.eval_accuracy(metrics["bleu"] / 100, epoch)
                logger.log(position["step"], {**metrics, "epoch": epoch}, phase="eval")
                if signature:
                    print(
                        f"epoch {epoch}: BLEU {metrics['bleu']:.2f} on {eval_split} ({signature})", flush=True
                    )
                position["best"] = {"bleu": max(position["best"]["bleu"], metrics["bleu"])}
                reached = run.target.reached(metrics["bleu"])
                # rank 0's answer on every rank (it alone sees best.pt): saving is a collective
                improved = gather_objects(improves("bleu", metrics["bleu"], best_before), env.world_size)[0]
            if (
                last
                or reached
                or improved
                or saves_at_epoch_end(run.checkpoint_every, epoch, position["step"])
            ):
                save_checkpoint(best=improved)
                keep = int(recipe["train"]["keep_checkpoints"])
                if keep and env.is_primary:
                    keep_epoch_copy(results, epoch, keep)
            if reached:
                status = "success"
                break
        mlperf.run_stop(status)
    check_replicas_agree(model, env)
    if env.is_primary:
        save_model(results / MODEL_NAME, model, recipe, tokenizer.get_vocab_size())
        with atomic_write(results / "tokenizer.json") as tmp:
            tokenizer.save(str(tmp))
    close_distributed()
    bleu = metrics["bleu"] if metrics else None
    return {"bleu": bleu, "signature": signature, "step": position["step"], "status": status}


if __name__ == "__main__":
    main()
