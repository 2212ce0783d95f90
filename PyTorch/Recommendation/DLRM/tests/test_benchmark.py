import json

from dlrm_testing import MODEL_DIR, run_module


def test_benchmark_reports_ours_and_eager_on_cpu(tmp_path):
    out = tmp_path / "bench.json"
    run_module(
        "dlrm.benchmark",
        "--rows",
        "1000",
        "--batch-size",
        "256",
        "--warmup",
        "1",
        "--iters",
        "2",
        "--windows",
        "1",
        "--amp",
        "bf16",
        "--output",
        str(out),
        "--recipe",
        str(MODEL_DIR / "configs" / "dlrm_small_plain.yaml"),
    )
    report = json.loads(out.read_text())
    names = [r["name"] for r in report["results"]]
    assert names == ["ours (plain embeddings)", "eager PyTorch DLRM (EmbeddingBag per table, SGD)"]
    assert all(r["train_samples_per_s"] > 0 for r in report["results"])
    assert report["meta"]["amp"] == "bf16" and report["meta"]["ratio_ours_to_eager"] > 0
