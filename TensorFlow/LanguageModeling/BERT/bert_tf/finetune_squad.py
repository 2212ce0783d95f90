"""SQuAD v1.1 fine-tuning and prediction in TensorFlow 2 / Keras, scored with the official EM/F1 (``zoo.data.squad``,
the scorer the PyTorch BERT uses).

    python -m bert_tf.finetune_squad --do-train --do-predict --data-dir data/squad --vocab vocab.txt \\
        --init-checkpoint results/phase2 --target-f1 90.5

``--init-checkpoint``: a pretraining run directory, its ``model.npz``, Google's ``bert_model.ckpt`` (or
its zip), or weights of the PyTorch BERT / Hugging Face as .npz. The run directory gets ``run.json``,
``checkpoint/`` (the fine-tuned weights through zoo.tf.save_training_checkpoint: what ``evaluate.sh
--init-checkpoint RUN_DIR`` and ``export_triton.sh`` read), ``squad_model.npz`` (Google's names,
``cls/squad/*`` for the span head), ``predictions.json`` and ``metrics.jsonl``. Launch with
``scripts/train.sh squad`` or ``scripts/evaluate.sh``. This file only wires: the step is
``bert_tf.step.squad_step``, the loop and the scoring ``bert_tf.engine``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from zoo.bert import fine_tuned_state, parse_squad_args, squad_parser, squad_recipe
from zoo.checkpoint_folder import CHECKPOINT_NAME
from zoo.cli import entry_point
from zoo.errors import UserError
from zoo.recipe import run_config

from bert_tf.step import PRECISIONS, SQUAD_RECIPE

# this model's lever -> its recipe key (zoo.bert maps the flags both BERTs share)
FLAG_KEYS = {"xla": "xla"}


def parse_args(argv=None) -> argparse.Namespace:
    p = squad_parser(
        "python -m bert_tf.finetune_squad",
        "SQuAD v1.1 fine-tuning / prediction (TensorFlow).",
        default_recipe=SQUAD_RECIPE,
        checkpoint_help="pretrained or fine-tuned weights (run dir, Google ckpt/zip, .npz)",
    )
    p.add_argument("--xla", action="store_const", const=True, help="compile forward+backward with XLA")
    p.add_argument("--distribution", default="auto", help="auto, default or mirrored")
    # fine-tuning writes checkpoint/ (pruning older steps there), squad_model.npz and run.json
    return parse_squad_args(p, argv, outputs=("squad_model.npz", CHECKPOINT_NAME, "run.json"))


def model_config(recipe: dict, vocab_size: int, init_checkpoint: str | None):
    """The architecture: a training run's checkpoint's config, a Google checkpoint's bert_config.json, the
    shapes of a weights file (heads from the model of that hidden size), else the recipe's model."""
    from bert_tf.checkpoint import find_run_checkpoint, read_google_config, read_weights
    from bert_tf.model import CONFIGS, BertConfig, bert_config

    if init_checkpoint:
        found = find_run_checkpoint(init_checkpoint)
        if found is not None:
            return BertConfig.from_dict(found["config"])
        google = read_google_config(init_checkpoint)
        if google:
            return BertConfig.from_dict(google)
        weights = read_weights(init_checkpoint)
        words = weights.get("bert/embeddings/word_embeddings")
        if words is not None:
            hidden = int(words.shape[1])
            named = [c for c in CONFIGS.values() if c["hidden_size"] == hidden]
            layers = {k.split("/")[2] for k in weights if k.startswith("bert/encoder/layer_")}
            return BertConfig(
                vocab_size=int(words.shape[0]),
                hidden_size=hidden,
                num_layers=len(layers),
                num_heads=named[0]["num_heads"] if named else CONFIGS[recipe["model"]]["num_heads"],
                intermediate_size=int(weights["bert/encoder/layer_0/intermediate/dense/kernel"].shape[1]),
                max_position_embeddings=int(weights["bert/embeddings/position_embeddings"].shape[0]),
            )
    return bert_config(recipe["model"], vocab_size=vocab_size)


def build_model(recipe: dict, vocab_size: int, init_checkpoint: str | None):
    import keras

    from bert_tf.checkpoint import load_weights
    from bert_tf.model import build_question_answering

    config = model_config(recipe, vocab_size, init_checkpoint)
    if config.vocab_size != vocab_size:
        raise UserError(
            f"the vocabulary has {vocab_size} tokens, the checkpoint's model {config.vocab_size}: "
            "pass the vocab.txt it was trained with"
        )
    keras.utils.set_random_seed(run_config(recipe).seed)
    model = build_question_answering(config)
    if init_checkpoint:
        load_weights(model, init_checkpoint)
    return model


