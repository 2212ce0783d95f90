"""Export a trained GPT: the Hugging Face format (safetensors + config.json + tokenizer), and a Triton model
repository that generates text with the KV cache (python backend).

    python -m gpt.export --checkpoint results/model.pt --hf-dir gpt_hf              # LlamaForCausalLM / GPT2LMHeadModel
    python -m gpt.export --checkpoint results/model.pt --repository triton_repo     # Triton model gpt_python

The llama shape becomes ``LlamaForCausalLM`` (the same rotate-half RoPE, RMSNorm, SwiGLU and grouped-query
attention: no permutation of weights); the gpt3 shape ``GPT2LMHeadModel`` (q, k and v fused into c_attn,
Conv1D weights transposed, exact GeLU). Logits equal ours (tests/test_export.py).

Triton model ``gpt_python`` (python backend: the zoo's ONNX model file, zoo.triton.onnx_model, with
gpt/serving.py as its postprocess): ``prompt_ids`` INT64 [-1], ``max_new_tokens`` INT32 [1],
``temperature`` FP32 [1], ``top_k`` INT32 [1], ``seed`` INT64 [1] -> ``token_ids`` INT64 [-1] (prompt and
continuation). model.onnx runs the prompt (its keys and values out), decoder.onnx one token over the
cache; gpt.serving.choose_next, the sampler generate.sh uses, picks each token. The client tokenizes with
the tokenizer.json written at the repository's top.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import warnings
from typing import TYPE_CHECKING

from zoo.cli import entry_point
from zoo.errors import UserError

from gpt.data import TOKENIZER

if TYPE_CHECKING:
    from gpt.model import GPT

TRITON_MODEL = "gpt_python"
SERVING_FILE = pathlib.Path(__file__).with_name("serving.py")


def hf_config(model: GPT):
    """The transformers config of the same network."""
    cfg = model.cfg
    if cfg.shape == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(
            vocab_size=cfg.vocab_size,
            hidden_size=cfg.dim,
            intermediate_size=cfg.ffn_dim,
            num_hidden_layers=cfg.layers,
            num_attention_heads=cfg.heads,
            num_key_value_heads=cfg.kv_heads,
            head_dim=cfg.head_dim,
            max_position_embeddings=cfg.max_seq_len,
            rms_norm_eps=cfg.norm_eps,
            rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
            tie_word_embeddings=cfg.tie_embeddings,
            hidden_act="silu",
            attention_bias=False,
            mlp_bias=False,
        )
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.max_seq_len,
        n_embd=cfg.dim,
        n_layer=cfg.layers,
        n_head=cfg.heads,
        n_inner=cfg.ffn_dim,
        activation_function="gelu",
        layer_norm_epsilon=cfg.norm_eps,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=cfg.tie_embeddings,
    )


def hf_state_dict(model: GPT) -> dict:
    """Our weights under the transformers model's names and layouts."""
    import torch

    ours = {name: tensor.detach().float().cpu() for name, tensor in model.state_dict().items()}
    out = {}
    if model.cfg.shape == "llama":
        out["model.embed_tokens.weight"] = ours["embedding.weight"]
        out["model.norm.weight"] = ours["norm.weight"]
        out["lm_head.weight"] = (
            ours["embedding.weight"] if model.cfg.tie_embeddings else ours["output.weight"]
        )
        names = {"attention.wq": "self_attn.q_proj", "attention.wk": "self_attn.k_proj",
                 "attention.wv": "self_attn.v_proj", "attention.wo": "self_attn.o_proj",
                 "mlp.w1": "mlp.gate_proj", "mlp.w3": "mlp.up_proj", "mlp.w2": "mlp.down_proj",
                 "attention_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm"}  # fmt: skip
        for i in range(model.cfg.layers):
            for ours_name, hf_name in names.items():
                out[f"model.layers.{i}.{hf_name}.weight"] = ours[f"blocks.{i}.{ours_name}.weight"]
        return out
    out["transformer.wte.weight"] = ours["embedding.weight"]
    out["transformer.wpe.weight"] = ours["positions.weight"]
    out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = ours["norm.weight"], ours["norm.bias"]
    out["lm_head.weight"] = ours["embedding.weight"] if model.cfg.tie_embeddings else ours["output.weight"]
    for i in range(model.cfg.layers):
        block, hf = f"blocks.{i}.", f"transformer.h.{i}."
        for part in ("weight", "bias"):
            out[f"{hf}ln_1.{part}"] = ours[f"{block}attention_norm.{part}"]
            out[f"{hf}ln_2.{part}"] = ours[f"{block}mlp_norm.{part}"]
        qkv = [ours[f"{block}attention.w{x}.weight"] for x in "qkv"]
        out[f"{hf}attn.c_attn.weight"] = torch.cat(qkv, dim=0).t().contiguous()  # Conv1D: (in, out)
        out[f"{hf}attn.c_attn.bias"] = torch.cat([ours[f"{block}attention.w{x}.bias"] for x in "qkv"])
        for ours_name, hf_name in (
            ("attention.wo", "attn.c_proj"),
            ("mlp.w1", "mlp.c_fc"),
            ("mlp.w2", "mlp.c_proj"),
        ):
            out[f"{hf}{hf_name}.weight"] = ours[f"{block}{ours_name}.weight"].t().contiguous()
            out[f"{hf}{hf_name}.bias"] = ours[f"{block}{ours_name}.bias"]
    return out


