"""BERT pretraining (phase 1 at 128 tokens, phase 2 at 512): LAMB, gradient accumulation, bf16/fp16,
torchrun / SLURM / MPI multi-process, exact resume, masked-LM accuracy against a target.

Launch with scripts/train.sh (it wraps torchrun). The recipe YAML gives the hyper-parameters (its run:
section the run's length, batch, intervals and target); flags override it. This file only wires: the
step is ``bert.step``'s, the loop and the evaluation ``bert.engine``'s. Data position is a function of
the step (see bert.data.PretrainingBatches) and dropout is re-seeded from (seed, step, rank), so a run
continued with ``--resume auto`` from checkpoint.pt goes on exactly as the unbroken run would have. The
masked-LM accuracy, MLPerf BERT's quality metric, is evaluated every ``run.eval_every``; the run's
MLPerf event sequence (benchmark "bert") goes to zoo.mlperf.log_path's file.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.bert import (
    PRETRAINING_RENAMED,
    MLPerfBlocks,
    log_mlperf_hyperparameters,
    pretraining_parser,
    pretraining_recipe,
    steps_to_stop,
)
from zoo.checkpoints import CheckpointError
from zoo.cli import Preemption, entry_point, resolve_resume
from zoo.cli import parse_args as parse_cli_args
from zoo.errors import UserError
from zoo.io import atomic_write
from zoo.log import MetricsLogger
from zoo.mlperf import MLPerfLogger, log_path
from zoo.recipe import compile_mode, run_config
from zoo.rng import rng_state
from zoo.torch import (
    CHECKPOINT_NAME,
    TRAINING_STATE_FIELDS,
    check_replicas_agree,
    close_distributed,
    fast_math,
    init_distributed,
    load_training_checkpoint,
    save_training_checkpoint,
)

if TYPE_CHECKING:
    from bert.model import BertForPreTraining

# this model's levers -> recipe keys (zoo.bert maps the flags both BERTs share)
FLAG_KEYS = {"compile": "compile", "loader_workers": "loader_workers"}
# what --resume needs in a checkpoint: zoo's training state and this step's
RESUME_FIELDS = (*TRAINING_STATE_FIELDS, "scheduler", "scaler")


def parse_args(argv=None) -> argparse.Namespace:
    from bert import DEFAULT_RECIPE

    p = pretraining_parser(
        "python -m bert.pretrain",
        "BERT pretraining with LAMB; run under torchrun for several GPUs or nodes.",
        default_recipe=DEFAULT_RECIPE,
        data_help="prepared samples (scripts/download_data.sh prepare; $DATA_DIR)",
    )
    p.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=None,
        help="torch.compile (the recipe's `compile` may also name a mode: reduce-overhead = CUDA graphs)",
    )  # fmt: skip
    p.add_argument("--loader-workers", type=int)
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    return parse_cli_args(p, argv, renamed=PRETRAINING_RENAMED)


def build_recipe(args) -> dict:
    """The recipe, checked without torch (the LAMB implementation is checked by check_optimizer)."""
    recipe = pretraining_recipe(args, FLAG_KEYS)
    compile_mode(recipe["compile"], key="compile")  # bad values end here, before anything is written
    return recipe


def check_optimizer(recipe: dict) -> None:
    from bert.lamb import lamb_implementation

    try:
        lamb_implementation(recipe["optimizer"]["implementation"], "cpu")
    except ValueError as e:
        raise UserError(f"recipe optimizer.implementation: {e}") from None


def read_data(args, recipe: dict):
    """--data-dir's prepared samples, checked before torch is imported (None with --synthetic)."""
    from zoo.data.bert import PretrainingData

    if args.synthetic or not args.data_dir:
        if not args.synthetic:
            raise UserError("give --data-dir (prepared samples) or --synthetic")
        return None
    data = PretrainingData(args.data_dir, seed=run_config(recipe).seed)
    if data.spec.max_seq != recipe["max_seq"]:
        raise UserError(
            f"recipe max_seq {recipe['max_seq']} but {args.data_dir} holds {data.spec.max_seq}-token samples"
        )
    return data


