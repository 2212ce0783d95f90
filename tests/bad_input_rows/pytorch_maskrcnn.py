"""Bad-input rows of MASKRCNN (see tests/test_bad_input.py)."""

from __future__ import annotations

import json

from zoo_tree import ROOT

from bad_input_rows.row import UNKNOWN_CHECKPOINT, Row, repository_holds, rows_for

MASKRCNN = "PyTorch/Segmentation/MaskRCNN"
MASKRCNN_TINY = f"{ROOT / MASKRCNN}/configs/shapes_cpu.yaml"
MASKRCNN_DATA = ["--data-dir", "{coco}", "--train-split", "train", "--val-split", "val"]
MASKRCNN_TRAIN = ["--recipe", MASKRCNN_TINY, *MASKRCNN_DATA, "--results-dir", "{results}", "--device", "cpu"]


# A COCO folder whose one annotation is an RLE of runs that do not cover its 8x8 image (read before any
# image is opened, so the image folders stay empty).
_RLE_SPLIT = json.dumps(
    {
        "images": [{"id": 1, "file_name": "1.png", "width": 8, "height": 8}],
        "categories": [{"id": 1, "name": "square"}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 4, 4], "area": 16, "iscrowd": 0,
             "segmentation": {"size": [8, 8], "counts": "0"}}
        ],
    }
)  # fmt: skip
INVALID_RLE_COCO = {
    "rle/train/.keep": "",
    "rle/val/.keep": "",
    "rle/annotations/instances_train.json": _RLE_SPLIT,
    "rle/annotations/instances_val.json": _RLE_SPLIT,
}


ROWS: list[Row] = [
    # Counts of the model's sections (zoo.recipe.POSITIVE_INTEGERS) and annotations that fail before training
    *rows_for(
        MASKRCNN,
        "train.sh",
        [
            *[
                (
                    f"{key.rsplit('.', 1)[-1].replace('_', '-')}-0",
                    [*MASKRCNN_TRAIN, "--set", f"{key}=0"],
                    f"{key} must be a positive integer",
                )
                for key in (
                    "model.rpn_post_nms_top_n_train",
                    "model.box_detections_per_img",
                    "optimizer.base_batch",
                    "data.min_size",
                )
            ],
            (
                "checkpoint-every-0",
                [*MASKRCNN_TRAIN, "--set", "run.checkpoint_every=0"],
                "run.checkpoint_every must be 'N epochs'",
            ),
            (
                "invalid-rle",
                ["--recipe", MASKRCNN_TINY, "--data-dir", "{sandbox}/rle", *MASKRCNN_TRAIN[4:]],
                "annotation 1 (image 1) has an invalid RLE",
                {"files": INVALID_RLE_COCO},
            ),
        ],
    ),  # fmt: skip
    *rows_for(
        MASKRCNN,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *MASKRCNN_TRAIN[2:]],
                ("unknown recipe key 'epoch'", "did you mean 'run.epochs'"),
                {"recipe": f"base: {MASKRCNN_TINY}\nepoch: 2\n"},
            ),
            (
                "set-key",
                [*MASKRCNN_TRAIN, "--set", "optimizer.base_lrr=0.1"],
                ("unknown recipe key 'optimizer.base_lrr'", "did you mean 'optimizer.base_lr'"),
            ),
            (
                "batch-size-0",
                [*MASKRCNN_TRAIN, "--batch-size", "0"],
                "batch_per_gpu must be a positive integer",
            ),
            ("epochs-0", [*MASKRCNN_TRAIN, "--epochs", "0"], "epochs must be a positive integer"),
            (
                "steps-per-epoch-0",
                [*MASKRCNN_TRAIN, "--steps-per-epoch", "0"],
                "--steps-per-epoch must be a positive integer",
            ),
            (
                "accumulation-0",
                [*MASKRCNN_TRAIN, "--accumulation", "0"],
                "accumulation must be a positive integer",
            ),
            ("amp-none", [*MASKRCNN_TRAIN, "--amp", "none"], "use --amp fp32"),
            (
                "checkpoint-without-resume",
                MASKRCNN_TRAIN,
                "--resume auto",
                {"files": {"results/checkpoint.pt": "ten steps of work"}},
            ),
            (
                "resume-text",
                [*MASKRCNN_TRAIN, "--resume", "{text}"],
                "is not a Mask R-CNN training checkpoint",
            ),
            (
                "resume-foreign",
                [*MASKRCNN_TRAIN, "--resume", "{foreign}"],
                "not a Mask R-CNN training checkpoint",
            ),
            ("missing-data", [*MASKRCNN_TRAIN[:3], "{missing}", *MASKRCNN_TRAIN[4:]], "does not exist"),
            ("backbone-text", [*MASKRCNN_TRAIN, "--backbone", "{text}"], "backbone weights"),
            ("backbone-foreign", [*MASKRCNN_TRAIN, "--backbone", "{foreign}"], "backbone weights"),
        ],
    ),  # fmt: skip,
    *rows_for(
        MASKRCNN,
        "evaluate.sh",
        [
            (
                "text-checkpoint",
                [
                    "--checkpoint",
                    "{text}",
                    "--data-dir",
                    "{coco}",
                    "--split",
                    "val",
                    "--results-dir",
                    "{results}",
                ],
                "cannot be read",
            ),
            (
                "foreign-checkpoint",
                [
                    "--checkpoint",
                    "{foreign}",
                    "--data-dir",
                    "{coco}",
                    "--split",
                    "val",
                    "--results-dir",
                    "{results}",
                ],
                "not a Mask R-CNN checkpoint",
            ),
            (
                "missing-data",
                ["--checkpoint", "{text}", "--data-dir", "{missing}", "--split", "val"],
                "does not exist",
            ),
            (
                "batch-size-0",
                ["--checkpoint", "{text}", "--data-dir", "{coco}", "--split", "val", "--batch-size", "0"],
                "--batch-size must be a positive integer",
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        MASKRCNN,
        "export_triton.sh",
        [
            (
                "text-checkpoint",
                ["--checkpoint", "{text}", "--repository", "{results}/repo"],
                "cannot be read",
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        MASKRCNN,
        "deploy_triton.sh",
        [
            (
                "missing-repository",
                ["--repository", "{missing}", "{coco}/val/000001.png"],
                "export_triton.sh first",
            )
        ],
    ),
    *rows_for(MASKRCNN, "download_data.sh", [("no-data-dir", [], "give --data-dir")]),
    *rows_for(
        MASKRCNN,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
    *rows_for(MASKRCNN, "export_triton.sh", [repository_holds("maskrcnn_python", ["--random-init", "tiny"])]),
]
