"""Train the RNN-T: parse, build, resume, then the loop of engine.py per epoch, the EMA model's word
error rate, checkpoints, the WER target. LAMB with the MLPerf schedule, bucketed batches, speed
perturbation and SpecAugment, gradient accumulation, mixed precision, DDP (the step: rnnt.step).

    python -m rnnt.train --data-dir DATA --results-dir results [--target-wer 0.058]
    torchrun --nproc_per_node 8 -m rnnt.train --recipe configs/rnnt_8gpu.yaml --data-dir DATA

Writes RESULTS_DIR/checkpoint.pt (zoo.torch.save_training_checkpoint: model, EMA, optimizer, schedule,
scaler, every rank's generators, epoch, step, position in the epoch, best WER, recipe), metrics.jsonl +
tensorboard/ (MetricsLogger), mlperf.log (benchmark "rnnt", ruleset 3.1.0; a resumed run writes
mlperf_resume<N>.log) and model.pt (the EMA weights, the tokenizer and what inference needs).
"""

from __future__ import annotations

import argparse
import pathlib

from zoo.cli import entry_point
from zoo.errors import UserError

MODEL_NAME = "model.pt"
TRAINING_KIND = "rnnt-training"  # the checkpoint field that tells this model's state from another's


def build_parser() -> argparse.ArgumentParser:
    from zoo.cli import add_run_args, add_target_arg

    from rnnt import DEFAULT_RECIPE

    parser = argparse.ArgumentParser(
        prog="python -m rnnt.train", description="Train the RNN-T on a prepared LibriSpeech folder."
    )
    add_run_args(parser, default_recipe=DEFAULT_RECIPE, data_help="prepared LibriSpeech folder ($DATA_DIR)")
    add_target_arg(parser, "wer", unit="fraction", example=0.058)
    parser.add_argument("--epochs", type=int, default=None, help="epochs (run.epochs; default: the recipe's)")
    parser.add_argument(
        "--batch-size", type=int, default=None, help="utterances per GPU per micro-batch (run.batch_per_gpu)"
    )
    parser.add_argument(
        "--accumulation", type=int, default=None, help="micro-batches per update (run.accumulation)"
    )
    parser.add_argument("--seed", type=int, default=None, help="run.seed")
    parser.add_argument(
        "--synthetic",
        action="store_true",
        help="the espeak-ng sentences spoken into RESULTS_DIR, no download",
    )
    parser.add_argument("--device", default=None, help="cpu, cuda (default: cuda:LOCAL_RANK where CUDA is)")
    return parser


def check_run(run, recipe_path) -> None:
    """The RNN-T counts its run in epochs and evaluates at an epoch's end."""
    if run.epochs is None:
        raise UserError(f"run.steps: the RNN-T's run is counted in epochs: set run.epochs ({recipe_path})")
    if run.eval_every is not None and run.eval_every.unit != "epochs":
        raise UserError(
            f"run.eval_every must be 'N epochs' or null: WER is scored at an epoch's end ({recipe_path})"
        )


def read_training_checkpoint(path) -> dict:
    """A checkpoint.pt written by this training, loaded; a UserError where it is not one."""
    from zoo.torch import TRAINING_STATE_FIELDS, load_training_checkpoint

    needed = (*TRAINING_STATE_FIELDS, "kind", "ema", "scheduler", "scaler", "step_in_epoch", "best")
    state = load_training_checkpoint(path, needed, "an RNN-T training checkpoint")
    if state["kind"] != TRAINING_KIND:
        raise UserError(f"--resume {path} is not an RNN-T training checkpoint (kind {state['kind']!r})")
    return state


def prepared_data(args, recipe: dict, results: pathlib.Path, env) -> pathlib.Path:
    """The data folder: --data-dir, or the espeak-ng sentences spoken into RESULTS_DIR (--synthetic)."""
    import torch.distributed as dist

    if not args.synthetic:
        return pathlib.Path(args.data_dir)
    from rnnt.download import prepare
    from rnnt.spoken import espeak_binary, make_spoken

    espeak_binary()
    data_cfg = recipe["data"]
    data_dir = results / "synthetic_data"
    if env.is_primary and not (data_dir / data_cfg["tokenizer"]).is_file():
        make_spoken(data_dir)
        prepare(
            data_dir,
            ["train", "dev"],
            train_splits=["train"],
            vocab_size=int(data_cfg["vocab_size"]),
            tokenizer=data_cfg["tokenizer"],
            mirror=None,
        )
    if env.world_size > 1:
        dist.barrier()
    return data_dir


def tokenizer_fields(tokenizer) -> dict:
    """The SentencePiece model and its size, in model.pt and in every training checkpoint."""
    return {"vocab_size": tokenizer.get_piece_size(), "tokenizer": tokenizer.serialized_model_proto()}


