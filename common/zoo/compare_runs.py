"""Compare two runs' training losses step for step (their RESULTS_DIR/metrics.jsonl).

    python -m zoo.compare_runs results/one_node results/two_nodes [--rtol 0]

Prints the steps side by side and ends in one line (exit 1) if a step of one run is missing from the
other or its loss differs by more than ``--rtol`` (relative; 0: identical). A model's
``scripts/check_two_nodes.sh`` (common/scripts/check_two_nodes.sh) uses it to check that two nodes train
as one does.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib

from zoo.cli import entry_point
from zoo.errors import UserError


def train_losses(results_dir) -> dict[int, float]:
    """{optimizer step: loss} of a run's train readings."""
    path = pathlib.Path(results_dir) / "metrics.jsonl"
    if not path.is_file():
        raise UserError(f"{path} does not exist: no run finished there")
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {
        r["step"]: r["metrics"]["loss"] for r in records if r["phase"] == "train" and "loss" in r["metrics"]
    }


def differences(first: dict, second: dict, rtol: float) -> list[str]:
    """One line per step whose loss differs (or is missing from one run)."""
    problems = []
    for step in sorted(first.keys() | second.keys()):
        if step not in first or step not in second:
            problems.append(f"step {step}: only in {'the first' if step in first else 'the second'} run")
        elif not math.isclose(first[step], second[step], rel_tol=rtol, abs_tol=0.0):
            problems.append(f"step {step}: loss {first[step]:.7g} != {second[step]:.7g}")
    return problems


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m zoo.compare_runs", description=__doc__.split("\n")[0])
    p.add_argument("first", help="RESULTS_DIR of one run")
    p.add_argument("second", help="RESULTS_DIR of the other")
    p.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default 0: identical)")
    args = p.parse_args(argv)
    first, second = train_losses(args.first), train_losses(args.second)
    if not first:
        raise UserError(f"{args.first} logged no training loss")
    for step in sorted(first.keys() | second.keys()):
        print(f"step {step:>6}  {first.get(step, math.nan):>12.7g}  {second.get(step, math.nan):>12.7g}")
    problems = differences(first, second, args.rtol)
    if problems:
        raise UserError(
            f"the runs differ at {len(problems)} step(s), first {problems[0]} (--rtol {args.rtol:g})"
        )
    print(f"same losses at all {len(first)} steps (--rtol {args.rtol:g})")


if __name__ == "__main__":
    main()
