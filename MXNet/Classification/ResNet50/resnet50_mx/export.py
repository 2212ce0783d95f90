"""Export a checkpoint to ONNX (mxnet.onnx, dynamic batch) and write a Triton model repository.

The repository holds ``<prefix>_onnx`` (onnxruntime_onnx backend) and ``<prefix>_python`` (python
backend running the same ONNX model with onnxruntime). Its ``config.pbtxt`` files are built and
validated by ``zoo.triton`` against Triton's ModelConfig protobuf, which needs ``tritonclient[grpc]``
and protobuf >= 5: the MXNet venv pins protobuf < 4 for ``onnx==1.13.1``, so when this interpreter
cannot import ``tritonclient.grpc`` that step runs in ``$ZOO_TRITON_PYTHON`` (default: the checkout's
``.venv/pytorch/bin/python``) through ``python -m resnet50_mx.triton_repo``. Both models take
``images`` FP32 [3,H,W] and answer ``logits``, like every ResNet-50 of the zoo.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from zoo.cli import entry_point
from zoo.errors import UserError

from .triton_repo import INPUT_NAME, OUTPUT_NAME, triton_models, zoo_triton_python


def export_onnx(net, onnx_path, *, image_size: int) -> Path:
    """Write ``net`` (NCHW input, any batch) as ONNX with input ``input`` and output ``logits``."""
    import mxnet as mx
    import mxnet.onnx as mx_onnx
    import onnx

    onnx_path = Path(onnx_path)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    net.hybridize()
    net(mx.nd.zeros((1, 3, image_size, image_size)))  # builds the graph to export
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "resnet50")
        net.export(prefix, 0)
        tmp_onnx = os.path.join(tmp, "model.onnx")
        with _weights_as_raw_bytes():
            mx_onnx.export_model(
                f"{prefix}-symbol.json",
                f"{prefix}-0000.params",
                [(1, 3, image_size, image_size)],
                [np.float32],
                tmp_onnx,
                dynamic=True,
                dynamic_input_shapes=[(None, 3, image_size, image_size)],
            )
        model = onnx.load(tmp_onnx)
    _tidy_graph(model)
    onnx.checker.check_model(model)
    from zoo.io import atomic_write

    with atomic_write(onnx_path) as tmp:
        onnx.save(model, str(tmp))
    return onnx_path


@contextlib.contextmanager
def _weights_as_raw_bytes():
    """Make mxnet.onnx store each weight tensor as one bytes field: it passes the values as a list,
    which the pure-python protobuf that onnx 1.13 needs here checks and encodes number by number
    (about 20 minutes of CPU for ResNet-50's 25M weights on a busy 2-core machine; seconds as bytes)."""
    import onnx.helper
    from onnx.mapping import TENSOR_TYPE_TO_NP_TYPE

    make_tensor = onnx.helper.make_tensor

    def make_raw_tensor(name, data_type, dims, vals, raw=False):
        dtype = TENSOR_TYPE_TO_NP_TYPE.get(data_type)
        if raw or dtype is None or np.dtype(dtype).kind not in "fiub":
            return make_tensor(name, data_type, dims, vals, raw)
        return make_tensor(name, data_type, dims, np.asarray(vals, dtype=dtype).tobytes(), raw=True)

    onnx.helper.make_tensor = make_raw_tensor
    try:
        yield
    finally:
        onnx.helper.make_tensor = make_tensor


def _tidy_graph(model) -> None:
    """Name the input/output for clients; keep weights out of the graph inputs (lets onnxruntime fold them)."""
    graph = model.graph
    weights = {init.name for init in graph.initializer}
    kept = [i for i in graph.input if i.name not in weights]
    del graph.input[:]
    graph.input.extend(kept)
    renames = {graph.input[0].name: INPUT_NAME, graph.output[0].name: OUTPUT_NAME}
    for value in list(graph.input) + list(graph.output):
        value.name = renames.get(value.name, value.name)
    for node in graph.node:  # touch only the few nodes that use a renamed tensor (protobuf is slow here)
        for field in (node.input, node.output):
            for i, name in enumerate(field):
                if name in renames:
                    field[i] = renames[name]


def triton_python() -> str:
    """The interpreter that can import tritonclient.grpc (this one, or $ZOO_TRITON_PYTHON / .venv/pytorch)."""
    try:
        import tritonclient.grpc.model_config_pb2  # noqa: F401

        return sys.executable
    except Exception:
        pass
    candidate = zoo_triton_python()
    if candidate is None or not Path(candidate).is_file():
        raise UserError(
            "writing config.pbtxt needs tritonclient[grpc] (protobuf >= 5), absent here: "
            "set ZOO_TRITON_PYTHON to a python that has it (e.g. .venv/pytorch/bin/python)"
        )
    return candidate


def write_repository(spec: dict) -> None:
    """Build configs for ``spec`` (see triton_repo.write_repository) in a python that has tritonclient.grpc."""
    python = triton_python()
    if python == sys.executable:
        from .triton_repo import write_repository as write

        write(spec)
        return
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    model_dir = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(model_dir), os.environ.get("PYTHONPATH", "")]))
    try:
        proc = subprocess.run(
            [python, "-m", "resnet50_mx.triton_repo", "--spec", f.name],
            env=env,
            capture_output=True,
            text=True,
        )
    finally:
        os.unlink(f.name)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise UserError(f"writing the Triton repository failed: {last}")


