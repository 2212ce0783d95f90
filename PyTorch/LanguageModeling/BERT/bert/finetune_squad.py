"""SQuAD v1.1 fine-tuning and prediction: train from a pretrained checkpoint, predict answer spans,
score them with the official EM/F1.

    python -m bert.finetune_squad --do-train --do-predict --train-file train-v1.1.json \\
        --predict-file dev-v1.1.json --vocab vocab.txt --init-checkpoint model.pt
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
from zoo.checkpoints import CheckpointError, atomic_write
from zoo.log import MetricsLogger
from zoo.recipe import load_recipe, parse_overrides

from bert import convert
from bert.lamb import warmup_poly_schedule
from bert.model import BertConfig, BertForQuestionAnswering, bert_config
from bert.pretrain import CONFIG_DIR, init_distributed
from bert.squad import best_spans, evaluate_predictions, make_features, read_squad
from bert.tokenization import load_tokenizer

FLAG_KEYS = {
    "model": "model",
    "epochs": "epochs",
    "batch_size": "batch_size",
    "lr": "optimizer.lr",
    "amp": "amp",
    "max_seq": "max_seq",
    "doc_stride": "doc_stride",
    "seed": "seed",
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m bert.finetune_squad", description="SQuAD v1.1 fine-tuning / prediction."
    )
    p.add_argument("--recipe", default=str(CONFIG_DIR / "squad_1gpu.yaml"))
    p.add_argument("--do-train", action="store_true")
    p.add_argument("--do-predict", action="store_true")
    p.add_argument("--train-file", help="train-v1.1.json")
    p.add_argument("--predict-file", help="dev-v1.1.json")
    p.add_argument("--vocab", required=True, help="vocab.txt of the pretrained model")
    p.add_argument("--init-checkpoint", help="pretrained or fine-tuned weights (ours, Hugging Face, Google)")
    p.add_argument("--results-dir", default="results/squad")
    p.add_argument("--model", help="bert-large, bert-base or bert-tiny")
    p.add_argument("--epochs", type=float)
    p.add_argument("--max-steps", type=int, help="stop training after this many steps")
    p.add_argument("--batch-size", type=int, help="per process")
    p.add_argument("--lr", type=float)
    p.add_argument("--amp", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--max-seq", type=int)
    p.add_argument("--doc-stride", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--device", default=None)
    args = p.parse_args(argv)
    if not (args.do_train or args.do_predict):
        p.error("give --do-train and/or --do-predict")
    if args.do_train and not args.train_file:
        p.error("--do-train needs --train-file")
    if args.do_predict and not args.predict_file:
        p.error("--do-predict needs --predict-file")
    return args


def build_model(recipe, vocab_size: int, init_checkpoint: str | None) -> BertForQuestionAnswering:
    config = bert_config(recipe["model"], vocab_size=vocab_size)
    if init_checkpoint and Path(init_checkpoint).is_file():
        try:  # our checkpoints carry their architecture
            saved = torch.load(init_checkpoint, map_location="cpu", weights_only=True)
            if isinstance(saved, dict) and isinstance(saved.get("config"), dict):
                config = BertConfig.from_dict(saved["config"])
        except Exception:
            pass  # not a torch file: convert.load_into reports what it is
    torch.manual_seed(recipe["seed"])
    model = BertForQuestionAnswering(config)
    if init_checkpoint:
        try:
            convert.load_into(model, init_checkpoint)
        except CheckpointError as e:
            raise SystemExit(f"--init-checkpoint: {e}") from None
    return model


def train(model, features, recipe, args, env, device, log) -> None:
    n = len(features)
    batch = recipe["batch_size"]
    steps_per_epoch = n // (batch * env.world_size)
    if steps_per_epoch == 0:
        raise SystemExit(f"{n} training windows are fewer than one global batch of {batch * env.world_size}")
    total = max(1, int(recipe["epochs"] * steps_per_epoch))
    if args.max_steps:
        total = min(total, args.max_steps)
    decay, plain = [], []
    for name, p in model.named_parameters():
        (plain if p.ndim < 2 or name.endswith("bias") else decay).append(p)
    opt_cfg = recipe["optimizer"]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": opt_cfg["weight_decay"]}, {"params": plain, "weight_decay": 0.0}],
        lr=opt_cfg["lr"],
        eps=opt_cfg.get("eps", 1e-6),
        fused=device.type == "cuda",
    )
    schedule = warmup_poly_schedule(optimizer, total_steps=total, warmup=recipe["warmup"], power=1.0)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[recipe["amp"]]
    scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None
    train_model = model
    if env.world_size > 1:
        train_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
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
        with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            start, end = train_model(b["input_ids"], b["token_type_ids"], b["attention_mask"])
        loss = (F.cross_entropy(start, b["start_positions"]) + F.cross_entropy(end, b["end_positions"])) / 2
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
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


@torch.no_grad()
def predict(model, features, device, amp: str, batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    model.eval()
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[amp]
    starts, ends = [], []
    for first in range(0, len(features), batch_size):
        sl = slice(first, first + batch_size)
        inputs = [
            torch.from_numpy(getattr(features, k)[sl]).to(device)
            for k in ("input_ids", "token_type_ids", "attention_mask")
        ]
        with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            s, e = model(*inputs)
        starts.append(s.float().cpu().numpy())
        ends.append(e.float().cpu().numpy())
    return np.concatenate(starts), np.concatenate(ends)


def main(argv=None) -> dict | None:
    args = parse_args(argv)
    overrides = parse_overrides(args.set)
    overrides.update(
        {key: getattr(args, flag) for flag, key in FLAG_KEYS.items() if getattr(args, flag) is not None}
    )
    recipe = load_recipe(args.recipe, overrides)
    env, device = init_distributed(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tokenizer = load_tokenizer(args.vocab)
    model = build_model(recipe, tokenizer.get_vocab_size(), args.init_checkpoint).to(device)
    results = Path(args.results_dir)
    log = MetricsLogger(str(results / "metrics.jsonl"), enabled=env.is_primary, desc="squad")
    window = dict(max_seq=recipe["max_seq"], doc_stride=recipe["doc_stride"], max_query=recipe["max_query"])
    if args.do_train:
        examples, _ = read_squad(args.train_file)
        features = make_features(examples, tokenizer, **window)
        if env.is_primary:
            print(
                f"{len(examples)} training questions -> {len(features)} windows of {recipe['max_seq']}",
                flush=True,
            )
        train(model, features, recipe, args, env, device, log)
        if env.is_primary:
            with atomic_write(results / "squad_model.pt") as tmp:
                torch.save({"model": model.state_dict(), "config": dataclasses.asdict(model.config)}, tmp)
    scores = None
    if args.do_predict and env.is_primary:
        examples, raw = read_squad(args.predict_file)
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
        scores = evaluate_predictions(raw, predictions)
        log.log(0, scores, units={"exact_match": "%", "f1": "%"}, phase="eval")
        print(json.dumps(scores), flush=True)
    log.close()
    if dist.is_initialized():
        dist.barrier()  # no rank tears the group down while another still uses it
        dist.destroy_process_group()
    return scores


if __name__ == "__main__":
    main()
