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
