"""Every config.pbtxt kept in the tree parses into Triton's ModelConfig protobuf."""

from __future__ import annotations

import pytest
from zoo_tree import ROOT

CONFIGS = sorted(p for p in ROOT.glob("**/config.pbtxt") if ".venv" not in p.parts)


@pytest.mark.skipif(not CONFIGS, reason="no config.pbtxt is kept in the tree; models generate theirs")
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_config_parses(path):
    from zoo.triton.repository import parse_pbtxt

    config = parse_pbtxt(path.read_text())
    assert config.name, f"{path} has no name"
