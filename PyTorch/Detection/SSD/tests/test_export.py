"""The inference model (BatchNorm folded, one precision) against the trained model; ONNX and TorchScript
parity with it; the python backend's NMS against PyTorch's, the real tritonserver, and the deploy
script stopping its server however it ends."""

import os
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ssd.boxes import default_boxes, match, postprocess
from ssd.export import export_onnx, export_torchscript, write_repository
from ssd.model import SSD300, SSDWithPostprocess, build_inference_model
from ssd.triton_postprocess import detect
from zoo.errors import UserError

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


@pytest.fixture(scope="module")
def half_models(model, images):
    """{precision: (inference model, its (loc, logits) on the first image)} for fp16 and bf16: computed once,
    as a forward of SSD300 in a half precision takes 15-20 s on a CPU (no half-precision kernels)."""
    made = {}
    for precision in ("fp16", "bf16"):
        inference = build_inference_model(model, precision)
        with torch.no_grad():
            made[precision] = (inference, inference(images[:1]))
    return made


@pytest.fixture(scope="module")
def outputs(model, images):
    """The trained model's (unfolded, fp32) ``loc, logits`` on ``images``."""
    with torch.no_grad():
        return model(images)


def test_inference_model_folds_every_batchnorm_and_keeps_the_outputs(model, images, outputs):
    folded = build_inference_model(model)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    # 43 in the ResNet-50 trunk (stem, 3 per bottleneck, 3 downsamples) + 2 in each of 5 extra blocks.
    assert sum(isinstance(m, torch.nn.Identity) for m in folded.modules()) == 53
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())  # the original is left as is
    with torch.no_grad():
        loc, logits = folded(images)
    torch.testing.assert_close(loc, outputs[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits, outputs[1], atol=1e-4, rtol=1e-4)
    unfolded = build_inference_model(model, fold=False)
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in unfolded.modules()) == 53


@pytest.mark.parametrize("precision, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_inference_model_computes_in_its_precision_with_fp32_in_and_out(
    half_models, outputs, precision, dtype
):
    half, (loc, logits) = half_models[precision]
    assert {p.dtype for p in half.parameters()} == {dtype}
    assert loc.dtype == logits.dtype == torch.float32
    # Within the precision's rounding of the fp32 outputs (bf16 keeps 8 bits of mantissa, fp16 11).
    want = outputs[1][:1]
    tolerance = {"fp16": 0.01, "bf16": 0.06}[precision] * want.abs().max().item()
    assert (logits - want).abs().max().item() < tolerance
    assert (logits - want).abs().max().item() > 0  # really computed in the lower precision


