"""Exact ROC AUC of a checkpoint over the whole validation split:
``python -m dlrm.evaluate --data-dir D --checkpoint RESULTS/checkpoint`` (torchrun for several
processes). Uses the recipe's embedding path (torchrec or plain); writes RESULTS_DIR/eval.json.
"""

from __future__ import annotations

import argparse
import json
import pathlib

from zoo.cli import add_run_args, entry_point, parse_args, recipe_from_args

from dlrm.train import DEFAULT_RECIPE, Run, evaluate_auc


@entry_point
def main(argv=None) -> None:
    from zoo.io import atomic_write
    from zoo.log import MetricsLogger
    from zoo.torch import close_distributed, init_distributed

    from dlrm.data import Batches, Split, read_meta

    parser = argparse.ArgumentParser(prog="python -m dlrm.evaluate", description=__doc__.split("\n\n")[0])
    add_run_args(
        parser, default_recipe=DEFAULT_RECIPE, resume=False, data_help="prepared Criteo shards ($DATA_DIR)"
    )
    parser.add_argument(
        "--checkpoint", default=None, help="checkpoint directory (default: RESULTS_DIR/checkpoint)"
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    args = parse_args(parser, argv)
    recipe = recipe_from_args(args)
    if not args.data_dir:
        raise SystemExit("error: give --data-dir (or set DATA_DIR)")
    results_dir = pathlib.Path(args.results_dir)
    checkpoint = pathlib.Path(args.checkpoint or results_dir / "checkpoint")
    meta = read_meta(args.data_dir)
    if not (checkpoint / "progress.json").is_file():
        raise SystemExit(f"error: {checkpoint} is not a DLRM checkpoint (no progress.json)")
    env, device = init_distributed(args.device)
    run = Run(recipe, meta, device, env.rank, env.world_size)
    run.load(checkpoint, weights_only=True)
    split = Split(args.data_dir, "val")
    batch = int(recipe.get("eval", {}).get("batch_size", recipe["train"]["batch_size"]))
    batches = Batches(split, batch, env.rank, env.world_size, run.rows, run.hotness, drop_last=False)
    logger = MetricsLogger(enabled=env.rank == 0, total_steps=batches.count, desc="eval")
    auc, logloss, samples = evaluate_auc(run, batches, logger)
    logger.close()
    if env.rank == 0:
        result = {"auc": auc, "logloss": logloss, "samples": samples, "checkpoint": str(checkpoint)}
        results_dir.mkdir(parents=True, exist_ok=True)
        with atomic_write(results_dir / "eval.json") as tmp:
            tmp.write_text(json.dumps(result, indent=1) + "\n")
        print(f"auc {auc:.5f}  logloss {logloss:.5f}  samples {samples}")
    close_distributed()


if __name__ == "__main__":
    main()
