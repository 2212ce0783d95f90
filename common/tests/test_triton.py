import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from zoo.errors import UserError
from zoo.triton.client import infer, model_io
from zoo.triton.processes import signal_when_serving
from zoo.triton.repository import (
    ONNX_PYTHON_MODEL,
    TensorSpec,
    config_to_pbtxt,
    model_config,
    parse_pbtxt,
    refuse_existing_models,
    write_model,
)
from zoo.triton.server import TritonServer

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


def test_write_model_refuses_an_existing_model_and_replaces_it_whole_with_force(tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, _add_one_config(), {"model.py": ADD_ONE, "variables": _folder(tmp_path / "a", 2)})
    before = sorted(p.relative_to(repo) for p in repo.rglob("*"))
    with pytest.raises(UserError, match=r"repo/add_one already exists: pass --force"):
        write_model(repo, _add_one_config(), {"model.py": b"changed"})
    with pytest.raises(UserError, match=r"add_one already exists \(and 1 more.*--force"):
        refuse_existing_models(repo, ["new_one", "add_one", "add_one"])
    assert sorted(p.relative_to(repo) for p in repo.rglob("*")) == before
    assert (repo / "add_one" / "1" / "model.py").read_bytes() == ADD_ONE
    refuse_existing_models(repo, ["new_one"])
    refuse_existing_models(repo, ["add_one"], force=True)
    # a folder copied whole (a SavedModel's variables/) keeps none of the old model's files
    write_model(
        repo, _add_one_config(), {"model.py": b"new", "variables": _folder(tmp_path / "b", 1)}, force=True
    )
    assert (repo / "add_one" / "1" / "model.py").read_bytes() == b"new"
    assert sorted(p.name for p in (repo / "add_one" / "1" / "variables").iterdir()) == ["shard_0"]
    assert sorted(p.name for p in repo.iterdir()) == ["add_one"]  # no build folder left


def test_write_model_sweeps_the_build_folders_of_exports_that_died(tmp_path):
    repo = tmp_path / "repo"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = repo / f".zoo-export-{int(dead.stdout)}-add_one"
    (stale / "1").mkdir(parents=True)
    alive = repo / f".zoo-export-{os.getppid()}-add_one"
    alive.mkdir()
    write_model(repo, _add_one_config(), {"model.py": ADD_ONE})
    assert not stale.exists() and alive.is_dir()


def _folder(path, shards: int):
    path.mkdir()
    for shard in range(shards):
        (path / f"shard_{shard}").write_text(str(shard))
    return path


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
        for url, protocol in ((server.http_url, "http"), (server.grpc_url, "grpc")):
            assert model_io(url, "add_one", protocol) == (["INPUT0"], ["OUTPUT0"])
    np.testing.assert_array_equal(http["OUTPUT0"], x + 1)
    np.testing.assert_array_equal(grpc["OUTPUT0"], x + 1)
    assert process.poll() is not None and server.process is None
    assert "successfully loaded 'add_one'" in (tmp_path / "server.log").read_text()


def test_tritonserver_reports_a_model_that_fails_to_load(tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, _add_one_config("broken"), {"model.py": b"raise ImportError('model needs zzz')\n"})
    with pytest.raises(RuntimeError, match="model 'broken' version 1: UNAVAILABLE.*model needs zzz"):
        TritonServer(repo).start()


def test_start_failure_names_a_config_pbtxt_tritonserver_cannot_read(tmp_path):
    model_dir = tmp_path / "repo" / "cut_off"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text('name: "cut_off"\ninput [ { name: "images" dims: [ 3, 32 ')
    with pytest.raises(RuntimeError) as failure:
        TritonServer(tmp_path / "repo").start()
    first = str(failure.value).splitlines()[0]
    assert "Poll failed for model directory 'cut_off': failed to read text proto" in first, first
    assert str(model_dir / "config.pbtxt") in first


