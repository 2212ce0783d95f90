"""What the detection and segmentation models (SSD, Mask R-CNN, and the next detector) share beyond
COCO's data (zoo.data.coco), so that each model keeps only what differs:

- scoring: every rank's detections merged into one list (merge_rank_detections), pycocotools' box and
  mask AP under the metric names of zoo.metrics (coco_scores: ``map``, ``mask_map``), in a background
  process while training goes on (AsyncScorer), and a run's evaluations (Evaluation: which epochs are
  scored, the scores logged to metrics.jsonl and MLPerf, the targets checked);
- a detector's train.py: its flags beside zoo.cli's (add_training_args, parse_training_args), the
  recipe with its run: section checked for a run counted in epochs (training_recipe), the global
  batch and the learning rate scaled to it (global_batch, learning_rate), the COCO
  folders (data_root, split_paths), backbone weights (load_backbone), the MLPerf log's start
  (open_mlperf_log) and a training checkpoint loaded back into its parts (restore_training_state);
- the generated shapes set (make_shapes_coco, shapes_main), the download command (download_main),
  drawing colours and image reading (PALETTE, read_image), evaluate.py's flags, split and scores
  (add_evaluate_args, evaluation_split, detect_and_score, write_json), a Triton repository replaced
  whole (add_repository_args, replace_repository) and a benchmark's report (report_benchmark).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import sys


def merge_rank_detections(parts: list[list[dict]]) -> list[dict]:
    """One list of COCO detection results from every rank's: a distributed sampler pads the last
    shard with repeated images, so each image's results are kept from the first rank that has them."""
    merged, seen = [], set()
    for part in parts:
        ids = {r["image_id"] for r in part}
        merged += [r for r in part if r["image_id"] not in seen]
        seen |= ids
    return merged


class AsyncScorer:
    """Runs ``score(annotation_file, results, image_ids)`` (a module-level function, e.g. a model's
    pycocotools mAP) in a background process, so training goes on while it scores."""

    def __init__(self, score) -> None:
        self._score = score
        self._pool = concurrent.futures.ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("spawn")
        )
        self._pending: list[tuple[int, concurrent.futures.Future]] = []

    def submit(self, epoch: int, annotation_file: str, results: list[dict], image_ids=None) -> None:
        self._pending.append((epoch, self._pool.submit(self._score, annotation_file, results, image_ids)))

    def done(self, wait: bool = False) -> list[tuple[int, dict]]:
        """Finished scores as (epoch, stats), oldest first; ``wait`` blocks for all pending ones."""
        out, still = [], []
        for epoch, fut in self._pending:
            if wait or fut.done():
                out.append((epoch, fut.result()))
            else:
                still.append((epoch, fut))
        self._pending = still
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True)


# ------------------------------------------------------------------------------------- scoring
# pycocotools' six AP summary numbers (AP@[.5:.95], AP50, AP75, small, medium, large) under the names of
# metrics.jsonl and --target-<metric>: the metric of the IoU type with these suffixes, all fractions.
SUMMARY_SUFFIXES = ("", "_50", "_75", "_small", "_medium", "_large")
# COCOeval's iouType -> the zoo.metrics name of its AP@[.5:.95], and the key of MLPerf's maskrcnn log.
METRIC_OF = {"bbox": "map", "segm": "mask_map"}
MLPERF_KEY_OF = {"bbox": "BBOX", "segm": "SEGM"}


def coco_scores(annotation_file, results: list[dict], image_ids=None, *, iou_types=("bbox",)) -> dict:
    """pycocotools' COCOeval of ``results`` (COCO result dicts) against ``annotation_file``, for each of
    ``iou_types``: ``map`` (bbox) and ``mask_map`` (segm), AP@[.5:.95] as a fraction, and the other
    summary numbers (``map_50``, ``map_75``, ``map_small``, ..., ``mask_map_50``, ...). ``image_ids``
    scores only those images. A module-level function: AsyncScorer runs it in another process."""
    import contextlib
    import io
    import json
    from pathlib import Path

    from zoo.errors import UserError

    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        raise UserError("COCO evaluation needs pycocotools (pip install -r requirements.txt)") from None
    if not results:
        return {METRIC_OF[kind] + suffix: 0.0 for kind in iou_types for suffix in SUMMARY_SUFFIXES}
    scores = {}
    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO()
        truth.dataset = json.loads(Path(annotation_file).read_text())
        truth.dataset.setdefault(
            "info", {}
        )  # loadRes copies it; COCO-format files made by hand often lack it
        truth.createIndex()
        for kind in iou_types:
            found = truth.loadRes([dict(r) for r in results])  # loadRes adds keys to the dicts it gets
            evaluation = COCOeval(truth, found, iouType=kind)
            if image_ids is not None:
                evaluation.params.imgIds = sorted(set(image_ids))
            evaluation.evaluate()
            evaluation.accumulate()
            evaluation.summarize()
            numbers = zip(SUMMARY_SUFFIXES, evaluation.stats, strict=False)
            scores.update({METRIC_OF[kind] + suffix: float(value) for suffix, value in numbers})
    return scores


