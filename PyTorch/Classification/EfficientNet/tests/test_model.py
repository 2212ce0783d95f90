"""The network: timm's EfficientNet weights load into ours with equal outputs (B0, B4, a tiny width), the
published sizes, the WideSE squeeze-excitation widths, and stochastic depth."""

import pytest
import timm
import torch
from efficientnet.model import VARIANTS, efficientnet
from timm.models.efficientnet import _gen_efficientnet


def _same_outputs(ours, theirs, size: int) -> None:
    ours.load_state_dict(theirs.state_dict())  # strict: every key and shape is timm's
    images = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(images), theirs.eval()(images), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["b0", "b4"])
def test_timm_weights_load_and_agree(variant):
    """timm cannot download here: its randomly initialised model stands in for the pretrained file."""
    torch.manual_seed(0)
    theirs = timm.create_model(f"efficientnet_{variant}", pretrained=False)
    _same_outputs(efficientnet(variant), theirs, 64)


def test_tiny_width_matches_timm_too():
    theirs = _gen_efficientnet("efficientnet_b0", channel_multiplier=0.25, pretrained=False, num_classes=10)
    _same_outputs(efficientnet("b0", width=0.25, num_classes=10), theirs, 32)


def test_published_sizes():
    counts = {v: sum(p.numel() for p in efficientnet(v).parameters()) for v in ("b0", "b4")}
    assert counts == {"b0": 5_288_548, "b4": 19_341_616}  # timm's efficientnet_b0 / b4
    assert VARIANTS["b4"].image_size == 380 and VARIANTS["b4"].dropout == 0.4


def test_wide_se_follows_the_expanded_width():
    plain, wide = efficientnet("b0"), efficientnet("b0", wide_se=True)
    block, wide_block = plain.blocks[1][0], wide.blocks[1][0]  # 16 -> 96 expanded channels
    assert block.se.conv_reduce.out_channels == 4 and wide_block.se.conv_reduce.out_channels == 24
    assert sum(p.numel() for p in wide.parameters()) > sum(p.numel() for p in plain.parameters())
    assert wide.eval()(torch.randn(1, 3, 32, 32)).shape == (1, 1000)


def test_stochastic_depth_only_in_training():
    model = efficientnet("b0", width=0.25, num_classes=10, drop_path_rate=0.5)
    rates = [block.drop_rate for stage in model.blocks for block in stage]
    assert rates[0] == 0.0 and rates == sorted(rates) and rates[-1] < 0.5
    images = torch.randn(4, 3, 32, 32)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(images), model(images))
