"""Training on the CPU: learning, bf16 autocast, exact resume after a kill, 2-process DDP (gloo)."""

import json
import math
import sys
import warnings

import pytest
import torch
from r50_testutil import MODEL_DIR, model_env, run_module
from zoo.errors import UserError
from zoo.mlperf import check_log
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


def test_short_training_learns(tmp_path, digits16):
    """The loss falls and top-1 beats chance; the newest 2 checkpoints and the best stay, and the best
    evaluates from the checkpoint alone (class count and image size come with it) to training's score."""
    out = tmp_path / "run"
    result = run_module(
        "resnet50.train", *TINY, "--data-dir", digits16, "--results-dir", out, "--batch-size", 32,
        "--epochs", 4, "--steps-per-epoch", 20, "--log-every", 5, "--set", "run.keep_checkpoints=2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    curve = losses(out)
    first, last = curve[min(curve)], sum(list(curve.values())[-3:]) / 3
    assert last < first - 0.3, curve
    accuracy = val_records(out)[-1]["top1"]
    assert accuracy > 20.0, val_records(out)  # chance is 10%
    assert sorted(p.name for p in out.glob("checkpoint_step*.pt")) == [
        "checkpoint_step000000060.pt", "checkpoint_step000000080.pt"
    ]  # fmt: skip
    best = max(val_records(out), key=lambda r: r["top1"])  # the first of equal scores
    assert torch.load(out / "best.pt", weights_only=False)["epoch"] == best["epoch"]
    result = run_module(
        "resnet50.evaluate", "--checkpoint", out / "best.pt", "--data-dir", digits16, "--device", "cpu",
        "--workers", 1, "--results-dir", out,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "eval.json").read_text())
    assert report["preprocessing"]["crop"] == 16
    assert abs(report["top1"] - best["top1"]) < 1.5, (report, best)  # BatchNorm folded: a tie may flip


def mllog_events(path) -> list[dict]:
    return [
        json.loads(line.split(":::MLLOG ", 1)[1])
        for line in path.read_text().splitlines()
        if ":::MLLOG" in line
    ]


