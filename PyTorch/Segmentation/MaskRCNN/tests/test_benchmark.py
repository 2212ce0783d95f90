import json
import os
import subprocess
import sys

import pytest
import torch
from maskrcnn.benchmark import main

from .conftest import MODEL_DIR


def test_smoke_benchmark_times_train_and_inference_with_zoo_bench(tmp_path):
    out = tmp_path / "bench.json"
    tiny = str(MODEL_DIR / "configs" / "shapes_cpu.yaml")
    main(
        [
            "--smoke",
            "--device",
            "cpu",
            "--recipe",
            tiny,
            "--models",
            "ours",
            "--amp",
            "fp32",
            "--output",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert report["schema"] == "zoo.bench/v1"
    rows = {row["mode"]: row for row in report["results"]}
    assert set(rows) == {"train", "inference"}
    for row in rows.values():
        assert row["amp"] == "fp32" and row["batch_size"] == 1 and row["image_size"] == 128
        assert row["items"] == 1  # batch 1 x 1 timed iteration after 1 warm-up
        assert row["throughput"] > 0 and 0 < row["latency_ms"]["p50"] <= row["latency_ms"]["p99"]


def test_ours_and_torchvision_in_one_run_give_a_ratio(tmp_path):
    out = tmp_path / "bench.json"
    # the 1-GPU recipe's batched RPN NMS would run in Triton's interpreter here (seconds a step)
    args = ["--smoke", "--device", "cpu", "--mode", "inference", "--amp", "fp32", "--output", str(out)]
    main([*args, "--set", "speed.rpn_nms=torchvision"])
    rows = {row["model"]: row for row in json.loads(out.read_text())["results"]}
    assert set(rows) == {"ours", "torchvision"}
    ratio = rows["ours"]["throughput"] / rows["torchvision"]["throughput"]
    assert rows["ours"]["speedup_vs_torchvision"] == pytest.approx(ratio)


def test_old_precision_flag_names_amp():
    with pytest.raises(SystemExit, match="^error: --precision was renamed: use --amp$"):
        main(["--smoke", "--precision", "bf16"])


def test_ours_is_the_recipe_with_set_overrides_and_the_train_step(monkeypatch):
    import maskrcnn.step
    from maskrcnn.benchmark import benchmark_recipe, build, parse_args, steps_for

    tiny = str(MODEL_DIR / "configs" / "shapes_cpu.yaml")
    a = parse_args(
        ["--smoke", "--device", "cpu", "--recipe", tiny, "--amp", "fp32"]
        + ["--set", "model.box_detections_per_img=7", "--set", "speed.compile=false"]
    )
    recipe = benchmark_recipe(a)
    model = build("ours", recipe)
    assert model.roi_heads.detections_per_img == 7  # the second --set did not drop the first
    assert recipe["speed"] == {"compile": False, "cudnn_benchmark": False, "rpn_nms": "torchvision"}
    calls = []
    real = maskrcnn.step.TrainStep.__call__
    monkeypatch.setattr(
        maskrcnn.step.TrainStep,
        "__call__",
        lambda step, *x: calls.append((step.device, step.amp)) or real(step, *x),
    )
    train, _ = steps_for(model, recipe, a, torch.device("cpu"), speed=True)
    train()
    assert calls == [(torch.device("cpu"), "fp32")]


def test_unknown_recipe_key_in_set_names_the_nearest():
    with pytest.raises(SystemExit, match="speed.compile"):
        main(["--smoke", "--device", "cpu", "--models", "ours", "--set", "speed.compiel=false"])


@pytest.mark.timeout(600)
def test_gpus_times_the_recipe_step_on_one_and_two_processes(tmp_path):
    # Two gloo processes on the CPU: the shared scaling mode (zoo.scaling) over the CPU recipe's step.
    out = tmp_path / "scaling.json"
    tiny = str(MODEL_DIR / "configs" / "shapes_cpu.yaml")
    command = ["bash", str(MODEL_DIR / "scripts" / "benchmark.sh"), "--gpus", "2", "--recipe", tiny]
    command += ["--window-seconds", "0.2", "--windows", "1", "--warmup", "1", "--output", str(out)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["results"]
    assert [row["gpus"] for row in rows] == [1, 2]
    assert [row["replicas_agree"] for row in rows] == [None, True]
    assert all(row["batch_per_gpu"] == 2 and row["unit"] == "img/s" and row["throughput"] > 0 for row in rows)
    assert rows[0]["scaling"] == pytest.approx(1.0) and "scripts/benchmark.sh --gpus 2" in done.stdout
