"""Load BERT weights from the layouts users already have.

Three layouts are understood and detected from the parameter names:

* ours (`bert.layers.0.qkv.weight`, ...), also inside a training checkpoint's "model" entry;
* Hugging Face `BertForPreTraining` / `BertForQuestionAnswering` / `BertModel`
  (`bert.encoder.layer.0.attention.self.query.weight`, ..., older files with LayerNorm `gamma`/`beta`);
* Google's original TensorFlow checkpoint (`bert/encoder/layer_0/attention/self/query/kernel`, ...).

Google -> Hugging Face names (then Hugging Face -> ours below):

| Google (TF)                                   | Hugging Face                                   | note        |
|-----------------------------------------------|------------------------------------------------|-------------|
| bert/embeddings/word_embeddings               | bert.embeddings.word_embeddings.weight         |             |
| bert/embeddings/{position,token_type}_embeddings | bert.embeddings.{...}_embeddings.weight     |             |
| .../LayerNorm/gamma, .../LayerNorm/beta       | .../LayerNorm.weight, .../LayerNorm.bias       |             |
| bert/encoder/layer_N/...                      | bert.encoder.layer.N....                       |             |
| .../kernel                                    | ....weight                                     | transposed  |
| cls/predictions/output_bias                   | cls.predictions.bias                           |             |
| cls/seq_relationship/output_weights, output_bias | cls.seq_relationship.weight, .bias          | not transposed |
| cls/squad/output_weights, output_bias (run_squad) | qa_outputs.weight, qa_outputs.bias         | not transposed |
| */adam_m, */adam_v, global_step, ...          | (dropped: optimizer state)                     |             |

Hugging Face -> ours: query/key/value are concatenated into one `qkv` projection; the MLM
decoder weight is the word embedding matrix (tied), so only its bias is kept.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch
from torch import nn
from zoo.checkpoints import CheckpointError
from zoo.cli import entry_point
from zoo.errors import one_line

# ours -> Hugging Face, per layer (suffix after bert.layers.N. / bert.encoder.layer.N.)
_LAYER_NAMES = {
    "attn_out": "attention.output.dense",
    "attn_norm": "attention.output.LayerNorm",
    "ffn_in": "intermediate.dense",
    "ffn_out": "output.dense",
    "ffn_norm": "output.LayerNorm",
}
# ours -> Hugging Face, outside the layers (module prefixes; .weight/.bias kept)
_TOP_NAMES = {
    "bert.embeddings.word": "bert.embeddings.word_embeddings",
    "bert.embeddings.position": "bert.embeddings.position_embeddings",
    "bert.embeddings.token_type": "bert.embeddings.token_type_embeddings",
    "bert.embeddings.norm": "bert.embeddings.LayerNorm",
    "bert.pooler": "bert.pooler.dense",
    "mlm_dense": "cls.predictions.transform.dense",
    "mlm_norm": "cls.predictions.transform.LayerNorm",
    "nsp": "cls.seq_relationship",
    "qa": "qa_outputs",
}
# heads that one task's model has and another's does not (pretraining -> SQuAD and back)
HEAD_PREFIXES = ("mlm_", "nsp.", "bert.pooler.", "qa.")
_TF_SKIP = re.compile(r"(adam_m|adam_v|global_step|bad_steps|good_steps|loss_scale|_power|Momentum|LAMB)")


def detect_layout(state: dict) -> str:
    """'ours', 'hf' or 'tf' from the parameter names."""
    names = list(state)
    if any("/" in n for n in names):
        return "tf"
    if any(
        n.startswith(("bert.encoder.", "cls.", "qa_outputs.", "encoder.")) or ".LayerNorm." in n
        for n in names
    ):
        return "hf"
    if any(n.startswith(("bert.layers.", "bert.embeddings.word")) for n in names):
        return "ours"
    raise CheckpointError(f"not a BERT state dict: first names {names[:3]}")


def tf_to_hf(variables: dict) -> dict[str, torch.Tensor]:
    """Google TF variable names -> Hugging Face names (kernels transposed), optimizer slots dropped."""
    out = {}
    for name, value in variables.items():
        if _TF_SKIP.search(name):
            continue
        array = np.asarray(value)
        parts = name.split("/")
        if parts[-1] == "kernel":
            array = array.T
        key = ".".join(parts)
        key = re.sub(r"layer_(\d+)", r"layer.\1", key)
        key = re.sub(r"\.kernel$|\.gamma$", ".weight", key)
        key = re.sub(r"\.beta$", ".bias", key)
        key = re.sub(r"_embeddings$", "_embeddings.weight", key)
        key = {
            "cls.predictions.output_bias": "cls.predictions.bias",
            "cls.seq_relationship.output_weights": "cls.seq_relationship.weight",
            "cls.seq_relationship.output_bias": "cls.seq_relationship.bias",
            "cls.squad.output_weights": "qa_outputs.weight",
            "cls.squad.output_bias": "qa_outputs.bias",
        }.get(key, key)
        out[key] = torch.from_numpy(np.ascontiguousarray(array))
    return out


def hf_to_ours(state: dict) -> dict[str, torch.Tensor]:
    """Hugging Face names -> ours (q/k/v concatenated, tied decoder weight dropped)."""
    state = {_strip(k).replace(".gamma", ".weight").replace(".beta", ".bias"): v for k, v in state.items()}
    if not any(k.startswith("bert.") for k in state):  # a bare BertModel
        state = {
            ("bert." + k if not k.startswith(("cls.", "qa_outputs.")) else k): v for k, v in state.items()
        }
    top = {hf: ours for ours, hf in _TOP_NAMES.items()}
    layer = {hf: ours for ours, hf in _LAYER_NAMES.items()}
    out, qkv = {}, {}
    for key, value in state.items():
        if key.endswith("position_ids") or key == "cls.predictions.decoder.weight":
            continue  # buffer / tied to the word embeddings
        if key == "cls.predictions.decoder.bias" or key == "cls.predictions.bias":
            out["mlm_bias"] = value
            continue
        m = re.match(r"bert\.encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$", key)
        if m:
            index, module, kind = m.groups()
            qkv_part = re.match(r"attention\.self\.(query|key|value)$", module)
            if qkv_part:
                qkv.setdefault((index, kind), {})[qkv_part.group(1)] = value
            elif module in layer:
                out[f"bert.layers.{index}.{layer[module]}.{kind}"] = value
            else:
                raise CheckpointError(f"unknown Hugging Face BERT parameter {key}")
            continue
        module, _, kind = key.rpartition(".")
        if module not in top:
            raise CheckpointError(f"unknown Hugging Face BERT parameter {key}")
        out[f"{top[module]}.{kind}"] = value
    for (index, kind), parts in qkv.items():
        if set(parts) != {"query", "key", "value"}:
            raise CheckpointError(f"layer {index} has only {sorted(parts)} of query/key/value {kind}")
        out[f"bert.layers.{index}.qkv.{kind}"] = torch.cat([parts["query"], parts["key"], parts["value"]])
    return out


def ours_to_hf(state: dict) -> dict[str, torch.Tensor]:
    """Ours -> Hugging Face names, loadable by transformers' BertFor* models."""
    out = {}
    for key, value in state.items():
        m = re.match(r"bert\.layers\.(\d+)\.(\w+)\.(weight|bias)$", key)
        if m:
            index, module, kind = m.groups()
            prefix = f"bert.encoder.layer.{index}"
            if module == "qkv":
                for name, part in zip(("query", "key", "value"), value.chunk(3), strict=True):
                    out[f"{prefix}.attention.self.{name}.{kind}"] = part
            else:
                out[f"{prefix}.{_LAYER_NAMES[module]}.{kind}"] = value
        elif key == "mlm_bias":
            out["cls.predictions.bias"] = value
            out["cls.predictions.decoder.bias"] = value
        else:
            module, _, kind = key.rpartition(".")
            out[f"{_TOP_NAMES[module]}.{kind}"] = value
    if "bert.embeddings.word_embeddings.weight" in out and "cls.predictions.bias" in out:
        out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"]
    return out


