"""The bad-input matrix (docs/ARCHITECTURE.md, "Quality bar"): every model's entry points, run as a user
runs them (``scripts/*.sh`` in the model's venv) on inputs they must refuse. Each row must end with

- an exit code other than 0,
- a last non-empty stderr line that names the problem (the row's ``expect`` substring),
- no "Traceback" anywhere in the output,
- nothing created, changed or removed in the results directory, the checkpoint cache, the working
  directory or the data the row reads (file names, sizes and mtimes before and after).

A row's arguments may name these placeholders (filled in per row, see ``_paths``):

    {sandbox}   the row's own folder (its ``files`` are written there first)
    {results}   the row's results directory (absent unless the row's ``files`` put something in it)
    {cache}     the row's checkpoint cache ($ZOO_CACHE; exists, empty)
    {missing}   a path that does not exist ("no_such_path")
    {text}      a text file ("notes.txt") given where a checkpoint is expected
    {foreign}   another network's PyTorch checkpoint ("resnet18_checkpoint.pt": torchvision ResNet-18
                weights under "model")
    {recipe}    a recipe file the row's ``recipe`` text is written to
    {coco} {numbers} {criteo} {mx_digits} {tf_digits}   tiny prepared datasets (COCO-format shapes,
                number words, Criteo-format rows, scikit-learn's digits as RecordIO and TFRecords), made
                once per session; {mx_truncated} {tf_truncated} {tf_missing_shard} {tf_five_classes}
                damaged copies (see _damaged_copies)
    {bert_vocab} {bert_data} {bert_truncated} {squad} {squad_no_answer} {squad_past_context}
    {wiki_unfinished}   BERT's (see BERT_FIXTURES)

Every model directory has rows here (tests/test_contract.py fails one without them); a new model adds
its own to ``ROWS``. Rows run in parallel on a few threads, each with its own sandbox.
"""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from zoo_tree import ROOT, model_env, venv_bin

# A config.pbtxt cut off in the middle of its first input (the deploy must say so before starting a server).
BROKEN_CONFIG = 'name: "{name}"\ninput [ {{ name: "images" dims: [ 3, 32 '

# A registry name no model lists: ``download_checkpoint.sh pull`` must refuse it and cache nothing.
UNKNOWN_CHECKPOINT = "resnet50-no-such-checkpoint"


@dataclass(frozen=True)
class Row:
    """One bad input: ``scripts/<script> <args>`` of ``model`` must fail with ``expect`` in its last line."""

    model: str  # model directory relative to the repository root
    script: str  # a file of the model's scripts/
    args: tuple
    expect: str | tuple  # substring(s) of stderr's last non-empty line
    name: str
    recipe: str | None = None  # YAML written to {recipe}
    files: dict | None = None  # {path under the sandbox: text} written before the run

    @property
    def id(self) -> str:
        framework, _, model = self.model.split("/")
        return f"{framework}-{model}-{self.script.removesuffix('.sh')}-{self.name}"


def rows_for(model: str, script: str, table: list) -> list[Row]:
    """Rows of one entry point from (name, args, expect[, options]) tuples."""
    out = []
    for entry in table:
        name, args, expect, *options = entry
        out.append(Row(model, script, tuple(args), expect, name, **(options[0] if options else {})))
    return out


# ----------------------------------------------------------------------------------------- the rows

MASKRCNN = "PyTorch/Segmentation/MaskRCNN"
MASKRCNN_TINY = f"{ROOT / MASKRCNN}/configs/shapes_cpu.yaml"
MASKRCNN_DATA = ["--data-dir", "{coco}", "--train-split", "train", "--val-split", "val"]
MASKRCNN_TRAIN = ["--recipe", MASKRCNN_TINY, *MASKRCNN_DATA, "--results-dir", "{results}", "--device", "cpu"]

TRANSFORMER = "PyTorch/Translation/Transformer"
TRANSFORMER_TINY = f"{ROOT / TRANSFORMER}/configs/numbers_cpu.yaml"
TRANSFORMER_TRAIN = ["--recipe", TRANSFORMER_TINY, "--data-dir", "{numbers}", "--results-dir", "{results}"]
TRANSFORMER_TRAIN += ["--device", "cpu"]

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

R50 = "PyTorch/Classification/ResNet50"
R50_TINY = f"{ROOT / R50}/configs/digits_cpu.yaml"
R50_TRAIN = ["--recipe", R50_TINY, "--results-dir", "{results}", "--device", "cpu"]

