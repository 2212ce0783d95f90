import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformer.evaluate import score_bleu
from transformer.train import main
from zoo.errors import UserError

MODEL_DIR = Path(__file__).resolve().parents[1]
RECIPE = MODEL_DIR / "configs" / "numbers_cpu.yaml"


def train_args(data, results, *extra) -> list[str]:
    return ["--recipe", str(RECIPE), "--data-dir", str(data), "--results-dir", str(results), "--device", "cpu",
            *map(str, extra)]  # fmt: skip


def run(data, results, *extra):
    return main(train_args(data, results, *extra))


def test_bleu_rises_far_above_the_copy_baseline(trained, numbers_data):
    results, summary = trained
    src = (numbers_data / "valid.en").read_text().splitlines()
    refs = (numbers_data / "valid.de").read_text().splitlines()
    copy_bleu, _ = score_bleu(src, refs)
    assert copy_bleu < 2.0
    assert summary["bleu"] > copy_bleu + 30.0, summary
    assert "tok:13a" in summary["signature"] and "version:" in summary["signature"]
    lines = [json.loads(line) for line in (results / "metrics.jsonl").read_text().splitlines()]
    losses = [r["metrics"]["loss"] for r in lines if r.get("phase") == "train"]
    assert losses[-1] < losses[0] - 1.0
    assert [r["metrics"]["bleu"] for r in lines if r.get("phase") == "eval"][-1] == pytest.approx(
        summary["bleu"]
    )
    assert list((results / "tensorboard").glob("events.out.tfevents.*"))


def test_mlperf_log_passes_once_bleu_reaches_25(trained):
    from zoo.mlperf import check_log

    results, summary = trained
    assert summary["bleu"] >= 25.0
    assert "SUCCESS" in check_log(results / "mlperf.log", "transformer")


def test_a_tiny_run_fails_the_mlperf_check_only_on_the_bleu_target(small_data, tmp_path):
    from zoo.mlperf import MLPerfComplianceError, check_log

    summary = run(small_data, tmp_path, "--epochs", "1")
    assert summary["bleu"] < 25.0
    with pytest.raises(MLPerfComplianceError) as failure:
        check_log(tmp_path / "mlperf.log", "transformer")
    report = str(failure.value)
    assert "0.7.0" in report.splitlines()[0]
    complaints = [line for line in report.splitlines()[1:] if line.startswith(("WARNING", "ERROR"))]
    assert complaints == [
        "WARNING -  Failed checks for eval_accuracy : v['value'] >= 0.2500 and v['value'] < 1",
        "ERROR - FAILED",
    ], report


