"""Load weights into the model: our training checkpoints (a run directory or a checkpoint prefix) and
Keras-Applications ResNet-50 .h5 files (see keras_applications.py)."""

from __future__ import annotations

import json
from pathlib import Path


def find_checkpoint(path) -> tuple[str, Path | None]:
    """(checkpoint prefix, run directory or None) for a run dir, its checkpoints/ dir, or a prefix."""
    import tensorflow as tf

    path = Path(path)
    for run_dir in (path, path.parent):
        if (run_dir / "checkpoints").is_dir() and path in (run_dir, run_dir / "checkpoints"):
            latest = tf.train.latest_checkpoint(str(run_dir / "checkpoints"))
            if not latest:
                raise SystemExit(f"{run_dir / 'checkpoints'} holds no checkpoint")
            return latest, run_dir
    if Path(str(path) + ".index").is_file():
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
        return str(path), run_dir
    raise SystemExit(f"{path} is not a run directory, checkpoint directory or checkpoint prefix")


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
            f"checkpoint {prefix} does not fit ResNet-50 with {want} classes: {str(e).splitlines()[0][:300]}"
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
