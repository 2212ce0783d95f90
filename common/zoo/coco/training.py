"""A detector's train.py: its flags beside zoo.cli's, the recipe with its run: section checked, the
global batch and the learning rate scaled to it, the COCO folders, backbone weights, the MLPerf log's
start and a training checkpoint loaded back into its parts."""

from __future__ import annotations

import sys

# ------------------------------------------------------------------------------ a detector's training
# The command line, recipe, data, backbone and checkpoint pieces every detector's train.py shares.
# An old flag and the one that replaced it (zoo.cli.parse_args ends an old spelling in one line).
RENAMED_FLAGS = {"--steps": "--steps-per-epoch"}


def add_training_args(parser, *, registry) -> None:
    """The flags a detector's train.py adds beside zoo.cli's shared ones: the run: section's (zoo.cli.
    RUN_FLAGS), the COCO splits, a part of a run, evaluation, the backbone and the device."""
    parser.add_argument("--epochs", type=int, help="epochs of the run (run.epochs)")
    parser.add_argument(
        "--batch-size", type=int, help="images per process and micro-step (run.batch_per_gpu)"
    )
    parser.add_argument(
        "--accumulation", "--accumulate", type=int, help="micro-steps per optimizer step (run.accumulation)"
    )
    parser.add_argument("--seed", type=int, help="run.seed")
    parser.add_argument("--log-every", type=int, help="optimizer steps between loss readings (run.log_every)")
    parser.add_argument("--train-split", default="train2017")
    parser.add_argument("--val-split", default="val2017")
    parser.add_argument(
        "--stop-epoch", type=int, help="stop after this epoch (the schedule still spans run.epochs)"
    )
    parser.add_argument(
        "--steps-per-epoch", type=int, help="at most this many optimizer steps per epoch (smoke runs)"
    )
    parser.add_argument(
        "--eval-epochs",
        help="comma-separated epochs scored on --val-split, '' for none (recipe: eval.epochs)",
    )
    parser.add_argument(
        "--async-eval", action="store_true", help="score in a background process while training goes on"
    )
    parser.add_argument("--workers", type=int, help="data loader workers per process (recipe: data.workers)")
    parser.add_argument("--backbone", help="ResNet-50 weights for the trunk: a registry name or a file path")
    parser.add_argument("--registry", default=str(registry), help="checkpoint registry YAML for --backbone")
    parser.add_argument("--device", default=None, help="cuda / cpu (default: cuda:LOCAL_RANK where CUDA is)")