def test_resume_and_sigterm_equal_an_unbroken_run(small_data, tmp_path):
    """A run of 1 epoch extended to 2 by --resume auto is sent SIGTERM mid-epoch 2 (a scheduler's
    preemption): exit 143 with a checkpoint of that update, and --resume auto again ends with the unbroken
    run's weights."""
    from zoo.testing import sigterm_at_step

    unbroken = run(small_data, tmp_path / "unbroken", "--epochs", "2")
    first = run(small_data, tmp_path / "broken", "--epochs", "1")
    at = first["step"] + first["step"] // 2  # mid-epoch 2
    assert first["step"] < at < unbroken["step"]
    args = train_args(small_data, tmp_path / "broken", "--epochs", "2", "--resume", "auto")
    cmd = sigterm_at_step(at, "transformer.train", *args)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=MODEL_DIR, timeout=300)
    assert proc.returncode == 143 and "terminated (SIGTERM)" in proc.stderr, proc.stderr[-2000:]
    stopped = torch.load(tmp_path / "broken" / "checkpoint.pt", weights_only=False)
    assert (stopped["step"], stopped["epoch"]) == (at, 1)
    resumed = run(small_data, tmp_path / "broken", "--epochs", "2", "--resume", "auto")
    assert resumed["step"] == unbroken["step"]
    a = torch.load(tmp_path / "unbroken" / "model.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "broken" / "model.pt", weights_only=False)["model"]
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert (tmp_path / "broken" / "mlperf_resume2.log").is_file()


def test_existing_checkpoint_needs_a_resume_choice(small_data, tmp_path):
    run(small_data, tmp_path, "--epochs", "1", "--target-bleu", "0")
    with pytest.raises(SystemExit, match="--resume auto"):
        run(small_data, tmp_path, "--epochs", "1")


def test_target_bleu_stops_the_run(small_data, tmp_path):
    summary = run(small_data, tmp_path, "--epochs", "3", "--target-bleu", "0")
    assert summary["status"] == "success"
    log = (tmp_path / "mlperf.log").read_text()
    assert log.count('"key": "epoch_start"') == 1
    assert '"status": "success"' in log


def test_two_process_torchrun(small_data, tmp_path):
    env = dict(os.environ, PYTHONPATH=f"{MODEL_DIR}:{os.environ.get('PYTHONPATH', '')}", OMP_NUM_THREADS="1")
    with socket.socket() as probe:  # torchrun's --master_port 0 does not pick a free port: pick one
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port]
    cmd += ["-m", "transformer.train", "--recipe", str(RECIPE), "--data-dir", str(small_data)]
    cmd += ["--results-dir", str(tmp_path), "--device", "cpu", "--epochs", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "weights identical on all 2 ranks" in proc.stdout + proc.stderr
    assert (tmp_path / "model.pt").is_file()


def test_missing_vocabulary_is_a_one_line_error(small_data, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for shard in small_data.glob("train.*.npz"):
        (data / shard.name).write_bytes(shard.read_bytes())
    with pytest.raises(SystemExit, match="no vocabulary"):
        run(data, tmp_path / "results")
    assert not (tmp_path / "results" / "checkpoint.pt").exists()


def test_mismatched_parallel_files_are_a_one_line_error(tmp_path):
    from transformer.data import prepare

    (tmp_path / "a.en").write_text("one\ntwo\n")
    (tmp_path / "a.de").write_text("eins\n")
    with pytest.raises(UserError, match="has 2 lines but .* has 1"):
        prepare({"train": (tmp_path / "a.en", tmp_path / "a.de")}, tmp_path / "out", vocab_size=50)
    assert not (tmp_path / "out" / "tokenizer.json").exists()


def test_train_sh_reports_a_bad_flag_in_one_line():
    proc = subprocess.run(
        ["bash", str(MODEL_DIR / "scripts" / "train.sh"), "--config", "x.yaml"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHON=sys.executable),
        timeout=120,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == ["error: --config was renamed: use --recipe"]


def test_averaged_checkpoints_hold_the_mean_weights(small_data, tmp_path):
    from transformer.average import main as average
    from transformer.evaluate import main as evaluate

    run(small_data, tmp_path, "--epochs", "3", "--set", "train.keep_checkpoints=2")
    kept = sorted(tmp_path.glob("checkpoint_epoch*.pt"))
    assert [p.name for p in kept] == ["checkpoint_epoch002.pt", "checkpoint_epoch003.pt"]
    out = average([str(p) for p in kept] + ["--output", str(tmp_path / "averaged.pt")])
    first, second = (torch.load(p, weights_only=False)["model"] for p in kept)
    mean = torch.load(out, weights_only=False)["model"]
    key = "decoder.0.ffn.0.weight"
    torch.testing.assert_close(mean[key], (first[key] + second[key]) / 2)
    summary = evaluate(
        ["--checkpoint", str(out), "--data-dir", str(small_data), "--split", "valid"]
        + ["--results-dir", str(tmp_path / "eval"), "--beam", "2"]
    )
    assert summary["sentences"] == 40 and "signature" in summary
    # best.pt, the epoch whose BLEU beat the others, evaluates alone (its recipe's decoding) to that BLEU
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    scored = [r["metrics"]["bleu"] for r in records if r["phase"] == "eval"]
    best = evaluate(["--checkpoint", str(tmp_path / "best.pt"), "--data-dir", str(small_data), "--split", "valid",
                     "--results-dir", str(tmp_path / "best")])  # fmt: skip
    assert len(scored) == 3 and best["bleu"] == pytest.approx(max(scored)), (best, scored)


def test_evaluate_a_file_with_mismatched_reference_is_a_one_line_error(trained, tmp_path):
    from transformer.evaluate import main as evaluate

    results, _ = trained
    (tmp_path / "in.en").write_text("one , two\nthree , four\n")
    (tmp_path / "ref.de").write_text("eins zwei\n")
    with pytest.raises(SystemExit, match="has 2 lines but .* has 1"):
        evaluate(
            ["--checkpoint", str(results / "model.pt"), "--input", str(tmp_path / "in.en")]
            + ["--reference", str(tmp_path / "ref.de"), "--results-dir", str(tmp_path / "eval")]
        )
    assert not (tmp_path / "eval").exists()


def test_evaluate_sh_offers_only_flags_it_uses():
    """The checkpoint carries the model and its decoding settings: evaluate takes no recipe."""
    script = str(MODEL_DIR / "scripts" / "evaluate.sh")
    env = dict(os.environ, PYTHON=sys.executable)
    shown = subprocess.run(["bash", script, "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    for flag in ("--checkpoint", "--data-dir", "--results-dir", "--amp {bf16,fp16,fp32}", "--beam"):
        assert flag in shown.stdout, flag
    assert "--recipe" not in shown.stdout and "--set" not in shown.stdout, shown.stdout
    refused = subprocess.run(
        ["bash", script, "--checkpoint", "model.pt", "--recipe", "x.yaml"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].endswith("unrecognized arguments: --recipe x.yaml")


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_mixed_precision_trains_on_the_cpu(small_data, tmp_path, amp):
    summary = run(small_data, tmp_path, "--epochs", "1", "--amp", amp)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses = [r["metrics"]["loss"] for r in lines if r.get("phase") == "train"]
    assert losses and all(0 < loss < 20 for loss in losses), losses
    assert summary["bleu"] is not None
