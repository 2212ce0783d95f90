"""Load and write BERT weights in the layouts users hold.

Every layout is brought to Google's original TensorFlow variable names (our Keras model keeps their
shapes), then assigned:

| layout | example name | read from |
| --- | --- | --- |
| Google (TF1 `bert_model.ckpt`) | `bert/encoder/layer_0/attention/self/query/kernel` | checkpoint prefix, Google's zip, .npz |
| the PyTorch BERT of this zoo | `bert.layers.0.qkv.weight` (q, k, v concatenated) | .npz written from its state dict |
| Hugging Face | `bert.encoder.layer.0.attention.self.query.weight` | .npz, .safetensors (with `safetensors`) |
| ours (training runs) | tf.train.Checkpoint of the Keras model | run directory, `checkpoints/ckpt-N` |

PyTorch and Hugging Face Linear weights are [out, in] (transposed into Keras kernels); Google's
`cls/seq_relationship/output_weights` and `cls/squad/output_weights` are [2, hidden] (transposed
too). Optimizer slots (adam_m, adam_v, global_step, ...) are skipped. ``export_google_npz`` writes
the model under Google's names: the PyTorch BERT's ``bert.convert`` reads that file as it is.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import numpy as np
from zoo.errors import UserError, one_line

_SKIP = re.compile(r"(adam_m|adam_v|global_step|bad_steps|good_steps|loss_scale|_power|Momentum|LAMB)")
# heads that one task's model has and another's lacks (pretraining -> SQuAD and back)
HEAD_PREFIXES = ("cls/", "bert/pooler/")

_LAYER = {  # Google name inside bert/encoder/layer_N/ -> (our sub-layer attribute, weight attribute)
    "attention/self/query": "query",
    "attention/self/key": "key",
    "attention/self/value": "value",
    "attention/output/dense": "attention_output",
    "attention/output/LayerNorm": "attention_norm",
    "intermediate/dense": "intermediate",
    "output/dense": "output_dense",
    "output/LayerNorm": "output_norm",
}


def google_variables(model) -> dict[str, tuple[object, bool]]:
    """{Google variable name: (Keras variable, transposed)} for a BertPretrainer or BertQuestionAnswering."""
    bert = model.bert
    out = {
        "bert/embeddings/word_embeddings": (bert.word_embeddings, False),
        "bert/embeddings/position_embeddings": (bert.position_embeddings, False),
        "bert/embeddings/token_type_embeddings": (bert.token_type_embeddings, False),
    }
    _dense_or_norm(out, "bert/embeddings/LayerNorm", bert.embedding_norm)
    for i, layer in enumerate(bert.layers):
        for google, attribute in _LAYER.items():
            _dense_or_norm(out, f"bert/encoder/layer_{i}/{google}", getattr(layer, attribute))
    if bert.pooler is not None:
        _dense_or_norm(out, "bert/pooler/dense", bert.pooler)
    if hasattr(model, "mlm_dense"):
        _dense_or_norm(out, "cls/predictions/transform/dense", model.mlm_dense)
        _dense_or_norm(out, "cls/predictions/transform/LayerNorm", model.mlm_norm)
        out["cls/predictions/output_bias"] = (model.mlm_bias, False)
        if model.nsp:
            out["cls/seq_relationship/output_weights"] = (model.nsp_dense.kernel, True)
            out["cls/seq_relationship/output_bias"] = (model.nsp_dense.bias, False)
    if hasattr(model, "qa"):
        out["cls/squad/output_weights"] = (model.qa.kernel, True)
        out["cls/squad/output_bias"] = (model.qa.bias, False)
    return out


def _dense_or_norm(out: dict, prefix: str, layer) -> None:
    if hasattr(layer, "gamma"):
        out[f"{prefix}/gamma"], out[f"{prefix}/beta"] = (layer.gamma, False), (layer.beta, False)
    else:
        out[f"{prefix}/kernel"], out[f"{prefix}/bias"] = (layer.kernel, False), (layer.bias, False)


def load_google(model, values: dict[str, np.ndarray], *, strict_heads: bool = False) -> dict[str, list]:
    """Assign Google-named arrays to the model; encoder names must all be there with the right shapes
    (heads may differ between tasks). Returns {"missing": [...], "unexpected": [...]} (heads only)."""
    targets = google_variables(model)
    values = {k: v for k, v in values.items() if not _SKIP.search(k)}
    missing = [k for k in targets if k not in values]
    unexpected = [k for k in values if k not in targets]
    bad = [k for k in missing + unexpected if strict_heads or not k.startswith(HEAD_PREFIXES)]
    if bad:
        raise UserError(
            f"checkpoint does not fit the model: missing {[k for k in missing if k in bad][:3]}, "
            f"unexpected {[k for k in unexpected if k in bad][:3]}"
        )
    for name, (variable, transposed) in targets.items():
        if name not in values:
            continue
        array = np.asarray(values[name])
        array = array.T if transposed else array
        if tuple(array.shape) != tuple(variable.shape):
            raise UserError(
                f"checkpoint {name} has shape {tuple(array.shape)}, the model {tuple(variable.shape)} "
                "(another model size or vocabulary?)"
            )
        variable.assign(array.astype(np.float32))
    return {"missing": missing, "unexpected": unexpected}


def model_to_google(model) -> dict[str, np.ndarray]:
    """The model's weights under Google's names (float32 arrays)."""
    out = {}
    for name, (variable, transposed) in google_variables(model).items():
        array = np.asarray(variable.numpy(), np.float32)
        out[name] = array.T if transposed else array
    return out


def export_google_npz(model, path) -> Path:
    """Write the weights as .npz under Google's names (written then renamed)."""
    from zoo.io import atomic_write

    path = Path(path)
    with atomic_write(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **model_to_google(model))
    return path


