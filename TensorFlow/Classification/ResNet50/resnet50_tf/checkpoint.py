"""Load weights into the model: our training checkpoints (a run directory or its checkpoint/ folder, read by
zoo.tf.load_training_checkpoint), Keras-Applications ResNet-50 .h5 files (see keras_applications.py), and
registry names (checkpoints.yaml, pulled through zoo.checkpoints; ``scripts/download_checkpoint.sh
{list,pull NAME}``)."""

from __future__ import annotations

import os
from pathlib import Path

from zoo.errors import UserError

REGISTRY = Path(__file__).resolve().parents[1] / "checkpoints.yaml"


def resolve_checkpoint(checkpoint: str, cache_dir=None):
    """(path, preprocessing or None) for a ``--checkpoint`` argument: an existing path as it is, or a
    registry name pulled into the cache with its entry's preprocessing."""
    if Path(checkpoint).exists() or os.sep in checkpoint:
        return checkpoint, None
    from zoo.checkpoints import fetch, load_registry

    entry = load_registry(REGISTRY).get(checkpoint)  # an unknown name is a one-line CheckpointError
    return str(fetch(entry, cache_dir=cache_dir)), entry.preprocessing


def load_keras_applications_model(path, image_size: int = 224):
    """(model, info) for a Keras-Applications .h5 with its classifier: our v1 model with caffe input."""
    from resnet50_tf.keras_applications import read_h5_weights

    predictions = read_h5_weights(path).get("predictions")
    if not predictions:
        raise UserError(f"{path} has no classifier (a notop file): it cannot be evaluated or exported")
    from resnet50_tf.model import resnet50

    num_classes = int(predictions[-1].shape[0])
    model = resnet50(num_classes, image_size=image_size, variant="v1", input_mode="caffe")
    restore_weights(model, path)
    return model, {"num_classes": num_classes, "image_size": image_size}


# state.json's name in our training checkpoints (zoo.tf.save_training_checkpoint), and how errors call them
CHECKPOINT_KIND = "resnet50_tf"
WHAT = "a TensorFlow ResNet-50 checkpoint"


def read_training_state(path, flag: str = "--checkpoint") -> dict:
    """The state of our training checkpoint at ``path`` (a run directory, its checkpoint/ folder or one
    step-N folder): step, epoch, recipe, num_classes, classes, image_size; a one-line error otherwise,
    also when its variables cannot be read or a data file was cut short (TensorFlow reads the index)."""
    from zoo.tf import load_training_checkpoint

    return load_training_checkpoint(path, name=CHECKPOINT_KIND, what=WHAT, flag=flag)


def read_state(path, flag: str = "--checkpoint") -> dict:
    """:func:`read_training_state` without TensorFlow: only the state.json, and only its checks (another
    file, another network's checkpoint), so that an entry point refuses those before importing it (a
    Keras .h5 is for :func:`check_checkpoint`)."""
    from zoo.checkpoint_folder import read_state as read_folder_state

    return read_folder_state(path, name=CHECKPOINT_KIND, what=WHAT, flag=flag)


def check_checkpoint(path, num_classes: int, flag: str = "--checkpoint") -> None:
    """A one-line error, before a run writes anything, when ``path`` is not a ResNet-50 checkpoint with a
    ``num_classes``-way classifier (a Keras .h5 is only checked to be one: its classifier is optional).
    :func:`read_state` refuses another file or network before TensorFlow is imported."""
    if str(path).endswith(".h5"):
        from resnet50_tf.keras_applications import read_h5_weights

        read_h5_weights(path)
        return
    found = read_training_state(path, flag)["num_classes"]
    if found != num_classes:
        raise UserError(f"checkpoint {path} has {found} classes, this run {num_classes}")


def restore_weights(model, path, flag: str = "--checkpoint") -> None:
    """Model weights from our training checkpoint or a Keras-Applications .h5; a one-line error on mismatch."""
    if str(path).endswith(".h5"):
        from resnet50_tf.keras_applications import load_keras_applications_h5

        load_keras_applications_h5(model, path)
        return
    from zoo.tf import load_training_checkpoint

    load_training_checkpoint(path, {"model": model}, name=CHECKPOINT_KIND, what=WHAT, flag=flag, partial=True)


def load_model_from_run(path, num_classes: int | None = None, image_size: int | None = None):
    """(model, info) rebuilt from our training checkpoint's state (classes, image size) and restored."""
    info = read_state(path)  # another file or network refused before TensorFlow is imported
    from resnet50_tf.model import resnet50

    classes = num_classes or info["num_classes"]
    model = resnet50(int(classes), image_size=image_size or info["image_size"])
    restore_weights(model, path)
    return model, {**info, "num_classes": int(classes)}
