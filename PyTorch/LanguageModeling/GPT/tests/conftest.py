"""Make the model package and the tests' helpers importable from any cwd; the shared fixtures."""

import pathlib
import sys

import pytest

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
for path in (MODEL_DIR, MODEL_DIR / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from gpt_testutil import train_args  # noqa: E402


@pytest.fixture(scope="session")
def pydoc_data(tmp_path_factory):
    """The English of Python's documentation (pydoc_data.topics), a 1024-id BPE, token shards."""
    from gpt.download import main

    folder = tmp_path_factory.mktemp("pydoc")
    main(["--data-dir", str(folder), "--corpus", "pydoc", "--vocab-size", "1024"])
    return folder


@pytest.fixture(scope="session")
def trained(tmp_path_factory, pydoc_data):
    """(results dir, summary) of the tiny recipe's run: 40 steps, evaluations and checkpoints every 20."""
    from gpt.train import main

    results = tmp_path_factory.mktemp("trained")
    return results, main(train_args(pydoc_data, results))
