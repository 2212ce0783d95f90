"""SQuAD v1.1 fine-tuning and prediction: train from a pretrained checkpoint, predict answer spans,
score them with the official EM/F1.

    python -m bert.finetune_squad --do-train --do-predict --data-dir data/squad --vocab vocab.txt \\
        --init-checkpoint model.pt --target-f1 90.5

Launch with ``scripts/train.sh squad`` (fine-tuning, torchrun for several GPUs) or
``scripts/evaluate.sh`` (prediction and score of a fine-tuned checkpoint). This file only wires: the
step is ``bert.step.squad_step``, the loop and the scoring ``bert.engine``'s.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.bert import fine_tuned_state, parse_squad_args, squad_parser, squad_recipe
from zoo.checkpoints import CheckpointError
from zoo.cli import entry_point
from zoo.data.squad import make_features, read_squad
from zoo.data.wordpiece import load_tokenizer
from zoo.errors import UserError
from zoo.io import atomic_write
from zoo.log import MetricsLogger
from zoo.recipe import run_config
from zoo.torch import broadcast_flag, close_distributed, fast_math, init_distributed, seed_everything

if TYPE_CHECKING:
    from bert.model import BertForQuestionAnswering


def parse_args(argv=None):
    from bert import SQUAD_RECIPE

    p = squad_parser(
        "python -m bert.finetune_squad",
        "SQuAD v1.1 fine-tuning / prediction.",
        default_recipe=SQUAD_RECIPE,
        checkpoint_help="pretrained or fine-tuned weights (ours, Hugging Face, Google)",
    )
    p.add_argument("--device", default=None)
    return parse_squad_args(p, argv, outputs=("squad_model.pt",))


def build_model(recipe, vocab_size: int, init_checkpoint: str | None) -> BertForQuestionAnswering:
    import torch

    from bert import convert
    from bert.model import BertConfig, BertForQuestionAnswering, bert_config

    config = bert_config(recipe["model"], vocab_size=vocab_size)
    if init_checkpoint and Path(init_checkpoint).is_file():
        try:  # our checkpoints carry their architecture
            saved = torch.load(init_checkpoint, map_location="cpu", weights_only=True)
            if isinstance(saved, dict) and isinstance(saved.get("config"), dict):
                config = BertConfig.from_dict(saved["config"])
        except Exception:
            pass  # not a torch file: convert.load_into reports what it is
    seed_everything(run_config(recipe).seed)
    model = BertForQuestionAnswering(config)
    if init_checkpoint:
        try:
            convert.load_into(model, init_checkpoint)
        except CheckpointError as e:
            raise UserError(f"--init-checkpoint {init_checkpoint}: {e}") from None
    return model


def fine_tune(
    model, examples, tokenizer, recipe: dict, args, env, device, log
) -> tuple[int, dict | None, int]:
    """Train for run.epochs (or run.steps); with --do-predict, score the dev set every run.eval_every
    epochs and stop once F1 reaches run.target. Returns (steps trained, last scores, the step they scored)."""
    from bert.data import SquadBatches
    from bert.engine import TrainWindow, evaluate_squad, train_one_epoch
    from bert.step import squad_step

    run = run_config(recipe)
    window = dict(max_seq=recipe["max_seq"], doc_stride=recipe["doc_stride"], max_query=recipe["max_query"])
    features = make_features(examples, tokenizer, **window)
    if env.is_primary:
        print(
            f"{len(examples)} training questions -> {len(features)} windows of {recipe['max_seq']}",
            flush=True,
        )
    batches = SquadBatches(features, run.batch_per_gpu, run.seed, rank=env.rank, world_size=env.world_size)
    per_epoch = max(1, batches.per_epoch // run.accumulation)  # optimizer steps
    total = run.steps if run.steps is not None else run.epochs * per_epoch
    step = squad_step(model, recipe, device, total, rank=env.rank, world_size=env.world_size)
    feed = map(batches.__getitem__, itertools.count())
    train_window, scores, scored_step, epoch = TrainWindow(), None, None, 0
    model.train()
    while step.step_count < total:
        todo = min(per_epoch, total - step.step_count)
        train_one_epoch(step, feed, todo, log=log, window=train_window, end=total, world_size=env.world_size)
        epoch += todo == per_epoch
        if not (args.do_predict and todo == per_epoch and run.eval_every and run.eval_every.due(epoch, 0)):
            continue
        reached = False
        if env.is_primary:  # the dev set is scored on the primary; every rank learns whether to stop
            scores = evaluate_squad(
                model, recipe, tokenizer, args.predict_file, device, Path(args.results_dir)
            )
            scored_step = step.step_count
            log.log(step.step_count, {**scores, "epoch": epoch}, phase="eval")
            reached = run.target.reached(scores["f1"])
        if broadcast_flag(reached, env.world_size, device):
            break
    return step.step_count, scores, scored_step


def fine_tuned(model, recipe: dict, vocab) -> dict:
    """squad_model.pt: the weights and what prediction and export need to use them alone (the model's
    config, the recipe fine-tuning scored with, the vocabulary's path)."""
    return {
        "model": model.state_dict(),
        "config": dataclasses.asdict(model.config),
        "task": "squad",
        "recipe": recipe,
        "vocab": str(Path(vocab).resolve()),
    }


def read_fine_tuned(path) -> dict | None:
    """The fields of a squad_model.pt (weights-only load), None for another file (its loader says why)."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - not a torch file: convert.load_into reports what it is
        return None


@entry_point
def main(argv=None) -> dict | None:
    """Fine-tune and/or predict; returns the dev scores on the primary rank (None elsewhere or
    without --do-predict)."""
    args = parse_args(argv)
    # a fine-tuned checkpoint alone: prediction takes its recipe and vocabulary unless flags say otherwise
    recipe = squad_recipe(args, saved=fine_tuned_state(args, read_fine_tuned))
    run = run_config(recipe, args.recipe)
    # both files are checked before anything is trained or written (a bad dev file is not found after training)
    train_examples = read_squad(args.train_file)[0] if args.do_train else None
    if args.do_predict:
        read_squad(args.predict_file)
    tokenizer = load_tokenizer(args.vocab)

    # The recipe and the files are checked before torch is imported: bad input ends in a second.
    import torch

    from bert.engine import evaluate_squad

    env, device = init_distributed(args.device)
    fast_math(device)
    model = build_model(recipe, tokenizer.get_vocab_size(), args.init_checkpoint).to(device)
    results = Path(args.results_dir)
    log = MetricsLogger(str(results / "metrics.jsonl"), enabled=env.is_primary, desc="squad")
    step, scores, scored_step = 0, None, None
    if args.do_train:
        step, scores, scored_step = fine_tune(
            model, train_examples, tokenizer, recipe, args, env, device, log
        )
        if env.is_primary:
            with atomic_write(results / "squad_model.pt") as tmp:
                torch.save(fine_tuned(model, recipe, args.vocab), tmp)
    if args.do_predict and env.is_primary:
        if scored_step != step:  # the weights changed since the last score
            scores = evaluate_squad(model, recipe, tokenizer, args.predict_file, device, results)
            log.log(step, scores, phase="eval")
        print(json.dumps(scores), flush=True)
        if run.target.value is not None:
            verdict = "reached" if run.target.reached(scores["f1"]) else "not reached"
            print(f"target F1 {run.target.value:g}%: {verdict} (F1 {scores['f1']:.2f}%)", flush=True)
    log.close()
    close_distributed()
    return scores


if __name__ == "__main__":
    main()