def to_ours(state: dict) -> dict[str, torch.Tensor]:
    """Any supported layout -> our parameter names."""
    state = {_strip(k): v for k, v in state.items()}
    layout = detect_layout(state)
    if layout == "tf":
        return hf_to_ours(tf_to_hf(state))
    if layout == "hf":
        return hf_to_ours(state)
    return {k: torch.as_tensor(v) for k, v in state.items()}


def _strip(key: str) -> str:
    for prefix in ("module.", "_orig_mod."):
        key = key.replace(prefix, "")
    return key


def read_state_dict(path: str | Path) -> dict:
    """A state dict from a file: .safetensors, torch (.bin/.pt/.pth, ours or Hugging Face), .npz of
    TF variables, a TensorFlow checkpoint prefix, or Google's BERT .zip (the last two need tensorflow)."""
    path = Path(path)
    if path.suffix == ".zip":
        from zoo.data.bert import unpack_bert_tf_zip

        path = unpack_bert_tf_zip(path)
    if path.suffix == ".index" or Path(str(path) + ".index").exists():
        return _read_tf_checkpoint(str(path.with_suffix("")) if path.suffix == ".index" else str(path))
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    if path.suffix == ".npz":
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {type(e).__name__}: {one_line(e)}") from e
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path} holds a {type(state).__name__}, not a state dict")
    return state


