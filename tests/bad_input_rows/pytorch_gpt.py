"""Bad-input rows of GPT (see tests/test_bad_input.py)."""

from __future__ import annotations

from zoo_tree import ROOT

from bad_input_rows.row import UNKNOWN_CHECKPOINT, Row, repository_holds, rows_for

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


ROWS: list[Row] = [
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
    ),  # fmt: skip,
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
    ),  # fmt: skip,
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
    *rows_for(GPT, "export_triton.sh", [repository_holds("gpt_python", ["--checkpoint", "{text}"])]),
]
