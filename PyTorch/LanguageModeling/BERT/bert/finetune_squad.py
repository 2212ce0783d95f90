"""SQuAD v1.1 fine-tuning and prediction: train from a pretrained checkpoint, predict answer spans,
score them with the official EM/F1.

    python -m bert.finetune_squad --do-train --do-predict --data-dir data/squad --vocab vocab.txt \\
        --init-checkpoint model.pt --target-f1 90.5

Launch with ``scripts/train.sh squad`` (fine-tuning, torchrun for several GPUs) or
``scripts/evaluate.sh`` (prediction and score of a fine-tuned checkpoint).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from zoo.checkpoints import CheckpointError
from zoo.cli import add_run_args, add_target_arg, entry_point, recipe_from_args
from zoo.cli import parse_args as parse_cli_args
from zoo.data.squad import (
    DEV_FILE,
    TRAIN_FILE,
    best_spans,
    check_target_f1,
    complete_squad_args,
    evaluate_predictions,
    make_features,
    read_squad,
)
from zoo.data.wordpiece import load_tokenizer
from zoo.io import atomic_write
from zoo.log import MetricsLogger
from zoo.torch import (
    autocast,
    close_distributed,
    distributed_model,
    fast_math,
    grad_scaler,
    init_distributed,
    parameter_groups,
    seed_everything,
)

from bert import convert
from bert.inference import inference_model
from bert.lamb import warmup_poly_schedule
from bert.model import BertConfig, BertForQuestionAnswering, bert_config

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
# flag -> recipe key; a flag left unset keeps the recipe's value (zoo.cli maps --amp to amp)
FLAG_KEYS = {
    "model": "model",
    "epochs": "epochs",
    "batch_size": "batch_size",
    "lr": "optimizer.lr",
    "max_seq": "max_seq",
    "doc_stride": "doc_stride",
    "seed": "seed",
    "target_f1": "target_f1",
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m bert.finetune_squad", description="SQuAD v1.1 fine-tuning / prediction."
    )
    add_run_args(
        p,
        default_recipe=CONFIG_DIR / "squad_1gpu.yaml",
        resume=False,
        data_help=f"folder with {TRAIN_FILE} and {DEV_FILE} (scripts/download_data.sh squad; $DATA_DIR)",
    )
    add_target_arg(p, "f1", unit="%", example=90.5)
    p.add_argument("--do-train", action="store_true")
    p.add_argument("--do-predict", action="store_true")
    p.add_argument("--train-file", help=f"default: DATA_DIR/{TRAIN_FILE}")
    p.add_argument("--predict-file", help=f"default: DATA_DIR/{DEV_FILE}")
    p.add_argument("--vocab", required=True, help="vocab.txt of the pretrained model")
    p.add_argument("--init-checkpoint", help="pretrained or fine-tuned weights (ours, Hugging Face, Google)")
    p.add_argument("--model", help="bert-large, bert-base or bert-tiny")
    p.add_argument("--epochs", type=int)
    p.add_argument("--max-steps", type=int, help="stop training after this many steps")
    p.add_argument("--batch-size", type=int, help="per process")
    p.add_argument("--lr", type=float)
    p.add_argument("--max-seq", type=int)
    p.add_argument("--doc-stride", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--device", default=None)
    args = parse_cli_args(p, argv)
    return complete_squad_args(p, args)


def build_recipe(args) -> dict:
    recipe = recipe_from_args(args, FLAG_KEYS)
    check_target_f1(recipe, args.do_predict)
    return recipe


def build_model(recipe, vocab_size: int, init_checkpoint: str | None) -> BertForQuestionAnswering:
    config = bert_config(recipe["model"], vocab_size=vocab_size)
    if init_checkpoint and Path(init_checkpoint).is_file():
        try:  # our checkpoints carry their architecture
            saved = torch.load(init_checkpoint, map_location="cpu", weights_only=True)
            if isinstance(saved, dict) and isinstance(saved.get("config"), dict):
                config = BertConfig.from_dict(saved["config"])
        except Exception:
            pass  # not a torch file: convert.load_into reports what it is
    seed_everything(recipe["seed"])
    model = BertForQuestionAnswering(config)
    if init_checkpoint:
        try:
            convert.load_into(model, init_checkpoint)
        except CheckpointError as e:
            raise SystemExit(f"error: --init-checkpoint {init_checkpoint}: {e}") from None
    return model


def train(model, features, recipe, args, env, device, log, end_of_epoch=None) -> int:
    """Fine-tune for the recipe's epochs (or --max-steps); returns the steps trained.
    ``end_of_epoch(epoch, step)``, called on every rank after each whole epoch, returns True to stop
    early (the target is reached)."""
    n = len(features)
    batch = recipe["batch_size"]
    steps_per_epoch = n // (batch * env.world_size)
    if steps_per_epoch == 0:
        raise SystemExit(f"{n} training windows are fewer than one global batch of {batch * env.world_size}")
    total = max(1, int(recipe["epochs"] * steps_per_epoch))
    if args.max_steps:
        total = min(total, args.max_steps)
    opt_cfg = recipe["optimizer"]
    optimizer = torch.optim.AdamW(
        parameter_groups(model, opt_cfg["weight_decay"]),
        lr=opt_cfg["lr"],
        eps=opt_cfg.get("eps", 1e-6),
        fused=device.type == "cuda",
    )
    schedule = warmup_poly_schedule(optimizer, total_steps=total, warmup=recipe["warmup"], power=1.0)
    amp = recipe["amp"]
    scaler = grad_scaler(device, amp)
    train_model = distributed_model(model, device) if env.world_size > 1 else model
    arrays = {
        k: torch.from_numpy(getattr(features, k))
        for k in ("input_ids", "token_type_ids", "attention_mask", "start_positions", "end_positions")
    }
    model.train()
    started = time.perf_counter()
    for step in range(total):
        epoch, in_epoch = divmod(step, steps_per_epoch)
        order = np.random.default_rng([recipe["seed"], epoch]).permutation(n)
        first = (in_epoch * env.world_size + env.rank) * batch
        rows = torch.from_numpy(order[first : first + batch])
        b = {k: v[rows].to(device, non_blocking=True) for k, v in arrays.items()}
        torch.manual_seed(recipe["seed"] * 1_000_003 + step * 1009 + env.rank)
        with autocast(device, amp):
            start, end = train_model(b["input_ids"], b["token_type_ids"], b["attention_mask"])
        loss = (F.cross_entropy(start, b["start_positions"]) + F.cross_entropy(end, b["end_positions"])) / 2
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        log.progress(step + 1, batch * env.world_size)
        if (step + 1) % recipe["log_every"] == 0 or step + 1 == total:
            elapsed = time.perf_counter() - started
            log.log(
                step + 1,
                {
                    "loss": loss.item(),
                    "lr": schedule.get_last_lr()[0],
                    "sequences_per_s": (step + 1) * batch * env.world_size / elapsed,
                },
            )
        if end_of_epoch is not None and in_epoch == steps_per_epoch - 1:
            scoring_began = time.perf_counter()
            if end_of_epoch(epoch + 1, step + 1):
                return step + 1
            model.train()  # prediction left it in eval mode
            started += time.perf_counter() - scoring_began  # scoring is not training time
    return total


@torch.no_grad()
def predict(model, features, device, amp: str, batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Start and end logits of every window from the inference model of ``model`` (bert.inference: a
    copy with its weights in ``amp``, what export writes and Triton serves), with a progress line
    (windows done/total, windows/s)."""
    served = inference_model(model, amp=amp, device=device)
    batches = range(0, len(features), batch_size)
    progress = MetricsLogger(None, total_steps=len(batches), desc="predict")
    starts, ends = [], []
    for index, first in enumerate(batches, 1):
        sl = slice(first, first + batch_size)
        inputs = [
            torch.from_numpy(getattr(features, k)[sl]).to(device)
            for k in ("input_ids", "token_type_ids", "attention_mask")
        ]
        s, e = served(*inputs)
        starts.append(s.float().cpu().numpy())
        ends.append(e.float().cpu().numpy())
        progress.progress(index, len(inputs[0]))
    progress.close()
    del served
    return np.concatenate(starts), np.concatenate(ends)


