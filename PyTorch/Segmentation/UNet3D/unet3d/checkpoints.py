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
            f"{flag} {source if not isinstance(source, dict) else ''} does not fit this 3D U-Net "
            f"(width {model.width}, {model.levels} levels): {detail}"
        ) from None