def test_torchscript_export_is_the_inference_model(model, images, half_models, tmp_path):
    fp32 = build_inference_model(model, "fp32")
    with torch.no_grad():
        fp32_outputs = fp32(images)
    fp16, fp16_outputs = half_models["fp16"]  # on the first image
    for precision, inference, inputs, expected in (
        ("fp32", fp32, images, fp32_outputs),
        ("fp16", fp16, images[:1], fp16_outputs),
    ):
        loaded = torch.jit.load(str(export_torchscript(inference, tmp_path / f"{precision}.pt")))
        with torch.no_grad():
            got = loaded(inputs)
        for e, g in zip(expected, got, strict=True):
            assert g.dtype == torch.float32
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def test_onnx_export_matches_the_inference_model_with_and_without_postprocessing(
    model, images, outputs, tmp_path
):
    import onnxruntime as ort

    inference = build_inference_model(model)
    with torch.no_grad():
        loc, logits = inference(images)
        boxes, scores = SSDWithPostprocess(inference, default_boxes())(images)
    raw = ort.InferenceSession(str(export_onnx(model, tmp_path / "raw.onnx", postprocess=False)))
    o_loc, o_logits = raw.run(None, {"images": images.numpy()})
    np.testing.assert_allclose(o_loc, loc.numpy(), atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(o_logits, logits.numpy(), atol=2e-4, rtol=1e-4)
    # and the trained (unfolded) model within the folding's rounding
    np.testing.assert_allclose(o_logits, outputs[1].numpy(), atol=2e-3, rtol=1e-3)
    dec = ort.InferenceSession(str(export_onnx(model, tmp_path / "dec.onnx", postprocess=True)))
    o_boxes, o_scores = dec.run(None, {"images": images[:1].numpy()})  # dynamic batch: 1 of 2
    np.testing.assert_allclose(o_boxes, boxes[:1].numpy(), atol=1e-4)
    np.testing.assert_allclose(o_scores, scores[:1].numpy(), atol=1e-4)


def test_fp16_onnx_export_matches_the_fp16_inference_model(half_models, images, tmp_path):
    import onnxruntime as ort

    half, (loc, logits) = half_models["fp16"]
    session = ort.InferenceSession(str(export_onnx(half, tmp_path / "fp16.onnx", postprocess=False)))
    assert session.get_inputs()[0].type == "tensor(float)"  # FP32 in and out, fp16 inside
    o_loc, o_logits = session.run(None, {"images": images[:1].numpy()})
    assert o_logits.dtype == np.float32
    scale = float(logits.abs().max())
    np.testing.assert_allclose(o_logits, logits.numpy(), atol=0.01 * scale)
    np.testing.assert_allclose(o_loc, loc.numpy(), atol=0.01 * float(loc.abs().max()))


def test_export_amp_sets_every_files_precision_and_bf16_writes_torchscript_only(model, images, tmp_path):
    from ssd.export import main

    main(["--random-init", "3", "--amp", "bf16", "--repository", str(tmp_path / "bf16")])
    assert sorted(p.name for p in (tmp_path / "bf16").iterdir()) == ["ssd300_torchscript"]
    config = (tmp_path / "bf16" / "ssd300_torchscript" / "config.pbtxt").read_text()
    assert 'key: "precision"' in config and 'string_value: "bf16"' in config
    traced = torch.jit.load(str(tmp_path / "bf16" / "ssd300_torchscript" / "1" / "model.pt"))
    assert {p.dtype for p in traced.parameters()} == {torch.bfloat16}
    with pytest.raises(UserError, match="^onnxruntime runs no bfloat16 convolutions"):
        export_onnx(build_inference_model(model, "bf16"), tmp_path / "bf16.onnx", postprocess=False)
    with pytest.raises(SystemExit, match="^error: --precision was renamed: use --amp$"):
        main(["--random-init", "3", "--precision", "fp16"])


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
    from zoo.triton.client import infer
    from zoo.triton.repository import parse_pbtxt
    from zoo.triton.server import TritonServer

    repo = write_repository(model, tmp_path / "repo", max_batch_size=4, instance_kind="KIND_CPU")
    for name in ("ssd300_onnx", "ssd300_decoded_onnx", "ssd300_python", "ssd300_torchscript"):
        parse_pbtxt((repo / name / "config.pbtxt").read_text())
    assert 'platform: "pytorch_libtorch"' in (repo / "ssd300_torchscript" / "config.pbtxt").read_text()
    for name in ("ssd300_onnx", "ssd300_decoded_onnx", "ssd300_python", "ssd300_torchscript"):
        assert 'string_value: "fp32"' in (repo / name / "config.pbtxt").read_text(), name
    inference = build_inference_model(model)
    served_file = torch.jit.load(str(repo / "ssd300_torchscript" / "1" / "model.pt"))
    with torch.no_grad():
        loc, logits = inference(images)
        torch.testing.assert_close(served_file(images)[1], logits, atol=1e-5, rtol=1e-5)
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
                assert n == len(det.scores) > 3, n
                served = [out[k][i, :n] for k in ("detection_boxes", "detection_scores", "detection_labels")]
                assert_same_detections(*served, det)
    finally:
        server.stop()


def assert_same_detections(boxes, scores, labels, det, score_tie=1e-5, box_atol=2e-3):
    """The served detections (best first) are ``det``'s: the same sorted scores, and each served box has
    a box of ``det`` with its label and score (to ``score_tie``; near-equal scores may swap places)."""
    order = det.scores.argsort(descending=True, stable=True)
    want_boxes, want_scores, want_labels = (t[order].numpy() for t in (det.boxes, det.scores, det.labels))
    np.testing.assert_allclose(scores, want_scores, atol=score_tie)
    for box, score, label in zip(boxes, scores, labels, strict=True):
        same = (np.abs(want_scores - score) <= score_tie) & (want_labels == label)
        assert same.any(), (box, score, label)
        assert np.abs(want_boxes[same] - box).max(axis=1).min() <= box_atol, (box, score, label)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_deploy_stops_tritonserver_and_its_stubs_on_a_signal(model, tmp_path, sig):
    from PIL import Image
    from zoo.triton.processes import signal_when_serving

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
