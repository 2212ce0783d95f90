"""Throughput / latency measurement (warm-up, percentiles) and the results-JSON schema.

summary = measure(lambda: model(x), items_per_call=x.shape[0], warmup=10, iters=100,
                  windows=3, sync=torch.cuda.synchronize)
write_report("results/bench.json", [{"mode": "inference", "batch": 256, **summary}], device="H100")
"""

from __future__ import annotations

import datetime
import json
import platform
import time

import numpy as np

from zoo.errors import UserError
from zoo.io import atomic_write

SCHEMA = "zoo.bench/v1"


def percentiles(samples_ms, ps=(50, 90, 95, 99)) -> dict:
    """``{"p50": ..., "p90": ...}`` of the samples (linear interpolation, as ``numpy.percentile``)."""
    samples = np.asarray(samples_ms, dtype=np.float64)
    if samples.size == 0:
        raise ValueError("percentiles of no samples")
    return {f"p{p:g}": float(v) for p, v in zip(ps, np.percentile(samples, ps), strict=True)}


def measure(
    fn, *, items_per_call: int, warmup: int, iters: int, windows: int = 1, sync=None, per_call=False
) -> dict:
    """The zoo's one timer: call ``fn()`` ``warmup`` times, then ``windows`` x ``iters`` times.

    Returns ``{"throughput": items/s of the median window, "window_throughputs": [...],
    "window_seconds": [...], "items": items timed}``. ``sync()`` (e.g. ``torch.cuda.synchronize``)
    runs only before each clock read at window ends, so the host may queue work ahead of the device
    as it does in training. ``per_call=True`` also syncs around every call and adds
    ``"latency_ms": {"mean", "p50", "p90", "p95", "p99"}`` (per-call latency, as a server sees it).
    """
    if warmup < 0 or iters < 1 or windows < 1:
        raise ValueError(
            f"measure needs warmup >= 0, iters >= 1, windows >= 1 (got {warmup}, {iters}, {windows})"
        )
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    window_seconds, call_ms = [], []
    for _ in range(windows):
        start = time.perf_counter()
        for _ in range(iters):
            if per_call:
                began = time.perf_counter()
                fn()
                sync()
                call_ms.append((time.perf_counter() - began) * 1e3)
            else:
                fn()
        sync()
        window_seconds.append(time.perf_counter() - start)
    rates = [items_per_call * iters / seconds for seconds in window_seconds]
    summary = {
        "throughput": float(np.median(rates)),
        "window_throughputs": rates,
        "window_seconds": window_seconds,
        "items": items_per_call * iters * windows,
    }
    if per_call:
        summary["latency_ms"] = {"mean": float(np.mean(call_ms)), **percentiles(call_ms)}
    return summary


# Kernel families for profile_step: (label, substrings of the lower-cased kernel name), first match wins.
KERNEL_FAMILIES = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "dot_do_o", "convert_dq")),
    ("matmul (cuBLAS)", ("gemm", "cublas", "cutlass", "nvjet", "xmma")),
    ("triton (fused pointwise/reductions)", ("triton",)),
    ("memcpy/memset", ("memcpy", "memset")),
)


def kernel_family(name: str, families=KERNEL_FAMILIES) -> str:
    """The label of the first family one of whose substrings is in ``name``; else "other: <name>"."""
    lowered = name.lower()
    for label, keys in families:
        if any(k in lowered for k in keys):
            return label
    return "other: " + name[:60]


