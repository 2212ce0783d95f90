"""Exact ROC AUC of a checkpoint over the whole validation split:
``python -m dlrm.evaluate --data-dir D --checkpoint RESULTS/checkpoint`` (torchrun for several
processes). Uses the recipe the checkpoint was trained with (its embedding path, torchrec or plain) unless
--recipe is given; writes RESULTS_DIR/eval.json.
"""

from __future__ import annotations

import argparse
import json
import pathlib

from zoo.cli import add_run_args, entry_point, parse_args, recipe_from_args
from zoo.errors import UserError


@entry_point
def main(argv=None) -> None:
    from dlrm import DEFAULT_RECIPE

    parser = argparse.ArgumentParser(prog="python -m dlrm.evaluate", description=__doc__.split("\n\n")[0])
    add_run_args(
        parser, default_recipe=DEFAULT_RECIPE, resume=False, data_help="prepared Criteo shards ($DATA_DIR)"
    )
    parser.add_argument(
        "--checkpoint", default=None, help="checkpoint directory (default: RESULTS_DIR/checkpoint)"
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    args = parse_args(parser, argv)

    from zoo.io import atomic_write
    from zoo.log import MetricsLogger
    from zoo.torch import SHARDED_CHECKPOINT_NAME, close_distributed, init_distributed

    from dlrm.data import Split, read_meta

    if not args.data_dir:
        raise UserError("give --data-dir (or set DATA_DIR)")
    results_dir = pathlib.Path(args.results_dir)
    checkpoint = pathlib.Path(args.checkpoint or results_dir / SHARDED_CHECKPOINT_NAME)
    meta = read_meta(args.data_dir)  # before torch is imported: bad input ends in a second

    from dlrm.engine import evaluate
    from dlrm.step import TrainStep, read_checkpoint

    saved = read_checkpoint(checkpoint, flag="--checkpoint")  # a wrong path ends here, before any work
    # the recipe it was trained with (tables, embedding path, evaluation batch); --recipe and --set win
    recipe = recipe_from_args(args, saved=saved["recipe"])
    env, device = init_distributed(args.device)
    step = TrainStep(recipe, meta, device, env.rank, env.world_size)
    step.load(checkpoint, weights_only=True, flag="--checkpoint")
    batches = step.batches(Split(args.data_dir, "val", meta), int(recipe["eval"]["batch_size"]), train=False)
    logger = MetricsLogger(enabled=env.rank == 0, total_steps=batches.count, desc="eval")
    metrics = evaluate(step, batches, logger)
    logger.close()
    if env.rank == 0:
        result = {**metrics, "checkpoint": str(checkpoint)}
        results_dir.mkdir(parents=True, exist_ok=True)
        with atomic_write(results_dir / "eval.json") as tmp:
            tmp.write_text(json.dumps(result, indent=1) + "\n")
        print(f"auc {metrics['auc']:.5f}  loss {metrics['loss']:.5f}  samples {metrics['samples']}")
    close_distributed()


if __name__ == "__main__":
    main()
