"""Small real datasets that installed packages ship, laid out as image folders."""

from __future__ import annotations

import json
import pathlib
import shutil
import tempfile

import numpy as np

from zoo.errors import UserError

_MARKER = ".zoo_digits.json"
_EXTENSIONS = {"JPEG": ".jpg", "PNG": ".png"}


def make_digits_imagefolder(
    root, *, image_size: int = 32, val_fraction: float = 0.2, seed: int = 0, fmt="JPEG"
) -> pathlib.Path:
    """Write scikit-learn's 1,797 8x8 digits as RGB ``image_size`` images: root/{train,val}/<0..9>/*.jpg.

    The split is stratified (``val_fraction`` of each class, shuffled with ``seed``); file names are
    the digit's index in ``sklearn.datasets.load_digits``. Idempotent: a marker file records a
    finished layout and its parameters; different parameters rebuild it.
    """
    from PIL import Image
    from sklearn.datasets import load_digits

    if fmt not in _EXTENSIONS:
        raise UserError(f"image format {fmt!r} is not one of {', '.join(_EXTENSIONS)}")
    root = pathlib.Path(root)
    params = {"image_size": image_size, "val_fraction": val_fraction, "seed": seed, "fmt": fmt}
    marker = root / _MARKER
    if marker.is_file() and json.loads(marker.read_text()) == params:
        return root

    digits = load_digits()
    pixels = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)  # 0..16 -> 0..255
    rng = np.random.default_rng(seed)
    split = np.full(len(pixels), "train", dtype=object)
    for label in range(10):
        members = rng.permutation(np.flatnonzero(digits.target == label))
        split[members[: round(len(members) * val_fraction)]] = "val"

    root.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".digits-", dir=root))
    try:
        for index, (image, label) in enumerate(zip(pixels, digits.target, strict=True)):
            folder = staging / split[index] / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            big = Image.fromarray(image, mode="L").resize((image_size, image_size), Image.BILINEAR)
            big.convert("RGB").save(folder / f"{index:04d}{_EXTENSIONS[fmt]}", fmt, quality=95)
        for part in ("train", "val"):
            shutil.rmtree(root / part, ignore_errors=True)
            (staging / part).rename(root / part)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    marker.write_text(json.dumps(params))
    return root
