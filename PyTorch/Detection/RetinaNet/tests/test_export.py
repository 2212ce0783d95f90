"""ONNX export (dynamic batch and image size; decoding inside the graph) against the PyTorch model,
the numpy NMS beside it against torchvision's, the repository served by the real tritonserver, and
deploy_triton.sh end to end."""

import shutil
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
import torch
from retinanet.boxes import select
from retinanet.export import export_onnx, write_repository
from retinanet.model import RetinaNet, RetinaNetCandidates, detect
from retinanet.triton_postprocess import detect as numpy_detect

from .conftest import MODEL_DIR

SETTINGS = {"backbone": "resnet18", "fpn_channels": 32, "anchor_sizes": [8, 16, 32, 64, 128], "frozen_bn": False,
            "candidates_per_level": 100}  # fmt: skip


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = RetinaNet(4, SETTINGS).eval()
    with torch.no_grad():  # trained-looking scores: a few hundred candidates clear the threshold
        m.head.classification_head.cls_logits.bias.fill_(-2.0)
        m.head.classification_head.cls_logits.weight.mul_(50)  # scores spread out: no near-ties
    return m


@pytest.fixture(scope="module")
def onnx_file(model, tmp_path_factory):
    return export_onnx(model, tmp_path_factory.mktemp("onnx") / "model.onnx", image_size=64)


@pytest.mark.parametrize("shape", [(2, 64, 64), (1, 96, 128)])
def test_onnx_candidates_equal_pytorch_at_any_size(model, onnx_file, shape):
    batch, height, width = shape
    images = torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(height))
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    boxes, scores, labels = session.run(None, {"images": images.numpy()})
    with torch.no_grad():
        want = RetinaNetCandidates(model)(images)
    assert (want[1] > 0).sum() > 50
    np.testing.assert_allclose(scores, want[1].numpy(), atol=1e-5)
    # Near-equal scores may swap places among the candidates: the detections after NMS are compared.
    for i in range(batch):
        found = select(*(torch.from_numpy(t[i]) for t in (boxes, scores, labels)))
        expected = select(*(t[i] for t in want))
        # A box at IoU 0.5 with a better one may stay in one and not the other: the best 50 must agree.
        assert abs(len(found[1]) - len(expected[1])) <= 2 and len(expected[1]) > 50
        torch.testing.assert_close(found[1][:50], expected[1][:50], atol=1e-5, rtol=1e-5)
        assert_same_detections(*(t[:50].numpy() for t in found), *(t[:50].numpy() for t in expected))


def test_numpy_nms_equals_torchvisions(model):
    images = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        boxes, scores, labels = (t[0] for t in RetinaNetCandidates(model)(images))
    want = select(boxes, scores, labels, nms_threshold=0.5, max_detections=300)
    found = numpy_detect(boxes.numpy(), scores.numpy(), labels.numpy(), nms_threshold=0.5, max_detections=300)
    assert len(found[1]) == len(want[1]) > 3
    found, want = canonical(*found), canonical(*(t.numpy() for t in want))
    for mine, theirs in zip(found, want, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-6)


def canonical(boxes, scores, labels):
    """Detections in one order whatever the order of (nearly) equal scores: by score, label, box."""
    order = np.lexsort((boxes[:, 1].round(1), boxes[:, 0].round(1), labels, -scores.round(4)))
    return boxes[order], scores[order], labels[order]


def test_repository_served_by_tritonserver_gives_pytorch_detections(model, tmp_path):
    from zoo.triton.client import infer
    from zoo.triton.repository import parse_pbtxt
    from zoo.triton.server import TritonServer

    repo = write_repository(
        model, tmp_path / "repo", max_batch_size=4, instance_kind="KIND_CPU", image_size=64
    )
    for name in ("retinanet_onnx", "retinanet_python"):
        parse_pbtxt((repo / name / "config.pbtxt").read_text())
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        want = detect(model, images)
    served = tmp_path / "served"  # the wheel's tritonserver has the python backend only
    shutil.copytree(repo / "retinanet_python", served / "retinanet_python")
    server = TritonServer(served, startup_timeout=180)
    server.start()
    try:
        outputs = ["detection_boxes", "detection_scores", "detection_labels", "num_detections"]
        for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
            out = infer(url, "retinanet_python", {"images": images.numpy()}, outputs, protocol=protocol)
            for i, (_, scores, _) in enumerate(want):
                n = int(out["num_detections"][i, 0])
                assert n == len(scores) > 3
                assert_same_detections(*(out[k][i, :n] for k in outputs[:3]), *(t.numpy() for t in want[i]))
    finally:
        server.stop()


def assert_same_detections(boxes, scores, labels, want_boxes, want_scores, want_labels, tie=1e-4):
    """The same sorted scores, and each detection has one of ``want``'s with its label, score (to ``tie``:
    equal scores may be kept in another order) and box."""
    np.testing.assert_allclose(np.sort(scores), np.sort(want_scores), atol=1e-5)
    for box, score, label in zip(boxes, scores, labels, strict=True):
        same = (np.abs(want_scores - score) <= tie) & (want_labels == label)
        assert same.any() and np.abs(want_boxes[same] - box).max(axis=1).min() <= 2e-3, (box, score, label)


def test_export_and_deploy_scripts_end_to_end(model, tmp_path):
    from PIL import Image

    checkpoint = tmp_path / "model.pt"
    torch.save({"model": model.state_dict(), "category_ids": [1, 2, 3, 4], "settings": model.settings,
                "image_size": 64}, checkpoint)  # fmt: skip
    env_python = {"PYTHON": sys.executable, "PATH": f"{MODEL_DIR}:/usr/bin:/bin"}
    repo = tmp_path / "repo"
    export = subprocess.run(
        ["bash", str(MODEL_DIR / "scripts" / "export_triton.sh"), "--checkpoint", str(checkpoint),
         "--repository", str(repo), "--instance-kind", "KIND_CPU"],
        capture_output=True, text=True, timeout=300, env=env_python,
    )  # fmt: skip
    assert export.returncode == 0, export.stderr[-2000:]
    Image.new("RGB", (80, 60), (40, 120, 200)).save(tmp_path / "blue.png")
    deploy = subprocess.run(
        ["bash", str(MODEL_DIR / "scripts" / "deploy_triton.sh"), "--repository", str(repo), "--image-size", "64",
         "--threshold", "0.1", str(tmp_path / "blue.png")],
        capture_output=True, text=True, timeout=400, env=env_python, cwd=tmp_path,
    )  # fmt: skip
    assert deploy.returncode == 0, deploy.stderr[-2000:]
    assert "served latency" in deploy.stderr and "blue.png:" in deploy.stdout