def build_batches(data, recipe: dict, env):
    """(dataset of micro-batches indexed by micro-step, SampleSpec, vocab size) of ``data`` (read_data's;
    None: synthetic batches)."""
    from bert.data import PretrainingBatches, SampleSpec, SyntheticBatches

    run = run_config(recipe)
    if data is None:
        spec = SampleSpec(max_seq=recipe["max_seq"], max_predictions=recipe["max_predictions"], packing=False)
        batches = SyntheticBatches(run.batch_per_gpu, spec, recipe["vocab_size"], seed=run.seed + env.rank)
        return batches, spec, recipe["vocab_size"]
    batches = PretrainingBatches(data, run.batch_per_gpu, rank=env.rank, world_size=env.world_size)
    return batches, data.spec, data.specials.vocab_size


def build_eval_batches(path, recipe: dict, env) -> tuple[list[dict], int]:
    """(this rank's share of the first ``eval_samples`` samples of epoch 0's stream of ``path`` in
    micro-batches, the number of samples over all ranks). Masks are drawn from the seed, so every
    evaluation of every run sees the same set."""
    from bert.data import PretrainingData, collate

    run = run_config(recipe)
    data = PretrainingData(path, seed=run.seed)
    if data.spec.max_seq != recipe["max_seq"]:
        raise UserError(
            f"recipe max_seq {recipe['max_seq']} but {path} holds {data.spec.max_seq}-token samples"
        )
    count = min(recipe["eval_samples"], len(data))
    size = run.batch_per_gpu
    firsts = range(0, count, size)[env.rank :: env.world_size]
    batches = [
        collate([data.sample(0, i) for i in range(f, min(f + size, count))], nsp=False) for f in firsts
    ]
    return batches, count


def read_start_weights(
    recipe: dict, vocab_size: int, init_checkpoint, resume_from
) -> tuple[dict | None, dict | None]:
    """(``--init-checkpoint``'s weights in our names, the checkpoint to resume), each read once and
    checked against the recipe's model before the run writes anything: a file that is not BERT, or
    a BERT of another size or vocabulary, ends in one line naming the flag and the problem."""
    import torch

    from bert import convert
    from bert.model import BertForPreTraining, bert_config

    with torch.device("meta"):  # names and shapes only, no memory
        reference = BertForPreTraining(bert_config(recipe["model"], vocab_size=vocab_size))
    init_state = resumed = None
    if init_checkpoint:
        try:
            init_state = convert.to_ours(convert.read_state_dict(init_checkpoint))
            convert.check_fits(reference, init_state)
        except CheckpointError as e:
            raise UserError(f"--init-checkpoint {init_checkpoint}: {e}") from None
    if resume_from is not None:
        try:
            resumed = load_training_checkpoint(resume_from, RESUME_FIELDS, "a BERT pretraining checkpoint")
        except UserError as e:
            raise UserError(f"{e}; weights alone go to --init-checkpoint") from None
        try:
            convert.check_fits(reference, convert.to_ours(resumed["model"]), strict_heads=True)
        except CheckpointError as e:
            raise UserError(f"--resume {resume_from}: {e}") from None
    return init_state, resumed


def save_checkpoint(path: Path, step, epoch: int) -> None:
    """checkpoint.pt through zoo.torch.save_training_checkpoint: the step's state (fp32 weights, LAMB,
    schedule, scaler, optimizer steps), the random generators (this run re-seeds from the step, they are
    kept for the shared format), the data epochs done, the recipe and the model's config."""
    state = {**step.training_state(), "rng": rng_state(), "epoch": epoch, "recipe": step.recipe}
    keep = run_config(step.recipe).keep_checkpoints
    save_training_checkpoint(path, {**state, "config": dataclasses.asdict(step.model.config)}, keep=keep)


