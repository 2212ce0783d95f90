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
    ours = results["train_ours"]
    levers = (ours["fused_qkv"], ours["fused_cross_kv"], ours["compile"], ours["fused_adam"])
    assert levers == (True, True, None, False)
    assert ours["first_step_s"] > 0
    assert results["train_marian"]["compiled"] is False


def test_benchmark_levers_follow_set_and_translation_can_be_skipped(tmp_path):
    args = ["--recipe", str(RECIPE), "--vocab-size", "100", "--batch-size", "2", "--seq-len", "6"]
    args += ["--warmup", "0", "--iters", "1", "--windows", "1", "--device", "cpu", "--no-marian"]
    args += ["--no-translation", "--set", "model.fused_qkv=false", "--set", "optimizer.fused=true"]
    results = main(args + ["--results-dir", str(tmp_path)])
    assert set(results) == {"train_ours"}
    assert (results["train_ours"]["fused_qkv"], results["train_ours"]["fused_adam"]) == (False, True)
