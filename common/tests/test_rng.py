import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from zoo.rng import rng_state, set_rng_state  # noqa: E402


def _draw():
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_restored_state_repeats_every_generator():
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    saved = rng_state()
    first = _draw()
    assert _draw() != first  # the generators moved on
    set_rng_state(saved)
    assert _draw() == first