EFFNET = "PyTorch/Classification/EfficientNet"
EFFNET_TINY = f"{ROOT / EFFNET}/configs/digits_cpu.yaml"
EFFNET_TRAIN = ["--recipe", EFFNET_TINY, "--results-dir", "{results}", "--device", "cpu", "--threads", "1"]

SSD = "PyTorch/Detection/SSD"
SSD_TINY = f"{ROOT / SSD}/configs/shapes_smoke.yaml"
SSD_TRAIN = ["--recipe", SSD_TINY, "--results-dir", "{results}", "--device", "cpu"]

TF_R50 = "TensorFlow/Classification/ResNet50"
TF_R50_TINY = f"{ROOT / TF_R50}/configs/digits_cpu.yaml"
TF_R50_TRAIN = ["--recipe", TF_R50_TINY, "--results-dir", "{results}"]

MX_R50 = "MXNet/Classification/ResNet50"
MX_R50_TINY = f"{ROOT / MX_R50}/configs/resnet50_digits_cpu.yaml"
MX_R50_TRAIN = ["--recipe", MX_R50_TINY, "--results-dir", "{results}"]

TF_BERT = "TensorFlow/LanguageModeling/BERT"
TF_BERT_TINY = f"{ROOT / TF_BERT}/configs/pretrain_tiny_cpu.yaml"
TF_BERT_TRAIN = ["--recipe", TF_BERT_TINY, "--results-dir", "{results}"]
TF_BERT_SQUAD = ["--recipe", f"{ROOT / TF_BERT}/configs/squad_tiny_cpu.yaml", "--vocab", "{bert_vocab}"]
TF_BERT_SQUAD += ["--results-dir", "{results}"]

UNET3D = "PyTorch/Segmentation/UNet3D"
UNET3D_TINY = f"{ROOT / UNET3D}/configs/synthetic_cpu.yaml"
UNET3D_TRAIN = ["--recipe", UNET3D_TINY, "--results-dir", "{results}", "--device", "cpu"]
UNET3D_EVAL = ["--synthetic", "--amp", "fp32", "--device", "cpu", "--results-dir", "{results}"]

RETINANET = "PyTorch/Detection/RetinaNet"
RETINANET_TINY = f"{ROOT / RETINANET}/configs/digits_cpu.yaml"
RETINANET_TRAIN = ["--recipe", RETINANET_TINY, "--results-dir", "{results}", "--device", "cpu"]

GPT = "PyTorch/LanguageModeling/GPT"
GPT_TINY = f"{ROOT / GPT}/configs/tiny_cpu.yaml"
GPT_TRAIN = [
    "--recipe",
    GPT_TINY,
    "--data-dir",
    "{sandbox}/data",
    "--results-dir",
    "{results}",
    "--device",
    "cpu",
]
# A tokenizer.json of two ids, and a prepared folder whose meta.json names it (or another) and a shard of
# 100 tokens that holds 2 bytes: the data gpt.train checks before it writes anything.
GPT_TOKENIZER = (
    '{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [{"id": 0, "content": '
    '"<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": '
    'true}], "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null, "model": '
    '{"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": '
    'null, "fuse_unk": false, "byte_fallback": false, "vocab": {"<|endoftext|>": 0, "a": 1}, "merges": []}}'
)


def gpt_data(tokenizer_sha256: str) -> dict:
    """The files of a prepared GPT data folder under {sandbox}/data with a truncated training shard."""
    import json

    shards = {
        split: [{"name": "shard_00000.bin", "tokens": 100, "sha256": "0" * 64}]
        for split in ("train", "validation")
    }
    meta = {"source": "rows", "vocab_size": 2, "eos_id": 0, "dtype": "uint16", "tokenizer_sha256": tokenizer_sha256,
            "splits": shards}  # fmt: skip
    return {"data/tokenizer.json": GPT_TOKENIZER, "data/meta.json": json.dumps(meta),
            "data/train/shard_00000.bin": "ab", "data/validation/shard_00000.bin": "ab"}  # fmt: skip


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


RNNT = "PyTorch/SpeechRecognition/RNNT"
RNNT_TINY = f"{ROOT / RNNT}/configs/spoken_cpu.yaml"
RNNT_TRAIN = ["--recipe", RNNT_TINY, "--results-dir", "{results}", "--device", "cpu"]