# --- other layouts -> Google names ------------------------------------------------------------

_TORCH_LAYER = {  # the PyTorch BERT's per-layer names -> Google's
    "attn_out": "attention/output/dense",
    "attn_norm": "attention/output/LayerNorm",
    "ffn_in": "intermediate/dense",
    "ffn_out": "output/dense",
    "ffn_norm": "output/LayerNorm",
}
_TORCH_TOP = {
    "bert.embeddings.norm": "bert/embeddings/LayerNorm",
    "bert.pooler": "bert/pooler/dense",
    "mlm_dense": "cls/predictions/transform/dense",
    "mlm_norm": "cls/predictions/transform/LayerNorm",
}
_HF_LAYER = {
    "attention.self.query": "attention/self/query",
    "attention.self.key": "attention/self/key",
    "attention.self.value": "attention/self/value",
    "attention.output.dense": "attention/output/dense",
    "attention.output.LayerNorm": "attention/output/LayerNorm",
    "intermediate.dense": "intermediate/dense",
    "output.dense": "output/dense",
    "output.LayerNorm": "output/LayerNorm",
}
_HF_TOP = {
    "bert.embeddings.LayerNorm": "bert/embeddings/LayerNorm",
    "bert.pooler.dense": "bert/pooler/dense",
    "cls.predictions.transform.dense": "cls/predictions/transform/dense",
    "cls.predictions.transform.LayerNorm": "cls/predictions/transform/LayerNorm",
}
_EMBEDDINGS = {
    "word": "word_embeddings",
    "position": "position_embeddings",
    "token_type": "token_type_embeddings",
}
_HEADS = {  # [out, in] head matrices that Google also stores [out, in]
    "nsp": "cls/seq_relationship/output",
    "cls.seq_relationship": "cls/seq_relationship/output",
    "qa": "cls/squad/output",
    "qa_outputs": "cls/squad/output",
}


def detect_layout(names) -> str:
    """'google', 'torch' (the zoo's PyTorch BERT), 'hf' (Hugging Face) from the parameter names."""
    names = list(names)
    if any("/" in n for n in names):
        return "google"
    if any(n.startswith(("bert.layers.", "bert.embeddings.word.")) for n in names):
        return "torch"
    if any(n.startswith(("bert.encoder.", "cls.")) or ".LayerNorm." in n for n in names):
        return "hf"
    raise UserError(f"not a BERT checkpoint: first names {names[:3]}")


