"""Training recipes as YAML, with dotted-key overrides and ``base:`` inheritance.

A recipe may extend another: ``base: resnet50_1gpu_90ep.yaml`` (relative to the recipe file) loads
that one first and merges this one over it, mapping by mapping.

Recipes are strict. Given the model's schema (``known_keys_from``: its default recipe, the one its
entry point names, with that recipe's bases), a key of a file that the schema lacks (``lr_per_265``,
``epoch``) is an error naming the nearest known key, and so is a value of another kind than the
schema's (a word where it has a number, a single value where it has a section); the run: section is
typed by :func:`run_config`. The file being checked never vouches for its own keys: a recipe saved
beside the shipped ones in ``configs/`` is checked like any other. ``--set`` overrides must name a key
of the recipe. Counts (batch sizes, epochs, steps, accumulation, image size, classes) must be
positive integers (:data:`POSITIVE_INTEGERS`, by their last name: counts and sizes such as layers, image
sides, proposals kept), checked once here for every model. :func:`flag` and
:func:`compile_mode` read the two kinds of lever value every model has (a boolean, a compile mode).
"""

from __future__ import annotations

import copy
import pathlib
import re

from zoo.errors import UserError, one_line
from zoo.run_section import (  # the run: section, typed; zoo.recipe names them for its callers
    PRECISIONS,
    RUN_KEYS,
    TARGET_KEYS,
    Interval,
    RunConfig,
    Target,
    _nearest,
    run_config,
)

__all__ = ["PRECISIONS", "RUN_KEYS", "TARGET_KEYS", "Interval", "RunConfig", "Target", "run_config"]

# Recipe leaves (by their last name) that count something: a positive integer, or a list of them.
POSITIVE_INTEGERS = frozenset(
    {
        "batch_size",
        "eval_batch_size",
        "epochs",
        "steps",
        "accumulation",
        "image_size",
        "num_classes",
        "max_seq",
        "max_steps",
        "max_tokens",
        "max_length",
        "batch_tokens",
        "beam",
        "log_every",
        "threads",
        "base_batch",  # the batch a learning rate is given for (scaled by global batch / base_batch)
        "min_size",  # image sides in pixels (detectors)
        "max_size",
        "max_positions",
        "encoder_layers",
        "decoder_layers",
        "rpn_pre_nms_top_n_train",  # proposals kept per image (Mask R-CNN)
        "rpn_post_nms_top_n_train",
        "rpn_pre_nms_top_n_test",
        "rpn_post_nms_top_n_test",
        "box_batch_size_per_image",
        "box_detections_per_img",
    }
)
NON_NEGATIVE = frozenset(
    {"workers", "warmup_epochs", "warmup_steps", "every_steps", "checkpoint_every_steps", "keep_checkpoints"}
)


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def flag(value, key: str) -> bool:
    """A recipe boolean: YAML's true/false, or the strings a ``--set`` override carries ("true", "0",
    "yes", ...); anything else is a UserError naming ``key``."""
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "1", "yes"):
        return True
    if str(value).lower() in ("false", "0", "no"):
        return False
    raise UserError(f"{key} must be true or false, not {value!r}")


def compile_mode(value, key: str = "train.compile", modes=COMPILE_MODES) -> str | None:
    """A recipe's compile lever as a ``torch.compile`` mode: None (eager) for false / none / eager,
    "default" for true, else one of ``modes``; anything else is a UserError naming ``key``."""
    if value is None or value is False or str(value).lower() in ("false", "none", "no", "eager"):
        return None
    if value is True or str(value).lower() in ("true", "yes"):
        return "default"
    if value not in modes:
        raise UserError(f"{key} must be false or one of {', '.join(modes)}, not {value!r}")
    return value


def load_recipe(path, overrides: dict | None = None, known_keys_from=None) -> dict:
    """Load a YAML recipe (following ``base:``) and apply ``{"optimizer.lr": 0.1}`` overrides.

    An override key that names nothing in the recipe raises UserError naming it. String values
    are read as YAML scalars, so ``"0.1"`` from a command line becomes a float. ``known_keys_from``
    (the model's schema: a recipe file, or a list of them, each with its bases) turns on the check of
    the file's keys and value kinds against it (:func:`check_against_schema`). Count-like values are
    range-checked (:data:`POSITIVE_INTEGERS`, :data:`NON_NEGATIVE`).
    """
    recipe = _load_with_bases(pathlib.Path(path), seen=())
    if known_keys_from is not None:
        check_against_schema(recipe, schema_of(known_keys_from), path)
    return _overridden(recipe, overrides, path)


def saved_recipe(
    recipe: dict, overrides: dict | None = None, where="the checkpoint", defaults_from=None
) -> dict:
    """The recipe a training checkpoint carries (``recipe``, checked when that run started), with
    ``overrides`` applied as :func:`load_recipe` applies them. A key the model's schema (``defaults_from``)
    gained since the checkpoint was written takes the schema's value."""
    if not isinstance(recipe, dict):
        raise UserError(f"{where} carries no recipe (a mapping), but {type(recipe).__name__}")
    if defaults_from is not None:
        recipe = _merge(schema_of(defaults_from), recipe)
    return _overridden(copy.deepcopy(recipe), overrides, where)


def _overridden(recipe: dict, overrides: dict | None, path) -> dict:
    for key, value in (overrides or {}).items():
        _set_dotted(recipe, key, _yaml_scalar(value), path)
    check_ranges(recipe, path)
    if "run" in recipe:
        run_config(recipe, path)  # a bad run: key ends here, naming the key and the file
    return recipe