ROWS: list[Row] = [
    *rows_for(
        RETINANET,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *RETINANET_TRAIN[2:], "--synthetic"],
                ("unknown recipe key 'epoch'", "did you mean 'run.epochs'"),
                {"recipe": f"base: {RETINANET_TINY}\nepoch: 2\n"},
            ),
            (
                "set-key",
                [*RETINANET_TRAIN, "--synthetic", "--set", "optimizer.base_lrr=0.1"],
                ("unknown recipe key 'optimizer.base_lrr'", "did you mean 'optimizer.base_lr'"),
            ),
            (
                "model-key",
                [*RETINANET_TRAIN, "--synthetic", "--set", "model.backbone=vgg16"],
                "model.backbone 'vgg16'",
            ),
            (
                "batch-size-0",
                [*RETINANET_TRAIN, "--synthetic", "--batch-size", "0"],
                "batch_per_gpu must be a positive integer",
            ),
            (
                "epochs-0",
                [*RETINANET_TRAIN, "--synthetic", "--epochs", "0"],
                "epochs must be a positive integer",
            ),
            ("amp-none", [*RETINANET_TRAIN, "--synthetic", "--amp", "none"], "use --amp fp32"),
            (
                "checkpoint-without-resume",
                [*RETINANET_TRAIN, "--synthetic"],
                "--resume auto",
                {"files": {"results/checkpoint.pt": "ten steps of work"}},
            ),
            ("missing-data", [*RETINANET_TRAIN, "--data-dir", "{missing}"], "no_such_path"),
            (
                "resume-text",
                [*RETINANET_TRAIN, "--synthetic", "--resume", "{text}"],
                ("notes.txt", "is not a RetinaNet training checkpoint"),
            ),
            (
                "resume-foreign",
                [*RETINANET_TRAIN, "--synthetic", "--resume", "{foreign}"],
                ("resnet18_checkpoint.pt", "is not a RetinaNet training checkpoint"),
            ),
        ],
    ),  # fmt: skip
    *rows_for(
        RETINANET,
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
                ("resnet18_checkpoint.pt", "is not a RetinaNet checkpoint"),
            ),
            ("missing-data", ["--checkpoint", "{text}", "--data-dir", "{missing}"], "no_such_path"),
        ],
    ),  # fmt: skip
    *rows_for(
        RETINANET,
        "export_triton.sh",
        [("text-checkpoint", ["--checkpoint", "{text}", "--repository", "{results}/repo"], "notes.txt")],
    ),
    *rows_for(
        RETINANET,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
    *rows_for(RETINANET, "download_data.sh", [("no-data-dir", [], "give --data-dir")]),
    *rows_for(
        GPT,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *GPT_TRAIN[2:]],
                ("unknown recipe key 'run.step'", "did you mean 'run.steps'"),
                {"recipe": f"base: {GPT_TINY}\nrun:\n  step: 2\n"},
            ),
            (
                "set-key",
                [*GPT_TRAIN, "--set", "optimizer.lrr=0.1"],
                ("unknown recipe key 'optimizer.lrr'", "did you mean 'optimizer.lr'"),
            ),
            (
                "batch-size-0",
                [*GPT_TRAIN, "--batch-size", "0"],
                "run.batch_per_gpu must be a positive integer",
            ),
            ("steps-0", [*GPT_TRAIN, "--steps", "0"], "steps must be a positive integer"),
            (
                "accumulation-0",
                [*GPT_TRAIN, "--accumulation", "0"],
                "accumulation must be a positive integer",
            ),
            ("amp-none", [*GPT_TRAIN, "--amp", "none"], "use --amp fp32"),
            ("epochs", [*GPT_TRAIN, "--set", "run.epochs=2"], "counted in optimizer steps"),
            (
                "sequence-too-long",
                [*GPT_TRAIN, "--set", "data.seq_len=4096"],
                "longer than the model's 128 tokens",
            ),
            (
                "tensor-3",
                [*GPT_TRAIN, "--set", "parallel.tensor=3"],
                "parallel.tensor 3 does not divide the 1",
            ),
            (
                "checkpoint-without-resume",
                GPT_TRAIN,
                "--resume auto",
                {"files": {"results/checkpoint/checkpoint.pt": "ten steps of work"}},
            ),
            ("resume-text", [*GPT_TRAIN, "--resume", "{text}"], "not a GPT training checkpoint"),
            ("resume-foreign", [*GPT_TRAIN, "--resume", "{foreign}"], "not a GPT training checkpoint"),
            ("missing-data", [*GPT_TRAIN[:2], "--data-dir", "{missing}", *GPT_TRAIN[4:]], "does not exist"),
            ("unprepared-data", [*GPT_TRAIN[:2], "--data-dir", "{cache}", *GPT_TRAIN[4:]], "no meta.json"),
            (
                "corrupt-shard",
                GPT_TRAIN,
                "corrupt or truncated shard",
                {"files": gpt_data(_sha256(GPT_TOKENIZER))},
            ),
            ("other-tokenizer", GPT_TRAIN, "not the tokenizer the shards", {"files": gpt_data("1" * 64)}),
        ],
    ),  # fmt: skip
    *rows_for(
        GPT,
        "evaluate.sh",
        [
            (
                "text-checkpoint",
                ["--checkpoint", "{text}", "--data-dir", "{sandbox}/data"],
                "not a GPT model.pt",
                {"files": gpt_data(_sha256(GPT_TOKENIZER))},
            ),
            (
                "foreign-checkpoint",
                ["--checkpoint", "{foreign}", "--data-dir", "{sandbox}/data"],
                "not a GPT model.pt",
                {"files": gpt_data(_sha256(GPT_TOKENIZER))},
            ),
            ("missing-data", ["--checkpoint", "{text}", "--data-dir", "{missing}"], "does not exist"),
            (
                "samples-0",
                ["--checkpoint", "{text}", "--data-dir", "{missing}", "--samples", "0"],
                "--samples must be >= 1",
            ),
        ],
    ),  # fmt: skip
    *rows_for(
        GPT,
        "export_triton.sh",
        [
            (
                "text-checkpoint",
                ["--checkpoint", "{text}", "--repository", "{results}/repo"],
                "not a GPT model.pt",
            )
        ],
    ),
    *rows_for(
        GPT,
        "deploy_triton.sh",
        [("missing-repository", ["--repository", "{missing}", "--prompt", "The"], "export_triton.sh")],
    ),
    *rows_for(
        GPT,
        "download_data.sh",
        [
            ("no-data-dir", [], "--data-dir"),
            ("vocab-10", ["--data-dir", "{results}", "--vocab-size", "10"], "at least 300"),
        ],
    ),
    *rows_for(
        GPT,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
    *rows_for(
        UNET3D,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *UNET3D_TRAIN[2:], "--synthetic"],
                ("unknown recipe key 'optimizer.lrr'", "did you mean 'optimizer.lr'"),
                {"recipe": f"base: {UNET3D_TINY}\noptimizer:\n  lrr: 0.1\n"},
            ),
            (
                "set-key",
                [*UNET3D_TRAIN, "--synthetic", "--set", "run.epoch=2"],
                ("unknown recipe key 'run.epoch'", "did you mean 'run.epochs'"),
            ),
            (
                "batch-size-0",
                [*UNET3D_TRAIN, "--synthetic", "--batch-size", "0"],
                "run.batch_per_gpu must be a positive integer",
            ),
            (
                "epochs-0",
                [*UNET3D_TRAIN, "--synthetic", "--epochs", "0"],
                "epochs must be a positive integer",
            ),
            (
                "width-0",
                [*UNET3D_TRAIN, "--synthetic", "--width", "0"],
                "model.width must be a positive integer",
            ),
            (
                "patch-side",
                [*UNET3D_TRAIN, "--synthetic", "--set", "data.patch=[30,32,32]"],
                "multiple of 2**model.levels",
            ),
            ("amp-none", [*UNET3D_TRAIN, "--synthetic", "--amp", "none"], "use --amp fp32"),
            (
                "checkpoint-without-resume",
                [*UNET3D_TRAIN, "--synthetic"],
                "--resume auto",
                {"files": {"results/checkpoint.pt": "ten steps of work"}},
            ),
            ("missing-data", [*UNET3D_TRAIN, "--data-dir", "{missing}"], "no_such_path"),
            ("resume-text", [*UNET3D_TRAIN, "--synthetic", "--resume", "{text}"], "notes.txt"),
        ],
    ),  # fmt: skip
    *rows_for(
        UNET3D,
        "evaluate.sh",
        [
            ("text-checkpoint", ["--checkpoint", "{text}", *UNET3D_EVAL], "notes.txt"),
            (
                "foreign-checkpoint",
                ["--checkpoint", "{foreign}", *UNET3D_EVAL],
                ("resnet18_checkpoint.pt", "does not fit this 3D U-Net"),
            ),
        ],
    ),  # fmt: skip
    *rows_for(
        UNET3D,
        "download_data.sh",
        [
            (
                "missing-raw",
                ["prepare", "--raw-dir", "{missing}", "--data-dir", "{sandbox}/out"],
                "no_such_path",
            )
        ],
    ),
    *rows_for(
        UNET3D,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    *rows_for(
        EFFNET,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *EFFNET_TRAIN[2:], "--synthetic"],
                ("unknown recipe key 'train.mixpu'", "did you mean 'train.mixup'"),
                {"recipe": f"base: {EFFNET_TINY}\ntrain:\n  mixpu: 0.2\n"},
            ),
            (
                "set-key",
                [*EFFNET_TRAIN, "--synthetic", "--set", "model.varaint=b4"],
                ("unknown recipe key 'model.varaint'", "did you mean 'model.variant'"),
            ),
            (
                "batch-size-0",
                [*EFFNET_TRAIN, "--synthetic", "--batch-size", "0"],
                "run.batch_per_gpu must be a positive integer",
            ),
            (
                "batch-size-neg",
                [*EFFNET_TRAIN, "--synthetic", "--batch-size", "-3"],
                "run.batch_per_gpu must be a positive integer",
            ),
            (
                "epochs-0",
                [*EFFNET_TRAIN, "--synthetic", "--epochs", "0"],
                "epochs must be a positive integer",
            ),
            ("amp-none", [*EFFNET_TRAIN, "--synthetic", "--amp", "none"], "use --amp fp32"),
            (
                "unknown-variant",
                [*EFFNET_TRAIN, "--synthetic", "--set", "model.variant=b9"],
                "model.variant must be one of b0, b1, b2, b3, b4, not 'b9'",
            ),
            (
                "checkpoint-without-resume",
                [*EFFNET_TRAIN, "--synthetic"],
                "--resume auto",
                {"files": {"results/checkpoint.pt": "ten steps of work"}},
            ),
            ("missing-data", [*EFFNET_TRAIN, "--data-dir", "{missing}"], "no_such_path"),
            ("init-text", [*EFFNET_TRAIN, "--synthetic", "--init-checkpoint", "{text}"], "notes.txt"),
            (
                "init-foreign",
                [*EFFNET_TRAIN, "--synthetic", "--init-checkpoint", "{foreign}"],
                ("resnet18_checkpoint.pt", "not an EfficientNet"),
            ),
            ("resume-text", [*EFFNET_TRAIN, "--synthetic", "--resume", "{text}"], "notes.txt"),
        ],
    ),  # fmt: skip
    *rows_for(
        EFFNET,
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
                    "--device",
                    "cpu",
                ],
                ("resnet18_checkpoint.pt", "not an EfficientNet"),
            ),
        ],
    ),  # fmt: skip
    *rows_for(
        EFFNET,
        "export_triton.sh",
        [("text-checkpoint", ["--checkpoint", "{text}", "--repository", "{results}/repo"], "notes.txt")],
    ),
    *rows_for(
        EFFNET,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
        MASKRCNN,
        "train.sh",
        [
            (
                "recipe-file-key",
                ["--recipe", "{recipe}", *MASKRCNN_TRAIN[2:]],
                ("unknown recipe key 'epoch'", "did you mean 'run.epochs'"),
                {"recipe": f"base: {MASKRCNN_TINY}\nepoch: 2\n"},
            ),
            (
                "set-key",
                [*MASKRCNN_TRAIN, "--set", "optimizer.base_lrr=0.1"],
                ("unknown recipe key 'optimizer.base_lrr'", "did you mean 'optimizer.base_lr'"),
            ),
            (
                "batch-size-0",
                [*MASKRCNN_TRAIN, "--batch-size", "0"],
                "batch_per_gpu must be a positive integer",
            ),
            ("epochs-0", [*MASKRCNN_TRAIN, "--epochs", "0"], "epochs must be a positive integer"),
            (
                "steps-per-epoch-0",
                [*MASKRCNN_TRAIN, "--steps-per-epoch", "0"],
                "--steps-per-epoch must be a positive integer",
            ),
            (
                "accumulation-0",
                [*MASKRCNN_TRAIN, "--accumulation", "0"],
                "accumulation must be a positive integer",
            ),
            ("amp-none", [*MASKRCNN_TRAIN, "--amp", "none"], "use --amp fp32"),
            (
                "checkpoint-without-resume",
                MASKRCNN_TRAIN,
                "--resume auto",
                {"files": {"results/checkpoint.pt": "ten steps of work"}},
            ),
            (
                "resume-text",
                [*MASKRCNN_TRAIN, "--resume", "{text}"],
                "is not a Mask R-CNN training checkpoint",
            ),
            (
                "resume-foreign",
                [*MASKRCNN_TRAIN, "--resume", "{foreign}"],
                "not a Mask R-CNN training checkpoint",
            ),
            ("missing-data", [*MASKRCNN_TRAIN[:3], "{missing}", *MASKRCNN_TRAIN[4:]], "does not exist"),
            ("backbone-text", [*MASKRCNN_TRAIN, "--backbone", "{text}"], "backbone weights"),
            ("backbone-foreign", [*MASKRCNN_TRAIN, "--backbone", "{foreign}"], "backbone weights"),
        ],
    ),  # fmt: skip
    *rows_for(
        MASKRCNN,
        "evaluate.sh",
        [
            (
                "text-checkpoint",
                [
                    "--checkpoint",
                    "{text}",
                    "--data-dir",
                    "{coco}",
                    "--split",
                    "val",
                    "--results-dir",
                    "{results}",
                ],
                "cannot be read",
            ),
            (
                "foreign-checkpoint",
                [
                    "--checkpoint",
                    "{foreign}",
                    "--data-dir",
                    "{coco}",
                    "--split",
                    "val",
                    "--results-dir",
                    "{results}",
                ],
                "not a Mask R-CNN checkpoint",
            ),
            (
                "missing-data",
                ["--checkpoint", "{text}", "--data-dir", "{missing}", "--split", "val"],
                "does not exist",
            ),
            (
                "batch-size-0",
                ["--checkpoint", "{text}", "--data-dir", "{coco}", "--split", "val", "--batch-size", "0"],
                "--batch-size must be a positive integer",
            ),
        ],
    ),  # fmt: skip
    *rows_for(
        MASKRCNN,
        "export_triton.sh",
        [
            (
                "text-checkpoint",
                ["--checkpoint", "{text}", "--repository", "{results}/repo"],
                "cannot be read",
            ),
        ],
    ),  # fmt: skip
    *rows_for(
        MASKRCNN,
        "deploy_triton.sh",
        [
            (
                "missing-repository",
                ["--repository", "{missing}", "{coco}/val/000001.png"],
                "export_triton.sh first",
            )
        ],
    ),
    *rows_for(MASKRCNN, "download_data.sh", [("no-data-dir", [], "give --data-dir")]),
    *rows_for(
        MASKRCNN,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
        ],
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    ),  # fmt: skip
    *rows_for(
        BERT,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
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
        ],
    ),  # fmt: skip
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
    ),  # fmt: skip
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
    ),  # fmt: skip
    *rows_for(
        TF_BERT,
        "download_checkpoint.sh",
        [("unknown-name", ["pull", UNKNOWN_CHECKPOINT, "--cache-dir", "{cache}"], "unknown checkpoint")],
    ),
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
    ),  # fmt: skip
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
]


