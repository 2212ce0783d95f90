"""Bad-input rows of TF_BERT (see tests/test_bad_input.py)."""

from __future__ import annotations

from zoo_tree import ROOT

from bad_input_rows.row import UNKNOWN_CHECKPOINT, Row, repository_holds, rows_for

TF_BERT = "TensorFlow/LanguageModeling/BERT"
TF_BERT_TINY = f"{ROOT / TF_BERT}/configs/pretrain_tiny_cpu.yaml"
TF_BERT_TRAIN = ["--recipe", TF_BERT_TINY, "--results-dir", "{results}"]
TF_BERT_SQUAD = ["--recipe", f"{ROOT / TF_BERT}/configs/squad_tiny_cpu.yaml", "--vocab", "{bert_vocab}"]
TF_BERT_SQUAD += ["--results-dir", "{results}"]


ROWS: list[Row] = [
    *rows_for(
        TF_BERT,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *TF_BERT_TRAIN[2:], "--synthetic"],
                ("unknown recipe key 'accumulations'", "did you mean 'run.accumulation'"),
                {"recipe": f"base: {TF_BERT_TINY}\naccumulations: 2\n"},
            ),
            (
                "set-key",
                [*TF_BERT_TRAIN, "--synthetic", "--set", "optimizer.lrr=0.1"],
                ("unknown recipe key 'optimizer.lrr'", "did you mean 'optimizer.lr'"),
            ),
            (
                "accumulation-0",
                [*TF_BERT_TRAIN, "--synthetic", "--accumulation", "0"],
                "accumulation must be a positive integer",
            ),
            (
                "batch-size-0",
                [*TF_BERT_TRAIN, "--synthetic", "--batch-size", "0"],
                "batch_per_gpu must be a positive integer",
            ),
            (
                "batch-size-neg",
                [*TF_BERT_TRAIN, "--synthetic", "--batch-size", "-3"],
                "batch_per_gpu must be a positive integer",
            ),
            ("steps-0", [*TF_BERT_TRAIN, "--synthetic", "--steps", "0"], "steps must be a positive integer"),
            ("amp-none", [*TF_BERT_TRAIN, "--synthetic", "--amp", "none"], "use --amp fp32"),
            (
                "checkpoint-without-resume",
                [*TF_BERT_TRAIN, "--synthetic"],
                "--resume auto",
                {"files": {"results/checkpoint/latest.json": '{"folder": "step-8"}\n'}},
            ),
            ("missing-data", [*TF_BERT_TRAIN, "--data-dir", "{missing}"], "no_such_path"),
            (
                "shard-cut-in-half",
                [*TF_BERT_TRAIN, "--max-seq", "128", "--data-dir", "{bert_truncated}"],
                "is damaged",
            ),
            (
                "init-foreign",
                [*TF_BERT_TRAIN, "--synthetic", "--init-checkpoint", "{foreign}"],
                "resnet18_checkpoint.pt",
            ),
            ("resume-text", [*TF_BERT_TRAIN, "--synthetic", "--resume", "{text}"], "notes.txt"),
            (
                "squad-no-answer",
                ["squad", *TF_BERT_SQUAD, "--data-dir", "{squad_no_answer}", "--do-train"],
                "has no answer",
            ),
            (
                "squad-results-hold-a-fine-tuned-model",
                ["squad", *TF_BERT_SQUAD, "--data-dir", "{squad}"],
                ("results/squad_model.npz exists", "pass --force"),
                {"files": {"results/squad_model.npz": "an earlier fine-tuning's weights"}},
            ),
            (  # fine-tuning would prune the pretraining run's step folders
                "squad-results-hold-a-checkpoint",
                ["squad", *TF_BERT_SQUAD, "--data-dir", "{squad}"],
                ("results/checkpoint exists", "pass --force"),
                {"files": {"results/checkpoint/latest.json": '{"step": "step_00000010"}'}},
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        TF_BERT,
        "evaluate.sh",
        [
            (
                "text-checkpoint",
                [*TF_BERT_SQUAD, "--data-dir", "{squad}", "--init-checkpoint", "{text}"],
                "notes.txt",
            ),
            (
                "missing-data",
                [*TF_BERT_SQUAD, "--data-dir", "{missing}", "--init-checkpoint", "{text}"],
                "no_such_path",
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        TF_BERT,
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
        TF_BERT,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
    *rows_for(
        TF_BERT,
        "export_triton.sh",
        [
            repository_holds(
                "bert_tf_python", ["--checkpoint", "{text}", "--vocab", "{bert_vocab}"], "--model-repository"
            )
        ],
    ),
    # a training checkpoint cut short, at every entry point that reads one; damaged data; a pull cut short
    *rows_for(
        TF_BERT,
        "train.sh",
        [
            (
                "resume-cut-checkpoint",
                [*TF_BERT_TRAIN, "--synthetic", "--resume", "{tf_bert_cut_checkpoint}"],
                ("is cut short or damaged: variables.data-00000-of-00001 has", "its index places"),
            ),
            (
                "init-cut-checkpoint",
                [*TF_BERT_TRAIN, "--synthetic", "--init-checkpoint", "{tf_bert_cut_checkpoint}"],
                ("--init-checkpoint", "is cut short or damaged"),
            ),
            (
                "squad-init-cut-checkpoint",
                ["squad", *TF_BERT_SQUAD, "--data-dir", "{squad}", "--do-train"]
                + ["--init-checkpoint", "{tf_bert_cut_checkpoint}"],
                "is cut short or damaged",
            ),
            (
                "stop-after-0",
                [*TF_BERT_TRAIN, "--synthetic", "--stop-after", "0"],
                "--stop-after must be a positive integer",
            ),
            (
                "shard-ids-beyond-vocab",
                [*TF_BERT_TRAIN, "--max-seq", "128", "--data-dir", "{bert_ids_beyond_vocab}"],
                ("is damaged (token id", "-token vocabulary metadata.json names"),
            ),
            (
                "metadata-vocab-too-small",
                [*TF_BERT_TRAIN, "--max-seq", "128", "--data-dir", "{bert_lying_metadata}"],
                "beyond the 50-token vocabulary metadata.json names",
            ),
            (
                "metadata-not-json",
                [*TF_BERT_TRAIN, "--max-seq", "128", "--data-dir", "{bert_metadata_not_json}"],
                "metadata.json is not a readable JSON file",
            ),
            (
                "squad-binary-vocab",
                ["squad", *TF_BERT_SQUAD[:2], "--vocab", "{foreign}", *TF_BERT_SQUAD[4:]]
                + ["--data-dir", "{squad}", "--do-train"],
                ("resnet18_checkpoint.pt", "is not a UTF-8 text file"),
            ),
        ],
    ),
    *rows_for(
        TF_BERT,
        "evaluate.sh",
        [
            (
                "cut-checkpoint",
                [*TF_BERT_SQUAD, "--data-dir", "{squad}", "--init-checkpoint", "{tf_bert_cut_checkpoint}"],
                "is cut short or damaged",
            )
        ],
    ),
    *rows_for(
        TF_BERT,
        "export_triton.sh",
        [
            (
                "cut-checkpoint",
                ["--checkpoint", "{tf_bert_cut_checkpoint}", "--vocab", "{bert_vocab}"]
                + ["--model-repository", "{results}/repo"],
                "is cut short or damaged",
            )
        ],
    ),
    *rows_for(
        TF_BERT,
        "download_checkpoint.sh",
        [
            (
                "pull-cut-savedmodel",
                ["pull", "cut", "--registry", "{pulls}/savedmodel.yaml", "--cache-dir", "{cache}"],
                ("cut.tar.gz", "a tar archive cut short", "nothing was written"),
            )
        ],
    ),
]
