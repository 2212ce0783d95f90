"""Make the model package importable from any cwd and share the small volumes every test reads."""

import os
import pathlib
import sys

import pytest

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
for path in (MODEL_DIR, MODEL_DIR / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

# Two cores shared with other work: one thread per test process.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The CPU recipe cut to seconds: 6 training cases, 3 steps an epoch, evaluation after epochs 2 and 4.
TINY = ["--recipe", str(MODEL_DIR / "configs" / "synthetic_cpu.yaml"), "--device", "cpu", "--epochs", "4"]
TINY += [
    "--set",
    "run.eval_every=2 epochs",
    "--set",
    "eval.start_epoch=2",
    "--set",
    "run.checkpoint_every=2 epochs",
    "--log-every",
    "1",
]


@pytest.fixture(scope="session")
def raw_cases(tmp_path_factory) -> pathlib.Path:
    """Eight organ-like volumes as KiTS19 case folders of gzip NIfTI (32^3 voxels of 2 x 1.5 x 1.5 mm)."""
    from unet3d.synthetic import write_nifti_cases

    folder = tmp_path_factory.mktemp("raw")
    write_nifti_cases(folder, 8, shape=(32, 32, 32), spacing=(2.0, 1.5, 1.5))
    return folder


@pytest.fixture(scope="session")
def prepared(raw_cases, tmp_path_factory) -> pathlib.Path:
    """The volumes prepared as KiTS19 is (resampled to 40^3), cases 6 and 7 held out."""
    from unet3d.kits19 import prepare_dataset

    folder = tmp_path_factory.mktemp("prepared")
    prepare_dataset(
        raw_cases, folder, val_cases=["case_00006", "case_00007"], min_shape=(32, 32, 32), log=lambda _: None
    )
    return folder


@pytest.fixture(scope="session")
def trained(prepared, tmp_path_factory) -> pathlib.Path:
    """A results folder of a 4-epoch CPU run on ``prepared`` (checkpoint.pt, metrics.jsonl, mlperf.log)."""
    from unet3d.train import main

    results = tmp_path_factory.mktemp("trained")
    main([*TINY, "--data-dir", str(prepared), "--results-dir", str(results)])
    return results
