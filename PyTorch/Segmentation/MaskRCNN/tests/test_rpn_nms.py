"""The batched RPN NMS (maskrcnn.rpn_nms) against torchvision's filter: same keep sets, same proposals
in the same order. Without a GPU the Triton kernels run in Triton's interpreter (small cases); with
one, the full-size case runs compiled."""

import copy

import pytest
import torch
from maskrcnn.rpn_nms import INTERPRETED, BatchedNMSRegionProposalNetwork, greedy_nms_keep
from torchvision.models.detection.rpn import RegionProposalNetwork
from torchvision.ops import nms
from zoo.errors import UserError

interpreted = INTERPRETED  # conftest.py turns Triton's interpreter on where there is no GPU
# 0/0 IoU of two zero-area boxes is NaN, "not above the threshold", as in torchvision's kernels
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")


def random_boxes(n: int, size: float, generator, *, dtype=torch.float32) -> torch.Tensor:
    """xyxy boxes around ``size``: exact and jittered duplicates (IoUs near any threshold), zero
    width and height, and boxes reaching out of the image."""
    xy = torch.rand(n, 2, generator=generator) * size
    wh = torch.rand(n, 2, generator=generator) * size / 3 + 1
    boxes = torch.cat([xy - wh / 2, xy + wh / 2], dim=1)
    shuffled, m = torch.randperm(n, generator=generator).tolist(), n // 16
    part = [shuffled[k * m : (k + 1) * m] for k in range(16)]
    boxes[part[0]] = boxes[part[1]]
    copies, originals = sum(part[2:8], []), sum(part[8:14], [])
    boxes[copies] = boxes[originals] + torch.randn(len(copies), 4, generator=generator)
    boxes[part[14], 2] = boxes[part[14], 0]
    boxes[part[15], 3] = boxes[part[15], 1]
    return boxes.round(decimals=1).to(dtype)  # coarse coordinates: exact IoU ties occur


def make_rpn(pre_nms_top_n: int, post_nms_top_n: int, *, score_thresh=0.0, nms_thresh=0.7):
    torchvision_rpn = RegionProposalNetwork(
        None,
        None,
        fg_iou_thresh=0.7,
        bg_iou_thresh=0.3,
        batch_size_per_image=256,
        positive_fraction=0.5,
        pre_nms_top_n={"training": pre_nms_top_n, "testing": pre_nms_top_n},
        post_nms_top_n={"training": post_nms_top_n, "testing": post_nms_top_n},
        nms_thresh=nms_thresh,
        score_thresh=score_thresh,
    )
    batched = copy.copy(torchvision_rpn)
    batched.__class__ = BatchedNMSRegionProposalNetwork
    return torchvision_rpn, batched


def rpn_inputs(
    anchors_per_level, image_shapes, seed: int, *, dtype=torch.float32, score_dtype=None, coarse_scores=True
):
    g = torch.Generator().manual_seed(seed)
    total = sum(anchors_per_level)
    size = max(max(s) for s in image_shapes)
    proposals = torch.stack([random_boxes(total, size * 1.1, g, dtype=dtype) for _ in image_shapes])
    objectness = torch.randn(len(image_shapes), total, generator=g)
    if coarse_scores:
        objectness = objectness.round(decimals=1)  # many equal scores
    return proposals, objectness.to(score_dtype or dtype).reshape(-1, 1)


def assert_same_proposals(want, got):
    assert len(got[0]) == len(want[0])
    for (wb, ws), (gb, gs) in zip(zip(*want, strict=True), zip(*got, strict=True), strict=True):
        assert gb.dtype == wb.dtype and gs.dtype == ws.dtype
        assert gb.shape == wb.shape, (gb.shape, wb.shape)
        assert torch.equal(gb, wb)
        assert torch.equal(gs, ws)


