"""Training throughput of the recipe's step (ours) beside what a user would write instead (the peer),
on the same network, batch and device, in the same run.

    python -m skeleton.benchmark --recipe configs/tiny_cpu.yaml [--amp bf16] [--report results/benchmark.json]

"ours" is TrainStep, the step train.py runs, built from the recipe: each speed lever is a recipe key
(--set KEY=VALUE), never a benchmark-private path. The peer is a plain eager loop over the same model.
A number goes into the README with the GPU, this command, precision, batch and date.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import shlex
import sys

import zoo.cli
from zoo.bench import measure, write_report
from zoo.cli import entry_point
from zoo.recipe import run_config

from skeleton import DEFAULT_RECIPE


def peer_step(recipe: dict, device):
    """The training step a user writes by hand: the same model, loss and optimizer, eager, no levers."""
    import torch

    from skeleton.model import build_model

    model = build_model(recipe).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(recipe["optimizer"]["lr"]))

    def step(x, y):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m skeleton.benchmark", description=__doc__.split("\n")[0])
    zoo.cli.add_run_args(p, default_recipe=DEFAULT_RECIPE, data_dir=False, results_dir=False, resume=False)
    p.add_argument("--batch-size", type=int, help="samples per step (run.batch_per_gpu)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--iters", type=int, default=50, help="timed steps per window")
    p.add_argument("--windows", type=int, default=3, help="windows; the median is reported")
    p.add_argument("--device", default=None)
    p.add_argument("--report", default=None, help="write the results as JSON here")
    args = zoo.cli.parse_args(p, argv)

    import torch

    from skeleton.data import synthetic_split
    from skeleton.step import TrainStep

    recipe = zoo.cli.recipe_from_args(args)
    run = run_config(recipe, args.recipe)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    batch = run.batch_per_gpu * run.accumulation
    x, y = (t.to(device) for t in synthetic_split(batch, run.seed))
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    results = []
    for name, step in (("ours", TrainStep(recipe, device)), ("peer (eager)", peer_step(recipe, device))):
        timing = measure(lambda step=step: step(x, y), items_per_call=batch, warmup=args.warmup, iters=args.iters,
                         windows=args.windows, sync=sync)  # fmt: skip
        results.append({"name": name, "precision": run.precision, "batch": batch, **timing})
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    command = "scripts/benchmark.sh " + shlex.join(sys.argv[1:] if argv is None else argv)
    print(
        f"{'':14} {'samples/s':>12} {'x peer':>7}   ({gpu}, {run.precision}, batch {batch}, {datetime.date.today()})"
    )
    for row in results:
        print(
            f"{row['name']:14} {row['throughput']:>12,.0f} {row['throughput'] / results[1]['throughput']:>6.2f}x"
        )
    print(f"command: {command}")
    if args.report:
        write_report(args.report, results, device=gpu, command=command)


if __name__ == "__main__":
    main()