def save_model(path, model, recipe: dict, tokenizer) -> None:
    """model.pt: the EMA weights, the SentencePiece model and what inference needs to rebuild the model."""
    import torch
    from zoo.io import atomic_write

    state = {
        "kind": "rnnt",
        "model": model.state_dict(),
        "model_recipe": recipe["model"],
        "features": recipe["features"],
        "eval": recipe["eval"],
        **tokenizer_fields(tokenizer),
    }
    with atomic_write(path) as tmp:
        torch.save(state, tmp)


def log_mlperf_settings(
    mlperf, recipe: dict, run, world_size: int, train_samples: int, eval_samples: int
) -> None:
    """The MLPerf log's initialisation events: seed, batch, data sizes, LAMB, schedule, data and eval keys."""
    opt_cfg, data_cfg, augment = recipe["optimizer"], recipe["data"], recipe["augment"]
    speed = data_cfg["speed_perturbation"] or [1.0, 1.0]
    mlperf.cache_clear()
    mlperf.init_start()
    mlperf.seed(run.seed)
    mlperf.global_batch_size(run.batch_per_gpu * world_size * run.accumulation)
    mlperf.gradient_accumulation_steps(run.accumulation)
    mlperf.train_samples(train_samples)
    mlperf.eval_samples(eval_samples)
    mlperf.hyperparameters(
        opt_name="lamb",
        opt_base_learning_rate=opt_cfg["lr"],
        opt_lamb_epsilon=opt_cfg["eps"],
        opt_lamb_learning_rate_decay_poly_power=opt_cfg["exp_gamma"],
        opt_lamb_learning_rate_hold_epochs=opt_cfg["hold_epochs"],
        opt_learning_rate_warmup_epochs=opt_cfg["warmup_epochs"],
        opt_weight_decay=opt_cfg["weight_decay"],
        opt_lamb_beta_1=opt_cfg["betas"][0],
        opt_lamb_beta_2=opt_cfg["betas"][1],
        opt_gradient_clip_norm=opt_cfg["clip_norm"],
        opt_learning_rate_alt_decay_func=True,
        opt_learning_rate_alt_warmup_func=True,
        opt_lamb_learning_rate_min=opt_cfg["min_lr"],
        data_train_max_duration=data_cfg["max_duration"],
        data_train_num_buckets=int(data_cfg["num_buckets"]),
        data_speed_perturbaton_min=speed[0],
        data_speed_perturbaton_max=speed[1],
        data_spec_augment_freq_n=augment["freq_masks"],
        data_spec_augment_freq_min=augment["min_freq"],
        data_spec_augment_freq_max=augment["max_freq"],
        data_spec_augment_time_n=augment["time_masks"],
        data_spec_augment_time_min=augment["min_time"],
        data_spec_augment_time_max=augment["max_time"],
        model_eval_ema_factor=opt_cfg["ema"],
        eval_max_prediction_symbols=recipe["eval"]["max_symbols"],
    )
    mlperf.init_stop()


