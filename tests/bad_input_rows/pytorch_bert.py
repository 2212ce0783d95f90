"""Bad-input rows of BERT (see tests/test_bad_input.py)."""

from __future__ import annotations

from zoo_tree import ROOT

from bad_input_rows.row import UNKNOWN_CHECKPOINT, Row, repository_holds, rows_for

BERT = "PyTorch/LanguageModeling/BERT"
BERT_TINY = f"{ROOT / BERT}/configs/pretrain_tiny_cpu.yaml"
BERT_TRAIN = ["--recipe", BERT_TINY, "--device", "cpu", "--results-dir", "{results}"]
BERT_SQUAD = [
    "--recipe",
    f"{ROOT / BERT}/configs/squad_tiny_cpu.yaml",
    "--device",
    "cpu",
    "--vocab",
    "{bert_vocab}",
]
BERT_SQUAD += ["--results-dir", "{results}"]


ROWS: list[Row] = [
    # Prepared data whose token ids or metadata.json do not fit each other (zoo.data.bert), and a vocabulary
    # that is not text: before training
    *rows_for(
        BERT,
        "train.sh",
        [
            (
                "shard-ids-beyond-vocab",
                [*BERT_TRAIN, "--data-dir", "{bert_ids_beyond_vocab}"],
                ("is damaged (token id", "-token vocabulary metadata.json names"),
            ),
            (
                "metadata-vocab-too-small",
                [*BERT_TRAIN, "--data-dir", "{bert_lying_metadata}"],
                "beyond the 50-token vocabulary metadata.json names",
            ),
            (
                "metadata-not-json",
                [*BERT_TRAIN, "--data-dir", "{bert_metadata_not_json}"],
                "metadata.json is not a readable JSON file",
            ),
            (
                "squad-binary-vocab",
                ["squad", *BERT_SQUAD[:4], "--vocab", "{foreign}", *BERT_SQUAD[6:], "--data-dir", "{squad}"]
                + ["--do-train"],
                ("resnet18_checkpoint.pt", "is not a UTF-8 text file"),
            ),
        ],
    ),
    *rows_for(
        BERT,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *BERT_TRAIN[2:], "--synthetic"],
                ("unknown recipe key 'accumulations'", "did you mean 'run.accumulation'"),
                {"recipe": f"base: {BERT_TINY}\naccumulations: 2\n"},
            ),
            (
                "set-key",
                [*BERT_TRAIN, "--synthetic", "--set", "optimizer.lrr=0.1"],
                ("unknown recipe key 'optimizer.lrr'", "did you mean 'optimizer.lr'"),
            ),
            (
                "accumulation-0",
                [*BERT_TRAIN, "--synthetic", "--accumulation", "0"],
                "accumulation must be a positive integer",
            ),
            (
                "batch-size-0",
                [*BERT_TRAIN, "--synthetic", "--batch-size", "0"],
                "batch_per_gpu must be a positive integer",
            ),
            (
                "batch-size-neg",
                [*BERT_TRAIN, "--synthetic", "--batch-size", "-3"],
                "batch_per_gpu must be a positive integer",
            ),
            ("steps-0", [*BERT_TRAIN, "--synthetic", "--steps", "0"], "steps must be a positive integer"),
            ("amp-none", [*BERT_TRAIN, "--synthetic", "--amp", "none"], "use --amp fp32"),
            (
                "checkpoint-without-resume",
                [*BERT_TRAIN, "--synthetic"],
                "--resume auto",
                {"files": {"results/checkpoint.pt": "ten steps of work"}},
            ),
            ("missing-data", [*BERT_TRAIN, "--data-dir", "{missing}"], "no_such_path"),
            ("shard-cut-in-half", [*BERT_TRAIN, "--data-dir", "{bert_truncated}"], "is damaged"),
            (
                "init-foreign",
                [*BERT_TRAIN, "--synthetic", "--init-checkpoint", "{foreign}"],
                "not a BERT state dict",
            ),
            (
                "resume-foreign",
                [*BERT_TRAIN, "--synthetic", "--resume", "{foreign}"],
                "is not a BERT pretraining checkpoint",
            ),
            (
                "resume-text",
                [*BERT_TRAIN, "--synthetic", "--resume", "{text}"],
                "is not a BERT pretraining checkpoint",
            ),
            (
                "squad-no-answer",
                ["squad", *BERT_SQUAD, "--data-dir", "{squad_no_answer}", "--do-train"],
                "has no answer",
            ),
            (
                "squad-answer-past-context",
                ["squad", *BERT_SQUAD, "--data-dir", "{squad_past_context}", "--do-train"],
                "past its context",
            ),
            (
                "squad-results-hold-a-fine-tuned-model",
                ["squad", *BERT_SQUAD, "--data-dir", "{squad}"],
                ("results/squad_model.pt exists", "pass --force"),
                {"files": {"results/squad_model.pt": "an earlier fine-tuning's weights"}},
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        BERT,
        "evaluate.sh",
        [
            (
                "text-checkpoint",
                [*BERT_SQUAD, "--data-dir", "{squad}", "--init-checkpoint", "{text}"],
                "cannot read checkpoint",
            ),
            (
                "foreign-checkpoint",
                [*BERT_SQUAD, "--data-dir", "{squad}", "--init-checkpoint", "{foreign}"],
                "not a BERT state dict",
            ),
            (
                "missing-data",
                [*BERT_SQUAD, "--data-dir", "{missing}", "--init-checkpoint", "{text}"],
                "does not exist",
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        BERT,
        "export_triton.sh",
        [
            (
                "text-checkpoint",
                ["--checkpoint", "{text}", "--vocab", "{bert_vocab}", "--model-repository", "{results}/repo"],
                "notes.txt",
            )
        ],
    ),  # fmt: skip,
    *rows_for(
        BERT,
        "download_data.sh",
        [
            (
                "unfinished-wikipedia",
                [
                    "prepare",
                    "--input",
                    "{wiki_unfinished}",
                    "--vocab",
                    "{bert_vocab}",
                    "--data-dir",
                    "{results}/data",
                ],
                "unfinished Wikipedia extraction",
            )
        ],
    ),  # fmt: skip,
    *rows_for(
        BERT,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
    *rows_for(
        BERT,
        "export_triton.sh",
        [
            repository_holds(
                "bert_squad_onnx", ["--checkpoint", "{text}", "--vocab", "{bert_vocab}"], "--model-repository"
            )
        ],
    ),
]
