import json
import os
import subprocess
import sys

import pytest
from ssd.benchmark import add_ratios, format_table, main

from .conftest import MODEL_DIR


def test_smoke_benchmark_measures_the_recipe_and_its_variants(tmp_path):
    out = tmp_path / "bench.json"
    main(
        [
            "--smoke",
            "--device",
            "cpu",
            "--models",
            "ours",
            "--amp",
            "fp32",
            "--variant",
            "channels_last=false,optimizer.fused=false",
            "--output",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert report["schema"] == "zoo.bench/v1"
    rows = {(row["mode"], row["variant"]): row for row in report["results"]}
    variant = "channels_last=false,optimizer.fused=false"
    assert set(rows) == {("train", ""), ("inference", ""), ("train", variant), ("inference", variant)}
    for row in rows.values():
        assert row["model"] == "ours" and row["amp"] == "fp32" and row["batch_size"] == 2
        assert row["items"] == 2 * 2  # batch 2 x 2 timed iterations after 1 warm-up
        assert row["throughput"] > 0 and row["compile"] is False  # --smoke compiles nothing
    # The default recipe's levers, then the variant's on top of them.
    assert rows["train", ""]["channels_last"] is True and rows["train", ""]["fused_optimizer"] is True
    assert (
        rows["train", variant]["channels_last"] is False
        and rows["train", variant]["fused_optimizer"] is False
    )
    assert rows["train", variant]["overrides"] == [
        "compile=false",
        "channels_last=false",
        "optimizer.fused=false",
    ]
    assert 0 < rows["inference", ""]["latency_ms"]["p50"] <= rows["inference", ""]["latency_ms"]["p99"]


def test_ratios_are_ours_over_each_baseline_in_the_same_mode():
    rows = [
        {"model": "ours", "mode": "train", "throughput": 1200.0},
        {"model": "torchvision-ssd", "mode": "train", "throughput": 400.0},
        {"model": "ssd300_vgg16", "mode": "train", "throughput": 480.0},
        {"model": "ours", "mode": "inference", "throughput": 900.0},
        {"model": "torchvision-ssd", "mode": "inference", "throughput": 300.0},
    ]
    add_ratios(rows)
    assert rows[0]["speedup_vs_torchvision-ssd"] == pytest.approx(3.0)
    assert rows[0]["speedup_vs_ssd300_vgg16"] == pytest.approx(2.5)
    assert (
        rows[3]["speedup_vs_torchvision-ssd"] == pytest.approx(3.0)
        and "speedup_vs_ssd300_vgg16" not in rows[3]
    )
    for row in rows:
        row.update(batch_size=64, world_size=1, amp="bf16")
        if row["model"] == "ours":
            row.update(channels_last=True, compile=True, compile_mode="default", fused_optimizer=True)
    table = format_table(rows).splitlines()
    assert table[1].split()[:7] == ["ours", "train", "64", "x", "1", "bf16", "1200.0"]
    assert "3.00x" in table[1] and "2.50x" in table[1]


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--precision", "error: --precision was renamed: use --amp"),
        ("--compile", "error: --compile was renamed: use --set compile=true"),
        ("--no-channels-last", "error: --no-channels-last was renamed: use --set channels_last=false"),
    ],
)
def test_old_flags_name_the_new_spelling(flag, message):
    with pytest.raises(SystemExit, match=f"^{message}$"):
        main(["--smoke", flag])


def test_unknown_recipe_key_in_a_variant_is_a_one_line_error():
    with pytest.raises(SystemExit, match="unknown recipe key|names nothing|compile_mod"):
        main(["--smoke", "--device", "cpu", "--models", "ours", "--variant", "compile_mod=default"])


@pytest.mark.timeout(600)
def test_gpus_times_the_recipe_step_on_one_and_two_processes(tmp_path):
    # Two gloo processes on the CPU: the shared scaling mode (zoo.scaling) over the smoke recipe's step.
    out = tmp_path / "scaling.json"
    smoke = str(MODEL_DIR / "configs" / "shapes_smoke.yaml")
    command = ["bash", str(MODEL_DIR / "scripts" / "benchmark.sh"), "--gpus", "2", "--recipe", smoke]
    command += [
        "--batch-size",
        "2",
        "--window-seconds",
        "0.2",
        "--windows",
        "1",
        "--warmup",
        "0",
        "--output",
        str(out),
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["results"]
    assert [row["gpus"] for row in rows] == [1, 2]
    assert [row["replicas_agree"] for row in rows] == [None, True]
    assert all(row["batch_per_gpu"] == 2 and row["unit"] == "img/s" and row["throughput"] > 0 for row in rows)
    assert rows[0]["scaling"] == pytest.approx(1.0) and "scripts/benchmark.sh --gpus 2" in done.stdout
