"""The scripts beside training: the COCO download command, drawing colours and image reading,
evaluate.py's flags, split and scores, a Triton repository replaced whole and a benchmark's report."""

from __future__ import annotations

import sys

from zoo.coco.shapes import make_shapes_coco
from zoo.coco.training import split_paths


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
    """``--repository``, ``--force`` and ``--instance-kind``, the flags of a detector's Triton export."""
    parser.add_argument(
        "--repository", default="triton_repo", help="the Triton model repository to write into"
    )
    parser.add_argument(
        "--force", action="store_true", help="replace the models if the repository holds them"
    )
    parser.add_argument(
        "--instance-kind",
        choices=("KIND_GPU", "KIND_CPU"),
        default="KIND_GPU",
        help=f"instances of {onnx_models} (the python model always runs on CPU)",
    )


def write_repository_models(path, models, write, *, force: bool = False, note: str = ""):
    """The model folders ``models``, written by ``write(folder)`` into an empty folder, put into the
    repository ``path`` (zoo.triton.repository.build_models): a model ``path`` already holds is refused
    before ``write`` runs unless ``force``, a failed export leaves the repository as it was, and the
    repository's other models stay. Prints what was written; returns ``path``."""
    from pathlib import Path

    from zoo.triton.repository import build_models

    build_models(path, models, write, force=force)
    print(f"wrote {', '.join(sorted(models))}{note} to {path}")
    return Path(path)


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
    # None: cuda where a GPU is visible, resolved by evaluation_split once the flags are parsed (torch
    # loads after parsing, so that --help answers at once)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda where a GPU is visible)")


def evaluation_split(args):
    """(image folder, annotation file) of ``--split`` under ``--data-dir``; a UserError where a flag is
    out of range or a folder or file is missing. Sets ``args.device`` where it was left out."""
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
    paths = split_paths(root, args.split, check=True)
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    return paths


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