def test_start_failure_names_the_cause_on_the_first_line(tmp_path):
    repo = tmp_path / "repo"
    config = _embed_config("no_onnx")
    write_model(repo, config, {"model.py": ONNX_PYTHON_MODEL})
    with pytest.raises(RuntimeError) as failure:
        TritonServer(repo).start()
    first = str(failure.value).splitlines()[0]
    assert "model 'no_onnx' version 1: UNAVAILABLE" in first and "model.onnx not found" in first
    cli = subprocess.run(
        [sys.executable, "-m", "zoo.triton", "serve", "--model-repository", str(repo)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 1
    assert (
        cli.stderr.strip().startswith("error: tritonserver exited") and "model.onnx not found" in cli.stderr
    )
    assert len(cli.stderr.strip().splitlines()) == 1


# The shared python-backend model (zoo/triton/onnx_model.py) over a tiny ONNX graph:
# embedded = table[ids] (a gather, like BERT's embeddings), shifted = x + 1.
TABLE = np.arange(20, dtype=np.float32).reshape(10, 2)


def _embed_onnx(path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["embedded"], axis=0),
            helper.make_node("Add", ["x", "one"], ["shifted"]),
        ],
        "embed",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 3]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2]),
        ],
        [
            helper.make_tensor_value_info("embedded", TensorProto.FLOAT, ["batch", 3, 2]),
            helper.make_tensor_value_info("shifted", TensorProto.FLOAT, ["batch", 2]),
        ],
        [
            onnx.numpy_helper.from_array(TABLE, "table"),
            onnx.numpy_helper.from_array(np.ones(1, np.float32), "one"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _embed_config(name, parameters=None, queue_delay_us=100, preferred_batch=4):
    return model_config(
        name,
        backend="python",
        max_batch_size=8,
        inputs=[TensorSpec("ids", "INT64", [3]), TensorSpec("x", "FP32", [2])],
        outputs=[TensorSpec("embedded", "FP32", [3, 2]), TensorSpec("shifted", "FP32", [2])],
        instance_kind="KIND_CPU",
        dynamic_batching={
            "preferred_batch_size": [preferred_batch],
            "max_queue_delay_microseconds": queue_delay_us,
        },
        parameters=parameters,
    )


def _request(ids, seed):
    ids = np.asarray(ids, dtype=np.int64)
    x = np.random.default_rng(seed).standard_normal((len(ids), 2)).astype(np.float32)
    return {"ids": ids, "x": x}


GOOD_AND_BAD = [
    _request([[1, 2, 3]], 0),
    _request([[0, 9, 9], [4, 5, 6]], 1),
    _request([[1, 999999, 2]], 2),  # out of the table
    _request([[7, 8, 0], [1, 1, 1], [2, 3, 4]], 3),
]


def _onnxruntime_outputs(onnx_path, request):
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    return dict(zip(["embedded", "shifted"], session.run(["embedded", "shifted"], request), strict=True))


def _execution_count(url, model, at_least):
    """The model's execution count once it reaches ``at_least`` (the server counts after responding)."""
    import time

    import tritonclient.http as http

    client = http.InferenceServerClient(url)
    try:
        deadline = time.monotonic() + 5
        while True:
            count = int(client.get_inference_statistics(model)["model_stats"][0]["execution_count"])
            if count >= at_least or time.monotonic() > deadline:
                return count
            time.sleep(0.05)
    finally:
        client.close()


@pytest.mark.parametrize(
    "model, reason",
    [("embed_checked", "'ids' holds 999999, above its maximum 9"), ("embed_unchecked", "out of data bounds")],
)
def test_a_bad_request_fails_alone_in_its_batch_over_http_and_grpc(tmp_path, model, reason):
    from concurrent.futures import ThreadPoolExecutor

    onnx_path = _embed_onnx(tmp_path / "embed.onnx")
    parameters = {"min_value:ids": 0, "max_value:ids": 9} if model == "embed_checked" else None
    # A long queue delay and their total batch as the preferred one: the 4 requests run as one batch.
    total = sum(len(r["ids"]) for r in GOOD_AND_BAD)
    config = _embed_config(model, parameters, queue_delay_us=3_000_000, preferred_batch=total)
    write_model(tmp_path / "repo", config, {"model.py": ONNX_PYTHON_MODEL, "model.onnx": onnx_path})
    expected = [_onnxruntime_outputs(onnx_path, r) if i != 2 else None for i, r in enumerate(GOOD_AND_BAD)]

    def send(url, protocol, request):
        try:
            return infer(url, model, request, ["embedded", "shifted"], protocol=protocol)
        except RuntimeError as e:
            return str(e)

    with TritonServer(tmp_path / "repo") as server, ThreadPoolExecutor(len(GOOD_AND_BAD)) as pool:
        for round_, (protocol, url) in enumerate([("http", server.http_url), ("grpc", server.grpc_url)], 1):
            results = list(pool.map(lambda r, u=url, p=protocol: send(u, p, r), GOOD_AND_BAD))
            assert _execution_count(server.http_url, model, at_least=round_) == round_, "not one batch"
            assert isinstance(results[2], str) and reason in results[2], (protocol, results[2])
            for index in (0, 1, 3):
                assert not isinstance(results[index], str), (protocol, results[index])
                for name in ("embedded", "shifted"):
                    np.testing.assert_array_equal(results[index][name], expected[index][name])


class _FakeTensor:
    def __init__(self, name, array):
        self._name, self._array = name, np.asarray(array)

    def name(self):
        return self._name

    def as_numpy(self):
        return self._array


class _FakeResponse:
    def __init__(self, output_tensors, error=None):
        self.outputs = {t.name(): t.as_numpy() for t in output_tensors}
        self.error = error


class _FakeError:
    def __init__(self, message):
        self.text = message


@pytest.fixture
def shared_model(monkeypatch):
    """zoo/triton/onnx_model.py loaded outside Triton, with stand-ins for triton_python_backend_utils."""
    import importlib.util
    import types

    fake = types.ModuleType("triton_python_backend_utils")
    fake.Tensor, fake.InferenceResponse, fake.TritonError = _FakeTensor, _FakeResponse, _FakeError
    fake.get_input_tensor_by_name = lambda request, name: next((t for t in request if t.name() == name), None)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake)
    spec = importlib.util.spec_from_file_location("shared_onnx_model", ONNX_PYTHON_MODEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _initialized(module, tmp_path, config, files=None):
    import json

    from google.protobuf import json_format

    model_dir = write_model(
        tmp_path / "repo", config, files or {"model.onnx": _embed_onnx(tmp_path / "e.onnx")}, force=True
    )
    model = module.TritonPythonModel()
    as_json = json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True))
    model.initialize({"model_config": as_json, "model_repository": str(model_dir), "model_version": "1"})
    return model


