"""Unpack a pulled Google BERT zip into the TensorFlow checkpoint that bert.convert reads.

The registry (checkpoints.yaml) is listed and pulled with ``scripts/download_checkpoint.sh
{list,pull NAME}``; Hugging Face ``.safetensors`` files load as they are, Google's zips go through
``unpack_tf_zip`` (bert.convert.read_state_dict does it for a ``.zip``).
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

from zoo.checkpoints import CheckpointError


def unpack_tf_zip(path) -> Path:
    """Extract ``NAME.zip`` beside it as ``NAME/`` (once, atomically); return its ``bert_model.ckpt`` prefix."""
    path = Path(path)
    out = path.with_suffix("")
    if not out.is_dir():
        partial = out.parent / (out.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            with zipfile.ZipFile(path) as archive:
                archive.extractall(partial)
        except zipfile.BadZipFile:
            shutil.rmtree(partial, ignore_errors=True)
            raise CheckpointError(f"{path} is not a zip archive") from None
        partial.replace(out)
    prefixes = sorted(out.rglob("bert_model.ckpt.index"))
    if not prefixes:
        raise CheckpointError(f"{path} holds no bert_model.ckpt (expected Google's BERT zip layout)")
    return prefixes[0].with_suffix("")
