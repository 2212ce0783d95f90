"""The benchmark times the training step and inference through zoo.bench.measure and writes its report."""

from __future__ import annotations

import json

from resnet50_mx.benchmark import main


def test_benchmark_report_has_throughput_and_latency(tmp_path):
    output = tmp_path / "bench.json"
    argv = ["--image-size", "32", "--num-classes", "10", "--batch-size", "2", "--steps", "2"]
    main([*argv, "--warmup", "1", "--inference-batch-sizes", "2", "--output", str(output)])
    report = json.loads(output.read_text())
    results = report["results"]
    assert [(r["mode"], r["batch_size"]) for r in results] == [("train", 2), ("inference", 2)]
    for result in results:
        assert result["amp"] == "fp32" and result["items"] == 2 * result["batch_size"]
        assert result["throughput"] > 0
        latency = result["latency_ms"]
        assert 0 < latency["p50"] <= latency["p99"]
        # two synchronised calls in one window: the window holds at least the calls' own time
        assert result["window_seconds"][0] * 1e3 >= 2 * latency["mean"] * 0.99