@entry_point
def main(argv=None):

    p = argparse.ArgumentParser(
        prog="export_triton.sh",
        description="Export ResNet-50 v1.5 (MXNet) to ONNX and write a Triton model repository "
        "(onnxruntime_onnx and python backends).",
    )
    p.add_argument(
        "--checkpoint", required=True, help="results dir, checkpoint .json, .params or registry name"
    )
    p.add_argument("--model-repository", default="model_repository", help="output Triton repository")
    p.add_argument(
        "--name-prefix", default="resnet50_mx", help="models are <prefix>_onnx and <prefix>_python"
    )
    p.add_argument("--image-size", type=int, help="default: the checkpoint's, else 224")
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--instance-kind", choices=["KIND_GPU", "KIND_CPU"], default="KIND_GPU", help="onnx model")
    p.add_argument("--num-classes", type=int, help="expected class count (checked against the checkpoint)")
    p.add_argument("--force", action="store_true", help="replace the models if the repository holds them")
    args = p.parse_args(argv)
    for flag in ("image_size", "max_batch_size", "num_classes"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be a positive integer, not {value}")
    from zoo.triton.repository import refuse_existing_models

    refuse_existing_models(args.model_repository, triton_models(args.name_prefix), force=args.force)
    from .checkpoint import load_for_inference  # MXNet, after the checks that need none

    net, meta = load_for_inference(args.checkpoint, num_classes=args.num_classes)
    image_size = args.image_size or meta.get("image_size", 224)
    if "preprocessing" in meta:  # a registry checkpoint: clients must prepare images as it was published
        print(f"preprocessing: {meta['preprocessing'].describe()}", file=sys.stderr)
        if image_size != meta["preprocessing"].crop:
            raise UserError(
                f"--image-size {image_size} differs from the checkpoint's crop {meta['preprocessing'].crop}"
            )
    repo = Path(args.model_repository)
    repo.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=repo, prefix=f".zoo-export-{os.getpid()}-") as work:
        onnx_path = export_onnx(net, Path(work) / "model.onnx", image_size=image_size)
        write_repository(_spec(args, repo, onnx_path, image_size, meta))
    print(f"wrote {repo}/{args.name_prefix}_onnx and {repo}/{args.name_prefix}_python", file=sys.stderr)


def _spec(args, repo: Path, onnx_path: Path, image_size: int, meta: dict) -> dict:
    """What triton_repo.write_repository needs, as JSON-ready values."""
    return {
        "repository": str(repo.resolve()),
        "onnx": str(onnx_path.resolve()),
        "prefix": args.name_prefix,
        "image_size": image_size,
        "num_classes": meta["num_classes"],
        "max_batch_size": args.max_batch_size,
        "instance_kind": args.instance_kind,
        "classes": meta.get("classes"),
        "force": args.force,
    }


if __name__ == "__main__":
    main()
