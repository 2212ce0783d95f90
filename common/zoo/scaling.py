"""The scaling mode of every PyTorch model's ``scripts/benchmark.sh --gpus 1,2,4``.

A model's benchmark gives one function that builds the recipe's own training step on synthetic data,
and hands ``--gpus`` over to this module::

    def scaling_step(recipe: dict, device, world_size: int) -> zoo.scaling.Step:
        step = build_train_step(recipe, device, world_size=world_size)   # what train.py runs
        images, labels = synthetic_batch(recipe, device)
        return zoo.scaling.Step(lambda: step(images, labels), items=len(labels), unit="img/s", model=step.model)

    @entry_point
    def main(argv=None):
        if zoo.scaling.asked_for(argv):
            return zoo.scaling.main(argv, module="resnet50.benchmark", build=scaling_step,
                                    default_recipe=DEFAULT_RECIPE)

For each GPU count N, the same launcher as ``train.sh`` (``common/scripts/launch_torch.sh``: one process,
or torchrun with a c10d rendezvous) starts ``python -m <module> ... --scaling-report FILE`` on N GPUs.
Every rank builds the step from the recipe (per-GPU batch fixed: ``run.batch_per_gpu``), runs it until
compilation and warm-up are over, then times ``--windows`` windows of at least ``--window-seconds``
each (the same number of steps on every rank, the slowest rank's time); after the timed steps the
ranks' weights are compared. The table gives throughput of all ranks, scaling against 1 GPU measured
in the same call, the command, the device and the date.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import pathlib
import platform
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from zoo.errors import UserError

REPORT_FLAG = "--scaling-report"


@dataclasses.dataclass
class Step:
    """One training step of the recipe (``call()``), the samples it trains on one GPU (``items``), their
    throughput unit (zoo.metrics.THROUGHPUT_UNITS) and the module whose weights the replicas must share."""

    call: Callable[[], object]
    items: int
    unit: str
    model: object


def asked_for(argv) -> bool:
    """Whether a benchmark's command line asks for the scaling mode (``--gpus``) or is one of its runs."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return any(a == "--gpus" or a.startswith("--gpus=") or a == REPORT_FLAG for a in argv)


def parse_args(argv, module: str, default_recipe) -> argparse.Namespace:
    import zoo.cli

    parser = argparse.ArgumentParser(
        prog="benchmark.sh --gpus",
        description=f"Scaling of {module}'s training step over GPU counts (per-GPU batch fixed).",
    )
    zoo.cli.add_run_args(
        parser, default_recipe=default_recipe, data_dir=False, results_dir=False, resume=False
    )
    parser.add_argument("--gpus", help="GPU counts, e.g. 1,2,4 (1 is always measured too)")
    parser.add_argument("--batch-size", type=int, default=None, help="per GPU (run.batch_per_gpu)")
    parser.add_argument(
        "--warmup", type=int, default=20, help="steps after the first before timing (default 20)"
    )
    parser.add_argument(
        "--window-seconds", type=float, default=20.0, help="shortest timed window (default 20 s)"
    )
    parser.add_argument("--windows", type=int, default=3, help="timed windows; the median is reported")
    parser.add_argument("--run-timeout", type=float, default=900, help="seconds one launch may take")
    parser.add_argument("--output", metavar="FILE", help="write the rows as JSON (zoo.bench schema)")
    parser.add_argument(REPORT_FLAG, dest="scaling_report", help=argparse.SUPPRESS)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        raise UserError(f"benchmark.sh --gpus does not take {' '.join(unknown)}")
    if args.scaling_report is None:
        try:
            args.gpus = sorted({1, *(int(n) for n in args.gpus.split(",") if n)})
        except (AttributeError, ValueError):
            raise UserError(f"--gpus {args.gpus!r}: expected GPU counts such as 1,2,4") from None
        if min(args.gpus) < 1:
            raise UserError("--gpus: GPU counts must be 1 or more")
    if args.warmup < 0 or args.windows < 1 or args.window_seconds <= 0:
        raise UserError("--warmup must be >= 0, --windows >= 1 and --window-seconds > 0")
    return args


