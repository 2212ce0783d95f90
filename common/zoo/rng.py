"""Capture and restore every random generator a PyTorch training step draws from (exact resume)."""

from __future__ import annotations

import random

import numpy as np


def rng_state() -> dict:
    """Python, NumPy, torch CPU and (when present) every CUDA device's generator state."""
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Inverse of :func:`rng_state`; CUDA states are skipped on a machine without CUDA."""
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
