"""Bad-input rows of TF_R50 (see tests/test_bad_input.py)."""

from __future__ import annotations

from zoo_tree import ROOT

from bad_input_rows.row import BROKEN_CONFIG, UNKNOWN_CHECKPOINT, Row, repository_holds, rows_for

TF_R50 = "TensorFlow/Classification/ResNet50"
TF_R50_TINY = f"{ROOT / TF_R50}/configs/digits_cpu.yaml"
TF_R50_TRAIN = ["--recipe", TF_R50_TINY, "--results-dir", "{results}"]


ROWS: list[Row] = [
    *rows_for(
        TF_R50,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *TF_R50_TRAIN[2:], "--synthetic"],
                ("unknown recipe key 'epoch'", "did you mean 'run.epochs'"),
                {"recipe": f"base: {TF_R50_TINY}\nepoch: 2\n"},
            ),
            (
                "set-key",
                [*TF_R50_TRAIN, "--synthetic", "--set", "label_smothing=0.1"],
                ("unknown recipe key 'label_smothing'", "did you mean 'label_smoothing'"),
            ),
            (
                "dataset-json-lists-5-of-10-classes",
                [*TF_R50_TRAIN, "--data-dir", "{tf_five_classes}"],
                ("holds label", "lists 5 classes"),
            ),
            (
                "num-classes-against-data",
                [*TF_R50_TRAIN, "--data-dir", "{tf_digits}", "--num-classes", "5"],
                "--num-classes 5, but",
            ),
            ("truncated-shard", [*TF_R50_TRAIN, "--data-dir", "{tf_truncated}"], "is truncated: record"),
            ("missing-shard", [*TF_R50_TRAIN, "--data-dir", "{tf_missing_shard}"], "a shard is missing"),
            ("missing-data", [*TF_R50_TRAIN, "--data-dir", "{missing}"], "no_such_path"),
            (
                "init-foreign",
                [*TF_R50_TRAIN, "--synthetic", "--init-checkpoint", "{foreign}"],
                "is not a TensorFlow ResNet-50 checkpoint",
            ),
            (
                "batch-size-0",
                [*TF_R50_TRAIN, "--synthetic", "--batch-size", "0"],
                "run.batch_per_gpu must be a positive integer",
            ),
            (
                "batch-size-neg",
                [*TF_R50_TRAIN, "--synthetic", "--batch-size", "-3"],
                "run.batch_per_gpu must be a positive integer",
            ),
            (
                "epochs-0",
                [*TF_R50_TRAIN, "--synthetic", "--epochs", "0"],
                "epochs must be a positive integer",
            ),
            (
                "image-size-0",
                [*TF_R50_TRAIN, "--synthetic", "--image-size", "0"],
                "image_size must be a positive integer",
            ),
            (
                "steps-per-epoch-0",
                [*TF_R50_TRAIN, "--synthetic", "--steps-per-epoch", "0"],
                "--steps-per-epoch must be a positive integer",
            ),
            ("amp-none", [*TF_R50_TRAIN, "--synthetic", "--amp", "none"], "use --amp fp32"),
            (
                "checkpoint-without-resume",
                [*TF_R50_TRAIN, "--synthetic"],
                "--resume auto",
                {"files": {"results/checkpoint/latest.json": '{"folder": "step-8"}\n'}},
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        TF_R50,
        "evaluate.sh",
        [
            (
                "foreign-checkpoint",
                ["--checkpoint", "{foreign}", "--data-dir", "{tf_digits}"],
                "is not a TensorFlow ResNet-50 checkpoint",
            ),
            (
                "batch-size-0",
                ["--checkpoint", "{text}", "--data-dir", "{tf_digits}", "--batch-size", "0"],
                "--batch-size must be a positive integer",
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        TF_R50,
        "export_triton.sh",
        [
            (
                "foreign-checkpoint",
                ["--checkpoint", "{foreign}", "--model-repository", "{results}/repo"],
                "is not a TensorFlow ResNet-50 checkpoint",
            )
        ],
    ),  # fmt: skip,
    *rows_for(
        TF_R50,
        "deploy_triton.sh",
        [
            (
                "bad-config-pbtxt",
                ["--model-repository", "{sandbox}/repo", "--synthetic"],
                "is not a valid model configuration",
                {
                    "files": {
                        "repo/resnet50_tf_python/config.pbtxt": BROKEN_CONFIG.format(
                            name="resnet50_tf_python"
                        )
                    }
                },
            )
        ],
    ),  # fmt: skip,
    *rows_for(
        TF_R50,
        "download_data.sh",
        [("verify-truncated-shard", ["--verify", "--data-dir", "{tf_truncated}"], "is truncated: record")],
    ),
    *rows_for(
        TF_R50,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
    *rows_for(
        TF_R50,
        "export_triton.sh",
        [repository_holds("resnet50_tf_savedmodel", ["--checkpoint", "{text}"], "--model-repository")],
    ),
    # a training checkpoint cut short, at every entry point that reads one; a registry pull cut short
    *rows_for(
        TF_R50,
        "train.sh",
        [
            (
                "resume-cut-checkpoint",
                [*TF_R50_TRAIN, "--synthetic", "--resume", "{tf_r50_cut_checkpoint}"],
                ("is cut short or damaged: variables.data-00000-of-00001 has", "its index places"),
            ),
            (
                "init-cut-checkpoint",
                [*TF_R50_TRAIN, "--synthetic", "--init-checkpoint", "{tf_r50_cut_checkpoint}"],
                ("--init-checkpoint", "is cut short or damaged"),
            ),
        ],
    ),
    *rows_for(
        TF_R50,
        "evaluate.sh",
        [
            (
                "cut-checkpoint",
                ["--checkpoint", "{tf_r50_cut_checkpoint}", "--data-dir", "{tf_digits}"],
                "is cut short or damaged",
            )
        ],
    ),
    *rows_for(
        TF_R50,
        "export_triton.sh",
        [
            (
                "cut-checkpoint",
                ["--checkpoint", "{tf_r50_cut_checkpoint}", "--model-repository", "{results}/repo"],
                "is cut short or damaged",
            )
        ],
    ),
    *rows_for(
        TF_R50,
        "download_checkpoint.sh",
        [
            (
                "pull-cut-hdf5",
                ["pull", "cut", "--registry", "{pulls}/hdf5.yaml", "--cache-dir", "{cache}"],
                ("cut.h5", "shorter than the", "its HDF5 superblock names", "nothing was written"),
            )
        ],
    ),
]
