"""One bad input (a Row) and the helpers every model's rows module uses."""

from __future__ import annotations

from dataclasses import dataclass

# A config.pbtxt cut off in the middle of its first input (the deploy must say so before starting a server).
BROKEN_CONFIG = 'name: "{name}"\ninput [ {{ name: "images" dims: [ 3, 32 '


# A registry name no model lists: ``download_checkpoint.sh pull`` must refuse it and cache nothing.
UNKNOWN_CHECKPOINT = "resnet50-no-such-checkpoint"


@dataclass(frozen=True)
class Row:
    """One bad input: ``scripts/<script> <args>`` of ``model`` must fail with ``expect`` in its last line."""

    model: str  # model directory relative to the repository root
    script: str  # a file of the model's scripts/
    args: tuple
    expect: str | tuple  # substring(s) of stderr's last non-empty line
    name: str
    recipe: str | None = None  # YAML written to {recipe}
    files: dict | None = None  # {path under the sandbox: text} written before the run
    links: dict | None = None  # {path under the sandbox: the path it points to} made as symlinks after files

    @property
    def id(self) -> str:
        framework, _, model = self.model.split("/")
        return f"{framework}-{model}-{self.script.removesuffix('.sh')}-{self.name}"


def rows_for(model: str, script: str, table: list) -> list[Row]:
    """Rows of one entry point from (name, args, expect[, options]) tuples."""
    out = []
    for entry in table:
        name, args, expect, *options = entry
        out.append(Row(model, script, tuple(args), expect, name, **(options[0] if options else {})))
    return out


def repository_holds(model_name: str, args: list, repository_flag: str = "--repository") -> tuple:
    """A rows_for entry: an export into a repository (``{sandbox}/repo``) that already holds
    ``model_name`` must refuse without --force, naming the model's folder, and leave it as it was."""
    old_model = {
        f"repo/{model_name}/config.pbtxt": f'name: "{model_name}"\n',
        f"repo/{model_name}/1/old": "old",
    }
    return (
        "repository-holds-model",
        [*args, repository_flag, "{sandbox}/repo"],
        (f"repo/{model_name} already exists", "pass --force"),
        {"files": old_model},
    )
