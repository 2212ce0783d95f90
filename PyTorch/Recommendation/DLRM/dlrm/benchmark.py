"""Training samples/s of this model (the recipe's path: TorchRec-sharded fused tables, or plain) next to
a plain eager PyTorch DLRM as the original facebookresearch code builds it (one nn.EmbeddingBag per
table with sparse gradients, SGD), on the same synthetic batches and sizes, in the same run:
``python -m dlrm.benchmark [--recipe R] [--amp bf16] [--batch-size B] [--rows N] [--output FILE]``.

With ``--gpus 1,2,4``, the scaling mode every PyTorch model shares (zoo.scaling): the recipe's training
step (dlrm.step.TrainStep, DDP or TorchRec as in training) over GPU counts, per-GPU batch fixed, on
random batches of ids below ``benchmark.rows_per_table`` rows per table, in samples/s.
"""

from __future__ import annotations

import argparse
import itertools
import pathlib

import numpy as np
import zoo.scaling
from zoo.cli import add_run_args, entry_point, parse_args, recipe_from_args


def synthetic_batches(count: int, batch: int, rows: list[int], hotness: list[int], seed: int = 0):
    """``count`` (labels, dense, sparse) batches of random clicks, log-counts and ids within ``rows``."""
    import torch

    from dlrm.data import NUM_DENSE, expand_categorical

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        cats = np.stack([rng.integers(0, n, batch) for n in rows], axis=1)
        out.append(
            (
                torch.from_numpy(rng.integers(0, 2, batch).astype(np.float32)),
                torch.from_numpy(np.log1p(rng.poisson(3.0, (batch, NUM_DENSE))).astype(np.float32)),
                torch.from_numpy(expand_categorical(cats, rows, hotness)),
            )
        )
    return out


def scaling_step(recipe: dict, device, world_size: int) -> zoo.scaling.Step:
    """The recipe's TrainStep on ``world_size`` processes (DDP over the plain path, TorchRec's sharding
    otherwise) on 4 random batches of ``run.batch_per_gpu`` rows a GPU, cycled, ids below
    ``benchmark.rows_per_table`` rows per table; the replicas compared are the whole plain model, or
    TorchRec's dense part (its tables are sharded, not replicated)."""
    import torch
    import torch.distributed as dist
    from zoo.recipe import run_config

    from dlrm.data import NUM_CATEGORICAL, NUM_DENSE
    from dlrm.model import hotness_of, table_sizes
    from dlrm.sharding import dense_parameters
    from dlrm.step import TrainStep, check_recipe

    check_recipe(recipe)
    run = run_config(recipe)
    rank = dist.get_rank() if dist.is_initialized() else 0
    rows = table_sizes(recipe["model"], [int(recipe["benchmark"]["rows_per_table"])] * NUM_CATEGORICAL)
    step = TrainStep(recipe, {"num_embeddings": rows, "num_dense": NUM_DENSE}, device, rank, world_size)
    batches = synthetic_batches(4, run.batch_per_gpu, rows, hotness_of(recipe["model"], len(rows)), seed=rank)
    if torch.device(device).type == "cuda":  # as a loader with pin_memory hands them over
        batches = [tuple(t.pin_memory() for t in batch) for batch in batches]
    cycle = itertools.cycle(batches)
    replicated = step.net if step.kind == "plain" else torch.nn.ParameterList(dense_parameters(step.model))
    return zoo.scaling.Step(
        lambda: step(*next(cycle)),
        items=run.batch_per_gpu * run.accumulation,
        unit="samples/s",
        model=replicated,
    )