class Evaluation:
    """The COCO evaluations of one training run: which epochs are scored, every rank's detections
    merged and scored with pycocotools on rank 0 (at once, or in a background process while training
    goes on), each score logged (metrics.jsonl's ``eval`` phase, MLPerf's ``eval_accuracy``) and the
    run's targets checked. Every rank makes one and calls each method (they gather and broadcast)::

        evaluation = Evaluation(run, recipe["eval"]["epochs"], annotation_file, ...)
        for epoch in range(start, stop):
            ...                                        # train one epoch, save the checkpoint
            if evaluation.due(epoch + 1):
                evaluate(...)                          # start(epoch), detections, score(epoch, step, results)
            if evaluation.reached(epoch + 1):
                break
        evaluation.finish()                            # background scores collected; MLPerf run_stop

    ``epochs``: the epochs scored among those ``run.eval_every`` makes due (None: all of them; ``[]``:
    none). ``annotation_file`` None (no validation set): nothing is ever due. ``targets``: {metric:
    value or None} in zoo.metrics' units; the run stops once every one given is reached.
    """

    def __init__(
        self,
        run,
        epochs,
        annotation_file,
        *,
        iou_types=("bbox",),
        targets: dict,
        logger,
        mlperf,
        env,
        device,
        asynchronous: bool = False,
    ) -> None:
        import functools

        self.run, self.epochs, self.annotation_file = run, epochs, annotation_file
        self.iou_types, self.targets = tuple(iou_types), targets
        self.logger, self.mlperf, self.env, self.device = logger, mlperf, env, device
        self.scores: dict[int, dict] = {}  # epoch -> coco_scores' numbers, on rank 0
        self._score = functools.partial(coco_scores, iou_types=self.iou_types)
        self._background = AsyncScorer(self._score) if asynchronous and env.is_primary else None
        self._steps: dict[int, int] = {}  # epoch -> the step its background score is logged at
        self._reached = False

    def due(self, epoch: int) -> bool:
        """Whether the model is scored after ``epoch`` (1-based): due by ``run.eval_every`` (null: the
        run's last epoch) and listed in ``epochs``."""
        if self.annotation_file is None:
            return False
        every = self.run.eval_every
        due = every.due(epoch, 0) if every is not None else epoch == self.run.epochs
        return due and (self.epochs is None or epoch in self.epochs)

    def start(self, epoch: int) -> None:
        self.mlperf.eval_start(epoch)

    def score(self, epoch: int, step: int, results: list[dict]) -> dict | None:
        """A collective: this rank's detections of ``epoch``, merged with every other rank's and scored.
        Returns the scores on rank 0 when scored at once; None on other ranks and while the background
        process has them (:meth:`reached` logs them when they arrive)."""
        from zoo.torch import gather_objects

        merged = merge_rank_detections(gather_objects(results, self.env.world_size))
        if not self.env.is_primary:
            return None
        if self._background is not None:
            self._background.submit(epoch, self.annotation_file, merged)
            self._steps[epoch] = step
            self.mlperf.eval_stop(epoch)  # detections done; the score is logged when it arrives
            return None
        scores = self._score(self.annotation_file, merged)
        self.mlperf.eval_stop(epoch)
        self._record(epoch, step, scores)
        return scores

    def reached(self, epoch: int | None = None, *, wait: bool = False) -> bool:
        """A collective: log the scores the background process has finished (all of them with
        ``wait``), then whether the targets are reached, on every rank (rank 0's answer)."""
        from zoo.torch import broadcast_flag

        if self._background is not None:
            for scored, scores in self._background.done(wait=wait):
                self._record(scored, self._steps.pop(scored), scores)
        reached = broadcast_flag(self._reached, self.env.world_size, self.device)
        if reached and epoch is not None and self.env.is_primary:
            wanted = ", ".join(f"{k} {v}" for k, v in self.targets.items() if v is not None)
            print(f"target {wanted} reached after epoch {epoch}", file=sys.stderr)
        return reached

    def finish(self) -> bool:
        """After the last epoch: every background score logged, the background process ended, MLPerf's
        ``run_stop`` (``success`` once the targets were reached). Returns whether they were."""
        reached = self.reached(wait=True)
        if self._background is not None:
            self._background.close()
        self.mlperf.run_stop("success" if reached else "aborted")
        return reached

    def _record(self, epoch: int, step: int, scores: dict) -> None:
        from zoo.metrics import reached

        self.scores[epoch] = scores
        metrics = [METRIC_OF[kind] for kind in self.iou_types]
        self.logger.log(step, {name: scores[name] for name in metrics}, phase="eval")
        if len(metrics) == 1:
            self.mlperf.eval_accuracy(scores[metrics[0]], epoch)
        else:
            self.mlperf.eval_accuracy({MLPERF_KEY_OF[k]: scores[METRIC_OF[k]] for k in self.iou_types}, epoch)
        wanted = {name: value for name, value in self.targets.items() if value is not None}
        if wanted and all(reached(name, scores[name], value) for name, value in wanted.items()):
            self._reached = True


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


