"""scripts/benchmark.sh on the CPU: both modes with the report, the real input pipeline, the scaling
mode (--gpus, zoo.scaling) in two gloo processes, and its one-line errors."""

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
    out = benchmark(model_dir, *TINY, *TIMING, "--models", "tv-eager,ours", "--set", "optimizer.fused=true",
                    "--latency-iters", "3", "--output", report)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(report.read_text())
    assert data["schema"] == "zoo.bench/v1" and data["meta"]["recipe"]["run"]["batch_per_gpu"] == 2
    rows = {(r["mode"], r["model"]): r for r in data["results"]}
    assert set(rows) == {
        ("train", "tv-eager"),
        ("train", "ours"),
        ("inference", "tv-eager"),
        ("inference", "ours"),
    }
    for r in rows.values():
        assert r["images_per_s"] > 0 and len(r["images_per_s_windows"]) == 2
        assert r["precision"] == "fp32" and r["batch_size"] == 2
    # ours is the recipe with its --set override; the baseline keeps torchvision's levers
    assert rows[("train", "ours")]["levers"]["fused_optimizer"] is True
    assert rows[("train", "ours")]["levers"]["compile"] is None  # digits_cpu.yaml stays eager
    assert rows[("inference", "ours")]["levers"]["fold_bn"] is True
    assert rows[("inference", "tv-eager")]["levers"]["fold_bn"] is False
    lat = rows[("inference", "ours")]["latency_bs1_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"]
    # The printed table carries each row's ratio to tv-eager (inference) of the same call.
    table = [line.split() for line in out.stdout.splitlines() if line.startswith(("train", "inference"))]
    assert [(t[0], t[1]) for t in table] == [("train", "tv-eager"), ("train", "ours"),
                                             ("inference", "tv-eager"), ("inference", "ours")]  # fmt: skip
    assert table[2][5] == "1.00x" and table[0][5] == "-"  # no tv-compile row to compare training with
    ratio = rows[("inference", "ours")]["images_per_s"] / rows[("inference", "tv-eager")]["images_per_s"]
    assert table[3][5] == f"{ratio:.2f}x"


def test_benchmark_real_jpeg_pipeline_on_cpu(model_dir, tmp_path):
    """--make-jpegs writes an ImageNet-shaped set; ours trains on the recipe's pipeline and loader times it alone."""
    data, report = tmp_path / "jpegs", tmp_path / "bench.json"
    out = benchmark(model_dir, *TINY, "--mode", "train", "--models", "loader,ours", "--data-dir", data,
                    "--make-jpegs", "12", "--set", "data.backend=gpu-decode", "--set", "data.workers=1",
                    "--warmup", "1", "--iters", "2", "--windows", "1", "--output", report)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    info = json.loads((data / ".complete").read_text())
    assert info["unique"] == 12 and info["classes"] == 12
    assert 50 < info["mean_kb"] < 250  # ImageNet-like files (its average is about 110 KB)
    assert len(list((data / "_unique").glob("*.jpg"))) == 12
    assert len(list((data / "train").rglob("*.jpg"))) == 48
    rows = {r["model"]: r for r in json.loads(report.read_text())["results"]}
    assert set(rows) == {"loader", "ours"}
    assert rows["ours"]["input"] == rows["loader"]["input"] == "gpu-decode"
    assert all(r["images_per_s"] > 0 for r in rows.values())


@pytest.mark.timeout(300)
def test_scaling_mode_times_the_recipe_step_in_two_gloo_processes(model_dir, tmp_path):
    """--gpus 2 hands over to zoo.scaling: the recipe's step (DDP over gloo) in 1 and in 2 processes,
    launched as train.sh launches, replicas equal after the timed steps, scaling against 1 process."""
    report = tmp_path / "scaling.json"
    out = benchmark(model_dir, "--gpus", "2", "--recipe", "configs/digits_cpu.yaml", "--batch-size", "2",
                    "--set", "data.image_size=16", "--window-seconds", "0.2", "--windows", "1", "--warmup", "1",
                    "--output", report, timeout=280)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(report.read_text())["results"]
    assert [row["gpus"] for row in rows] == [1, 2]
    assert [row["replicas_agree"] for row in rows] == [None, True]
    assert all(row["batch_per_gpu"] == 2 and row["unit"] == "img/s" and row["throughput"] > 0 for row in rows)
    assert rows[1]["scaling"] == pytest.approx(rows[1]["throughput"] / (2 * rows[0]["throughput"]))
    assert "scripts/benchmark.sh --gpus 2" in out.stdout and "equal" in out.stdout


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--trace", "t"], "benchmark.sh: error: --trace needs --profile"),
        (["--models", "ours,resnet"], "benchmark.sh: error: unknown model(s) resnet: choose from"),
        (
            ["--models", "loader"],
            "benchmark.sh: error: --models loader times the input pipeline: give --data-dir",
        ),
        (["--set", "train.compile=fast"], "error: train.compile must be false or one of default"),
        (["--json", "r.json"], "error: --json was renamed: use --output"),
        (["--variants", "ours-bf16"], "error: --variants was renamed: use --models"),
        (["--amp", "none"], "error: --amp none was renamed: use --amp fp32"),
        (["--precision", "fp16"], "error: --precision was renamed: use --amp"),
    ],
)
def test_bad_flags_are_one_line(model_dir, tmp_path, flags, message):
    out = benchmark(model_dir, "--device", "cpu", *flags, timeout=120, cwd=tmp_path)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith(message), out.stderr
    assert len([line for line in lines if not line.startswith("usage:") and not line.startswith(" ")]) == 1
    assert not (tmp_path / "t").exists()  # nothing written on a bad command line


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--gpus", "1,2", "--mode", "inference"],
            "error: benchmark.sh --gpus does not take --mode inference",
        ),
        (["--gpus", "two"], "error: --gpus 'two': expected GPU counts such as 1,2,4"),
        (["--gpus", "2", "--window-seconds", "0"], "error: --warmup must be >= 0, --windows >= 1"),
    ],
)
def test_scaling_mode_bad_flags_are_one_line(model_dir, tmp_path, flags, message):
    out = benchmark(model_dir, *flags, timeout=120, cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(message), out.stderr
