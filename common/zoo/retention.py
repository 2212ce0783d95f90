"""Which training checkpoints stay on disk: the newest ``run.keep_checkpoints`` and the best.

Every framework's checkpoint writer (``zoo.torch.save_training_checkpoint`` and its sharded pair,
``zoo.checkpoint_folder.save_folder`` behind ``zoo.tf`` and ``zoo.mx``) calls these after it has written a
checkpoint whole, so every model keeps the same ones:

    RESULTS_DIR/checkpoint.pt                    the newest: what --resume auto continues (PyTorch)
    RESULTS_DIR/checkpoint_step000000600.pt      numbered copies of the newest N (keep_checkpoints > 1)
    RESULTS_DIR/best.pt                          the checkpoint whose evaluation scored best on
                                                 run.target.metric; evaluate.sh and export read it alike

A copy is a hard link where the file system has them (no second copy of the bytes), else a copy; each is
put in place whole (written under a temporary name, then renamed), so a run killed at any moment leaves
every kept checkpoint whole. Framework-free: the checkpoint is a file or a folder of files.
"""

from __future__ import annotations

import os
import pathlib
import shutil

BEST = "best"  # best.pt beside checkpoint.pt; best/ beside a checkpoint folder


def improves(metric: str, value: float | None, best: float | None) -> bool:
    """Whether ``value`` of the quality metric ``metric`` beats ``best`` (None: nothing scored yet), in the
    metric's direction (lower is better for zoo.metrics.LOWER_IS_BETTER)."""
    from zoo.metrics import LOWER_IS_BETTER

    if value is None or value != value:  # not scored, or NaN
        return False
    if best is None:
        return True
    return value < best if metric in LOWER_IS_BETTER else value > best


def numbered_name(path, step: int) -> pathlib.Path:
    """``checkpoint.pt`` -> ``checkpoint_step000000600.pt`` (``checkpoint`` -> ``checkpoint_step000000600``)."""
    path = pathlib.Path(path)
    return path.with_name(f"{path.stem}_step{int(step):09d}{path.suffix}")


def numbered_copies(path) -> list[pathlib.Path]:
    """The numbered copies of the checkpoint ``path``, oldest first."""
    path = pathlib.Path(path)
    pattern = f"{path.stem}_step{'[0-9]' * 9}{path.suffix}"
    return sorted(path.parent.glob(pattern))


def keep_newest(path, step: int, keep: int) -> list[pathlib.Path]:
    """After the checkpoint ``path`` (a file or a folder) was written at optimizer step ``step``: with ``keep``
    above 1, a numbered copy of it (:func:`numbered_name`) joins the others and all but the newest ``keep``
    are removed; with ``keep`` 1, ``path`` alone is the newest and every numbered copy goes. Returns the
    copies kept, oldest first."""
    path = pathlib.Path(path)
    if keep > 1:
        copy_whole(path, numbered_name(path, step))
    copies = numbered_copies(path)
    kept = copies[-keep:] if keep > 1 else []
    for old in copies:
        if old not in kept:
            _remove(old)
    return kept


def mark_best(path, best=None) -> pathlib.Path:
    """Make ``best`` (default: ``best.pt`` or ``best/`` beside ``path``) a whole copy of the checkpoint
    ``path``, replacing the previous best only once the copy is complete. Returns ``best``."""
    path = pathlib.Path(path)
    if best is None:
        best = path.with_name(BEST + path.suffix) if path.is_file() else path.with_name(BEST)
    return copy_whole(path, pathlib.Path(best))


def copy_whole(source, target) -> pathlib.Path:
    """``target`` becomes a copy of ``source`` (a file or a folder; hard links where possible), put in
    place by renames: a reader sees the old ``target`` or the new one, never a part."""
    source, target = pathlib.Path(source), pathlib.Path(target)
    for stale in target.parent.glob(f".{target.name}.*.t*"):  # what a copy killed midway left
        _remove(stale)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        if source.is_dir():
            shutil.copytree(source, temp, copy_function=_link_or_copy)
            old = target.with_name(f".{target.name}.{os.getpid()}.trash")
            if target.exists():
                target.rename(old)
            temp.rename(target)
            _remove(old)
        else:
            _link_or_copy(source, temp)
            os.replace(temp, target)
    finally:
        _remove(temp)
    return target


def _link_or_copy(source, target) -> None:
    try:
        os.link(source, target)
    except OSError:  # a file system without hard links
        shutil.copy2(source, target)


def _remove(path: pathlib.Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
