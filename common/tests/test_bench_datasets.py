import json

import numpy as np
import pytest
from zoo.bench import (
    covered,
    format_profile,
    inductor_options,
    kernel_family,
    percentiles,
    profile_step,
    write_report,
)
from zoo.data.datasets import make_digits_imagefolder
from zoo.errors import UserError


def test_percentiles_match_numpy():
    samples = np.random.default_rng(0).exponential(5.0, size=1001)
    got = percentiles(samples, ps=(50, 90, 99.9))
    assert list(got) == ["p50", "p90", "p99.9"]
    assert got["p90"] == pytest.approx(np.percentile(samples, 90))
    assert got["p99.9"] == pytest.approx(np.percentile(samples, 99.9))
    with pytest.raises(ValueError):
        percentiles([])


def test_covered_counts_overlaps_once():
    assert covered([]) == 0
    assert covered([(0, 10), (5, 12), (20, 25), (21, 22)]) == 17
    assert covered([(3, 4), (0, 1)]) == 2


def test_kernel_family_first_match_wins():
    assert kernel_family("sm90_xmma_gemm_bf16bf16_bf16f32") == "matmul (cuBLAS)"
    assert kernel_family("pytorch_flash::flash_fwd_kernel<...>") == "attention"
    assert kernel_family("triton_per_fused_add_native_layer_norm_3") == "triton (fused pointwise/reductions)"
    assert kernel_family("_lamb_update", (("optimizer", ("lamb",)),)) == "optimizer"
    assert kernel_family("elementwise_kernel") == "other: elementwise_kernel"


def test_profile_step_runs_on_cpu(tmp_path):
    import gzip

    import torch

    x = torch.randn(64, 64)
    calls = []
    trace = tmp_path / "step.json.gz"
    result = profile_step(lambda: calls.append((x @ x).sum()), lambda: None, steps=3, trace_path=trace)
    assert len(calls) == 3 and result["wall_ms"] > 0 and result["busy_ms"] == 0
    assert "device busy 0.00 ms" in format_profile(result)
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert sum(event.get("name") == "aten::mm" for event in events) == 3  # the timeline of the 3 steps
    assert [p.name for p in tmp_path.iterdir()] == ["step.json.gz"]


def test_write_report(tmp_path):
    path = tmp_path / "out" / "bench.json"
    write_report(path, [{"mode": "inference", "throughput": 1.5}], device="cpu", batch=8)
    report = json.loads(path.read_text())
    assert report["schema"] == "zoo.bench/v1" and report["meta"] == {"device": "cpu", "batch": 8}
    assert report["results"] == [{"mode": "inference", "throughput": 1.5}] and report["date"].startswith("20")
    assert [p.name for p in path.parent.iterdir()] == ["bench.json"]


def test_digits_imagefolder_layout_labels_and_pixels(tmp_path):
    from PIL import Image
    from sklearn.datasets import load_digits

    root = make_digits_imagefolder(tmp_path / "digits", image_size=32, val_fraction=0.2)
    files = sorted(root.glob("*/*/*.jpg"))
    assert len(files) == 1797
    assert sorted(p.name for p in (root / "train").iterdir()) == [str(c) for c in range(10)]
    val = [f for f in files if f.parts[-3] == "val"]
    assert len(val) == pytest.approx(1797 * 0.2, abs=6)
    for c in range(10):  # stratified: every class has about 20% in val
        n_val, n_all = sum(f.parent.name == str(c) for f in val), sum(f.parent.name == str(c) for f in files)
        assert abs(n_val - 0.2 * n_all) <= 1

    digits = load_digits()
    sources = digits.images.reshape(len(digits.images), -1) * (255.0 / 16.0)
    for f in files[::60]:
        image = Image.open(f)
        assert image.size == (32, 32) and image.mode == "RGB"
        index = int(f.stem)
        assert int(f.parent.name) == digits.target[index]
        small = np.asarray(image.convert("L").resize((8, 8), Image.BOX), dtype=np.float64).ravel()
        assert np.abs(small - sources[index]).mean() < 30  # 0..255 scale; blur + JPEG
        nearest = np.abs(sources - small).mean(axis=1).argmin()
        assert digits.target[nearest] == digits.target[index]

    mtime = files[0].stat().st_mtime_ns
    assert make_digits_imagefolder(root, image_size=32, val_fraction=0.2) == root
    assert files[0].stat().st_mtime_ns == mtime  # idempotent: nothing rewritten
    make_digits_imagefolder(root, image_size=16, val_fraction=0.2)  # new parameters rebuild
    assert Image.open(next(root.glob("train/0/*.jpg"))).size == (16, 16)
    assert len(list(root.glob("*/*/*.jpg"))) == 1797 and not list(root.glob(".digits-*"))


def test_inductor_options_are_typed_and_checked():
    pytest.importorskip("torch")
    options = inductor_options(
        [
            "triton.mix_order_reduction_split_size=64",
            "coordinate_descent_tuning=True",
            "max_autotune_gemm_backends=ATEN",
        ]
    )
    assert options == {
        "triton.mix_order_reduction_split_size": 64,
        "coordinate_descent_tuning": True,
        "max_autotune_gemm_backends": "ATEN",
    }
    with pytest.raises(UserError, match="has no 'triton.no_such_option'"):
        inductor_options(["triton.no_such_option=1"])
    with pytest.raises(UserError, match="expected KEY=VALUE"):
        inductor_options(["coordinate_descent_tuning"])


def test_measure_windows_and_per_call_latency():
    from zoo.bench import measure

    calls, syncs = [], []
    summary = measure(
        lambda: calls.append(1), items_per_call=4, warmup=3, iters=5, windows=2, sync=lambda: syncs.append(1)
    )
    assert len(calls) == 3 + 10 and len(syncs) == 1 + 2  # after warm-up, then at each window's end
    assert summary["items"] == 40 and len(summary["window_throughputs"]) == 2
    assert summary["throughput"] == float(np.median(summary["window_throughputs"]))
    assert "latency_ms" not in summary
    calls.clear(), syncs.clear()
    summary = measure(
        lambda: calls.append(1),
        items_per_call=1,
        warmup=0,
        iters=4,
        sync=lambda: syncs.append(1),
        per_call=True,
    )
    assert len(calls) == 4 and len(syncs) == 1 + 4 + 1
    assert set(summary["latency_ms"]) == {"mean", "p50", "p90", "p95", "p99"}
    with pytest.raises(ValueError):
        measure(lambda: None, items_per_call=1, warmup=0, iters=0)
