"""scripts/benchmark.sh on the CPU with tiny shapes: ours and the plain peer on the same batch, a table
and a JSON report (numbers are only measured on a GPU, never asserted)."""

import json
import subprocess

from rnnt_testutil import MODEL_DIR, RECIPE, subprocess_env


def test_benchmark_sh_writes_the_table_and_the_report(tmp_path):
    cmd = ["bash", str(MODEL_DIR / "scripts" / "benchmark.sh"), "--recipe", str(RECIPE), "--device", "cpu"]
    cmd += ["--batch-size", "2", "--set", "benchmark.seconds=0.5", "--set", "benchmark.labels=4"]
    cmd += ["--warmup", "0", "--steps", "1", "--windows", "1", "--output", str(tmp_path / "bench.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| peer | utt/s | batch | precision | device | date |" in proc.stdout
    assert "ours / plain:" in proc.stdout
    report = json.loads((tmp_path / "bench.json").read_text())
    assert [row["peer"] for row in report["results"]] == ["ours", "plain"]
    assert all(row["batch"] == 2 and row["throughput"] > 0 for row in report["results"])
    assert report["meta"]["command"].startswith("scripts/benchmark.sh")
