import math

import pytest
import torch
from ssd.boxes import (
    SSD300,
    box_iou,
    cxcywh_to_xyxy,
    decode,
    default_boxes,
    encode,
    match,
    postprocess,
)
from ssd.loss import SSDLoss
from ssd.model import SSD300 as SSD300Model


def test_default_box_count_and_geometry():
    db = default_boxes()
    assert db.shape == (8732, 4)
    assert SSD300.boxes_per_location == (4, 6, 6, 6, 4, 4)
    assert db.min() >= 0 and db.max() <= 1
    # First location of the 38x38 map: centre (0.5 / 37.5), small box 21/300, then sqrt(21*45)/300.
    c = 0.5 / 37.5
    torch.testing.assert_close(db[0], torch.tensor([c, c, 0.07, 0.07]))
    torch.testing.assert_close(db[1, 2], torch.tensor(math.sqrt(21 * 45) / 300))
    # Aspect-ratio 2 pair: w = s*sqrt(2), h = s/sqrt(2), then swapped.
    torch.testing.assert_close(db[2, 2:], torch.tensor([0.07 * math.sqrt(2), 0.07 / math.sqrt(2)]))
    torch.testing.assert_close(db[3, 2:], db[2, 2:].flip(0))
    # The 1x1 map: squares of 261/300 and sqrt(261*315)/300 centred in the image, then the 2:1 pair.
    torch.testing.assert_close(db[-4:, :2], torch.full((4, 2), 0.5))
    assert db[-4, 2] == pytest.approx(261 / 300) and db[-3, 3] == pytest.approx(math.sqrt(261 * 315) / 300)
    assert db[-1, 3] == pytest.approx(min(1.0, 0.87 * math.sqrt(2)))


def test_model_output_matches_default_boxes():
    model = SSD300Model(num_classes=5).eval()
    with torch.no_grad():
        feats = model.feature_maps(torch.zeros(1, 3, 300, 300))
        loc, logits = model(torch.zeros(1, 3, 300, 300))
    assert [f.shape[-1] for f in feats] == [38, 19, 10, 5, 3, 1]
    assert loc.shape == (1, 8732, 4) and logits.shape == (1, 8732, 5)
    n_params = sum(p.numel() for p in SSD300Model().parameters())
    assert 22.5e6 < n_params < 23.3e6


def test_encode_decode_round_trip():
    db = default_boxes()
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(8732, 2, generator=g) * 0.6
    boxes = torch.cat([xy, xy + 0.05 + torch.rand(8732, 2, generator=g) * 0.3], -1)
    torch.testing.assert_close(decode(encode(boxes, db), db), boxes, atol=1e-5, rtol=1e-5)


def test_match_batched_equals_per_image_and_keeps_every_object():
    db = default_boxes()
    boxes = torch.tensor(
        [
            [[0.1, 0.1, 0.4, 0.5], [0.5, 0.5, 0.9, 0.95], [0.0, 0.0, 0.0, 0.0]],
            [[0.3, 0.2, 0.32, 0.23], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]],  # a tiny box, padding
        ]
    )
    labels = torch.tensor([[3, 7, 0], [2, 0, 0]])
    loc, cls = match(boxes, labels, db)
    assert loc.shape == (2, 8732, 4) and cls.shape == (2, 8732)
    # The tiny box overlaps no default box by 0.5 but still claims its best one.
    iou = box_iou(boxes[1, :1], cxcywh_to_xyxy(db))[0]
    assert iou.max() < 0.5 and cls[1, iou.argmax()] == 2 and (cls[1] > 0).sum() == 1
    assert set(cls[0].unique().tolist()) == {0, 3, 7}
    for i in range(2):
        n = int((labels[i] > 0).sum())
        loc1, cls1 = match(boxes[i : i + 1, :n], labels[i : i + 1, :n], db)
        torch.testing.assert_close(cls1[0], cls[i])
        torch.testing.assert_close(loc1[0], loc[i])
    # Positives decode back to their object.
    pos = cls[0] == 7
    torch.testing.assert_close(
        decode(loc[0, pos], db[pos]), boxes[0, 1].expand(int(pos.sum()), 4), atol=1e-5, rtol=0
    )


def test_loss_hard_negative_mining_and_perfect_prediction():
    db = default_boxes()
    boxes = torch.tensor([[[0.1, 0.1, 0.4, 0.5]]])
    labels = torch.tensor([[1]])
    loc_t, cls_t = match(boxes, labels, db)
    logits = torch.zeros(1, 8732, 3)
    good = logits.clone()
    good[0, torch.arange(8732), cls_t[0]] = 20.0
    crit = SSDLoss()
    assert crit(loc_t, good, loc_t, cls_t).item() < 1e-3
    # Uniform logits: CE = ln(3) on positives + 3x as many negatives, divided by the positives.
    assert crit(loc_t, logits, loc_t, cls_t).item() == pytest.approx(4 * math.log(3), rel=1e-4)
    # An image without objects adds nothing.
    empty = crit(
        loc_t.repeat(2, 1, 1), logits.repeat(2, 1, 1), loc_t.repeat(2, 1, 1), torch.cat([cls_t, 0 * cls_t])
    )
    assert empty.item() == pytest.approx(2 * math.log(3), rel=1e-4)


