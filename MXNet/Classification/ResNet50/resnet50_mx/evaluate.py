"""Top-1 / top-5 accuracy (%) of a checkpoint on the validation RecordIO (the loop: engine.evaluate)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from zoo.cli import AMP_CHOICES, entry_point, parse_args
from zoo.errors import UserError
from zoo.log import MetricsLogger


@entry_point
def main(argv=None):
    from resnet50_mx import BACKENDS

    p = argparse.ArgumentParser(prog="evaluate.sh", description="Top-1/top-5 of a ResNet-50 v1.5 checkpoint.")
    p.add_argument(
        "--checkpoint",
        required=True,
        help="results dir (its checkpoint/), a checkpoint folder, .params file or registry name",
    )
    p.add_argument(
        "--data-dir", default=os.environ.get("DATA_DIR"), help="folder with val.rec/.idx ($DATA_DIR)"
    )
    p.add_argument(
        "--amp", choices=AMP_CHOICES, default="fp32", help="fp16 on GPU, bf16 on CPU (oneDNN); fp32: no AMP"
    )
    p.add_argument("--data-backend", choices=[b for b in BACKENDS if b != "synthetic"], default="recordio")
    p.add_argument("--batch-size", type=int, default=64, help="per device")
    p.add_argument("--image-size", type=int, help="default: the checkpoint's, else 224")
    p.add_argument("--num-classes", type=int, help="expected class count (checked against the checkpoint)")
    p.add_argument("--gpus", help="GPU count or comma list of ids (empty: CPU)")
    p.add_argument("--threads", type=int, default=4, help="decode threads")
    args = parse_args(p, argv)
    from .records import check_dataset, require_classes

    # the flags and the data are checked before MXNet is imported
    for flag in ("batch_size", "image_size", "num_classes", "threads"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be a positive integer, not {value}")
    if not args.data_dir:
        raise UserError("no validation data: pass --data-dir or set DATA_DIR")
    checked = check_dataset(args.data_dir, ["val"], threads=args.threads)

    import mxnet as mx
    from mxnet.contrib import amp as mx_amp

    from resnet50_mx.engine import evaluate

    from .checkpoint import load_for_inference
    from .data import DataSpec, build_loader, val_transform
    from .processes import parse_gpus

    gpus = parse_gpus(args.gpus)
    ctx = [mx.gpu(g) for g in gpus] or [mx.cpu()]
    if args.amp == "fp16" and not gpus:
        raise UserError(
            "--amp fp16 needs a GPU (MXNet's float16 kernels are GPU-only); on CPU use --amp bf16"
        )
    if args.amp != "fp32":  # before the network is built: AMP rewrites the operator namespaces
        mx_amp.init(target_dtype="float16" if args.amp == "fp16" else "bfloat16")
    net, meta = load_for_inference(args.checkpoint, num_classes=args.num_classes, ctx=ctx)
    require_classes(
        args.data_dir,
        checked,
        meta["num_classes"],
        f"checkpoint {args.checkpoint}",
        "evaluate a checkpoint on data of the classes it was trained on",
    )
    net.hybridize(static_alloc=True)
    image_size = args.image_size or meta.get("image_size", 224)
    spec = DataSpec(
        backend=args.data_backend,
        data_dir=args.data_dir,
        batch_size=args.batch_size * len(ctx),
        image_size=image_size,
        num_classes=meta["num_classes"],
        threads=args.threads,
        val_preprocessing=meta.get("preprocessing"),  # a registry checkpoint is scored as published
    )
    val = val_transform(spec)
    used = dict(val, crop=image_size)
    print(
        f"preprocessing: resize {val['resize']}, crop {image_size}, {val['interpolation']}, "
        f"mean {val['mean']}, std {val['std']} (0..255)",
        file=sys.stderr,
    )
    tic = time.time()
    loader = build_loader(spec, train=False, epoch=0, seed=0, ctx=ctx[0])
    with MetricsLogger(total_steps=loader.batches, desc="evaluate") as progress:
        result = evaluate(net, loader, ctx, progress)
    result["throughput"] = result["samples"] / (time.time() - tic)
    result["preprocessing"] = used
    print(
        f"top1 {result['top1']:.2f}%  top5 {result['top5']:.2f}%  ({result['samples']} images)",
        file=sys.stderr,
    )
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
