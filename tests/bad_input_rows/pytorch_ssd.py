"""Bad-input rows of SSD (see tests/test_bad_input.py)."""

from __future__ import annotations

from zoo_tree import ROOT

from bad_input_rows.row import UNKNOWN_CHECKPOINT, Row, repository_holds, rows_for

SSD = "PyTorch/Detection/SSD"
SSD_TINY = f"{ROOT / SSD}/configs/shapes_smoke.yaml"
SSD_TRAIN = ["--recipe", SSD_TINY, "--results-dir", "{results}", "--device", "cpu"]


ROWS: list[Row] = [
    *rows_for(
        SSD,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *SSD_TRAIN[2:], "--synthetic"],
                ("unknown recipe key 'epoch'", "did you mean 'run.epochs'"),
                {"recipe": f"base: {SSD_TINY}\nepoch: 2\n"},
            ),
            (
                "set-key",
                [*SSD_TRAIN, "--synthetic", "--set", "optimizer.base_lrr=0.1"],
                ("unknown recipe key 'optimizer.base_lrr'", "did you mean 'optimizer.base_lr'"),
            ),
            (
                "checkpoint-every-0",
                [*SSD_TRAIN, "--synthetic", "--set", "run.checkpoint_every=0"],
                "run.checkpoint_every must be 'N epochs'",
            ),
            (
                "second-set-kept",
                [*SSD_TRAIN, "--synthetic", "--set", "run.batch_per_gpu=0", "--set", "run.epochs=1"],
                "batch_per_gpu must be a positive integer",
            ),
            (
                "batch-size-0",
                [*SSD_TRAIN, "--synthetic", "--batch-size", "0"],
                "batch_per_gpu must be a positive integer",
            ),
            (
                "batch-size-neg",
                [*SSD_TRAIN, "--synthetic", "--batch-size", "-3"],
                "batch_per_gpu must be a positive integer",
            ),
            ("epochs-0", [*SSD_TRAIN, "--synthetic", "--epochs", "0"], "epochs must be a positive integer"),
            ("amp-none", [*SSD_TRAIN, "--synthetic", "--amp", "none"], "use --amp fp32"),
            (
                "checkpoint-without-resume",
                [*SSD_TRAIN, "--synthetic"],
                "--resume auto",
                {"files": {"results/checkpoint.pt": "ten steps of work"}},
            ),
            ("missing-data", [*SSD_TRAIN, "--data-dir", "{missing}"], "no_such_path"),
            (
                "steps-per-epoch-0",
                [*SSD_TRAIN, "--synthetic", "--steps-per-epoch", "0"],
                "--steps-per-epoch must be a positive integer",
            ),
            (
                "resume-text",
                [*SSD_TRAIN, "--synthetic", "--resume", "{text}"],
                ("notes.txt", "is not an SSD training checkpoint"),
            ),
            (
                "resume-foreign",
                [*SSD_TRAIN, "--synthetic", "--resume", "{foreign}"],
                ("resnet18_checkpoint.pt", "is not an SSD training checkpoint"),
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        SSD,
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
                "resnet18_checkpoint.pt",
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        SSD,
        "export_triton.sh",
        [("text-checkpoint", ["--checkpoint", "{text}", "--repository", "{results}/repo"], "notes.txt")],
    ),
    *rows_for(
        SSD,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
    *rows_for(SSD, "export_triton.sh", [repository_holds("ssd300_python", ["--random-init", "3"])]),
]
