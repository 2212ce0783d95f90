"""Pretrained weights: registry entries (checkpoints.yaml) pulled through zoo.checkpoints, loading any layout.

Understood layouts, all mapped onto this package's (= timm's) state_dict keys:

- timm: a plain state_dict ``conv_stem.weight``, ``blocks.1.0.conv_pw.weight``, ..., ``classifier.bias``,
  as a torch.save file or a ``.safetensors`` file (the Hugging Face hub's ``model.safetensors``);
- DDP / torch.compile wrappers: keys prefixed ``module.`` or ``_orig_mod.``;
- this package's training checkpoints: a dict whose ``model`` entry is the state_dict.

``scripts/download_checkpoint.sh {list,pull NAME}`` lists and pulls the registry;
``python -m efficientnet.checkpoints check PATH --variant b0`` tells whether a file loads into ours.
"""

from __future__ import annotations

import argparse
import pathlib
from typing import TYPE_CHECKING

from zoo.checkpoints import CheckpointEntry, CheckpointError, Preprocessing, fetch, load_registry
from zoo.cli import entry_point
from zoo.errors import one_line

if TYPE_CHECKING:
    import torch

REGISTRY_PATH = pathlib.Path(__file__).resolve().parents[1] / "checkpoints.yaml"
_WRAPPER_PREFIXES = ("module.", "_orig_mod.", "model.")


def registry_entry(name: str, registry_path=None) -> CheckpointEntry:
    """The entry ``name`` of the model's checkpoints.yaml (or ``registry_path``)."""
    return load_registry(registry_path or REGISTRY_PATH).get(name)


def pull(name: str, *, registry_path=None, cache_dir=None, progress=True) -> pathlib.Path:
    """Download (or find in the cache) the registry entry ``name``; returns the verified file."""
    return fetch(registry_entry(name, registry_path), cache_dir=cache_dir, progress=progress)


