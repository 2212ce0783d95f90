"""Pretrained weights: registry entries (checkpoints.yaml) pulled through zoo.checkpoints, loading any layout.

Understood layouts, all mapped onto this package's (= torchvision's) state_dict keys:

- torchvision: a plain state_dict ``conv1.weight``, ``layer1.0.conv1.weight``, ..., ``fc.bias``;
- DDP / torch.compile wrappers: keys prefixed ``module.`` or ``_orig_mod.``;
- NVIDIA DeepLearningExamples ConvNets (NGC): the state_dict may sit under ``state_dict`` and name the
  stages ``layers.0`` .. ``layers.3`` instead of ``layer1`` .. ``layer4``;
- this package's training checkpoints: a dict whose ``model`` entry is the state_dict.

``scripts/download_checkpoint.sh {list,pull NAME}`` lists and pulls the registry;
``python -m resnet50.checkpoints check PATH`` tells whether a file loads into ResNet-50 v1.5.
"""

from __future__ import annotations

import argparse
import pathlib
import re

import torch
from zoo.checkpoints import CheckpointEntry, CheckpointError, Preprocessing, fetch, load_registry
from zoo.cli import entry_point
from zoo.errors import one_line
from zoo.imagenet_loaders import default_preprocessing

REGISTRY_PATH = pathlib.Path(__file__).resolve().parents[1] / "checkpoints.yaml"
_STAGE = re.compile(r"^layers\.(\d+)\.")
_WRAPPER_PREFIXES = ("module.", "_orig_mod.", "model.")


def registry_entry(name: str, registry_path=None) -> CheckpointEntry:
    """The entry ``name`` of the model's checkpoints.yaml (or ``registry_path``)."""
    return load_registry(registry_path or REGISTRY_PATH).get(name)


def pull(name: str, *, registry_path=None, cache_dir=None, progress=True) -> pathlib.Path:
    """Download (or find in the cache) the registry entry ``name``; returns the verified file."""
    return fetch(registry_entry(name, registry_path), cache_dir=cache_dir, progress=progress)


def eval_preprocessing(pretrained: str | None, image_size: int, registry_path=None) -> Preprocessing:
    """What evaluation and export feed the model: the registry entry's preprocessing for
    ``--pretrained NAME`` (when it lists one), else resize ``image_size * 256 / 224``, crop ``image_size``."""
    if pretrained:
        entry = registry_entry(pretrained, registry_path)
        if entry.preprocessing is not None:
            return entry.preprocessing
    return default_preprocessing(image_size)


def extract_state_dict(obj) -> dict[str, torch.Tensor]:
    """The model's state_dict from any understood checkpoint layout, with our key names."""
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
        key = _STAGE.sub(lambda m: f"layer{int(m.group(1)) + 1}.", key)
        state[key] = value
    return state


def read_checkpoint(path, *, trusted: bool = False) -> dict:
    """torch.load a checkpoint on the CPU; only tensors unless ``trusted`` (our own training state)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        return torch.load(path, map_location="cpu", weights_only=not trusted)
    except Exception as e:  # torch raises several types for a damaged or foreign file
        reason = one_line(e)
        raise CheckpointError(f"cannot read checkpoint {path}: {reason[:200]}") from None


def checkpoint_num_classes(state: dict) -> int:
    if "fc.weight" not in state:
        raise CheckpointError("checkpoint has no fc.weight: not a ResNet-50 classifier")
    return int(state["fc.weight"].shape[0])


def load_weights(
    model: torch.nn.Module, path, *, reset_classifier: bool = False, trusted: bool = False
) -> None:
    """Load the weights at ``path`` into ``model`` (strict).

    A class count that differs from the model's is an error, unless ``reset_classifier``: then the
    final ``fc`` keeps its fresh initialisation (fine-tuning on a new label set).
    """
    state = extract_state_dict(read_checkpoint(path, trusted=trusted))
    load_model_state(model, state, path, reset_classifier=reset_classifier)


def load_model_state(model: torch.nn.Module, state: dict, path, *, reset_classifier: bool = False) -> None:
    """Load ``state`` (our key names, read from ``path``) into ``model``; CheckpointError naming ``path``
    when it is not a ResNet-50 v1.5 of the model's class count (see :func:`load_weights`)."""
    theirs, ours = checkpoint_num_classes(state), model.fc.out_features
    if theirs != ours:
        if not reset_classifier:
            raise CheckpointError(
                f"checkpoint {path} has {theirs} classes but the model has {ours} "
                "(set --num-classes to match, or --reset-classifier to fine-tune on new classes)"
            )
        state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # tensors of other shapes: another network under the same names
        first = str(e).strip().splitlines()[-1].strip()[:160]
        raise CheckpointError(f"checkpoint {path} does not fit ResNet-50 v1.5: {first}") from None
    missing = [k for k in result.missing_keys if not (reset_classifier and k.startswith("fc."))]
    if missing or result.unexpected_keys:
        raise CheckpointError(
            f"checkpoint {path} does not fit ResNet-50 v1.5: "
            f"{len(missing)} missing keys (e.g. {missing[:2]}), "
            f"{len(result.unexpected_keys)} unexpected (e.g. {result.unexpected_keys[:2]})"
        )


def trained_model(path, *, num_classes: int | None = None, trusted: bool = False):
    """``(model, image_size)``: ResNet-50 v1.5 with the weights at ``path`` loaded (eval mode), built for
    the weights' class count, and the input size it was trained at (a training checkpoint of ours carries
    its recipe's ``data.image_size``; None for any other file). ``num_classes`` (a user's flag) that
    contradicts the weights is a CheckpointError naming both."""
    from resnet50.model import resnet50

    saved = read_checkpoint(path, trusted=trusted)
    state = extract_state_dict(saved)
    found = checkpoint_num_classes(state)
    if num_classes is not None and num_classes != found:
        raise CheckpointError(
            f"checkpoint {path} has {found} classes, not --num-classes {num_classes} "
            "(leave --num-classes out: the checkpoint says how many)"
        )
    model = resnet50(num_classes=found)
    load_model_state(model, state, path)
    recipe = saved.get("recipe") if isinstance(saved, dict) else None
    data = recipe.get("data") if isinstance(recipe, dict) else None
    image_size = data.get("image_size") if isinstance(data, dict) else None
    return model.eval(), int(image_size) if image_size else None


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
        prog="python -m resnet50.checkpoints",
        description="Check that a checkpoint file loads into ResNet-50 v1.5.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    check_parser = commands.add_parser("check", help="load a checkpoint file into ResNet-50 v1.5")
    check_parser.add_argument("path")
    check_parser.add_argument("--num-classes", type=int, default=1000)
    args = parser.parse_args(argv)
    from resnet50.model import resnet50

    load_weights(resnet50(num_classes=args.num_classes), args.path)
    print(f"{args.path}: loads into ResNet-50 v1.5 with {args.num_classes} classes")


if __name__ == "__main__":
    main()
