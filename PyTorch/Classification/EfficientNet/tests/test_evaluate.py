"""Evaluation of a checkpoint: the progress line, RESULTS_DIR/eval.json, the shared flags."""

import json

import torch
from efficientnet.model import efficientnet
from effnet_testutil import assert_one_line_error, run_module


def test_evaluate_shows_progress_and_writes_eval_json(tmp_path, digits16):
    torch.manual_seed(0)
    checkpoint = tmp_path / "ten.pt"
    torch.save(efficientnet("b0", width=0.25, num_classes=10).state_dict(), checkpoint)
    result = run_module(
        "efficientnet.evaluate", "--checkpoint", checkpoint, "--data-dir", digits16, "--num-classes", 10,
        "--width", 0.25, "--image-size", 16, "--batch-size", 8, "--workers", 1, "--device", "cpu",
        "--amp", "fp32", "--limit-batches", 3, "--results-dir", tmp_path / "out",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "preprocessing: resize 18, crop 16, bicubic" in result.stdout  # a seventh of 16 added
    progress = [line for line in result.stderr.splitlines() if line.startswith("eval")]
    assert progress and "3/3" in progress[-1] and "items/s" in progress[-1], result.stderr
    report = json.loads((tmp_path / "out" / "eval.json").read_text())
    assert report["checkpoint"] == str(checkpoint)
    assert 0 <= report["top1"] <= report["top5"] <= 100 and report["loss"] > 0


def test_evaluate_old_spellings_are_one_line(tmp_path):
    result = run_module("efficientnet.evaluate", "--amp", "none")
    assert_one_line_error(result, "--amp none was renamed: use --amp fp32")