@pytest.mark.skipif(not interpreted, reason="the kernels run on CPU only in Triton's interpreter")
@pytest.mark.parametrize("threshold", [0.7, 0.5, 0.0])
def test_greedy_keep_equals_torchvision_nms(threshold):
    g = torch.Generator().manual_seed(3)
    n, counts = 100, [100, 37, 0, 64, 1]
    boxes = torch.stack([random_boxes(n, 50.0, g) for _ in counts])
    keep = greedy_nms_keep(boxes, torch.tensor(counts), threshold)
    assert keep.shape == (len(counts), n)
    for pair, count in enumerate(counts):
        descending = torch.arange(count, 0, -1, dtype=torch.float32)  # boxes are given in score order
        want = torch.zeros(n, dtype=torch.bool)
        want[nms(boxes[pair, :count], descending, threshold)] = True
        assert torch.equal(keep[pair], want), pair
    assert 0 < keep.sum() < sum(counts)  # the case suppresses some boxes, not all


@pytest.mark.skipif(not interpreted, reason="the kernels run on CPU only in Triton's interpreter")
@pytest.mark.parametrize(
    ("dtype", "score_thresh", "coarse_scores", "training"),
    [
        (torch.float32, 0.0, True, True),
        (torch.float32, 0.5, False, False),
        (torch.bfloat16, 0.0, True, True),  # autocast's dtype: the level shift rounds in bf16
    ],
)
def test_filter_proposals_equals_torchvision(dtype, score_thresh, coarse_scores, training):
    anchors_per_level = [300, 160, 64, 40, 9]  # the last three levels have fewer boxes than the top-n
    image_shapes = [(100, 120), (90, 60), (128, 128)]
    reference, batched = make_rpn(64, 150, score_thresh=score_thresh)
    reference.train(training)
    batched.train(training)
    proposals, objectness = rpn_inputs(
        anchors_per_level, image_shapes, 5, dtype=dtype, coarse_scores=coarse_scores
    )
    # bf16 as in training: under autocast, whose NMS computes in float32
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        want = reference.filter_proposals(proposals, objectness, image_shapes, anchors_per_level)
        got = batched.filter_proposals(proposals, objectness, image_shapes, anchors_per_level)
    assert_same_proposals(want, got)
    assert all(0 < len(b) < 64 * 5 for b in want[0])  # NMS removed some, kept some


@pytest.mark.skipif(not interpreted, reason="the kernels run on CPU only in Triton's interpreter")
def test_filter_proposals_with_images_left_without_boxes():
    anchors_per_level = [50, 20]
    image_shapes = [(60, 60), (50, 70)]
    reference, batched = make_rpn(32, 40, score_thresh=0.8)
    proposals, objectness = rpn_inputs(anchors_per_level, image_shapes, 2, coarse_scores=False)
    objectness[: sum(anchors_per_level)] = -5.0  # the first image: every score under the threshold
    want = reference.filter_proposals(proposals, objectness, image_shapes, anchors_per_level)
    got = batched.filter_proposals(proposals, objectness, image_shapes, anchors_per_level)
    assert_same_proposals(want, got)
    assert len(got[0][0]) == 0 and got[0][0].shape == (0, 4) and len(got[0][1]) > 0


