"""scripts/benchmark.sh on the CPU: ours against timm in both modes with the report and its table, and
the one-line errors."""

import json
import os
import subprocess
import sys

import pytest

TINY = [
    "--device",
    "cpu",
    "--recipe",
    "configs/digits_cpu.yaml",
    "--batch-size",
    "2",
    "--set",
    "data.image_size=32",
]
TIMING = ["--warmup", "1", "--iters", "2", "--windows", "2"]


def benchmark(model_dir, *flags, timeout=600, cwd=None):
    return subprocess.run(
        ["bash", str(model_dir / "scripts" / "benchmark.sh"), *map(str, flags)],
        capture_output=True, text=True, timeout=timeout, cwd=cwd or model_dir,
        env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip


def test_benchmark_script_reports_both_modes_on_cpu(model_dir, tmp_path):
    report = tmp_path / "bench.json"
    out = benchmark(model_dir, *TINY, *TIMING, "--models", "timm-eager,ours", "--set", "train.ema_decay=0.999",
                    "--latency-iters", "3", "--output", report)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(report.read_text())
    assert data["schema"] == "zoo.bench/v1" and data["meta"]["recipe"]["run"]["batch_per_gpu"] == 2
    rows = {(r["mode"], r["model"]): r for r in data["results"]}
    assert set(rows) == {
        ("train", "timm-eager"),
        ("train", "ours"),
        ("inference", "timm-eager"),
        ("inference", "ours"),
    }
    for r in rows.values():
        assert r["images_per_s"] > 0 and len(r["images_per_s_windows"]) == 2
        assert r["precision"] == "fp32" and r["batch_size"] == 2
    # ours is the recipe with its --set override; the baseline keeps timm's levers
    assert rows[("train", "ours")]["levers"]["compile"] is None  # digits_cpu.yaml stays eager
    assert rows[("inference", "ours")]["levers"]["fold_bn"] is True
    assert rows[("inference", "timm-eager")]["levers"]["fold_bn"] is False
    lat = rows[("inference", "ours")]["latency_bs1_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"]
    # The printed table carries each row's ratio to tv-eager (inference) of the same call.
    table = [line.split() for line in out.stdout.splitlines() if line.startswith(("train", "inference"))]
    assert [(t[0], t[1]) for t in table] == [("train", "timm-eager"), ("train", "ours"),
                                             ("inference", "timm-eager"), ("inference", "ours")]  # fmt: skip
    assert all(row[5] == "-" for row in table)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--trace", "t"], "benchmark.sh: error: --trace needs --profile"),
        (["--models", "ours,tv-eager"], "benchmark.sh: error: unknown model(s) tv-eager: choose from"),
        (
            ["--models", "loader"],
            "benchmark.sh: error: --models loader times the input pipeline: give --data-dir",
        ),
        (["--amp", "none"], "error: --amp none was renamed: use --amp fp32"),
    ],
)
def test_bad_flags_are_one_line(model_dir, tmp_path, flags, message):
    out = benchmark(model_dir, "--device", "cpu", *flags, timeout=120, cwd=tmp_path)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith(message), out.stderr
    assert len([line for line in lines if not line.startswith("usage:") and not line.startswith(" ")]) == 1
    assert not (tmp_path / "t").exists()  # nothing written on a bad command line
