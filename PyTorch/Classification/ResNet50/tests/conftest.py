"""Make the model package importable from any cwd and share small fixtures."""

import os
import pathlib
import sys

import pytest

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
for path in (MODEL_DIR, MODEL_DIR / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

# Two cores shared with other work: keep each test process to a couple of threads.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def model_dir() -> pathlib.Path:
    return MODEL_DIR


@pytest.fixture(scope="session")
def digits16(tmp_path_factory) -> pathlib.Path:
    """scikit-learn digits as 16x16 RGB JPEGs: train/ and a small val/ (10% of each class)."""
    from zoo.data.datasets import make_digits_imagefolder

    return make_digits_imagefolder(tmp_path_factory.mktemp("digits16"), image_size=16, val_fraction=0.1)
