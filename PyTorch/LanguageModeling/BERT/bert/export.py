"""Export the SQuAD inference model (``bert.inference.inference_model``, weights in ``--amp``, fp32 by
default) to ONNX and TorchScript, and write a Triton model repository:

<repo>/bert_squad_onnx/      onnxruntime backend (Triton's GPU/CPU onnxruntime), model.onnx
<repo>/bert_squad_libtorch/  pytorch backend (libtorch), model.pt: the same model traced as TorchScript
<repo>/bert_squad_python/    python backend: the zoo's shared ONNX model file (zoo.triton.repository.ONNX_PYTHON_MODEL)
                             over the same ONNX file; it answers a request whose token ids lie outside
                             the vocabulary (or type ids, mask values outside theirs) with an error of
                             its own, and the requests batched with it as usual
Inputs input_ids, token_type_ids, attention_mask: INT64 [batch, sequence] (libtorch: INPUT__0..2);
outputs start_logits, end_logits: FP32 [batch, sequence] (libtorch: OUTPUT__0..1), whatever the
precision inside; each config.pbtxt records it as its ``precision`` parameter. onnxruntime has no
bf16 kernels for BERT's matmuls: ``--amp bf16`` writes the libtorch model only.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.cli import AMP_CHOICES, entry_point

if TYPE_CHECKING:
    import torch

    from bert.model import BertForQuestionAnswering

INPUT_NAMES = ["input_ids", "token_type_ids", "attention_mask"]
OUTPUT_NAMES = ["start_logits", "end_logits"]
LIBTORCH_INPUTS = ["INPUT__0", "INPUT__1", "INPUT__2"]  # the pytorch backend's positional names
LIBTORCH_OUTPUTS = ["OUTPUT__0", "OUTPUT__1"]


def example_inputs(seq: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two windows of ``seq`` tokens: ids, type ids, attention mask (int64)."""
    import torch

    return (
        torch.ones(2, seq, dtype=torch.long),
        torch.zeros(2, seq, dtype=torch.long),
        torch.ones(2, seq, dtype=torch.long),
    )


def export_onnx(model: BertForQuestionAnswering, path: str | Path, *, seq: int = 32) -> Path:
    """``model`` (the inference model, on the CPU) as ONNX with dynamic batch and sequence axes, checked
    by onnx.checker."""
    import onnx
    import torch

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
        example_inputs(seq),
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


