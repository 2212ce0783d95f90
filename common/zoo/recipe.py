"""Training recipes as YAML, with dotted-key overrides and ``base:`` inheritance.

A recipe may extend another: ``base: resnet50_1gpu_90ep.yaml`` (relative to the recipe file) loads
that one first and merges this one over it, mapping by mapping.
"""

from __future__ import annotations

import copy
import pathlib


def load_recipe(path, overrides: dict | None = None) -> dict:
    """Load a YAML recipe (following ``base:``) and apply ``{"optimizer.lr": 0.1}`` overrides.

    An override key that names nothing in the recipe raises SystemExit naming it. String values
    are read as YAML scalars, so ``"0.1"`` from a command line becomes a float.
    """
    recipe = _load_with_bases(pathlib.Path(path), seen=())
    for key, value in (overrides or {}).items():
        _set_dotted(recipe, key, _yaml_scalar(value), path)
    return recipe


def parse_overrides(items: list[str]) -> dict:
    """``["optimizer.lr=0.1", "epochs=5"]`` (e.g. repeated ``--set`` flags) -> ``{"optimizer.lr": "0.1", ...}``."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"recipe override '{item}' is not key=value")
        overrides[key.strip()] = value
    return overrides


def _load_with_bases(path: pathlib.Path, seen: tuple) -> dict:
    import yaml

    if not path.is_file():
        raise SystemExit(f"recipe not found: {path}")
    if path.resolve() in seen:
        raise SystemExit(f"recipe {path} extends itself through 'base:'")
    try:
        recipe = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise SystemExit(f"recipe {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(recipe, dict):
        raise SystemExit(f"recipe {path} is not a mapping")
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
            raise SystemExit(f"unknown recipe key '{key}' in {path} ({where} has: {known})")
        if i == len(parts) - 1:
            node[part] = value
        node = node[part]


def _yaml_scalar(value):
    import yaml

    if not isinstance(value, str):
        return value
    try:
        return yaml.safe_load(value) if value.strip() else value
    except yaml.YAMLError:
        return value
