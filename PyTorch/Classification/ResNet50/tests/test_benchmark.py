"""The benchmark's pieces that carry meaning on any device: BN folding, parameter groups, overrides, the report."""

import json
import os
import subprocess
import sys

import pytest
import torch
from resnet50.benchmark import (
    INFERENCE_VARIANTS,
    TRAIN_VARIANTS,
    _apply_overrides,
    fold_batchnorm,
)
from resnet50.model import resnet50
from zoo.torch import parameter_groups


def test_fold_batchnorm_keeps_outputs_and_removes_every_bn():
    torch.manual_seed(0)
    net = resnet50(num_classes=10)
    with torch.no_grad():
        net.train()
        net(torch.randn(8, 3, 32, 32))  # non-trivial running statistics
    net.eval()
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = net(images)
        folded = fold_batchnorm(net)
        got = folded(images)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_param_groups_exempt_bn_and_bias_from_weight_decay():
    # the recipe's rule, shared by train.py and the benchmark
    net = resnet50(num_classes=10)
    decay, no_decay = parameter_groups(net, 1e-4)
    assert decay["weight_decay"] == 1e-4 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim > 1 for p in decay["params"])
    assert all(p.ndim == 1 for p in no_decay["params"])
    # 53 BatchNorms x (weight, bias) + the classifier bias
    assert len(no_decay["params"]) == 53 * 2 + 1
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(net.parameters()))


def test_overrides_parse_types_and_reject_unknown_levers():
    table = _apply_overrides(
        TRAIN_VARIANTS,
        ["ours-bf16.batch_size=384", "ours-bf16.channels_last=false", "ours-bf16.compile_mode=none"],
    )
    v = table["ours-bf16"]
    assert (v.batch_size, v.channels_last, v.compile_mode) == (384, False, None)
    assert TRAIN_VARIANTS["ours-bf16"].batch_size is None  # the defaults are untouched
    # --amp sets every variant's precision; an --override of one variant still wins over it
    table = _apply_overrides(TRAIN_VARIANTS, ["tv-eager.precision=bf16"], amp="fp16")
    assert table["ours-bf16"].precision == table["tv-compile"].precision == "fp16"
    assert table["tv-eager"].precision == "bf16"
    with pytest.raises(SystemExit, match="no lever"):
        _apply_overrides(TRAIN_VARIANTS, ["ours-bf16.warp_speed=9"])
    with pytest.raises(SystemExit, match="VARIANT.LEVER=VALUE"):
        _apply_overrides(INFERENCE_VARIANTS, ["ours-bf16"])


def test_benchmark_script_reports_both_modes_on_cpu(model_dir, tmp_path):
    report = tmp_path / "bench.json"
    cmd = [
        "bash", str(model_dir / "scripts" / "benchmark.sh"),
        "--device", "cpu", "--variants", "tv-eager,ours-eager", "--amp", "fp32",
        "--batch-size", "2", "--image-size", "32", "--num-classes", "10",
        "--warmup", "1", "--iters", "2", "--windows", "2", "--latency-iters", "3",
        "--output", str(report),
    ]  # fmt: skip
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable}
    )
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(report.read_text())
    assert data["schema"] == "zoo.bench/v1"
    rows = {(r["mode"], r["variant"]): r for r in data["results"]}
    assert set(rows) == {
        ("train", "tv-eager"),
        ("train", "ours-eager"),
        ("inference", "tv-eager"),
        ("inference", "ours-eager"),
    }
    for r in rows.values():
        assert r["images_per_s"] > 0
        assert len(r["images_per_s_windows"]) == 2
    assert rows[("train", "ours-eager")]["levers"]["fused_optimizer"] is True
    assert rows[("inference", "tv-eager")]["levers"]["fold_bn"] is False
    assert all(r["levers"]["precision"] == "fp32" for r in rows.values())  # --amp fp32 reached every variant
    lat = rows[("inference", "ours-eager")]["latency_bs1_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"]
    # The printed table carries a ratio against the torchvision row of each mode.
    table_lines = [line for line in out.stdout.splitlines() if line.startswith(("train", "inference"))]
    assert len(table_lines) == 4 and all("1.00x" in line for line in table_lines if "tv-eager" in line)


def test_benchmark_real_jpeg_pipeline_on_cpu(model_dir, tmp_path):
    """--make-jpegs writes an ImageNet-shaped set; the loader-only and training variants read it."""
    data, report = tmp_path / "jpegs", tmp_path / "bench.json"
    cmd = [
        "bash", str(model_dir / "scripts" / "benchmark.sh"),
        "--device", "cpu", "--mode", "train", "--variants", "loader-gpu-decode,loader-host-decode,ours-jpeg",
        "--override", "ours-jpeg.precision=fp32", "--override", "ours-jpeg.compile_mode=none",
        "--data-dir", str(data), "--make-jpegs", "12", "--workers", "1",
        "--batch-size", "4", "--image-size", "32", "--warmup", "1", "--iters", "2", "--windows", "1",
        "--output", str(report),
    ]  # fmt: skip
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable}
    )
    assert out.returncode == 0, out.stderr[-2000:]
    info = json.loads((data / ".complete").read_text())
    assert info["unique"] == 12 and info["classes"] == 12
    assert 50 < info["mean_kb"] < 250  # ImageNet-like files (its average is about 110 KB)
    assert len(list((data / "_unique").glob("*.jpg"))) == 12
    assert len(list((data / "train").rglob("*.jpg"))) == 48
    rows = {r["variant"]: r for r in json.loads(report.read_text())["results"]}
    assert set(rows) == {"loader-gpu-decode", "loader-host-decode", "ours-jpeg"}
    assert rows["ours-jpeg"]["levers"]["data"] == "gpu-decode"
    assert rows["loader-host-decode"]["levers"]["host_decode_share"] == 1.0
    assert all(r["images_per_s"] > 0 for r in rows.values())


