import json

import pytest
from ssd.benchmark import main


def test_smoke_benchmark_writes_a_report_timed_by_zoo_bench(tmp_path):
    out = tmp_path / "bench.json"
    main(["--smoke", "--device", "cpu", "--models", "ours", "--amp", "fp32", "--output", str(out)])
    report = json.loads(out.read_text())
    assert report["schema"] == "zoo.bench/v1"
    rows = {row["mode"]: row for row in report["results"]}
    assert set(rows) == {"train", "inference"}
    for row in rows.values():
        assert row["amp"] == "fp32" and row["batch_size"] == 2 and row["world_size"] == 1
        assert row["items"] == 2 * 2  # batch 2 x 2 timed iterations after 1 warm-up
        assert row["throughput"] > 0 and 0 < row["latency_ms"]["p50"] <= row["latency_ms"]["p99"]


def test_old_precision_flag_names_amp():
    with pytest.raises(SystemExit, match="^error: --precision was renamed: use --amp$"):
        main(["--smoke", "--precision", "bf16"])