def micro_batches(dataset, start: int, count: int, workers: int, pin: bool):
    """Micro-batches number start .. start+count-1, loaded in worker processes."""
    import torch

    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=None,
        sampler=range(start, start + count),
        num_workers=workers,
        pin_memory=pin,
        prefetch_factor=4 if workers else None,
        persistent_workers=False,
    )
    return iter(loader)


@entry_point
def main(argv=None) -> None:
    args = parse_args(argv)
    recipe = build_recipe(args)
    results = Path(args.results_dir)
    resume_from = resolve_resume(args.resume, results / CHECKPOINT_NAME)
    data = read_data(args, recipe)
    # The recipe, the paths and the data are checked before torch is imported: bad input ends in a second.
    check_optimizer(recipe)
    env, device = init_distributed(args.device)
    fast_math(device)
    batches, spec, vocab_size = build_batches(data, recipe, env)
    eval_batches, eval_samples = None, 0
    if not args.synthetic:
        if args.eval_data_dir is None and env.is_primary:
            print(
                f"MLM accuracy on the first {recipe['eval_samples']} training samples "
                "(--eval-data-dir: held-out ones)",
                flush=True,
            )
        eval_batches, eval_samples = build_eval_batches(args.eval_data_dir or args.data_dir, recipe, env)
    if run_config(recipe).target.value is not None and eval_batches is None:
        raise UserError("--target-mlm-accuracy needs prepared data (--data-dir), not --synthetic")
    init_state, resumed = read_start_weights(recipe, vocab_size, args.init_checkpoint, resume_from)
    # only the primary names the log: a new run's name removes the previous run's file
    mlperf_path = log_path(results, resumed=resume_from is not None) if env.is_primary else None
    with MLPerfLogger(mlperf_path, "bert", enabled=env.is_primary) as mlperf:
        mlperf.cache_clear(False)  # the record the rules ask for; dropping the page cache needs root
        mlperf.init_start()
        model = train(
            args, recipe, env, device, batches=batches, spec=spec, vocab_size=vocab_size,
            eval_batches=eval_batches, eval_samples=eval_samples, init_state=init_state, resumed=resumed, mlperf=mlperf,
        )  # fmt: skip
    check_replicas_agree(model, env)
    close_distributed()


