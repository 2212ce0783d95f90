"""Export a checkpoint for serving: a SavedModel, an ONNX model (tf2onnx), and a Triton model repository.

    python -m resnet50_tf.export --checkpoint results/run1 --model-repository model_repository

The repository gets three models over the same weights, each with a config.pbtxt checked against
Triton's ModelConfig:
  resnet50_tf_savedmodel  platform tensorflow_savedmodel (Triton's TensorFlow backend)
  resnet50_tf_onnx        backend onnxruntime
  resnet50_tf_python      backend python: the zoo's shared ONNX model file (zoo.triton.repository.ONNX_PYTHON_MODEL)
                          over the same ONNX model (for servers with only the python backend, such
                          as the nvidia-pytriton wheel's)
Input `images`: float32 NCHW [batch, 3, size, size], normalised (resnet50_tf.data.normalize), the
layout every ResNet-50 of the zoo serves (the Keras model runs NHWC: the serving function
transposes); output `logits`: float32 [batch, classes], with the class names as Triton labels
(labels.txt).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from zoo.cli import entry_point
from zoo.errors import UserError, one_line

INPUT, OUTPUT = "images", "logits"
ONNX_OPSET = 17


def _serving_fn(model, image_size: int):
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, 3, image_size, image_size], tf.float32, name=INPUT)])
    def serve(images):
        nhwc = tf.transpose(images, [0, 2, 3, 1])
        return {OUTPUT: tf.cast(model(nhwc, training=False), tf.float32)}

    return serve


def export_savedmodel(model, image_size: int, out_dir) -> Path:
    """A SavedModel whose `serving_default` signature maps `images` to `logits`; written then renamed."""
    import tensorflow as tf

    out_dir = Path(out_dir)
    tmp = Path(tempfile.mkdtemp(prefix=".savedmodel-", dir=out_dir.parent))
    try:
        module = tf.Module()
        module.model = model
        module.serve = _serving_fn(model, image_size)
        tf.saved_model.save(module, str(tmp), signatures={"serving_default": module.serve})
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def export_onnx(model, image_size: int, path) -> Path:
    """ONNX (dynamic batch) through tf2onnx from the same serving function; input `images`, output `logits`."""
    try:
        import tf2onnx
    except ImportError as e:
        raise UserError(
            f"ONNX export needs tf2onnx (pip install -r requirements.txt): {one_line(e)}"
        ) from None
    import onnx

    path = Path(path)
    serve = _serving_fn(model, image_size)
    proto, _ = tf2onnx.convert.from_function(serve, input_signature=serve.input_signature, opset=ONNX_OPSET)
    graph_output = proto.graph.output[0].name
    if graph_output != OUTPUT:  # tf2onnx names outputs after TF tensors ("Identity:0"): rename
        for node in proto.graph.node:
            node.output[:] = [OUTPUT if o == graph_output else o for o in node.output]
        proto.graph.output[0].name = OUTPUT
    graph_input = proto.graph.input[0].name
    if graph_input != INPUT:
        for node in proto.graph.node:
            node.input[:] = [INPUT if i == graph_input else i for i in node.input]
        proto.graph.input[0].name = INPUT
    onnx.checker.check_model(proto)
    tmp = path.with_name(path.name + ".tmp")
    onnx.save(proto, str(tmp))
    os.replace(tmp, path)
    return path


def write_repository(
    repo,
    savedmodel: Path | None,
    onnx_path: Path,
    classes: list[str],
    image_size: int,
    max_batch_size: int = 64,
    instance_kind: str = "KIND_GPU",
    force: bool = False,
) -> list[Path]:
    """The three Triton models (see the module docstring); returns their directories. A model ``repo``
    already holds is a UserError unless ``force`` (then its folder, SavedModel and all, is replaced whole)."""
    from zoo.triton.labels import labelled
    from zoo.triton.repository import (
        ONNX_PYTHON_MODEL,
        TensorSpec,
        model_config,
        refuse_existing_models,
        write_model,
    )

    refuse_existing_models(repo, triton_models(savedmodel is not None), force=force)

    inputs = [TensorSpec(INPUT, "FP32", [3, image_size, image_size])]
    outputs = [TensorSpec(OUTPUT, "FP32", [len(classes)])]
    batching = {"preferred_batch_size": [b for b in (8, 16, 32) if b <= max_batch_size] or [max_batch_size]}
    batching["max_queue_delay_microseconds"] = 100
    common = dict(max_batch_size=max_batch_size, inputs=inputs, outputs=outputs, dynamic_batching=batching)
    models = []
    if savedmodel is not None:
        models.append(
            (
                model_config(
                    "resnet50_tf_savedmodel",
                    platform="tensorflow_savedmodel",
                    instance_kind=instance_kind,
                    **common,
                ),
                {"model.savedmodel": savedmodel},
            )
        )
    models.append(
        (
            model_config("resnet50_tf_onnx", backend="onnxruntime", instance_kind=instance_kind, **common),
            {"model.onnx": onnx_path},
        )
    )
    models.append(
        (
            model_config(
                "resnet50_tf_python",
                backend="python",
                instance_kind="KIND_CPU",  # the python model runs onnxruntime on the CPU
                **common,
            ),
            {"model.py": ONNX_PYTHON_MODEL, "model.onnx": onnx_path},
        )
    )
    written = []
    for config, files in models:
        config, labels = labelled(config, classes)  # labels.txt, the output's label_filename
        written.append(write_model(repo, config, files, force=force, beside_config=labels))
    return written


def triton_models(savedmodel: bool = True) -> list[str]:
    """The names of the models write_repository writes."""
    return [*(["resnet50_tf_savedmodel"] if savedmodel else []), "resnet50_tf_onnx", "resnet50_tf_python"]


@entry_point
def main(argv=None) -> list[Path]:
    p = argparse.ArgumentParser(
        prog="export_triton.sh",
        description="Export a checkpoint as SavedModel + ONNX into a Triton model repository.",
    )
    p.add_argument(
        "--checkpoint",
        required=True,
        help="training run directory (or its checkpoint/ folder), Keras-Applications .h5 or registry name",
    )
    p.add_argument("--model-repository", default="model_repository", help="output Triton model repository")
    p.add_argument("--image-size", type=int, help="default: the run's")
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--instance-kind", default="KIND_GPU", choices=["KIND_GPU", "KIND_CPU"])
    p.add_argument("--no-savedmodel", action="store_true", help="ONNX and python models only")
    p.add_argument("--force", action="store_true", help="replace the models if the repository holds them")
    args = p.parse_args(argv)
    if args.max_batch_size < 1:
        raise UserError("--max-batch-size must be >= 1")
    from zoo.triton.repository import refuse_existing_models

    refuse_existing_models(args.model_repository, triton_models(not args.no_savedmodel), force=args.force)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from resnet50_tf.checkpoint import load_keras_applications_model, load_model_from_run, resolve_checkpoint

    checkpoint, preprocessing = resolve_checkpoint(args.checkpoint)
    if preprocessing:  # clients must prepare images as the checkpoint was published
        print(f"preprocessing: {preprocessing.describe()}")
        if args.image_size and args.image_size != preprocessing.crop:
            raise UserError(
                f"--image-size {args.image_size} differs from the checkpoint's crop {preprocessing.crop}"
            )
    image_size = args.image_size or (preprocessing.crop if preprocessing else None)
    if checkpoint.endswith(".h5"):
        model, info = load_keras_applications_model(checkpoint, image_size or 224)
    else:
        model, info = load_model_from_run(checkpoint, image_size=image_size)
    image_size = int(model.input.shape[1])
    classes = info.get("classes") or [str(i) for i in range(info["num_classes"])]
    repo = Path(args.model_repository)
    repo.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=repo, prefix=f".zoo-export-{os.getpid()}-") as work:
        work = Path(work)
        savedmodel = (
            None if args.no_savedmodel else export_savedmodel(model, image_size, work / "model.savedmodel")
        )
        onnx_path = export_onnx(model, image_size, work / "model.onnx")
        written = write_repository(
            repo,
            savedmodel,
            onnx_path,
            classes,
            image_size,
            args.max_batch_size,
            args.instance_kind,
            args.force,
        )
    for model_dir in written:
        print(f"wrote {model_dir}")
    return written


if __name__ == "__main__":
    main()
