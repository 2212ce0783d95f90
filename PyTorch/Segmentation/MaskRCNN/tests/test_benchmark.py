import json

import pytest
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
    main(["--smoke", "--device", "cpu", "--mode", "inference", "--amp", "bf16", "--output", str(out)])
    rows = {row["model"]: row for row in json.loads(out.read_text())["results"]}
    assert set(rows) == {"ours", "torchvision"}
    ratio = rows["ours"]["throughput"] / rows["torchvision"]["throughput"]
    assert rows["ours"]["speedup_vs_torchvision"] == pytest.approx(ratio)


def test_old_precision_flag_names_amp():
    with pytest.raises(SystemExit, match="^error: --precision was renamed: use --amp$"):
        main(["--smoke", "--precision", "bf16"])
