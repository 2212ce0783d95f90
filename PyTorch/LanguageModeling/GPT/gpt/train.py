"""Train GPT: parse, build, resume, then engine.py's loop stretch by stretch, evaluations, checkpoints, the
log-perplexity target. AdamW with warm-up and cosine decay, gradient accumulation, bf16 with fp32 master
weights, FSDP2 / tensor parallel / activation checkpointing / compile as the recipe's parallel: section
says (the step: gpt.step; the layout: gpt.parallel).

    python -m gpt.train --recipe configs/tiny_cpu.yaml --data-dir DATA --results-dir results
    torchrun --nproc_per_node 8 -m gpt.train --recipe configs/llama31_8b.yaml --data-dir /data/c4

Writes RESULTS_DIR/checkpoint/ (zoo.torch.save_training_checkpoint_sharded: the model's and AdamW's
shards through torch.distributed.checkpoint, readable by any number of processes, with rank 0's
checkpoint.pt beside them: schedule, step, samples, best log-perplexity, generators, recipe),
metrics.jsonl + tensorboard/ (MetricsLogger), mlperf.log (mlperf.benchmark of the recipe; a resumed run
writes mlperf_resume<N>.log), model.pt (the whole model's weights, what evaluation, generation and export
read) and tokenizer.json.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import warnings
from typing import TYPE_CHECKING

from zoo.cli import Preemption, entry_point
from zoo.errors import UserError

from gpt.data import TOKENIZER, Sampler, SyntheticTokens, TokenShards, check_tokenizer

if TYPE_CHECKING:
    from gpt.step import TrainStep

MODEL_NAME = "model.pt"
TRAINING_KIND = "gpt-training"  # the checkpoint field that tells this model's state from another's
STATE_FIELDS = ("kind", "scheduler", "scaler", "rng", "step", "samples", "best", "recipe")


def build_parser() -> argparse.ArgumentParser:
    from zoo.cli import add_run_args, add_target_arg

    from gpt import DEFAULT_RECIPE

    parser = argparse.ArgumentParser(
        prog="python -m gpt.train", description="Train GPT on a folder of token shards (gpt.download)."
    )
    add_run_args(parser, default_recipe=DEFAULT_RECIPE, data_help="prepared token shards ($DATA_DIR)")
    add_target_arg(parser, "log_perplexity", unit="nats per token, lower is better", example=3.3)
    parser.add_argument(
        "--steps", type=int, default=None, help="optimizer steps (run.steps; default: the recipe's)"
    )
    parser.add_argument("--batch-size", type=int, default=None, help="sequences per GPU (run.batch_per_gpu)")
    parser.add_argument(
        "--accumulation", type=int, default=None, help="micro-batches per update (run.accumulation)"
    )
    parser.add_argument("--synthetic", action="store_true", help="random tokens, no data (for timing)")
    parser.add_argument("--device", default=None, help="cpu, cuda (default: cuda:LOCAL_RANK where CUDA is)")
    parser.add_argument(
        "--exit-after-steps", type=int, default=None, help=argparse.SUPPRESS
    )  # tests: the process dies (os._exit) after this many updates, as a killed run would
    return parser


def check_run(run, recipe: dict, recipe_path) -> None:
    """GPT counts its run in optimizer steps and evaluates and checkpoints every N steps."""
    if run.steps is None:
        raise UserError(f"run.epochs: GPT's run is counted in optimizer steps: set run.steps ({recipe_path})")
    for key in ("eval_every", "checkpoint_every"):
        interval = getattr(run, key)
        if interval is not None and interval.unit != "steps":
            raise UserError(f"run.{key} must be 'N steps' or null: GPT counts steps ({recipe_path})")
    seq_len, max_len = recipe["data"]["seq_len"], recipe["model"]["max_seq_len"]
    if not isinstance(seq_len, int) or seq_len < 1:
        raise UserError(f"data.seq_len must be a positive integer, not {seq_len!r}")
    if seq_len > max_len:
        raise UserError(
            f"data.seq_len {seq_len} is longer than the model's {max_len} tokens (model.max_seq_len)"
        )


def read_training_checkpoint(path) -> dict:
    """The state (checkpoint.pt) of a checkpoint folder written by this training; a UserError where it is not one."""
    from zoo.torch import load_training_checkpoint_sharded

    state = load_training_checkpoint_sharded(path, None, STATE_FIELDS, "a GPT training checkpoint")
    if state["kind"] != TRAINING_KIND:
        raise UserError(f"--resume {path} is not a GPT training checkpoint (kind {state['kind']!r})")
    return state


def next_stop(position: int, run) -> int:
    """The step the current stretch ends at: the next evaluation, checkpoint or the run's end."""
    stops = [run.steps]
    for interval in (run.eval_every, run.checkpoint_every):
        if interval is not None:
            stops.append((position // interval.count + 1) * interval.count)
    return min(stops)


def save_model(path, step: TrainStep, recipe: dict, env) -> None:
    """model.pt: the whole model's weights (gathered to rank 0's memory) and its recipe. A collective."""
    import torch
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from zoo.io import atomic_write

    weights = get_model_state_dict(
        step.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if env.is_primary:
        state = {"kind": "gpt", "model": weights, "model_recipe": recipe["model"], "recipe": recipe}
        with atomic_write(path) as tmp:
            torch.save(state, tmp)


def writer_group(recipe: dict, world: int):
    """``async_group`` of zoo.torch.save_training_checkpoint_sharded: None writes checkpoints in the step
    (checkpoint.async false); with checkpoint.async true, False in one process, else a gloo group of every
    rank for the background writer's collectives (they must not share NCCL's stream with training)."""
    import zoo.recipe

    if not zoo.recipe.flag(recipe["checkpoint"]["async"], "checkpoint.async"):
        return None
    if world == 1:
        return False
    import torch.distributed as dist

    return dist.new_group(backend="gloo")


def finish_writing(pending: list) -> None:
    """Wait for the checkpoint being written in the background, if any (a collective)."""
    while pending:
        pending.pop().wait()


def log_mlperf_settings(mlperf, recipe: dict, run, sampler, eval_samples: int) -> None:
    """The MLPerf log's initialisation events: seed, global batch, sequence length, AdamW's settings."""
    opt_cfg = recipe["optimizer"]
    mlperf.cache_clear()
    mlperf.init_start()
    mlperf.seed(run.seed)
    mlperf.global_batch_size(sampler.global_batch)
    mlperf.gradient_accumulation_steps(run.accumulation)
    mlperf.train_samples(len(sampler.dataset))
    mlperf.eval_samples(eval_samples)
    mlperf.event("max_sequence_length", recipe["data"]["seq_len"])
    mlperf.event("max_steps", run.steps)
    warmup, decay = opt_cfg["warmup_steps"], opt_cfg["decay_steps"]
    mlperf.hyperparameters(
        opt_name="adamw",
        opt_base_learning_rate=opt_cfg["lr"],
        opt_end_learning_rate=opt_cfg["lr"] * opt_cfg["min_lr_ratio"],
        opt_learning_rate_warmup_steps=warmup,
        opt_learning_rate_decay_steps=decay,
        opt_learning_rate_decay_schedule="cosine with linear warmup",
        opt_adamw_beta_1=opt_cfg["betas"][0],
        opt_adamw_beta_2=opt_cfg["betas"][1],
        opt_adamw_epsilon=opt_cfg["eps"],
        opt_adamw_weight_decay=opt_cfg["weight_decay"],
        opt_gradient_clip_norm=opt_cfg["clip_norm"],
    )
    mlperf.init_stop()


def training_data(args, recipe: dict, run):
    seq_len = recipe["data"]["seq_len"]
    if args.synthetic:
        return SyntheticTokens(recipe["model"]["vocab_size"], seq_len, seed=run.seed), None
    return TokenShards(args.data_dir, "train", seq_len), TokenShards(args.data_dir, "validation", seq_len)


@entry_point
def main(argv=None) -> dict:
    from zoo.cli import parse_args, recipe_from_args, resolve_resume

    args = parse_args(build_parser(), argv)

    import os

    from zoo.dist import get_dist_env
    from zoo.log import MetricsLogger
    from zoo.mlperf import MLPerfLogger, log_path
    from zoo.recipe import run_config
    from zoo.retention import improves
    from zoo.rng import rng_state, set_rng_state
    from zoo.torch import (
        SHARDED_CHECKPOINT_NAME,
        close_distributed,
        fast_math,
        gather_objects,
        init_distributed,
        load_training_checkpoint_sharded,
        save_training_checkpoint_sharded,
    )

    # One process saves and loads its checkpoint folder without a process group: that is intended.
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    # The recipe and --resume are checked before torch is imported: bad input ends in a second.
    recipe = recipe_from_args(args)
    run = run_config(recipe, args.recipe)
    check_run(run, recipe, args.recipe)
    results = pathlib.Path(args.results_dir)
    resume_from = resolve_resume(args.resume, results / SHARDED_CHECKPOINT_NAME)

    from gpt.engine import evaluate, train_one_epoch
    from gpt.model import model_config
    from gpt.parallel import build_layout, check_layout, parallel_settings
    from gpt.step import TrainStep

    check_layout(parallel_settings(recipe["parallel"]), get_dist_env().world_size)
    model_config(recipe["model"])  # a bad model: key ends the run before anything is read or written
    # Everything a run reads is checked before it writes anything into the results folder.
    state = read_training_checkpoint(resume_from) if resume_from is not None else None
    if not args.synthetic:
        if not args.data_dir:
            raise UserError("pass --data-dir (or set DATA_DIR), or --synthetic")
        check_tokenizer(args.data_dir, recipe["model"]["vocab_size"])
    train_set, eval_set = training_data(args, recipe, run)
    env, device = init_distributed(args.device)
    fast_math(device)
    layout = build_layout(parallel_settings(recipe["parallel"]), env.world_size, env.rank, device)
    step = TrainStep(recipe, device, layout)
    sampler = Sampler(train_set, run.seed, run.batch_per_gpu, run.accumulation, layout.dp)
    position = {"step": 0, "samples": 0, "best": {"log_perplexity": float("inf")}}
    if state is not None:
        sharded = step.state_dicts()
        state = load_training_checkpoint_sharded(
            resume_from, sharded, STATE_FIELDS, "a GPT training checkpoint"
        )
        step.load_state_dicts(sharded)
        step.scheduler.load_state_dict(state["scheduler"])
        step.scaler.load_state_dict(state["scaler"])
        position = {key: state[key] for key in position}
        set_rng_state(state["rng"][env.rank] if env.rank < len(state["rng"]) else state["rng"][0])
    results.mkdir(parents=True, exist_ok=True)

    async_group = writer_group(recipe, env.world_size)
    pending = []  # the checkpoint still being written in the background (checkpoint.async)

    def save_checkpoint(best: bool = False):  # best: the evaluation just done beat the earlier ones
        finish_writing(pending)
        rngs = gather_objects(rng_state(), env.world_size)
        fields = {"scheduler": step.scheduler.state_dict(), "scaler": step.scaler.state_dict()}
        state = {
            "kind": TRAINING_KIND,
            **fields,
            "rng": rngs,
            **position,
            "recipe": recipe,
            "world": env.world_size,
        }
        written = save_training_checkpoint_sharded(
            results / SHARDED_CHECKPOINT_NAME,
            step.state_dicts(),
            state,
            async_group=async_group,
            keep=run.keep_checkpoints,
            mark_best=best,
        )
        pending.extend([written] if written is not None else [])

    eval_cfg = recipe["eval"]
    eval_samples = min(eval_cfg["samples"], len(eval_set)) if eval_set is not None else 0
    metrics, status = None, "aborted"
    mlperf_path = log_path(results, resumed=resume_from is not None) if env.is_primary else None
    benchmark = recipe["mlperf"]["benchmark"]
    with (
        MLPerfLogger(
            mlperf_path,
            benchmark,
            division=recipe["mlperf"]["division"],
            enabled=env.is_primary,
        ) as mlperf,
        MetricsLogger(results / "metrics.jsonl", enabled=env.is_primary) as logger,
        Preemption(env.world_size, device) as preemption,
    ):
        log_mlperf_settings(mlperf, recipe, run, sampler, eval_samples)
        if resume_from is not None:
            mlperf.event("init_checkpoint_step", position["step"])
        mlperf.run_start()
        step.model.train()
        while position["step"] < run.steps:
            stretch = position["step"] // (run.eval_every.count if run.eval_every else run.steps) + 1
            until = next_stop(position["step"], run)
            mlperf.block_start(stretch, 1, samples=position["samples"])
            preempted = train_one_epoch(
                step, sampler, run, until=until, layout=layout, logger=logger, position=position,
                stop=preemption.requested,
            )  # fmt: skip
            mlperf.block_stop(stretch, samples=position["samples"])
            if preempted:  # SIGTERM: checkpoint this update, then exit 143; --resume auto continues here
                save_checkpoint()
                finish_writing(pending)
                preemption.stop()
            if args.exit_after_steps is not None and position["step"] >= args.exit_after_steps:
                os._exit(137)  # tests: a run killed here loses the steps since its last checkpoint
            last = position["step"] >= run.steps
            reached = improved = False
            if eval_set is not None and (
                last or (run.eval_every and run.eval_every.due(0, position["step"]))
            ):
                mlperf.eval_start(stretch, samples=position["samples"])
                metrics = evaluate(
                    step.model,
                    eval_set,
                    eval_samples,
                    eval_cfg["batch"],
                    device=device,
                    amp=run.precision,
                    layout=layout,
                    autocast=step.autocast,
                )
                mlperf.eval_stop(stretch, samples=position["samples"])
                mlperf.eval_accuracy(metrics["log_perplexity"], stretch, samples=position["samples"])
                logger.log(position["step"], metrics, phase="eval")
                improved = improves(
                    "log_perplexity", metrics["log_perplexity"], position["best"]["log_perplexity"]
                )
                best = min(position["best"]["log_perplexity"], metrics["log_perplexity"])
                position["best"] = {"log_perplexity": best}
                reached = run.target.reached(metrics["log_perplexity"])
            if (
                last
                or reached
                or improved
                or (run.checkpoint_every and run.checkpoint_every.due(0, position["step"]))
            ):
                save_checkpoint(best=improved)
            if reached:
                status = "success"
                break
        mlperf.run_stop(status)
    finish_writing(pending)
    save_model(results / MODEL_NAME, step, recipe, env)
    if env.is_primary and not args.synthetic:
        shutil.copyfile(pathlib.Path(args.data_dir) / TOKENIZER, results / (TOKENIZER + ".tmp"))
        (results / (TOKENIZER + ".tmp")).replace(results / TOKENIZER)
    close_distributed()
    log_perplexity = metrics["log_perplexity"] if metrics else None
    return {"log_perplexity": log_perplexity, "step": position["step"], "status": status}


if __name__ == "__main__":
    main()
