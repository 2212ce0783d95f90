"""Training on the CPU: learning, bf16 autocast, exact resume after a kill and after SIGTERM (RMSProp, mixup,
CutMix and the weight average on), 2-process DDP (gloo)."""

import json
import math
import sys

import pytest
import torch
from effnet_testutil import MODEL_DIR, model_env, run_module
from zoo.errors import UserError
from zoo.recipe import Interval, run_config

TINY = ["--recipe", "configs/digits_cpu.yaml", "--image-size", 16, "--workers", 1, "--threads", 1]


def losses(results_dir) -> dict[int, float]:
    records = [json.loads(line) for line in (results_dir / "metrics.jsonl").read_text().splitlines()]
    return {
        r["step"]: r["metrics"]["loss"] for r in records if r["phase"] == "train" and "loss" in r["metrics"]
    }


def val_records(results_dir) -> list[dict]:
    records = [json.loads(line) for line in (results_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["metrics"] for r in records if r["phase"] == "eval"]


def test_short_training_learns(tmp_path, digits32):
    out = tmp_path / "run"
    result = run_module(
        "efficientnet.train", *TINY, "--image-size", 32, "--data-dir", digits32, "--results-dir", out, "--batch-size", 32,
        "--epochs", 4, "--steps-per-epoch", 20, "--log-every", 5, "--set", "train.ema_decay=0.9",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    curve = losses(out)
    first, last = curve[min(curve)], sum(list(curve.values())[-3:]) / 3
    assert last < first - 0.3, curve
    accuracy = val_records(out)[-1]["top1"]
    assert accuracy > 20.0, val_records(out)  # chance is 10%
    # the best checkpoint evaluates from itself alone (recipe, classes, size, the weight average it scored)
    best = max(val_records(out), key=lambda r: r["top1"])  # the first of equal scores
    assert torch.load(out / "best.pt", weights_only=False)["epoch"] == best["epoch"]
    result = run_module(
        "efficientnet.evaluate", "--checkpoint", out / "best.pt", "--data-dir", digits32, "--device", "cpu",
        "--workers", 1, "--results-dir", out,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "eval.json").read_text())
    assert report["preprocessing"]["crop"] == 32
    assert abs(report["top1"] - best["top1"]) < 1.5, (report, best)  # BatchNorm folded: a tie may flip


@pytest.mark.parametrize("amp", ["bf16"])
def test_mixed_precision_step(tmp_path, digits16, amp):
    out = tmp_path / amp
    result = run_module(
        "efficientnet.train", *TINY, "--data-dir", digits16, "--results-dir", out, "--batch-size", 16,
        "--epochs", 1, "--steps-per-epoch", 2, "--log-every", 1, "--amp", amp,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert all(math.isfinite(v) for v in losses(out).values())
    state = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert state["step"] == 2 and ("scale" in state["scaler"]) == (amp == "fp16")


def test_resume_after_kill_matches_unbroken_run(tmp_path, digits16):
    common = [*TINY, "--data-dir", digits16, "--batch-size", 16, "--epochs", 2, "--steps-per-epoch", 4,
              "--log-every", 1, "--checkpoint-every", 5, "--optimizer", "rmsprop", "--lr-per-256", "0.05",
              "--mixup", "0.2", "--cutmix", "1.0", "--ema-decay", "0.9", "--augment", "randaugment"]  # fmt: skip
    unbroken, broken = tmp_path / "unbroken", tmp_path / "broken"
    assert run_module("efficientnet.train", *common, "--results-dir", unbroken).returncode == 0
    killed = run_module("efficientnet.train", *common, "--results-dir", broken, "--exit-after-steps", 6)
    assert killed.returncode == 137
    # Killed at step 6: the last checkpoint is from step 5 (epoch 1, after its first batch); step 6 is redone.
    state = torch.load(broken / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert (state["epoch"], state["step_in_epoch"], state["step"]) == (1, 1, 5)
    resumed = run_module("efficientnet.train", *common, "--results-dir", broken, "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected, got = losses(unbroken), losses(broken)  # the resumed run appends steps 6..8
    assert sorted(expected) == list(range(1, 9))
    for step in range(6, 9):
        assert got[step] == pytest.approx(expected[step], rel=1e-5, abs=1e-6), (step, got, expected)
    # evaluation scores the weight average, restored with the rest
    assert val_records(broken)[-1]["loss"] == pytest.approx(val_records(unbroken)[-1]["loss"], rel=1e-5)
    assert state["average"] is not None and not (broken / "mlperf.log").exists()
    # SIGTERM after step 6 (a scheduler's preemption): a checkpoint of that very step, exit 143, and the
    # resumed run is the unbroken one from step 7 on.
    preempted = tmp_path / "preempted"
    stopped = run_sigterm_at(6, *common, "--results-dir", preempted)
    assert stopped.returncode == 143 and "terminated (SIGTERM)" in stopped.stderr, stopped.stderr[-3000:]
    state = torch.load(preempted / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert (state["epoch"], state["step_in_epoch"], state["step"]) == (1, 2, 6)
    resumed = run_module("efficientnet.train", *common, "--results-dir", preempted, "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got = losses(preempted)
    for step in range(1, 9):
        assert got[step] == pytest.approx(expected[step], rel=1e-5, abs=1e-6), (step, got, expected)


def run_sigterm_at(step: int, *args):
    """efficientnet.train that receives SIGTERM right after optimizer step ``step``."""
    import subprocess

    from zoo.testing import sigterm_at_step

    return subprocess.run(
        sigterm_at_step(step, "efficientnet.train", *args),
        capture_output=True, text=True, timeout=600, env=model_env(), cwd=str(MODEL_DIR),
    )  # fmt: skip


DDP_SCRIPT = """
import sys, torch, torch.distributed as dist
from efficientnet.train import parse_args, train
out = sys.argv[1]
result = train(parse_args(sys.argv[2:]))
import os
torch.save(result["model"].state_dict(), f"{out}/rank{os.environ['RANK']}.pt")
"""


def test_two_process_ddp_gives_identical_weights(tmp_path, digits16):
    import subprocess

    script = tmp_path / "ddp_run.py"
    script.write_text(DDP_SCRIPT)
    args = [*TINY, "--data-dir", digits16, "--results-dir", tmp_path / "r", "--batch-size", 8,
            "--epochs", 1, "--steps-per-epoch", 3, "--log-every", 1, "--threads", 1]  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(script), str(tmp_path), *map(str, args)],
        capture_output=True, text=True, timeout=600, env=model_env(OMP_NUM_THREADS="1"), cwd=str(MODEL_DIR),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    rank0 = torch.load(tmp_path / "rank0.pt")
    rank1 = torch.load(tmp_path / "rank1.pt")
    initial = torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=False)["model"]
    parameters = [k for k in rank0 if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
    assert len(parameters) == 213  # BatchNorm running statistics stay per rank (broadcast_buffers=False)
    for key in parameters:
        assert torch.equal(rank0[key], rank1[key]), key
    assert not torch.equal(rank0["classifier.weight"], torch.zeros_like(rank0["classifier.weight"]))
    assert torch.equal(
        initial["classifier.weight"], rank0["classifier.weight"]
    )  # the checkpoint is rank 0's model


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.compile=fast", "train.compile must be false or one of default, reduce-overhead"),
        ("data.augment=trivial", "unknown data.augment 'trivial'"),
    ],
)
def test_bad_lever_recipe_keys_are_one_line_errors(tmp_path, digits16, override, message):
    from effnet_testutil import assert_one_line_error

    result = run_module(
        "efficientnet.train", *TINY, "--data-dir", digits16, "--results-dir", tmp_path / "r", "--epochs", 1,
        "--steps-per-epoch", 1, "--set", override,
    )  # fmt: skip
    assert_one_line_error(result, message)
    assert not (tmp_path / "r").exists()  # bad input writes nothing into RESULTS_DIR


def test_shared_flags_reach_the_recipe():
    from efficientnet.train import build_recipe, parse_args

    args = parse_args(["--recipe", str(MODEL_DIR / "configs" / "digits_cpu.yaml"), "--amp", "bf16", "--target-top1", "77.6",
                       "--set", "data.workers=3", "--set", "optimizer.momentum=0.8"])  # fmt: skip
    recipe = build_recipe(args)
    assert recipe["run"]["precision"] == "bf16" and recipe["run"]["target"]["value"] == 77.6
    assert (recipe["data"]["workers"], recipe["optimizer"]["momentum"]) == (3, 0.8)  # both --set items kept


def test_run_flags_reach_the_run_section():
    """The flags of the zoo's classifiers (--batch-size, --epochs, --log-every, --checkpoint-every, --seed) and
    the shared ones it gained (--accumulation, --steps) set run: keys; the run's length follows them."""
    from efficientnet.train import build_recipe, parse_args, run_length

    digits = ["--recipe", str(MODEL_DIR / "configs" / "digits_cpu.yaml")]
    run = run_config(build_recipe(parse_args([*digits, "--batch-size", "16", "--accumulation", "2", "--epochs", "3",
                                              "--log-every", "5", "--checkpoint-every", "40", "--seed", "7"])))  # fmt: skip
    assert (run.batch_per_gpu, run.accumulation, run.epochs, run.steps, run.log_every, run.seed) == (
        16,
        2,
        3,
        None,
        5,
        7,
    )
    assert run.checkpoint_every == Interval(40, "steps") and run.eval_every == Interval(1, "epochs")
    assert run_length(run, steps_per_epoch=50) == (3, 150)
    run = run_config(build_recipe(parse_args([*digits, "--steps", "120", "--set", "run.batch_per_gpu=8"])))
    assert (run.epochs, run.steps, run.batch_per_gpu) == (None, 120, 8)
    assert run_length(run, steps_per_epoch=50) == (3, 120)  # the third epoch is cut at step 120


def test_evaluation_counted_in_steps_is_a_one_line_error(tmp_path):
    from effnet_testutil import assert_one_line_error

    result = run_module("efficientnet.train", *TINY, "--synthetic", "--results-dir", tmp_path / "r",
                        "--set", "run.eval_every=100 steps")  # fmt: skip
    assert_one_line_error(result, "run.eval_every: EfficientNet evaluates after whole epochs")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config", "x.yaml"], "error: --config was renamed: use --recipe"),
        (["--steps-per-epoch", "0"], "error: --steps-per-epoch must be a positive integer, not 0"),
    ],
)
def test_old_spellings_are_one_line_errors(tmp_path, argv, message):
    from effnet_testutil import assert_one_line_error

    result = run_module("efficientnet.train", *TINY, "--synthetic", "--results-dir", tmp_path / "r", *argv)
    assert_one_line_error(result, message)


def test_old_recipe_key_is_one_line(tmp_path):
    from effnet_testutil import assert_one_line_error

    recipe = tmp_path / "old.yaml"
    recipe.write_text(f"base: {MODEL_DIR / 'configs' / 'digits_cpu.yaml'}\ntrain:\n  target_top1: 75.0\n")
    result = run_module(
        "efficientnet.train", "--recipe", recipe, "--synthetic", "--results-dir", tmp_path / "r"
    )
    assert_one_line_error(result, "unknown recipe key 'train.target_top1'", "did you mean 'run.target'")


def test_existing_checkpoint_needs_resume_auto_or_none(tmp_path):
    from efficientnet.train import parse_args, train

    (tmp_path / "checkpoint.pt").write_bytes(b"finished work")
    with pytest.raises(UserError, match="pass --resume auto to continue it, --resume none to start over"):
        train(parse_args(["--recipe", str(MODEL_DIR / "configs" / "digits_cpu.yaml"), "--synthetic",
                          "--results-dir", str(tmp_path)]))  # fmt: skip
    assert (tmp_path / "checkpoint.pt").read_bytes() == b"finished work"


def test_synthetic_run_stops_at_its_top1_target(tmp_path):
    """--synthetic needs no data; --target-top1 0 is reached by the first evaluation, which ends the run
    after epoch 1 of 3 with a checkpoint."""
    out = tmp_path / "run"
    result = run_module(
        "efficientnet.train", *TINY, "--synthetic", "--results-dir", out, "--batch-size", 4, "--epochs", 3,
        "--steps-per-epoch", 2, "--target-top1", 0,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(val_records(out)) == 1 and val_records(out)[0]["epoch"] == 1
    state = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert (state["epoch"], state["step"]) == (1, 2)
