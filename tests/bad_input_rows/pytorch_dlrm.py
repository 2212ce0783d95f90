"""Bad-input rows of DLRM (see tests/test_bad_input.py)."""

from __future__ import annotations

from zoo_tree import ROOT

from bad_input_rows.row import UNKNOWN_CHECKPOINT, Row, repository_holds, rows_for

DLRM = "PyTorch/Recommendation/DLRM"
DLRM_TINY = f"{ROOT / DLRM}/configs/dlrm_dcnv2_small.yaml"
DLRM_TRAIN = [
    "--recipe",
    DLRM_TINY,
    "--data-dir",
    "{criteo}",
    "--results-dir",
    "{results}",
    "--device",
    "cpu",
]
DLRM_TRAIN += ["--set", "model.embeddings=plain"]


ROWS: list[Row] = [
    # Prepared data that does not fit its meta.json or holds values a click log cannot: before training
    *rows_for(
        DLRM,
        "train.sh",
        [
            (name, [*DLRM_TRAIN[:2], "--data-dir", "{" + data + "}", *DLRM_TRAIN[4:]], expect)
            for name, data, expect in [
                (
                    "meta-20-tables",
                    "criteo_meta_20_tables",
                    "26 categorical columns, but meta.json names 13 and 20",
                ),
                ("meta-not-json", "criteo_meta_not_json", "meta.json is not JSON"),
                ("label-7", "criteo_label_7", "row 5 has the label 7 (labels are 0 or 1)"),
                (
                    "nan-feature",
                    "criteo_nan_feature",
                    "row 3 has a dense feature that is not a finite number",
                ),
                ("shard-cut-in-half", "criteo_cut_shard", "truncated or corrupt shard"),
            ]
        ],
    ),  # fmt: skip
    *rows_for(
        DLRM,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *DLRM_TRAIN[2:]],
                ("unknown recipe key 'run.batch_per_gpus'", "did you mean 'run.batch_per_gpu'"),
                {"recipe": f"base: {DLRM_TINY}\nrun:\n  batch_per_gpus: 64\n"},
            ),
            (
                "set-key",
                [*DLRM_TRAIN, "--set", "model.embedding_dims=8"],
                ("unknown recipe key 'model.embedding_dims'", "did you mean 'model.embedding_dim'"),
            ),
            (
                "batch-size-0",
                [*DLRM_TRAIN, "--batch-size", "0"],
                "run.batch_per_gpu must be a positive integer",
            ),
            ("epochs-0", [*DLRM_TRAIN, "--epochs", "0"], "epochs must be a positive integer"),
            ("max-steps-0", [*DLRM_TRAIN, "--max-steps", "0"], "run.steps must be a positive integer"),
            ("data-threads-0", [*DLRM_TRAIN, "--set", "data.threads=0"], "unknown recipe key 'data.threads'"),
            ("amp-none", [*DLRM_TRAIN, "--amp", "none"], "use --amp fp32"),
            (
                "amp-fp16-torchrec",
                [*DLRM_TRAIN, "--amp", "fp16", "--set", "model.embeddings=torchrec"],
                "--amp fp16 needs loss scaling",
            ),
            (
                "checkpoint-without-resume",
                DLRM_TRAIN,
                "--resume auto",
                {"files": {"results/checkpoint/checkpoint.pt": "ten steps of work"}},
            ),
            ("resume-text", [*DLRM_TRAIN, "--resume", "{text}"], "not a DLRM checkpoint"),
            ("resume-foreign", [*DLRM_TRAIN, "--resume", "{foreign}"], "not a DLRM checkpoint"),
            ("missing-data", [*DLRM_TRAIN[:2], "--data-dir", "{missing}", *DLRM_TRAIN[4:]], "does not exist"),
        ],
    ),  # fmt: skip,
    *rows_for(
        DLRM,
        "evaluate.sh",
        [
            (
                "text-checkpoint",
                [
                    "--recipe",
                    DLRM_TINY,
                    "--data-dir",
                    "{criteo}",
                    "--checkpoint",
                    "{text}",
                    "--results-dir",
                    "{results}",
                ],
                "not a DLRM checkpoint",
            ),
            (
                "foreign-checkpoint",
                [
                    "--recipe",
                    DLRM_TINY,
                    "--data-dir",
                    "{criteo}",
                    "--checkpoint",
                    "{foreign}",
                    "--results-dir",
                    "{results}",
                ],
                "not a DLRM checkpoint",
            ),
            (
                "missing-data",
                [
                    "--recipe",
                    DLRM_TINY,
                    "--data-dir",
                    "{missing}",
                    "--checkpoint",
                    "{text}",
                    "--results-dir",
                    "{results}",
                ],
                "does not exist",
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        DLRM,
        "export_triton.sh",
        [
            (
                "text-checkpoint",
                ["--checkpoint", "{text}", "--repository", "{results}/repo"],
                "not a DLRM checkpoint",
            )
        ],
    ),
    *rows_for(
        DLRM,
        "deploy_triton.sh",
        [("missing-repository", ["--repository", "{missing}", "--data-dir", "{criteo}"], "export_triton.sh")],
    ),
    *rows_for(DLRM, "download_data.sh", [("no-data-dir", [], "give --data-dir")]),
    *rows_for(
        DLRM,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
    *rows_for(DLRM, "export_triton.sh", [repository_holds("dlrm_python", ["--checkpoint", "{missing}"])]),
]