def to_hf(model: GPT):
    """The transformers model (LlamaForCausalLM or GPT2LMHeadModel) holding our weights, in eval mode."""
    from transformers import GPT2LMHeadModel, LlamaForCausalLM

    config = hf_config(model)
    hf_class = LlamaForCausalLM if model.cfg.shape == "llama" else GPT2LMHeadModel
    hf_model = hf_class(config)
    missing, unexpected = hf_model.load_state_dict(hf_state_dict(model), strict=False)
    missing = [
        name
        for name in missing
        if not name.endswith(("attn.bias", "attn.masked_bias", "rotary_emb.inv_freq"))
    ]
    if model.cfg.tie_embeddings:
        missing = [name for name in missing if name != "lm_head.weight"]
    if missing or unexpected:
        raise UserError(
            f"the Hugging Face model does not take our weights: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    return hf_model.eval()


def export_hf(model: GPT, folder, tokenizer_file=None) -> pathlib.Path:
    """Write the transformers model (safetensors, config.json) and, given one, its tokenizer into ``folder``."""
    folder = pathlib.Path(folder)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    to_hf(model).save_pretrained(tmp, safe_serialization=True)
    if tokenizer_file is not None:
        from transformers import PreTrainedTokenizerFast

        from gpt.data import EOS

        PreTrainedTokenizerFast(
            tokenizer_file=str(tokenizer_file), eos_token=EOS, bos_token=EOS
        ).save_pretrained(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def export_onnx(model: GPT, folder) -> tuple[pathlib.Path, pathlib.Path]:
    """Write model.onnx (Prefill) and decoder.onnx (DecodeStep), fp32, into ``folder``."""
    import torch

    from gpt.inference import DecodeStep, Prefill

    model = model.eval().float().cpu()
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = model.cfg
    prompt = torch.tensor([3, 1, 2], dtype=torch.int64)
    settings = (torch.tensor([4], dtype=torch.int32), torch.tensor([0.0]), torch.tensor([0], dtype=torch.int32),
                torch.tensor([0], dtype=torch.int64))  # fmt: skip
    past = torch.randn(cfg.layers, 1, cfg.kv_heads, 3, cfg.head_dim)
    prefill_path, step_path = folder / "model.onnx", folder / "decoder.onnx"
    cache_axes = {3: "positions"}
    with torch.no_grad(), warnings.catch_warnings():
        # The TorchScript-based exporter (dynamo=False) is the one that takes these dynamic cache shapes.
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        torch.onnx.export(
            Prefill(model),
            (prompt, *settings),
            str(prefill_path),
            input_names=["prompt_ids", "max_new_tokens", "temperature", "top_k", "seed"],
            output_names=[
                "logits",
                "keys",
                "values",
                "prompt",
                "new_tokens",
                "temp",
                "k_best",
                "sampling_seed",
            ],
            dynamic_axes={
                "prompt_ids": {0: "length"},
                "keys": cache_axes,
                "values": cache_axes,
                "prompt": {0: "length"},
            },
            opset_version=17,
            dynamo=False,
        )
        torch.onnx.export(
            DecodeStep(model),
            (torch.tensor([[5]]), past, past.clone()),
            str(step_path),
            input_names=["tokens", "past_keys", "past_values"],
            output_names=["logits", "keys", "values"],
            dynamic_axes={
                "past_keys": {3: "past"},
                "past_values": {3: "past"},
                "keys": cache_axes,
                "values": cache_axes,
            },
            opset_version=17,
            dynamo=False,
        )
    return prefill_path, step_path


def write_repository(
    model: GPT, repository, tokenizer_file, eos_id: int, *, force: bool = False
) -> pathlib.Path:
    """Write ``gpt_python`` (module docstring) into ``repository``; returns its folder. A repository that
    already holds it is a UserError unless ``force`` (then its folder is replaced whole)."""
    import tempfile

    from zoo.io import atomic_write
    from zoo.triton.repository import (
        ONNX_PYTHON_MODEL,
        TensorSpec,
        model_config,
        refuse_existing_models,
        write_model,
    )

    refuse_existing_models(repository, [TRITON_MODEL], force=force)

    config = model_config(
        TRITON_MODEL,
        backend="python",
        max_batch_size=0,
        inputs=[
            TensorSpec("prompt_ids", "INT64", [-1]),
            TensorSpec("max_new_tokens", "INT32", [1]),
            TensorSpec("temperature", "FP32", [1]),
            TensorSpec("top_k", "INT32", [1]),
            TensorSpec("seed", "INT64", [1]),
        ],
        outputs=[TensorSpec("token_ids", "INT64", [-1])],
        instance_kind="KIND_CPU",
        parameters={
            "postprocess": "serving.py",
            "decoder_file": "decoder.onnx",
            "max_seq_len": model.cfg.max_seq_len,
            "eos_id": eos_id,
            "min_value:prompt_ids": 0,
            "max_value:prompt_ids": model.cfg.vocab_size - 1,
        },
    )
    with tempfile.TemporaryDirectory() as tmp:
        prefill, step = export_onnx(model, tmp)
        files = {
            "model.py": ONNX_PYTHON_MODEL,
            "model.onnx": prefill,
            "decoder.onnx": step,
            "serving.py": SERVING_FILE,
        }
        folder = write_model(repository, config, files, force=force)
    with atomic_write(pathlib.Path(repository) / TOKENIZER) as tmp:
        shutil.copyfile(tokenizer_file, tmp)
    return folder


def refuse_existing_outputs(repository, hf_dir, *, force: bool) -> None:
    """A UserError, before any work, when the export would replace ``gpt_python`` in ``repository`` or a
    non-empty ``hf_dir`` and ``force`` is not set."""
    from zoo.triton.repository import refuse_existing_models

    if repository:
        refuse_existing_models(repository, [TRITON_MODEL], force=force)
    if hf_dir and not force and pathlib.Path(hf_dir).is_dir() and any(pathlib.Path(hf_dir).iterdir()):
        raise UserError(f"{hf_dir} already holds files: pass --force to replace it")


@entry_point
def main(argv=None) -> None:

    parser = argparse.ArgumentParser(
        prog="python -m gpt.export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", required=True, help="model.pt of gpt.train")
    parser.add_argument("--tokenizer", default=None, help="tokenizer.json (default: beside the checkpoint)")
    parser.add_argument("--hf-dir", default=None, help="write the Hugging Face model here")
    parser.add_argument("--repository", default=None, help="write the Triton model repository here")
    parser.add_argument(
        "--force", action="store_true", help="replace gpt_python in the repository, or the --hf-dir folder"
    )
    args = parser.parse_args(argv)

    from gpt.generate import tokenizer_beside

    if not args.hf_dir and not args.repository:
        args.repository = "triton_repo"
    refuse_existing_outputs(args.repository, args.hf_dir, force=args.force)

    from gpt.inference import load_model

    model, _ = load_model(args.checkpoint)
    tokenizer_beside(args.checkpoint, args.tokenizer)  # checked before anything is written
    tokenizer_file = (
        pathlib.Path(args.tokenizer) if args.tokenizer else pathlib.Path(args.checkpoint).parent / TOKENIZER
    )
    if args.hf_dir:
        print(f"wrote {export_hf(model, args.hf_dir, tokenizer_file)} ({type(to_hf(model)).__name__})")
    if args.repository:
        from gpt.data import EOS, load_tokenizer

        eos_id = load_tokenizer(tokenizer_file).token_to_id(EOS)
        folder = write_repository(model, args.repository, tokenizer_file, eos_id, force=args.force)
        print(f"wrote {folder}")


if __name__ == "__main__":
    main()
