"""Bad-input rows of TRANSFORMER (see tests/test_bad_input.py)."""

from __future__ import annotations

from zoo_tree import ROOT

from bad_input_rows.row import UNKNOWN_CHECKPOINT, Row, repository_holds, rows_for

TRANSFORMER = "PyTorch/Translation/Transformer"
TRANSFORMER_TINY = f"{ROOT / TRANSFORMER}/configs/numbers_cpu.yaml"
TRANSFORMER_TRAIN = ["--recipe", TRANSFORMER_TINY, "--data-dir", "{numbers}", "--results-dir", "{results}"]
TRANSFORMER_TRAIN += ["--device", "cpu"]


ROWS: list[Row] = [
    # Counts of the model section, the position table, and prepared data that fail before training
    *rows_for(
        TRANSFORMER,
        "train.sh",
        [
            (
                "encoder-layers-0",
                [*TRANSFORMER_TRAIN, "--set", "model.encoder_layers=0"],
                "model.encoder_layers must be a positive integer",
            ),
            (
                "max-positions-0",
                [*TRANSFORMER_TRAIN, "--set", "model.max_positions=0"],
                "model.max_positions must be a positive integer",
            ),
            (
                "max-positions-below-max-length",
                [*TRANSFORMER_TRAIN, "--set", "model.max_positions=8"],
                "data.max_length 64 is longer than model.max_positions 8",
            ),
            *[
                (
                    name,
                    [*TRANSFORMER_TRAIN[:2], "--data-dir", "{" + data + "}", *TRANSFORMER_TRAIN[4:]],
                    expect,
                )
                for name, data, expect in [
                    ("offsets-reversed", "numbers_offsets_reversed", "src_offsets do not cut its"),
                    (
                        "ids-beyond-vocab",
                        "numbers_ids_beyond_vocab",
                        "tgt token id 5000 is outside the vocabulary",
                    ),
                    ("shard-cut-in-half", "numbers_cut_shard", "train.001.npz cannot be read"),
                ]
            ],
            (
                "tokenizer-not-json",
                [*TRANSFORMER_TRAIN[:2], "--data-dir", "{sandbox}/data", *TRANSFORMER_TRAIN[4:]],
                "tokenizer.json is not a tokenizer file",
                {"files": {"data/tokenizer.json": '{"model": '}},
            ),
        ],
    ),  # fmt: skip
    *rows_for(
        TRANSFORMER,
        "export_triton.sh",
        [
            (
                f"beam-{beam}",
                ["--checkpoint", "{text}", "--repository", "{results}/repo", "--beam", beam],
                f"--beam must be a positive integer, not {beam}",
            )
            for beam in ("0", "-3")
        ],
    ),  # fmt: skip
    *rows_for(
        TRANSFORMER,
        "evaluate.sh",
        [
            (
                "binary-input",
                [
                    "--checkpoint",
                    "{transformer_model}/model.pt",
                    "--input",
                    "{foreign}",
                    "--results-dir",
                    "{results}",
                ],
                "resnet18_checkpoint.pt is not UTF-8 text",
            ),
        ],
    ),  # fmt: skip
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
            # --output naming the --input file, as it is, relative to the working directory and by a symlink
            *[
                (
                    f"output-is-input-{how}",
                    ["--checkpoint", "{text}", "--input", "{sandbox}/news.en", "--output", output],
                    "would overwrite the --input file",
                    {"files": {"news.en": "one two three\n"}, "links": {"link.en": "news.en"}},
                )
                for how, output in [
                    ("same-path", "{sandbox}/news.en"),
                    ("relative", "../news.en"),
                    ("symlink", "{sandbox}/link.en"),
                ]
            ],
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
    *rows_for(
        TRANSFORMER, "export_triton.sh", [repository_holds("transformer_python", ["--checkpoint", "{text}"])]
    ),
]
