"""SQuAD v1.1 fine-tuning and prediction in TensorFlow 2 / Keras, scored with the official EM/F1 (``zoo.data.squad``,
the scorer the PyTorch BERT uses).

    python -m bert_tf.finetune_squad --do-train --do-predict --data-dir data/squad --vocab vocab.txt \\
        --init-checkpoint results/phase2 --target-f1 90.5

``--init-checkpoint``: a pretraining run directory, its ``model.npz``, Google's ``bert_model.ckpt`` (or
its zip), or weights of the PyTorch BERT / Hugging Face as .npz. The run directory gets ``run.json``,
``checkpoints/`` (what ``evaluate.sh --init-checkpoint RUN_DIR`` and ``export_triton.sh`` read),
``squad_model.npz`` (Google's names, ``cls/squad/*`` for the span head), ``predictions.json`` and
``metrics.jsonl``. Launch with ``scripts/train.sh squad`` or ``scripts/evaluate.sh``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from zoo.cli import add_run_args, add_target_arg, entry_point, recipe_from_args
from zoo.cli import parse_args as parse_shared_args
from zoo.data.squad import DEV_FILE, TRAIN_FILE, check_target_f1, complete_squad_args

MODEL_DIR = Path(__file__).resolve().parents[1]
PRECISIONS = {"fp32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}
INPUTS = ("input_ids", "token_type_ids", "attention_mask")
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


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bert_tf.finetune_squad",
        description="SQuAD v1.1 fine-tuning / prediction (TensorFlow).",
    )
    add_run_args(
        p,
        default_recipe=MODEL_DIR / "configs" / "squad_1gpu.yaml",
        resume=False,
        data_help=f"folder with {TRAIN_FILE} and {DEV_FILE} (scripts/download_data.sh squad; $DATA_DIR)",
    )
    add_target_arg(p, "f1", unit="%", example=90.5)
    p.add_argument("--do-train", action="store_true")
    p.add_argument("--do-predict", action="store_true")
    p.add_argument("--train-file", help=f"default: DATA_DIR/{TRAIN_FILE}")
    p.add_argument("--predict-file", help=f"default: DATA_DIR/{DEV_FILE}")
    p.add_argument("--vocab", required=True, help="vocab.txt of the pretrained model")
    p.add_argument(
        "--init-checkpoint", help="pretrained or fine-tuned weights (run dir, Google ckpt/zip, .npz)"
    )
    p.add_argument("--model", help="bert-large, bert-base or bert-tiny (weights files: their size decides)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--max-steps", type=int, help="stop training after this many steps")
    p.add_argument("--batch-size", type=int, help="per replica")
    p.add_argument("--lr", type=float)
    p.add_argument("--max-seq", type=int)
    p.add_argument("--doc-stride", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--distribution", default="auto", help="auto, default or mirrored")
    args = parse_shared_args(p, argv)
    return complete_squad_args(p, args)


def build_recipe(args) -> dict:
    recipe = recipe_from_args(args, FLAG_KEYS)
    check_target_f1(recipe, args.do_predict)
    if recipe.get("amp", "fp32") not in PRECISIONS:
        raise SystemExit(f"error: recipe amp {recipe['amp']!r} is not one of {', '.join(PRECISIONS)}")
    return recipe


def model_config(recipe: dict, vocab_size: int, init_checkpoint: str | None):
    """The architecture: a run's run.json, a Google checkpoint's bert_config.json, the shapes of a
    weights file (heads from the model of that hidden size), else the recipe's model."""
    from bert_tf.checkpoint import find_run_checkpoint, read_google_config, read_run_info, read_weights
    from bert_tf.model import CONFIGS, BertConfig, bert_config

    if init_checkpoint:
        found = find_run_checkpoint(init_checkpoint)
        if found is not None:
            return BertConfig.from_dict(read_run_info(found[1])["config"])
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
        raise SystemExit(
            f"error: the vocabulary has {vocab_size} tokens, the checkpoint's model {config.vocab_size}: "
            "pass the vocab.txt it was trained with"
        )
    keras.utils.set_random_seed(recipe["seed"])
    model = build_question_answering(config)
    if init_checkpoint:
        load_weights(model, init_checkpoint)
    return model


