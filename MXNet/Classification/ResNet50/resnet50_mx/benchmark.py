"""Training and inference throughput (images/s) and latency of ResNet-50 v1.5 in MXNet, JSON report.

Synthetic data made once on the device, so the numbers measure the network, the optimizer and the
kvstore, not the input pipeline (``--data-dir`` times the RecordIO pipeline + training instead).
"""

from __future__ import annotations

import argparse
import json
import sys

from zoo.bench import measure, write_report
from zoo.cli import AMP_CHOICES, entry_point, parse_args
from zoo.errors import UserError

from . import DEFAULT_RECIPE


def _net(num_classes: int, layout: str, ctx):
    import mxnet as mx

    from resnet50_mx.model import build_model

    net = build_model(num_classes, layout=layout, input_layout="NCHW")
    net.initialize(mx.init.MSRAPrelu(factor_type="in", slope=0.0), ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def bench_train(args, ctx) -> dict:
    import mxnet as mx
    from zoo.recipe import load_recipe

    from resnet50_mx.processes import Processes
    from resnet50_mx.step import TrainStep, build_trainer

    procs = Processes("device", len(ctx), False)
    net = _net(args.num_classes, args.layout, ctx)
    recipe = load_recipe(DEFAULT_RECIPE)  # the optimizer and label smoothing of the default recipe
    trainer = build_trainer(net, recipe, procs, args.amp, base_lr=0.1)
    batch = args.batch_size * len(ctx)
    shape = (batch, 3, args.image_size, args.image_size)
    data = mx.nd.random.normal(shape=shape, ctx=ctx[0])
    label = mx.nd.array(mx.nd.random.randint(0, args.num_classes, shape=(batch,)).asnumpy(), ctx=ctx[0])

    smoothing = float(recipe["loss"]["label_smoothing"])
    step = TrainStep(
        net, trainer, ctx, num_classes=args.num_classes, smoothing=smoothing, amp=args.amp, step_batch=batch
    )
    summary = measure(
        lambda: step(data, label),
        items_per_call=batch,
        warmup=args.warmup,
        iters=args.steps,
        sync=mx.nd.waitall,
        per_call=True,
    )
    return dict(summary, mode="train", batch_size=batch, per_device_batch=args.batch_size)


def bench_inference(args, ctx, batch_size: int) -> dict:
    import mxnet as mx

    net = _net(args.num_classes, args.layout, ctx[:1])
    data = mx.nd.random.normal(shape=(batch_size, 3, args.image_size, args.image_size), ctx=ctx[0])
    summary = measure(
        lambda: net(data),
        items_per_call=batch_size,
        warmup=args.warmup,
        iters=args.steps,
        sync=mx.nd.waitall,
        per_call=True,
    )
    return dict(summary, mode="inference", batch_size=batch_size)


@entry_point
def main(argv=None):
    from resnet50_mx import LAYOUTS

    p = argparse.ArgumentParser(prog="benchmark.sh", description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["train", "inference", "both"], default="both")
    p.add_argument("--gpus", help="GPU count or comma list (empty: CPU)")
    p.add_argument(
        "--amp", choices=AMP_CHOICES, default="fp32", help="fp16 on GPU, bf16 on CPU; fp32: no AMP"
    )
    p.add_argument("--layout", choices=LAYOUTS, default="NCHW")
    p.add_argument("--batch-size", type=int, default=256, help="training batch per device")
    p.add_argument("--inference-batch-sizes", default="1,256", help="comma list")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--steps", type=int, default=100, help="timed steps (each synchronised, for latency)")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    p.add_argument("--output", default="results/benchmark.json", help="JSON report (zoo.bench schema)")
    args = parse_args(p, argv)
    if args.steps < 1 or args.warmup < 0:
        raise UserError("--steps must be >= 1 and --warmup >= 0")
    try:
        sizes = [int(b) for b in args.inference_batch_sizes.split(",") if b]
    except ValueError:
        raise UserError(
            f"--inference-batch-sizes must be a comma list of integers: {args.inference_batch_sizes!r}"
        ) from None
    counts = (
        ("--batch-size", args.batch_size),
        ("--image-size", args.image_size),
        ("--num-classes", args.num_classes),
    )
    for flag, value in counts:
        if value < 1:
            raise UserError(f"{flag} must be a positive integer, not {value}")
    if not sizes or min(sizes) < 1:
        raise UserError(
            f"--inference-batch-sizes must be positive integers, not {args.inference_batch_sizes!r}"
        )
    import mxnet as mx  # after the checks of the flags
    from mxnet.contrib import amp as mx_amp

    from resnet50_mx.processes import parse_gpus

    gpus = parse_gpus(args.gpus)
    ctx = [mx.gpu(g) for g in gpus] or [mx.cpu()]
    if args.amp == "fp16" and not gpus:
        raise UserError("--amp fp16 needs a GPU; on CPU use --amp bf16")
    if args.amp != "fp32":
        mx_amp.init(target_dtype="float16" if args.amp == "fp16" else "bfloat16")
    results = []
    if args.mode in ("train", "both"):
        results.append(bench_train(args, ctx))
    if args.mode in ("inference", "both"):
        results += [bench_inference(args, ctx, b) for b in sizes]
    device = ", ".join(map(str, ctx))
    for r in results:
        r.update(device=device, amp=args.amp, layout=args.layout, image_size=args.image_size)
        print(
            f"{r['mode']:9s} batch {r['batch_size']:4d}  {r['throughput']:9.1f} img/s  "
            f"p50 {r['latency_ms']['p50']:.2f} ms  p99 {r['latency_ms']['p99']:.2f} ms",
            file=sys.stderr,
        )
    write_report(args.output, results, framework="mxnet", mxnet=mx.__version__, model="ResNet-50 v1.5")
    print(json.dumps({"output": args.output, "results": len(results)}))


if __name__ == "__main__":
    main()