def covered(intervals) -> float:
    """Total length of the union of ``(start, end)`` intervals (overlaps counted once)."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def profile_step(step, sync, *, steps: int = 5, families=KERNEL_FAMILIES, trace_path=None) -> dict:
    """Run ``step()`` ``steps`` times under torch.profiler; per step, in ms: device time by kernel
    family (all streams), ``busy`` (time the device ran anything, overlaps counted once), ``wall``,
    and the host's CUDA runtime calls by total time (a synchronising ``cudaFree`` shows here).
    ``trace_path``: also write the timeline there (Chrome trace JSON, gzip-compressed)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    sync()
    with profile(activities=activities) as prof:
        began = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        wall_ms = (time.perf_counter() - began) / steps * 1e3
    if trace_path:
        write_trace(prof, trace_path)
    kernels: dict[str, float] = {}
    names: dict[str, float] = {}
    runtime: dict[str, float] = {}
    spans = []
    for event in prof.events():
        if event.device_type.name == "CUDA":
            if getattr(event, "is_user_annotation", False):
                continue  # a record_function range drawn on the device timeline, not a kernel
            ms = (event.time_range.end - event.time_range.start) / steps / 1e3
            family = kernel_family(event.key, families)
            kernels[family] = kernels.get(family, 0.0) + ms
            names[event.key] = names.get(event.key, 0.0) + ms
            spans.append((event.time_range.start, event.time_range.end))
        elif event.key.startswith("cuda") or event.key.startswith("cu") and event.key[2:3].isupper():
            runtime[event.key] = runtime.get(event.key, 0.0) + event.cpu_time_total / steps / 1e3
    return {
        "wall_ms": wall_ms,
        "busy_ms": covered(spans) / steps / 1e3,
        "kernel_ms": dict(sorted(kernels.items(), key=lambda kv: -kv[1])),
        "runtime_ms": dict(sorted(runtime.items(), key=lambda kv: -kv[1])),
        "top_kernels_ms": dict(sorted(names.items(), key=lambda kv: -kv[1])[:25]),
    }


def write_trace(prof, path) -> None:
    """The profiler's timeline as gzip-compressed Chrome trace JSON, written atomically."""
    import gzip
    import pathlib
    import tempfile

    from zoo.io import atomic_write

    with tempfile.TemporaryDirectory() as tmp, atomic_write(path) as packed:
        raw = pathlib.Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        packed.write_bytes(gzip.compress(raw.read_bytes()))


def format_profile(profile: dict, rows: int = 12) -> str:
    """``profile_step``'s result as an indented table."""
    total = sum(profile["kernel_ms"].values()) or 1.0
    lines = [
        f"  {ms:8.2f} ms {100 * ms / total:5.1f}%  {name}"
        for name, ms in list(profile["kernel_ms"].items())[:rows]
    ]
    lines.append(
        f"  {sum(profile['kernel_ms'].values()):8.2f} ms kernel time (all streams); device busy "
        f"{profile['busy_ms']:.2f} ms of {profile['wall_ms']:.2f} ms wall per step"
    )
    calls = ", ".join(f"{name} {ms:.2f}" for name, ms in list(profile["runtime_ms"].items())[:6])
    lines.append(f"  host CUDA runtime calls (ms per step): {calls or 'none'}")
    if profile.get("top_kernels_ms"):
        lines.append("  longest kernels (ms per step):")
        lines += [f"    {ms:7.2f}  {name[:160]}" for name, ms in profile["top_kernels_ms"].items()]
    return "\n".join(lines)


def inductor_options(items) -> dict:
    """``["triton.mix_order_reduction_split_size=64", "coordinate_descent_tuning=true"]`` -> a dict
    of torch._inductor.config entries with typed values (int, float, true/false, none, else the
    string); an unknown key or an item without ``=`` is a UserError."""
    import torch._inductor.config as inductor_config

    known = inductor_config.get_config_copy()
    options = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"inductor option {item!r}: expected KEY=VALUE")
        if key not in known:
            raise UserError(f"inductor option {item!r}: torch._inductor.config has no {key!r}")
        value = text.strip()
        lowered = value.lower()
        if lowered in ("true", "false"):
            options[key] = lowered == "true"
        elif lowered == "none":
            options[key] = None
        else:
            for cast in (int, float):
                try:
                    options[key] = cast(value)
                    break
                except ValueError:
                    continue
            else:
                options[key] = value
    return options


def write_report(path, results: list, **meta) -> None:
    """Write ``{"schema": "zoo.bench/v1", "date", "host", "meta", "results"}`` atomically."""
    report = {
        "schema": SCHEMA,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "meta": meta,
        "results": results,
    }
    with atomic_write(path) as tmp:
        tmp.write_text(json.dumps(report, indent=2) + "\n")
