"""FSDP2 over 2 gloo processes equals 1 process step for step; tensor parallel 2 equals tensor parallel 1;
a checkpoint written by 2 processes (sharded) resumes on 1 process as the unbroken 1-process run goes on."""

import json
import math

import pytest
import torch
from gpt_testutil import PARALLEL_RUN, torchrun, train_args


def logged(results, name):
    lines = [json.loads(line) for line in (results / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["metrics"][name]) for r in lines if r.get("phase", "train") == "train"]


@pytest.fixture(scope="module")
def runs(pydoc_data, tmp_path_factory):
    """{"one": 1 process, "fsdp": FSDP2 over 2, "tp": tensor parallel 2}: results dirs of PARALLEL_RUN."""
    from gpt.train import main

    root = tmp_path_factory.mktemp("parallel")
    main(train_args(pydoc_data, root / "one", *PARALLEL_RUN, "--batch-size", "8"))
    # One launch each: a second process group in the same processes now and then hung connecting gloo pairs.
    torchrun(["-m", "gpt.train", *train_args(pydoc_data, root / "fsdp", *PARALLEL_RUN, "--batch-size", "4")])
    tensor = ("--batch-size", "8", "--set", "parallel.tensor=2")
    torchrun(["-m", "gpt.train", *train_args(pydoc_data, root / "tp", *PARALLEL_RUN, *tensor)])
    return {name: root / name for name in ("one", "fsdp", "tp")}


@pytest.mark.parametrize("name", ["fsdp", "tp"])
def test_two_processes_equal_one_step_for_step(runs, name):
    for metric in ("loss", "grad_norm"):
        one, two = logged(runs["one"], metric), logged(runs[name], metric)
        assert [step for step, _ in one] == [1, 2, 3, 4] == [step for step, _ in two]
        for (_, a), (_, b) in zip(one, two, strict=True):
            assert math.isclose(a, b, rel_tol=1e-5), (metric, one, two)
    one = torch.load(runs["one"] / "model.pt", weights_only=False)["model"]
    two = torch.load(runs[name] / "model.pt", weights_only=False)["model"]
    assert one.keys() == two.keys()
    for key in one:  # Adam's normalised update turns reduction-order noise of tiny gradients into ~1e-5
        torch.testing.assert_close(one[key], two[key], rtol=1e-4, atol=1e-4, msg=key)


def test_a_checkpoint_of_two_processes_resumes_on_one(runs, pydoc_data, tmp_path):
    """Resharded on load: the FSDP2 shards of 2 ranks (and AdamW's) read into one unsharded process."""
    from gpt.train import main

    saved = torch.load(runs["fsdp"] / "checkpoint" / "checkpoint.pt", weights_only=False)
    assert saved["world"] == 2 and saved["step"] == 4
    longer = ("--steps", "6", *PARALLEL_RUN[2:])
    main(train_args(pydoc_data, tmp_path / "unbroken", *longer, "--batch-size", "8"))
    resumed = main(train_args(pydoc_data, tmp_path / "resumed", *longer, "--batch-size", "8",
                              "--resume", str(runs["fsdp"] / "checkpoint")))  # fmt: skip
    assert resumed["step"] == 6
    unbroken = dict(logged(tmp_path / "unbroken", "loss"))
    after = dict(logged(tmp_path / "resumed", "loss"))
    assert sorted(after) == [5, 6]
    for step in (5, 6):
        assert math.isclose(after[step], unbroken[step], rel_tol=1e-5), (after, unbroken)
