"""Shared fixtures: the model package on sys.path, quiet TensorFlow, a small real image set as TFRecords."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

MODEL_DIR = Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if str(MODEL_DIR) not in sys.path:
    sys.path.insert(0, str(MODEL_DIR))


@pytest.fixture(scope="session")
def digits_folder(tmp_path_factory) -> Path:
    from zoo.data.datasets import make_digits_imagefolder

    return make_digits_imagefolder(tmp_path_factory.mktemp("digits"), image_size=32)


@pytest.fixture(scope="session")
def digits_tfrecords(digits_folder, tmp_path_factory) -> Path:
    from resnet50_tf.convert_tfrecords import convert

    out = tmp_path_factory.mktemp("tfrecords")
    convert(digits_folder, out, train_shards=4, val_shards=2, workers=1)
    return out


@pytest.fixture
def policy():
    """Restore the global Keras dtype policy after a test that changes it."""
    import keras

    before = keras.mixed_precision.global_policy().name
    yield
    keras.mixed_precision.set_global_policy(before)


@pytest.fixture(scope="session")
def trained_run(digits_tfrecords, tmp_path_factory):
    """(run dir, summary) of a 3-epoch run on the digits (the recipe's own length): shared by the learning and the export tests."""
    import keras
    from resnet50_tf.train import main

    run = tmp_path_factory.mktemp("trained")
    args = ["--recipe", MODEL_DIR / "configs" / "digits_cpu.yaml", "--data-dir", digits_tfrecords]
    args += ["--results-dir", run, "--epochs", 3, "--log-every", 11]
    before = keras.mixed_precision.global_policy().name
    summary = main([str(a) for a in args])
    keras.mixed_precision.set_global_policy(before)
    return run, summary
