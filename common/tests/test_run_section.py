"""The run: section every recipe shares (zoo.recipe.run_config) and the flags that set it (zoo.cli)."""

from __future__ import annotations

import argparse

import pytest
import zoo.cli
from zoo.errors import UserError
from zoo.recipe import Interval, load_recipe, run_config

RUN = """\
run:
  precision: bf16
  batch_per_gpu: 256
  accumulation: 1
  epochs: 90
  steps: null
  log_every: 20
  eval_every: 1 epoch
  checkpoint_every: 500 steps
  keep_checkpoints: 3
  seed: 0
  target: {metric: top1, value: null, unit: "%"}
model:
  width: 64
"""


@pytest.fixture
def recipe_file(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text(RUN)
    return path


def test_run_section_is_typed(recipe_file):
    run = run_config(load_recipe(recipe_file, {"run.batch_per_gpu": "128", "run.target.value": "75.9"}))
    assert run.batch_per_gpu == 128 and run.epochs == 90 and run.steps is None
    assert run.eval_every == Interval(1, "epochs") and run.checkpoint_every == Interval(500, "steps")
    assert run.keep_checkpoints == 3
    assert run.target.metric == "top1" and run.target.value == 75.9 and run.target.unit == "%"
    assert run.target.reached(75.9) and not run.target.reached(75.89)


@pytest.mark.parametrize(
    "override, message",
    [
        ({"run.batch_per_gpu": "0"}, "run.batch_per_gpu must be a positive integer"),
        ({"run.batch_per_gpu": "many"}, "run.batch_per_gpu must be an integer"),
        ({"run.precision": "fp8"}, "run.precision must be one of bf16, fp16, fp32"),
        ({"run.eval_every": "2 weeks"}, "run.eval_every must be 'N epochs', 'N steps'"),
        ({"run.steps": "10"}, "set exactly one of run.epochs and run.steps"),
        ({"run.target.unit": "fraction"}, "run.target.unit of top1 is '%'"),
        ({"run.target.metric": "accuracy"}, "run.target.metric must be one of"),
        ({"run.seed": "1.5"}, "run.seed must be an integer"),
        ({"run.keep_checkpoints": "0"}, "run.keep_checkpoints must be a positive integer"),
    ],
)
def test_a_bad_run_value_names_the_key_and_the_file(recipe_file, override, message):
    with pytest.raises(UserError) as failure:
        load_recipe(recipe_file, override)
    assert message in str(failure.value) and str(recipe_file) in str(failure.value)


def test_a_missing_or_unknown_run_key_is_named(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(RUN.replace("  seed: 0\n", "  sead: 0\n"))
    with pytest.raises(UserError, match=r"unknown recipe key 'run.sead' .*did you mean 'seed'"):
        load_recipe(path)
    path.write_text(RUN.replace("  seed: 0\n", ""))
    with pytest.raises(UserError, match=r"'run.seed' is missing in .*r.yaml"):
        load_recipe(path)


def test_interval_due():
    every_two = Interval(2, "epochs")
    assert [every_two.due(epoch, 0) for epoch in range(5)] == [False, False, True, False, True]
    assert Interval(100, "steps").due(3, 300) and not Interval(100, "steps").due(3, 301)


def test_shared_flags_set_the_run_section(recipe_file):
    parser = argparse.ArgumentParser()
    zoo.cli.add_run_args(parser, default_recipe=recipe_file)
    zoo.cli.add_target_arg(parser, "top1", unit="%", example=75.9)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--width", type=int)
    args = parser.parse_args(["--amp", "fp16", "--batch-size", "64", "--target-top1", "76", "--width", "8"])
    recipe = zoo.cli.recipe_from_args(args, {"width": "model.width"})
    run = run_config(recipe)
    assert (run.precision, run.batch_per_gpu, run.target.value) == ("fp16", 64, 76.0)
    assert recipe["model"]["width"] == 8


def test_giving_one_length_clears_the_other(recipe_file):
    parser = argparse.ArgumentParser()
    zoo.cli.add_run_args(parser, default_recipe=recipe_file)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--epochs", type=int)
    run = run_config(zoo.cli.recipe_from_args(parser.parse_args(["--steps", "200"])))
    assert (run.epochs, run.steps) == (None, 200)
    run = run_config(zoo.cli.recipe_from_args(parser.parse_args(["--set", "run.steps=50"])))
    assert (run.epochs, run.steps) == (None, 50)
    with pytest.raises(UserError, match="set exactly one of run.epochs and run.steps"):
        zoo.cli.recipe_from_args(parser.parse_args(["--set", "run.steps=50", "--set", "run.epochs=2"]))
