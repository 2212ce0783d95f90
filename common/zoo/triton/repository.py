"""Triton model repositories: ``config.pbtxt`` built and checked against Triton's own ``ModelConfig``
protobuf (shipped in ``tritonclient``), model directories written atomically, a repository validated.

    config = model_config("resnet50_onnx", backend="onnxruntime", max_batch_size=64,
                          inputs=[TensorSpec("input", "FP32", [3, 224, 224])],
                          outputs=[TensorSpec("logits", "FP32", [1000])],
                          dynamic_batching={"preferred_batch_size": [16, 32], "max_queue_delay_microseconds": 100})
    write_model("model_repository", config, {"model.onnx": "resnet50.onnx"})

A model with only an ONNX file is served by the python backend through one shared model file:

    write_model(repo, config, {"model.py": ONNX_PYTHON_MODEL, "model.onnx": "resnet50.onnx"})

(``config`` with ``backend="python"``; see zoo/triton/onnx_model.py for the parameters it reads.)
A config Triton would refuse is a :class:`ModelConfigError` naming the model (or file) and the field.

An export never replaces a model a repository already holds unless asked: ``refuse_existing_models``
(called before the export's heavy work) and ``write_model`` itself refuse it without ``force``; with
``force`` the model's folder is written beside and swapped in whole, so no file of the old model (a
SavedModel's stale variables shard) survives next to the new one.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import re
import shutil
from dataclasses import dataclass

from zoo.dist import process_gone
from zoo.errors import UserError

ONNX_PYTHON_MODEL = pathlib.Path(__file__).with_name("onnx_model.py")
"""The python-backend model.py that serves an ONNX file with onnxruntime (contract in config.pbtxt)."""


class ModelConfigError(UserError, ValueError):
    """A model configuration Triton would refuse to load; the message names the model or file."""


@dataclass
class TensorSpec:
    name: str
    dtype: str  # "FP32", "FP16", "INT64", "BYTES", ... (the TYPE_ prefix is optional)
    dims: list


def model_config(
    name,
    *,
    backend: str | None = None,
    platform: str | None = None,
    max_batch_size: int,
    inputs: list,
    outputs: list,
    instance_kind: str = "KIND_GPU",
    instance_count: int = 1,
    dynamic_batching: dict | None = None,
    parameters: dict | None = None,
):
    """Build and check a ``tritonclient.grpc.model_config_pb2.ModelConfig``.

    ``dynamic_batching`` holds ModelDynamicBatching fields, e.g. ``{"preferred_batch_size": [8, 16],
    "max_queue_delay_microseconds": 100}``; ``{}`` turns it on with Triton's defaults, None leaves it off.
    ``parameters`` become ``parameters { key: ... value { string_value: ... } }`` entries.
    """
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2 as pb

    config = pb.ModelConfig(name=name, max_batch_size=max_batch_size)
    if backend:
        config.backend = backend
    if platform:
        config.platform = platform
    for spec in inputs:
        config.input.add(name=spec.name, data_type=_data_type(spec.dtype), dims=list(spec.dims))
    for spec in outputs:
        config.output.add(name=spec.name, data_type=_data_type(spec.dtype), dims=list(spec.dims))
    config.instance_group.add(kind=pb.ModelInstanceGroup.Kind.Value(instance_kind), count=instance_count)
    if dynamic_batching is not None:
        config.dynamic_batching.SetInParent()
        json_format.ParseDict(dynamic_batching, config.dynamic_batching)
    for key, value in (parameters or {}).items():
        config.parameters[key].string_value = str(value)
    _validate(config)
    return config


def config_to_pbtxt(config) -> str:
    """The protobuf text form Triton reads from config.pbtxt."""
    from google.protobuf import text_format

    return text_format.MessageToString(config)


def parse_pbtxt(text: str):
    """Parse config.pbtxt text into ModelConfig; ModelConfigError with the reason on bad text or fields."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    config = pb.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as e:
        raise ModelConfigError(f"not a Triton ModelConfig: {e}") from None
    _validate(config)
    return config


