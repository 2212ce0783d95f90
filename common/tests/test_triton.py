import subprocess
import sys

import numpy as np
import pytest
from zoo.triton import (
    TensorSpec,
    TritonServer,
    config_to_pbtxt,
    infer,
    model_config,
    parse_pbtxt,
    write_model,
)

ADD_ONE = b"""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", (x + 1).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


def _add_one_config(name="add_one"):
    return model_config(
        name,
        backend="python",
        max_batch_size=8,
        inputs=[TensorSpec("INPUT0", "FP32", [4])],
        outputs=[TensorSpec("OUTPUT0", "FP32", [4])],
        instance_kind="KIND_CPU",
        dynamic_batching={"preferred_batch_size": [4, 8], "max_queue_delay_microseconds": 100},
        parameters={"note": "test"},
    )


def test_config_round_trip():
    config = _add_one_config()
    text = config_to_pbtxt(config)
    assert 'backend: "python"' in text and "data_type: TYPE_FP32" in text and "kind: KIND_CPU" in text
    parsed = parse_pbtxt(text)
    assert parsed == config
    assert list(parsed.dynamic_batching.preferred_batch_size) == [4, 8]
    assert parsed.parameters["note"].string_value == "test"


@pytest.mark.parametrize(
    "text, reason",
    [
        ('name: "m" backend: "python" input { name: "x" data_type: TYPE_FP32 dims: 1 }', "at least one input"),
        ('backend: "python" input {name: "x" data_type: TYPE_FP32 dims: 1} output {name: "y" data_type: TYPE_FP32 dims: 1}', "no name"),
        ('name: "m" input {name: "x" data_type: TYPE_FP32 dims: 1} output {name: "y" data_type: TYPE_FP32 dims: 1}', "neither a backend"),
        ('name: "m" backend: "onnxruntime" max_batch_size: -1 input {name: "x" data_type: TYPE_FP32 dims: 1} output {name: "y" data_type: TYPE_FP32 dims: 1}', "max_batch_size"),
        ('name: "m" backend: "python" input {name: "x" data_type: TYPE_FP32} output {name: "y" data_type: TYPE_FP32 dims: 1}', "has no dims"),
        ('name: "m" backend: "python" inputs {}', "not a Triton ModelConfig"),
        ('name: "m" backend: "python" input {name: "x" data_type: TYPE_FLOAT dims: 1}', "not a Triton ModelConfig"),
    ],
)  # fmt: skip
def test_bad_configs_are_rejected(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_pbtxt(text)


def test_model_config_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown Triton data type"):
        model_config(
            "m", backend="python", max_batch_size=0, inputs=[TensorSpec("x", "FLOAT", [1])], outputs=[]
        )
    with pytest.raises(ValueError, match="neither a backend"):
        model_config(
            "m",
            max_batch_size=0,
            inputs=[TensorSpec("x", "FP32", [1])],
            outputs=[TensorSpec("y", "FP32", [1])],
        )


def test_write_model_and_validate_cli(tmp_path):
    repo = tmp_path / "repo"
    model_dir = write_model(repo, _add_one_config(), {"model.py": ADD_ONE})
    assert (model_dir / "1" / "model.py").read_bytes() == ADD_ONE
    assert parse_pbtxt((model_dir / "config.pbtxt").read_text()) == _add_one_config()
    ok = subprocess.run(
        [sys.executable, "-m", "zoo.triton", "validate", str(repo)], capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    (repo / "bad").mkdir()
    (repo / "bad" / "config.pbtxt").write_text('name: "bad"\n')
    bad = subprocess.run(
        [sys.executable, "-m", "zoo.triton", "validate", str(repo)], capture_output=True, text=True
    )
    assert bad.returncode == 1 and "bad/config.pbtxt" in bad.stderr and "neither a backend" in bad.stderr


def test_tritonserver_serves_python_model_over_http_and_grpc(tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, _add_one_config(), {"model.py": ADD_ONE})
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with TritonServer(repo, log_path=tmp_path / "server.log") as server:
        process = server.process
        assert server.http_url.startswith("127.0.0.1:")
        http = infer(server.http_url, "add_one", {"INPUT0": x}, ["OUTPUT0"])
        grpc = infer(server.grpc_url, "add_one", {"INPUT0": x}, ["OUTPUT0"], protocol="grpc")
        with pytest.raises(RuntimeError, match="'missing'"):
            infer(server.http_url, "missing", {"INPUT0": x}, ["OUTPUT0"])
    np.testing.assert_array_equal(http["OUTPUT0"], x + 1)
    np.testing.assert_array_equal(grpc["OUTPUT0"], x + 1)
    assert process.poll() is not None and server.process is None
    assert "successfully loaded 'add_one'" in (tmp_path / "server.log").read_text()


def test_tritonserver_reports_a_model_that_fails_to_load(tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, _add_one_config("broken"), {"model.py": b"raise ImportError('model needs zzz')\n"})
    with pytest.raises(RuntimeError, match="model 'broken' version 1: UNAVAILABLE.*model needs zzz"):
        TritonServer(repo).start()
