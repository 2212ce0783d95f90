"""Bad-input rows of RETINANET (see tests/test_bad_input.py)."""

from __future__ import annotations

from zoo_tree import ROOT

from bad_input_rows.row import UNKNOWN_CHECKPOINT, Row, repository_holds, rows_for

RETINANET = "PyTorch/Detection/RetinaNet"
RETINANET_TINY = f"{ROOT / RETINANET}/configs/digits_cpu.yaml"
RETINANET_TRAIN = ["--recipe", RETINANET_TINY, "--results-dir", "{results}", "--device", "cpu"]


ROWS: list[Row] = [
    *rows_for(
        RETINANET,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *RETINANET_TRAIN[2:], "--synthetic"],
                ("unknown recipe key 'epoch'", "did you mean 'run.epochs'"),
                {"recipe": f"base: {RETINANET_TINY}\nepoch: 2\n"},
            ),
            (
                "set-key",
                [*RETINANET_TRAIN, "--synthetic", "--set", "optimizer.base_lrr=0.1"],
                ("unknown recipe key 'optimizer.base_lrr'", "did you mean 'optimizer.base_lr'"),
            ),
            (
                "model-key",
                [*RETINANET_TRAIN, "--synthetic", "--set", "model.backbone=vgg16"],
                "model.backbone 'vgg16'",
            ),
            (
                "batch-size-0",
                [*RETINANET_TRAIN, "--synthetic", "--batch-size", "0"],
                "batch_per_gpu must be a positive integer",
            ),
            (
                "epochs-0",
                [*RETINANET_TRAIN, "--synthetic", "--epochs", "0"],
                "epochs must be a positive integer",
            ),
            ("amp-none", [*RETINANET_TRAIN, "--synthetic", "--amp", "none"], "use --amp fp32"),
            (
                "checkpoint-without-resume",
                [*RETINANET_TRAIN, "--synthetic"],
                "--resume auto",
                {"files": {"results/checkpoint.pt": "ten steps of work"}},
            ),
            ("missing-data", [*RETINANET_TRAIN, "--data-dir", "{missing}"], "no_such_path"),
            (
                "resume-text",
                [*RETINANET_TRAIN, "--synthetic", "--resume", "{text}"],
                ("notes.txt", "is not a RetinaNet training checkpoint"),
            ),
            (
                "resume-foreign",
                [*RETINANET_TRAIN, "--synthetic", "--resume", "{foreign}"],
                ("resnet18_checkpoint.pt", "is not a RetinaNet training checkpoint"),
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        RETINANET,
        "evaluate.sh",
        [
            (
                "text-checkpoint",
                ["--checkpoint", "{text}", "--data-dir", "{coco}", "--split", "val"],
                "notes.txt",
            ),
            (
                "foreign-checkpoint",
                ["--checkpoint", "{foreign}", "--data-dir", "{coco}", "--split", "val"],
                ("resnet18_checkpoint.pt", "is not a RetinaNet checkpoint"),
            ),
            ("missing-data", ["--checkpoint", "{text}", "--data-dir", "{missing}"], "no_such_path"),
        ],
    ),  # fmt: skip,
    *rows_for(
        RETINANET,
        "export_triton.sh",
        [("text-checkpoint", ["--checkpoint", "{text}", "--repository", "{results}/repo"], "notes.txt")],
    ),
    *rows_for(
        RETINANET,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
    *rows_for(RETINANET, "download_data.sh", [("no-data-dir", [], "give --data-dir")]),
    *rows_for(RETINANET, "export_triton.sh", [repository_holds("retinanet_onnx", ["--random-init", "3"])]),
]