def refuse_existing_models(repository, names, *, force: bool = False) -> None:
    """A UserError naming the first of ``names`` (model folders) that ``repository`` already holds and
    ``--force``, unless ``force``: an export checks this before its heavy work and before writing anything."""
    repository = pathlib.Path(repository)
    existing = [repository / name for name in names if os.path.lexists(repository / name)]
    if existing and not force:
        more = f" (and {len(existing) - 1} more of this export's models)" if len(existing) > 1 else ""
        raise UserError(f"{existing[0]} already exists{more}: pass --force to replace it")


def write_model(
    repo_dir, config, files: dict, version: int = 1, *, force: bool = False, beside_config: dict | None = None
) -> pathlib.Path:
    """Write <repo>/<name>/config.pbtxt and <repo>/<name>/<version>/<file> for each of ``files``.

    A value of ``files`` is the content (bytes) or a file or directory to copy (str or Path; a
    directory such as ``model.savedmodel`` is copied whole); ``beside_config`` holds files (the same
    kinds of value) written beside config.pbtxt, for a client to read. A repository that already holds the model
    is a UserError unless ``force``; then the new folder, written beside it, replaces the old one whole
    (nothing of the old model is kept). Returns <repo>/<name>.
    """
    _validate(config)
    repo_dir = pathlib.Path(repo_dir)
    model_dir = repo_dir / config.name
    refuse_existing_models(repo_dir, [config.name], force=force)
    repo_dir.mkdir(parents=True, exist_ok=True)
    _sweep_stale_builds(repo_dir)
    building = repo_dir / f"{_BUILD_PREFIX}{os.getpid()}-{config.name}"
    shutil.rmtree(building, ignore_errors=True)
    try:
        (building / str(version)).mkdir(parents=True)
        for folder, contents in ((str(version), files), (".", beside_config or {})):
            for name, source in contents.items():
                target = building / folder / name
                if isinstance(source, bytes):
                    target.write_bytes(source)
                elif pathlib.Path(source).is_dir():
                    shutil.copytree(source, target)
                elif pathlib.Path(source).is_file():
                    shutil.copyfile(source, target)
                else:
                    raise FileNotFoundError(
                        f"model file for {config.name}/{folder}/{name} not found: {source}"
                    )
        (building / "config.pbtxt").write_text(config_to_pbtxt(config))
        _swap_in(building, model_dir)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return model_dir


def build_models(repository, models, write, *, force: bool = False) -> list[pathlib.Path]:
    """``write(folder)`` writes the model folders ``models`` into an empty folder inside ``repository``;
    once it returns, each is swapped into ``repository`` whole (the repository's other models stay). A
    model the repository already holds is a UserError before ``write`` runs, unless ``force``; a
    ``write`` that fails leaves the repository as it was. Returns the models' folders."""
    repository = pathlib.Path(repository)
    refuse_existing_models(repository, models, force=force)
    repository.mkdir(parents=True, exist_ok=True)
    _sweep_stale_builds(repository)
    building = repository / f"{_BUILD_PREFIX}{os.getpid()}-all"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir()
    try:
        write(building)
        written = sorted(p.name for p in building.iterdir())
        if written != sorted(models):
            raise RuntimeError(f"the export wrote {written}, not the models it named {sorted(models)}")
        for name in written:
            _swap_in(building / name, repository / name)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return [repository / name for name in written]


# A model folder being written (or the old one being removed) is <repo>/.zoo-export-<pid>-<name>: a hidden
# folder, removed by the next export once its process is gone (an export killed midway).
_BUILD_PREFIX = ".zoo-export-"