def test_mlperf_log_passes_the_compliance_checker(tmp_path, digits16):
    """A tiny run with --target-top1 0 reaches its target after the first of two epochs: the log
    holds the whole sequence, stops with status success, and the resnet ruleset's checker accepts it."""
    out = tmp_path / "run"
    result = run_module(
        "resnet50.train", *TINY, "--data-dir", digits16, "--results-dir", out, "--batch-size", 8,
        "--epochs", 2, "--steps-per-epoch", 2, "--target-top1", 0,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    check_log(out / "mlperf.log", "resnet")
    # the events go to the file only: the console shows them with --verbose (zoo.console)
    assert ":::MLLOG" not in result.stdout + result.stderr, result.stdout[-2000:]
    events = mllog_events(out / "mlperf.log")
    keys = [e["key"] for e in events]
    for key in ("submission_benchmark", "cache_clear", "init_start", "init_stop", "run_start", "seed",
                "global_batch_size", "train_samples", "eval_samples", "opt_name", "epoch_start",
                "eval_start", "eval_stop", "eval_accuracy", "run_stop"):  # fmt: skip
        assert key in keys, key
    assert keys.index("init_stop") < keys.index("run_start") < keys.index("epoch_start")
    value = {e["key"]: e for e in events}
    assert value["submission_benchmark"]["value"] == "resnet" and value["global_batch_size"]["value"] == 8
    assert value["train_samples"]["value"] == 1616 and value["eval_samples"]["value"] == 179
    assert keys.count("eval_accuracy") == 1  # the target stopped the run after epoch 1
    assert 0 <= value["eval_accuracy"]["value"] <= 1 and value["eval_accuracy"]["metadata"]["epoch_num"] == 1
    assert value["run_stop"]["metadata"]["status"] == "success"
    assert "target_reached" not in keys and "run_config" not in keys
    # The same run's readings as TensorBoard scalars under RESULTS_DIR/tensorboard.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    scalars = EventAccumulator(str(out / "tensorboard"))
    scalars.Reload()
    assert {"train/loss", "eval/top1"} <= set(scalars.Tags()["scalars"])
    top1 = [event.value for event in scalars.Scalars("eval/top1")]
    assert top1 == pytest.approx([100 * value["eval_accuracy"]["value"]])


@pytest.mark.parametrize("amp", ["bf16"])
def test_mixed_precision_step(tmp_path, digits16, amp):
    out = tmp_path / amp
    result = run_module(
        "resnet50.train", *TINY, "--data-dir", digits16, "--results-dir", out, "--batch-size", 16,
        "--epochs", 1, "--steps-per-epoch", 2, "--log-every", 1, "--amp", amp,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert all(math.isfinite(v) for v in losses(out).values())
    state = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert state["step"] == 2 and ("scale" in state["scaler"]) == (amp == "fp16")


def test_resume_after_kill_matches_unbroken_run(tmp_path, digits16):
    common = [*TINY, "--data-dir", digits16, "--batch-size", 16, "--epochs", 2, "--steps-per-epoch", 4,
              "--log-every", 1, "--checkpoint-every", 5]  # fmt: skip
    unbroken, broken = tmp_path / "unbroken", tmp_path / "broken"
    assert run_module("resnet50.train", *common, "--results-dir", unbroken).returncode == 0
    killed = run_module("resnet50.train", *common, "--results-dir", broken, "--exit-after-steps", 6)
    assert killed.returncode == 137
    # Killed at step 6: the last checkpoint is from step 5 (epoch 1, after its first batch); step 6 is redone.
    state = torch.load(broken / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert (state["epoch"], state["step_in_epoch"], state["step"]) == (1, 1, 5)
    resumed = run_module("resnet50.train", *common, "--results-dir", broken, "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected, got = losses(unbroken), losses(broken)  # the resumed run appends steps 6..8
    assert sorted(expected) == list(range(1, 9))
    for step in range(6, 9):
        assert got[step] == pytest.approx(expected[step], rel=1e-5, abs=1e-6), (step, got, expected)
    assert val_records(broken)[-1]["top1"] == pytest.approx(val_records(unbroken)[-1]["top1"])
    # The resumed run's MLPerf log is a file of its own (the checker reads one run per file).
    assert (broken / "mlperf.log").is_file()
    check_log(broken / "mlperf_resume1.log", "resnet")


DDP_SCRIPT = """
import sys, torch, torch.distributed as dist
from resnet50.train import parse_args, train
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
    assert len(parameters) == 161  # BatchNorm running statistics stay per rank (broadcast_buffers=False)
    for key in parameters:
        assert torch.equal(rank0[key], rank1[key]), key
    assert not torch.equal(rank0["fc.weight"], torch.zeros_like(rank0["fc.weight"]))
    assert torch.equal(initial["fc.weight"], rank0["fc.weight"])  # the checkpoint is rank 0's model


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.compile=fast", "train.compile must be false or one of default, reduce-overhead"),
        ("optimizer.fused=maybe", "optimizer.fused must be true or false, not 'maybe'"),
        ("train.cudnn_benchmark=2", "train.cudnn_benchmark must be true or false, not 2"),
    ],
)
def test_bad_lever_recipe_keys_are_one_line_errors(tmp_path, digits16, override, message):
    from r50_testutil import assert_one_line_error

    result = run_module(
        "resnet50.train", *TINY, "--data-dir", digits16, "--results-dir", tmp_path / "r", "--epochs", 1,
        "--steps-per-epoch", 1, "--set", override,
    )  # fmt: skip
    assert_one_line_error(result, message)
    assert not (tmp_path / "r").exists()  # bad input writes nothing into RESULTS_DIR (no MLPerf log either)


def test_shared_flags_reach_the_recipe():
    from resnet50.train import build_recipe, parse_args

    args = parse_args(["--recipe", str(MODEL_DIR / "configs" / "digits_cpu.yaml"), "--amp", "bf16", "--target-top1", "75.9",
                       "--set", "data.workers=3", "--set", "optimizer.momentum=0.8"])  # fmt: skip
    recipe = build_recipe(args)
    assert recipe["run"]["precision"] == "bf16" and recipe["run"]["target"]["value"] == 75.9
    assert (recipe["data"]["workers"], recipe["optimizer"]["momentum"]) == (3, 0.8)  # both --set items kept


def test_run_flags_reach_the_run_section():
    """The flags a ResNet-50 user had (--batch-size, --epochs, --log-every, --checkpoint-every, --seed) and
    the shared ones it gained (--accumulation, --steps) set run: keys; the run's length follows them."""
    from resnet50.train import build_recipe, parse_args, run_length

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
    from r50_testutil import assert_one_line_error

    result = run_module("resnet50.train", *TINY, "--synthetic", "--results-dir", tmp_path / "r",
                        "--set", "run.eval_every=100 steps")  # fmt: skip
    assert_one_line_error(result, "run.eval_every: ResNet-50 evaluates after whole epochs")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target-accuracy", "75"], "error: --target-accuracy was renamed: use --target-top1"),
        (["--amp", "none"], "error: --amp none was renamed: use --amp fp32"),
        (["--config", "x.yaml"], "error: --config was renamed: use --recipe"),
        (["--set", "run.precision=none"], "error: run.precision must be one of bf16, fp16, fp32, not 'none'"),
        (["--steps-per-epoch", "0"], "error: --steps-per-epoch must be a positive integer, not 0"),
    ],
)
def test_old_spellings_are_one_line_errors(tmp_path, argv, message):
    from r50_testutil import assert_one_line_error

    result = run_module("resnet50.train", *TINY, "--synthetic", "--results-dir", tmp_path / "r", *argv)
    assert_one_line_error(result, message)


def test_old_recipe_key_is_one_line(tmp_path):
    from r50_testutil import assert_one_line_error

    recipe = tmp_path / "old.yaml"
    recipe.write_text(f"base: {MODEL_DIR / 'configs' / 'digits_cpu.yaml'}\ntrain:\n  target_top1: 75.0\n")
    result = run_module("resnet50.train", "--recipe", recipe, "--synthetic", "--results-dir", tmp_path / "r")
    assert_one_line_error(result, "unknown recipe key 'train.target_top1'", "did you mean 'run.target'")


def test_existing_checkpoint_needs_resume_auto_or_none(tmp_path):
    from resnet50.train import parse_args, train

    (tmp_path / "checkpoint.pt").write_bytes(b"finished work")
    with pytest.raises(UserError, match="pass --resume auto to continue it, --resume none to start over"):
        train(parse_args(["--recipe", str(MODEL_DIR / "configs" / "digits_cpu.yaml"), "--synthetic",
                          "--results-dir", str(tmp_path)]))  # fmt: skip
    assert (tmp_path / "checkpoint.pt").read_bytes() == b"finished work"


def test_two_nodes_train_as_one_node(tmp_path, digits16):
    """scripts/check_two_nodes.sh on the CPU (gloo): two train.sh launches as two nodes of one process
    (--nnodes 2 --node-rank 0/1) log the same loss at every step as one node of two processes."""
    import subprocess

    out = tmp_path / "check"

    def check():
        return subprocess.run(
            ["bash", str(MODEL_DIR / "scripts" / "check_two_nodes.sh"), "--gpus-per-node", "1", "--results-dir", out,
             "--port", str(_free_port()), "--recipe", "configs/digits_cpu.yaml", "--data-dir", digits16,
             "--device", "cpu", "--image-size", "16", "--workers", "0", "--threads", "1", "--batch-size", "8",
             "--epochs", "1", "--steps-per-epoch", "3"],
            capture_output=True, text=True, timeout=600, cwd=str(MODEL_DIR),
            env=model_env(OMP_NUM_THREADS="1", PYTHON=sys.executable),
        )  # fmt: skip

    result = check()
    if result.returncode != 0 and "ChildFailedError" in result.stderr:
        # A launch that crashed (once in CI, 2026-11-27, rank 0 exit 1 after training; not reproduced in 12
        # runs, 8 of them beside three busy loops) is reported and launched again; different losses fail at once.
        warnings.warn(f"check_two_nodes.sh crashed, run again:\n{_first_error(result.stderr)}", stacklevel=1)
        result = check()
    assert result.returncode == 0, result.stdout[-2000:] + _first_error(result.stderr) + result.stderr[-1500:]
    assert "same losses at all 3 steps (--rtol 0)" in result.stdout
    assert losses(out / "one_node") == losses(out / "two_nodes") and len(losses(out / "one_node")) == 3


def _first_error(stderr: str) -> str:
    """The first process's failure in a launcher's output: its lines come before the others' and torchrun's."""
    lines = stderr.splitlines()
    start = next((i for i, line in enumerate(lines) if "Traceback" in line or "error:" in line), 0)
    return "\n".join(lines[max(0, start - 5) : start + 40]) + "\n...\n"


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_one_and_two_processes_reach_the_same_top1(tmp_path, digits16):
    """Time to quality: the digits recipe with a fixed global batch (optimizer.global_batch 32) on 1 process
    (2 micro-steps of 16) and on 2 processes (1 micro-step of 16 each), so the same batch per process, the
    same global batch and the same LR, reaches the same top-1 (within 5 points) after the same epochs."""
    import subprocess

    top1 = {}
    for processes in (1, 2):
        out = tmp_path / f"{processes}"
        result = subprocess.run(
            ["bash", str(MODEL_DIR / "scripts" / "train.sh"), "--gpus", str(processes), "--rdzv-endpoint",
             f"127.0.0.1:{_free_port()}", "--recipe", "configs/digits_cpu.yaml", "--data-dir", digits16,
             "--results-dir", out, "--device", "cpu", "--image-size", "16", "--workers", "0", "--threads", "1",
             "--batch-size", "16", "--set", "optimizer.global_batch=32", "--epochs", "2", "--log-every", "50"],
            capture_output=True, text=True, timeout=1200, cwd=str(MODEL_DIR),
            env=model_env(OMP_NUM_THREADS="1", PYTHON=sys.executable),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        assert "global batch 32" in result.stdout
        top1[processes] = val_records(out)[-1]["top1"]
    assert min(top1.values()) > 30.0, top1  # learnt (chance is 10%)
    assert abs(top1[1] - top1[2]) < 5.0, top1
