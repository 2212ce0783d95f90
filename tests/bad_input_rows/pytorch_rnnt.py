"""Bad-input rows of RNNT (see tests/test_bad_input.py)."""

from __future__ import annotations

from zoo_tree import ROOT

from bad_input_rows.row import UNKNOWN_CHECKPOINT, Row, repository_holds, rows_for

RNNT = "PyTorch/SpeechRecognition/RNNT"
RNNT_TINY = f"{ROOT / RNNT}/configs/spoken_cpu.yaml"
RNNT_TRAIN = ["--recipe", RNNT_TINY, "--results-dir", "{results}", "--device", "cpu"]


ROWS: list[Row] = [
    *rows_for(
        RNNT,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *RNNT_TRAIN[2:], "--synthetic"],
                ("unknown recipe key 'optimizer.lamb_eps'", "did you mean"),
                {"recipe": f"base: {RNNT_TINY}\noptimizer:\n  lamb_eps: 1.0e-9\n"},
            ),
            (
                "set-key",
                [*RNNT_TRAIN, "--synthetic", "--set", "run.epoch=2"],
                ("unknown recipe key 'run.epoch'", "did you mean 'run.epochs'"),
            ),
            (
                "batch-size-0",
                [*RNNT_TRAIN, "--synthetic", "--batch-size", "0"],
                "run.batch_per_gpu must be a positive integer",
            ),
            ("epochs-0", [*RNNT_TRAIN, "--synthetic", "--epochs", "0"], "epochs must be a positive integer"),
            ("amp-none", [*RNNT_TRAIN, "--synthetic", "--amp", "none"], "use --amp fp32"),
            (
                "checkpoint-without-resume",
                [*RNNT_TRAIN, "--synthetic"],
                "--resume auto",
                {"files": {"results/checkpoint.pt": "ten steps of work"}},
            ),
            ("missing-data", [*RNNT_TRAIN, "--data-dir", "{missing}"], "no_such_path"),
            ("no-data", RNNT_TRAIN, "pass --data-dir"),
            (
                "no-tokenizer",
                [*RNNT_TRAIN, "--data-dir", "{sandbox}/data"],
                "no SentencePiece model",
                {"files": {"data/train.jsonl": '{"audio": "a.flac", "duration": 1.0, "text": "one"}\n'}},
            ),
            ("resume-text", [*RNNT_TRAIN, "--synthetic", "--resume", "{text}"], "notes.txt"),
            (
                "resume-foreign",
                [*RNNT_TRAIN, "--synthetic", "--resume", "{foreign}"],
                "is not an RNN-T training checkpoint",
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        RNNT,
        "evaluate.sh",
        [
            ("text-checkpoint", ["--checkpoint", "{text}", "--data-dir", "{sandbox}"], "notes.txt"),
            (
                "foreign-checkpoint",
                ["--checkpoint", "{foreign}", "--data-dir", "{sandbox}"],
                "is not an RNN-T model.pt",
            ),
            ("missing-checkpoint", ["--checkpoint", "{missing}", "--data-dir", "{sandbox}"], "no_such_path"),
            ("amp-none", ["--checkpoint", "{text}", "--amp", "none"], "use --amp fp32"),
            (
                "batch-size-0",
                ["--checkpoint", "{text}", "--batch-size", "0"],
                "--batch-size must be a positive",
            ),
        ],
    ),
    *rows_for(
        RNNT,
        "transcribe.sh",
        [("missing-audio", ["{missing}", "--checkpoint", "{text}"], ("no_such_path", "cannot decode audio"))],
    ),
    *rows_for(RNNT, "download_data.sh", [("no-data-dir", [], "--data-dir")]),
    *rows_for(
        RNNT,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
    *rows_for(RNNT, "export_triton.sh", [repository_holds("rnnt_python", ["--checkpoint", "{text}"])]),
]
