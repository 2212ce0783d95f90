"""Load weights for inference: our training checkpoints (zoo.mx), Gluon ``.params`` files, registry names.

The registry (``checkpoints.yaml`` beside this package; ``scripts/download_checkpoint.sh {list,pull
NAME}``) lists public MXNet ResNet-50 v1.5 weights. GluonCV publishes them as
``<name>-<sha1 prefix>.zip`` holding ``<name>-<sha1 prefix>.params``: the hash in the name is the
SHA-1 of the ``.params`` file, which is checked after extraction. A registry checkpoint's metadata
carries its entry's preprocessing (and its crop as ``image_size``) for evaluation and export.
"""

from __future__ import annotations

import hashlib
import os
import re
import zipfile
from pathlib import Path

import mxnet as mx
from zoo.errors import UserError, one_line
from zoo.mx import mxnet_reason

from . import CHECKPOINT_KIND, WHAT  # noqa: F401 (checkpoint.CHECKPOINT_KIND, as before)
from .model import build_model

REGISTRY = Path(__file__).resolve().parent.parent / "checkpoints.yaml"


def sha1_file(path) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def extract_gluoncv_zip(zip_path: Path) -> Path:
    """Extract ``<name>-<hash>.params`` next to the zip (atomically) and check its SHA-1 prefix."""
    from zoo.io import atomic_write

    try:
        with zipfile.ZipFile(zip_path) as zf:
            members = [m for m in zf.namelist() if m.endswith(".params")]
            if len(members) != 1:
                raise UserError(f"{zip_path} should hold one .params file, holds {members}")
            member = members[0]
            target = zip_path.parent / Path(member).name
            match = re.search(r"-([0-9a-f]{8,40})\.params$", target.name)
            if target.is_file() and match and sha1_file(target).startswith(match.group(1)):
                return target
            with atomic_write(target) as tmp, zf.open(member) as src, open(tmp, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
                if match and not sha1_file(tmp).startswith(match.group(1)):
                    raise UserError(
                        f"{member} in {zip_path} does not match the SHA-1 {match.group(1)} in its name"
                    )
    except zipfile.BadZipFile:
        raise UserError(f"{zip_path} is not a zip archive") from None
    return target


def registry_entry(name: str, registry=None):
    """The zoo.checkpoints entry ``name`` of ``registry`` (default: REGISTRY); a one-line error when unknown."""
    from zoo.checkpoints import load_registry

    return load_registry(registry or REGISTRY).get(name)  # an unknown name is a one-line CheckpointError


def fetch_pretrained(name: str, cache_dir=None, registry=None) -> Path:
    """Download (or find in the cache) a registry checkpoint; returns the ``.params`` path.

    A downloaded zip that cannot be extracted or whose ``.params`` fails its SHA-1 is removed from
    the cache, so that the next call downloads it again.
    """
    from zoo.checkpoints import fetch

    entry = registry_entry(name, registry)
    path = fetch(entry, cache_dir=cache_dir)
    if entry.format != "zip":
        return path
    try:
        return extract_gluoncv_zip(path)
    except UserError:
        path.unlink(missing_ok=True)
        raise


def read_params(path: Path) -> dict:
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"PK\x03\x04":  # what torch.save writes
        raise UserError(f"{path} is not an MXNet parameter file but a zip archive (a PyTorch checkpoint?)")
    try:
        params = mx.nd.load(str(path))
    except mx.base.MXNetError as e:
        raise UserError(f"{path} is not an MXNet parameter file ({mxnet_reason(e)})") from None
    if not isinstance(params, dict) or "fc.weight" not in params:
        raise UserError(f"{path} is not a ResNet-50 Gluon parameter file (no fc.weight)")
    return params


def resolve(checkpoint: str, cache_dir=None) -> tuple[Path, dict]:
    """A checkpoint argument -> (``.params`` path, metadata). Accepts a results folder (its checkpoint/),
    one of its checkpoint folders or their ``.json``, a ``.params`` file or a registry name."""
    from zoo.mx import PARAMS, load_training_checkpoint

    path = Path(checkpoint)
    meta: dict = {}
    if path.is_dir() or path.suffix == ".json" and path.is_file():
        where = path.parent if path.name == "state.json" else path
        meta = load_training_checkpoint(where, name=CHECKPOINT_KIND, what=WHAT, flag="--checkpoint")
        return meta["folder"] / PARAMS, {k: v for k, v in meta.items() if k != "params"}
    if path.is_file():
        if path.suffix == ".zip":
            return extract_gluoncv_zip(path), meta
        return path, meta
    if os.sep in checkpoint or checkpoint.endswith((".params", ".json", ".zip")):
        raise UserError(f"checkpoint {checkpoint} does not exist")
    preprocessing = registry_entry(checkpoint).preprocessing
    if preprocessing is not None:
        meta = {"preprocessing": preprocessing, "image_size": preprocessing.crop}
    return fetch_pretrained(checkpoint, cache_dir), meta


def load_for_inference(
    checkpoint: str,
    *,
    num_classes: int | None = None,
    layout: str = "NCHW",
    input_layout: str = "NCHW",
    ctx=None,
    cache_dir=None,
):
    """Build the network and load ``checkpoint`` into it; returns (net, metadata)."""
    ctx = ctx or [mx.cpu()]
    params_path, meta = resolve(checkpoint, cache_dir)
    params = read_params(params_path)
    found = int(params["fc.weight"].shape[0])
    if num_classes is not None and num_classes != found:
        raise UserError(f"checkpoint {checkpoint} has {found} classes, but {num_classes} were asked for")
    conv1 = params["conv1.weight"].shape if "conv1.weight" in params else None
    saved_layout = "NHWC" if conv1 is not None and conv1[-1] == 3 else "NCHW"
    net = build_model(found, layout=saved_layout, input_layout=input_layout)
    try:
        net.load_parameters(str(params_path), ctx=ctx)
    except (AssertionError, mx.base.MXNetError) as e:
        raise UserError(f"{params_path} does not fit ResNet-50 v1.5: {one_line(e, limit=200)}") from None
    if layout != saved_layout:
        net = convert_layout(net, layout, input_layout, ctx)
    meta = dict(meta, params=str(params_path), num_classes=found, layout=layout)
    return net, meta


def convert_layout(net, layout: str, input_layout: str, ctx):
    """The same network with its convolutions in ``layout`` (weights OIHW <-> OHWI)."""
    other = build_model(net.num_classes, layout=layout, input_layout=input_layout)
    other.initialize(ctx=ctx)
    source = net._collect_params_with_prefix()
    axes = (0, 2, 3, 1) if layout == "NHWC" else (0, 3, 1, 2)
    for name, param in other._collect_params_with_prefix().items():
        value = source[name].data(ctx[0])
        if value.ndim == 4:
            value = mx.nd.transpose(value, axes=axes)
        param.set_data(value)
    return other
