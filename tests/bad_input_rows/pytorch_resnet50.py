"""Bad-input rows of R50 (see tests/test_bad_input.py)."""

from __future__ import annotations

from zoo_tree import ROOT

from bad_input_rows.row import UNKNOWN_CHECKPOINT, Row, repository_holds, rows_for

R50 = "PyTorch/Classification/ResNet50"
R50_TINY = f"{ROOT / R50}/configs/digits_cpu.yaml"
R50_TRAIN = ["--recipe", R50_TINY, "--results-dir", "{results}", "--device", "cpu"]


ROWS: list[Row] = [
    *rows_for(
        R50,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *R50_TRAIN[2:], "--synthetic"],
                ("unknown recipe key 'optimizer.lr_per_265'", "did you mean 'optimizer.lr_per_256'"),
                {"recipe": f"base: {R50_TINY}\noptimizer:\n  lr_per_265: 0.1\n"},
            ),
            (
                "set-key",
                [*R50_TRAIN, "--synthetic", "--set", "run.epoch=2"],
                ("unknown recipe key 'run.epoch'", "did you mean 'run.epochs'"),
            ),
            (
                "batch-size-0",
                [*R50_TRAIN, "--synthetic", "--batch-size", "0"],
                "run.batch_per_gpu must be a positive integer",
            ),
            (
                "batch-size-neg",
                [*R50_TRAIN, "--synthetic", "--batch-size", "-3"],
                "run.batch_per_gpu must be a positive integer",
            ),
            ("epochs-0", [*R50_TRAIN, "--synthetic", "--epochs", "0"], "epochs must be a positive integer"),
            (
                "image-size-0",
                [*R50_TRAIN, "--synthetic", "--image-size", "0"],
                "image_size must be a positive integer",
            ),
            ("steps-per-epoch-0", [*R50_TRAIN, "--synthetic", "--steps-per-epoch", "0"], "steps"),
            ("amp-none", [*R50_TRAIN, "--synthetic", "--amp", "none"], "use --amp fp32"),
            (
                "results-dir-under-a-file",
                [
                    "--recipe",
                    R50_TINY,
                    "--results-dir",
                    "{sandbox}/notes/run",
                    "--device",
                    "cpu",
                    "--synthetic",
                ],
                "which is a file: give --results-dir a folder",
                {"files": {"notes": "a file where a folder belongs"}},
            ),
            (
                "set-number-to-a-word",
                [*R50_TRAIN, "--synthetic", "--set", "optimizer.momentum=fast"],
                "optimizer.momentum is a number",
            ),
            (
                "checkpoint-without-resume",
                [*R50_TRAIN, "--synthetic"],
                "--resume auto",
                {"files": {"results/checkpoint.pt": "ten steps of work"}},
            ),
            ("missing-data", [*R50_TRAIN, "--data-dir", "{missing}"], "no_such_path"),
            ("init-text", [*R50_TRAIN, "--synthetic", "--init-checkpoint", "{text}"], "notes.txt"),
            (
                "init-foreign",
                [*R50_TRAIN, "--synthetic", "--init-checkpoint", "{foreign}"],
                ("resnet18_checkpoint.pt", "does not fit ResNet-50"),
            ),
            ("resume-text", [*R50_TRAIN, "--synthetic", "--resume", "{text}"], "notes.txt"),
        ],
    ),  # fmt: skip,
    *rows_for(
        R50,
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
                    "--image-size",
                    "32",
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
                    "--image-size",
                    "32",
                    "--device",
                    "cpu",
                ],
                ("resnet18_checkpoint.pt", "does not fit ResNet-50"),
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        R50,
        "export_triton.sh",
        [("text-checkpoint", ["--checkpoint", "{text}", "--repository", "{results}/repo"], "notes.txt")],
    ),
    *rows_for(
        R50,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
    *rows_for(R50, "export_triton.sh", [repository_holds("resnet50_onnx", ["--checkpoint", "{text}"])]),
]