def test_postprocess_recovers_boxes():
    db = default_boxes()
    boxes = torch.tensor([[[0.1, 0.1, 0.4, 0.5], [0.5, 0.5, 0.9, 0.95]]])
    labels = torch.tensor([[1, 2]])
    loc_t, cls_t = match(boxes, labels, db)
    logits = torch.full((1, 8732, 3), -10.0)
    logits[0, torch.arange(8732), cls_t[0]] = 10.0
    (det,) = postprocess(loc_t, logits, db)
    assert len(det.boxes) == 2
    order = det.labels.argsort()
    torch.testing.assert_close(det.boxes[order], boxes[0], atol=1e-5, rtol=0)
    assert det.labels[order].tolist() == [1, 2]


def ngc_default_box_order(spec=SSD300):
    """Index map: position in the NGC order (map, box, row, col) -> position in ours (map, row, col, box)."""
    out, start = [], 0
    for fsize, nd in zip(spec.feature_sizes, spec.boxes_per_location, strict=True):
        for b in range(nd):
            for i in range(fsize):
                for j in range(fsize):
                    out.append(start + (i * fsize + j) * nd + b)
        start += fsize * fsize * nd
    return torch.tensor(out)


def test_ngc_checkpoint_conversion_gives_the_same_detections():
    from ssd.model import convert_ngc_state

    torch.manual_seed(0)
    ours = SSD300Model(num_classes=5).eval()
    # Build an NGC-layout state dict from our weights: trunk/extras renamed, head channels
    # in their order (coord-major / class-major), then convert it back.
    ngc = {}
    names = {"conv1": 0, "bn1": 1, "layer1": 4, "layer2": 5, "layer3": 6}
    for k, v in ours.state_dict().items():
        part, rest = k.split(".", 1)
        if part == "backbone":
            top, tail = rest.split(".", 1)
            ngc[f"module.feature_extractor.feature_extractor.{names[top]}.{tail}"] = v
        elif part == "extras":
            ngc[f"module.additional_blocks.{rest}"] = v
        else:
            i, what = rest.split(".")
            nd = SSD300.boxes_per_location[int(i)]
            per_box = v.shape[0] // nd
            inverse = [b * per_box + c for c in range(per_box) for b in range(nd)]
            ngc[f"module.{'loc' if part == 'loc_heads' else 'conf'}.{i}.{what}"] = v[inverse]
    x = torch.randn(1, 3, 300, 300)
    with torch.no_grad():
        loc, logits = ours(x)
        # Their forward: head outputs viewed as (N, 4, -1) / (N, C, -1), maps concatenated.
        feats = ours.feature_maps(x)
        their_loc, their_conf = [], []
        for i, f in enumerate(feats):
            w, b = ngc[f"module.loc.{i}.weight"], ngc[f"module.loc.{i}.bias"]
            their_loc.append(torch.nn.functional.conv2d(f, w, b, padding=1).view(1, 4, -1))
            w, b = ngc[f"module.conf.{i}.weight"], ngc[f"module.conf.{i}.bias"]
            their_conf.append(torch.nn.functional.conv2d(f, w, b, padding=1).view(1, 5, -1))
        their_loc = torch.cat(their_loc, 2).transpose(1, 2)[0]
        their_conf = torch.cat(their_conf, 2).transpose(1, 2)[0]
    order = ngc_default_box_order()
    torch.testing.assert_close(their_loc, loc[0, order], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(their_conf, logits[0, order], atol=1e-5, rtol=1e-5)
    converted = SSD300Model(num_classes=5)
    converted.load_state_dict(convert_ngc_state({"model": ngc}))
    for k, v in ours.state_dict().items():
        torch.testing.assert_close(converted.state_dict()[k], v, rtol=0, atol=0, msg=k)
    # Their default boxes (map, box shape, row, column) are ours reordered the same way.
    theirs = []
    for k, fsize in enumerate(SSD300.feature_sizes):
        fk = 300 / SSD300.steps[k]
        s1, s2 = SSD300.scales[k] / 300, math.sqrt(SSD300.scales[k] * SSD300.scales[k + 1]) / 300
        shapes = [(s1, s1), (s2, s2)]
        for a in SSD300.aspect_ratios[k]:
            shapes += [(s1 * math.sqrt(a), s1 / math.sqrt(a)), (s1 / math.sqrt(a), s1 * math.sqrt(a))]
        for w, h in shapes:
            for i in range(fsize):
                for j in range(fsize):
                    theirs.append(((j + 0.5) / fk, (i + 0.5) / fk, w, h))
    torch.testing.assert_close(torch.tensor(theirs).clamp(0, 1), default_boxes()[order])


def test_postprocess_batch_equals_one_image_at_a_time():
    db = default_boxes()
    g = torch.Generator().manual_seed(3)
    loc = 0.5 * torch.randn(3, 8732, 4, generator=g)
    logits = 3 * torch.randn(3, 8732, 6, generator=g)
    batch = postprocess(loc, logits, db)
    for i in range(3):
        (one,) = postprocess(loc[i : i + 1], logits[i : i + 1], db)
        assert len(one.scores) == len(batch[i].scores) == 200
        assert (batch[i].scores[:-1] >= batch[i].scores[1:]).all()
        # float32 scores tie now and then: compare in an order that breaks ties by label and box.
        a, b = canonical(batch[i]), canonical(one)
        torch.testing.assert_close(a, b)


def canonical(det):
    rows = torch.cat([det.scores[:, None], det.labels[:, None].float(), det.boxes], 1)
    for col in reversed(range(rows.shape[1])):
        rows = rows[rows[:, col].argsort(stable=True)]
    return rows