def test_real_pipeline_variant_without_data_dir_is_one_line(model_dir):
    out = subprocess.run(
        ["bash", str(model_dir / "scripts" / "benchmark.sh"), "--device", "cpu", "--mode", "train",
         "--variants", "loader-pil"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1].startswith("variant loader-pil reads JPEGs: give --data-dir")


def test_scaling_runs_ddp_in_two_processes_on_cpu(model_dir, tmp_path):
    """--gpus 1,2 runs each variant under torchrun: DDP keeps the replicas equal although each
    process trains on its own batch, and the scaling column is img/s(N) / (N x img/s(1))."""
    report = tmp_path / "scaling.json"
    cmd = [
        "bash", str(model_dir / "scripts" / "benchmark.sh"),
        "--device", "cpu", "--mode", "train", "--gpus", "1,2", "--variants", "tv-eager,ours-ddp-bf16comm",
        "--override", "tv-eager.precision=fp32", "--override", "ours-ddp-bf16comm.precision=fp32",
        "--override", "ours-ddp-bf16comm.compile_mode=none", "--override", "ours-ddp-bf16comm.ddp_bucket_mb=1",
        "--batch-size", "2", "--image-size", "32", "--num-classes", "10",
        "--warmup", "1", "--iters", "2", "--windows", "1", "--output", str(report),
    ]  # fmt: skip
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable}
    )
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(report.read_text())
    rows = {(r["variant"], r["gpus"]): r for r in data["results"]}
    assert set(rows) == {("tv-eager", 1), ("tv-eager", 2), ("ours-ddp-bf16comm", 1), ("ours-ddp-bf16comm", 2)}
    for (name, gpus), r in rows.items():
        assert r["replicas_agree"] is (True if gpus == 2 else None)
        expected = r["images_per_s"] / (gpus * rows[(name, 1)]["images_per_s"])
        assert r["scaling"] == pytest.approx(expected)
    plain, ours = rows[("tv-eager", 2)]["levers"], rows[("ours-ddp-bf16comm", 2)]["levers"]
    assert (plain["ddp_static_graph"], plain["ddp_broadcast_buffers"], plain["ddp_comm"]) == (
        False,
        True,
        "fp32",
    )
    assert (ours["ddp_static_graph"], ours["ddp_broadcast_buffers"], ours["ddp_comm"]) == (
        True,
        False,
        "bf16",
    )
    assert ours["ddp_bucket_mb"] == 1
    table = [line.split() for line in out.stdout.splitlines() if line.startswith(("tv-eager", "ours-ddp"))]
    assert [(t[0], t[1]) for t in table] == [
        ("tv-eager", "1"), ("tv-eager", "2"), ("ours-ddp-bf16comm", "1"), ("ours-ddp-bf16comm", "2")
    ]  # fmt: skip


def test_scaling_rejects_real_data_and_too_many_gpus(model_dir):
    run = lambda *extra: subprocess.run(  # noqa: E731
        ["bash", str(model_dir / "scripts" / "benchmark.sh"), "--mode", "train", *extra],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    out = run("--device", "cpu", "--gpus", "2", "--variants", "ours-jpeg")
    assert out.returncode != 0
    assert (
        out.stderr.strip().splitlines()[-1]
        == "--gpus times synthetic training variants only, not ['ours-jpeg']"
    )
    out = run("--device", "cpu", "--gpus", "two")
    assert out.returncode != 0 and "expected GPU counts such as 1,2,4" in out.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--trace", "t"], "--trace needs --profile"),
        (
            ["--profile", "--trace", "t", "--gpus", "1,2"],
            "--trace writes one process's timeline: leave out --gpus",
        ),
    ],
)
def test_trace_flag_errors_are_one_line(model_dir, tmp_path, flags, message):
    out = subprocess.run(
        ["bash", str(model_dir / "scripts" / "benchmark.sh"), "--device", "cpu", "--mode", "train", *flags],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1] == f"benchmark.sh: error: {message}"
    assert not (tmp_path / "t").exists()  # nothing written on a bad command line


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--json", "r.json"], "error: --json was renamed: use --output"),
        (["--amp", "none"], "error: --amp none was renamed: use --amp fp32"),
        (["--precision", "fp16"], "error: --precision was renamed: use --amp"),
    ],
)
def test_old_flag_spellings_are_one_line(model_dir, flags, message):
    out = subprocess.run(
        ["bash", str(model_dir / "scripts" / "benchmark.sh"), "--device", "cpu", *flags],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert out.returncode != 0 and out.stderr.strip().splitlines() == [message]
