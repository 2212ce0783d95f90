"""The model-directory contract of ARCHITECTURE.md, checked for every model in the tree."""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from zoo_tree import model_dirs, model_env, model_id

REQUIRED_FILES = ["README.md", "Dockerfile", "requirements.txt"]
REQUIRED_SCRIPTS = [
    "download_data.sh",
    "download_checkpoint.sh",
    "train.sh",
    "evaluate.sh",
    "benchmark.sh",
    "export_triton.sh",
    "deploy_triton.sh",
]
MODELS = model_dirs()


def test_there_are_models():
    assert MODELS, "no <Framework>/<Domain>/<Model>/README.md found"


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_required_layout(model_dir):
    missing = [f for f in REQUIRED_FILES if not (model_dir / f).is_file()]
    missing += [f"scripts/{s}" for s in REQUIRED_SCRIPTS if not (model_dir / "scripts" / s).is_file()]
    if not list(model_dir.glob("configs/*.yaml")):
        missing.append("configs/*.yaml")
    if not list(model_dir.glob("tests/test_*.py")):
        missing.append("tests/test_*.py")
    packages = [p.parent for p in model_dir.glob("*/__init__.py") if p.parent.name != "tests"]
    if not packages:
        missing.append("<package>/__init__.py")
    assert not missing, f"{model_id(model_dir)} lacks {missing}"


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_scripts_are_executable(model_dir):
    scripts = sorted((model_dir / "scripts").glob("*.sh"))
    not_executable = [s.name for s in scripts if not os.access(s, os.X_OK)]
    assert not not_executable, f"not executable: {not_executable}"
    no_shebang = [s.name for s in scripts if not s.read_text().startswith("#!")]
    assert not no_shebang, f"no #! line: {no_shebang}"


def _help(script, env):
    proc = subprocess.run(
        ["bash", str(script), "--help"], capture_output=True, text=True, env=env, timeout=240
    )
    return script.name, proc


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_every_script_answers_help(model_dir):
    env = model_env(model_dir)
    scripts = sorted((model_dir / "scripts").glob("*.sh"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda s: _help(s, env), scripts))
    for name, proc in results:
        assert proc.returncode == 0, f"{name} --help exited {proc.returncode}: {proc.stderr[-800:]}"
        assert "usage" in (proc.stdout + proc.stderr).lower(), f"{name} --help printed no usage"


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_dockerfile_builds_on_the_framework_base(model_dir):
    text = (model_dir / "Dockerfile").read_text()
    framework = model_id(model_dir).split(os.sep)[0].lower()
    assert f"ARG BASE_IMAGE=zoo/{framework}:" in text, (
        "Dockerfile must take ARG BASE_IMAGE=zoo/<framework>:<tag>"
    )
    assert "FROM ${BASE_IMAGE}" in text
