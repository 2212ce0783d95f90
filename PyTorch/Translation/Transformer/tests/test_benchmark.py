import json
from pathlib import Path

from transformer.benchmark import main

RECIPE = Path(__file__).resolve().parents[1] / "configs" / "numbers_cpu.yaml"


def test_benchmark_measures_ours_and_marian(tmp_path):
    args = ["--recipe", str(RECIPE), "--vocab-size", "100", "--batch-size", "4", "--seq-len", "8"]
    args += ["--warmup", "1", "--iters", "2", "--windows", "1", "--translate-batch", "2", "--device", "cpu"]
    results = main(args + ["--results-dir", str(tmp_path)])
    assert results["train_ours"]["throughput"] > 0
    assert results["train_marian"]["throughput"] > 0
    assert results["translate_beam4_ours"]["throughput"] > 0
    report = json.loads((tmp_path / "benchmark.json").read_text())
    assert report["schema"] == "zoo.bench/v1"
    assert {r["name"] for r in report["results"]} >= {
        "train_ours",
        "train_marian",
        "train_ratio_ours_over_marian",
    }