def to_google(state: dict) -> dict[str, np.ndarray]:
    """Any supported layout -> Google's names and shapes."""
    state = {k.replace("module.", "").replace("_orig_mod.", ""): np.asarray(v) for k, v in state.items()}
    layout = detect_layout(state)
    if layout == "google":
        return state
    out = {}
    for key, value in state.items():
        module, _, kind = key.rpartition(".")
        if key.endswith("position_ids") or key == "cls.predictions.decoder.weight":
            continue  # a buffer; the decoder is tied to the word embeddings
        if key in ("mlm_bias", "cls.predictions.bias", "cls.predictions.decoder.bias"):
            out["cls/predictions/output_bias"] = value
            continue
        if module in _HEADS:
            out[f"{_HEADS[module]}_{'weights' if kind == 'weight' else 'bias'}"] = value
            continue
        kind = {"weight": "kernel", "bias": "bias", "gamma": "gamma", "beta": "beta"}[kind]
        google = _google_module(layout, module)
        if google is None:
            raise UserError(f"unknown BERT parameter {key} ({layout} layout)")
        if google.startswith("bert/embeddings/") and google.endswith("_embeddings"):
            out[google] = value
            continue
        if google.endswith("LayerNorm"):
            kind = {"kernel": "gamma", "bias": "beta"}.get(kind, kind)
        if google.endswith("/qkv"):  # the PyTorch BERT's fused projection: [3H, H] = query, key, value
            for part, chunk in zip(("query", "key", "value"), np.split(value, 3), strict=True):
                base = google[: -len("qkv")] + f"attention/self/{part}"
                out[f"{base}/{kind}"] = chunk.T if kind == "kernel" else chunk
            continue
        out[f"{google}/{kind}"] = value.T if kind == "kernel" else value
    return out


def _google_module(layout: str, module: str) -> str | None:
    if layout == "torch":
        m = re.match(r"bert\.layers\.(\d+)\.(\w+)$", module)
        if m:
            index, name = m.groups()
            return f"bert/encoder/layer_{index}/" + ("qkv" if name == "qkv" else _TORCH_LAYER.get(name, "?"))
        m = re.match(r"bert\.embeddings\.(word|position|token_type)$", module)
        if m:
            return f"bert/embeddings/{_EMBEDDINGS[m.group(1)]}"
        return _TORCH_TOP.get(module)
    if not module.startswith(("bert.", "cls.")):
        module = "bert." + module  # a bare Hugging Face BertModel
    m = re.match(r"bert\.encoder\.layer\.(\d+)\.(.+)$", module)
    if m and m.group(2) in _HF_LAYER:
        return f"bert/encoder/layer_{m.group(1)}/{_HF_LAYER[m.group(2)]}"
    m = re.match(r"bert\.embeddings\.(word|position|token_type)_embeddings$", module)
    if m:
        return f"bert/embeddings/{_EMBEDDINGS[m.group(1)]}"
    return _HF_TOP.get(module)


# --- reading files ---------------------------------------------------------------------------


def weights_source(path) -> tuple[str, Path]:
    """(kind, path) of a weights file :func:`read_weights` takes: ``prefix`` (a Google checkpoint prefix,
    also of a zip, which is unpacked beside it), ``npz`` or ``safetensors``. A one-line error for anything
    else, without TensorFlow: entry points call it before importing it."""
    path = Path(path)
    if path.suffix == ".zip":
        path = unpack_google_zip(path)
    prefix = path.with_suffix("") if path.suffix == ".index" else path
    if Path(str(prefix) + ".index").is_file():
        return "prefix", prefix
    if not path.is_file():
        raise UserError(f"checkpoint {path} does not exist")
    if path.suffix in (".npz", ".safetensors"):
        return path.suffix[1:], path
    raise UserError(f"{path}: not a checkpoint prefix, Google zip, .npz or .safetensors")


def read_weights(path) -> dict[str, np.ndarray]:
    """Google-named arrays from a Google checkpoint prefix or zip, or an .npz / .safetensors of any
    supported layout. A one-line error for anything else."""
    kind, path = weights_source(path)
    if kind == "prefix":
        prefix = path
        import tensorflow as tf
        from zoo.tf import checkpoint_data_problem

        try:
            reader = tf.train.load_checkpoint(str(prefix))
        except (tf.errors.OpError, ValueError) as e:
            raise UserError(f"cannot read checkpoint {prefix}: {one_line(e)}") from None
        problem = checkpoint_data_problem(prefix)
        if problem:
            raise UserError(f"checkpoint {prefix} is cut short or damaged: {problem}")
        try:
            state = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
        except (IndexError, tf.errors.OpError) as e:  # IndexError: TensorFlow's OUT_OF_RANGE
            raise UserError(f"checkpoint {prefix} is cut short or damaged ({one_line(e)})") from None
        if not any(name.startswith("bert/") for name in state):
            raise UserError(
                f"{prefix} is not a Google BERT checkpoint (a training run's? pass its run directory)"
            )
        return to_google(state)
    if kind == "npz":
        try:
            with np.load(path) as data:
                return to_google({k: data[k] for k in data.files})
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            raise UserError(f"{path} is not a readable .npz: {e}") from None
    try:
        from safetensors.numpy import load_file
    except ImportError:
        raise UserError(f"{path} needs the safetensors package (pip install safetensors)") from None
    return to_google(load_file(str(path)))


