"""TorchRec sharding vs one process vs the plain nn.EmbeddingBag path, and exact resume of a sharded run."""

import json

import pytest
from dlrm_testing import TINY, losses, per_gpu, run_module

STEPS = ["--steps", "6", "--set", "train.shuffle=true"]
# Two tables pinned to column-wise shards (TorchRec shards rows on GPUs only); the planner places the rest.
PINNED = ["--set", "model.sharding.plan={t0: column_wise, t1: column_wise}"]


@pytest.fixture(scope="module")
def one_process(synthetic_dir, tmp_path_factory):
    results = tmp_path_factory.mktemp("one_process")
    run_module(
        "dlrm.train", "--data-dir", str(synthetic_dir), "--results-dir", str(results), *TINY, *STEPS, *PINNED
    )
    return results


@pytest.fixture(scope="module")
def two_processes_resumed(synthetic_dir, tmp_path_factory):
    """Two processes: 3 steps, stopped (the sharded checkpoint stays), then resumed to 6."""
    results = tmp_path_factory.mktemp("two_processes")
    args = [
        "--data-dir",
        str(synthetic_dir),
        "--results-dir",
        str(results),
        *TINY,
        *STEPS,
        *PINNED,
        *per_gpu(2),
    ]
    run_module("dlrm.train", *args, "--steps", "3", nproc=2)
    assert sorted(p.name for p in (results / "checkpoint").glob("*.distcp")) == [
        "__0_0.distcp",
        "__1_0.distcp",
    ]
    refused = run_module("dlrm.train", *args, check=False)
    assert refused.returncode != 0 and "--resume auto" in refused.stderr.strip().splitlines()[-1]
    run_module("dlrm.train", *args, "--resume", "auto", nproc=2)
    return results


def test_two_sharded_processes_resumed_give_the_one_process_losses(one_process, two_processes_resumed):
    """Sharded over 2 processes (steps 1-3, then resumed from the sharded checkpoint for 4-6) ==
    one unbroken process: both sharding and resume keep the numbers."""
    one, two = losses(one_process), losses(two_processes_resumed)
    assert sorted(one) == list(range(1, 7))
    assert one[6] < one[1]
    assert two == pytest.approx(one, rel=2e-4, abs=1e-5)
    from zoo.mlperf import check_log

    for log in ("mlperf.log", "mlperf_resume1.log"):  # the stopped run's and the resumed run's
        check_log(two_processes_resumed / log, "dlrm_dcnv2")
    plan = (two_processes_resumed / "sharding_plan.txt").read_text()
    assert "column_wise" in plan and "table_wise" in plan


def test_sigterm_checkpoints_the_step_and_a_kill_between_the_swaps_two_renames_resumes_there(
    synthetic_dir, one_process, tmp_path
):
    """SIGTERM after step 3 of 6 (a scheduler's preemption) ends the run with exit 143 and a sharded
    checkpoint of step 3. Then kill -9 between the two renames of the checkpoint swap
    (zoo.torch.save_training_checkpoint_sharded) leaves checkpoint.old and a whole checkpoint.tmp, no
    checkpoint/: --resume auto puts the newer one back and continues from its step (not from step 0) to the
    unbroken run's losses, and its own saves find nothing in their way."""
    import shutil

    from dlrm.step import read_checkpoint

    results = tmp_path / "killed"
    args = ["--data-dir", str(synthetic_dir), "--results-dir", str(results), *TINY, *STEPS, *PINNED]
    stopped = run_module("dlrm.train", *args, sigterm_at=3, check=False)
    assert stopped.returncode == 143 and "terminated (SIGTERM)" in stopped.stderr, stopped.stderr[-2000:]
    assert read_checkpoint(results / "checkpoint")["step"] == 3
    shutil.copytree(results / "checkpoint", results / "checkpoint.old")
    (results / "checkpoint").rename(results / "checkpoint.tmp")
    resumed = run_module("dlrm.train", *args, "--resume", "auto")
    assert "put back from checkpoint.tmp" in resumed.stderr, resumed.stderr[-2000:]
    records = [json.loads(line) for line in (results / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["phase"] == "train"] == [1, 2, 3, 4, 5, 6]
    assert losses(results) == pytest.approx(losses(one_process), rel=2e-4, abs=1e-5)
    assert not [p.name for p in results.iterdir() if p.name.startswith("checkpoint.")]


def test_the_best_checkpoint_evaluates_alone_to_the_training_auc(synthetic_dir, one_process, tmp_path):
    """best/ (the evaluation that beat the others) carries its recipe: the model's tiny tables and MLPs
    come with it, no --set needed, and evaluate.sh scores it as training did."""
    records = [json.loads(line) for line in (one_process / "metrics.jsonl").read_text().splitlines()]
    trained = [r["metrics"]["auc"] for r in records if r["phase"] == "eval"][-1]
    out = tmp_path / "eval"
    run_module("dlrm.evaluate", "--data-dir", str(synthetic_dir), "--checkpoint", str(one_process / "best"),
               "--results-dir", str(out))  # fmt: skip
    assert json.loads((out / "eval.json").read_text())["auc"] == pytest.approx(trained, abs=1e-6)


def test_plain_embedding_bags_give_the_torchrec_losses(synthetic_dir, one_process, tmp_path):
    run_module(
        "dlrm.train",
        "--data-dir",
        str(synthetic_dir),
        "--results-dir",
        str(tmp_path),
        *TINY,
        *STEPS,
        "--set",
        "model.embeddings=plain",
    )
    plain = losses(tmp_path)
    assert plain == pytest.approx(losses(one_process), rel=2e-4, abs=1e-5)
    assert eval_aucs(tmp_path) == pytest.approx(eval_aucs(one_process), abs=1e-4)


def test_plain_tables_over_two_ddp_processes_give_the_one_process_losses(
    synthetic_dir, one_process, tmp_path
):
    """Two processes all-reduce the fused table's gradient densely (one process keeps it sparse):
    the same losses as the one-process TorchRec run."""
    run_module(
        "dlrm.train",
        "--data-dir",
        str(synthetic_dir),
        "--results-dir",
        str(tmp_path),
        *TINY,
        *STEPS,
        "--set",
        "model.embeddings=plain",
        *per_gpu(2),
        nproc=2,
    )
    assert losses(tmp_path) == pytest.approx(losses(one_process), rel=2e-4, abs=1e-5)


def eval_aucs(results_dir) -> list:
    lines = (results_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x)["metrics"]["auc"] for x in lines if '"eval"' in x]


def test_fp16_on_fused_tables_and_old_flags_are_one_line_errors(synthetic_dir, tmp_path):
    done = run_module(
        "dlrm.train",
        "--data-dir",
        str(synthetic_dir),
        "--results-dir",
        str(tmp_path),
        "--amp",
        "fp16",
        check=False,
    )
    assert done.returncode != 0 and done.stderr.strip().splitlines()[-1].startswith(
        "error: --amp fp16 needs loss scaling"
    )
    done = run_module("dlrm.train", "--config", "x.yaml", check=False)
    assert done.stderr.strip().splitlines() == ["error: --config was renamed: use --recipe"]
