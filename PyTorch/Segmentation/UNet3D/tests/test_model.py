"""The network: MLPerf's size and layout, shapes, and weights of another width refused in one line."""

import pytest
import torch
from unet3d.checkpoints import load_model_state
from unet3d.model import UNet3D, level_channels
from zoo.errors import UserError


def test_mlperf_layout_and_size():
    assert level_channels(32, 5) == [32, 64, 128, 256, 320]
    model = UNet3D(width=32, levels=5)
    assert sum(p.numel() for p in model.parameters()) == 31_190_243  # MLPerf's 3D U-Net: 31.2M parameters
    assert model.divisor == 32
    assert {name.split(".")[0] for name in model.state_dict()} == {
        "input_block", "downsample", "bottleneck", "upsample", "output"
    }  # fmt: skip


def test_output_has_the_input_grid_and_three_classes():
    model = UNet3D(width=2, levels=3)
    assert model(torch.randn(2, 1, 16, 16, 24)).shape == (2, 3, 16, 16, 24)


def test_weights_of_another_width_end_in_one_line(tmp_path):
    path = tmp_path / "wide.pt"
    torch.save({"model": UNet3D(width=4, levels=3).state_dict()}, path)
    with pytest.raises(UserError, match="does not fit this 3D U-Net"):
        load_model_state(UNet3D(width=2, levels=3), path)