# --------------------------------------------------------------------------------------- the harness

# Tiny datasets and files the rows read, made once per session in the PyTorch venv.
FIXTURES = r"""
import sys
from pathlib import Path

import torch
import torchvision

root = Path(sys.argv[1])
for model in sys.argv[2:]:
    sys.path.insert(0, model)
(root / "notes.txt").write_text("these are notes, not weights\n")
net = torchvision.models.resnet18(num_classes=10)
torch.save({"model": net.state_dict(), "epoch": 3}, root / "resnet18_checkpoint.pt")

from maskrcnn.shapes import make_shapes_coco
make_shapes_coco(root / "coco", images=4, size=64, max_objects=2, seed=0, split="train")
make_shapes_coco(root / "coco", images=2, size=64, max_objects=2, seed=1, split="val")

from transformer.data import make_numbers
make_numbers(root / "numbers", train=200, valid=20, test=20, vocab_size=120)

from dlrm.download import write_synthetic
write_synthetic(root / "criteo", train_rows=1024, val_rows=512, seed=0)
"""


# BERT's: a WordPiece vocabulary and packed shards of real English text, the same shards with one cut
# in half, SQuAD folders (a good one, a question without answers, an answer past its context) and a
# Wikipedia extraction killed midway (text files, no completion marker).
BERT_FIXTURES = r"""
import json
import shutil
import sys
from pathlib import Path

from zoo.data.bert_prepare import main as bert_data

root = Path(sys.argv[1])
licenses = Path("/usr/share/common-licenses")
bert_data(["vocab", "--data-dir", str(root / "bert_vocab"), "--train", str(licenses), "--vocab-size", "1000"])
bert_data(["prepare", "--input", str(licenses), "--vocab", str(root / "bert_vocab" / "vocab.txt"),
           "--data-dir", str(root / "bert_data"), "--shard-size", "150", "--workers", "1"])
shutil.copytree(root / "bert_data", root / "bert_truncated")
shard = sorted((root / "bert_truncated").glob("shard_*.npz"))[1]
shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])

context = "The quick brown fox jumps over the lazy dog near the river bank."
good = [{"text": "the lazy dog", "answer_start": context.index("the lazy dog")}]
def squad(answers):
    question = {"id": "q7", "question": "What does the fox jump over?", "answers": answers}
    return {"version": "1.1", "data": [{"title": "fox", "paragraphs": [{"context": context, "qas": [question]}]}]}
for name, answers in [("squad", good), ("squad_no_answer", []),
                      ("squad_past_context", [{"text": "far", "answer_start": 200}])]:
    (root / name).mkdir()
    (root / name / "train-v1.1.json").write_text(json.dumps(squad(answers)))
    (root / name / "dev-v1.1.json").write_text(json.dumps(squad(good)))

wiki = root / "wiki_unfinished"
wiki.mkdir()
(wiki / "wiki_00.txt").write_text((licenses / "GPL-3").read_text()[:5000])
(wiki / "wiki_01.txt.tmp").write_text("half an article")
"""