# --------------------------------------------------------------------------- a generated shapes set
SHAPE_CLASSES = ("square", "disc", "triangle")
SHAPE_COLOURS = {"square": (220, 40, 40), "disc": (40, 200, 60), "triangle": (50, 80, 230)}


def make_shapes_coco(
    root, *, images: int = 32, size: int = 128, max_objects: int = 3, seed: int = 0, split: str = "train",
    masks: bool = False,
):  # fmt: skip
    """A small generated COCO-format set: coloured shapes (classes SHAPE_CLASSES) at known places, as
    ``root/<split>/`` images and ``root/annotations/instances_<split>.json``; returns both paths.

    ``masks=False`` (detection): JPEGs on a random plain background, each box the square the shape is
    drawn in. ``masks=True`` (instance segmentation): PNGs on grey whose segmentations are exactly the
    drawn pixels (squares as polygons, discs and triangles as compressed RLE: both forms COCO uses),
    each box their extent. The annotation file is written whole or not at all."""
    import json
    import random
    from pathlib import Path

    import numpy as np
    from PIL import Image

    from zoo.io import atomic_write

    rng = random.Random(seed)
    root = Path(root)
    image_dir = root / split
    image_dir.mkdir(parents=True, exist_ok=True)
    coco = {
        "info": {"description": "zoo shapes"},
        "images": [],
        "annotations": [],
        "categories": [
            {"id": i + 1, "name": n, "supercategory": "shape"} for i, n in enumerate(SHAPE_CLASSES)
        ],
    }
    for image_id in range(1, images + 1):
        background = (128, 128, 128) if masks else tuple(rng.randint(90, 160) for _ in range(3))
        image = Image.new("RGB", (size, size), background)
        for box, name in _place_shapes(rng, size, max_objects):
            shape = _draw_shape(name, box, size)
            image.paste(SHAPE_COLOURS[name], mask=shape.point(lambda v: 255 * v))
            annotation = {"id": len(coco["annotations"]) + 1, "image_id": image_id, "iscrowd": 0}
            annotation["category_id"] = SHAPE_CLASSES.index(name) + 1
            if masks:
                annotation.update(_mask_annotation(np.asarray(shape, dtype=np.uint8), name, box))
            else:
                x, y, side = box[0], box[1], box[2] - box[0]
                annotation.update(bbox=[x, y, side, side], area=float(side * side))
            coco["annotations"].append(annotation)
        file_name = f"{image_id:06d}.{'png' if masks else 'jpg'}"
        image.save(image_dir / file_name, **({} if masks else {"quality": 92}))
        coco["images"].append({"id": image_id, "file_name": file_name, "width": size, "height": size})
    annotation_file = root / "annotations" / f"instances_{split}.json"
    with atomic_write(annotation_file) as tmp:
        tmp.write_text(json.dumps(coco))
    return image_dir, annotation_file


