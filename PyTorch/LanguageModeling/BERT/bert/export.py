"""Export the SQuAD model to ONNX (dynamic batch and sequence axes) and write a Triton model repository:

<repo>/bert_squad_onnx/    onnxruntime backend (Triton's GPU/CPU onnxruntime)
<repo>/bert_squad_python/  python backend: the zoo's shared ONNX model file (zoo.triton.ONNX_PYTHON_MODEL)
                           over the same ONNX file; it answers a request whose token ids lie outside
                           the vocabulary (or type ids, mask values outside theirs) with an error of
                           its own, and the requests batched with it as usual
Inputs input_ids, token_type_ids, attention_mask: INT64 [batch, sequence]; outputs start_logits,
end_logits: FP32 [batch, sequence].
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import torch

from bert.model import BertConfig, BertForQuestionAnswering, bert_config

INPUT_NAMES = ["input_ids", "token_type_ids", "attention_mask"]
OUTPUT_NAMES = ["start_logits", "end_logits"]


def export_onnx(model: BertForQuestionAnswering, path: str | Path, *, seq: int = 32) -> Path:
    """ONNX file with dynamic batch and sequence axes, checked by onnx.checker."""
    import onnx

    model = model.eval().float().cpu()
    example = (
        torch.ones(2, seq, dtype=torch.long),
        torch.zeros(2, seq, dtype=torch.long),
        torch.ones(2, seq, dtype=torch.long),
    )
    batch, length = (
        torch.export.Dim("batch", max=4096),
        torch.export.Dim("sequence", max=model.config.max_position_embeddings),
    )
    shapes = {name: {0: batch, 1: length} for name in INPUT_NAMES}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.onnx")
    program = torch.onnx.export(
        model,
        example,
        input_names=INPUT_NAMES,
        output_names=OUTPUT_NAMES,
        dynamic_shapes=shapes,
        dynamo=True,
        external_data=False,
    )
    program.save(str(tmp))
    onnx.checker.check_model(str(tmp))
    tmp.replace(path)
    return path


def write_repository(
    repo: str | Path,
    onnx_path: str | Path,
    *,
    vocab_size: int,
    type_vocab_size: int = 2,
    max_batch_size: int = 16,
    instance_kind: str = "KIND_GPU",
) -> list[Path]:
    """The two Triton models (onnxruntime and python backends) over one ONNX file.

    ``vocab_size`` and ``type_vocab_size`` (the model's) bound the ids the python model accepts.
    """
    from zoo.triton import ONNX_PYTHON_MODEL, TensorSpec, model_config, write_model

    inputs = [TensorSpec(name, "INT64", [-1]) for name in INPUT_NAMES]
    outputs = [TensorSpec(name, "FP32", [-1]) for name in OUTPUT_NAMES]
    batching = {
        "preferred_batch_size": [max(1, max_batch_size // 2), max_batch_size],
        "max_queue_delay_microseconds": 200,
    }
    onnx_model = model_config(
        "bert_squad_onnx", backend="onnxruntime", max_batch_size=max_batch_size, inputs=inputs, outputs=outputs,
        instance_kind=instance_kind, dynamic_batching=batching,
    )  # fmt: skip
    value_ranges = {
        "min_value:input_ids": 0, "max_value:input_ids": vocab_size - 1,
        "min_value:token_type_ids": 0, "max_value:token_type_ids": type_vocab_size - 1,
        "min_value:attention_mask": 0, "max_value:attention_mask": 1,
    }  # fmt: skip
    python_model = model_config(
        "bert_squad_python", backend="python", max_batch_size=max_batch_size, inputs=inputs, outputs=outputs,
        instance_kind="KIND_CPU", dynamic_batching=batching, parameters=value_ranges,
    )  # fmt: skip
    return [
        write_model(repo, onnx_model, {"model.onnx": Path(onnx_path)}),
        write_model(repo, python_model, {"model.py": ONNX_PYTHON_MODEL, "model.onnx": Path(onnx_path)}),
    ]


def load_squad_model(
    checkpoint: str | Path, model_name: str | None, vocab_size: int | None
) -> BertForQuestionAnswering:
    """A fine-tuned SQuAD model from our squad_model.pt (carries its config), or any layout + --model."""
    from zoo.checkpoints import CheckpointError

    from bert import convert

    checkpoint = Path(checkpoint)
    if not checkpoint.exists():
        raise SystemExit(f"checkpoint {checkpoint} does not exist")
    config = None
    try:
        saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
        if isinstance(saved, dict) and isinstance(saved.get("config"), dict):
            config = BertConfig.from_dict(saved["config"])
    except Exception:
        saved = None
    if config is None:
        if not (model_name and vocab_size):
            raise SystemExit(f"{checkpoint} carries no config: give --model and --vocab")
        config = bert_config(model_name, vocab_size=vocab_size)
    model = BertForQuestionAnswering(config)
    try:
        convert.load_into(model, checkpoint, strict_heads=True)
    except CheckpointError as e:
        raise SystemExit(f"{checkpoint}: {e}") from None
    return model.eval()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bert.export", description=__doc__.splitlines()[0])
    p.add_argument(
        "--checkpoint",
        required=True,
        help="fine-tuned SQuAD weights (squad_model.pt, or HF/Google + --model)",
    )
    p.add_argument("--model", help="architecture when the checkpoint carries none")
    p.add_argument(
        "--vocab", help="vocab.txt (its size sets the embedding size when the checkpoint carries no config)"
    )
    p.add_argument("--model-repository", default="results/triton_repository")
    p.add_argument("--max-batch-size", type=int, default=16)
    p.add_argument("--instance-kind", choices=["KIND_GPU", "KIND_CPU"], default="KIND_GPU")
    args = p.parse_args(argv)
    vocab_size = None
    if args.vocab:
        from zoo.wordpiece import load_tokenizer

        vocab_size = load_tokenizer(args.vocab).get_vocab_size()
    model = load_squad_model(args.checkpoint, args.model, vocab_size)
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = export_onnx(model, Path(tmp) / "model.onnx")
        written = write_repository(
            args.model_repository,
            onnx_path,
            vocab_size=model.config.vocab_size,
            type_vocab_size=model.config.type_vocab_size,
            max_batch_size=args.max_batch_size,
            instance_kind=args.instance_kind,
        )
        if args.vocab:
            shutil.copy(args.vocab, Path(args.model_repository) / "vocab.txt")
    for path in written:
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