def _damaged_copies(root: Path) -> None:
    """Copies of the MXNet and TensorFlow digits with one fault each (their manifest.json kept: it no
    longer matches the damaged file)."""
    import json
    import shutil

    def cut_in_half(path: Path) -> None:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    shutil.copytree(root / "mx_digits", root / "mx_truncated")
    cut_in_half(root / "mx_truncated" / "train.rec")
    shutil.copytree(root / "tf_digits", root / "tf_truncated")
    cut_in_half(sorted((root / "tf_truncated").glob("train-*-of-*"))[1])
    shutil.copytree(root / "tf_digits", root / "tf_missing_shard")
    sorted((root / "tf_missing_shard").glob("train-*-of-*"))[-1].unlink()
    shutil.copytree(root / "tf_digits", root / "tf_five_classes")
    listing = root / "tf_five_classes" / "dataset.json"
    dataset = json.loads(listing.read_text())
    dataset["classes"] = dataset["classes"][:5]
    listing.write_text(json.dumps(dataset))


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory) -> dict[str, Path]:
    """{placeholder: path} of the files and datasets rows read, made by four processes side by side."""
    root = tmp_path_factory.mktemp("bad_input_fixtures")
    torch_python = str(venv_bin(ROOT / MASKRCNN) / "python")
    models = [str(ROOT / m) for m in (MASKRCNN, TRANSFORMER, DLRM)]
    digits = {
        MX_R50: ["--digits", "--data-dir", str(root / "mx_digits")],
        TF_R50: ["--digits", "--data-dir", str(root / "tf_digits"), "--workers", "1"],
    }
    commands = [
        ([torch_python, "-c", FIXTURES, str(root), *models], model_env(ROOT / MASKRCNN)),
        ([torch_python, "-c", BERT_FIXTURES, str(root)], model_env(ROOT / BERT)),
        *[
            (["bash", str(ROOT / model / "scripts" / "download_data.sh"), *args], model_env(ROOT / model))
            for model, args in digits.items()
        ],
    ]
    makers = [
        subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        for command, env in commands
    ]
    for maker in makers:
        _, stderr = maker.communicate(timeout=300)
        assert maker.returncode == 0, f"{maker.args}: {stderr[-3000:]}"
    _damaged_copies(root)
    names = ["coco", "numbers", "criteo", "bert_data", "bert_truncated", "squad", "squad_no_answer"]
    names += ["squad_past_context", "wiki_unfinished", "mx_digits", "mx_truncated", "tf_digits"]
    names += ["tf_truncated", "tf_missing_shard", "tf_five_classes"]
    return {
        "text": root / "notes.txt",
        "foreign": root / "resnet18_checkpoint.pt",
        "bert_vocab": root / "bert_vocab" / "vocab.txt",
        **{name: root / name for name in names},
    }