def predict(model, features, batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Start and end logits of every window."""
    import tensorflow as tf

    @tf.function(reduce_retracing=True)
    def forward(batch):
        return model(batch, training=False)

    starts, ends = [], []
    for first in range(0, len(features), batch_size):
        batch = {k: getattr(features, k)[first : first + batch_size].astype(np.int32) for k in INPUTS}
        out = forward(batch)
        starts.append(out["start_logits"].numpy())
        ends.append(out["end_logits"].numpy())
    return np.concatenate(starts), np.concatenate(ends)


def predict_and_score(model, recipe, tokenizer, predict_file, results: Path) -> dict:
    """Answers of ``predict_file`` (written to results/predictions.json), scored: ``{"exact_match", "f1"}`` %."""
    from zoo.data.squad import best_spans, evaluate_predictions, make_features, read_squad
    from zoo.io import atomic_write

    examples, raw = read_squad(predict_file)
    features = make_features(
        examples,
        tokenizer,
        max_seq=recipe["max_seq"],
        doc_stride=recipe["doc_stride"],
        max_query=recipe["max_query"],
    )
    start, end = predict(model, features)
    predictions = best_spans(
        examples, features, start, end, n_best=recipe["n_best"], max_answer_tokens=recipe["max_answer_tokens"]
    )
    results.mkdir(parents=True, exist_ok=True)
    with atomic_write(results / "predictions.json") as tmp:
        Path(tmp).write_text(json.dumps(predictions, indent=1))
    return evaluate_predictions(raw, predictions)


def build_train_step(runtime, model, optimizer, xla: bool):
    """``train_step(distributed batch) -> loss`` (mean of the start and end cross-entropies, summed over replicas)."""
    import keras
    import tensorflow as tf

    variables = model.trainable_variables
    replicas = runtime.num_replicas
    scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def gradients(batch):
        with tf.GradientTape() as tape:
            out = model(batch, training=True)
            loss = 0.5 * tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(
                    batch["start_positions"], out["start_logits"], from_logits=True
                )
                + keras.losses.sparse_categorical_crossentropy(
                    batch["end_positions"], out["end_logits"], from_logits=True
                )
            )
            objective = optimizer.scale_loss(loss / replicas) if scaled else loss / replicas
        return tape.gradient(objective, variables), loss

    if xla:
        gradients = tf.function(gradients, jit_compile=True)

    def replica_step(batch):
        grads, loss = gradients(batch)
        optimizer.apply(grads, variables)
        return loss

    @tf.function
    def train_step(batch):
        losses = runtime.strategy.run(replica_step, args=(batch,))
        return runtime.strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None) / replicas

    return train_step


def build_optimizer(recipe: dict, total_steps: int):
    """AdamW with linear warm-up and linear decay; no decay of biases and LayerNorm parameters."""
    import keras

    from bert_tf.lamb import NO_DECAY_NAMES, WarmupPolyDecay

    opt = recipe["optimizer"]
    optimizer = keras.optimizers.AdamW(
        WarmupPolyDecay(opt["lr"], total_steps, recipe["warmup"], power=1.0),
        weight_decay=opt.get("weight_decay", 0.01),
        epsilon=opt.get("eps", 1e-6),
        global_clipnorm=1.0,
    )
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY_NAMES))
    if recipe["amp"] == "fp16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


@entry_point
def main(argv=None) -> dict | None:
    """Fine-tune and/or predict; returns the dev scores (None without --do-predict)."""
    args = parse_args(argv)
    recipe = build_recipe(args)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from zoo.data.squad import make_features, read_squad
    from zoo.data.wordpiece import load_tokenizer
    from zoo.tf import make_runtime

    # both files are checked before anything is trained or written
    train_examples = read_squad(args.train_file)[0] if args.do_train else None
    if args.do_predict:
        read_squad(args.predict_file)
    runtime = make_runtime(args.distribution)

    import keras
    import tensorflow as tf
    from zoo.log import MetricsLogger

    from bert_tf.checkpoint import export_google_npz, named_weights

    keras.mixed_precision.set_global_policy(PRECISIONS[recipe["amp"]])
    tokenizer = load_tokenizer(args.vocab)
    results = Path(args.results_dir)
    with runtime.strategy.scope():
        model = build_model(recipe, tokenizer.get_vocab_size(), args.init_checkpoint)
    log = MetricsLogger(str(results / "metrics.jsonl"), desc="squad")
    target, units = recipe.get("target_f1"), {"exact_match": "%", "f1": "%"}
    scores, scored_step, step = None, None, 0
    if args.do_train:
        window = dict(
            max_seq=recipe["max_seq"], doc_stride=recipe["doc_stride"], max_query=recipe["max_query"]
        )
        features = make_features(train_examples, tokenizer, **window)
        replicas, batch = runtime.num_replicas, int(recipe["batch_size"])
        per_epoch = len(features) // (batch * replicas)
        if per_epoch == 0:
            raise SystemExit(
                f"error: {len(features)} training windows are fewer than one global batch of {batch * replicas}"
            )
        total = max(1, int(recipe["epochs"] * per_epoch))
        total = min(total, args.max_steps) if args.max_steps else total
        print(
            f"{len(train_examples)} training questions -> {len(features)} windows of {recipe['max_seq']}",
            file=sys.stderr,
        )
        with runtime.strategy.scope():
            optimizer = build_optimizer(recipe, total)
            optimizer.build(model.trainable_variables)
        train_step = build_train_step(runtime, model, optimizer, bool(recipe.get("xla", False)))
        arrays = {
            k: getattr(features, k).astype(np.int32) for k in (*INPUTS, "start_positions", "end_positions")
        }
        started = time.perf_counter()
        for step in range(1, total + 1):
            epoch, in_epoch = divmod(step - 1, per_epoch)
            order = np.random.default_rng([recipe["seed"], epoch]).permutation(len(features))

            def replica_batch(ctx, order=order, in_epoch=in_epoch):
                first = (in_epoch * replicas + ctx.replica_id_in_sync_group) * batch
                rows = order[first : first + batch]
                return {k: tf.constant(v[rows]) for k, v in arrays.items()}

            loss = float(
                train_step(runtime.strategy.experimental_distribute_values_from_function(replica_batch))
            )
            log.progress(step, batch * replicas, metrics={"loss": loss})
            if step % recipe["log_every"] == 0 or step == total:
                rate = step * batch * replicas / (time.perf_counter() - started)
                log.log(step, {"loss": loss, "lr": float(optimizer.learning_rate), "sequences_per_s": rate})
            if target is not None and in_epoch == per_epoch - 1:  # score each whole epoch; stop at the target
                scoring_began = time.perf_counter()
                scores, scored_step = (
                    predict_and_score(model, recipe, tokenizer, args.predict_file, results),
                    step,
                )
                log.log(step, {**scores, "epoch": epoch + 1}, units=units, phase="eval")
                started += time.perf_counter() - scoring_began
                if scores["f1"] >= target:
                    break
        results.mkdir(parents=True, exist_ok=True)
        checkpoint = tf.train.Checkpoint(weights=named_weights(model))
        tf.train.CheckpointManager(checkpoint, str(results / "checkpoints"), 1).save(step)
        info = {"task": "squad", "model": recipe["model"], "config": model.config.__dict__, "recipe": recipe}
        (results / "run.json").write_text(json.dumps(info, indent=1))
        export_google_npz(model, results / "squad_model.npz")
    if args.do_predict:
        if scored_step is None or scored_step != step:  # the weights changed since the last score
            scores = predict_and_score(model, recipe, tokenizer, args.predict_file, results)
            log.log(step, scores, units=units, phase="eval")
        print(json.dumps(scores))
        if target is not None:
            verdict = "reached" if scores["f1"] >= target else "not reached"
            print(f"target F1 {target}%: {verdict} (F1 {scores['f1']:.2f}%)")
    log.close()
    return scores


if __name__ == "__main__":
    main()
