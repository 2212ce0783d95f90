"""Phase-1 pretraining throughput (sequences/s): ours against keras_hub's BertMaskedLM, same sizes, same run.

    python -m bert_tf.benchmark --recipe configs/pretrain_phase1_8gpu.yaml --amp bf16 --output bench.json

"ours" is the recipe's training step (``bert_tf.step.build_pretraining_train_step``: our Keras BERT, LAMB, the
recipe's precision and XLA setting) on random full-length 128-token samples. The reference is
``keras_hub.models.BertMaskedLM`` (the Keras-native alternative) of the same size, trained by a plain
GradientTape step with the same LAMB, precision and XLA setting. Both are timed by ``zoo.bench.measure``
on whatever device TensorFlow sees (one replica). keras_hub is optional: without it only ours is timed.
"""

from __future__ import annotations

import argparse
import os
import sys

from zoo.cli import add_run_args, entry_point, recipe_from_args
from zoo.cli import parse_args as parse_shared_args
from zoo.recipe import run_config

from bert_tf.step import CONFIG_DIR

# recipe keys of this benchmark's own flags (zoo.cli.RUN_FLAGS maps --batch-size to run.batch_per_gpu)
FLAG_KEYS = {"model": "model", "max_seq": "max_seq", "xla": "xla", "vocab_size": "vocab_size"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmark.sh", description=__doc__.splitlines()[0])
    add_run_args(
        p,
        default_recipe=CONFIG_DIR / "pretrain_phase1_8gpu.yaml",
        data_dir=False,
        results_dir=False,
        resume=False,
    )
    p.add_argument("--output", help="write the JSON report (zoo.bench schema) here")
    p.add_argument("--model", help="bert-large, bert-base or bert-tiny (default: the recipe's)")
    p.add_argument(
        "--batch-size", type=int, help="sequences per step (default: the recipe's run.batch_per_gpu)"
    )
    p.add_argument("--max-seq", type=int, help="default: the recipe's (128 in phase 1)")
    p.add_argument("--xla", action="store_const", const=True, help="XLA on (default: the recipe's)")
    p.add_argument("--vocab-size", type=int, help="embedding rows (recipe key vocab_size)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps (XLA compiles in the first)")
    p.add_argument("--iters", type=int, default=10, help="timed steps per window")
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--no-keras-hub", action="store_true", help="time ours only")
    return parse_shared_args(p, argv, renamed={"--out": "--output"})


def keras_hub_step(recipe: dict, vocab_size: int, xla: bool):
    """(step(batch) -> loss, parameter count) of keras_hub's BertMaskedLM at the recipe's size, or None
    when keras_hub is not installed."""
    try:
        import keras_hub
    except ImportError:
        return None
    import keras
    import tensorflow as tf

    from bert_tf.lamb import build_optimizer
    from bert_tf.model import bert_config

    config = bert_config(recipe["model"], vocab_size=vocab_size)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=vocab_size, num_layers=config.num_layers, num_heads=config.num_heads,
        hidden_dim=config.hidden_size, intermediate_dim=config.intermediate_size,
        max_sequence_length=config.max_position_embeddings,
    )  # fmt: skip
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    run = run_config(recipe)
    optimizer = build_optimizer(recipe, run.precision, run.steps)
    scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def gradients(batch):
        inputs = {
            "token_ids": batch["input_ids"],
            "segment_ids": batch["token_type_ids"],
            "padding_mask": batch["seq_ids"],
            "mask_positions": batch["mlm_positions"],
        }
        with tf.GradientTape() as tape:
            logits = tf.cast(model(inputs, training=True), tf.float32)
            loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(batch["mlm_labels"], logits, from_logits=True)
            )
            objective = optimizer.scale_loss(loss) if scaled else loss
        return tape.gradient(objective, model.trainable_variables), loss

    gradients = tf.function(gradients, jit_compile=xla)

    @tf.function
    def step(batch):
        grads, loss = gradients(batch)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    return step, model.count_params()


@entry_point
def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    recipe = recipe_from_args(args, FLAG_KEYS)
    run = run_config(recipe)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from zoo.tf import make_runtime

    runtime = make_runtime("default")

    import keras
    import tensorflow as tf
    from zoo.bench import measure, write_report

    from bert_tf.data import SyntheticMicroBatches, stacked
    from bert_tf.lamb import build_optimizer
    from bert_tf.model import bert_config, build_pretrainer, parameter_count
    from bert_tf.step import PRECISIONS, build_pretraining_train_step

    keras.mixed_precision.set_global_policy(PRECISIONS[run.precision])
    keras.utils.set_random_seed(0)
    batch, seq, xla = run.batch_per_gpu, int(recipe["max_seq"]), bool(recipe["xla"])
    source = SyntheticMicroBatches(batch, seq, int(recipe["max_predictions"]), recipe["vocab_size"])
    ours_batch = {k: tf.constant(v) for k, v in stacked(source, 0, 1).items()}
    plain_batch = {k: tf.constant(v) for k, v in source(0).items()}
    device = (tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU"))[0].name
    gpus = tf.config.experimental.list_physical_devices("GPU")
    device_name = (
        tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU") if gpus else "CPU"
    )
    print(
        f"{recipe['model']} seq {seq} batch {batch} {run.precision}{' XLA' if xla else ''} on {device_name}",
        file=sys.stderr,
    )

    def timed(step, batch_values, name, params):
        last = {}

        def call():
            last["loss"] = step(batch_values)

        summary = measure(
            call, items_per_call=batch, warmup=args.warmup, iters=args.iters, windows=args.windows,
            sync=lambda: last["loss"].numpy(),  # the step ran once its result is on the host
        )  # fmt: skip
        row = {"mode": "train", "impl": name, "model": recipe["model"], "batch": batch, "seq": seq}
        row.update(
            amp=run.precision, xla=xla, parameters=params, sequences_per_s=summary["throughput"], **summary
        )
        print(f"{name}: {summary['throughput']:.1f} seq/s ({params / 1e6:.1f}M parameters)", file=sys.stderr)
        return row

    config = bert_config(recipe["model"], vocab_size=recipe["vocab_size"])
    model = build_pretrainer(config, nsp=False)
    optimizer = build_optimizer(recipe, run.precision, run.steps)
    # throughput per micro-step: accumulation only changes how often LAMB runs
    ours = build_pretraining_train_step(runtime, model, optimizer, accumulation=1, nsp=False, xla=xla)
    results = [timed(ours, ours_batch, "ours", parameter_count(model))]
    reference = None if args.no_keras_hub else keras_hub_step(recipe, recipe["vocab_size"], xla)
    if reference is None and not args.no_keras_hub:
        print("keras_hub is not installed: only ours was timed", file=sys.stderr)
    if reference is not None:
        results.append(timed(reference[0], plain_batch, "keras_hub BertMaskedLM", reference[1]))
        ratio = results[0]["sequences_per_s"] / results[1]["sequences_per_s"]
        results[0]["ratio_to_keras_hub"] = ratio
        print(f"ours / keras_hub: {ratio:.2f}x", file=sys.stderr)
    if args.output:
        versions = {"tensorflow": tf.__version__, "keras": keras.__version__}
        if reference is not None:
            import keras_hub

            versions["keras_hub"] = keras_hub.__version__
        write_report(
            args.output, results, device=device_name, tf_device=device, recipe=str(args.recipe), **versions
        )
    return results


if __name__ == "__main__":
    main()
