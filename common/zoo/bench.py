"""Throughput / latency measurement (warm-up, percentiles) and the results-JSON schema.

summary = time_loop(lambda: model(x), items_per_call=x.shape[0], warmup=10, iters=100,
                    sync=torch.cuda.synchronize)
write_report("results/bench.json", [{"mode": "inference", "batch": 256, **summary}], device="H100")
"""

from __future__ import annotations

import datetime
import json
import platform
import time

import numpy as np

from zoo.checkpoints import atomic_write

SCHEMA = "zoo.bench/v1"


def percentiles(samples_ms, ps=(50, 90, 95, 99)) -> dict:
    """``{"p50": ..., "p90": ...}`` of the samples (linear interpolation, as ``numpy.percentile``)."""
    samples = np.asarray(samples_ms, dtype=np.float64)
    if samples.size == 0:
        raise ValueError("percentiles of no samples")
    return {f"p{p:g}": float(v) for p, v in zip(ps, np.percentile(samples, ps), strict=True)}


class Meter:
    """Records step times; the first ``warmup`` records are dropped from the summary."""

    def __init__(self, warmup: int = 10):
        self.warmup = warmup
        self._seen = 0
        self._seconds: list[float] = []
        self._items = 0

    def record(self, seconds: float, items: int) -> None:
        self._seen += 1
        if self._seen > self.warmup:
            self._seconds.append(seconds)
            self._items += items

    def summary(self) -> dict:
        """``{"throughput" (items/s), "latency_ms": {mean,p50,p90,p95,p99}, "steps", "items"}``."""
        if not self._seconds:
            raise ValueError(f"no steps measured after {self.warmup} warm-up steps")
        latency_ms = np.asarray(self._seconds) * 1000.0
        return {
            "throughput": self._items / float(np.sum(self._seconds)),
            "latency_ms": {"mean": float(latency_ms.mean()), **percentiles(latency_ms)},
            "steps": len(self._seconds),
            "items": self._items,
        }


def time_loop(fn, *, items_per_call, warmup, iters, sync=None) -> dict:
    """Call ``fn()`` warmup + iters times and return ``Meter.summary()`` of the last ``iters``.

    ``sync()`` (e.g. ``torch.cuda.synchronize``) runs before every clock read, so asynchronous
    device work is counted in the step that launched it.
    """
    meter = Meter(warmup=warmup)
    for _ in range(warmup + iters):
        if sync:
            sync()
        start = time.perf_counter()
        fn()
        if sync:
            sync()
        meter.record(time.perf_counter() - start, items_per_call)
    return meter.summary()


def time_windows(fn, *, warmup: int, iters: int, windows: int, sync=None) -> list[float]:
    """Seconds of each of ``windows`` runs of ``iters`` calls of ``fn()``, after ``warmup`` calls.

    ``sync()`` runs only before each clock read, at window ends: the host may queue work ahead of
    the device as it does in training, so the windows measure throughput, not per-call latency
    (that is ``time_loop``).
    """
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    seconds = []
    for _ in range(windows):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        seconds.append(time.perf_counter() - start)
    return seconds


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
