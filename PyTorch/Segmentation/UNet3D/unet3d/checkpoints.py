"""Weights into the 3D U-Net: from a training checkpoint (``model``), a bare state_dict, or the MLPerf
inference reference's checkpoint (``model_state_dict``); module names follow the MLPerf reference."""

from __future__ import annotations

import pathlib

import torch
from zoo.errors import UserError

STATE_KEYS = ("model", "model_state_dict", "best_model_state_dict", "state_dict")


def extract_state_dict(saved) -> dict:
    """The model's tensors from what ``torch.load`` returned."""
    if isinstance(saved, dict):
        for key in STATE_KEYS:
            if isinstance(saved.get(key), dict):
                return saved[key]
        if saved and all(isinstance(v, torch.Tensor) for v in saved.values()):
            return saved
    raise UserError("holds no 3D U-Net weights (no model, model_state_dict or state_dict)")


def read_weights(path, flag: str = "--checkpoint") -> dict:
    """The state_dict in the file ``path``; an unreadable file is a one-line UserError naming it."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise UserError(f"{flag} {path}: no such file")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing to a user
        reason = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise UserError(f"{flag} {path} is not a PyTorch checkpoint (cannot be read: {reason})") from None
    try:
        return extract_state_dict(saved)
    except UserError as e:
        raise UserError(f"{flag} {path} {e}") from None


def load_model_state(model: torch.nn.Module, source, flag: str = "--checkpoint") -> None:
    """Load ``source`` (a path, or an already loaded checkpoint dict) into ``model``; weights of another
    network or width end in one line naming the file."""
    state = (
        read_weights(source, flag) if isinstance(source, str | pathlib.Path) else extract_state_dict(source)
    )
    state = {k.removeprefix("module."): v for k, v in state.items()}
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        first = str(e).strip().splitlines()
        detail = first[1].strip()[:200] if len(first) > 1 else first[0][:200]
        raise UserError(
            f"{source if isinstance(source, str | pathlib.Path) else flag} does not fit this 3D U-Net "
            f"(width {model.width}, {model.levels} levels): {detail}"
        ) from None


def checkpoint_recipe(checkpoint) -> dict | None:
    """The recipe a training checkpoint at ``checkpoint`` was trained with; None for any other file (or
    none, or one that cannot be read: :func:`trained_model` says why)."""
    if checkpoint is None or not pathlib.Path(checkpoint).is_file():
        return None
    try:
        saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    except Exception:  # noqa: BLE001 - trained_model reports an unreadable file
        return None
    recipe = saved.get("recipe") if isinstance(saved, dict) else None
    return recipe if isinstance(recipe, dict) and "run" in recipe else None


def trained_model(recipe: dict, checkpoint=None, pretrained=None, cache_dir=None):
    """(model in eval mode, the recipe it was trained with) from a training checkpoint, a weights file or
    a registry name (checkpoints.yaml); a training checkpoint's own recipe sets width and levels."""
    from unet3d.step import build_model

    if (checkpoint is None) == (pretrained is None):
        raise UserError("give one of --checkpoint PATH and --pretrained NAME")
    flag = "--checkpoint"
    if pretrained is not None:
        from zoo.checkpoints import fetch, load_registry

        from unet3d import MODEL_DIR

        checkpoint, flag = (
            fetch(load_registry(MODEL_DIR / "checkpoints.yaml").get(pretrained), cache_dir),
            "--pretrained",
        )
    path = pathlib.Path(checkpoint)
    if not path.is_file():
        raise UserError(f"{flag} {path}: no such file")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001
        reason = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise UserError(f"{flag} {path} is not a PyTorch checkpoint (cannot be read: {reason})") from None
    if isinstance(saved, dict) and isinstance(saved.get("recipe"), dict) and "model" in saved["recipe"]:
        recipe = {**recipe, "model": saved["recipe"]["model"], "data": saved["recipe"]["data"]}
    model = build_model(recipe)
    try:
        state = extract_state_dict(saved)
    except UserError as e:
        raise UserError(f"{flag} {path} {e}") from None
    load_model_state(model, state, flag=f"{flag} {path}")
    return model.eval(), recipe
