"""The training loop of both BERT tasks and their evaluations, each read top to bottom.

    window = TrainWindow()
    train_one_epoch(step, micro_batches, steps, log=log, window=window, end=run.steps, world_size=world,
                    stop=preemption.requested)  # True: stopped early after a step (SIGTERM)
    evaluate(model, eval_batches, device, run.precision, world_size)    # {"mlm_accuracy": fraction}
    evaluate_squad(model, recipe, tokenizer, predict_file, device, results)   # {"exact_match", "f1"} %

``train_one_epoch`` runs one epoch of SQuAD fine-tuning, or, in pretraining (a run counted in steps),
the steps up to the next evaluation or checkpoint. ``pretrain.py`` and ``finetune_squad.py`` only wire:
they build the step (``bert.step``), the data and the loggers, call these, save and stop at the target.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from zoo.io import atomic_write
from zoo.log import MetricsLogger
from zoo.torch import autocast

from bert.inference import inference_model


@dataclasses.dataclass
class TrainWindow:
    """Train readings since the last logged one, kept across ``train_one_epoch`` calls: loss sums (device
    scalars), optimizer steps, sequences of all ranks, training seconds; and each logged throughput."""

    sums: dict = dataclasses.field(default_factory=dict)
    steps: int = 0
    sequences: int = 0
    seconds: float = 0.0
    throughputs: list = dataclasses.field(default_factory=list)


def train_one_epoch(
    step, micro_batches, steps: int, *, log, window: TrainWindow, end: int, world_size: int, stop=None
) -> bool:
    """``steps`` optimizer steps of ``step`` (bert.step.TrainStep) over the iterator ``micro_batches``.
    Every ``run.log_every`` steps and at step ``end`` logs the window's mean losses over every rank, the
    learning rate and the sequences per second of all ranks (time outside this function not counted).
    ``stop(steps_done)`` (zoo.cli.Preemption's ``requested``) ends it early after a step; returns whether
    it did."""
    began = time.perf_counter()
    for _ in range(steps):
        losses, sequences = step(micro_batches)
        for name, value in losses.items():
            window.sums[name] = window.sums.get(name, 0) + value
        window.steps += 1
        window.sequences += sequences * world_size
        done = step.step_count
        log.progress(done, sequences * world_size)
        if done % step.run.log_every == 0 or done == end:
            means = mean_over_ranks(window.sums, window.steps, world_size)  # the one wait for the device
            # after the fetch: the device has finished the window's steps, which the host ran ahead of
            throughput = window.sequences / (window.seconds + time.perf_counter() - began)
            log.log(done, {**means, "lr": step.lr, "throughput": throughput}, units={"throughput": "seq/s"})
            window.throughputs.append(throughput)
            window.sums, window.steps, window.sequences, window.seconds = {}, 0, 0, 0.0
            began = time.perf_counter()
        if stop is not None and stop(done):
            window.seconds += time.perf_counter() - began
            return True
    window.seconds += time.perf_counter() - began
    return False


def mean_over_ranks(sums: dict, steps: int, world_size: int) -> dict[str, float]:
    """{name: sum / steps}, averaged over the ranks: the window's mean losses."""
    names = sorted(sums)
    values = torch.stack([sums[name] for name in names])
    if world_size > 1:
        dist.all_reduce(values)
        values /= world_size
    return {name: value / steps for name, value in zip(names, values.tolist(), strict=True)}


@torch.no_grad()
def evaluate(model, batches: list[dict], device, precision: str, world_size: int, show: bool = True) -> dict:
    """{"mlm_accuracy": the fraction of masked tokens whose most likely prediction is the original
    token}, over every rank's evaluation batches (MLPerf's BERT quality metric), with a progress line."""
    progress = MetricsLogger(None, enabled=show, total_steps=len(batches), desc="eval mlm accuracy")
    model.eval()
    counts = torch.zeros(2, dtype=torch.float64, device=device)  # correct, masked
    for index, batch in enumerate(batches, 1):
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items() if k != "sequences"}
        with autocast(device, precision):
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
        progress.progress(index, len(labels) * world_size)
    progress.close()
    if world_size > 1:
        dist.all_reduce(counts)
    model.train()
    return {"mlm_accuracy": float(counts[0] / counts[1].clamp(min=1))}


@torch.no_grad()
def predict(model, features, device, precision: str, batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Start and end logits of every SQuAD window from the inference model of ``model`` (bert.inference:
    a copy with its weights in ``precision``, what export writes and Triton serves), with a progress line."""
    served = inference_model(model, amp=precision, device=device)
    batches = range(0, len(features), batch_size)
    progress = MetricsLogger(None, total_steps=len(batches), desc="predict")
    starts, ends = [], []
    for index, first in enumerate(batches, 1):
        rows = slice(first, first + batch_size)
        inputs = [
            torch.from_numpy(getattr(features, k)[rows]).to(device)
            for k in ("input_ids", "token_type_ids", "attention_mask")
        ]
        start, end = served(*inputs)
        starts.append(start.float().cpu().numpy())
        ends.append(end.float().cpu().numpy())
        progress.progress(index, len(inputs[0]))
    progress.close()
    return np.concatenate(starts), np.concatenate(ends)


def evaluate_squad(model, recipe: dict, tokenizer, predict_file, device, results: Path) -> dict:
    """{"exact_match", "f1"} in percent (the official SQuAD v1.1 metric) of ``model``'s answers to the
    questions of ``predict_file``; the answers are written to results/predictions.json."""
    from zoo.data.squad import best_spans, evaluate_predictions, make_features, read_squad
    from zoo.recipe import run_config

    examples, raw = read_squad(predict_file)
    window = dict(max_seq=recipe["max_seq"], doc_stride=recipe["doc_stride"], max_query=recipe["max_query"])
    features = make_features(examples, tokenizer, **window)
    start_logits, end_logits = predict(model, features, device, run_config(recipe).precision)
    answers = best_spans(
        examples, features, start_logits, end_logits,
        n_best=recipe["n_best"], max_answer_tokens=recipe["max_answer_tokens"],
    )  # fmt: skip
    results.mkdir(parents=True, exist_ok=True)
    with atomic_write(results / "predictions.json") as tmp:
        Path(tmp).write_text(json.dumps(answers, indent=1))
    return evaluate_predictions(raw, answers)
