"""TorchScript / ONNX parity with eager, config.pbtxt validity, the real tritonserver over HTTP and gRPC,
and the deploy script stopping its server however it ends."""

import shutil
import signal
import sys

import numpy as np
import pytest
import torch
from efficientnet.export import export_onnx, export_repository, export_torchscript
from efficientnet.model import efficientnet
from effnet_testutil import MODEL_DIR, model_env, run_module
from zoo.triton.client import infer
from zoo.triton.processes import signal_when_serving
from zoo.triton.repository import parse_pbtxt
from zoo.triton.server import TritonServer

SIZE = 32
WORDS = "zero one two three four five six seven eight nine".split()  # the served model's class names


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    net = efficientnet("b0", width=0.25, num_classes=10)
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
        got = session.run(["logits"], {"images": batch.numpy()})[0]
        with torch.no_grad():
            np.testing.assert_allclose(got, model(batch).numpy(), rtol=1e-3, atol=1e-4)


@pytest.fixture(scope="module")
def repository(tmp_path_factory, model):
    repo = tmp_path_factory.mktemp("triton_repo")
    export_repository(model, repo, image_size=SIZE, max_batch_size=8, instance_kind="KIND_CPU")
    return repo


def test_every_config_parses(repository):
    configs = sorted(repository.glob("*/config.pbtxt"))
    assert [c.parent.name for c in configs] == [
        "efficientnet_libtorch",
        "efficientnet_onnx",
        "efficientnet_python",
    ]
    platforms = {}
    for path in configs:
        config = parse_pbtxt(path.read_text())
        platforms[config.name] = config.platform or config.backend
        names = ("INPUT__0", "OUTPUT__0") if config.name == "efficientnet_libtorch" else ("images", "logits")
        assert config.input[0].name == names[0] and list(config.input[0].dims) == [3, SIZE, SIZE]
        assert config.output[0].name == names[1] and list(config.output[0].dims) == [10]
        assert config.max_batch_size == 8 and config.HasField("dynamic_batching")
        assert len(config.instance_group) == 1
    assert platforms == {"efficientnet_libtorch": "pytorch_libtorch", "efficientnet_onnx": "onnxruntime_onnx",
                         "efficientnet_python": "python"}  # fmt: skip
    assert (repository / "efficientnet_libtorch" / "1" / "model.pt").is_file()
    assert (repository / "efficientnet_python" / "1" / "model.onnx").is_file()
    assert (
        (repository / "efficientnet_python" / "1" / "model.py")
        .read_text()
        .startswith('"""Triton python-backend model: an ONNX file served with onnxruntime')
    )


@pytest.fixture(scope="module")
def python_repository(tmp_path_factory, model):
    repo = tmp_path_factory.mktemp("served")
    export_repository(model, repo, image_size=SIZE, models=("python",), max_batch_size=8, classes=WORDS)
    return repo


def test_tritonserver_serves_python_backend_same_top1(tmp_path, model, images, python_repository, capsys):
    with torch.no_grad():
        expected = model(images).numpy()
    from efficientnet.deploy import main, preprocess
    from PIL import Image

    paths = []
    for i, colour in enumerate([(200, 30, 20), (20, 200, 30), (30, 20, 200)]):
        paths.append(tmp_path / f"{i}.png")
        Image.new("RGB", (40, 48), colour).save(paths[-1])
    with torch.no_grad():
        served_top1 = model(torch.from_numpy(np.stack([preprocess(p, SIZE) for p in paths]))).argmax(1)
    with TritonServer(python_repository, log_path=tmp_path / "server.log") as server:
        capsys.readouterr()
        # the deploy client names each answer from the labels.txt the export wrote (or --labels FILE)
        (tmp_path / "upper.txt").write_text("\n".join(w.upper() for w in WORDS))
        for labels in ([], ["--labels", str(tmp_path / "upper.txt")]):
            main(["--url", server.grpc_url, "--protocol", "grpc", "--repository", str(python_repository),
                  "--image-size", str(SIZE), "--top-k", "2", *labels, *map(str, paths)])  # fmt: skip
        for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
            logits = infer(
                url, "efficientnet_python", {"images": images.numpy()}, ["logits"], protocol=protocol
            )
            got = logits["logits"]
            assert got.shape == (3, 10)
            assert (got.argmax(1) == expected.argmax(1)).all(), protocol
            np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)
    printed = [line for line in capsys.readouterr().out.splitlines() if line.endswith(")") and ": " in line]
    top1 = [line.split(": ")[1].split(" (")[0] for line in printed]
    assert top1 == [WORDS[k] for k in served_top1] + [WORDS[k].upper() for k in served_top1], printed
    assert all(len(line.split("), ")) == 2 for line in printed)  # --top-k 2: two names and scores each


