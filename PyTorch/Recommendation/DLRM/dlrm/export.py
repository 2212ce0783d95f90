"""Export a checkpoint's single-device model to ONNX and a Triton model repository:
``python -m dlrm.export --checkpoint RESULTS/checkpoint --repository model_repository``.

Models: ``dlrm_onnx`` (onnxruntime backend, Triton's container) and ``dlrm_python`` (the zoo's
python-backend model file over the same ONNX file). Inputs ``dense`` FP32 [13] (log(1 + x)
features, as dlrm.data prepares them) and ``sparse`` INT64 [sum(hotness)] (table ids, tables in
order); output ``ctr`` FP32 [1], the click probability.
"""

from __future__ import annotations

import argparse
import pathlib
from typing import TYPE_CHECKING

from zoo.cli import add_run_args, entry_point, parse_args, recipe_from_args

if TYPE_CHECKING:
    import torch


def load_plain(recipe: dict, checkpoint) -> tuple[torch.nn.Module, dict]:
    """(the single-device DLRM with ``checkpoint``'s weights, the checkpoint's state: table sizes, step...)
    whatever path trained it."""
    from zoo.recipe import run_config
    from zoo.torch import load_training_checkpoint_sharded

    from dlrm.model import build_plain
    from dlrm.step import CHECKPOINT_WHAT, checkpoint_fields, read_checkpoint

    state = read_checkpoint(checkpoint, flag="--checkpoint")
    seed = run_config(recipe).seed
    model = build_plain(recipe["model"], state["num_embeddings"], state["num_dense"], seed)
    weights = {"model": model.state_dict()}
    load_training_checkpoint_sharded(
        checkpoint, weights, checkpoint_fields(), CHECKPOINT_WHAT, "--checkpoint"
    )
    model.load_state_dict(weights["model"])
    return model.eval(), state


def export_onnx(model, path, num_dense: int, sparse_width: int) -> None:
    import torch
    from zoo.io import atomic_write

    from dlrm.model import CTRModel

    dense = torch.rand(2, num_dense)
    sparse = torch.zeros(2, sparse_width, dtype=torch.int64)
    with atomic_write(path) as tmp:
        torch.onnx.export(
            CTRModel(model).eval(),
            (dense, sparse),
            str(tmp),
            input_names=["dense", "sparse"],
            output_names=["ctr"],
            dynamic_axes={"dense": {0: "batch"}, "sparse": {0: "batch"}, "ctr": {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )


TRITON_MODELS = ("dlrm_onnx", "dlrm_python")


def write_repository(
    model,
    repo,
    num_dense: int,
    *,
    max_batch_size: int = 4096,
    instance_kind: str = "KIND_GPU",
    force: bool = False,
):
    """Write dlrm_onnx and dlrm_python into ``repo``; returns the repository path. A model ``repo``
    already holds is a UserError unless ``force`` (then its folder is replaced whole)."""
    import tempfile

    from zoo.triton.repository import (
        ONNX_PYTHON_MODEL,
        TensorSpec,
        model_config,
        refuse_existing_models,
        write_model,
    )

    refuse_existing_models(repo, TRITON_MODELS, force=force)
    repo = pathlib.Path(repo)
    width = sum(model.sparse.hotness)
    inputs = [TensorSpec("dense", "FP32", [num_dense]), TensorSpec("sparse", "INT64", [width])]
    outputs = [TensorSpec("ctr", "FP32", [1])]
    batching = {"max_queue_delay_microseconds": 100}
    onnx_model = model_config(
        "dlrm_onnx",
        platform="onnxruntime_onnx",
        max_batch_size=max_batch_size,
        inputs=inputs,
        outputs=outputs,
        instance_kind=instance_kind,
        dynamic_batching=batching,
    )
    python_model = model_config(
        "dlrm_python",
        backend="python",
        max_batch_size=max_batch_size,
        inputs=inputs,
        outputs=outputs,
        instance_kind="KIND_CPU",
        dynamic_batching=batching,
        parameters={"min_value:sparse": 0},
    )
    # The client side needs each table's rows and hotness to turn one-hot ids into the served input.
    rows = " ".join(str(n) for n in model.sparse.rows)
    hotness = " ".join(str(h) for h in model.sparse.hotness)
    client_files = {"rows.txt": f"{rows}\n".encode(), "hotness.txt": f"{hotness}\n".encode()}
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = pathlib.Path(tmp) / "dlrm.onnx"
        export_onnx(model, onnx_path, num_dense, width)
        write_model(repo, onnx_model, {"model.onnx": onnx_path}, force=force)
        files = {"model.py": ONNX_PYTHON_MODEL, "model.onnx": onnx_path}
        write_model(repo, python_model, files, force=force, beside_config=client_files)
    return repo


@entry_point
def main(argv=None) -> None:
    from dlrm import DEFAULT_RECIPE

    parser = argparse.ArgumentParser(prog="python -m dlrm.export", description=__doc__.split("\n\n")[0])
    add_run_args(parser, default_recipe=DEFAULT_RECIPE, data_dir=False, amp=False, resume=False)
    parser.add_argument(
        "--checkpoint", default=None, help="checkpoint directory (default: RESULTS_DIR/checkpoint)"
    )
    parser.add_argument("--repository", default="model_repository", help="Triton model repository to write")
    parser.add_argument("--max-batch-size", type=int, default=4096)
    parser.add_argument("--instance-kind", default="KIND_GPU", choices=("KIND_GPU", "KIND_CPU"))
    parser.add_argument(
        "--force", action="store_true", help="replace the models if the repository holds them"
    )
    args = parse_args(parser, argv)
    from zoo.triton.repository import refuse_existing_models

    refuse_existing_models(args.repository, TRITON_MODELS, force=args.force)
    recipe = recipe_from_args(args)
    checkpoint = args.checkpoint or pathlib.Path(args.results_dir) / "checkpoint"
    model, state = load_plain(recipe, checkpoint)
    repo = write_repository(
        model,
        args.repository,
        state["num_dense"],
        max_batch_size=args.max_batch_size,
        instance_kind=args.instance_kind,
        force=args.force,
    )
    print(f"wrote {repo}/dlrm_onnx and {repo}/dlrm_python")


if __name__ == "__main__":
    main()