def fine_tune(runtime, model, examples, tokenizer, recipe: dict, args, log) -> tuple[int, dict | None, int]:
    """Train for run.epochs (or run.steps); with --do-predict, score the dev set every run.eval_every
    epochs and stop once F1 reaches run.target. Returns (steps trained, last scores, the step they scored)."""
    from zoo.data.squad import make_features

    from bert_tf.engine import TrainWindow, evaluate_squad, train_one_epoch
    from bert_tf.step import squad_step

    run = run_config(recipe)
    window = dict(max_seq=recipe["max_seq"], doc_stride=recipe["doc_stride"], max_query=recipe["max_query"])
    features = make_features(examples, tokenizer, **window)
    global_batch = run.batch_per_gpu * runtime.num_replicas
    per_epoch = len(features) // global_batch
    if per_epoch == 0:
        raise UserError(f"{len(features)} training windows are fewer than one global batch of {global_batch}")
    total = run.steps if run.steps is not None else run.epochs * per_epoch
    print(
        f"{len(examples)} training questions -> {len(features)} windows of {recipe['max_seq']}",
        file=sys.stderr,
    )
    step = squad_step(runtime, model, recipe, features, total)
    train_window, scores, scored_step, epoch = TrainWindow(), None, None, 0
    while step.step_count < total:
        todo = min(per_epoch, total - step.step_count)
        train_one_epoch(step, todo, log=log, window=train_window, end=total, global_batch=global_batch)
        epoch += todo == per_epoch
        if args.do_predict and todo == per_epoch and run.eval_every and run.eval_every.due(epoch, 0):
            scores = evaluate_squad(model, recipe, tokenizer, args.predict_file, Path(args.results_dir))
            scored_step = step.step_count
            log.log(scored_step, {**scores, "epoch": epoch}, phase="eval")
            if run.target.reached(scores["f1"]):
                break
    return step.step_count, scores, scored_step


def save_fine_tuned(model, recipe: dict, step: int, results: Path, vocab) -> None:
    """checkpoint/ (zoo.tf.save_training_checkpoint: the weights, what evaluate.sh and export read),
    squad_model.npz (Google's names) and run.json."""
    from zoo.checkpoint_folder import CHECKPOINT_NAME
    from zoo.io import atomic_write
    from zoo.tf import save_training_checkpoint

    from bert_tf.checkpoint import CHECKPOINT_OWNER, export_google_npz, named_weights

    results.mkdir(parents=True, exist_ok=True)
    config = model.config.__dict__
    save_training_checkpoint(
        results / CHECKPOINT_NAME, {"weights": named_weights(model)}, name=CHECKPOINT_OWNER, step=step, epoch=0,
        recipe=recipe, task="squad", config=config, vocab=str(Path(vocab).resolve()),
    )  # fmt: skip
    with atomic_write(results / "run.json") as tmp:
        Path(tmp).write_text(json.dumps({"task": "squad", "model": recipe["model"], "config": config, "recipe": recipe}, indent=1))  # fmt: skip
    export_google_npz(model, results / "squad_model.npz")


@entry_point
def main(argv=None) -> dict | None:
    """Fine-tune and/or predict; returns the dev scores (None without --do-predict)."""
    args = parse_args(argv)
    from bert_tf.checkpoint import find_run_checkpoint

    # a fine-tuned checkpoint alone: prediction takes its recipe and vocabulary unless flags say otherwise
    recipe = squad_recipe(args, FLAG_KEYS, saved=fine_tuned_state(args, find_run_checkpoint))
    run = run_config(recipe, args.recipe)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from zoo.data.squad import read_squad
    from zoo.data.wordpiece import load_tokenizer
    from zoo.tf import make_runtime

    from bert_tf.checkpoint import check_start_weights

    # both files, the vocabulary and the start weights' kind are checked before anything is trained or
    # written, and before TensorFlow is imported
    train_examples = read_squad(args.train_file)[0] if args.do_train else None
    if args.do_predict:
        read_squad(args.predict_file)
    tokenizer = load_tokenizer(args.vocab)
    if args.init_checkpoint:
        check_start_weights(args.init_checkpoint)
    runtime = make_runtime(args.distribution)

    import keras
    from zoo.log import MetricsLogger

    from bert_tf.engine import evaluate_squad

    keras.mixed_precision.set_global_policy(PRECISIONS[run.precision])
    results = Path(args.results_dir)
    with runtime.strategy.scope():
        model = build_model(recipe, tokenizer.get_vocab_size(), args.init_checkpoint)
    log = MetricsLogger(str(results / "metrics.jsonl"), desc="squad")
    step, scores, scored_step = 0, None, None
    if args.do_train:
        step, scores, scored_step = fine_tune(runtime, model, train_examples, tokenizer, recipe, args, log)
        save_fine_tuned(model, recipe, step, results, args.vocab)
    if args.do_predict:
        if scored_step != step:  # the weights changed since the last score
            scores = evaluate_squad(model, recipe, tokenizer, args.predict_file, results)
            log.log(step, scores, phase="eval")
        print(json.dumps(scores))
        if run.target.value is not None:
            verdict = "reached" if run.target.reached(scores["f1"]) else "not reached"
            print(f"target F1 {run.target.value:g}%: {verdict} (F1 {scores['f1']:.2f}%)")
    log.close()
    return scores


if __name__ == "__main__":
    main()