def _as_request(arrays):
    return [_FakeTensor(name, array) for name, array in arrays.items()]


def test_shared_model_checks_each_request_on_its_own(shared_model, tmp_path):
    model = _initialized(shared_model, tmp_path, _embed_config("m", {"min_value:ids": 0, "max_value:ids": 9}))
    good = _request([[1, 2, 3], [4, 5, 6]], 0)
    bad_requests = {
        "'ids' must be TYPE_INT64, got int32": {**good, "ids": good["ids"].astype(np.int32)},
        "'x' has shape [2, 3], the model takes [any, 2]": {**good, "x": np.zeros((2, 3), np.float32)},
        "'ids' has batch 9, the model takes 1..8": _request(np.zeros((9, 3)), 1),
        "inputs have different batch sizes [1, 2]": {**good, "x": good["x"][:1]},
        "input 'x' is missing": {"ids": good["ids"]},
        "'ids' holds -1, below its minimum 0": _request([[1, -1, 2]], 2),
    }
    responses = model.execute([_as_request(good)] + [_as_request(r) for r in bad_requests.values()])
    expected = _onnxruntime_outputs(tmp_path / "e.onnx", good)
    assert responses[0].error is None
    for name in ("embedded", "shifted"):
        np.testing.assert_array_equal(responses[0].outputs[name], expected[name])
    for response, reason in zip(responses[1:], bad_requests, strict=True):
        assert response.error is not None and response.error.text == f"model 'm': {reason}"


def test_shared_model_batches_then_falls_back_to_one_request_at_a_time(shared_model, tmp_path):
    model = _initialized(shared_model, tmp_path, _embed_config("m"))
    calls = []
    run = model.session.run
    model.session.run = lambda names, feed: calls.append(len(feed["ids"])) or run(names, feed)
    good = [_request([[1, 2, 3]], 0), _request([[4, 5, 6], [7, 8, 9]], 1)]
    responses = model.execute([_as_request(r) for r in good])
    assert calls == [3] and all(r.error is None for r in responses)
    calls.clear()
    responses = model.execute(
        [_as_request(good[0]), _as_request(_request([[10, 0, 0]], 2)), _as_request(good[1])]
    )
    assert calls == [4, 1, 1, 2]  # the batch, then each request alone
    assert responses[1].error is not None and "out of data bounds" in responses[1].error.text
    for response, request in zip([responses[0], responses[2]], good, strict=True):
        np.testing.assert_array_equal(
            response.outputs["embedded"], _onnxruntime_outputs(tmp_path / "e.onnx", request)["embedded"]
        )


