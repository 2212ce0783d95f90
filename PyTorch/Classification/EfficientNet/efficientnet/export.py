"""Export EfficientNet to TorchScript and ONNX and write a Triton model repository.

    python -m efficientnet.export --checkpoint results/checkpoint.pt --repository triton_repo

Every file holds ``zoo.classification.inference.inference_model`` (the model evaluate.py scores and
benchmark.py times): BatchNorm folded into the convolutions, weights in ``--amp`` (fp32 by default;
fp16 or bf16 outright, cast at the edges), so the input stays FP32 [3,H,W] normalised images and
the output FP32 logits [classes] whatever the precision inside. The batch dimension is dynamic;
Triton's dynamic batcher forms the batches. Each config.pbtxt records the precision as the
``precision`` parameter; a training checkpoint's class names (its data's class folders) go in each
model's ``labels.txt``, named as the output's Triton ``label_filename``, for the deploy client. Models written:

- ``efficientnet_libtorch``: platform pytorch_libtorch, model.pt (traced TorchScript), tensors named
  ``INPUT__0`` / ``OUTPUT__0`` as that backend expects;
- ``efficientnet_onnx``: platform onnxruntime_onnx, model.onnx, tensors ``images`` / ``logits``;
- ``efficientnet_python``: python backend, the zoo's shared ONNX model file (zoo.triton.repository.ONNX_PYTHON_MODEL)
  over the same model.onnx on the CPU, ``images`` / ``logits`` like the zoo's ResNet-50
  (serves where only the python backend exists, e.g. the tritonserver of the nvidia-pytriton wheel).

onnxruntime has no bf16 convolutions: ``--amp bf16`` exports the libtorch model only.
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile
from typing import TYPE_CHECKING

import zoo.cli
from zoo.cli import entry_point
from zoo.errors import UserError
from zoo.triton.repository import (
    ONNX_PYTHON_MODEL,
    TensorSpec,
    model_config,
    refuse_existing_models,
    write_model,
)

if TYPE_CHECKING:
    import torch

# The libtorch backend names tensors by position; the ONNX models use the names of the zoo's classifiers.
LIBTORCH_NAMES = ("INPUT__0", "OUTPUT__0")
INPUT_NAME, OUTPUT_NAME = "images", "logits"
MODELS = ("libtorch", "onnx", "python")


def load_model(checkpoint=None, pretrained=None, **model_args) -> tuple[torch.nn.Module, int]:
    """The trained network (eval mode, unfolded, FP32) from a checkpoint file or a registry name, and its
    input size; neither: random weights of ``model_args`` (variant, wide_se, width, num_classes)."""
    from efficientnet.checkpoints import build_model_for, resolve_weights
    from efficientnet.model import efficientnet

    weights = resolve_weights(pretrained, checkpoint)
    if weights is None:
        from efficientnet.model import VARIANTS

        variant = model_args.get("variant", "b0")
        fresh = {**model_args, "num_classes": model_args.get("num_classes") or 1000}
        return efficientnet(**fresh).eval(), VARIANTS[variant].image_size
    return build_model_for(weights, trusted=pretrained is None, **model_args)


def export_torchscript(model: torch.nn.Module, path, image_size: int) -> pathlib.Path:
    """``model`` traced with a batch of 2 FP32 images and saved as TorchScript."""
    import torch

    example = torch.randn(2, 3, image_size, image_size)
    with torch.no_grad():
        traced = torch.jit.trace(model, example)
    traced.save(str(path))
    return pathlib.Path(path)


def export_onnx(model: torch.nn.Module, path, image_size: int, opset: int = 17) -> pathlib.Path:
    """``model`` as ONNX (dynamic batch), tensors ``images`` / ``logits``."""
    import torch

    example = torch.randn(2, 3, image_size, image_size)
    with torch.no_grad():
        torch.onnx.export(
            model,
            (example,),
            str(path),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=opset,
            dynamo=False,
        )
    return pathlib.Path(path)


def triton_config(
    name,
    kind,
    *,
    image_size,
    num_classes,
    max_batch_size,
    instance_kind,
    instance_count,
    preprocessing=None,
    amp="fp32",
):
    input_name, output_name = LIBTORCH_NAMES if kind == "libtorch" else (INPUT_NAME, OUTPUT_NAME)
    inputs = [TensorSpec(input_name, "FP32", [3, image_size, image_size])]
    outputs = [TensorSpec(output_name, "FP32", [num_classes])]
    preferred = [b for b in (4, 8, 16, 32, 64, 128) if b <= max_batch_size] or [max_batch_size]
    batching = {"preferred_batch_size": preferred, "max_queue_delay_microseconds": 100}
    platform = {"libtorch": "pytorch_libtorch", "onnx": "onnxruntime_onnx"}.get(kind)
    return model_config(
        name,
        backend="python" if kind == "python" else None,
        platform=platform,
        max_batch_size=max_batch_size,
        inputs=inputs,
        outputs=outputs,
        instance_kind="KIND_CPU" if kind == "python" else instance_kind,
        instance_count=instance_count,
        dynamic_batching=batching,
        parameters={"precision": amp, **(preprocessing_parameters(preprocessing) if preprocessing else {})},
    )


def preprocessing_parameters(preprocessing) -> dict[str, str]:
    """The client-side preprocessing the model expects, as config.pbtxt parameters (strings)."""
    return {
        "preprocessing_resize": str(preprocessing.resize),
        "preprocessing_crop": str(preprocessing.crop),
        "preprocessing_interpolation": preprocessing.interpolation,
        "preprocessing_mean": ",".join(f"{x:g}" for x in preprocessing.mean),
        "preprocessing_std": ",".join(f"{x:g}" for x in preprocessing.std),
    }


def export_repository(
    model: torch.nn.Module,
    repository,
    *,
    image_size: int = 224,
    models=MODELS,
    max_batch_size: int = 64,
    instance_kind: str = "KIND_GPU",
    instance_count: int = 1,
    preprocessing=None,
    amp: str = "fp32",
    force: bool = False,
    classes: list[str] | None = None,
) -> dict[str, pathlib.Path]:
    """Write the chosen models of the trained network ``model`` into ``repository``: each file holds
    ``inference_model(model, amp=amp)``. Returns {model name: its folder}.

    ``preprocessing`` (a zoo.checkpoints.Preprocessing) sets the input size (its crop) and is
    recorded in each config.pbtxt as ``preprocessing_*`` parameters for clients; ``classes`` (the
    checkpoint's class names) go in each model's labels.txt, its output's Triton labels (zoo.triton.labels).
    A model the repository already holds is a UserError unless ``force`` (then its folder is replaced whole).
    """
    from zoo.classification.inference import inference_model
    from zoo.triton.labels import labelled

    if preprocessing is not None:
        image_size = preprocessing.crop
    if amp == "bf16" and ("onnx" in models or "python" in models):
        raise UserError("onnxruntime has no bf16 convolutions: export bf16 with --models libtorch")
    refuse_existing_models(repository, [f"efficientnet_{kind}" for kind in models], force=force)
    num_classes = model.classifier.out_features
    served = inference_model(model, amp=amp)
    repository = pathlib.Path(repository)
    repository.mkdir(parents=True, exist_ok=True)
    written = {}
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = pathlib.Path(tmp) / "model.onnx"
        if "onnx" in models or "python" in models:
            export_onnx(served, onnx_path, image_size)
        for kind in models:
            name = f"efficientnet_{kind}"
            config = triton_config(
                name, kind, image_size=image_size, num_classes=num_classes, max_batch_size=max_batch_size,
                instance_kind=instance_kind, instance_count=instance_count, preprocessing=preprocessing, amp=amp,
            )  # fmt: skip
            config, labels = labelled(config, classes)
            if kind == "libtorch":
                files = {"model.pt": export_torchscript(served, pathlib.Path(tmp) / "model.pt", image_size)}
            elif kind == "onnx":
                files = {"model.onnx": onnx_path}
            else:
                files = {"model.py": ONNX_PYTHON_MODEL, "model.onnx": onnx_path}
            written[name] = write_model(repository, config, files, force=force, beside_config=labels)
            print(f"wrote {name} ({config.platform or config.backend}, {amp}) -> {written[name]}")
    return written


@entry_point
def main(argv=None) -> None:
    from efficientnet.checkpoints import add_model_args, eval_preprocessing

    p = argparse.ArgumentParser(prog="python -m efficientnet.export", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default=None, help="training checkpoint or state_dict file")
    p.add_argument("--pretrained", default=None, help="registry name instead of a file")
    p.add_argument("--repository", default="triton_repo", help="Triton model repository to write")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    add_model_args(p)
    p.add_argument(
        "--image-size",
        type=int,
        default=None,
        help="input size (default: the --pretrained entry's crop, else the model's resolution)",
    )
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--instance-kind", choices=("KIND_GPU", "KIND_CPU"), default="KIND_GPU")
    p.add_argument("--instance-count", type=int, default=1)
    p.add_argument(
        "--amp", choices=zoo.cli.AMP_CHOICES, default="fp32",
        help="precision of the exported weights (BatchNorm folded; FP32 input and output); bf16: libtorch only",
    )  # fmt: skip
    p.add_argument("--print-config", action="store_true", help="print each config.pbtxt")
    p.add_argument("--force", action="store_true", help="replace the models if the repository holds them")
    args = zoo.cli.parse_args(p, argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        raise UserError(f"unknown model kind(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    refuse_existing_models(args.repository, [f"efficientnet_{kind}" for kind in models], force=args.force)

    from zoo.classification.inference import checkpoint_classes  # torch, once the repository passed

    model, image_size = load_model(
        args.checkpoint, args.pretrained, variant=args.variant, wide_se=args.wide_se, width=args.width,
        num_classes=args.num_classes,
    )  # fmt: skip
    preprocessing = eval_preprocessing(args.pretrained, args.image_size or image_size)
    if args.image_size and args.image_size != preprocessing.crop:
        raise UserError(
            f"--image-size {args.image_size} differs from the crop {preprocessing.crop} "
            f"that {args.pretrained} was published with"
        )
    print(f"preprocessing: {preprocessing.describe()}")
    written = export_repository(
        model, args.repository, models=models, max_batch_size=args.max_batch_size,
        instance_kind=args.instance_kind, instance_count=args.instance_count, preprocessing=preprocessing,
        amp=args.amp, force=args.force, classes=checkpoint_classes(args.checkpoint) if args.checkpoint else None,
    )  # fmt: skip
    if args.print_config:
        for folder in written.values():
            print((folder / "config.pbtxt").read_text())


if __name__ == "__main__":
    main()
