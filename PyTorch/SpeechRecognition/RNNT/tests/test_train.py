"""Training on speech: the WER falls well below a blank output's, the MLPerf log passes the checker, a
killed run resumes to the same weights, two gloo processes train as one model."""

import json
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from rnnt_testutil import MODEL_DIR, subprocess_env, train_args


def test_wer_falls_well_below_a_blank_output(trained, spoken_data):
    import jiwer
    from rnnt.data import read_manifest

    results, summary = trained
    references = [entry["text"] for entry in read_manifest(spoken_data, "dev")]
    blank_wer = jiwer.wer(references, [""] * len(references))
    assert blank_wer == 1.0
    assert summary["wer"] < 0.75 * blank_wer, summary
    records = [json.loads(line) for line in (results / "metrics.jsonl").read_text().splitlines()]
    losses = [r["metrics"]["loss"] for r in records if r["phase"] == "train" and "loss" in r["metrics"]]
    assert losses[-1] < 0.3 * losses[0], losses
    assert [r["metrics"]["wer"] for r in records if r["phase"] == "eval"] == [summary["wer"]]
    assert any((results / "tensorboard").iterdir())
    # the best training checkpoint alone (recipe, SentencePiece model, averaged weights) scores the same
    from rnnt.evaluate import main as evaluate

    again = evaluate(
        ["--checkpoint", str(results / "best.pt"), "--data-dir", str(spoken_data), "--split", "dev"]
    )
    assert again["wer"] == pytest.approx(summary["wer"]), (again, summary)


def test_mlperf_log_passes_the_checker(trained):
    from zoo.mlperf import check_log

    results, _ = trained
    output = check_log(results / "mlperf.log", "rnnt")
    assert "training_3.1.0/open_rnnt.yaml" in output


def test_transcribe_sh_prints_what_evaluation_scored(trained, spoken_data):
    from rnnt.data import read_manifest
    from rnnt.inference import load_recognizer

    results, _ = trained
    entry = read_manifest(spoken_data, "dev")[0]
    cmd = ["bash", str(MODEL_DIR / "scripts" / "transcribe.sh"), str(spoken_data / entry["audio"])]
    cmd += ["--checkpoint", str(results / "model.pt"), "--device", "cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from rnnt.data import read_audio

    expected = load_recognizer(results / "model.pt").transcribe([read_audio(spoken_data / entry["audio"])])
    assert proc.stdout.strip() == expected[0]


def test_resume_after_a_kill_and_after_sigterm_equals_an_unbroken_run(spoken_data, tmp_path):
    """kill -9 once the first checkpoint is written; the resumed run is sent SIGTERM after update 17
    (mid-epoch 2, no checkpoint due): exit 143 with a checkpoint of update 17; --resume auto again ends
    with the unbroken run's weights."""
    from rnnt.train import main
    from zoo.testing import sigterm_at_step

    extra = ["--epochs", "2", "--set", "run.checkpoint_every=3 steps"]
    main(train_args(spoken_data, tmp_path / "unbroken", *extra))
    broken = tmp_path / "broken"
    cmd = [sys.executable, "-m", "rnnt.train", *train_args(spoken_data, broken, *extra)]
    proc = subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (broken / "checkpoint.pt").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (broken / "model.pt").exists(), "the run ended before it was killed"
    killed_at = torch.load(broken / "checkpoint.pt", weights_only=False)["step"]
    assert 0 < killed_at < 17
    cmd = sigterm_at_step(17, "rnnt.train", *train_args(spoken_data, broken, *extra, "--resume", "auto"))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert proc.returncode == 143 and "terminated (SIGTERM)" in proc.stderr, proc.stderr[-2000:]
    stopped = torch.load(broken / "checkpoint.pt", weights_only=False)
    assert (stopped["step"], stopped["epoch"], stopped["step_in_epoch"]) == (17, 1, 5)
    summary = main(train_args(spoken_data, broken, *extra, "--resume", "auto"))
    assert summary["step"] == 24
    a = torch.load(tmp_path / "unbroken" / "model.pt", weights_only=False)["model"]
    b = torch.load(broken / "model.pt", weights_only=False)["model"]
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert (broken / "mlperf_resume2.log").is_file()


def test_two_process_torchrun(spoken_data, tmp_path):
    with socket.socket() as probe:  # torchrun's --master_port 0 does not pick a free port: pick one
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port]
    cmd += ["-m", "rnnt.train", *train_args(spoken_data, tmp_path, "--epochs", "1", "--batch-size", "2")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "weights identical on all 2 ranks" in proc.stdout + proc.stderr
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 12  # 48 utterances, 2 per rank, 2 ranks


def cpu_runs_bf16_lstms() -> bool:
    """oneDNN's bf16 LSTM needs AVX-512 (BF16) on the CPU."""
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.LSTM(4, 4, batch_first=True)(torch.randn(1, 2, 4))
    except RuntimeError:
        return False
    return True


@pytest.mark.parametrize("amp", ["bf16"])
def test_mixed_precision_trains_on_the_cpu(spoken_data, tmp_path, amp):
    from rnnt.train import main

    if not cpu_runs_bf16_lstms():
        pytest.skip("this CPU has no bf16 LSTM in oneDNN (it needs AVX-512 BF16)")

    summary = main(train_args(spoken_data, tmp_path, "--epochs", "1", "--amp", amp))
    assert summary["step"] == 12 and summary["wer"] is not None


def test_target_wer_stops_the_run(spoken_data, tmp_path):
    from rnnt.train import main

    args = ["--epochs", "3", "--set", "run.eval_every=1 epoch", "--target-wer", "1.0"]
    summary = main(train_args(spoken_data, tmp_path, *args))
    assert summary["status"] == "success" and summary["step"] == 12
    log = (tmp_path / "mlperf.log").read_text()
    assert log.count('"key": "epoch_start"') == 1 and '"status": "success"' in log