def _read_tf_checkpoint(prefix: str) -> dict:
    try:
        import tensorflow as tf
    except ImportError as e:
        raise CheckpointError(
            f"{prefix} is a TensorFlow checkpoint: install tensorflow, or convert it to .npz "
            "(python -m bert.convert --help)"
        ) from e
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def load_into(model: nn.Module, source: str | Path | dict, *, strict_heads: bool = False) -> dict[str, list]:
    """Load weights of any supported layout into `model` (ours).

    Task heads may differ (a pretraining checkpoint into the SQuAD model leaves `qa` freshly
    initialised and ignores the MLM/NSP heads); anything else missing or misshapen is an error.
    Returns {"missing": [...], "unexpected": [...]} (head parameters only).
    """
    state = read_state_dict(source) if not isinstance(source, dict) else source
    state = to_ours(state)
    found = check_fits(model, state, strict_heads=strict_heads)
    own = model.state_dict()
    model.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)
    return found


def check_fits(model: nn.Module, state: dict, *, strict_heads: bool = False) -> dict[str, list]:
    """CheckpointError unless ``state`` (our names) fits ``model`` (which may live on the meta device:
    only names and shapes are read); returns the head parameters missing from / unexpected in it."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    bad_missing = [k for k in missing if strict_heads or not k.startswith(HEAD_PREFIXES)]
    bad_unexpected = [k for k in unexpected if strict_heads or not k.startswith(HEAD_PREFIXES)]
    if bad_missing or bad_unexpected:
        raise CheckpointError(
            f"checkpoint does not fit the model: missing {bad_missing[:4]}, unexpected {bad_unexpected[:4]}"
        )
    for key, value in state.items():
        if key in own and own[key].shape != tuple(value.shape):
            raise CheckpointError(
                f"checkpoint {key} has shape {tuple(value.shape)}, model has {tuple(own[key].shape)} "
                "(another model size or vocabulary than the recipe's?)"
            )
    return {"missing": missing, "unexpected": unexpected}


@entry_point
def main(argv=None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m bert.convert",
        description="Convert a BERT checkpoint (Google TF, Hugging Face, ours) to our layout (.pt) "
        "or to Hugging Face names (--to hf).",
    )
    parser.add_argument("source", help="checkpoint file or TF checkpoint prefix (bert_model.ckpt)")
    parser.add_argument("output", help="output .pt file")
    parser.add_argument("--to", choices=["ours", "hf"], default="ours")
    args = parser.parse_args(argv)
    try:
        state = to_ours(read_state_dict(args.source))
    except CheckpointError as e:
        raise SystemExit(str(e)) from None
    if args.to == "hf":
        state = ours_to_hf(state)
    from zoo.io import atomic_write

    with atomic_write(args.output) as tmp:
        torch.save({k: v.contiguous() for k, v in state.items()}, tmp)
    print(f"wrote {len(state)} tensors to {args.output}")


if __name__ == "__main__":
    main()