def schema_of(source) -> dict:
    """The model's schema: the recipe file ``source`` (or the files of a list, merged in order) with its
    bases. A folder is refused: the keys of whatever recipes lie in it are not a schema (a file saved
    there with a misspelt key would vouch for itself)."""
    files = [source] if isinstance(source, str | pathlib.Path) else list(source)
    schema: dict = {}
    for file in map(pathlib.Path, files):
        if file.is_dir():
            raise ValueError(f"a recipe schema is a recipe file, not the folder {file}")
        schema = _merge(schema, _load_with_bases(file, seen=()))
    return schema


def check_against_schema(recipe: dict, schema: dict, path="recipe") -> None:
    """UserError naming the first key of ``recipe`` that ``schema`` lacks (with the nearest known key),
    or whose value is of another kind than the schema's: a word or a flag where the schema has a number,
    a single value where it has a section (keys under a single value are unknown keys). Null on either side
    passes (a recipe may unset a value, and a schema may leave one for recipes to fill); the run:
    section's types are :func:`run_config`'s, the counts' :func:`check_ranges`'."""
    known = _dotted_keys(schema) | {"run"} | {f"run.{key}" for key in RUN_KEYS}
    known |= {f"run.target.{key}" for key in TARGET_KEYS}  # the run: section's schema is RUN_KEYS
    for key in sorted(_dotted_keys(recipe) - known):
        raise UserError(f"unknown recipe key '{key}' in {path}{_nearest(key, known)}")
    for key in sorted(_dotted_keys(recipe)):
        expected, value = _get_dotted(schema, key), _get_dotted(recipe, key)
        if (
            key == "run"
            or key.startswith("run.")
            or key.rsplit(".", 1)[-1] in POSITIVE_INTEGERS | NON_NEGATIVE
        ):
            continue  # run_config types the run: section, check_ranges the counts, each with its own message
        if isinstance(expected, dict) and not isinstance(value, dict | None):
            raise UserError(f"{key} is a section (set its keys), not {value!r} ({path})")
        if _is_number(expected) and isinstance(value, bool | str):
            raise UserError(f"{key} must be a number, not {value!r} ({path})")


def _get_dotted(recipe: dict, key: str):
    node = recipe
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_ranges(recipe: dict, path="recipe") -> None:
    """UserError naming the first count that is not a positive integer (or a negative non-negative)."""
    for key, value in _leaves(recipe):
        name = key.rsplit(".", 1)[-1]
        if name in POSITIVE_INTEGERS and value is not None:
            values = value if isinstance(value, list) else [value]
            if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
                raise UserError(f"{key} must be a positive integer, not {value!r} ({path})")
        elif name in NON_NEGATIVE and value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise UserError(f"{key} must be a number >= 0, not {value!r} ({path})")


def parse_overrides(items: list[str]) -> dict:
    """``["optimizer.lr=0.1", "epochs=5"]`` (e.g. repeated ``--set`` flags) -> ``{"optimizer.lr": "0.1", ...}``."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"recipe override '{item}' is not key=value")
        overrides[key.strip()] = value
    return overrides


def _load_with_bases(path: pathlib.Path, seen: tuple) -> dict:
    import yaml

    if not path.is_file():
        raise UserError(f"recipe not found: {path}")
    if path.resolve() in seen:
        raise UserError(f"recipe {path} extends itself through 'base:'")
    try:
        recipe = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise UserError(f"recipe {path} is not valid YAML: {one_line(e)}") from None
    if not isinstance(recipe, dict):
        raise UserError(f"recipe {path} is not a mapping")
    base = recipe.pop("base", None)
    if base is None:
        return recipe
    parent = _load_with_bases(path.parent / base, seen + (path.resolve(),))
    return _merge(parent, recipe)


def _merge(base: dict, over: dict) -> dict:
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _set_dotted(recipe: dict, key: str, value, path) -> None:
    node = recipe
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            known = ", ".join(sorted(node)) if isinstance(node, dict) else "none: not a mapping"
            where = ".".join(parts[:i]) or "top level"
            hint = _nearest(key, _dotted_keys(recipe))
            raise UserError(f"unknown recipe key '{key}' in {path}{hint} ({where} has: {known})")
        if i == len(parts) - 1:
            _check_type(key, node[part], value, path)
            node[part] = value
        node = node[part]


def _check_type(key: str, old, new, path) -> None:
    """A recipe number overridden by something that is not a number (``--set optimizer.lr=fast``), or a
    section by a single value, is a UserError naming the key; null and other changes pass."""
    is_number = isinstance(old, int | float) and not isinstance(old, bool)
    name = key.rsplit(".", 1)[-1]
    if new is None or old is None or key.startswith("run.") or name in POSITIVE_INTEGERS | NON_NEGATIVE:
        return  # run_config types the run: section, check_ranges the counts, each with its own message
    if is_number and isinstance(new, bool | str | dict):  # a list may give one number per table or level
        raise UserError(f"{key} is a number in {path}, not {new!r}")
    if isinstance(old, dict) and not isinstance(new, dict):
        raise UserError(f"{key} is a section in {path} (set its keys, e.g. {key}.<name>=...), not {new!r}")


def _yaml_scalar(value):
    import yaml

    if not isinstance(value, str):
        return value
    if re.fullmatch(r"\s*[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+\s*", value):
        return float(value)  # YAML 1.1 reads 2e-3 (no dot in the mantissa) as a string
    try:
        return yaml.safe_load(value) if value.strip() else value
    except yaml.YAMLError:
        return value


def _leaves(recipe: dict, prefix: str = ""):
    for key, value in recipe.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _dotted_keys(recipe: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in recipe.items():
        keys.add(f"{prefix}{key}")
        if isinstance(value, dict):
            keys |= _dotted_keys(value, f"{prefix}{key}.")
    return keys
