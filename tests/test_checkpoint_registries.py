"""Every model's pretrained-checkpoint registry and download_checkpoint.sh, checked the same way."""

from __future__ import annotations

import re

import pytest
from zoo.checkpoints import load_registry
from zoo_tree import ROOT, model_dirs, model_id

MODELS = model_dirs()
WRAPPER = ROOT / "PyTorch" / "Classification" / "ResNet50" / "scripts" / "download_checkpoint.sh"
# torchvision and torch.hub name a file <name>-<first hex digits of its sha256>.<ext>
HUB_DIGEST = re.compile(r"download\.pytorch\.org/models/[^/]+-([0-9a-f]{8,})\.\w+$")


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_registry_is_valid_and_pins_published_digests(model_dir):
    registry = load_registry(model_dir / "checkpoints.yaml")  # validates every field
    assert registry.names(), f"{model_id(model_dir)}/checkpoints.yaml lists no checkpoint"
    for entry in registry.entries():
        if match := HUB_DIGEST.search(entry.url):
            assert entry.sha256 == match.group(1), f"{entry.name}: pin the published digest {match.group(1)}"
        if entry.preprocessing is not None:
            assert entry.preprocessing.resize >= entry.preprocessing.crop


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_download_checkpoint_is_the_shared_wrapper(model_dir):
    script = model_dir / "scripts" / "download_checkpoint.sh"
    assert script.read_bytes() == WRAPPER.read_bytes(), f"{model_id(model_dir)}: a different wrapper"
    assert '-m zoo.checkpoints --registry "${MODEL_DIR}/checkpoints.yaml"' in WRAPPER.read_text()