def snapshot(paths) -> dict:
    """{path: (size, mtime_ns)} of every file and folder under ``paths`` (a folder's size is None)."""
    seen = {}
    for top in paths:
        top = Path(top)
        if not top.exists():
            continue
        for path in [top, *top.rglob("*")]:
            try:
                stat = path.lstat()
            except FileNotFoundError:  # removed while the folder was listed
                continue
            seen[str(path)] = (None if path.is_dir() else stat.st_size, stat.st_mtime_ns)
    return seen


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    changed: list  # paths created, changed or removed by the run
    seconds: float


def _paths(row: Row, sandbox: Path, fixtures: dict) -> dict:
    paths = {name: str(path) for name, path in fixtures.items()}
    paths.update(
        results=str(sandbox / "results"),
        cache=str(sandbox / "cache"),
        missing=str(sandbox / "no_such_path"),
        recipe=str(sandbox / "recipe.yaml"),
        sandbox=str(sandbox),
    )
    return paths


def run_row(row: Row, sandbox: Path, fixtures: dict) -> Outcome:
    """Run ``row`` in ``sandbox`` (its working directory); what it changed under the watched paths."""
    sandbox.mkdir(parents=True)
    (sandbox / "cache").mkdir()
    (sandbox / "work").mkdir()
    paths = _paths(row, sandbox, fixtures)
    if row.recipe is not None:
        Path(paths["recipe"]).write_text(row.recipe)
    for relative, text in (row.files or {}).items():
        (sandbox / relative).parent.mkdir(parents=True, exist_ok=True)
        (sandbox / relative).write_text(text)
    args = [arg.format(**paths) for arg in row.args]
    env = model_env(ROOT / row.model)
    env.update(ZOO_CACHE=paths["cache"], RESULTS_DIR=paths["results"], OMP_NUM_THREADS="1")
    env.pop("DATA_DIR", None)
    watched = [sandbox] + [fixtures[name] for name in fixtures if "{" + name + "}" in " ".join(row.args)]
    before = snapshot(watched)
    script = ROOT / row.model / "scripts" / row.script
    began = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", str(script), *args],
            cwd=sandbox / "work",
            env=env,
            capture_output=True,
            text=True,
            timeout=150,
        )
    except subprocess.TimeoutExpired as e:
        return Outcome(-1, str(e.stdout), f"timed out after {e.timeout} s", [], e.timeout)
    after = snapshot(watched)
    changed = sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))
    return Outcome(done.returncode, done.stdout, done.stderr, changed, time.monotonic() - began)