def test_shared_model_postprocess_file_maps_outputs(shared_model, tmp_path):
    hook = b"def postprocess(outputs, parameters):\n    return {'total': outputs['embedded'].sum(axis=(1, 2)) * float(parameters['scale'])}\n"
    config = model_config(
        "p", backend="python", max_batch_size=4, instance_kind="KIND_CPU",
        inputs=[TensorSpec("ids", "INT64", [3]), TensorSpec("x", "FP32", [2])],
        outputs=[TensorSpec("total", "FP64", [1])],
        parameters={"postprocess": "sum.py", "scale": 2},
    )  # fmt: skip
    files = {"model.onnx": _embed_onnx(tmp_path / "e.onnx"), "sum.py": hook}
    model = _initialized(shared_model, tmp_path, config, files)
    (response,) = model.execute([_as_request(_request([[1, 2, 3], [0, 0, 0]], 0))])
    assert "'total' has shape [2], the model takes [any, 1]" in response.error.text
    hook = hook.replace(b"* float", b"[:, None] * float")
    model = _initialized(shared_model, tmp_path, config, {**files, "sum.py": hook})
    (response,) = model.execute([_as_request(_request([[1, 2, 3], [0, 0, 0]], 0))])
    assert response.error is None and response.outputs["total"].dtype == np.float64
    np.testing.assert_array_equal(
        response.outputs["total"], [[2 * TABLE[[1, 2, 3]].sum()], [2 * TABLE[0].sum() * 3]]
    )


@pytest.mark.parametrize(
    "inputs, parameters, reason",
    [
        ([TensorSpec("ids", "INT64", [3])], {}, r"config inputs \['ids'\] are not the ONNX inputs \['ids', 'x'\]"),
        ([TensorSpec("ids", "INT32", [3]), TensorSpec("x", "FP32", [2])], {}, "'ids' is TYPE_INT32 in the config, tensor"),
        ([TensorSpec("ids", "INT64", [3]), TensorSpec("x", "FP32", [2])], {"max_value:ids": "ten"},
         "parameter max_value:ids must be a number, got 'ten'"),
    ],
)  # fmt: skip
def test_shared_model_refuses_to_load_a_config_that_does_not_fit_the_onnx_file(
    shared_model, tmp_path, inputs, parameters, reason
):
    config = model_config(
        "m", backend="python", max_batch_size=4, inputs=inputs, parameters=parameters,
        outputs=[TensorSpec("embedded", "FP32", [3, 2])], instance_kind="KIND_CPU",
    )  # fmt: skip
    with pytest.raises(ValueError, match=reason):
        _initialized(shared_model, tmp_path, config)


SLOW_TO_LOAD = b"""
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(120)

    def execute(self, requests):
        return []
"""


@pytest.mark.parametrize(
    "sig, while_", [(signal.SIGTERM, "serving"), (signal.SIGINT, "serving"), (signal.SIGTERM, "loading"),
                    (signal.SIGINT, "loading")],
)  # fmt: skip
def test_serve_stops_tritonserver_and_its_stubs_on_a_signal(tmp_path, sig, while_):
    repo = tmp_path / "repo"
    if while_ == "serving":
        write_model(repo, _add_one_config(), {"model.py": ADD_ONE})
    else:
        write_model(repo, _add_one_config("slow"), {"model.py": SLOW_TO_LOAD})
    run = signal_when_serving(
        [sys.executable, "-m", "zoo.triton", "serve", "--model-repository", str(repo)],
        sig,
        ready_text="Ctrl-C to stop" if while_ == "serving" else None,
        timeout=120,
    )
    assert sorted({p.name for p in run.served_by}) == ["triton_python_backend_stub", "tritonserver"]
    assert run.left_running == [], run.output
    assert run.returncode == 0, run.output
    assert ("Ctrl-C to stop" in run.output) == (while_ == "serving")