def train(
    args, recipe, env, device, *, batches, spec, vocab_size, eval_batches, eval_samples, init_state, resumed,
    mlperf,
) -> BertForPreTraining:  # fmt: skip
    """Build the model (from ``init_state``) and its training step, continue the ``resumed`` checkpoint
    if given, and train to run.steps, the target MLM accuracy or ``--stop-after``: the engine's loop up
    to each evaluation or checkpoint. Writes checkpoint.pt, model.pt and the logs. A SIGTERM
    (zoo.cli.Preemption) writes checkpoint.pt of the step in progress once it is done, then ends with
    exit 143; ``--resume auto`` continues from that step."""
    import torch

    from bert.data import PretrainingBatches, ShardError
    from bert.engine import TrainWindow, evaluate, train_one_epoch
    from bert.model import parameter_count
    from bert.step import build_model, full_precision_state, pretraining_step

    run = run_config(recipe)
    model = build_model(recipe, vocab_size, spec.nsp, init_state).to(device)
    step = pretraining_step(
        model, recipe, device, nsp=spec.nsp, rank=env.rank, world_size=env.world_size, resume_state=resumed
    )
    first = step.step_count
    end = run.steps if args.stop_after is None else min(run.steps, first + args.stop_after)
    results = Path(args.results_dir)
    checkpoint_path = results / CHECKPOINT_NAME
    global_batch = run.batch_per_gpu * run.accumulation * env.world_size
    train_samples = len(batches.data) if isinstance(batches, PretrainingBatches) else run.steps * global_batch
    log_mlperf_hyperparameters(
        mlperf, recipe, run, max_seq=spec.max_seq, global_batch=global_batch, train_samples=train_samples,
        eval_samples=eval_samples,
    )  # fmt: skip
    if env.is_primary:
        print(
            f"{recipe['model']} ({parameter_count(model) / 1e6:.1f}M parameters), seq {spec.max_seq}, "
            f"global batch {global_batch} = {run.batch_per_gpu} x {run.accumulation} accumulation x "
            f"{env.world_size} processes, {run.precision}, steps {first}..{run.steps} on {device}",
            flush=True,
        )
    loader = micro_batches(
        batches, first * run.accumulation, (end - first) * run.accumulation, recipe["loader_workers"],
        device.type == "cuda",
    )  # fmt: skip
    log = MetricsLogger(
        str(results / "metrics.jsonl"), enabled=env.is_primary, total_steps=run.steps, desc="pretrain"
    )
    eval_every = run.eval_every if eval_batches is not None else None
    blocks = MLPerfBlocks(mlperf, global_batch, eval_every, end)
    window = TrainWindow()

    def save() -> None:
        save_checkpoint(checkpoint_path, step, epoch=step.step_count * global_batch // train_samples)

    def due(interval, done: int) -> bool:
        return interval is not None and interval.due(0, done)

    reached = False
    mlperf.init_stop()
    mlperf.run_start()
    model.train()
    with Preemption(env.world_size, device) as preemption:
        while step.step_count < end and not reached:
            blocks.start(step.step_count)
            todo = steps_to_stop(step.step_count, end, eval_every, run.checkpoint_every)
            try:
                preempted = train_one_epoch(
                    step, loader, todo, log=log, window=window, end=run.steps, world_size=env.world_size,
                    stop=preemption.requested,
                )  # fmt: skip
            except ShardError as e:  # a shard damaged after the start-up check: keep the work done
                if env.is_primary:
                    save()
                cause = str(e).strip().splitlines()[-1].split("ShardError: ", 1)[-1]  # a worker's, too
                raise UserError(
                    f"{cause}; step {step.step_count} saved in {checkpoint_path}: prepare the data again, "
                    "then --resume auto"
                ) from None
            if preempted:  # SIGTERM: checkpoint this step, then exit 143; --resume auto continues here
                if env.is_primary:
                    save()
                blocks.close()
                log.close(summary=False)
                preemption.stop()
            done = step.step_count
            # every eval_every steps, and at the end of this run: its log reports the quality it left
            if eval_batches is not None and (due(eval_every, done) or done == end):
                blocks.eval_start(done)
                metrics = evaluate(model, eval_batches, device, run.precision, env.world_size, env.is_primary)
                blocks.eval_stop(done, metrics["mlm_accuracy"])
                log.log(done, metrics, phase="eval")
                reached = run.target.reached(metrics["mlm_accuracy"])
            if env.is_primary and due(run.checkpoint_every, done) and done < end and not reached:
                save()
    blocks.close()  # no evaluation data
    finished = step.step_count == run.steps and run.target.value is None
    mlperf.run_stop("success" if reached or finished else "aborted")
    if env.is_primary:
        save()
        with atomic_write(results / "model.pt") as tmp:
            weights = full_precision_state(model, step.optimizer)
            torch.save({"model": weights, "config": dataclasses.asdict(model.config)}, tmp)
        print(
            f"step {step.step_count}: checkpoint {checkpoint_path}, weights {results / 'model.pt'}",
            flush=True,
        )
        if len(window.throughputs) > 1:  # the first window compiles and warms up
            print(
                f"steady throughput: {statistics.median(window.throughputs[1:]):.1f} seq/s (median of "
                f"{len(window.throughputs) - 1} logged windows after the first)",
                flush=True,
            )
    log.close()
    return model


if __name__ == "__main__":
    main()