@entry_point
def main(argv=None) -> dict:
    from zoo.cli import Preemption, parse_args, recipe_from_args, resolve_resume

    args = parse_args(build_parser(), argv)

    from zoo.log import MetricsLogger
    from zoo.mlperf import MLPerfLogger, log_path
    from zoo.recipe import run_config
    from zoo.retention import improves
    from zoo.rng import rng_state, set_rng_state
    from zoo.torch import (
        CHECKPOINT_NAME,
        check_replicas_agree,
        close_distributed,
        fast_math,
        gather_objects,
        init_distributed,
        save_training_checkpoint,
        seed_everything,
    )

    # The recipe and --resume are checked before torch is imported: bad input ends in a second.
    recipe = recipe_from_args(args)
    run = run_config(recipe, args.recipe)
    check_run(run, args.recipe)
    data_cfg = recipe["data"]
    results = pathlib.Path(args.results_dir)
    resume_from = resolve_resume(args.resume, results / CHECKPOINT_NAME)

    from rnnt.data import Utterances, load_tokenizer
    from rnnt.engine import epoch_loader, evaluate, train_one_epoch
    from rnnt.model import build_model
    from rnnt.step import TrainStep

    # Everything a run reads is checked before it writes anything into the results folder.
    state = read_training_checkpoint(resume_from) if resume_from is not None else None
    if not args.synthetic:
        if not args.data_dir:
            raise UserError("pass --data-dir (or set DATA_DIR), or --synthetic")
        if not pathlib.Path(args.data_dir).is_dir():
            raise UserError(f"data dir {args.data_dir} does not exist")
        tokenizer = load_tokenizer(pathlib.Path(args.data_dir) / data_cfg["tokenizer"])
        Utterances(args.data_dir, data_cfg["train_splits"], tokenizer, float(data_cfg["max_duration"]))
    env, device = init_distributed(args.device)
    fast_math(device)
    results.mkdir(parents=True, exist_ok=True)
    data_dir = prepared_data(args, recipe, results, env)
    tokenizer = load_tokenizer(data_dir / data_cfg["tokenizer"])
    train_set = Utterances(data_dir, data_cfg["train_splits"], tokenizer, float(data_cfg["max_duration"]))
    eval_set = Utterances(data_dir, [data_cfg["eval_split"]], tokenizer)
    seed_everything(run.seed)

    steps_per_epoch, _ = epoch_loader(train_set, run, data_cfg, env, 1)
    features_in = int(recipe["features"]["n_mels"]) * int(recipe["features"]["frame_stacking"])
    model = build_model(recipe["model"], tokenizer.get_piece_size(), features_in).to(device)
    step = TrainStep(model, recipe, device, world_size=env.world_size, steps_per_epoch=steps_per_epoch)
    position = {"epoch": 0, "step": 0, "step_in_epoch": 0, "best": {"wer": 1.0}}
    if state is not None:
        step.load_state_dict(state, resume_from)
        position = {key: state[key] for key in position}
        set_rng_state(state["rng"][env.rank] if env.rank < len(state["rng"]) else state["rng"][0])

    def save_checkpoint(best: bool = False):  # best: the evaluation just done beat the earlier ones
        rngs = gather_objects(rng_state(), env.world_size)
        if env.is_primary:
            save_training_checkpoint(
                results / CHECKPOINT_NAME,
                {
                    "kind": TRAINING_KIND,
                    **step.state_dict(),
                    "rng": rngs,
                    **position,
                    "recipe": recipe,
                    **tokenizer_fields(tokenizer),
                },  # evaluation reads a training checkpoint alone too
                keep=run.keep_checkpoints,
                mark_best=best,
            )

    metrics = None
    mlperf_path = log_path(results, resumed=resume_from is not None) if env.is_primary else None
    with (
        MLPerfLogger(mlperf_path, "rnnt", enabled=env.is_primary) as mlperf,
        MetricsLogger(results / "metrics.jsonl", enabled=env.is_primary) as logger,
        Preemption(env.world_size, device) as preemption,  # SIGTERM: checkpoint the update, exit 143
    ):
        log_mlperf_settings(mlperf, recipe, run, env.world_size, len(train_set), len(eval_set))
        mlperf.run_start()
        status = "aborted"
        step.train()
        for epoch in range(position["epoch"] + 1, run.epochs + 1):
            mlperf.epoch_start(epoch)
            preempted = train_one_epoch(
                step,
                train_set,
                epoch,
                run,
                data_cfg=data_cfg,
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
            last, reached = epoch == run.epochs, False
            improved = (
                False  # the first evaluation is the best so far (the position's initial best is a floor)
            )
            best_before = position["best"]["wer"] if (results / "best.pt").exists() else None
            if last or (run.eval_every and run.eval_every.due(epoch, position["step"])):
                mlperf.eval_start(epoch)
                metrics = evaluate(
                    step.ema_model(),
                    eval_set,
                    step.features,
                    device,
                    run.precision,
                    recipe["eval"],
                    env,
                    tokenizer,
                )
                step.train()
                mlperf.eval_stop(epoch)
                mlperf.eval_accuracy(metrics["wer"], epoch)
                logger.log(position["step"], {**metrics, "epoch": epoch}, phase="eval")
                if env.is_primary:
                    print(f"epoch {epoch}: WER {metrics['wer']:.4f} on {data_cfg['eval_split']}", flush=True)
                position["best"] = {"wer": min(position["best"]["wer"], metrics["wer"])}
                reached = run.target.reached(metrics["wer"])
                # rank 0's answer on every rank (it alone sees best.pt): saving is a collective
                improved = gather_objects(improves("wer", metrics["wer"], best_before), env.world_size)[0]
            if (
                last
                or reached
                or improved
                or (run.checkpoint_every and run.checkpoint_every.due(epoch, position["step"]))
            ):
                save_checkpoint(best=improved)
            if reached:
                status = "success"
                break
        mlperf.run_stop(status)
    check_replicas_agree(model, env)
    if env.is_primary:
        save_model(results / MODEL_NAME, step.ema_model(), recipe, tokenizer)
    close_distributed()
    wer = metrics["wer"] if metrics else None
    return {"wer": wer, "step": position["step"], "status": status}


if __name__ == "__main__":
    main()
