import pytest
import torch
from maskrcnn.model import build_model, load_backbone_state, load_torchvision_state
from zoo.errors import UserError


def randomise_batchnorm(model):
    """Non-trivial running statistics and affine values, so frozen BN must load them to agree."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)


def freeze_batchnorm(module):
    """Swap BatchNorm2d for FrozenBatchNorm2d (same buffers), as torchvision's pretrained v1 trunk is."""
    from torchvision.ops.misc import FrozenBatchNorm2d

    for name, child in module.named_children():
        if isinstance(child, torch.nn.BatchNorm2d):
            frozen = FrozenBatchNorm2d(child.num_features, eps=child.eps)
            for key in ("weight", "bias", "running_mean", "running_var"):
                getattr(frozen, key).copy_(getattr(child, key).detach())
            setattr(module, name, frozen)
        else:
            freeze_batchnorm(child)


@pytest.mark.parametrize("variant", ["v1", "v2"])
def test_torchvision_state_dict_loads_and_outputs_agree(tmp_path, variant):
    from torchvision.models.detection import maskrcnn_resnet50_fpn, maskrcnn_resnet50_fpn_v2

    builder = maskrcnn_resnet50_fpn if variant == "v1" else maskrcnn_resnet50_fpn_v2
    settings = {"min_size": 160, "max_size": 192, "box_score_thresh": 0.0, "box_detections_per_img": 30}
    torch.manual_seed(0)
    reference = builder(weights=None, weights_backbone=None, num_classes=91, **settings).eval()
    randomise_batchnorm(reference)
    torch.save(reference.state_dict(), tmp_path / "tv.pt")
    # Frozen and plain BatchNorm round differently; the same arithmetic makes the outputs equal.
    freeze_batchnorm(reference.backbone.body)

    ours = build_model(91, variant=variant, **settings).eval()
    load_torchvision_state(ours, torch.load(tmp_path / "tv.pt", weights_only=True))
    image = torch.rand(3, 150, 170, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = reference([image])[0]
        got = ours([image])[0]
    assert len(want["boxes"]) > 0
    for key in ("boxes", "scores", "labels", "masks"):
        assert got[key].shape == want[key].shape, key
        torch.testing.assert_close(got[key], want[key], rtol=1e-5, atol=1e-5)
    # The trunk is frozen BatchNorm (what MLPerf trains), torchvision's random-init model plain BatchNorm.
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in ours.backbone.body.modules())


def test_other_layout_is_refused():
    from torchvision.models.detection import maskrcnn_resnet50_fpn_v2

    v2 = maskrcnn_resnet50_fpn_v2(weights=None, weights_backbone=None, num_classes=91)
    with pytest.raises(RuntimeError):
        load_torchvision_state(build_model(91, variant="v1"), v2.state_dict())


def test_backbone_init_from_imagenet_resnet50_layout():
    from torchvision.models import resnet50

    trunk = resnet50(weights=None)
    with torch.no_grad():
        trunk.conv1.weight.fill_(0.25)
    model = build_model(91)
    assert load_backbone_state(model, trunk.state_dict()) == 265  # every trunk tensor but fc.*
    assert torch.equal(model.backbone.body.conv1.weight, trunk.conv1.weight)
    with pytest.raises(ValueError, match="trunk tensors missing"):
        load_backbone_state(model, {"fc.weight": torch.zeros(1)})


def test_unknown_variant_is_one_line():
    with pytest.raises(UserError, match="unknown Mask R-CNN variant 'v3'"):
        build_model(91, variant="v3")


def test_converted_torchvision_file_is_read_by_evaluate_detect_and_export(tmp_path):
    from maskrcnn.checkpoints import convert_torchvision
    from maskrcnn.evaluate import load_model
    from torchvision.models.detection import maskrcnn_resnet50_fpn

    torch.manual_seed(0)
    torch.save(maskrcnn_resnet50_fpn(weights=None, weights_backbone=None).state_dict(), tmp_path / "tv.pt")
    out = convert_torchvision(tmp_path / "tv.pt", tmp_path / "model.pt", variant="v1")
    model, state = load_model(str(out), "cpu")
    assert state["recipe"]["model"]["variant"] == "v1" and state["num_classes"] == 91
    with pytest.raises(UserError, match="not a torchvision Mask R-CNN v2 state dict"):
        convert_torchvision(tmp_path / "tv.pt", tmp_path / "v2.pt", variant="v2")
    assert not (tmp_path / "v2.pt").exists()
