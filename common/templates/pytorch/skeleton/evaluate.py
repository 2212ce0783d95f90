"""Score a checkpoint on the validation split: the metrics training logs, from the checkpoint alone.

    python -m skeleton.evaluate --checkpoint results/checkpoint.pt --data-dir data/skeleton

The training checkpoint carries its recipe, so the network is rebuilt as it was trained; no other flag.
"""

from __future__ import annotations

import argparse
import json

import zoo.cli
from zoo.cli import entry_point
from zoo.torch import TRAINING_STATE_FIELDS, init_distributed, load_training_checkpoint


def load_trained(path, device="cpu"):
    """(model with the checkpoint's weights, the recipe it was trained with)."""
    from skeleton.model import build_model

    saved = load_training_checkpoint(
        path, TRAINING_STATE_FIELDS, "a skeleton training checkpoint", "--checkpoint"
    )
    model = build_model(saved["recipe"])
    model.load_state_dict(saved["model"])
    return model.to(device).eval(), saved["recipe"]


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m skeleton.evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True, help="a training checkpoint (RESULTS_DIR/checkpoint.pt)")
    p.add_argument("--data-dir", default=None, help="prepared data folder ($DATA_DIR)")
    p.add_argument("--synthetic", action="store_true", help="random samples of the real shapes")
    p.add_argument("--amp", choices=zoo.cli.AMP_CHOICES, default="fp32", help="precision of the evaluation")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--device", default=None)
    args = zoo.cli.parse_args(p, argv)

    from skeleton.data import Batches, load_split, synthetic_split
    from skeleton.engine import evaluate

    _, device = init_distributed(args.device)
    split = synthetic_split(256, 1) if args.synthetic else load_split(args.data_dir or ".", "val")
    model, _ = load_trained(args.checkpoint, device)
    metrics = evaluate(
        model, Batches(*split, args.batch_size, shuffle=False, device=device), device, args.amp
    )
    print(json.dumps({name: round(value, 4) for name, value in metrics.items()}))


if __name__ == "__main__":
    main()
