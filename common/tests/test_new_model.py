"""make new-model: the skeleton becomes a model directory in the one shape whose own tests pass."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest
from zoo.errors import UserError
from zoo.new_model import new_model
from zoo.recipe import load_recipe, run_config


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return new_model(tmp_path_factory.mktemp("tree") / "PyTorch" / "Classification" / "TinyNet", "tinynet")


def test_the_skeleton_is_renamed_everywhere(generated):
    files = [p for p in generated.rglob("*") if p.is_file()]
    assert (generated / "tinynet" / "engine.py").is_file() and not (generated / "skeleton").exists()
    left = [str(p) for p in files if "skeleton" in p.read_text().lower()]
    assert not left, f"files still naming the skeleton: {left}"
    assert all(os.access(p, os.X_OK) for p in (generated / "scripts").glob("*.sh"))
    assert "# TinyNet (PyTorch)" in (generated / "README.md").read_text()


def test_the_generated_model_is_in_the_shape(generated):
    for recipe in generated.glob("configs/*.yaml"):
        run_config(load_recipe(recipe), recipe)
    tree = ast.parse((generated / "tinynet" / "engine.py").read_text())
    loops = {n.name: n.end_lineno - n.lineno + 1 for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert loops["train_one_epoch"] <= 80 and loops["evaluate"] <= 80
    assert ".backward(" not in (generated / "tinynet" / "train.py").read_text()
    assert "save_training_checkpoint" in (generated / "tinynet" / "train.py").read_text()


def test_the_generated_model_trains_exports_and_serves(generated):
    """The generated model's own tests: it learns the digits, resumes exactly, evaluates from its
    checkpoint, exports with parity and is served by the real tritonserver."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=generated, capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert re.search(r"^6 passed", result.stdout, re.M), result.stdout[-500:]


def test_bad_names_are_one_line(tmp_path, generated):
    with pytest.raises(UserError, match="PyTorch/<Domain>/<Model>"):
        new_model(tmp_path / "PyTorch" / "Nowhere" / "X", "x")
    with pytest.raises(UserError, match="lower-case Python name"):
        new_model(tmp_path / "PyTorch" / "Classification" / "X", "My-Net")
    with pytest.raises(UserError, match="already exists"):
        new_model(generated, "tinynet")
