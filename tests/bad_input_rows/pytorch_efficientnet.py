"""Bad-input rows of EFFNET (see tests/test_bad_input.py)."""

from __future__ import annotations

from zoo_tree import ROOT

from bad_input_rows.row import UNKNOWN_CHECKPOINT, Row, repository_holds, rows_for

EFFNET = "PyTorch/Classification/EfficientNet"
EFFNET_TINY = f"{ROOT / EFFNET}/configs/digits_cpu.yaml"
EFFNET_TRAIN = ["--recipe", EFFNET_TINY, "--results-dir", "{results}", "--device", "cpu", "--threads", "1"]


ROWS: list[Row] = [
    *rows_for(
        EFFNET,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *EFFNET_TRAIN[2:], "--synthetic"],
                ("unknown recipe key 'train.mixpu'", "did you mean 'train.mixup'"),
                {"recipe": f"base: {EFFNET_TINY}\ntrain:\n  mixpu: 0.2\n"},
            ),
            (
                "set-key",
                [*EFFNET_TRAIN, "--synthetic", "--set", "model.varaint=b4"],
                ("unknown recipe key 'model.varaint'", "did you mean 'model.variant'"),
            ),
            (
                "batch-size-0",
                [*EFFNET_TRAIN, "--synthetic", "--batch-size", "0"],
                "run.batch_per_gpu must be a positive integer",
            ),
            (
                "batch-size-neg",
                [*EFFNET_TRAIN, "--synthetic", "--batch-size", "-3"],
                "run.batch_per_gpu must be a positive integer",
            ),
            (
                "epochs-0",
                [*EFFNET_TRAIN, "--synthetic", "--epochs", "0"],
                "epochs must be a positive integer",
            ),
            ("amp-none", [*EFFNET_TRAIN, "--synthetic", "--amp", "none"], "use --amp fp32"),
            (
                "unknown-variant",
                [*EFFNET_TRAIN, "--synthetic", "--set", "model.variant=b9"],
                "model.variant must be one of b0, b1, b2, b3, b4, not 'b9'",
            ),
            (
                "checkpoint-without-resume",
                [*EFFNET_TRAIN, "--synthetic"],
                "--resume auto",
                {"files": {"results/checkpoint.pt": "ten steps of work"}},
            ),
            ("missing-data", [*EFFNET_TRAIN, "--data-dir", "{missing}"], "no_such_path"),
            ("init-text", [*EFFNET_TRAIN, "--synthetic", "--init-checkpoint", "{text}"], "notes.txt"),
            (
                "init-foreign",
                [*EFFNET_TRAIN, "--synthetic", "--init-checkpoint", "{foreign}"],
                ("resnet18_checkpoint.pt", "not an EfficientNet"),
            ),
            ("resume-text", [*EFFNET_TRAIN, "--synthetic", "--resume", "{text}"], "notes.txt"),
        ],
    ),  # fmt: skip,
    *rows_for(
        EFFNET,
        "evaluate.sh",
        [
            (
                "text-checkpoint",
                [
                    "--checkpoint",
                    "{text}",
                    "--data-backend",
                    "synthetic",
                    "--num-classes",
                    "10",
                    "--device",
                    "cpu",
                ],
                "notes.txt",
            ),
            (
                "foreign-checkpoint",
                [
                    "--checkpoint",
                    "{foreign}",
                    "--data-backend",
                    "synthetic",
                    "--num-classes",
                    "10",
                    "--device",
                    "cpu",
                ],
                ("resnet18_checkpoint.pt", "not an EfficientNet"),
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        EFFNET,
        "export_triton.sh",
        [("text-checkpoint", ["--checkpoint", "{text}", "--repository", "{results}/repo"], "notes.txt")],
    ),
    *rows_for(
        EFFNET,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
    *rows_for(
        EFFNET, "export_triton.sh", [repository_holds("efficientnet_python", ["--checkpoint", "{text}"])]
    ),
]
