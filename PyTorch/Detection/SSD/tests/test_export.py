"""ONNX parity with eager, the python backend's NMS against PyTorch's, the real tritonserver, and the
deploy script stopping its server however it ends."""

import os
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ssd.boxes import default_boxes, match, postprocess
from ssd.export import export_onnx, write_repository
from ssd.model import SSD300, SSDWithPostprocess
from ssd.triton_postprocess import detect

MODEL_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = SSD300(num_classes=4).eval()
    # Give BN non-trivial statistics so the export is checked on realistic activations.
    with torch.no_grad():
        for bn in m.modules():
            if isinstance(bn, torch.nn.BatchNorm2d):
                bn.running_mean.uniform_(-0.1, 0.1)
                bn.running_var.uniform_(0.5, 1.5)
        # Tame the untrained heads: a few confident, distinct detections instead of saturated scores.
        for head in [*m.conf_heads, *m.loc_heads]:
            head.weight.mul_(0.02)
        for head in m.conf_heads:
            head.bias.view(-1, 4)[:, 0] = 3.0
    return m


@pytest.fixture(scope="module")
def images():
    return torch.randn(2, 3, 300, 300, generator=torch.Generator().manual_seed(1))


def test_onnx_export_matches_eager_with_and_without_postprocessing(model, images, tmp_path):
    import onnxruntime as ort

    with torch.no_grad():
        loc, logits = model(images)
        boxes, scores = SSDWithPostprocess(model, default_boxes())(images)
    raw = ort.InferenceSession(str(export_onnx(model, tmp_path / "raw.onnx", postprocess=False)))
    o_loc, o_logits = raw.run(None, {"images": images.numpy()})
    np.testing.assert_allclose(o_loc, loc.numpy(), atol=2e-3, rtol=1e-3)
    np.testing.assert_allclose(o_logits, logits.numpy(), atol=2e-3, rtol=1e-3)
    dec = ort.InferenceSession(str(export_onnx(model, tmp_path / "dec.onnx", postprocess=True)))
    o_boxes, o_scores = dec.run(None, {"images": images[:1].numpy()})  # dynamic batch: 1 of 2
    np.testing.assert_allclose(o_boxes, boxes[:1].numpy(), atol=1e-4)
    np.testing.assert_allclose(o_scores, scores[:1].numpy(), atol=1e-4)


def test_python_backend_nms_equals_torch_postprocess():
    db = default_boxes()
    g = torch.Generator().manual_seed(0)
    gt = torch.tensor([[[0.1, 0.1, 0.4, 0.5], [0.5, 0.5, 0.9, 0.95], [0.45, 0.5, 0.85, 0.9]]])
    loc_t, cls_t = match(gt, torch.tensor([[1, 2, 2]]), db)
    loc = loc_t + 0.3 * torch.randn(loc_t.shape, generator=g)  # overlapping candidates around each object
    logits = torch.nn.functional.one_hot(cls_t, 3).float() * 4 + torch.randn(1, 8732, 3, generator=g)
    (det,) = postprocess(loc, logits, db)
    from ssd.boxes import decode

    boxes = decode(loc, db).clamp(0, 1)[0].numpy()
    scores = torch.softmax(logits, -1)[0].numpy()
    settings = dict(score_threshold=0.05, nms_threshold=0.5, max_detections=200, candidates_per_class=200)
    b, s, lab = detect(boxes, scores, **settings)
    assert len(det.scores) > 3
    order = det.scores.argsort(descending=True, stable=True)
    np.testing.assert_allclose(s, det.scores[order].numpy(), rtol=1e-6)
    np.testing.assert_allclose(b, det.boxes[order].numpy(), atol=1e-6)
    np.testing.assert_array_equal(lab, det.labels[order].numpy())


def test_repository_served_by_tritonserver_gives_pytorch_boxes(model, images, tmp_path):
    from zoo.triton import TritonServer, infer, parse_pbtxt

    repo = write_repository(model, tmp_path / "repo", max_batch_size=4, instance_kind="KIND_CPU")
    for name in ("ssd300_onnx", "ssd300_decoded_onnx", "ssd300_python"):
        parse_pbtxt((repo / name / "config.pbtxt").read_text())
    with torch.no_grad():
        loc, logits = model(images)
    dets = postprocess(loc, logits, default_boxes())
    # The wheel's tritonserver has the python backend only: serve that model.
    served = tmp_path / "served"
    shutil.copytree(repo / "ssd300_python", served / "ssd300_python")
    server = TritonServer(served, startup_timeout=180)
    server.start()
    try:
        for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
            out = infer(
                url,
                "ssd300_python",
                {"images": images.numpy()},
                ["detection_boxes", "detection_scores", "detection_labels", "num_detections"],
                protocol=protocol,
            )
            for i, det in enumerate(dets):
                n = int(out["num_detections"][i, 0])
                order = det.scores.argsort(descending=True, stable=True)
                assert n == len(det.scores) > 3, n
                np.testing.assert_allclose(out["detection_boxes"][i, :n], det.boxes[order].numpy(), atol=2e-3)
                np.testing.assert_array_equal(out["detection_labels"][i, :n], det.labels[order].numpy())
    finally:
        server.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_deploy_stops_tritonserver_and_its_stubs_on_a_signal(model, tmp_path, sig):
    from PIL import Image
    from zoo.triton import signal_when_serving

    repo = write_repository(model, tmp_path / "repo", max_batch_size=8, instance_kind="KIND_CPU")
    Image.new("RGB", (320, 240), (40, 120, 200)).save(tmp_path / "blue.png")
    command = [
        sys.executable,
        "-m",
        "ssd.deploy",
        "--repository",
        str(repo),
        *[str(tmp_path / "blue.png")] * 8,
    ]
    env = {**os.environ, "PYTHONPATH": str(MODEL_DIR)}
    run = signal_when_serving(command, sig, ready_text="tritonserver ready", env=env, cwd=tmp_path)
    assert sorted({p.name for p in run.served_by}) == ["triton_python_backend_stub", "tritonserver"]
    assert run.left_running == [], run.output
    assert run.returncode != 0 and "served latency" not in run.output, (
        "the signal came after the deploy ended"
    )


def test_deploy_load_mode_prints_a_table_without_errors(model, tmp_path, capsys):
    from PIL import Image
    from ssd.deploy import main

    repo = write_repository(model, tmp_path / "repo", max_batch_size=8, instance_kind="KIND_CPU")
    Image.new("RGB", (320, 240), (40, 120, 200)).save(tmp_path / "blue.png")
    main(["--repository", str(repo), str(tmp_path / "blue.png"), "--concurrency", "1,2", "--requests", "4"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3].split()[:3] == ["concurrency", "requests", "errors"]
    rows = [line.split() for line in lines[-2:]]
    assert [row[:3] for row in rows] == [["1", "4", "0"], ["2", "4", "0"]]
    assert all(float(row[3]) > 0 and 0 < float(row[4]) <= float(row[5]) for row in rows)
