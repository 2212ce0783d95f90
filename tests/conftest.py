"""Fixtures for the repo-wide checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from zoo_tree import ROOT


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT
