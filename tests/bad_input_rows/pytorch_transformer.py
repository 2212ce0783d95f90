"""Bad-input rows of TRANSFORMER (see tests/test_bad_input.py)."""

from __future__ import annotations

from zoo_tree import ROOT

from bad_input_rows.row import UNKNOWN_CHECKPOINT, Row, rows_for

TRANSFORMER = "PyTorch/Translation/Transformer"
TRANSFORMER_TINY = f"{ROOT / TRANSFORMER}/configs/numbers_cpu.yaml"
TRANSFORMER_TRAIN = ["--recipe", TRANSFORMER_TINY, "--data-dir", "{numbers}", "--results-dir", "{results}"]
TRANSFORMER_TRAIN += ["--device", "cpu"]


ROWS: list[Row] = [
    *rows_for(
        TRANSFORMER,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *TRANSFORMER_TRAIN[2:]],
                ("unknown recipe key 'run.epoch'", "did you mean 'run.epochs'"),
                {"recipe": f"base: {TRANSFORMER_TINY}\nrun:\n  epoch: 2\n"},
            ),
            (
                "set-key",
                [*TRANSFORMER_TRAIN, "--set", "optimizer.lrr=0.1"],
                ("unknown recipe key 'optimizer.lrr'", "did you mean 'optimizer.lr'"),
            ),
            (
                "batch-per-gpu-0",
                [*TRANSFORMER_TRAIN, "--set", "run.batch_per_gpu=0"],
                "run.batch_per_gpu must be a positive integer",
            ),
            ("epochs-0", [*TRANSFORMER_TRAIN, "--epochs", "0"], "epochs must be a positive integer"),
            (
                "accumulation-0",
                [*TRANSFORMER_TRAIN, "--set", "run.accumulation=0"],
                "accumulation must be a positive integer",
            ),
            ("amp-none", [*TRANSFORMER_TRAIN, "--amp", "none"], "use --amp fp32"),
            (
                "checkpoint-without-resume",
                TRANSFORMER_TRAIN,
                "--resume auto",
                {"files": {"results/checkpoint.pt": "ten steps of work"}},
            ),
            (
                "resume-text",
                [*TRANSFORMER_TRAIN, "--resume", "{text}"],
                ("not a Transformer training checkpoint", "cannot be read"),
            ),
            (
                "resume-foreign",
                [*TRANSFORMER_TRAIN, "--resume", "{foreign}"],
                "not a Transformer training checkpoint",
            ),
            (
                "missing-data",
                [*TRANSFORMER_TRAIN[:2], "--data-dir", "{missing}", *TRANSFORMER_TRAIN[4:]],
                "does not exist",
            ),
            (
                "unprepared-data",
                [*TRANSFORMER_TRAIN[:2], "--data-dir", "{cache}", *TRANSFORMER_TRAIN[4:]],
                "tokenizer.json",
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        TRANSFORMER,
        "evaluate.sh",
        [
            (
                "text-checkpoint",
                ["--checkpoint", "{text}", "--data-dir", "{numbers}", "--output", "{results}/out.txt"],
                "not a readable PyTorch checkpoint",
            ),
            (
                "foreign-checkpoint",
                ["--checkpoint", "{foreign}", "--data-dir", "{numbers}", "--output", "{results}/out.txt"],
                "not a Transformer checkpoint",
            ),
            ("missing-data", ["--checkpoint", "{text}", "--data-dir", "{missing}"], "does not exist"),
            (
                "beam-0",
                ["--checkpoint", "{text}", "--data-dir", "{numbers}", "--beam", "0"],
                "--beam must be a positive integer",
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        TRANSFORMER,
        "export_triton.sh",
        [
            (
                "text-checkpoint",
                ["--checkpoint", "{text}", "--repository", "{results}/repo"],
                "not a readable PyTorch checkpoint",
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        TRANSFORMER,
        "deploy_triton.sh",
        [("missing-repository", ["--repository", "{missing}", "--input", "{text}"], "export_triton.sh")],
    ),
    *rows_for(TRANSFORMER, "download_data.sh", [("no-data-dir", [], "--data-dir")]),
    *rows_for(
        TRANSFORMER,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
]