@pytest.fixture(scope="module")
def outcomes(request, fixtures, tmp_path_factory):
    """{row id: Future of its Outcome}: every selected row submitted at once, run three at a time in
    the tests' order, so that each test waits for its own row only."""
    selected = [
        item.callspec.params["row"]
        for item in request.session.items
        if getattr(item, "callspec", None) and isinstance(item.callspec.params.get("row"), Row)
    ]
    root = tmp_path_factory.mktemp("bad_input_rows")
    pool = ThreadPoolExecutor(max_workers=3)
    yield {row.id: pool.submit(run_row, row, root / row.id, fixtures) for row in selected}
    pool.shutdown(cancel_futures=True)


def test_rows_have_unique_ids():
    ids = [row.id for row in ROWS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_bad_input(row, outcomes):
    outcome = outcomes[row.id].result()
    shown = f"({outcome.seconds:.1f} s) {row.script} {' '.join(row.args)}\n--- stdout\n{outcome.stdout[-1500:]}\n--- stderr\n{outcome.stderr[-3000:]}"
    assert outcome.returncode != 0, f"exit 0\n{shown}"
    assert "Traceback" not in outcome.stdout + outcome.stderr, shown
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    for expected in (row.expect,) if isinstance(row.expect, str) else row.expect:
        assert expected in last, f"last stderr line {last!r} lacks {expected!r}\n{shown}"
    assert not outcome.changed, f"changed on failure: {outcome.changed}\n{shown}"
