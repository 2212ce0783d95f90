"""The layout of an image folder (``data_dir/{train,val}/<class>/``), checked without the framework: a
training script calls :func:`check_layout` before it imports torch, so a wrong ``--data-dir`` ends at once.
"""

from __future__ import annotations

import os
import pathlib

from zoo.errors import UserError


class DataError(UserError):
    """Bad input data (a missing folder, an unreadable image); the message is one line naming it."""


def find_classes(folder: pathlib.Path) -> list[str]:
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())


def check_layout(data_dir: str | os.PathLike | None, num_classes: int | None = None, splits=("train", "val")):
    """Check ``data_dir`` holds the split folders with the same class sub-folders; return the class names.

    Raises DataError with one line naming what is wrong.
    """
    if data_dir is None:
        raise DataError("no --data-dir given (or use --data-backend synthetic)")
    root = pathlib.Path(data_dir)
    if not root.is_dir():
        raise DataError(f"data dir {root} does not exist")
    classes = None
    for split in splits:
        folder = root / split
        if not folder.is_dir():
            raise DataError(f"data dir {root} has no {split}/ folder (expected {root}/{split}/<class>/*.jpg)")
        found = find_classes(folder)
        if not found:
            raise DataError(f"{folder} has no class sub-folders (expected {folder}/<class>/*.jpg)")
        if classes is None:
            classes = found
        elif found != classes:
            raise DataError(
                f"{folder} has {len(found)} classes but {root / splits[0]} has {len(classes)}: "
                "class folders must match"
            )
    if num_classes is not None and len(classes) != num_classes:
        raise DataError(
            f"data dir {root} has {len(classes)} classes but the model has {num_classes} (--num-classes)"
        )
    return classes


def recipe_classes(recipe: dict, data_dir) -> list[str] | None:
    """The class names of a recipe's image folder (None for synthetic data), its layout checked against
    the recipe's ``model.num_classes``."""
    if recipe["data"]["backend"] == "synthetic":
        return None
    return check_layout(data_dir, int(recipe["model"]["num_classes"]))
