"""Bad-input rows of MX_R50 (see tests/test_bad_input.py)."""

from __future__ import annotations

from zoo_tree import ROOT

from bad_input_rows.row import BROKEN_CONFIG, UNKNOWN_CHECKPOINT, Row, repository_holds, rows_for

MX_R50 = "MXNet/Classification/ResNet50"
MX_R50_TINY = f"{ROOT / MX_R50}/configs/resnet50_digits_cpu.yaml"
MX_R50_TRAIN = ["--recipe", MX_R50_TINY, "--results-dir", "{results}"]


ROWS: list[Row] = [
    *rows_for(
        MX_R50,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *MX_R50_TRAIN[2:], "--synthetic"],
                ("unknown recipe key 'run.epoch'", "did you mean 'run.epochs'"),
                {"recipe": f"base: {MX_R50_TINY}\nrun:\n  epoch: 2\n"},
            ),
            (
                "set-key",
                [*MX_R50_TRAIN, "--synthetic", "--set", "optimizer.lr_per_265=0.1"],
                ("unknown recipe key 'optimizer.lr_per_265'", "did you mean 'optimizer.lr_per_256'"),
            ),
            (
                "num-classes-against-data",
                [*MX_R50_TRAIN, "--data-dir", "{mx_digits}", "--num-classes", "5"],
                ("has 5 classes", "lists 10"),
            ),
            ("truncated-rec", [*MX_R50_TRAIN, "--data-dir", "{mx_truncated}"], "is truncated: record"),
            ("missing-data", [*MX_R50_TRAIN, "--data-dir", "{missing}"], "no_such_path"),
            (
                "resume-foreign",
                [*MX_R50_TRAIN, "--synthetic", "--resume", "{foreign}"],
                "is not an MXNet ResNet-50 training checkpoint",
            ),
            (
                "resume-text",
                [*MX_R50_TRAIN, "--synthetic", "--resume", "{text}"],
                "is not an MXNet ResNet-50 training checkpoint",
            ),
            (
                "batch-size-0",
                [*MX_R50_TRAIN, "--synthetic", "--batch-size", "0"],
                "run.batch_per_gpu must be a positive integer",
            ),
            (
                "batch-size-neg",
                [*MX_R50_TRAIN, "--synthetic", "--batch-size", "-3"],
                "run.batch_per_gpu must be a positive integer",
            ),
            (
                "epochs-0",
                [*MX_R50_TRAIN, "--synthetic", "--epochs", "0"],
                "epochs must be a positive integer",
            ),
            (
                "image-size-0",
                [*MX_R50_TRAIN, "--synthetic", "--image-size", "0"],
                "image_size must be a positive integer",
            ),
            (
                "steps-per-epoch-0",
                [*MX_R50_TRAIN, "--synthetic", "--steps-per-epoch", "0"],
                "--steps-per-epoch must be a positive integer",
            ),
            ("amp-none", [*MX_R50_TRAIN, "--synthetic", "--amp", "none"], "use --amp fp32"),
            (
                "checkpoint-without-resume",
                [*MX_R50_TRAIN, "--synthetic"],
                "--resume auto",
                {"files": {"results/checkpoint/latest.json": '{"folder": "step-3"}'}},
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        MX_R50,
        "evaluate.sh",
        [
            (
                "foreign-checkpoint",
                ["--checkpoint", "{foreign}", "--data-dir", "{mx_digits}"],
                "is not an MXNet parameter file",
            ),
            (
                "text-checkpoint",
                ["--checkpoint", "{text}", "--data-dir", "{mx_digits}"],
                "is not an MXNet parameter file",
            ),
            (
                "batch-size-0",
                ["--checkpoint", "{text}", "--data-dir", "{mx_digits}", "--batch-size", "0"],
                "--batch-size must be a positive integer",
            ),
        ],
    ),  # fmt: skip,
    *rows_for(
        MX_R50,
        "export_triton.sh",
        [
            (
                "foreign-checkpoint",
                ["--checkpoint", "{foreign}", "--model-repository", "{results}/repo"],
                "is not an MXNet parameter file",
            ),
            (
                "max-batch-size-0",
                ["--checkpoint", "{text}", "--model-repository", "{results}/repo", "--max-batch-size", "0"],
                "--max-batch-size must be a positive integer",
            ),
        ],
    ),
    *rows_for(
        MX_R50,
        "benchmark.sh",
        [("batch-size-0", ["--batch-size", "0"], "--batch-size must be a positive integer")],
    ),  # fmt: skip,
    *rows_for(
        MX_R50,
        "deploy_triton.sh",
        [
            (
                "bad-config-pbtxt",
                ["--model-repository", "{sandbox}/repo", "--data-dir", "{mx_digits}", "--image-size", "32"],
                "not a Triton ModelConfig",
                {
                    "files": {
                        "repo/resnet50_mx_python/config.pbtxt": BROKEN_CONFIG.format(
                            name="resnet50_mx_python"
                        )
                    }
                },
            )
        ],
    ),  # fmt: skip,
    *rows_for(
        MX_R50,
        "download_data.sh",
        [
            ("verify-truncated-rec", ["--verify", "--data-dir", "{mx_truncated}"], "is truncated: record"),
            ("verify-missing-data", ["--verify", "--data-dir", "{missing}"], "does not exist"),
        ],
    ),
    *rows_for(
        MX_R50,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
    *rows_for(
        MX_R50,
        "export_triton.sh",
        [repository_holds("resnet50_mx_onnx", ["--checkpoint", "{text}"], "--model-repository")],
    ),
    # a negative GPU count, no decoding threads, a training checkpoint cut short, a pull cut short
    *rows_for(
        MX_R50,
        "train.sh",
        [
            ("gpus-negative", [*MX_R50_TRAIN, "--synthetic", "--gpus", "-1"], "--gpus -1: a GPU count"),
            (
                "data-threads-0",
                [*MX_R50_TRAIN, "--synthetic", "--set", "data.threads=0"],
                "data.threads must be a positive integer",
            ),
            (
                "resume-cut-states",
                [*MX_R50_TRAIN, "--synthetic", "--resume", "{mx_cut_states}"],
                "is cut short or damaged (trainer.states: ",
            ),
        ],
    ),
    *rows_for(
        MX_R50,
        "download_checkpoint.sh",
        [
            (
                "pull-cut-params",
                ["pull", "cut", "--registry", "{pulls}/mxnet-params.yaml", "--cache-dir", "{cache}"],
                ("cut.params", "an MXNet NDArray file cut short", "nothing was written"),
            )
        ],
    ),
]
