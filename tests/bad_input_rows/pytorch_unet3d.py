"""Bad-input rows of UNET3D (see tests/test_bad_input.py)."""

from __future__ import annotations

from zoo_tree import ROOT

from bad_input_rows.row import UNKNOWN_CHECKPOINT, Row, repository_holds, rows_for

UNET3D = "PyTorch/Segmentation/UNet3D"
UNET3D_TINY = f"{ROOT / UNET3D}/configs/synthetic_cpu.yaml"
UNET3D_TRAIN = ["--recipe", UNET3D_TINY, "--results-dir", "{results}", "--device", "cpu"]
UNET3D_EVAL = ["--synthetic", "--amp", "fp32", "--device", "cpu", "--results-dir", "{results}"]


ROWS: list[Row] = [
    *rows_for(
        UNET3D,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *UNET3D_TRAIN[2:], "--synthetic"],
                ("unknown recipe key 'optimizer.lrr'", "did you mean 'optimizer.lr'"),
                {"recipe": f"base: {UNET3D_TINY}\noptimizer:\n  lrr: 0.1\n"},
            ),
            (
                "set-key",
                [*UNET3D_TRAIN, "--synthetic", "--set", "run.epoch=2"],
                ("unknown recipe key 'run.epoch'", "did you mean 'run.epochs'"),
            ),
            (
                "batch-size-0",
                [*UNET3D_TRAIN, "--synthetic", "--batch-size", "0"],
                "run.batch_per_gpu must be a positive integer",
            ),
            (
                "epochs-0",
                [*UNET3D_TRAIN, "--synthetic", "--epochs", "0"],
                "epochs must be a positive integer",
            ),
            (
                "width-0",
                [*UNET3D_TRAIN, "--synthetic", "--width", "0"],
                "model.width must be a positive integer",
            ),
            (
                "patch-side",
                [*UNET3D_TRAIN, "--synthetic", "--set", "data.patch=[30,32,32]"],
                "multiple of 2**model.levels",
            ),
            ("amp-none", [*UNET3D_TRAIN, "--synthetic", "--amp", "none"], "use --amp fp32"),
            (
                "checkpoint-without-resume",
                [*UNET3D_TRAIN, "--synthetic"],
                "--resume auto",
                {"files": {"results/checkpoint.pt": "ten steps of work"}},
            ),
            ("missing-data", [*UNET3D_TRAIN, "--data-dir", "{missing}"], "no_such_path"),
            ("resume-text", [*UNET3D_TRAIN, "--synthetic", "--resume", "{text}"], "notes.txt"),
        ],
    ),  # fmt: skip,
    *rows_for(
        UNET3D,
        "evaluate.sh",
        [
            ("text-checkpoint", ["--checkpoint", "{text}", *UNET3D_EVAL], "notes.txt"),
            (
                "foreign-checkpoint",
                ["--checkpoint", "{foreign}", *UNET3D_EVAL],
                ("resnet18_checkpoint.pt", "does not fit this 3D U-Net"),
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        UNET3D,
        "download_data.sh",
        [
            (
                "missing-raw",
                ["prepare", "--raw-dir", "{missing}", "--data-dir", "{sandbox}/out"],
                "no_such_path",
            )
        ],
    ),
    *rows_for(
        UNET3D,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
    *rows_for(UNET3D, "export_triton.sh", [repository_holds("unet3d_onnx", ["--checkpoint", "{text}"])]),
]
