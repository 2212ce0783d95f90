"""Shared fixtures: the digits image set as RecordIO, a short training run, its Triton repository."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from mx_resnet_testing import RECIPE, run_module  # noqa: E402


@pytest.fixture(scope="session")
def digits_rec(tmp_path_factory) -> Path:
    """scikit-learn's digits (1,797 real 8x8 images) as 32x32 RGB JPEGs, packed into RecordIO by im2rec."""
    from resnet50_mx.prepare_data import convert
    from zoo.data.datasets import make_digits_imagefolder

    root = tmp_path_factory.mktemp("digits")
    folder = make_digits_imagefolder(root / "images", image_size=32)
    convert(folder, root / "rec", resize=0, threads=1)
    return root / "rec"


@pytest.fixture(scope="session")
def trained(tmp_path_factory, digits_rec) -> Path:
    """Two short epochs on the digits with validation after each; the results folder."""
    results = tmp_path_factory.mktemp("train")
    run_module(
        "train",
        "--recipe", RECIPE,
        "--data-dir", digits_rec,
        "--epochs", 2,
        "--steps-per-epoch", 22,
        "--log-every", 22,  # one train reading an epoch
        "--results-dir", results,
    )  # fmt: skip
    return results


@pytest.fixture(scope="session")
def triton_repository(tmp_path_factory, trained) -> Path:
    repo = tmp_path_factory.mktemp("triton") / "model_repository"
    run_module(
        "export",
        "--checkpoint", trained,
        "--model-repository", repo,
        "--instance-kind", "KIND_CPU",
        "--max-batch-size", 16,
    )  # fmt: skip
    return repo
