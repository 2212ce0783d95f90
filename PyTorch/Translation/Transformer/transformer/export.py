"""Export the Transformer to ONNX (encoder, one decoder step with its cache) and a Triton repository.

    python -m transformer.export --checkpoint results/model.pt --repository triton_repo

ONNX files:
  encoder.onnx   src_tokens (B, S) int64 -> cross_k, cross_v (layers, B, heads, S, head_dim) fp32,
                 src_mask (B, 1, 1, S) bool
  decoder.onnx   tokens (N,) int64, cross_k, cross_v, src_mask, self_k, self_v (layers, N, heads, T,
                 head_dim) -> logp (N, vocab), self_k, self_v grown to T + 1 (T may be 0)

Triton model ``transformer_python`` (python backend): the zoo's shared ONNX model file runs the
encoder, and transformer/beam.py as its postprocess file runs beam search over the decoder step
(onnxruntime): ``src_tokens`` (B, S) int64 (ids + eos, 0-padded) -> ``tokens`` (B, T) int64, each
row the best translation, eos-padded. The client tokenizes with the tokenizer.json written beside.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.cli import entry_point
from zoo.errors import UserError

if TYPE_CHECKING:
    from transformer.model import Transformer

TRITON_MODEL = "transformer_python"
BEAM_FILE = Path(__file__).with_name("beam.py")


def export_onnx(model: Transformer, folder) -> tuple[Path, Path]:
    """Write encoder.onnx and decoder.onnx (fp32, dynamic batch, lengths and cache) into ``folder``."""
    import torch

    from transformer.model import ExportDecoderStep as DecoderStep
    from transformer.model import ExportEncoder as Encoder

    model = model.eval().float().cpu()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    src = torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]])
    with torch.no_grad():
        cross_k, cross_v, src_mask = model.encode(src)
    self_k, self_v = model.empty_cache(2)
    self_k, self_v = (
        torch.randn(*self_k.shape[:3], 2, self_k.shape[4]),
        torch.randn(*self_v.shape[:3], 2, self_v.shape[4]),
    )
    encoder_path, decoder_path = folder / "encoder.onnx", folder / "decoder.onnx"
    torch.onnx.export(
        Encoder(model).eval(),
        (src,),
        str(encoder_path),
        input_names=["src_tokens"],
        output_names=["cross_k", "cross_v", "src_mask"],
        dynamic_axes={
            "src_tokens": {0: "batch", 1: "src_len"},
            "cross_k": {1: "batch", 3: "src_len"},
            "cross_v": {1: "batch", 3: "src_len"},
            "src_mask": {0: "batch", 3: "src_len"},
        },
        opset_version=17,
        dynamo=False,
    )
    rows = {1: "rows", 3: "src_len"}
    torch.onnx.export(
        DecoderStep(model).eval(),
        (torch.tensor([1, 1]), cross_k, cross_v, src_mask, self_k, self_v),
        str(decoder_path),
        input_names=["tokens", "cross_k", "cross_v", "src_mask", "self_k", "self_v"],
        output_names=["logp", "new_self_k", "new_self_v"],
        dynamic_axes={
            "tokens": {0: "rows"},
            "cross_k": rows,
            "cross_v": rows,
            "src_mask": {0: "rows", 3: "src_len"},
            "self_k": {1: "rows", 3: "steps"},
            "self_v": {1: "rows", 3: "steps"},
            "logp": {0: "rows"},
            "new_self_k": {1: "rows", 3: "steps_out"},
            "new_self_v": {1: "rows", 3: "steps_out"},
        },
        opset_version=17,
        dynamo=False,
    )
    return encoder_path, decoder_path


def write_repository(
    model: Transformer,
    repository,
    tokenizer=None,
    *,
    beam=4,
    length_penalty=0.6,
    max_length_a=1.2,
    max_length_b=10,
    force: bool = False,
) -> Path:
    """Write ``transformer_python`` (module docstring) into ``repository``; returns its path. A repository
    that already holds it is a UserError unless ``force`` (then its folder is replaced whole)."""
    from zoo.io import atomic_write
    from zoo.triton.repository import (
        ONNX_PYTHON_MODEL,
        TensorSpec,
        model_config,
        refuse_existing_models,
        write_model,
    )

    refuse_existing_models(repository, [TRITON_MODEL], force=force)

    repo = Path(repository)
    settings = {
        "postprocess": "beam.py",
        "decoder_file": "decoder.onnx",
        "beam": beam,
        "length_penalty": length_penalty,
        "max_length_a": max_length_a,
        "max_length_b": max_length_b,
        "max_positions": model.cfg.max_positions,
        "min_value:src_tokens": 0,
        "max_value:src_tokens": model.cfg.vocab_size - 1,
    }
    with tempfile.TemporaryDirectory() as tmp:
        encoder, decoder = export_onnx(model, tmp)
        config = model_config(
            TRITON_MODEL,
            backend="python",
            max_batch_size=0,
            inputs=[TensorSpec("src_tokens", "INT64", [-1, -1])],
            outputs=[TensorSpec("tokens", "INT64", [-1, -1])],
            instance_kind="KIND_CPU",
            parameters=settings,
        )
        files = {
            "model.py": ONNX_PYTHON_MODEL,
            "model.onnx": encoder,
            "decoder.onnx": decoder,
            "beam.py": BEAM_FILE,
        }
        write_model(repo, config, files, force=force)
    if tokenizer is not None:
        with atomic_write(repo / "tokenizer.json") as tmp:
            tokenizer.save(str(tmp))
    return repo


@entry_point
def main(argv=None) -> None:

    parser = argparse.ArgumentParser(
        prog="python -m transformer.export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--checkpoint", required=True, help="model.pt or checkpoint.pt from transformer.train"
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        help="data folder whose tokenizer.json to ship (default: beside the checkpoint)",
    )
    parser.add_argument(
        "--repository", default="triton_repo", help="the Triton model repository to write into"
    )
    parser.add_argument(
        "--force", action="store_true", help=f"replace {TRITON_MODEL} if the repository holds it"
    )
    parser.add_argument("--beam", type=int, default=None, help="beam size served (default: the checkpoint's)")
    args = parser.parse_args(argv)

    from transformer.evaluate import load_model, tokenizer_for

    if args.beam is not None and args.beam < 1:
        raise UserError(f"--beam must be a positive integer, not {args.beam}")
    from zoo.triton.repository import refuse_existing_models

    refuse_existing_models(args.repository, [TRITON_MODEL], force=args.force)
    model, settings = load_model(args.checkpoint)
    tokenizer = tokenizer_for(args.data_dir, args.checkpoint)
    eval_cfg = settings["eval"]
    repo = write_repository(
        model,
        args.repository,
        tokenizer,
        beam=eval_cfg["beam"] if args.beam is None else args.beam,
        length_penalty=eval_cfg["length_penalty"],
        max_length_a=eval_cfg["max_length_a"],
        max_length_b=eval_cfg["max_length_b"],
        force=args.force,
    )
    print(f"wrote {repo / TRITON_MODEL}")


if __name__ == "__main__":
    main()
