"""The load generator behind every ``deploy_triton.sh --concurrency 1,4,16 --requests N``: requests
from many clients at once per concurrency level, with throughput, p50/p99 latency and errors.

    rows = load_test(server.http_url, "resnet50_onnx", [{"input": b} for b in batches],
                     concurrency=(1, 4, 16), requests=256)
    print(load_table(rows))  # concurrency, requests, errors, infer/s, p50 and p99 ms
"""

from __future__ import annotations

import argparse
import time

from zoo.errors import UserError, one_line
from zoo.triton.client import TritonClient, model_io

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def load_test(
    url,
    model,
    requests_inputs: list,
    *,
    outputs: list | None = None,
    concurrency=(1, 4, 16),
    requests: int = 64,
    protocol: str = "http",
    time_limit_s: float = 60.0,
    keep_outputs: int = 0,
) -> list[dict]:
    """Load a server on this machine with ``requests`` requests at each level of ``concurrency``.

    For a level of ``c``, ``c`` threads each open ONE client, send one untimed warm-up request, then
    take request indices 0, 1, ... from a shared counter until ``requests`` have been sent or
    ``time_limit_s`` has passed since the level began; request ``i`` sends ``requests_inputs[i %
    len(requests_inputs)]`` (a dict {input name: array}) and asks for ``outputs`` (default: all the
    model declares). Only ``url`` on 127.0.0.1/localhost is accepted (ValueError otherwise).

    Returns one dict per level: ``concurrency``, ``requests`` (sent and timed), ``errors`` (those of
    them that failed), ``first_error`` (its message, or None), ``throughput`` (successful
    inferences per second over the level's wall time), ``p50_ms``/``p99_ms`` (per-request latency,
    ``zoo.bench.percentiles``; None when no request succeeded), and with ``keep_outputs=k`` also
    ``outputs``: {i: {output name: array}} for the successful requests ``i < k``.
    """
    import threading

    from zoo.bench import percentiles

    host = url.rsplit(":", 1)[0]
    if host not in LOOPBACK_HOSTS:
        raise ValueError(f"load_test sends load to this machine only (127.0.0.1), not to {url}")
    if not requests_inputs or requests < 1:
        raise ValueError(f"load_test needs requests_inputs and requests >= 1 (got {requests})")
    levels = [int(c) for c in concurrency]
    if not levels or min(levels) < 1:
        raise ValueError(f"concurrency levels must be >= 1, got {list(concurrency)}")
    if outputs is None:
        outputs = model_io(url, model, protocol)[1]

    rows = []
    for level in levels:
        lock = threading.Lock()
        state = {"next": 0, "errors": 0, "first_error": None, "latencies": [], "outputs": {}}
        all_ready = threading.Barrier(level + 1)

        def worker(state=state, lock=lock, all_ready=all_ready):
            client = None
            try:
                client = TritonClient(url, protocol)
                client.infer(model, requests_inputs[0], outputs)  # connect and warm up, untimed
            except Exception:  # noqa: BLE001 - a failing warm-up fails again in the timed requests
                pass
            all_ready.wait()
            deadline = time.monotonic() + time_limit_s
            try:
                while True:
                    with lock:
                        index = state["next"]
                        if index >= requests or time.monotonic() > deadline:
                            return
                        state["next"] += 1
                    began = time.perf_counter()
                    try:
                        if client is None:  # its set-up failed before: try again, counted
                            client = TritonClient(url, protocol)
                        result = client.infer(model, requests_inputs[index % len(requests_inputs)], outputs)
                    except Exception as e:  # noqa: BLE001 - every failure is a counted error, not a crash
                        message = one_line(e)
                        with lock:
                            state["errors"] += 1
                            state["first_error"] = state["first_error"] or message
                        continue
                    elapsed_ms = 1000 * (time.perf_counter() - began)
                    with lock:
                        state["latencies"].append(elapsed_ms)
                        if index < keep_outputs:
                            state["outputs"][index] = result
            finally:
                if client is not None:
                    client.close()

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(level)]
        for thread in threads:
            thread.start()
        all_ready.wait()  # every client has connected and warmed up: the clock starts now
        began = time.perf_counter()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - began
        latencies = state["latencies"]
        stats = percentiles(latencies, (50, 99)) if latencies else {"p50": None, "p99": None}
        row = {
            "concurrency": level,
            "requests": state["next"],
            "errors": state["errors"],
            "first_error": state["first_error"],
            "throughput": len(latencies) / seconds if seconds > 0 else 0.0,
            "p50_ms": stats["p50"],
            "p99_ms": stats["p99"],
        }
        if keep_outputs:
            row["outputs"] = state["outputs"]
        rows.append(row)
    return rows


def parse_concurrency(text: str) -> tuple[int, ...]:
    """``"1,4,16"`` -> (1, 4, 16); an argparse ``type=`` (ArgumentTypeError on a bad list)."""
    try:
        levels = tuple(int(part) for part in text.split(","))
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"--concurrency takes positive integers like 1,4,16, not {text!r}")
    return levels


def add_load_args(parser) -> None:
    """``--concurrency 1,4,16`` and ``--requests N``: the deploy scripts' load mode."""
    parser.add_argument(
        "--concurrency",
        type=parse_concurrency,
        default=None,
        help="load mode: concurrent clients per level, e.g. 1,4,16 (prints throughput and latency)",
    )
    parser.add_argument(
        "--requests", type=int, default=64, help="load mode: requests sent at each concurrency level"
    )
    parser.add_argument(
        "--time-limit", type=float, default=60.0, help="load mode: seconds at most per concurrency level"
    )


def load_table(rows: list[dict]) -> str:
    """The rows of ``load_test`` as a text table (concurrency, requests, errors, throughput, p50, p99)."""

    def ms(value):
        return "-" if value is None else f"{value:.2f}"

    lines = [f"{'concurrency':>11} {'requests':>8} {'errors':>6} {'infer/s':>9} {'p50 ms':>8} {'p99 ms':>8}"]
    for row in rows:
        lines.append(
            f"{row['concurrency']:>11} {row['requests']:>8} {row['errors']:>6} {row['throughput']:>9.1f}"
            f" {ms(row['p50_ms']):>8} {ms(row['p99_ms']):>8}"
        )
    return "\n".join(lines)


def run_load_mode(url, model, requests_inputs: list, args, *, outputs=None, protocol=None) -> list[dict]:
    """Load mode of a deploy script: ``load_test`` with ``add_load_args``' flags, print the table.

    Raises UserError with a one-line cause when any request failed (after printing the table).
    """
    if args.requests < 1:
        raise UserError(f"--requests must be >= 1, got {args.requests}")
    try:
        rows = load_test(
            url,
            model,
            requests_inputs,
            outputs=outputs,
            concurrency=args.concurrency,
            requests=args.requests,
            protocol=protocol or args.protocol,
            time_limit_s=args.time_limit,
        )
    except ValueError as e:
        raise UserError(str(e)) from None
    print(f"{model} over {protocol or args.protocol} at {url}:")
    print(load_table(rows), flush=True)
    failed = [row for row in rows if row["errors"]]
    if failed:
        total = sum(row["errors"] for row in failed)
        raise UserError(f"{total} request(s) failed under load: {failed[0]['first_error']}")
    return rows
