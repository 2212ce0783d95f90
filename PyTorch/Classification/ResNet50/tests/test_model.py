import torch
import torchvision
from resnet50.model import Bottleneck, resnet50


def test_parameter_count_imagenet():
    assert sum(p.numel() for p in resnet50().parameters()) == 25_557_032


def test_forward_shapes():
    model = resnet50(num_classes=10).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 64, 64)).shape == (2, 10)
        assert model.features(torch.randn(1, 3, 32, 32)).shape == (1, 2048)


def test_v1_5_stride_in_3x3_conv():
    model = resnet50()
    first = model.layer2[0]
    assert isinstance(first, Bottleneck)
    assert first.conv1.stride == (1, 1) and first.conv2.stride == (2, 2)
    assert model.layer2[0].downsample[0].stride == (2, 2)


def test_torchvision_weights_load_and_agree():
    reference = torchvision.models.resnet50().eval()
    model = resnet50().eval()
    model.load_state_dict(reference.state_dict(), strict=True)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x))


def test_zero_init_residual():
    model = resnet50(zero_init_residual=True)
    assert all(float(b.bn3.weight.abs().sum()) == 0 for b in model.modules() if isinstance(b, Bottleneck))
