"""ruff format and ruff check are clean over the whole tree (CONTRIBUTING.md, `make lint`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from zoo_tree import ROOT

RUFF = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")


def test_ruff_check():
    assert RUFF, "ruff not found: run `make setup-pytorch`"
    proc = subprocess.run([RUFF, "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:]


def test_ruff_format():
    proc = subprocess.run(
        [RUFF, "format", "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