def predict_and_score(model, recipe, tokenizer, predict_file, device, results: Path) -> dict:
    """Predict the answers of ``predict_file`` (written to results/predictions.json) and score them:
    ``{"exact_match": %, "f1": %}``."""
    examples, raw = read_squad(predict_file)
    window = dict(max_seq=recipe["max_seq"], doc_stride=recipe["doc_stride"], max_query=recipe["max_query"])
    features = make_features(examples, tokenizer, **window)
    start_logits, end_logits = predict(model, features, device, recipe["amp"])
    predictions = best_spans(
        examples,
        features,
        start_logits,
        end_logits,
        n_best=recipe["n_best"],
        max_answer_tokens=recipe["max_answer_tokens"],
    )
    results.mkdir(parents=True, exist_ok=True)
    with atomic_write(results / "predictions.json") as tmp:
        Path(tmp).write_text(json.dumps(predictions, indent=1))
    return evaluate_predictions(raw, predictions)


@entry_point
def main(argv=None) -> dict | None:
    """Fine-tune and/or predict; returns the dev scores on the primary rank (None elsewhere or
    without --do-predict)."""
    args = parse_args(argv)
    recipe = build_recipe(args)
    # both files are checked before anything is trained or written (a bad dev file is not found after training)
    train_examples = read_squad(args.train_file)[0] if args.do_train else None
    if args.do_predict:
        read_squad(args.predict_file)
    env, device = init_distributed(args.device)
    fast_math(device)
    tokenizer = load_tokenizer(args.vocab)
    model = build_model(recipe, tokenizer.get_vocab_size(), args.init_checkpoint).to(device)
    results = Path(args.results_dir)
    log = MetricsLogger(str(results / "metrics.jsonl"), enabled=env.is_primary, desc="squad")
    target = recipe.get("target_f1")
    units = {"exact_match": "%", "f1": "%"}
    scores, scored_step = None, None

    def end_of_epoch(epoch: int, step: int) -> bool:
        """Score the dev set on the primary rank; every rank learns whether F1 reached the target."""
        nonlocal scores, scored_step
        reached = torch.zeros((), device=device)
        if env.is_primary:
            scores, scored_step = (
                predict_and_score(model, recipe, tokenizer, args.predict_file, device, results),
                step,
            )
            log.log(step, {**scores, "epoch": epoch}, units=units, phase="eval")
            reached.fill_(scores["f1"] >= target)
        if dist.is_initialized():
            dist.broadcast(reached, 0)
        return bool(reached)

    step = 0
    if args.do_train:
        examples = train_examples
        window = dict(
            max_seq=recipe["max_seq"], doc_stride=recipe["doc_stride"], max_query=recipe["max_query"]
        )
        features = make_features(examples, tokenizer, **window)
        if env.is_primary:
            print(
                f"{len(examples)} training questions -> {len(features)} windows of {recipe['max_seq']}",
                flush=True,
            )
        # with a target, the dev set is scored after every epoch and training stops once it is reached
        step = train(
            model, features, recipe, args, env, device, log, end_of_epoch if target is not None else None
        )
        if env.is_primary:
            with atomic_write(results / "squad_model.pt") as tmp:
                torch.save({"model": model.state_dict(), "config": dataclasses.asdict(model.config)}, tmp)
    if args.do_predict and env.is_primary:
        if scored_step is None or scored_step != step:  # the weights changed since the last score
            scores = predict_and_score(model, recipe, tokenizer, args.predict_file, device, results)
            log.log(step, scores, units=units, phase="eval")
        print(json.dumps(scores), flush=True)
        if target is not None:
            verdict = "reached" if scores["f1"] >= target else "not reached"
            print(f"target F1 {target}%: {verdict} (F1 {scores['f1']:.2f}%)", flush=True)
    log.close()
    close_distributed()
    return scores


if __name__ == "__main__":
    main()