def _swap_in(building: pathlib.Path, model_dir: pathlib.Path) -> None:
    """``building`` renamed to ``model_dir``; an existing ``model_dir`` is exchanged with it in one step
    (renameat2 RENAME_EXCHANGE, where the kernel has it) and ends at ``building``'s path."""
    if not os.path.lexists(model_dir):
        os.rename(building, model_dir)
        return
    if _exchange(building, model_dir):
        return
    parked = building.with_name(building.name + ".old")
    os.rename(model_dir, parked)
    os.rename(building, model_dir)
    os.rename(parked, building)


def _exchange(first: pathlib.Path, second: pathlib.Path) -> bool:
    """Atomically exchange two paths (Linux renameat2 with RENAME_EXCHANGE); False where unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    done = renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange)
    return done == 0


def _sweep_stale_builds(repo_dir: pathlib.Path) -> None:
    """Remove the build folders of exports that no longer run (killed midway)."""
    for folder in repo_dir.glob(f"{_BUILD_PREFIX}*"):
        match = re.match(rf"{re.escape(_BUILD_PREFIX)}(\d+)-", folder.name)
        if not match or int(match.group(1)) == os.getpid():
            continue
        if process_gone(int(match.group(1))):  # else its export still runs
            shutil.rmtree(folder, ignore_errors=True)


def validate_repository(repo) -> list[pathlib.Path]:
    """Parse every config.pbtxt under ``repo``; ModelConfigError naming the first bad file."""
    configs = sorted(pathlib.Path(repo).rglob("config.pbtxt"))
    if not configs:
        raise ModelConfigError(f"no config.pbtxt under {repo}")
    for path in configs:
        try:
            parse_pbtxt(path.read_text())
        except ModelConfigError as e:
            raise ModelConfigError(f"{path}: {e}") from None
    return configs


def _data_type(dtype: str) -> int:
    from tritonclient.grpc import model_config_pb2 as pb

    name = dtype.upper().removeprefix("TYPE_")
    name = {"BYTES": "STRING"}.get(name, name)
    if f"TYPE_{name}" not in pb.DataType.keys():
        raise ModelConfigError(f"unknown Triton data type {dtype!r}")
    return pb.DataType.Value(f"TYPE_{name}")


def _validate(config) -> None:
    """The checks Triton would fail a model on at load time, done before a server is involved."""
    label = f"model '{config.name}'" if config.name else "model config"
    if not config.name:
        raise ModelConfigError("model config has no name")
    if not (config.backend or config.platform):
        raise ModelConfigError(f"{label} names neither a backend nor a platform")
    if config.max_batch_size < 0:
        raise ModelConfigError(f"{label}: max_batch_size must be >= 0, got {config.max_batch_size}")
    if not config.input or not config.output:
        raise ModelConfigError(f"{label} must declare at least one input and one output")
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for tensor in tensors:
            if not tensor.name:
                raise ModelConfigError(f"{label}: an {kind} has no name")
            if tensor.data_type == 0:
                raise ModelConfigError(f"{label}: {kind} '{tensor.name}' has no data_type")
            if not tensor.dims and not tensor.HasField("reshape"):
                raise ModelConfigError(f"{label}: {kind} '{tensor.name}' has no dims")
            if any(d < -1 or d == 0 for d in tensor.dims):
                raise ModelConfigError(
                    f"{label}: {kind} '{tensor.name}' dims {list(tensor.dims)} must be > 0 or -1"
                )


def single_model_repository(repository, model: str, into) -> pathlib.Path:
    """``into`` made a repository holding a copy of ``repository``'s ``model`` alone, and returned: a
    server without the backends of the repository's other models (the nvidia-pytriton tritonserver has
    only the python backend) still serves it, and nothing the server writes lands in ``repository``."""
    source = pathlib.Path(repository) / model
    if not (source / "config.pbtxt").is_file():
        raise UserError(f"{repository} holds no {model}/config.pbtxt: run scripts/export_triton.sh first")
    into = pathlib.Path(into)
    shutil.copytree(source, into / model, symlinks=True)
    return into
