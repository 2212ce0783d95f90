"""The one inference model (zoo.classification.inference): BatchNorm folding keeps the function, the precisions
stay close to FP32, and the exported TorchScript / ONNX files compute what it computes."""

import numpy as np
import pytest
import torch
from resnet50.export import export_onnx, export_repository, export_torchscript
from resnet50.model import resnet50
from zoo.classification.inference import fold_batchnorm, inference_model
from zoo.errors import UserError
from zoo.triton.repository import parse_pbtxt

SIZE = 32


@pytest.fixture(scope="module")
def trained():
    """A network with non-trivial BatchNorm statistics and affine parameters (eval mode)."""
    torch.manual_seed(0)
    net = resnet50(num_classes=10)
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
        net.train()
        net(torch.randn(16, 3, SIZE, SIZE))
    return net.eval()


@pytest.fixture(scope="module")
def images():
    return torch.randn(3, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))


def test_folding_keeps_outputs_and_removes_every_batchnorm(trained, images):
    with torch.no_grad():
        expected = trained(images)
        folded = inference_model(trained)
        got = folded(images)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    assert (
        sum(isinstance(m, torch.nn.BatchNorm2d) for m in trained.modules()) == 53
    )  # the original is untouched
    assert got.dtype == torch.float32 and expected.std() > 0.1
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    unfolded = inference_model(trained, fold_bn=False)
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in unfolded.modules()) == 53
    with torch.no_grad():
        torch.testing.assert_close(unfolded(images), expected, rtol=0, atol=0)


def test_fold_batchnorm_folds_torchvision_too():
    import torchvision

    torch.manual_seed(0)
    net = torchvision.models.resnet18(num_classes=5).eval()
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        expected = net(x)
        got = fold_batchnorm(net)(x)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("amp", "dtype", "tolerance"), [("fp16", torch.float16, 0.02), ("bf16", torch.bfloat16, 0.1)]
)
def test_half_precision_weights_stay_close_to_fp32(trained, images, amp, dtype, tolerance):
    half = inference_model(trained, amp=amp, channels_last=True)
    assert all(p.dtype == dtype for p in half.parameters())
    with torch.no_grad():
        reference, got = inference_model(trained)(images), half(images)
    assert got.dtype == torch.float32  # FP32 at the edges, whatever runs inside
    error = float((got - reference).abs().max() / reference.abs().max())
    assert error < tolerance, error


@pytest.mark.parametrize("amp", ["fp32", "fp16", "bf16"])
def test_torchscript_file_is_the_inference_model(tmp_path, trained, images, amp):
    model = inference_model(trained, amp=amp)
    traced = torch.jit.load(str(export_torchscript(model, tmp_path / "model.pt", SIZE)))
    with torch.no_grad():
        expected = model(images)
        got = traced(images)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("amp", "tolerance"), [("fp32", 1e-4), ("fp16", 2e-2)])
def test_onnx_file_is_the_inference_model(tmp_path, trained, images, amp, tolerance):
    import onnxruntime as ort

    model = inference_model(trained, amp=amp)
    session = ort.InferenceSession(
        str(export_onnx(model, tmp_path / "m.onnx", SIZE)), providers=["CPUExecutionProvider"]
    )
    for batch in (images[:1], images):
        got = session.run(["logits"], {"images": batch.numpy()})[0]
        with torch.no_grad():
            expected = model(batch).numpy()
        assert got.dtype == np.float32
        # fp16: onnxruntime and torch accumulate the half-precision convolutions differently
        scale = float(np.abs(expected).max())
        np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance * scale)


def test_repository_files_carry_the_precision(tmp_path, trained, images):
    import onnxruntime as ort

    written = export_repository(trained, tmp_path, image_size=SIZE, models=("libtorch", "onnx"),
                                max_batch_size=8, instance_kind="KIND_CPU", amp="fp16")  # fmt: skip
    for folder in written.values():
        config = parse_pbtxt((folder / "config.pbtxt").read_text())
        assert config.parameters["precision"].string_value == "fp16"
        assert config.input[0].data_type == 11  # TYPE_FP32: the interface stays FP32
    with torch.no_grad():
        expected = inference_model(trained, amp="fp16")(images)
    traced = torch.jit.load(str(written["resnet50_libtorch"] / "1" / "model.pt"))
    assert all(p.dtype == torch.float16 for p in traced.parameters())
    with torch.no_grad():
        torch.testing.assert_close(traced(images), expected, rtol=1e-4, atol=1e-4)
    session = ort.InferenceSession(str(written["resnet50_onnx"] / "1" / "model.onnx"))
    got = session.run(["logits"], {"images": images.numpy()})[0]
    np.testing.assert_allclose(got, expected.numpy(), rtol=2e-2, atol=2e-2 * float(expected.abs().max()))


def test_bf16_onnx_export_is_a_one_line_error(tmp_path, trained):
    with pytest.raises(UserError, match="onnxruntime has no bf16 convolutions"):
        export_repository(trained, tmp_path, image_size=SIZE, models=("onnx",), amp="bf16")
    assert not list(tmp_path.iterdir())  # nothing written


def test_export_writes_the_checkpoint_s_class_names_as_triton_labels(tmp_path, trained):
    """A training checkpoint's class folders become the served model's labels (the deploy client's names)."""
    from resnet50.export import main

    synsets = [f"n0144{i:04d}" for i in range(10)]
    checkpoint = tmp_path / "checkpoint.pt"
    torch.save(
        {"model": trained.state_dict(), "classes": synsets, "recipe": {"data": {"image_size": SIZE}}},
        checkpoint,
    )
    main(["--checkpoint", str(checkpoint), "--repository", str(tmp_path / "repo"), "--models", "onnx"])
    folder = tmp_path / "repo" / "resnet50_onnx"
    assert (folder / "labels.txt").read_text().splitlines() == synsets
    config = parse_pbtxt((folder / "config.pbtxt").read_text())
    assert config.output[0].label_filename == "labels.txt" and list(config.input[0].dims) == [3, SIZE, SIZE]
