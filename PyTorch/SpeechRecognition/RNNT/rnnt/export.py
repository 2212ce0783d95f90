"""Export the RNN-T to ONNX (encoder with its features, one prediction step, the joint network) and a
Triton model repository that decodes greedily over them.

    python -m rnnt.export --checkpoint results/model.pt --repository triton_repo

ONNX files:
  encoder.onnx   audio (B, L) fp32 16 kHz, audio_lengths (B,) int64 -> enc (B, T, joint_n_hid) (the
                 encoder output through the joint network's encoder projection), enc_lengths (B,) int64
  decoder.onnx   tokens (N, 1) int64 (blank starts), h, c (layers, N, pred_n_hid) -> g (N, joint_n_hid)
                 (through the joint's prediction projection), h, c
  joint.onnx     f, g (N, joint_n_hid) -> logits (N, vocab + 1)

Triton model ``rnnt_python`` (python backend): the zoo's shared ONNX model file runs the encoder, and
rnnt/greedy.py as its postprocess file decodes over the other two (onnxruntime): ``audio`` (B, L) fp32
and ``audio_lengths`` (B,) int64 -> ``tokens`` (B, N) int64, -1-padded. The client turns tokens into
text with the tokenizer.model written beside (rnnt.deploy).
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile
from typing import TYPE_CHECKING

from zoo.cli import entry_point

if TYPE_CHECKING:
    from rnnt.model import RNNT

TRITON_MODEL = "rnnt_python"
GREEDY_FILE = pathlib.Path(__file__).with_name("greedy.py")


def export_onnx(model: RNNT, features: dict, folder) -> dict:
    """Write encoder.onnx, decoder.onnx and joint.onnx (fp32, dynamic batch and lengths) into ``folder``."""
    import torch

    from rnnt.features import LogMelFeatures
    from rnnt.inference import Encoder, Joint, PredictionStep

    model = model.eval().float().cpu()
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    exportable = LogMelFeatures(features, exportable=True).eval()
    audio, lengths = torch.randn(2, 8000), torch.tensor([8000, 6000])
    layers, hidden = model.pred_rnn.num_layers, model.pred_rnn.hidden_size
    joint_hidden = model.joint_enc.out_features
    paths = {name: folder / f"{name}.onnx" for name in ("encoder", "decoder", "joint")}
    common = {"opset_version": 17, "dynamo": False}
    torch.onnx.export(
        Encoder(model, exportable).eval(),
        (audio, lengths),
        str(paths["encoder"]),
        input_names=["audio", "audio_lengths"],
        output_names=["enc", "enc_lengths"],
        dynamic_axes={
            "audio": {0: "batch", 1: "samples"},
            "audio_lengths": {0: "batch"},
            "enc": {0: "batch", 1: "frames"},
            "enc_lengths": {0: "batch"},
        },
        **common,
    )
    state = torch.zeros(layers, 2, hidden)
    torch.onnx.export(
        PredictionStep(model).eval(),
        (torch.tensor([[model.blank], [3]]), state, state),
        str(paths["decoder"]),
        input_names=["tokens", "h", "c"],
        output_names=["g", "h_out", "c_out"],
        dynamic_axes={
            "tokens": {0: "rows"},
            "h": {1: "rows"},
            "c": {1: "rows"},
            "g": {0: "rows"},
            "h_out": {1: "rows"},
            "c_out": {1: "rows"},
        },
        **common,
    )
    torch.onnx.export(
        Joint(model).eval(),
        (torch.randn(2, joint_hidden), torch.randn(2, joint_hidden)),
        str(paths["joint"]),
        input_names=["f", "g"],
        output_names=["logits"],
        dynamic_axes={"f": {0: "rows"}, "g": {0: "rows"}, "logits": {0: "rows"}},
        **common,
    )
    return paths


def write_repository(recognizer, repository, *, force: bool = False) -> pathlib.Path:
    """Write ``rnnt_python`` (module docstring) and tokenizer.model into ``repository``; returns its path.
    A repository that already holds ``rnnt_python`` is a UserError unless ``force`` (then it is replaced whole)."""
    from zoo.io import atomic_write
    from zoo.triton.repository import (
        ONNX_PYTHON_MODEL,
        TensorSpec,
        model_config,
        refuse_existing_models,
        write_model,
    )

    refuse_existing_models(repository, [TRITON_MODEL], force=force)

    model, settings = recognizer.model, recognizer.settings
    repo = pathlib.Path(repository)
    parameters = {
        "postprocess": "greedy.py",
        "decoder_file": "decoder.onnx",
        "joint_file": "joint.onnx",
        "blank": model.blank,
        "pred_layers": model.pred_rnn.num_layers,
        "pred_hidden": model.pred_rnn.hidden_size,
        "max_symbols_per_step": settings["eval"]["max_symbols_per_step"],
        "max_symbols": settings["eval"]["max_symbols"],
    }
    with tempfile.TemporaryDirectory() as tmp:
        paths = export_onnx(model, settings["features"], tmp)
        config = model_config(
            TRITON_MODEL,
            backend="python",
            max_batch_size=0,
            inputs=[TensorSpec("audio", "FP32", [-1, -1]), TensorSpec("audio_lengths", "INT64", [-1])],
            outputs=[TensorSpec("tokens", "INT64", [-1, -1])],
            instance_kind="KIND_CPU",
            parameters=parameters,
        )
        files = {
            "model.py": ONNX_PYTHON_MODEL,
            "model.onnx": paths["encoder"],
            "decoder.onnx": paths["decoder"],
            "joint.onnx": paths["joint"],
            "greedy.py": GREEDY_FILE,
        }
        write_model(repo, config, files, force=force)
    with atomic_write(repo / "tokenizer.model") as tmp:
        pathlib.Path(tmp).write_bytes(settings["tokenizer"])
    return repo


@entry_point
def main(argv=None) -> pathlib.Path:

    parser = argparse.ArgumentParser(
        prog="scripts/export_triton.sh",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--checkpoint", required=True, help="model.pt written by train.py")
    parser.add_argument(
        "--repository", default="triton_repo", help="the Triton model repository to write into"
    )
    parser.add_argument(
        "--force", action="store_true", help=f"replace {TRITON_MODEL} if the repository holds it"
    )
    args = parser.parse_args(argv)

    from zoo.triton.repository import refuse_existing_models

    from rnnt.inference import load_recognizer

    refuse_existing_models(args.repository, [TRITON_MODEL], force=args.force)
    recognizer = load_recognizer(args.checkpoint)
    repo = write_repository(recognizer, args.repository, force=args.force)
    print(f"wrote {repo / TRITON_MODEL}")
    return repo


if __name__ == "__main__":
    main()
