"""BERT pretraining (phase 1 at 128 tokens, phase 2 at 512): LAMB, gradient accumulation, bf16/fp16,
torchrun / SLURM / MPI multi-process, exact resume, masked-LM accuracy against a target.

Launch with scripts/train.sh (it wraps torchrun). The recipe YAML gives the hyper-parameters;
flags override it. Data position is a function of the step (see bert.data.PretrainingBatches)
and dropout is re-seeded from (seed, step, rank), so a run continued with ``--resume auto`` from
checkpoint.pt goes on exactly as the unbroken run would have. The masked-LM accuracy, MLPerf BERT's
quality metric, is evaluated every ``eval_every`` steps; RESULTS_DIR/mlperf.log holds the run's
MLPerf event sequence (benchmark "bert", zoo.mlperf).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from zoo.checkpoints import CheckpointError
from zoo.cli import add_run_args, add_target_arg, entry_point, recipe_from_args, resolve_resume
from zoo.cli import parse_args as parse_cli_args
from zoo.io import atomic_write
from zoo.log import MetricsLogger
from zoo.mlperf import MLPerfLogger
from zoo.torch import (
    autocast,
    check_replicas_agree,
    close_distributed,
    fast_math,
    init_distributed,
)

from bert import convert
from bert.data import (
    PretrainingBatches,
    PretrainingData,
    SampleSpec,
    ShardError,
    SyntheticBatches,
    collate,
)
from bert.lamb import lamb_implementation
from bert.model import BertForPreTraining, bert_config, parameter_count
from bert.step import PretrainingStep, build_model, compile_mode_of

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
CHECKPOINT_NAME = "checkpoint.pt"
# flag -> recipe key; a flag left unset keeps the recipe's value (zoo.cli maps --amp to amp)
FLAG_KEYS = {
    "model": "model",
    "steps": "steps",
    "batch_size": "batch_size",
    "accumulation": "accumulation",
    "lr": "optimizer.lr",
    "warmup": "schedule.warmup",
    "compile": "compile",
    "seed": "seed",
    "checkpoint_every": "checkpoint_every",
    "log_every": "log_every",
    "eval_every": "eval_every",
    "loader_workers": "loader_workers",
    "max_seq": "max_seq",
    "target_mlm_accuracy": "target_mlm_accuracy",
}
# this entry point's own old spellings (zoo.cli rejects --config, --no-resume, ... for every model)
RENAMED = {"--target-mlm-loss": "--target-mlm-accuracy (a fraction, e.g. 0.720)"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bert.pretrain",
        description="BERT pretraining with LAMB; run under torchrun for several GPUs or nodes.",
    )
    add_run_args(
        p,
        default_recipe=CONFIG_DIR / "pretrain_phase1_1gpu.yaml",
        data_help="prepared samples (scripts/download_data.sh prepare; $DATA_DIR)",
    )
    add_target_arg(p, "mlm_accuracy", unit="a fraction of the masked tokens, MLPerf's unit", example=0.720)
    p.add_argument("--synthetic", action="store_true", help="random full-length samples (speed only)")
    p.add_argument(
        "--eval-data-dir",
        help="prepared held-out samples for the MLM accuracy (default: the first eval_samples of --data-dir)",
    )
    p.add_argument("--init-checkpoint", help="start from these weights (phase 1 -> 2 hand-off, HF, Google)")
    p.add_argument("--model", help="bert-large, bert-base or bert-tiny")
    p.add_argument("--steps", type=int, help="optimizer steps of the whole phase")
    p.add_argument("--batch-size", type=int, help="samples per process per micro-step")
    p.add_argument("--accumulation", type=int, help="micro-steps per optimizer step")
    p.add_argument("--lr", type=float)
    p.add_argument("--warmup", type=float, help="warm-up: fraction of steps (<1) or a step count")
    p.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=None,
        help="torch.compile (the recipe's `compile` may also name a mode: reduce-overhead = CUDA graphs)",
    )  # fmt: skip
    p.add_argument("--seed", type=int)
    p.add_argument("--max-seq", type=int, help="synthetic data only (prepared data fixes it)")
    p.add_argument("--vocab-size", type=int, default=30522, help="synthetic data only")
    p.add_argument("--checkpoint-every", type=int, help="optimizer steps between checkpoints")
    p.add_argument("--log-every", type=int)
    p.add_argument("--eval-every", type=int, help="optimizer steps between MLM accuracy evaluations")
    p.add_argument("--loader-workers", type=int)
    p.add_argument("--stop-after", type=int, help="leave after this many steps of this run (resume later)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    return parse_cli_args(p, argv, renamed=RENAMED)


def build_recipe(args) -> dict:
    recipe = recipe_from_args(args, FLAG_KEYS)
    target = recipe.get("target_mlm_accuracy")
    if target is not None and not 0 < target <= 1:
        raise SystemExit(f"error: target_mlm_accuracy {target} is not a fraction in (0, 1] (MLPerf's 0.720)")
    compile_mode_of(recipe.get("compile"))  # bad values end here, before anything is written
    try:
        lamb_implementation(recipe["optimizer"].get("implementation", "auto"), "cpu")
    except ValueError as e:
        raise SystemExit(f"recipe optimizer.implementation: {e}") from None
    return recipe


def build_batches(args, recipe: dict, env):
    """(dataset of micro-batches indexed by micro-step, SampleSpec, vocab size)."""
    if args.synthetic or not args.data_dir:
        if not args.synthetic:
            raise SystemExit("give --data-dir (prepared samples) or --synthetic")
        spec = SampleSpec(
            max_seq=recipe["max_seq"], max_predictions=recipe.get("max_predictions", 20), packing=False
        )
        return (
            SyntheticBatches(recipe["batch_size"], spec, args.vocab_size, seed=recipe["seed"] + env.rank),
            spec,
            args.vocab_size,
        )
    data = PretrainingData(args.data_dir, seed=recipe["seed"])
    if data.spec.max_seq != recipe["max_seq"]:
        raise SystemExit(
            f"recipe max_seq {recipe['max_seq']} but {args.data_dir} holds {data.spec.max_seq}-token samples"
        )
    batches = PretrainingBatches(data, recipe["batch_size"], rank=env.rank, world_size=env.world_size)
    return batches, data.spec, data.specials.vocab_size


def build_eval_batches(path, recipe: dict, env) -> tuple[list[dict], int]:
    """(this rank's share of the first ``eval_samples`` samples of epoch 0's stream of ``path`` in
    micro-batches, the number of samples over all ranks). Masks are drawn from the seed, so every
    evaluation of every run sees the same set."""
    data = PretrainingData(path, seed=recipe["seed"])
    if data.spec.max_seq != recipe["max_seq"]:
        raise SystemExit(
            f"recipe max_seq {recipe['max_seq']} but {path} holds {data.spec.max_seq}-token samples"
        )
    count = min(recipe["eval_samples"], len(data))
    size = recipe["batch_size"]
    firsts = range(0, count, size)[env.rank :: env.world_size]
    batches = [
        collate([data.sample(0, i) for i in range(f, min(f + size, count))], nsp=False) for f in firsts
    ]
    return batches, count


def mlperf_log_path(results: Path, resumed: bool, primary: bool) -> Path:
    """A new run writes mlperf.log (replacing an older one); each resumed run writes a file of its own,
    mlperf_resume<N>.log, since the compliance checker takes one run per file."""
    if not resumed:
        path = results / "mlperf.log"
        if primary:
            path.unlink(missing_ok=True)  # the logger appends
        return path
    n = 1
    while (results / f"mlperf_resume{n}.log").exists():
        n += 1
    return results / f"mlperf_resume{n}.log"


def log_mlperf_recipe(mlperf, recipe: dict, spec, global_batch: int, train_samples: int, eval_samples: int):
    """The sizes and hyper-parameters MLPerf's BERT rules ask for, from this run's recipe."""
    opt_cfg = recipe["optimizer"]
    total_steps = recipe["steps"]
    warmup = recipe["schedule"]["warmup"]
    warmup_steps = int(warmup * total_steps if warmup < 1 else warmup)
    beta_1, beta_2 = opt_cfg.get("betas", (0.9, 0.999))
    mlperf.seed(recipe["seed"])
    mlperf.global_batch_size(global_batch)
    mlperf.gradient_accumulation_steps(recipe["accumulation"])
    mlperf.train_samples(train_samples)
    mlperf.eval_samples(eval_samples)
    mlperf.hyperparameters(
        opt_name="lamb",
        opt_base_learning_rate=opt_cfg["lr"],
        opt_lamb_epsilon=opt_cfg.get("eps", 1e-6),
        opt_lamb_beta_1=beta_1,
        opt_lamb_beta_2=beta_2,
        opt_lamb_weight_decay_rate=opt_cfg["weight_decay"],
        opt_learning_rate_training_steps=total_steps,
        opt_learning_rate_warmup_steps=warmup_steps,
        num_warmup_steps=warmup_steps,
        start_warmup_step=0,
        max_sequence_length=spec.max_seq,
    )


@torch.no_grad()
def mlm_accuracy(model, batches: list[dict], device, amp: str, env) -> float:
    """The fraction of masked tokens whose most likely prediction is the original token, over every
    rank's evaluation batches (MLPerf's BERT quality metric). Shows a progress line on the primary."""
    progress = MetricsLogger(None, enabled=env.is_primary, total_steps=len(batches), desc="eval mlm accuracy")
    model.eval()
    counts = torch.zeros(2, dtype=torch.float64, device=device)  # correct, masked
    for index, batch in enumerate(batches, 1):
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items() if k != "sequences"}
        with autocast(device, amp):
            logits, _ = model(
                batch["input_ids"],
                batch["token_type_ids"],
                seq_ids=batch["seq_ids"],
                mlm_positions=batch["mlm_positions"],
                next_sentence=False,
            )
        labels = batch["mlm_labels"]
        masked = labels != -100
        counts[0] += ((logits.argmax(-1) == labels) & masked).sum()
        counts[1] += masked.sum()
        progress.progress(index, len(labels) * env.world_size)
    progress.close()
    if dist.is_initialized():
        dist.all_reduce(counts)
    model.train()
    return float(counts[0] / counts[1].clamp(min=1))


def read_start_weights(
    recipe: dict, vocab_size: int, init_checkpoint, resume_from
) -> tuple[dict | None, dict | None]:
    """(``--init-checkpoint``'s weights in our names, the checkpoint to resume), each read once and
    checked against the recipe's model before the run writes anything: a file that is not BERT, or
    a BERT of another size or vocabulary, ends in one line naming the flag and the problem."""
    with torch.device("meta"):  # names and shapes only, no memory
        reference = BertForPreTraining(bert_config(recipe["model"], vocab_size=vocab_size))
    init_state = resumed = None
    if init_checkpoint:
        try:
            init_state = convert.to_ours(convert.read_state_dict(init_checkpoint))
            convert.check_fits(reference, init_state)
        except CheckpointError as e:
            raise SystemExit(f"error: --init-checkpoint {init_checkpoint}: {e}") from None
    if resume_from is not None:
        try:
            resumed = torch.load(resume_from, map_location="cpu", weights_only=True)
        except Exception as e:
            raise SystemExit(
                f"error: --resume {resume_from} is not a PyTorch checkpoint "
                f"({type(e).__name__}: {(str(e).splitlines() or [''])[0]})"
            ) from None
        absent = [
            k
            for k in ("model", "optimizer", "schedule", "step")
            if not isinstance(resumed, dict) or k not in resumed
        ]
        if absent:
            raise SystemExit(
                f"error: --resume {resume_from} is not a BERT pretraining checkpoint (no {', '.join(absent)}; "
                "weights alone go to --init-checkpoint)"
            )
        try:
            convert.check_fits(reference, convert.to_ours(resumed["model"]), strict_heads=True)
        except CheckpointError as e:
            raise SystemExit(f"error: --resume {resume_from}: {e}") from None
    return init_state, resumed


def full_precision_state(model, optimizer) -> dict:
    """The model's state dict in fp32: each trained parameter's fp32 master where the optimizer
    keeps one (weights: bf16), every other floating-point tensor converted."""
    state = model.state_dict()
    masters = {name: optimizer.state.get(p, {}).get("master") for name, p in model.named_parameters()}
    for name, value in state.items():
        if masters.get(name) is not None:
            state[name] = masters[name]
        elif value.is_floating_point():
            state[name] = value.float()
    return state


def save_checkpoint(path: Path, step: PretrainingStep) -> None:
    """checkpoint.pt: fp32 weights, LAMB, schedule and scaler state at ``step.step_count`` (atomic)."""
    state = {
        "model": full_precision_state(step.model, step.optimizer),
        "config": dataclasses.asdict(step.model.config),
        "optimizer": step.optimizer.state_dict(),
        "schedule": step.schedule.state_dict(),
        "scaler": step.scaler.state_dict(),
        "step": step.step_count,
        "recipe": step.recipe,
    }
    with atomic_write(path) as tmp:
        torch.save(state, tmp)


def micro_batches(dataset, start: int, count: int, workers: int, pin: bool):
    """Micro-batches number start .. start+count-1, loaded in worker processes."""
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


def steps_to_next_eval(step: int, eval_every: int, end: int, eval_batches) -> int:
    """Optimizer steps from ``step`` to the next evaluation, at most to the run's last step ``end``
    (without evaluation data: to ``end``)."""
    if eval_batches is None:
        return end - step
    return min((step // eval_every + 1) * eval_every, end) - step


@entry_point
def main(argv=None) -> None:
    args = parse_args(argv)
    recipe = build_recipe(args)
    results = Path(args.results_dir)
    resume_from = resolve_resume(args.resume, results / CHECKPOINT_NAME)
    env, device = init_distributed(args.device)
    fast_math(device)
    batches, spec, vocab_size = build_batches(args, recipe, env)
    eval_batches, eval_samples = None, 0
    if not args.synthetic:
        if args.eval_data_dir is None and env.is_primary:
            print(
                f"MLM accuracy on the first {recipe['eval_samples']} training samples "
                "(--eval-data-dir: held-out ones)",
                flush=True,
            )
        eval_batches, eval_samples = build_eval_batches(args.eval_data_dir or args.data_dir, recipe, env)
    if recipe.get("target_mlm_accuracy") is not None and eval_batches is None:
        raise SystemExit("error: --target-mlm-accuracy needs prepared data (--data-dir), not --synthetic")
    init_state, resumed = read_start_weights(recipe, vocab_size, args.init_checkpoint, resume_from)
    log_path = mlperf_log_path(results, resumed=resume_from is not None, primary=env.is_primary)
    with MLPerfLogger(log_path, "bert", enabled=env.is_primary) as mlperf:
        mlperf.cache_clear(False)  # the record the rules ask for; dropping the page cache needs root
        mlperf.init_start()
        model = train(
            args, recipe, env, device, batches=batches, spec=spec, vocab_size=vocab_size,
            eval_batches=eval_batches, eval_samples=eval_samples, init_state=init_state, resumed=resumed, mlperf=mlperf,
        )  # fmt: skip
    check_replicas_agree(model, env)
    close_distributed()


def train(
    args,
    recipe,
    env,
    device,
    *,
    batches,
    spec,
    vocab_size,
    eval_batches,
    eval_samples,
    init_state,
    resumed,
    mlperf,
) -> BertForPreTraining:
    """Build the model (from ``init_state``) and its training step, continue the ``resumed`` checkpoint
    if given, and train to the recipe's last step, the target MLM accuracy or ``--stop-after``; writes
    checkpoint.pt, model.pt and the logs."""
    target = recipe.get("target_mlm_accuracy")
    model = build_model(recipe, vocab_size, spec.nsp, init_state).to(device)
    step_fn = PretrainingStep(
        model, recipe, device, nsp=spec.nsp, rank=env.rank, world_size=env.world_size, resume_state=resumed
    )
    step = step_fn.step_count
    total_steps = recipe["steps"]
    results = Path(args.results_dir)
    checkpoint_path = results / CHECKPOINT_NAME

    accumulation = recipe["accumulation"]
    steps_this_run = total_steps - step
    if args.stop_after is not None:
        steps_this_run = min(steps_this_run, args.stop_after)
    steps_end = step + steps_this_run
    log = MetricsLogger(
        str(results / "metrics.jsonl"), enabled=env.is_primary, total_steps=total_steps, desc="pretrain"
    )
    global_batch = recipe["batch_size"] * accumulation * env.world_size
    train_samples = (
        len(batches.data) if isinstance(batches, PretrainingBatches) else total_steps * global_batch
    )
    log_mlperf_recipe(mlperf, recipe, spec, global_batch, train_samples, eval_samples)
    amp = recipe["amp"]
    if env.is_primary:
        print(
            f"{recipe['model']} ({parameter_count(model) / 1e6:.1f}M parameters), seq {spec.max_seq}, "
            f"global batch {global_batch} = {recipe['batch_size']} x {accumulation} accumulation x {env.world_size} "
            f"processes, {amp}, steps {step}..{total_steps} on {device}",
            flush=True,
        )
    loader = micro_batches(
        batches,
        step * accumulation,
        steps_this_run * accumulation,
        recipe.get("loader_workers", 2),
        device.type == "cuda",
    )
    model.train()
    log_every = recipe.get("log_every", 10)
    eval_every = recipe["eval_every"]
    reached = False
    mlperf.init_stop()
    mlperf.run_start()
    # MLPerf's BERT logs count progress in samples trained ("epoch_num"), a block per evaluation
    block_first = step * global_batch
    mlperf.block_start(
        block_first, steps_to_next_eval(step, eval_every, steps_end, eval_batches) * global_batch
    )
    block_open = True
    window_start, window_sequences, window_steps = time.perf_counter(), 0, 0
    window_throughputs = []  # sequences/s of each logged window
    loss_sum = torch.zeros((), device=device)
    mlm_sum = torch.zeros((), device=device)
    for _ in range(steps_this_run):
        try:
            loss, mlm, step_sequences = step_fn(loader)
        except ShardError as e:  # a shard damaged after the start-up check: keep the work done
            if env.is_primary:
                save_checkpoint(checkpoint_path, step_fn)
            cause = str(e).strip().splitlines()[-1].split("ShardError: ", 1)[-1]  # a worker's, too
            raise SystemExit(
                f"error: {cause}; step {step} saved in {checkpoint_path}: prepare the data again, "
                "then --resume auto"
            ) from None
        loss_sum += loss
        mlm_sum += mlm
        step = step_fn.step_count
        window_steps += 1
        window_sequences += step_sequences * env.world_size
        log.progress(step, step_sequences * env.world_size)

        last = step == total_steps
        if step % log_every == 0 or last:
            if env.world_size > 1:
                for value in (loss_sum, mlm_sum):
                    dist.all_reduce(value)
                    value /= env.world_size
            n = window_steps
            loss_value, mlm_value = loss_sum.item() / n, mlm_sum.item() / n
            # after .item(): the device has finished the window's steps, which the host ran ahead of
            elapsed = time.perf_counter() - window_start
            metrics = {
                "loss": loss_value,
                "mlm_loss": mlm_value,
                "lr": step_fn.schedule.get_last_lr()[0],
                "sequences_per_s": window_sequences / elapsed,
            }
            log.log(step, metrics, units={"sequences_per_s": " seq/s"})
            window_throughputs.append(metrics["sequences_per_s"])
            loss_sum.zero_()
            mlm_sum.zero_()
            window_start, window_sequences, window_steps = time.perf_counter(), 0, 0
        # every eval_every steps, and at the end of this run: its log reports the quality it left
        if eval_batches is not None and (step % eval_every == 0 or last or step == steps_end):
            eval_began = time.perf_counter()
            samples = step * global_batch
            mlperf.block_stop(block_first)
            block_open = False
            mlperf.eval_start(samples)
            accuracy = mlm_accuracy(model, eval_batches, device, amp, env)
            mlperf.eval_stop(samples)
            mlperf.eval_accuracy(accuracy, samples)
            log.log(step, {"mlm_accuracy": accuracy}, phase="eval")
            reached = target is not None and accuracy >= target
            last = last or reached
            if not last and step < steps_end:
                block_first = samples
                mlperf.block_start(
                    block_first, steps_to_next_eval(step, eval_every, steps_end, eval_batches) * global_batch
                )
                block_open = True
            window_start += time.perf_counter() - eval_began  # evaluation is not training time
        if env.is_primary and step % recipe["checkpoint_every"] == 0 and not last:
            save_checkpoint(checkpoint_path, step_fn)
        if last:
            break
    if block_open:  # no evaluation data
        mlperf.block_stop(block_first)
    finished = step == total_steps and target is None
    mlperf.run_stop("success" if reached or finished else "aborted")
    if env.is_primary:
        save_checkpoint(checkpoint_path, step_fn)
        with atomic_write(results / "model.pt") as tmp:
            state = {
                "model": full_precision_state(model, step_fn.optimizer),
                "config": dataclasses.asdict(model.config),
            }
            torch.save(state, tmp)
        print(f"step {step}: checkpoint {checkpoint_path}, weights {results / 'model.pt'}", flush=True)
        if len(window_throughputs) > 1:  # the first window compiles and warms up
            print(
                f"steady throughput: {statistics.median(window_throughputs[1:]):.1f} seq/s (median of "
                f"{len(window_throughputs) - 1} logged windows after the first)",
                flush=True,
            )
    log.close()
    return model


if __name__ == "__main__":
    main()
