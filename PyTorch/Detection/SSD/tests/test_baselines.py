"""The benchmark's main baseline is our network written with torchvision's SSD class: same parameters,
same default boxes, same loss settings."""

import pytest
import torch
from ssd.baselines import default_box_generator, torchvision_ssd300_vgg16, torchvision_ssd_resnet50
from ssd.boxes import default_boxes
from ssd.model import SSD300


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_torchvision_ssd_has_our_parameters_boxes_and_loss_settings():
    ours, theirs = SSD300(num_classes=81), torchvision_ssd_resnet50(num_classes=81)
    assert parameter_count(theirs) == parameter_count(ours) == 22_894_902
    # Layer by layer: the same tensor shapes in the same order (trunk, extras, then the heads).
    shapes = sorted(tuple(p.shape) for p in ours.parameters())
    assert sorted(tuple(p.shape) for p in theirs.parameters()) == shapes
    with torch.no_grad():
        features = list(theirs.backbone.eval()(torch.zeros(1, 3, 300, 300)).values())
    assert [f.shape[-1] for f in features] == [38, 19, 10, 5, 3, 1]
    assert [f.shape[1] for f in features] == [1024, 512, 512, 256, 256, 256]
    assert theirs.anchor_generator.num_anchors_per_location() == [4, 6, 6, 6, 4, 4]
    # torchvision's default boxes (cx, cy, w, h) are ours in the same order, except that ours (as
    # NVIDIA's SSD300) also clamp the centres of the last column/row of the 10x10 map (step 32) to 1.
    grid = [list(f.shape[-2:]) for f in features]
    boxes = default_box_generator()._grid_default_boxes(grid, [300, 300])
    assert boxes.shape == (8732, 4)
    assert int((boxes - default_boxes()).abs().gt(1e-6).sum()) == 120
    assert float(boxes.max()) == pytest.approx(9.5 / (300 / 32))
    torch.testing.assert_close(boxes.clamp(0, 1), default_boxes(), atol=1e-6, rtol=0)
    # Loss: three negatives per positive; offsets scaled as our variances 0.1 (centre), 0.2 (size).
    assert theirs.neg_to_pos_ratio == 3.0
    assert theirs.box_coder.weights == (10.0, 10.0, 5.0, 5.0)
    # Post-processing as ours: score 0.05, 200 candidates per class, NMS 0.5, 200 per image.
    assert (theirs.score_thresh, theirs.topk_candidates, theirs.nms_thresh, theirs.detections_per_img) == (
        0.05,
        200,
        0.5,
        200,
    )


def test_torchvision_ssd_loss_equals_ours_on_its_own_head_outputs():
    from ssd.boxes import match
    from ssd.loss import SSDLoss

    torch.manual_seed(0)
    model = torchvision_ssd_resnet50(num_classes=4).train()
    for module in model.modules():  # one image: BatchNorm on its running statistics (1x1 maps)
        if isinstance(module, torch.nn.BatchNorm2d):
            module.eval()
    image = torch.rand(3, 300, 300)
    boxes, labels = (
        torch.tensor([[30.0, 40.0, 150.0, 200.0], [160.0, 90.0, 260.0, 250.0]]),
        torch.tensor([1, 3]),
    )
    losses = model([image], [{"boxes": boxes, "labels": labels}])  # as a user calls it
    assert set(losses) == {"bbox_regression", "classification"}
    # The same head outputs (its transform only normalises a 300x300 image) under our matching and loss.
    mean, std = torch.tensor(model.transform.image_mean), torch.tensor(model.transform.image_std)
    with torch.no_grad():
        head = model.head(
            list(model.backbone(((image - mean[:, None, None]) / std[:, None, None])[None]).values())
        )
    loc_target, cls_target = match(boxes[None] / 300, labels[None], default_boxes())
    ours = SSDLoss(neg_pos_ratio=3)(head["bbox_regression"], head["cls_logits"], loc_target, cls_target)
    theirs = losses["bbox_regression"] + losses["classification"]
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-4)
    assert ours.item() > 1.0  # random heads: a real loss, not a trivial zero


def test_ssd300_vgg16_is_the_second_labelled_baseline():
    vgg = torchvision_ssd300_vgg16()
    assert parameter_count(vgg) == 35_641_826  # VGG-16: not our network
    assert vgg.head.classification_head.module_list[0].out_channels == 4 * 91