@pytest.mark.parametrize("sig", [signal.SIGTERM])  # SIGINT takes the same path (zoo.triton.server)
def test_deploy_stops_tritonserver_and_its_stubs_on_a_signal(tmp_path, python_repository, sig):
    from PIL import Image

    image = tmp_path / "red.png"
    Image.new("RGB", (40, 48), (200, 30, 20)).save(image)
    command = [sys.executable, "-m", "efficientnet.deploy", "--repository", str(python_repository)]
    command += ["--model", "efficientnet_python", "--image-size", str(SIZE), *[str(image)] * 3000]
    run = signal_when_serving(command, sig, ready_text="tritonserver ready", env=model_env(), cwd=MODEL_DIR)
    assert sorted({p.name for p in run.served_by}) == ["triton_python_backend_stub", "tritonserver"]
    assert run.left_running == [], run.output
    assert run.returncode != 0 and "latency p50" not in run.output, "the signal came after the deploy ended"


def test_deploy_names_why_the_model_did_not_load(tmp_path, python_repository):
    from PIL import Image

    broken = tmp_path / "repo"
    shutil.copytree(python_repository, broken)
    (broken / "efficientnet_python" / "1" / "model.onnx").write_bytes(b"not an onnx file")
    Image.new("RGB", (40, 48)).save(tmp_path / "black.png")
    result = run_module(
        "efficientnet.deploy", "--repository", broken, "--image-size", SIZE, tmp_path / "black.png"
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]  # after the "starting tritonserver" progress line
    assert last.startswith(
        "error: tritonserver exited with code 1 while starting: model 'efficientnet_python'"
    )
    assert "UNAVAILABLE" in last and "Protobuf parsing failed" in last, last


def test_deploy_load_mode_prints_a_table_without_errors(tmp_path, python_repository):
    import subprocess

    from PIL import Image

    images = []
    for i, colour in enumerate([(200, 30, 20), (20, 200, 30), (30, 20, 200)]):
        images.append(tmp_path / f"{i}.png")
        Image.new("RGB", (40, 48), colour).save(images[-1])
    command = [
        "bash",
        str(MODEL_DIR / "scripts" / "deploy_triton.sh"),
        "--repository",
        str(python_repository),
    ]
    # no --image-size: the deploy reads the served model's input size
    command += ["--concurrency", "1,2", "--requests", "8", *map(str, images)]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env=model_env(PYTHON=sys.executable)
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    header = lines.index(
        next(line for line in lines if line.split()[:3] == ["concurrency", "requests", "errors"])
    )
    rows = [line.split() for line in lines[header + 1 :]]
    assert [row[:3] for row in rows] == [["1", "8", "0"], ["2", "8", "0"]], result.stdout
    assert all(float(row[3]) > 0 and 0 < float(row[4]) <= float(row[5]) for row in rows), result.stdout

    # a request the model cannot take (images of the wrong size) fails every request: exit 1, one line
    wrong = [*command[:4], "--image-size", str(SIZE + 8), *command[4:]]
    failed = subprocess.run(
        wrong, capture_output=True, text=True, timeout=300, env=model_env(PYTHON=sys.executable)
    )
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert failed.stderr.strip().splitlines()[-1].startswith("error: 16 request(s) failed under load"), (
        failed.stderr
    )