def main(argv, *, module: str, build: Callable[..., Step], default_recipe) -> list[dict]:
    """The scaling mode: the table over ``--gpus`` (parent), or one timed run (a launched rank)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv, module, default_recipe)
    if args.scaling_report is not None:
        return [time_rank(args, build)]
    rows = launch_counts(argv, args, module)
    print(table(rows))
    if args.output:
        from zoo.bench import write_report

        write_report(args.output, rows, command=command_line(argv), device=rows[0]["device"])
    return rows


def launch_counts(argv: list[str], args, module: str) -> list[dict]:
    """One launch through launch_torch.sh per GPU count; rows with scaling against the 1-GPU row."""
    import torch

    visible = torch.cuda.device_count()
    if visible and max(args.gpus) > visible:
        raise UserError(f"--gpus {max(args.gpus)} asked for, but {visible} CUDA device(s) are visible")
    child = _without(argv, ("--gpus", "--output", "--run-timeout"))
    launcher = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "launch_torch.sh"
    rows = []
    with tempfile.TemporaryDirectory(prefix="zoo-scaling-") as tmp:
        for gpus in args.gpus:
            report = pathlib.Path(tmp) / f"{gpus}.json"
            script = f'source "{launcher}"; launch_torch {module} "$@"'
            command = [
                "bash",
                "-c",
                script,
                "benchmark.sh",
                "--gpus",
                str(gpus),
                *child,
                REPORT_FLAG,
                str(report),
            ]
            env = {**os.environ, "PYTHON": sys.executable, "RDZV_ENDPOINT": f"127.0.0.1:{_free_port()}"}
            print(f"== {gpus} GPU(s): {module}", file=sys.stderr, flush=True)
            launched = time.monotonic()
            try:
                code = subprocess.run(command, env=env, timeout=args.run_timeout).returncode
            except subprocess.TimeoutExpired:
                code = f"timed out after {args.run_timeout:.0f} s"
            if code != 0 or not report.exists():
                print(f"== {gpus} GPU(s) failed ({code})", file=sys.stderr, flush=True)
                continue
            rows.append(json.loads(report.read_text()))
            print(  # as each count ends: a long call cut short still shows the counts it measured
                f"== {gpus} GPU(s): {rows[-1]['throughput']:,.1f} {rows[-1]['unit']}, first step "
                f"{rows[-1]['first_step_s']:.0f} s, {time.monotonic() - launched:.0f} s in all",
                file=sys.stderr,
                flush=True,
            )
    if not rows:
        raise UserError("--gpus: no launch finished")
    single = next((r["throughput"] for r in rows if r["gpus"] == 1), None)
    for row in rows:
        row["scaling"] = row["throughput"] / (row["gpus"] * single) if single else None
        row["command"] = command_line(argv)
    return rows


def time_rank(args, build: Callable[..., Step]) -> dict:
    """Build the step on this rank's GPU, time it, check the replicas; rank 0 writes the report."""
    import torch
    import torch.distributed as dist

    import zoo.cli
    from zoo.recipe import run_config
    from zoo.torch import close_distributed, fast_math, init_distributed, replicas_agree, seed_everything

    env, device = init_distributed()
    fast_math(device)
    recipe = zoo.cli.recipe_from_args(args)
    run = run_config(recipe, args.recipe)
    seed_everything(run.seed)  # every rank starts from the same weights
    step = build(recipe, device, env.world_size)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    started = time.perf_counter()
    step.call()
    sync()
    first_step_s = time.perf_counter() - started
    for _ in range(args.warmup):
        step.call()
    iters, windows = _timed_windows(step, args, sync, device)
    agree = replicas_agree(step.model)
    median = sorted(windows)[len(windows) // 2]
    row = {
        "gpus": env.world_size,
        "nodes": env.world_size // max(1, env.local_world_size),
        "precision": run.precision,
        "batch_per_gpu": run.batch_per_gpu,
        "accumulation": run.accumulation,
        "throughput": env.world_size * step.items * iters / median,
        "unit": step.unit,
        "window_seconds": windows,
        "steps_per_window": iters,
        "first_step_s": first_step_s,
        "replicas_agree": agree,
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU ({platform.machine()})",
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
    }
    if env.rank == 0:
        pathlib.Path(args.scaling_report).write_text(json.dumps(row))
    if dist.is_initialized():
        dist.barrier()
    close_distributed()
    if agree is False:
        raise UserError(f"weights differ across the {env.world_size} ranks after the timed steps")
    return row


def _timed_windows(step: Step, args, sync, device) -> tuple[int, list[float]]:
    """(steps per window, seconds of each window on the slowest rank). Every rank runs the same number
    of steps: enough for ``--window-seconds`` on the slowest one, measured over a short probe."""
    import torch
    import torch.distributed as dist

    def slowest(values: list[float]) -> list[float]:
        if not dist.is_initialized():
            return values
        where = device if dist.get_backend() == "nccl" else "cpu"
        tensor = torch.tensor(values, dtype=torch.float64, device=where)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return tensor.tolist()

    probe = 2  # a window is lengthened below when this guess falls short; slow CPU steps time few
    sync()
    began = time.perf_counter()
    for _ in range(probe):
        step.call()
    sync()
    (per_step,) = slowest([(time.perf_counter() - began) / probe])
    iters = max(1, math.ceil(args.window_seconds / max(per_step, 1e-6)))
    windows = []
    while len(windows) < args.windows:
        sync()
        began = time.perf_counter()
        for _ in range(iters):
            step.call()
        sync()
        (seconds,) = slowest([time.perf_counter() - began])
        if seconds >= args.window_seconds:
            windows.append(seconds)
        else:  # the probe underestimated a step: lengthen the window and time it again
            windows.clear()
            iters = math.ceil(iters * 1.1 * args.window_seconds / seconds)
    return iters, windows


def table(rows: list[dict]) -> str:
    """The scaling table: one line per GPU count, then the command, device and date."""
    unit = rows[0]["unit"]
    lines = [f"{'GPUs':>4} {'precision':<9} {'batch/GPU':>9} {unit:>14} {'scaling':>8} {'replicas':>9}"]
    for row in rows:
        scaling = f"{100 * row['scaling']:.1f}%" if row.get("scaling") else "-"
        agree = {True: "equal", False: "DIFFER", None: "-"}[row["replicas_agree"]]
        lines.append(
            f"{row['gpus']:>4} {row['precision']:<9} {row['batch_per_gpu']:>9} {row['throughput']:>14,.1f} "
            f"{scaling:>8} {agree:>9}"
        )
    lines.append(f"command: {rows[0]['command']}")
    lines.append(f"device: {rows[0]['device']}, torch {rows[0]['torch']}, {rows[0]['date']}")
    return "\n".join(lines)


def command_line(argv: list[str]) -> str:
    return shlex.join(["scripts/benchmark.sh", *argv])


def _without(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    """``argv`` less each of ``flags`` and its value (``--flag V`` or ``--flag=V``)."""
    kept, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item in flags:
            skip = True
        elif not any(item.startswith(flag + "=") for flag in flags):
            kept.append(item)
    return kept


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