@pytest.mark.skipif(not interpreted, reason="the kernels run on CPU only in Triton's interpreter")
def test_filter_proposals_level_by_level_regime_and_post_nms_cut():
    # Over 1,000 boxes an image: torchvision's CPU batched_nms runs NMS per level on unshifted boxes,
    # then orders the kept boxes with an unstable sort, so scores here are distinct (float32)
    anchors_per_level = [400, 300, 300, 300, 100]
    image_shapes = [(200, 180), (150, 200)]
    proposals, objectness = rpn_inputs(
        anchors_per_level,
        image_shapes,
        7,
        dtype=torch.bfloat16,
        score_dtype=torch.float32,
        coarse_scores=False,
    )
    sizes = {}
    for post_nms_top_n in (1200, 200):  # every kept box, then the top 200 of them
        reference, batched = make_rpn(300, post_nms_top_n)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want = reference.filter_proposals(proposals, objectness, image_shapes, anchors_per_level)
            got = batched.filter_proposals(proposals, objectness, image_shapes, anchors_per_level)
        assert_same_proposals(want, got)
        sizes[post_nms_top_n] = [len(b) for b in got[0]]
    assert all(200 < k < 1200 for k in sizes[1200]) and sizes[200] == [200, 200]


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:FutureWarning")
def test_tracing_and_plain_cpu_use_torchvision_filter(monkeypatch):
    from maskrcnn import rpn_nms

    monkeypatch.setattr(rpn_nms, "INTERPRETED", True)
    seen = []
    torch.jit.trace(
        lambda x: seen.append(rpn_nms._runs_kernels(x)) or x + 1, torch.zeros(1), check_trace=False
    )
    assert seen == [False]  # ONNX export traces: torchvision's filter goes into the graph
    assert rpn_nms._runs_kernels(torch.zeros(1))

    reference, batched = make_rpn(64, 150)
    proposals, objectness = rpn_inputs([100, 40], [(80, 80)], 1)
    monkeypatch.setattr(rpn_nms, "INTERPRETED", False)  # a CPU without the interpreter: torchvision's filter
    calls = []
    monkeypatch.setattr(
        BatchedNMSRegionProposalNetwork, "_batched_filter_proposals", lambda *a: calls.append(a)
    )
    got = batched.filter_proposals(proposals, objectness, [(80, 80)], [100, 40])
    assert calls == []
    assert_same_proposals(reference.filter_proposals(proposals, objectness, [(80, 80)], [100, 40]), got)


def test_recipe_key_selects_the_filter():
    from maskrcnn.model import build_model, model_from_recipe

    recipe = {"model": {"variant": "tiny"}, "data": {"min_size": 64, "max_size": 96}}
    assert type(model_from_recipe(recipe, 3).rpn) is RegionProposalNetwork
    recipe["speed"] = {"rpn_nms": "batched"}
    model = model_from_recipe(recipe, 3)
    assert type(model.rpn) is BatchedNMSRegionProposalNetwork
    assert model.state_dict().keys() == build_model(3, variant="tiny").state_dict().keys()
    recipe["speed"] = {"rpn_nms": "fast"}
    with pytest.raises(UserError, match="speed.rpn_nms must be one of batched, torchvision"):
        model_from_recipe(recipe, 3)


@pytest.mark.skipif(not interpreted, reason="the kernels run on CPU only in Triton's interpreter")
def test_model_detections_equal_with_either_filter():
    from maskrcnn.model import build_model
    from maskrcnn.rpn_nms import use_rpn_nms

    settings = {"min_size": 96, "max_size": 128, "rpn_pre_nms_top_n_test": 60, "box_score_thresh": 0.0}
    torch.manual_seed(0)
    model = build_model(4, variant="tiny", frozen_bn=False, **settings).eval()
    images = [torch.rand(3, 90, 110, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    with torch.no_grad():
        want = model(images)
        got = use_rpn_nms(model, "batched")(images)
    assert len(want[0]["boxes"]) > 0
    for w, o in zip(want, got, strict=True):
        for key in ("boxes", "scores", "labels", "masks"):
            assert torch.equal(o[key], w[key]), key


@pytest.mark.skipif(not torch.cuda.is_available(), reason="full-size RPN shapes need a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_full_size_on_gpu_equals_torchvision(dtype):
    # 8 images of 800x800: 3 anchors per location on 200, 100, 50, 25 and 13 pixel grids
    anchors_per_level = [3 * s * s for s in (200, 100, 50, 25, 13)]
    image_shapes = [(800, 800)] * 4 + [(800, 608), (608, 800), (800, 704), (736, 800)]
    reference, batched = make_rpn(2000, 1000)
    proposals, objectness = rpn_inputs(anchors_per_level, image_shapes, 11, dtype=dtype, coarse_scores=False)
    proposals, objectness = proposals.cuda(), objectness.cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        want = reference.filter_proposals(proposals, objectness, image_shapes, anchors_per_level)
        got = batched.filter_proposals(proposals, objectness, image_shapes, anchors_per_level)
    assert_same_proposals(want, got)