def export_torchscript(model: BertForQuestionAnswering, path: str | Path, *, seq: int = 32) -> Path:
    """``model`` (the inference model, on the CPU) traced as TorchScript; batch and sequence stay
    dynamic (the model reads them from its inputs' shapes)."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        traced = torch.jit.trace(model, example_inputs(seq), check_trace=False)
    tmp = path.with_name(path.name + ".tmp.pt")
    traced.save(str(tmp))
    tmp.replace(path)
    return path


def write_repository(
    repo: str | Path,
    onnx_path: str | Path | None,
    *,
    vocab_size: int,
    type_vocab_size: int = 2,
    max_batch_size: int = 16,
    instance_kind: str = "KIND_GPU",
    torchscript_path: str | Path | None = None,
    amp: str = "fp32",
    force: bool = False,
) -> list[Path]:
    """The Triton models over the exported files: onnxruntime and python backends over ``onnx_path``,
    libtorch over ``torchscript_path`` (each written when its file is given).

    ``vocab_size`` and ``type_vocab_size`` (the model's) bound the ids the python model accepts;
    ``amp`` (the weights' precision) is recorded in each config.pbtxt. A model ``repo`` already holds
    is a UserError unless ``force`` (then its folder is replaced whole).
    """
    from zoo.triton.repository import (
        ONNX_PYTHON_MODEL,
        TensorSpec,
        model_config,
        refuse_existing_models,
        write_model,
    )

    names = triton_models(onnx=onnx_path is not None, libtorch=torchscript_path is not None)
    refuse_existing_models(repo, names, force=force)

    batching = {
        "preferred_batch_size": [max(1, max_batch_size // 2), max_batch_size],
        "max_queue_delay_microseconds": 200,
    }

    def config(name, input_names, output_names, *, parameters, **kwargs):
        return model_config(
            name,
            max_batch_size=max_batch_size,
            inputs=[TensorSpec(n, "INT64", [-1]) for n in input_names],
            outputs=[TensorSpec(n, "FP32", [-1]) for n in output_names],
            dynamic_batching=batching,
            parameters={**parameters, "precision": amp},
            **kwargs,
        )

    written = []
    if onnx_path is not None:
        value_ranges = {
            "min_value:input_ids": 0, "max_value:input_ids": vocab_size - 1,
            "min_value:token_type_ids": 0, "max_value:token_type_ids": type_vocab_size - 1,
            "min_value:attention_mask": 0, "max_value:attention_mask": 1,
        }  # fmt: skip
        onnx_model = config(
            "bert_squad_onnx", INPUT_NAMES, OUTPUT_NAMES, backend="onnxruntime", instance_kind=instance_kind,
            parameters={},
        )  # fmt: skip
        python_model = config(
            "bert_squad_python", INPUT_NAMES, OUTPUT_NAMES, backend="python", instance_kind="KIND_CPU",
            parameters=value_ranges,
        )  # fmt: skip
        written.append(write_model(repo, onnx_model, {"model.onnx": Path(onnx_path)}, force=force))
        python_files = {"model.py": ONNX_PYTHON_MODEL, "model.onnx": Path(onnx_path)}
        written.append(write_model(repo, python_model, python_files, force=force))
    if torchscript_path is not None:
        libtorch_model = config(
            "bert_squad_libtorch", LIBTORCH_INPUTS, LIBTORCH_OUTPUTS, platform="pytorch_libtorch",
            instance_kind=instance_kind, parameters={},
        )  # fmt: skip
        written.append(write_model(repo, libtorch_model, {"model.pt": Path(torchscript_path)}, force=force))
    return written


def triton_models(*, onnx: bool = True, libtorch: bool = True) -> list[str]:
    """The names write_repository gives the models it writes."""
    return [
        *(["bert_squad_onnx", "bert_squad_python"] if onnx else []),
        *(["bert_squad_libtorch"] if libtorch else []),
    ]


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bert.export", description=__doc__.splitlines()[0])
    p.add_argument(
        "--checkpoint",
        required=True,
        help="fine-tuned SQuAD weights (squad_model.pt, or HF/Google + --model)",
    )
    p.add_argument("--model", help="architecture when the checkpoint carries none")
    p.add_argument(
        "--vocab",
        help="vocab.txt, copied into the repository (default: the one squad_model.pt was fine-tuned with; its "
        "size sets the embedding size when the checkpoint carries no config)",
    )
    p.add_argument("--model-repository", default="results/triton_repository")
    p.add_argument("--max-batch-size", type=int, default=16)
    p.add_argument("--instance-kind", choices=["KIND_GPU", "KIND_CPU"], default="KIND_GPU")
    p.add_argument(
        "--amp", choices=AMP_CHOICES, default="fp32",
        help="precision of the exported weights (inputs int64, outputs fp32 either way); bf16: libtorch only",
    )  # fmt: skip
    p.add_argument("--force", action="store_true", help="replace the models if the repository holds them")
    args = p.parse_args(argv)

    from zoo.triton.repository import refuse_existing_models

    refuse_existing_models(args.model_repository, triton_models(onnx=args.amp != "bf16"), force=args.force)
    if args.vocab is None:  # a fine-tuned squad_model.pt names the vocabulary it was trained with
        from bert.finetune_squad import read_fine_tuned

        saved = read_fine_tuned(args.checkpoint) if Path(args.checkpoint).is_file() else None
        named = saved.get("vocab") if isinstance(saved, dict) else None
        args.vocab = named if named and Path(named).is_file() else None
    vocab_size = None
    if args.vocab:
        from zoo.data.wordpiece import load_tokenizer

        vocab_size = load_tokenizer(args.vocab).get_vocab_size()

    from bert.inference import inference_model, load_squad_model

    model = load_squad_model(args.checkpoint, args.model, vocab_size)
    served = inference_model(model, amp=args.amp, device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = export_onnx(served, Path(tmp) / "model.onnx") if args.amp != "bf16" else None
        written = write_repository(
            args.model_repository,
            onnx_path,
            vocab_size=served.config.vocab_size,
            type_vocab_size=served.config.type_vocab_size,
            max_batch_size=args.max_batch_size,
            instance_kind=args.instance_kind,
            torchscript_path=export_torchscript(served, Path(tmp) / "model.pt"),
            amp=args.amp,
            force=args.force,
        )
        if args.vocab:
            shutil.copy(args.vocab, Path(args.model_repository) / "vocab.txt")
    for path in written:
        print(f"wrote {path} ({args.amp} weights)")


if __name__ == "__main__":
    main()
