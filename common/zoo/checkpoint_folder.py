"""The training-checkpoint folder of the TensorFlow and MXNet models (zoo.tf, zoo.mx), written whole or not at all.

    RESULTS_DIR/checkpoint/latest.json           {"folder": "step-600", "kept": [...]}: what --resume continues
    RESULTS_DIR/checkpoint/step-600/state.json   name, step, epoch, recipe and the model's own fields
    RESULTS_DIR/checkpoint/step-600/...          the framework's files (zoo.tf: variables.*; zoo.mx:
                                                 model.params, trainer.states)
    RESULTS_DIR/checkpoint/best/                 a copy of the step folder that evaluated best (zoo.retention)

A save writes a new folder under a temporary name, renames it into place, then points latest.json at it
(zoo.io.atomic_write): a run killed at any moment leaves the previous checkpoint whole. PyTorch models
write one file instead (zoo.torch.save_training_checkpoint).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from zoo.errors import UserError, one_line

CHECKPOINT_NAME = "checkpoint"  # RESULTS_DIR/checkpoint/: what --resume auto continues
LATEST = "latest.json"
STATE = "state.json"
TRAINING_STATE_FIELDS = ("name", "step", "epoch", "recipe")
_TEMP_PREFIX = ".step-"


def checkpoint_pointer(results_dir) -> Path:
    """RESULTS_DIR/checkpoint/latest.json: it exists once a run has saved; pass it to zoo.cli.resolve_resume."""
    return Path(results_dir) / CHECKPOINT_NAME / LATEST


def save_folder(
    directory,
    state: dict,
    write: Callable[[Path], None],
    *,
    keep: int = 1,
    mark_best: bool = False,
    chief: bool = True,
):
    """``write(folder)`` fills an empty temporary folder with the framework's files; then ``state`` (its
    ``step`` names the folder) goes to its state.json, the folder is renamed to ``directory/step-<step>``
    and latest.json points at it. Returns that folder. ``keep`` (``run.keep_checkpoints``): how many
    folders stay, newest last; ``mark_best``: the folder is also copied whole to ``directory/best``.
    ``chief`` False (another worker of a multi-worker job, which must run the same collectives): the files
    go to this machine's temporary folder and are deleted, nothing is kept."""
    from zoo.io import atomic_write

    directory = Path(directory)
    if chief:
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob(f"{_TEMP_PREFIX}*.tmp"):  # what a save killed midway left
            shutil.rmtree(stale, ignore_errors=True)
    step = int(state["step"])
    temp = Path(
        tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}{step}.", suffix=".tmp", dir=directory if chief else None)
    )
    try:
        os.chmod(temp, 0o777 & ~_umask())  # mkdtemp's 0700 would hide checkpoints from the user's group
        write(temp)
        if not chief:
            return None
        (temp / STATE).write_text(json.dumps(state, indent=1, default=_json_scalar))
        folder = directory / f"step-{step}"
        for again in range(1, 1000):  # the same step saved twice (an epoch's end and a step interval)
            if not folder.exists():
                break
            folder = directory / f"step-{step}.{again}"
        temp.rename(folder)
        kept = [*_kept_folders(directory), folder.name][-keep:]
        with atomic_write(directory / LATEST) as tmp:
            tmp.write_text(json.dumps({"folder": folder.name, "kept": kept}) + "\n")
        for old in directory.glob("step-*"):  # older ones, and any a killed save renamed but never named
            if old.name not in kept:
                shutil.rmtree(old, ignore_errors=True)
        if mark_best:
            from zoo.retention import BEST
            from zoo.retention import mark_best as copy_to_best

            copy_to_best(folder, directory / BEST)
        return folder
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def read_state(path, *, name: str, what: str, flag: str = "--resume") -> dict:
    """The state.json of the checkpoint at ``path`` (a results directory, its checkpoint/ folder, its
    latest.json, one step-N folder or its state.json), with ``folder`` added. A path that holds no checkpoint, a torn
    one or another model's (``name`` differs) ends in one line naming ``flag`` and ``path``."""
    folder = _folder_of(Path(path), flag, what)
    try:
        state = json.loads((folder / STATE).read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{flag} {path} is not {what} (cannot be read: {one_line(e, limit=160)})") from None
    missing = (
        [field for field in TRAINING_STATE_FIELDS if field not in state] if isinstance(state, dict) else []
    )
    if missing or not isinstance(state, dict):
        raise UserError(
            f"{flag} {path} is not {what} (no {', '.join(missing) or 'fields'} in {folder / STATE})"
        )
    if state["name"] != name:
        raise UserError(f"{flag} {path} is not {what} (it is a checkpoint of {state['name']})")
    return {**state, "folder": folder}


def _folder_of(path: Path, flag: str, what: str) -> Path:
    """The step-N folder ``path`` names: itself, or the one its latest.json (or checkpoint/latest.json) names."""
    pointers = (path, path / LATEST, path / CHECKPOINT_NAME / LATEST)
    pointer = next((p for p in pointers if p.name == LATEST and p.is_file()), None)
    if pointer is not None:
        try:
            folder = pointer.parent / json.loads(pointer.read_text())["folder"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UserError(f"{flag} {path} is not {what} ({pointer}: {one_line(e, limit=160)})") from None
        if not (folder / STATE).is_file():
            raise UserError(
                f"{flag} {path} is not {what} ({pointer} names {folder.name}, which is not there)"
            )
        return folder
    if (path / STATE).is_file():
        return path
    if path.name == STATE and path.is_file():
        return path.parent
    if not path.exists():
        raise UserError(f"{flag} {path}: no such checkpoint")
    raise UserError(f"{flag} {path} is not {what} (no {CHECKPOINT_NAME}/{LATEST} or {STATE})")


def _kept_folders(directory: Path) -> list[str]:
    """The folders latest.json keeps, oldest first ([] before the first save, or for an unreadable one)."""
    try:
        pointer = json.loads((directory / LATEST).read_text())
        return [name for name in pointer.get("kept", [pointer["folder"]]) if (directory / name).is_dir()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _json_scalar(value):
    """numpy and framework scalars in a checkpoint's state.json."""
    return value.item() if hasattr(value, "item") else str(value)