def baseline_step(recipe: dict, rows: list[int], num_dense: int, device, amp: str):
    """A step function of the original-style eager DLRM (EmbeddingBag(sparse=True) per table, SGD)."""
    import torch
    import torch.nn.functional as F
    from zoo.recipe import run_config
    from zoo.torch import autocast

    from dlrm.model import DLRM, PerTableEmbeddingBags, hotness_of, table_names

    cfg, seed, dim = recipe["model"], run_config(recipe).seed, int(recipe["model"]["embedding_dim"])
    tables = PerTableEmbeddingBags(
        table_names(len(rows)), rows, dim, hotness_of(cfg, len(rows)), seed, sparse=True
    )
    torch.manual_seed(seed)
    model = DLRM(tables, num_dense=num_dense, num_tables=len(rows), dim=dim, cfg=cfg).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=float(recipe["sparse_optimizer"]["lr"]))

    def step(labels, dense, sparse):
        with autocast(device, amp):
            logits = model(dense.to(device), sparse.to(device)).float()
        loss = F.binary_cross_entropy_with_logits(logits, labels.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


@entry_point
def main(argv=None) -> None:
    from dlrm import DEFAULT_RECIPE

    if zoo.scaling.asked_for(argv):
        return zoo.scaling.main(
            argv, module="dlrm.benchmark", build=scaling_step, default_recipe=DEFAULT_RECIPE
        )
    parser = argparse.ArgumentParser(prog="python -m dlrm.benchmark", description=__doc__.split("\n\n")[0])
    add_run_args(parser, default_recipe=DEFAULT_RECIPE, data_dir=False, resume=False)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="samples per process (run.batch_per_gpu; default: the recipe's)",
    )
    parser.add_argument(
        "--rows",
        type=int,
        default=None,
        help="rows per table (default: the recipe's benchmark.rows_per_table; capped by model.max_rows)",
    )
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--no-baseline", action="store_true", help="measure only this model")
    parser.add_argument("--output", default=None, help="JSON report (default: RESULTS_DIR/benchmark.json)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    parser.add_argument(
        "--gpus",
        metavar="1,2,4",
        help="the scaling mode (zoo.scaling): the recipe's training step on each GPU count, per-GPU batch "
        "fixed; it takes --recipe, --set, --amp, --batch-size, --window-seconds S (20), --windows N (3), "
        "--warmup N (20), --output FILE; benchmark.rows_per_table sizes the tables",
    )
    args = parse_args(parser, argv)
    import torch
    from zoo.bench import measure, write_report
    from zoo.recipe import run_config
    from zoo.torch import close_distributed, fast_math, init_distributed

    from dlrm.data import NUM_DENSE
    from dlrm.model import hotness_of, table_sizes
    from dlrm.step import TrainStep, check_recipe  # after parsing: they load torch

    recipe = recipe_from_args(args)
    check_recipe(recipe)
    run = run_config(recipe, args.recipe)
    env, device = init_distributed(args.device)
    amp = run.precision
    local = run.batch_per_gpu
    batch = local * env.world_size
    rows = table_sizes(recipe["model"], [args.rows or int(recipe["benchmark"]["rows_per_table"])] * 26)
    hotness = hotness_of(recipe["model"], len(rows))
    fast_math(device)
    batches = synthetic_batches(4, local, rows, hotness, seed=env.rank)
    if device.type == "cuda":  # as a loader with pin_memory hands them over, for both models
        batches = [tuple(t.pin_memory() for t in batch) for batch in batches]
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    calls = iter(range(1 << 62))

    def cycle(step):
        return lambda: step(*batches[next(calls) % len(batches)])

    meta = {
        "amp": amp,
        "device": str(device),
        "batch_size": batch,
        "world_size": env.world_size,
        "rows_per_table": rows[0],
        "hotness": hotness,
        "recipe": str(args.recipe),
    }
    results = []
    step = TrainStep(
        recipe, {"num_embeddings": rows, "num_dense": NUM_DENSE}, device, env.rank, env.world_size
    )
    meta["table_kernels"] = "triton" if step.table_kernels else "torch"
    ours = measure(
        cycle(step),
        items_per_call=batch,
        warmup=args.warmup,
        iters=args.iters,
        windows=args.windows,
        sync=sync,
    )
    results.append(
        {"name": f"ours ({step.kind} embeddings)", "train_samples_per_s": ours["throughput"], **ours}
    )
    if not args.no_baseline and env.world_size == 1:
        base = measure(
            cycle(baseline_step(recipe, rows, NUM_DENSE, device, amp)),
            items_per_call=batch,
            warmup=args.warmup,
            iters=args.iters,
            windows=args.windows,
            sync=sync,
        )
        results.append(
            {
                "name": "eager PyTorch DLRM (EmbeddingBag per table, SGD)",
                "train_samples_per_s": base["throughput"],
                **base,
            }
        )
        meta["ratio_ours_to_eager"] = ours["throughput"] / base["throughput"]
    if env.rank == 0:
        output = pathlib.Path(args.output or pathlib.Path(args.results_dir) / "benchmark.json")
        output.parent.mkdir(parents=True, exist_ok=True)
        write_report(output, results, **meta)
        for r in results:
            print(f"{r['name']}: {r['train_samples_per_s']:,.0f} samples/s")
        if "ratio_ours_to_eager" in meta:
            print(f"ours / eager: {meta['ratio_ours_to_eager']:.2f}x  ({output})")
    close_distributed()


if __name__ == "__main__":
    main()
