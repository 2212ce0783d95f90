"""Export a fine-tuned SQuAD model for serving: a SavedModel, an ONNX model (tf2onnx), and a Triton model
repository over them.

    python -m bert_tf.export --checkpoint results/squad --vocab vocab.txt --model-repository results/triton

The repository holds three models over the same weights (each config.pbtxt checked against Triton's
ModelConfig) and the vocabulary (``vocab.txt``, read by the deploy client):
  bert_tf_savedmodel  platform tensorflow_savedmodel (Triton's TensorFlow backend)
  bert_tf_onnx        backend onnxruntime
  bert_tf_python      backend python: the zoo's shared ONNX model file (zoo.triton.repository.ONNX_PYTHON_MODEL)
                      over the same ONNX file, for servers with only the python backend (the
                      nvidia-pytriton wheel's); it rejects ids outside the vocabulary per request
Inputs input_ids, token_type_ids, attention_mask: INT64 [batch, sequence] (the PyTorch BERT's
serving interface); outputs start_logits, end_logits: FP32 [batch, sequence].
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from zoo.cli import entry_point
from zoo.errors import UserError

INPUT_NAMES = ("input_ids", "token_type_ids", "attention_mask")
OUTPUT_NAMES = ("start_logits", "end_logits")
ONNX_OPSET = 17


def serving_function(model):
    """The tf.function every export traces: int64 [batch, sequence] inputs, float32 span logits."""
    import tensorflow as tf

    signature = [tf.TensorSpec([None, None], tf.int64, name=name) for name in INPUT_NAMES]

    @tf.function(input_signature=signature)
    def serve(input_ids, token_type_ids, attention_mask):
        out = model(
            {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask},
            training=False,
        )
        return {name: tf.cast(out[name], tf.float32) for name in OUTPUT_NAMES}

    return serve


def export_savedmodel(model, out_dir) -> Path:
    """A SavedModel whose ``serving_default`` signature is ``serving_function``; written then renamed."""
    import tensorflow as tf

    out_dir = Path(out_dir)
    tmp = Path(tempfile.mkdtemp(prefix=".savedmodel-", dir=out_dir.parent))
    try:
        module = tf.Module()
        module.model = model
        module.serve = serving_function(model)
        tf.saved_model.save(module, str(tmp), signatures={"serving_default": module.serve})
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def export_onnx(model, path) -> Path:
    """ONNX (dynamic batch and sequence) through tf2onnx from the serving function, tensors named as served."""
    try:
        import tf2onnx
    except ImportError as e:
        raise UserError(f"ONNX export needs tf2onnx (pip install -r requirements.txt): {e}") from None
    import onnx

    path = Path(path)
    serve = serving_function(model)
    proto, _ = tf2onnx.convert.from_function(serve, input_signature=serve.input_signature, opset=ONNX_OPSET)
    # tf2onnx names graph inputs "input_ids:0" and outputs after TF tensors: give them the served names
    renames = {i.name: i.name.split(":")[0] for i in proto.graph.input}
    structured = serve.get_concrete_function().structured_outputs
    flat_names = [t.name for t in serve.get_concrete_function().outputs]
    for name in OUTPUT_NAMES:
        tensor_name = structured[name].name
        renames[proto.graph.output[flat_names.index(tensor_name)].name] = name
    for node in proto.graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]
    for value in (*proto.graph.input, *proto.graph.output):
        value.name = renames.get(value.name, value.name)
    onnx.checker.check_model(proto)
    tmp = path.with_name(path.name + ".tmp")
    onnx.save(proto, str(tmp))
    os.replace(tmp, path)
    return path


def write_repository(
    repo,
    savedmodel: Path | None,
    onnx_path: Path,
    vocab: Path,
    *,
    vocab_size: int,
    type_vocab_size: int = 2,
    max_batch_size: int = 16,
    instance_kind: str = "KIND_GPU",
    force: bool = False,
) -> list[Path]:
    """The three Triton models (module docstring) and the vocabulary; returns the model directories. A
    model ``repo`` already holds is a UserError unless ``force`` (then its folder, SavedModel and all, is
    replaced whole)."""
    from zoo.triton.repository import (
        ONNX_PYTHON_MODEL,
        TensorSpec,
        model_config,
        refuse_existing_models,
        write_model,
    )

    refuse_existing_models(repo, triton_models(savedmodel is not None), force=force)

    inputs = [TensorSpec(name, "INT64", [-1]) for name in INPUT_NAMES]
    outputs = [TensorSpec(name, "FP32", [-1]) for name in OUTPUT_NAMES]
    batching = {
        "preferred_batch_size": [max(1, max_batch_size // 2), max_batch_size],
        "max_queue_delay_microseconds": 200,
    }
    common = dict(max_batch_size=max_batch_size, inputs=inputs, outputs=outputs, dynamic_batching=batching)
    value_ranges = {
        "min_value:input_ids": 0, "max_value:input_ids": vocab_size - 1,
        "min_value:token_type_ids": 0, "max_value:token_type_ids": type_vocab_size - 1,
        "min_value:attention_mask": 0, "max_value:attention_mask": 1,
    }  # fmt: skip
    models = []
    if savedmodel is not None:
        config = model_config(
            "bert_tf_savedmodel", platform="tensorflow_savedmodel", instance_kind=instance_kind, **common
        )
        models.append((config, {"model.savedmodel": savedmodel}))
    models.append(
        (
            model_config("bert_tf_onnx", backend="onnxruntime", instance_kind=instance_kind, **common),
            {"model.onnx": onnx_path},
        )
    )
    python = model_config(
        "bert_tf_python", backend="python", instance_kind="KIND_CPU", parameters=value_ranges, **common
    )
    models.append((python, {"model.py": ONNX_PYTHON_MODEL, "model.onnx": onnx_path}))
    written = [write_model(repo, config, files, force=force) for config, files in models]
    tmp = Path(repo) / "vocab.txt.tmp"
    shutil.copyfile(vocab, tmp)
    os.replace(tmp, Path(repo) / "vocab.txt")
    return written


def triton_models(savedmodel: bool = True) -> list[str]:
    """The names of the models write_repository writes."""
    return [*(["bert_tf_savedmodel"] if savedmodel else []), "bert_tf_onnx", "bert_tf_python"]


def load_squad_model(checkpoint, vocab_size: int, model_name: str = "bert-large"):
    """A fine-tuned SQuAD model: a fine-tuning run directory, its squad_model.npz, or Google / PyTorch /
    Hugging Face SQuAD weights (the span head must be there)."""
    from bert_tf.checkpoint import check_start_weights, load_weights
    from bert_tf.finetune_squad import model_config

    if not Path(checkpoint).exists() and not Path(str(checkpoint) + ".index").exists():
        raise UserError(f"checkpoint {checkpoint} does not exist")
    check_start_weights(checkpoint)  # another file refused before TensorFlow is imported
    from bert_tf.model import build_question_answering

    config = model_config({"model": model_name}, vocab_size, str(checkpoint))
    model = build_question_answering(config)
    report = load_weights(model, checkpoint)
    if report["missing"]:
        raise UserError(f"{checkpoint} has no SQuAD span head ({report['missing'][0]}): fine-tune it first")
    return model


@entry_point
def main(argv=None) -> list[Path]:
    p = argparse.ArgumentParser(
        prog="export_triton.sh",
        description="Export a fine-tuned SQuAD checkpoint as SavedModel + ONNX into a Triton model repository.",
    )
    p.add_argument("--checkpoint", required=True, help="fine-tuning run directory or SQuAD weights")
    p.add_argument("--vocab", required=True, help="vocab.txt of the model (copied into the repository)")
    p.add_argument("--model", default="bert-large", help="size of a weights file without its config")
    p.add_argument("--model-repository", default="model_repository", help="output Triton model repository")
    p.add_argument("--max-batch-size", type=int, default=16)
    p.add_argument("--instance-kind", default="KIND_GPU", choices=["KIND_GPU", "KIND_CPU"])
    p.add_argument("--no-savedmodel", action="store_true", help="ONNX and python models only")
    p.add_argument("--force", action="store_true", help="replace the models if the repository holds them")
    args = p.parse_args(argv)
    if args.max_batch_size < 1:
        raise UserError("--max-batch-size must be >= 1")
    from zoo.triton.repository import refuse_existing_models

    refuse_existing_models(args.model_repository, triton_models(not args.no_savedmodel), force=args.force)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from zoo.data.wordpiece import load_tokenizer

    vocab_size = load_tokenizer(args.vocab).get_vocab_size()
    model = load_squad_model(args.checkpoint, vocab_size, args.model)
    repo = Path(args.model_repository)
    repo.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=repo, prefix=f".zoo-export-{os.getpid()}-") as work:
        work = Path(work)
        savedmodel = None if args.no_savedmodel else export_savedmodel(model, work / "model.savedmodel")
        onnx_path = export_onnx(model, work / "model.onnx")
        written = write_repository(
            repo, savedmodel, onnx_path, Path(args.vocab), vocab_size=vocab_size,
            type_vocab_size=model.config.type_vocab_size, max_batch_size=args.max_batch_size,
            instance_kind=args.instance_kind, force=args.force,
        )  # fmt: skip
    for model_dir in written:
        print(f"wrote {model_dir}")
    return written


if __name__ == "__main__":
    main()
