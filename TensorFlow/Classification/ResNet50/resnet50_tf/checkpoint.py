"""Load weights into the model: our training checkpoints (a run directory or a checkpoint prefix),
Keras-Applications ResNet-50 .h5 files (see keras_applications.py), and registry names
(checkpoints.yaml, pulled through zoo.checkpoints; ``scripts/download_checkpoint.sh {list,pull NAME}``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from zoo.errors import one_line

REGISTRY = Path(__file__).resolve().parents[1] / "checkpoints.yaml"


def resolve_checkpoint(checkpoint: str, cache_dir=None):
    """(path, preprocessing or None) for a ``--checkpoint`` argument: an existing path as it is, or a
    registry name pulled into the cache with its entry's preprocessing."""
    if Path(checkpoint).exists() or Path(checkpoint + ".index").exists() or os.sep in checkpoint:
        return checkpoint, None
    from zoo.checkpoints import CheckpointError, fetch, load_registry

    try:
        entry = load_registry(REGISTRY).get(checkpoint)
        path = fetch(entry, cache_dir=cache_dir)
    except CheckpointError as e:
        raise SystemExit(f"error: {e}") from None
    return str(path), entry.preprocessing


def load_keras_applications_model(path, image_size: int = 224):
    """(model, info) for a Keras-Applications .h5 with its classifier: our v1 model with caffe input."""
    from resnet50_tf.keras_applications import read_h5_weights
    from resnet50_tf.model import resnet50

    predictions = read_h5_weights(path).get("predictions")
    if not predictions:
        raise SystemExit(f"{path} has no classifier (a notop file): it cannot be evaluated or exported")
    num_classes = int(predictions[-1].shape[0])
    model = resnet50(num_classes, image_size=image_size, variant="v1", input_mode="caffe")
    restore_weights(model, path)
    return model, {"num_classes": num_classes, "image_size": image_size}


def find_checkpoint(path) -> tuple[str, Path | None]:
    """(checkpoint prefix, run directory or None) for a run dir, its checkpoints/ dir, or a prefix."""
    import tensorflow as tf

    path = Path(path)
    if not path.exists() and not Path(str(path) + ".index").is_file():
        raise SystemExit(f"error: checkpoint {path} does not exist")
    for run_dir in (path, path.parent):
        if (run_dir / "checkpoints").is_dir() and path in (run_dir, run_dir / "checkpoints"):
            latest = tf.train.latest_checkpoint(str(run_dir / "checkpoints"))
            if not latest:
                raise SystemExit(f"{run_dir / 'checkpoints'} holds no checkpoint")
            return latest, run_dir
    if Path(str(path) + ".index").is_file():
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
        return str(path), run_dir
    raise SystemExit(
        f"error: {path} is not a TensorFlow ResNet-50 checkpoint (a run directory, its checkpoints/ or a "
        "checkpoint prefix)"
    )


def check_checkpoint(path, num_classes: int) -> None:
    """A one-line error, before a run writes anything, when ``path`` is not a ResNet-50 checkpoint with a
    ``num_classes``-way classifier (a Keras .h5 is only checked to be one: its classifier is optional)."""
    import tensorflow as tf

    if str(path).endswith(".h5"):
        from resnet50_tf.keras_applications import read_h5_weights

        read_h5_weights(path)
        return
    prefix, _ = find_checkpoint(path)
    try:
        shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError) as e:
        reason = one_line(e, limit=160)
        raise SystemExit(f"error: {prefix} is not a TensorFlow checkpoint ({reason})") from None
    # the classifier's kernel is the one 2-D variable with 2048 inputs (the pooled features)
    classes = sorted({shape[1] for shape in shapes.values() if len(shape) == 2 and shape[0] == 2048})
    if not classes:
        raise SystemExit(f"error: {prefix} is not a ResNet-50 checkpoint (no classifier over 2048 features)")
    if num_classes not in classes:
        raise SystemExit(f"error: checkpoint {prefix} has {classes[0]} classes, this run {num_classes}")


def read_run_info(run_dir: Path | None) -> dict:
    if run_dir is None or not (run_dir / "run.json").is_file():
        return {}
    return json.loads((run_dir / "run.json").read_text())


def restore_weights(model, path) -> None:
    """Model weights from a training checkpoint or a Keras-Applications .h5; a one-line error on mismatch."""
    import tensorflow as tf

    if str(path).endswith(".h5"):
        from resnet50_tf.keras_applications import load_keras_applications_h5

        load_keras_applications_h5(model, path)
        return
    prefix, _ = find_checkpoint(path)
    want = model.output.shape[-1]
    try:
        status = tf.train.Checkpoint(model=model).restore(prefix)
        status.expect_partial().assert_existing_objects_matched()
    except (ValueError, AssertionError, tf.errors.OpError) as e:
        raise SystemExit(
            f"checkpoint {prefix} does not fit ResNet-50 with {want} classes: {one_line(e)}"
        ) from None


def load_model_from_run(path, num_classes: int | None = None, image_size: int | None = None):
    """(model, run_info) rebuilt from a training run's run.json and restored from its newest checkpoint."""
    from resnet50_tf.model import resnet50

    prefix, run_dir = find_checkpoint(path)
    info = read_run_info(run_dir)
    classes = num_classes or info.get("num_classes")
    if not classes:
        raise SystemExit(f"no run.json beside {prefix}: pass --num-classes")
    model = resnet50(int(classes), image_size=image_size or info.get("image_size", 224))
    restore_weights(model, prefix)
    info.setdefault("num_classes", int(classes))
    return model, info