def default_preprocessing(image_size: int) -> Preprocessing:
    """Validation preprocessing of our recipes (DeepLearningExamples'): short side to ``image_size + 32``,
    centre crop ``image_size``, bicubic, ImageNet mean/std (B0: 256 -> 224; B4: 412 -> 380). Below 224
    the margin shrinks with the size (at most a seventh of it) so that a small image keeps 7/8 of its side."""
    from zoo.imagenet_loaders import IMAGENET_MEAN, IMAGENET_STD

    resize = image_size + min(32, image_size // 7)
    return Preprocessing(resize, image_size, "bicubic", IMAGENET_MEAN, IMAGENET_STD)


def eval_preprocessing(pretrained: str | None, image_size: int, registry_path=None) -> Preprocessing:
    """What evaluation and export feed the model: the registry entry's preprocessing for
    ``--pretrained NAME`` (when it lists one), else :func:`default_preprocessing`."""
    if pretrained:
        entry = registry_entry(pretrained, registry_path)
        if entry.preprocessing is not None:
            return entry.preprocessing
    return default_preprocessing(image_size)


def extract_state_dict(obj) -> dict[str, torch.Tensor]:
    """The model's state_dict from any understood checkpoint layout, with our key names."""
    import torch

    if isinstance(obj, dict):
        for key in ("model", "state_dict", "model_state_dict"):
            if key in obj and isinstance(obj[key], dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError("checkpoint holds no model state_dict (expected a dict of tensors)")
    state = {}
    for key, value in obj.items():
        stripped = True
        while stripped:
            stripped = False
            for prefix in _WRAPPER_PREFIXES:
                if key.startswith(prefix) and key[len(prefix) :].split(".")[0] != "":
                    key, stripped = key[len(prefix) :], True
        state[key] = value
    return state


def read_checkpoint(path, *, trusted: bool = False) -> dict:
    """torch.load a checkpoint on the CPU; only tensors unless ``trusted`` (our own training state)."""
    import torch

    path = pathlib.Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file

            return load_file(path)
        except Exception as e:  # noqa: BLE001 - a damaged header raises several types
            raise CheckpointError(f"cannot read checkpoint {path}: {one_line(e)[:200]}") from None
    try:
        return torch.load(path, map_location="cpu", weights_only=not trusted)
    except Exception as e:  # torch raises several types for a damaged or foreign file
        reason = one_line(e)
        raise CheckpointError(f"cannot read checkpoint {path}: {reason[:200]}") from None


def checkpoint_num_classes(state: dict) -> int:
    if "classifier.weight" not in state:
        raise CheckpointError("checkpoint has no classifier.weight: not an EfficientNet classifier")
    return int(state["classifier.weight"].shape[0])


def load_weights(
    model: torch.nn.Module, path, *, reset_classifier: bool = False, trusted: bool = False
) -> None:
    """Load the weights at ``path`` into ``model`` (strict).

    A class count that differs from the model's is an error, unless ``reset_classifier``: then the
    ``classifier`` keeps its fresh initialisation (fine-tuning on a new label set).
    """
    state = extract_state_dict(read_checkpoint(path, trusted=trusted))
    load_model_state(model, state, path, reset_classifier=reset_classifier)


def load_model_state(model: torch.nn.Module, state: dict, path, *, reset_classifier: bool = False) -> None:
    """Load ``state`` (our key names, read from ``path``) into ``model``; CheckpointError naming ``path``
    when it is not an EfficientNet of the model's shape and class count (see :func:`load_weights`)."""
    if "classifier.weight" not in state:
        raise CheckpointError(f"checkpoint {path} has no classifier.weight: not an EfficientNet classifier")
    theirs, ours = checkpoint_num_classes(state), model.classifier.out_features
    if theirs != ours:
        if not reset_classifier:
            raise CheckpointError(
                f"checkpoint {path} has {theirs} classes but the model has {ours} "
                "(set --num-classes to match, or --reset-classifier to fine-tune on new classes)"
            )
        state = {k: v for k, v in state.items() if not k.startswith("classifier.")}
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # tensors of other shapes: another network under the same names
        first = str(e).strip().splitlines()[-1].strip()[:160]
        raise CheckpointError(
            f"checkpoint {path} does not fit this EfficientNet (model.variant, model.wide_se): {first}"
        ) from None
    missing = [k for k in result.missing_keys if not (reset_classifier and k.startswith("classifier."))]
    if missing or result.unexpected_keys:
        raise CheckpointError(
            f"checkpoint {path} does not fit this EfficientNet (model.variant, model.wide_se): "
            f"{len(missing)} missing keys (e.g. {missing[:2]}), "
            f"{len(result.unexpected_keys)} unexpected (e.g. {result.unexpected_keys[:2]})"
        )


def build_model_for(
    path,
    *,
    variant: str = "b0",
    wide_se: bool = False,
    width=None,
    num_classes: int | None = None,
    trusted=False,
) -> tuple[torch.nn.Module, int]:
    """The network for the weights at ``path`` with them loaded (eval mode), and its input size: a
    training checkpoint of ours rebuilds its recipe's model (variant, width, classes, data.image_size)
    with the weights its evaluation scored (the weight average where the run kept one);
    any other file gets ``efficientnet(variant, wide_se=..., width=...)`` with the weights' class count
    at the variant's published resolution. ``num_classes`` (a user's flag) that contradicts the weights is
    a CheckpointError naming both."""
    from efficientnet.model import VARIANTS, efficientnet
    from efficientnet.step import build_model

    saved = read_checkpoint(path, trusted=trusted)
    # a run that kept a weight average (train.ema_decay) evaluated the average: score and export it too
    averaged = saved.get("average") if isinstance(saved, dict) else None
    state = extract_state_dict(averaged if isinstance(averaged, dict) else saved)
    found = state["classifier.weight"].shape[0] if "classifier.weight" in state else None
    if num_classes is not None and found is not None and num_classes != found:
        raise CheckpointError(
            f"checkpoint {path} has {found} classes, not --num-classes {num_classes} "
            "(leave --num-classes out: the checkpoint says how many)"
        )
    if isinstance(saved, dict) and isinstance(saved.get("recipe"), dict):
        recipe = saved["recipe"]
        model, image_size = build_model(recipe), int(recipe["data"]["image_size"])
    else:
        if variant not in VARIANTS:
            raise CheckpointError(f"--variant must be one of {', '.join(VARIANTS)}, not {variant!r}")
        model = efficientnet(variant, num_classes=found or num_classes or 1000, wide_se=wide_se, width=width)
        image_size = VARIANTS[variant].image_size
    load_model_state(model, state, path)
    return model.eval(), image_size


def add_model_args(parser) -> None:
    """--variant, --wide-se, --width, --num-classes: the network of a weights file that is not one of
    our training checkpoints (those carry their recipe)."""
    parser.add_argument("--variant", default="b0", help="b0..b4 (default b0)")
    parser.add_argument("--wide-se", action="store_true", help="EfficientNet-WideSE")
    parser.add_argument("--width", type=float, default=None, help="width multiplier instead of the variant's")
    parser.add_argument(
        "--num-classes", type=int, default=None, help="expected class count (default: the weights')"
    )


def resolve_weights(pretrained: str | None, init_checkpoint: str | None, **pull_args) -> pathlib.Path | None:
    """The file for ``--pretrained NAME`` (pulled from the registry) or ``--init-checkpoint PATH``."""
    if pretrained and init_checkpoint:
        raise CheckpointError("give --pretrained or --init-checkpoint, not both")
    if pretrained:
        return pull(pretrained, **pull_args)
    return pathlib.Path(init_checkpoint) if init_checkpoint else None


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m efficientnet.checkpoints",
        description="Check that a checkpoint file loads into our EfficientNet.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    check_parser = commands.add_parser("check", help="load a checkpoint file into EfficientNet")
    check_parser.add_argument("path")
    check_parser.add_argument("--variant", default="b0", help="b0..b4")
    check_parser.add_argument("--wide-se", action="store_true")
    check_parser.add_argument("--num-classes", type=int, default=1000)
    args = parser.parse_args(argv)
    from efficientnet.model import efficientnet

    load_weights(efficientnet(args.variant, num_classes=args.num_classes, wide_se=args.wide_se), args.path)
    print(f"{args.path}: loads into EfficientNet-{args.variant} with {args.num_classes} classes")


if __name__ == "__main__":
    main()