def parse_training_args(parser, argv=None):
    """``parser``'s arguments (zoo.cli.parse_args, with RENAMED_FLAGS); ``--resume`` without a value,
    and a count below 1, end in one line."""
    from zoo.cli import parse_args
    from zoo.errors import UserError

    argv = list(sys.argv[1:] if argv is None else argv)
    for i, item in enumerate(argv):
        if item == "--resume" and (i + 1 == len(argv) or argv[i + 1].startswith("-")):
            raise UserError("--resume takes a value now: use --resume auto (or PATH, or none)")
    args = parse_args(parser, argv, renamed=RENAMED_FLAGS)
    for flag in ("steps_per_epoch", "stop_epoch"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be a positive integer, not {value}")
    return args


def training_recipe(args, flag_to_key: dict) -> tuple[dict, object]:
    """(recipe, its RunConfig) from ``args`` (zoo.cli.recipe_from_args; ``--eval-epochs`` sets
    ``eval.epochs`` and scores at epoch ends). A detector counts its run in epochs and evaluates and
    saves at epoch ends: ``run.steps`` and intervals in steps are refused in one line."""
    from zoo.cli import recipe_from_args
    from zoo.errors import UserError
    from zoo.recipe import run_config

    if args.eval_epochs is not None:
        try:
            epochs = [int(e) for e in args.eval_epochs.split(",") if e.strip()]
        except ValueError:
            raise UserError(f"--eval-epochs {args.eval_epochs!r}: expected epochs such as 21,31,37") from None
        args.set = [*args.set, f"eval.epochs={epochs}", "run.eval_every=1 epochs"]
    recipe = recipe_from_args(args, flag_to_key)
    run = run_config(recipe, args.recipe)
    if run.steps is not None:
        raise UserError(f"run.steps: this model counts its run in epochs, set run.epochs ({args.recipe})")
    for key in ("eval_every", "checkpoint_every"):
        interval = getattr(run, key)
        if interval is not None and interval.unit != "epochs":
            raise UserError(
                f"run.{key}: this model evaluates and saves at epoch ends, give 'N epochs' ({args.recipe})"
            )
    return recipe, run


def global_batch(recipe: dict, world_size: int) -> int:
    """Images of one optimizer step over every process: batch per GPU x accumulation x processes."""
    from zoo.recipe import run_config

    run = run_config(recipe)
    return run.batch_per_gpu * run.accumulation * world_size


def learning_rate(recipe: dict, world_size: int) -> float:
    """``optimizer.base_lr`` scaled linearly by the global batch over ``optimizer.base_batch``."""
    optimizer = recipe["optimizer"]
    return optimizer["base_lr"] * global_batch(recipe, world_size) / optimizer["base_batch"]


def data_root(data_dir, *, synthetic: bool = False):
    """``--data-dir`` as a Path; a UserError where it is not given or not a folder."""
    from pathlib import Path

    from zoo.errors import UserError

    if not data_dir:
        raise UserError(
            "give --data-dir (a COCO-format folder; or set DATA_DIR)"
            + (" or --synthetic" if synthetic else "")
        )
    root = Path(data_dir)
    if not root.is_dir():
        raise UserError(f"data dir {root} does not exist")
    return root


def split_paths(root, split: str, *, check: bool = False):
    """(image folder, annotation file) of a COCO split: ``<root>/<split>/``,
    ``<root>/annotations/instances_<split>.json``; with ``check``, a UserError where one is missing."""
    from zoo.errors import UserError

    paths = (root / split, root / "annotations" / f"instances_{split}.json")
    for path in paths if check else ():
        if not path.exists():
            raise UserError(f"{path} does not exist (scripts/download_data.sh prepares COCO)")
    return paths


def load_backbone(name_or_path: str, registry, load) -> dict:
    """ResNet-50 weights for a detector's trunk: a registry name (fetched into the cache, zoo.checkpoints)
    or a file, read as tensors only and handed to ``load(state)``, which raises where they do not fit.
    Returns them; a UserError naming the file where they cannot be read or do not fit."""
    from pathlib import Path

    import torch

    from zoo.checkpoints import fetch, load_registry
    from zoo.errors import UserError, one_line

    path = Path(name_or_path)
    if not path.is_file():
        path = fetch(load_registry(registry).get(name_or_path))
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)  # tensors only: files from the web
        if not isinstance(state, dict):
            raise ValueError(f"holds a {type(state).__name__}, not a state dict")
        load(state)
    except Exception as e:  # noqa: BLE001 - unpickling and layout problems read the same to a user
        raise UserError(f"backbone weights {path}: {one_line(e, limit=200)}") from None
    print(f"backbone: ResNet-50 tensors from {path}", file=sys.stderr)
    return state


def open_mlperf_log(results_dir, benchmark: str, *, resumed: bool, env, seed: int):
    """The run's MLPerf logger (zoo.mlperf; rank 0 writes ``zoo.mlperf.log_path``'s file), with the
    events before initialisation: cache_clear, init_start, seed."""
    from zoo.mlperf import MLPerfLogger, log_path

    path = log_path(results_dir, resumed) if env.is_primary else None
    mlperf = MLPerfLogger(path, benchmark, enabled=env.is_primary)
    mlperf.cache_clear(False)  # the page cache is not dropped before a run
    mlperf.init_start()
    mlperf.seed(seed)
    return mlperf


def restore_training_state(state: dict, rank: int, **parts) -> None:
    """Load ``state`` (a training checkpoint with every rank's RNG state as ``rng``) into ``parts`` (``model=``,
    ``optimizer=``, ...: each the object whose ``load_state_dict`` takes that entry) and this rank's
    RNG state (rank 0's where the checkpoint came from fewer ranks)."""
    from zoo.rng import set_rng_state

    for name, part in parts.items():
        part.load_state_dict(state[name])
    rngs = state["rng"]
    set_rng_state(rngs[rank] if rank < len(rngs) else rngs[0])