def test_server_turns_sigterm_into_system_exit_while_it_runs(tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, _add_one_config(), {"model.py": ADD_ONE})
    session = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # make test's session holds its own handler
    try:
        with pytest.raises(SystemExit) as stopped, TritonServer(repo) as server:
            process = server.process
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        assert stopped.value.code == 128 + signal.SIGTERM
        assert process.poll() is not None and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, session)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_load_test_counts_requests_and_answers_as_onnxruntime(tmp_path, protocol):
    from zoo.triton.load import load_table, load_test

    onnx_path = _embed_onnx(tmp_path / "embed.onnx")
    write_model(
        tmp_path / "repo", _embed_config("embed"), {"model.py": ONNX_PYTHON_MODEL, "model.onnx": onnx_path}
    )
    good = [r for i, r in enumerate(GOOD_AND_BAD) if i != 2]
    with TritonServer(tmp_path / "repo") as server:
        url = server.http_url if protocol == "http" else server.grpc_url
        rows = load_test(
            url, "embed", good, concurrency=(1, 4), requests=12, protocol=protocol, keep_outputs=3
        )
        failing = load_test(url, "embed", GOOD_AND_BAD, concurrency=(2,), requests=8, protocol=protocol)
        served = _execution_count(server.http_url, "embed", at_least=1)
    assert [(r["concurrency"], r["requests"], r["errors"]) for r in rows] == [(1, 12, 0), (4, 12, 0)]
    for row in rows:
        assert row["throughput"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"]
        assert sorted(row["outputs"]) == [0, 1, 2]
        for index, outputs in row["outputs"].items():
            expected = _onnxruntime_outputs(onnx_path, good[index % len(good)])
            for name in ("embedded", "shifted"):
                np.testing.assert_array_equal(outputs[name], expected[name])
    # every 4th request (index 2, 6) reads out of the table: those fail, the others succeed
    assert failing[0]["requests"] == 8 and failing[0]["errors"] == 2
    assert "out of data bounds" in failing[0]["first_error"]
    assert served >= 1
    table = load_table(rows).splitlines()
    assert table[0].split() == ["concurrency", "requests", "errors", "infer/s", "p50", "ms", "p99", "ms"]
    assert table[2].split()[:3] == ["4", "12", "0"]


def test_load_test_refuses_other_hosts_and_bad_levels():
    from zoo.triton.load import load_test, parse_concurrency

    with pytest.raises(ValueError, match="this machine only"):
        load_test("10.0.0.1:8000", "m", [{"x": np.zeros(1)}], outputs=["y"])
    with pytest.raises(ValueError, match="concurrency levels must be >= 1"):
        load_test("127.0.0.1:8000", "m", [{"x": np.zeros(1)}], outputs=["y"], concurrency=(0,))
    assert parse_concurrency("1,4,16") == (1, 4, 16)
    with pytest.raises(Exception, match="positive integers"):
        parse_concurrency("1,x")


def test_a_sigterm_while_the_http_client_waits_ends_in_one_line():
    """tritonclient.http waits in gevent's loop: a SIGTERM that comes then is raised there. It reaches the
    entry point (exit 143, one line) and gevent prints no traceback of its own."""
    program = """
import os, signal, threading
import gevent
from zoo.cli import entry_point
from zoo.triton.client import _client_lib

@entry_point
def main():
    _client_lib("http")
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
    gevent.sleep(30)  # a request waiting for its answer
    print("slept through the signal")

main()
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 143, done.stderr
    assert "Traceback" not in done.stderr and "slept through" not in done.stdout, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("terminated (SIGTERM)"), done.stderr


def test_reading_a_running_commands_output_leaves_its_lines_whole():
    """signal_when_serving polls the command's output for the ready line while the command writes to the
    same file: a read must not move the offset the command writes at (a seek to 0 did, and later lines
    landed over the first ones)."""
    import tempfile

    from zoo.triton.processes import _read_all

    lines = 20_000
    with tempfile.TemporaryFile("w+") as output:
        child = subprocess.Popen(
            [sys.executable, "-c", f"import sys\nfor i in range({lines}): print(f'line {{i}}', flush=True)"],
            stdout=output,
        )
        reads = 0
        while child.poll() is None:
            _read_all(output)
            reads += 1
        child.wait()
        text = _read_all(output)
    assert reads >= 3  # it did read while the command wrote
    assert text.splitlines() == [f"line {i}" for i in range(lines)]
