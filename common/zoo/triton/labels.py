"""Class names in a Triton model repository: written by a classifier's export, read by its deploy client.

    config, beside = labelled(config, classes)       # the export: output 0 names labels.txt
    write_model(repo, config, files, beside_config=beside)
    names = read_labels(repo, "resnet50_python", labels_file=args.labels)   # the client
    print(f"{path}: {label_of(names, index)}")       # "n01440764", or "0" without names

The names go in ``labels.txt`` beside ``config.pbtxt``, one a line in the order of the logits, and the
model's output names it as Triton's ``label_filename`` (the file Triton's classification extension
answers with). The client takes ``--labels FILE`` where given, else the file the served model's
config names, else a ``labels.txt`` beside the config or in its version folder (MXNet's earlier
exports); none of them: the indices are printed.
"""

from __future__ import annotations

import pathlib

from zoo.errors import UserError

LABELS_FILE = "labels.txt"


def labelled(config, classes, *, output: int = 0) -> tuple[object, dict[str, bytes]]:
    """``(config, {LABELS_FILE: bytes})``: ``config`` (a ModelConfig) with output ``output`` naming
    ``LABELS_FILE`` as its ``label_filename``, and the file's content for ``write_model(beside_config=)``.
    No ``classes`` (a run on synthetic data): the config unchanged and no file. A class count other than
    the output's is a UserError naming both."""
    if not classes:
        return config, {}
    classes = [str(name) for name in classes]
    width = list(config.output[output].dims)[-1]
    if width != len(classes):
        raise UserError(f"{len(classes)} class names for {config.name}'s {width} outputs")
    if any(not name or "\n" in name for name in classes):
        raise UserError(f"class names of {config.name} must be non-empty and on one line each")
    config.output[output].label_filename = LABELS_FILE
    return config, {LABELS_FILE: ("\n".join(classes) + "\n").encode()}


def read_labels(repository, model: str, *, labels_file=None) -> list[str] | None:
    """The class names of ``model``: ``labels_file`` (a user's ``--labels``) where given, else the one
    the model's folder in ``repository`` holds (see the module's doc); None where there is none (a model
    served through ``--url`` with no local copy of its repository, or exported without names)."""
    if labels_file is not None:
        path = pathlib.Path(labels_file)
        if not path.is_file():
            raise UserError(f"labels file {path} does not exist")
        return _read(path)
    folder = pathlib.Path(repository) / model
    named = _label_filename(folder / "config.pbtxt")
    for path in [folder / named] if named else [folder / LABELS_FILE, folder / "1" / LABELS_FILE]:
        if path.is_file():
            return _read(path)
        if named:
            raise UserError(f"{folder / 'config.pbtxt'} names labels {named}, which {folder} lacks")
    return None


def label_of(names: list[str] | None, index: int) -> str:
    """The printed label of class ``index``: its name, or the index where there are no names."""
    index = int(index)
    if not names:
        return str(index)
    if not 0 <= index < len(names):
        raise UserError(f"class {index} is outside the {len(names)} class names")
    return names[index]


def _read(path: pathlib.Path) -> list[str]:
    try:
        names = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read labels file {path}: {type(e).__name__}") from None
    if not names:
        raise UserError(f"labels file {path} is empty")
    return names


def _label_filename(config_path: pathlib.Path) -> str | None:
    """The ``label_filename`` of the config's first output that has one, read from the text (the client's
    venv may lack Triton's protobuf schema)."""
    if not config_path.is_file():
        return None
    for line in config_path.read_text(encoding="utf-8", errors="replace").splitlines():
        key, _, value = line.strip().partition(":")
        if key.strip() == "label_filename":
            return value.strip().strip('"') or None
    return None
