"""Serve a repository written by dlrm.export with tritonserver and score validation rows through tritonclient:
``python -m dlrm.deploy --repository model_repository --data-dir D [--rows 4096] [--protocol grpc]``.

Starts a local tritonserver (zoo.triton; the nvidia-pytriton wheel's binary carries the python
backend only, so ``dlrm_python`` is served), sends the first --rows validation rows in requests of
--batch-size over one connection, and prints the served AUC and latency. With --url, an already
running server is used. The hotness of the served model is read from its config (the width of
``sparse``). Load mode (--concurrency 1,4,16 --requests N) sends those requests from that many clients
at once per level, prints throughput, p50/p99 latency and errors per level, and exits non-zero if any
failed.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from zoo.cli import entry_point

MODEL = "dlrm_python"


def score(url, protocol, requests: list[dict]) -> tuple[np.ndarray, float]:
    """(CTRs of every request's rows, mean ms per request), one request at a time over one connection."""
    from zoo.triton.client import TritonClient

    ctrs, started = [], time.perf_counter()
    with TritonClient(url, protocol) as client:
        for inputs in requests:
            ctrs.append(client.infer(MODEL, inputs, ["ctr"])["ctr"][:, 0])
    return np.concatenate(ctrs), (time.perf_counter() - started) * 1000 / max(1, len(requests))


@entry_point
def main(argv=None) -> None:
    from zoo.triton.load import add_load_args, run_load_mode

    p = argparse.ArgumentParser(prog="python -m dlrm.deploy", description=__doc__.split("\n\n")[0])
    p.add_argument("--repository", default="model_repository", help="from dlrm.export / export_triton.sh")
    p.add_argument(
        "--data-dir", default=os.environ.get("DATA_DIR"), help="prepared Criteo shards ($DATA_DIR)"
    )
    p.add_argument("--rows", type=int, default=4096, help="validation rows to score")
    p.add_argument("--batch-size", type=int, default=256, help="rows per request")
    p.add_argument("--url", help="host:port of a running server (skip starting one)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    add_load_args(p)
    a = p.parse_args(argv)

    if not a.data_dir:
        raise SystemExit("error: give --data-dir (or set DATA_DIR)")
    repo = Path(a.repository)
    config_path = repo / MODEL / "config.pbtxt"
    if not config_path.is_file():
        raise SystemExit(f"error: {repo} holds no {MODEL}/config.pbtxt: run scripts/export_triton.sh first")

    from sklearn.metrics import roc_auc_score
    from zoo.triton.client import serve_or_connect
    from zoo.triton.repository import parse_pbtxt

    from dlrm.data import Split, expand_categorical

    config = parse_pbtxt(config_path.read_text())
    width = int(next(t for t in config.input if t.name == "sparse").dims[0])
    hotness_file = repo / MODEL / "hotness.txt"
    hotness = [int(h) for h in hotness_file.read_text().split()] if hotness_file.is_file() else [1] * 26
    rows = [int(r) for r in (repo / MODEL / "rows.txt").read_text().split()]
    if sum(hotness) != width:
        raise SystemExit(f"error: {hotness_file} does not match the served input width {width}")
    split = Split(a.data_dir, "val")
    labels, dense, cats = split.batch(0, min(a.rows, split.rows))
    sparse = expand_categorical(cats, rows, hotness)
    requests = [
        {
            "dense": np.ascontiguousarray(dense[i : i + a.batch_size]),
            "sparse": np.ascontiguousarray(sparse[i : i + a.batch_size]),
        }
        for i in range(0, len(labels), a.batch_size)
    ]

    with serve_or_connect(repo, MODEL, url=a.url, protocol=a.protocol) as url:
        if a.concurrency:
            outcome = run_load_mode(url, MODEL, requests, a, outputs=["ctr"])
        else:
            outcome = score(url, a.protocol, requests)
    if a.concurrency:
        return
    ctrs, ms = outcome
    auc = roc_auc_score(labels, ctrs) if len(np.unique(labels)) > 1 else float("nan")
    print(
        f"served {len(labels)} rows over {a.protocol}: AUC {auc:.5f}, {ms:.1f} ms per request of {a.batch_size}"
    )


if __name__ == "__main__":
    main()