def _place_shapes(rng, size: int, max_objects: int):
    """(box x0, y0, x1, y1, class name) of up to ``max_objects`` shapes that do not overlap."""
    placed = []
    for _ in range(rng.randint(1, max_objects)):
        for _attempt in range(20):
            side = rng.randint(size // 5, size // 2)
            x, y = rng.randint(0, size - side), rng.randint(0, size - side)
            box = (x, y, x + side, y + side)
            if all(box[2] <= p[0] or box[0] >= p[2] or box[3] <= p[1] or box[1] >= p[3] for p, _ in placed):
                break
        else:
            continue
        placed.append((box, SHAPE_CLASSES[rng.randrange(len(SHAPE_CLASSES))]))
    return placed


def _draw_shape(name: str, box, size: int):
    """The shape's pixels (an "L" image of 0 and 1) filling ``box``."""
    from PIL import Image, ImageDraw

    x, y, x1, y1 = box
    side = x1 - x
    shape = Image.new("L", (size, size), 0)
    pen = ImageDraw.Draw(shape)
    if name == "square":
        pen.rectangle([x, y, x1 - 1, y1 - 1], fill=1)
    elif name == "disc":
        pen.ellipse([x, y, x1 - 1, y1 - 1], fill=1)
    else:
        pen.polygon([(x + side / 2, y), (x, y1 - 1), (x1 - 1, y1 - 1)], fill=1)
    return shape


def _mask_annotation(pixels, name: str, box) -> dict:
    """``segmentation``, ``bbox`` and ``area`` of a drawn shape's pixels."""
    import numpy as np
    from pycocotools import mask as mask_utils

    x, y, x1, y1 = box
    if name == "square":
        # Pixel-corner polygon: pycocotools fills exactly the pixels x..x1-1, y..y1-1.
        segmentation = [[x, y, x1, y, x1, y1, x, y1]]
    else:
        rle = mask_utils.encode(np.asfortranarray(pixels))
        segmentation = {"size": rle["size"], "counts": rle["counts"].decode("ascii")}
    ys, xs = np.nonzero(pixels)
    x0, y0 = int(xs.min()), int(ys.min())
    bbox = [x0, y0, int(xs.max()) + 1 - x0, int(ys.max()) + 1 - y0]
    return {"bbox": bbox, "area": float(pixels.sum()), "segmentation": segmentation}


def shapes_main(argv, *, description: str, masks: bool, size: int, splits=("train", "val")) -> None:
    """A model's ``python -m <package>.shapes --out DIR``: a training split of the shapes set and a
    validation split of a quarter as many images (another seed)."""
    import argparse

    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help=f"output folder ({', '.join(splits)}, annotations/)")
    parser.add_argument("--images", type=int, default=64, help="training images (validation gets a quarter)")
    parser.add_argument("--size", type=int, default=size, help="image side in pixels")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    counts = (args.images, max(1, args.images // 4))
    for split, count, seed in zip(splits, counts, (args.seed, args.seed + 1), strict=True):
        image_dir, annotation_file = make_shapes_coco(
            args.out, images=count, size=args.size, seed=seed, split=split, masks=masks
        )
        print(f"{split}: {count} images in {image_dir}, annotations {annotation_file}")


def download_main(
    argv, *, prog: str, description: str, masks: bool, size: int, synthetic_images: int
) -> None:
    """A model's ``python -m <package>.download``: COCO 2017 through zoo.data.coco.prepare_coco, or
    with ``--synthetic`` the shapes set (:func:`make_shapes_coco`) in COCO's train2017/val2017 layout."""
    import argparse
    import os

    from zoo.cli import parse_args
    from zoo.data.coco import BASE_URL, prepare_coco
    from zoo.errors import UserError

    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("DATA_DIR"),
        help="where train2017/, val2017/, annotations/ go ($DATA_DIR)",
    )
    parser.add_argument("--splits", default="train,val", help="comma list of train, val (annotations always)")
    parser.add_argument("--base-url", default=BASE_URL, help="mirror of images.cocodataset.org")
    parser.add_argument("--delete-zips", action="store_true", help="remove each archive once extracted")
    parser.add_argument(
        "--synthetic",
        action="store_true",
        help="write the generated shapes set (train2017/val2017 layout) instead of COCO",
    )
    parser.add_argument(
        "--synthetic-images", type=int, default=synthetic_images, help="training images of the shapes set"
    )
    args = parse_args(parser, argv)
    if not args.data_dir:
        raise UserError("give --data-dir (or set DATA_DIR): the folder COCO goes into")
    if args.synthetic:
        count = args.synthetic_images
        for split, images, seed in (("train2017", count, 0), ("val2017", max(1, count // 4), 1)):
            make_shapes_coco(args.data_dir, images=images, size=size, seed=seed, split=split, masks=masks)
        print(f"shapes set ({count} + {max(1, count // 4)} images) in {args.data_dir}")
        return
    splits = tuple(s for s in args.splits.split(",") if s)
    out = prepare_coco(args.data_dir, splits, base_url=args.base_url, keep_zips=not args.delete_zips)
    print(f"COCO 2017 ({', '.join(splits)}) ready in {out}")


# ----------------------------------------------------------------------------------- drawing detections
# Box and mask colours, by label (label % len(PALETTE)).
PALETTE = [
    (230, 25, 75),
    (60, 180, 75),
    (255, 225, 25),
    (0, 130, 200),
    (245, 130, 48),
    (145, 30, 180),
    (70, 240, 240),
    (240, 50, 230),
    (210, 245, 60),
    (250, 190, 212),
]


def read_image(path):
    """The image file at ``path`` as an RGB PIL image; a UserError naming it where it cannot be read."""
    from PIL import Image, UnidentifiedImageError

    from zoo.errors import UserError, one_line

    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (FileNotFoundError, UnidentifiedImageError, OSError) as e:
        raise UserError(f"cannot read image {path}: {one_line(e)}") from None


# ------------------------------------------------------------------------------- export and benchmark
def add_repository_args(parser, *, onnx_models: str) -> None:
    """``--repository`` and ``--instance-kind``, the flags of a detector's Triton export."""
    parser.add_argument(
        "--repository", default="triton_repo", help="model repository folder (replaced if present)"
    )
    parser.add_argument(
        "--instance-kind",
        choices=("KIND_GPU", "KIND_CPU"),
        default="KIND_GPU",
        help=f"instances of {onnx_models} (the python model always runs on CPU)",
    )


def replace_repository(path, write, note: str = ""):
    """Write a Triton model repository with ``write(folder)`` into a folder beside ``path``, then put it
    in the place of ``path`` (an earlier repository there is removed): a failed export leaves the
    earlier one whole. Prints what was written; returns ``path``."""
    import shutil
    import tempfile
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        write(building)
        if path.exists():
            shutil.rmtree(path)
        building.rename(path)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    print(f"wrote {', '.join(sorted(p.name for p in path.iterdir()))}{note} to {path}")
    return path


def report_benchmark(path, results: list[dict], device) -> None:
    """The benchmark's rows as a zoo.bench report at ``path``, with the device's name and torch's version."""
    import platform

    import torch

    from zoo.bench import write_report

    on_gpu = torch.cuda.is_available() and (device or "cuda").startswith("cuda")
    name = torch.cuda.get_device_name() if on_gpu else platform.processor()
    write_report(path, results, device=name or "cpu", torch=torch.__version__)
    print(f"wrote {path}", file=sys.stderr)


# ------------------------------------------------------------------------------------------ evaluate.py
def add_evaluate_args(parser, *, train_module: str, batch_size: int, amp_help: str) -> None:
    """The flags of a detector's evaluate.py: the checkpoint, the COCO split, batches, precision, device."""
    import os

    import torch

    from zoo.cli import AMP_CHOICES

    parser.add_argument("--checkpoint", required=True, help=f"checkpoint.pt or model.pt from {train_module}")
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("DATA_DIR"),
        help="COCO root with <split>/ and annotations/instances_<split>.json ($DATA_DIR)",
    )
    parser.add_argument("--split", default="val2017")
    parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--amp", choices=AMP_CHOICES, default="fp32", help=amp_help)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")


def evaluation_split(args):
    """(image folder, annotation file) of ``--split`` under ``--data-dir``; a UserError where a flag is
    out of range or a folder or file is missing."""
    from pathlib import Path

    from zoo.errors import UserError

    if not args.data_dir:
        raise UserError("give --data-dir (or set DATA_DIR): the COCO root to score on")
    if args.batch_size < 1 or args.workers < 0:
        raise UserError(
            f"--batch-size must be a positive integer and --workers >= 0, not {args.batch_size}, {args.workers}"
        )
    root = Path(args.data_dir)
    if not root.exists():
        raise UserError(f"{root} does not exist (scripts/download_data.sh prepares COCO)")
    return split_paths(root, args.split, check=True)


def detect_and_score(detect, loader, annotation_file, score, split: str):
    """``detect(progress)``'s COCO results on every image of ``loader`` (a progress line: batches done,
    images/s), scored by ``score(annotation_file, results)``. Prints the images/s and the scores as one
    JSON line; returns (results, scores)."""
    import json
    import time

    from zoo.log import MetricsLogger

    started = time.time()
    with MetricsLogger(total_steps=len(loader), desc=f"detect {split}") as progress:
        results = detect(progress)
    seconds = time.time() - started
    scores = score(str(annotation_file), results)
    images = len(loader.dataset)
    print(
        f"{images} images in {seconds:.1f}s ({images / seconds:.1f} img/s), {len(results)} detections",
        file=sys.stderr,
    )
    print(json.dumps(scores))
    return results, scores


def write_json(path, value) -> None:
    """``value`` as JSON at ``path``, written to a temporary file and renamed into place."""
    import json

    from zoo.io import atomic_write

    with atomic_write(path) as tmp:
        tmp.write_text(json.dumps(value))
