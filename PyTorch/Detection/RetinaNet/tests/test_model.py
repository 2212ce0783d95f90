"""Our RetinaNet against torchvision's: the same state dict names, the same anchors, heads and
detections from a torchvision retinanet_resnet50_fpn / _v2 state dict, the same loss as its head's
compute_loss; the trunk from a registry file."""

import pytest
import torch
from retinanet.boxes import decode, encode
from retinanet.loss import retinanet_loss
from retinanet.model import MEAN, STD, RetinaNet, detect, load_backbone_state, load_torchvision_state
from torchvision.ops import box_iou
from zoo.errors import UserError

SIZE = 96


def normalised(images: torch.Tensor) -> torch.Tensor:
    return (images - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]


def torchvision_pair(version: int, num_classes: int = 7):
    """A randomly initialised torchvision RetinaNet (fixed to SIZE x SIZE inputs) and ours with its state dict.
    The classification bias is raised so that many boxes clear the score threshold."""
    from torchvision.models.detection import retinanet_resnet50_fpn, retinanet_resnet50_fpn_v2

    build = retinanet_resnet50_fpn if version == 1 else retinanet_resnet50_fpn_v2
    torch.manual_seed(version)
    theirs = build(weights=None, weights_backbone=None, num_classes=num_classes, min_size=SIZE, max_size=SIZE)
    with torch.no_grad():
        theirs.head.classification_head.cls_logits.bias.fill_(-1.5)
    ours = RetinaNet(num_classes, {"backbone": "resnet50", "version": version})
    load_torchvision_state(ours, theirs.state_dict())
    return theirs.eval(), ours.eval()


@pytest.mark.parametrize("version", [1, 2])
def test_torchvision_weights_load_and_give_the_same_detections(version):
    theirs, ours = torchvision_pair(version)
    images = torch.rand(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = theirs(list(images))
        found = detect(ours, normalised(images))
    for want, (boxes, scores, labels) in zip(expected, found, strict=True):
        assert len(want["scores"]) > 10
        torch.testing.assert_close(scores, want["scores"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(boxes, want["boxes"], atol=1e-3, rtol=1e-5)
        assert torch.equal(labels, want["labels"])


def test_anchors_and_loss_equal_torchvisions():
    theirs, ours = torchvision_pair(1)
    images = torch.rand(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    boxes = torch.tensor([[[10.0, 12, 60, 70], [60, 20, 94, 50]], [[5, 5, 90, 90], [0, 0, 0, 0]]])
    labels = torch.tensor([[1, 3], [5, -1]])
    targets = [{"boxes": boxes[0], "labels": labels[0]}, {"boxes": boxes[1, :1], "labels": labels[1, :1]}]
    image_list, _ = theirs.transform(list(images))
    features = list(theirs.backbone(image_list.tensors).values())
    anchors = theirs.anchor_generator(image_list, features)
    torch.testing.assert_close(torch.cat(ours.anchors((SIZE, SIZE))), anchors[0], rtol=0, atol=0)
    outputs = theirs.head(features)
    matched = [theirs.proposal_matcher(box_iou(t["boxes"], a)) for t, a in zip(targets, anchors, strict=True)]
    want = theirs.head.compute_loss(targets, outputs, anchors, matched)
    logits, deltas = ours(normalised(images))
    classification, regression = retinanet_loss(logits, deltas, anchors[0], boxes, labels)
    torch.testing.assert_close(classification, want["classification"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(regression, want["bbox_regression"], rtol=1e-5, atol=1e-6)


def test_decode_inverts_encode():
    anchors = torch.tensor([[0.0, 0, 32, 32], [10, 20, 50, 40]])
    boxes = torch.tensor([[2.0, 3, 30, 40], [12, 18, 60, 44]])
    torch.testing.assert_close(decode(encode(boxes, anchors), anchors), boxes)


def test_backbone_weights_from_a_classification_state_dict():
    import torchvision

    model = RetinaNet(5, {"backbone": "resnet18", "fpn_channels": 32})
    source = torchvision.models.resnet18(weights=None).state_dict()
    assert load_backbone_state(model, source) == len([k for k in source if not k.startswith("fc.")])
    torch.testing.assert_close(model.backbone.body.conv1.weight, source["conv1.weight"])
    with pytest.raises(ValueError, match="not a resnet18"):
        load_backbone_state(model, {"head.weight": torch.zeros(1)})


def test_unknown_model_keys_are_one_line_errors():
    with pytest.raises(UserError, match="model.depth is not a RetinaNet setting"):
        RetinaNet(3, {"depth": 3})
    with pytest.raises(UserError, match="model.backbone 'vgg16'"):
        RetinaNet(3, {"backbone": "vgg16"})
    with pytest.raises(UserError, match="do not fit"):
        load_torchvision_state(
            RetinaNet(3, {"backbone": "resnet18", "fpn_channels": 32}), {"x": torch.zeros(1)}
        )