def unpack_google_zip(path) -> Path:
    """Google's ``NAME.zip`` extracted beside it (zoo.checkpoints.unpack_bert_tf_zip); its checkpoint prefix."""
    from zoo.checkpoints import CheckpointError
    from zoo.data.bert import unpack_bert_tf_zip

    try:
        return unpack_bert_tf_zip(path)
    except CheckpointError as e:
        raise UserError(f"{e}") from None


def read_google_config(checkpoint) -> dict | None:
    """The bert_config.json beside a Google checkpoint (or inside its unpacked zip), if there is one."""
    path = Path(checkpoint)
    folder = unpack_google_zip(path).parent if path.suffix == ".zip" else path.parent
    found = sorted(folder.rglob("bert_config.json")) if folder.is_dir() else []
    if not found:
        return None
    try:
        config = json.loads(found[0].read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{found[0]} is not a readable JSON file ({one_line(e)})") from None
    if not isinstance(config, dict):
        raise UserError(f"{found[0]} is not a BERT configuration (a JSON object)")
    return config


# The name zoo.tf.save_training_checkpoint gives this model's checkpoints (pretraining and SQuAD runs alike;
# their state's ``task`` says which), and how an error names them.
CHECKPOINT_OWNER = "TensorFlow BERT"
CHECKPOINT_WHAT = "a TensorFlow BERT checkpoint"


def find_run_checkpoint(path, flag: str = "--init-checkpoint", *, state_only: bool = False) -> dict | None:
    """The state of a training run's checkpoint (zoo.tf.save_training_checkpoint: task, config, step, ...)
    at ``path`` (the run directory, its checkpoint/ folder, latest.json or one step-N folder), with
    ``folder``; None when ``path`` is none of these (then it is a weights file). ``state_only``: read
    its state.json alone, without TensorFlow (its variables unread: a checkpoint cut short passes)."""
    from zoo.checkpoint_folder import CHECKPOINT_NAME, LATEST, STATE, read_state
    from zoo.tf import load_training_checkpoint

    path = Path(path)
    markers = (path / CHECKPOINT_NAME / LATEST, path / LATEST, path / STATE)
    if not any(marker.is_file() for marker in markers) and not (
        path.name in (LATEST, STATE) and path.is_file()
    ):
        return None
    read = read_state if state_only else load_training_checkpoint
    return read(path, name=CHECKPOINT_OWNER, what=CHECKPOINT_WHAT, flag=flag)


def check_start_weights(path, flag: str = "--init-checkpoint") -> None:
    """What :func:`load_weights` can refuse without TensorFlow, before an entry point imports it: a run's
    checkpoint by its state.json, any other file by its kind (:func:`weights_source`)."""
    if find_run_checkpoint(path, flag, state_only=True) is None:
        weights_source(path)


def named_weights(model) -> dict:
    """{Google name: variable}: what training checkpoints hold the weights under (``weights``), so that
    they do not depend on how Keras tracks nested layers."""
    return {name: variable for name, (variable, _) in google_variables(model).items()}


def restore_run(model, found: dict, flag: str = "--init-checkpoint") -> None:
    """The model's weights from a training run's checkpoint of the same task (``found``, from
    find_run_checkpoint); every weight must be there."""
    from zoo.tf import load_training_checkpoint

    load_training_checkpoint(
        found["folder"], {"weights": named_weights(model)}, name=CHECKPOINT_OWNER, what=CHECKPOINT_WHAT,
        flag=flag, partial=True,
    )  # fmt: skip


def load_weights(model, source, *, strict_heads: bool = False) -> dict:
    """Weights into ``model`` from a training run (same task) or any file ``read_weights`` takes.

    A run of another task (pretraining -> SQuAD) goes through Google's names, so heads may differ.
    """
    found = find_run_checkpoint(source)
    if found is not None:
        if found["task"] == getattr(model, "task", None):
            restore_run(model, found)
            return {"missing": [], "unexpected": []}
        return load_google(model, _google_from_run(found), strict_heads=strict_heads)
    return load_google(model, read_weights(source), strict_heads=strict_heads)


def _google_from_run(found: dict) -> dict[str, np.ndarray]:
    """A run's weights under Google's names: rebuild its model, restore, read back."""
    from bert_tf.model import BertConfig, build_pretrainer, build_question_answering

    config = BertConfig.from_dict(found["config"])
    if found["task"] == "squad":
        model = build_question_answering(config)
    else:
        model = build_pretrainer(config, nsp=bool(found.get("nsp", False)))
    restore_run(model, found)
    return model_to_google(model)
