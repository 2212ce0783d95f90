"""The ``run:`` section every recipe of every model shares, typed and checked (docs/ARCHITECTURE.md, "One
shape inside every model"); zoo.recipe checks it whenever it loads a recipe.
"""

from __future__ import annotations

import dataclasses
import difflib
import re

from zoo.errors import UserError

# Every recipe of every model has one ``run:`` section with these keys (docs/ARCHITECTURE.md, "Recipes"):
#
#   run:
#     precision: bf16          # bf16 | fp16 (with a grad scaler) | fp32            (--amp)
#     batch_per_gpu: 256       # samples per GPU per micro-step (tokens for token-batched models)
#     accumulation: 1          # micro-steps per optimizer step
#     epochs: 90               # the run's length: epochs, or
#     steps: null              #   optimizer steps (exactly one of the two is set)
#     log_every: 20            # optimizer steps between train readings (each reading syncs the GPU)
#     eval_every: 1 epoch      # "N epochs" or "N steps"; null: once, at the end
#     checkpoint_every: 1 epoch  # "N epochs" or "N steps"; null: once, at the end
#     keep_checkpoints: 1      # the newest N checkpoints stay (zoo.retention); the best stays too
#     seed: 0
#     target: {metric: top1, value: null, unit: "%"}   # stop once reached; null: run the whole length
RUN_KEYS = (
    "precision",
    "batch_per_gpu",
    "accumulation",
    "epochs",
    "steps",
    "log_every",
    "eval_every",
    "checkpoint_every",
    "keep_checkpoints",
    "seed",
    "target",
)
TARGET_KEYS = ("metric", "value", "unit")
PRECISIONS = ("bf16", "fp16", "fp32")
_INTERVAL = re.compile(r"^\s*(\d+)\s*(epoch|epochs|step|steps)\s*$")


@dataclasses.dataclass(frozen=True)
class Interval:
    """Every ``count`` epochs or steps (``unit``: "epochs" or "steps")."""

    count: int
    unit: str

    def due(self, epochs_done: int, steps_done: int) -> bool:
        """Whether the interval ends at this point of the run (after ``epochs_done`` epochs, or
        ``steps_done`` optimizer steps, whichever the unit counts)."""
        done = epochs_done if self.unit == "epochs" else steps_done
        return done > 0 and done % self.count == 0

    def __str__(self) -> str:
        return f"{self.count} {self.unit}"


@dataclasses.dataclass(frozen=True)
class Target:
    """Stop once ``metric`` (a zoo.metrics name) reaches ``value`` in ``unit``; value None: never stop early."""

    metric: str
    value: float | None
    unit: str

    def reached(self, measured: float) -> bool:
        from zoo.metrics import reached

        return self.value is not None and reached(self.metric, measured, self.value)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The ``run:`` section of a recipe, typed and checked (see RUN_KEYS)."""

    precision: str
    batch_per_gpu: int
    accumulation: int
    epochs: int | None
    steps: int | None
    log_every: int
    eval_every: Interval | None
    checkpoint_every: Interval | None
    keep_checkpoints: int
    seed: int
    target: Target

    def require_epoch_evaluations(self, model: str) -> None:
        """UserError unless ``eval_every`` counts whole epochs (or is null): for loops that evaluate only
        between epochs."""
        if self.eval_every is not None and self.eval_every.unit != "epochs":
            raise UserError(
                f"run.eval_every: {model} evaluates after whole epochs ('N epochs' or null), not {self.eval_every}"
            )


def run_config(recipe: dict, path="recipe") -> RunConfig:
    """``recipe["run"]`` as a RunConfig. A missing, unknown or mistyped key, or a value out of range,
    raises UserError naming the key and ``path``."""

    section = recipe.get("run")
    if not isinstance(section, dict):
        raise UserError(f"{path} has no run: section (keys: {', '.join(RUN_KEYS)})")
    _check_keys(section, RUN_KEYS, "run", path)
    precision = section["precision"]
    if precision not in PRECISIONS:
        raise UserError(f"run.precision must be one of {', '.join(PRECISIONS)}, not {precision!r} ({path})")
    epochs, steps = _optional_count(section, "epochs", path), _optional_count(section, "steps", path)
    if (epochs is None) == (steps is None):
        raise UserError(f"run: set exactly one of run.epochs and run.steps ({path})")
    target = section["target"]
    if not isinstance(target, dict):
        raise UserError(f"run.target must be a mapping of {', '.join(TARGET_KEYS)}, not {target!r} ({path})")
    _check_keys(target, TARGET_KEYS, "run.target", path)
    return RunConfig(
        precision=precision,
        batch_per_gpu=_count(section, "batch_per_gpu", path),
        accumulation=_count(section, "accumulation", path),
        epochs=epochs,
        steps=steps,
        log_every=_count(section, "log_every", path),
        eval_every=_interval(section, "eval_every", path),
        checkpoint_every=_interval(section, "checkpoint_every", path),
        keep_checkpoints=_count(section, "keep_checkpoints", path),
        seed=_integer(section, "seed", path),
        target=_target(target, path),
    )


def _check_keys(section: dict, keys: tuple, where: str, path) -> None:

    for key in section:
        if key not in keys:
            raise UserError(f"unknown recipe key '{where}.{key}' in {path}{_nearest(key, keys)}")
    for key in keys:
        if key not in section:
            raise UserError(f"recipe key '{where}.{key}' is missing in {path}")


def _integer(section: dict, key: str, path) -> int:

    value = section[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"run.{key} must be an integer, not {value!r} ({path})")
    return value


def _count(section: dict, key: str, path) -> int:

    value = _integer(section, key, path)
    if value < 1:
        raise UserError(f"run.{key} must be a positive integer, not {value!r} ({path})")
    return value


def _optional_count(section: dict, key: str, path) -> int | None:
    return None if section[key] is None else _count(section, key, path)


def _interval(section: dict, key: str, path) -> Interval | None:

    value = section[key]
    if value is None:
        return None
    match = _INTERVAL.match(str(value)) if not isinstance(value, bool) else None
    if not match or int(match.group(1)) < 1:
        raise UserError(f"run.{key} must be 'N epochs', 'N steps' (N >= 1) or null, not {value!r} ({path})")
    unit = match.group(2) if match.group(2).endswith("s") else match.group(2) + "s"
    return Interval(int(match.group(1)), unit)


def _target(target: dict, path) -> Target:
    from zoo.metrics import quality_metrics, unit_of

    metric, value, unit = target["metric"], target["value"], target["unit"]
    if metric not in quality_metrics():
        raise UserError(
            f"run.target.metric must be one of {', '.join(quality_metrics())}, not {metric!r} ({path})"
        )
    if unit != unit_of(metric):
        raise UserError(f"run.target.unit of {metric} is {unit_of(metric)!r}, not {unit!r} ({path})")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise UserError(f"run.target.value must be a number or null, not {value!r} ({path})")
    return Target(metric, None if value is None else float(value), unit)


def _nearest(key: str, known) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
