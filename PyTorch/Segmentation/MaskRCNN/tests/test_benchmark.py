import json

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
    args = ["--smoke", "--device", "cpu", "--mode", "inference", "--amp", "bf16", "--output", str(out)]
    main([*args, "--set", "speed.rpn_nms=torchvision"])
    rows = {row["model"]: row for row in json.loads(out.read_text())["results"]}
    assert set(rows) == {"ours", "torchvision"}
    ratio = rows["ours"]["throughput"] / rows["torchvision"]["throughput"]
    assert rows["ours"]["speedup_vs_torchvision"] == pytest.approx(ratio)


def test_old_precision_flag_names_amp():
    with pytest.raises(SystemExit, match="^error: --precision was renamed: use --amp$"):
        main(["--smoke", "--precision", "bf16"])


def test_ours_is_the_recipe_with_set_overrides_and_the_train_step(monkeypatch):
    import maskrcnn.train
    from maskrcnn.benchmark import build, parse_args, steps_for

    tiny = str(MODEL_DIR / "configs" / "shapes_cpu.yaml")
    a = parse_args(
        ["--smoke", "--device", "cpu", "--recipe", tiny, "--amp", "fp32"]
        + ["--set", "model.box_detections_per_img=7", "--set", "speed.compile=false"]
    )
    model, recipe = build("ours", a)
    assert model.roi_heads.detections_per_img == 7  # the second --set did not drop the first
    assert recipe["speed"] == {"compile": False, "cudnn_benchmark": False, "rpn_nms": "torchvision"}
    calls = []
    real = maskrcnn.train.train_step
    monkeypatch.setattr(maskrcnn.train, "train_step", lambda *x, **k: calls.append(k) or real(*x, **k))
    train, _ = steps_for(model, recipe, a, torch.device("cpu"))
    train()
    assert calls == [{"device": torch.device("cpu"), "amp": "fp32"}]


def test_unknown_recipe_key_in_set_names_the_nearest():
    with pytest.raises(SystemExit, match="speed.compile"):
        main(["--smoke", "--device", "cpu", "--models", "ours", "--set", "speed.compiel=false"])
