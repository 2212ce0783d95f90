"""Top-1 / top-5 accuracy of a checkpoint on the validation folder (data_dir/val/<class>/*.jpg).

python -m efficientnet.evaluate --checkpoint results/checkpoint.pt --data-dir /data/imagenet
python -m efficientnet.evaluate --pretrained timm-efficientnet-b0-ra-in1k --data-dir /data/imagenet

The result is printed and written to RESULTS_DIR/eval.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import time

import zoo.cli
from zoo.checkpoints import CheckpointError
from zoo.cli import entry_point
from zoo.io import atomic_write
from zoo.log import MetricsLogger


def parse_args(argv=None) -> argparse.Namespace:
    from zoo.imagenet_loaders import BACKENDS

    from efficientnet.checkpoints import add_model_args

    p = argparse.ArgumentParser(prog="python -m efficientnet.evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default=None, help="training checkpoint or state_dict file")
    p.add_argument("--pretrained", default=None, help="registry name (checkpoints.yaml) instead of a file")
    p.add_argument("--data-dir", default=os.environ.get("DATA_DIR"), help="folder with val/ ($DATA_DIR)")
    p.add_argument(
        "--results-dir",
        default=os.environ.get("RESULTS_DIR", "results"),
        help="eval.json is written here ($RESULTS_DIR, else results)",
    )
    p.add_argument("--data-backend", choices=BACKENDS, default="pytorch")
    add_model_args(p)
    p.add_argument("--image-size", type=int, default=None, help="centre-crop size (default: the model's)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument(
        "--amp", choices=zoo.cli.AMP_CHOICES, default="fp32",
        help="precision of the weights (the exported model's: BatchNorm folded, weights cast outright)",
    )  # fmt: skip
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda where a GPU is visible)")
    p.add_argument("--limit-batches", type=int, default=None, help="evaluate only the first N batches")
    args = zoo.cli.parse_args(p, argv, renamed={"--output": "--results-dir (eval.json is written there)"})
    import torch  # after parsing: --help and a bad flag answer without loading the framework

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return args


def run(args) -> dict:
    import torch
    from zoo.classification.inference import inference_model
    from zoo.imagenet_loaders import DataConfig, build_loader, check_layout

    from efficientnet.checkpoints import build_model_for, eval_preprocessing, resolve_weights
    from efficientnet.engine import evaluate

    weights = resolve_weights(args.pretrained, args.checkpoint)
    if weights is None:
        raise CheckpointError("give --checkpoint PATH or --pretrained NAME")
    model, image_size = build_model_for(
        weights, variant=args.variant, wide_se=args.wide_se, width=args.width, num_classes=args.num_classes,
        trusted=args.pretrained is None,
    )  # fmt: skip
    # a registry checkpoint is scored as it was published (timm's B4 at 384, crop_pct 1.0)
    preprocessing = eval_preprocessing(args.pretrained, args.image_size or image_size)
    print(f"preprocessing: {preprocessing.describe()}")
    num_classes = model.classifier.out_features
    device = torch.device(args.device)
    # the model export.py writes and benchmark.py times (it casts to its precision itself: no autocast)
    model = inference_model(model, amp=args.amp, channels_last=args.channels_last, device=device)
    cfg = DataConfig(
        data_dir=args.data_dir, backend=args.data_backend, batch_size=args.batch_size,
        image_size=preprocessing.crop, workers=args.workers, num_classes=num_classes,
        device=str(device), channels_last=args.channels_last, val_preprocessing=preprocessing,
    )  # fmt: skip
    classes = None
    if cfg.backend != "synthetic":
        classes = check_layout(args.data_dir, num_classes, splits=("val",))
    loader = build_loader(cfg, "val", classes)
    batches = loader.batches_per_epoch
    if args.limit_batches is not None:
        batches = min(batches, args.limit_batches)
    start = time.perf_counter()
    with MetricsLogger(total_steps=batches, desc="eval") as progress:
        metrics = evaluate(model, loader, device, "fp32", args.limit_batches, progress=progress)
    seconds = time.perf_counter() - start
    used = dataclasses.asdict(preprocessing)
    return {
        "checkpoint": str(weights),
        "amp": args.amp,
        "preprocessing": used,
        **metrics,
        "seconds": round(seconds, 2),
    }


@entry_point
def main(argv=None) -> None:
    args = parse_args(argv)
    result = run(args)
    print(
        f"top1 {result['top1']:.2f}%  top5 {result['top5']:.2f}%  loss {result['loss']:.4f}  ({result['seconds']} s)"
    )
    path = pathlib.Path(args.results_dir) / "eval.json"
    with atomic_write(path) as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
