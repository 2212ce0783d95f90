"""TorchScript / ONNX parity with eager, config.pbtxt validity, and the real tritonserver over HTTP and gRPC."""

import numpy as np
import pytest
import torch
from resnet50.export import export_onnx, export_repository, export_torchscript
from resnet50.model import resnet50
from zoo.triton import TritonServer, infer, parse_pbtxt

SIZE = 32


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    net = resnet50(num_classes=10)
    # Non-trivial BatchNorm statistics so eval-mode outputs differ across inputs.
    with torch.no_grad():
        net.train()
        net(torch.randn(16, 3, SIZE, SIZE))
    return net.eval()


@pytest.fixture(scope="module")
def images():
    return torch.randn(3, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))


def test_torchscript_matches_eager(tmp_path, model, images):
    traced = torch.jit.load(str(export_torchscript(model, tmp_path / "model.pt", SIZE)))
    with torch.no_grad():
        torch.testing.assert_close(traced(images), model(images), rtol=1e-4, atol=1e-4)


def test_onnx_matches_eager_with_dynamic_batch(tmp_path, model, images):
    import onnxruntime as ort

    session = ort.InferenceSession(
        str(export_onnx(model, tmp_path / "m.onnx", SIZE)), providers=["CPUExecutionProvider"]
    )
    for batch in (images[:1], images):
        got = session.run(["OUTPUT__0"], {"INPUT__0": batch.numpy()})[0]
        with torch.no_grad():
            np.testing.assert_allclose(got, model(batch).numpy(), rtol=1e-3, atol=1e-4)


@pytest.fixture(scope="module")
def repository(tmp_path_factory, model):
    repo = tmp_path_factory.mktemp("triton_repo")
    export_repository(model, repo, image_size=SIZE, max_batch_size=8, instance_kind="KIND_CPU")
    return repo


def test_every_config_parses(repository):
    configs = sorted(repository.glob("*/config.pbtxt"))
    assert [c.parent.name for c in configs] == ["resnet50_libtorch", "resnet50_onnx", "resnet50_python"]
    platforms = {}
    for path in configs:
        config = parse_pbtxt(path.read_text())
        platforms[config.name] = config.platform or config.backend
        assert config.input[0].name == "INPUT__0" and list(config.input[0].dims) == [3, SIZE, SIZE]
        assert config.output[0].name == "OUTPUT__0" and list(config.output[0].dims) == [10]
        assert config.max_batch_size == 8 and config.HasField("dynamic_batching")
        assert len(config.instance_group) == 1
    assert platforms == {"resnet50_libtorch": "pytorch_libtorch", "resnet50_onnx": "onnxruntime_onnx",
                         "resnet50_python": "python"}  # fmt: skip
    assert (repository / "resnet50_libtorch" / "1" / "model.pt").is_file()
    assert (repository / "resnet50_python" / "1" / "model.onnx").is_file()


def test_tritonserver_serves_python_backend_same_top1(tmp_path, model, images):
    repo = tmp_path / "served"
    export_repository(model, repo, image_size=SIZE, models=("python",), max_batch_size=8)
    with torch.no_grad():
        expected = model(images).numpy()
    with TritonServer(repo, log_path=tmp_path / "server.log") as server:
        for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
            logits = infer(
                url, "resnet50_python", {"INPUT__0": images.numpy()}, ["OUTPUT__0"], protocol=protocol
            )
            got = logits["OUTPUT__0"]
            assert got.shape == (3, 10)
            assert (got.argmax(1) == expected.argmax(1)).all(), protocol
            np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)
