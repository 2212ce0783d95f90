"""Triton python-backend model: an ONNX file served with onnxruntime, its contract read from config.pbtxt.

Every model of the zoo writes this file as ``<model>/<version>/model.py`` beside its ONNX file
(``zoo.triton.repository.ONNX_PYTHON_MODEL``). It imports only numpy, onnxruntime and Triton's
``triton_python_backend_utils``, so it runs in any venv that has onnxruntime.

What it reads from the model's config (``args["model_config"]``):

- ``input``: name, data_type, dims of every tensor a request carries; the ONNX graph's inputs must
  have the same names and element types. ``max_batch_size`` > 0 makes the first axis the batch.
- ``output``: the tensors each response carries, cast to their data_type and checked against dims.
  Without ``postprocess`` they are ONNX outputs of the same names.
- ``parameters`` (all optional):
    ``onnx_file``            the ONNX file in the version directory (default ``model.onnx``)
    ``intra_op_threads``     onnxruntime threads (default 0: onnxruntime picks; env ZOO_ORT_THREADS wins)
    ``min_value:<input>``    smallest value allowed in that input (inclusive), e.g. ``0``
    ``max_value:<input>``    largest value allowed in that input (inclusive), e.g. vocab size - 1
    ``postprocess``          a python file in the version directory (numpy only) whose
                             ``postprocess(outputs, parameters)`` maps one request's ONNX outputs
                             ({name: array}) to the config's outputs; ``parameters`` is this
                             {key: string} table, so the file's settings live in the config too

Each request is checked on its own (inputs present, dtype, shape against dims and max_batch_size,
one batch size across inputs, declared value ranges); a bad one gets an error response naming the
problem. The good requests of a batch run in one onnxruntime call; if that call fails, each runs
alone, so only a request that fails by itself gets an error.
"""

import importlib.util
import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

NUMPY_TYPES = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
}
ONNX_TYPES = {
    "TYPE_BOOL": "tensor(bool)",
    "TYPE_UINT8": "tensor(uint8)",
    "TYPE_UINT16": "tensor(uint16)",
    "TYPE_UINT32": "tensor(uint32)",
    "TYPE_UINT64": "tensor(uint64)",
    "TYPE_INT8": "tensor(int8)",
    "TYPE_INT16": "tensor(int16)",
    "TYPE_INT32": "tensor(int32)",
    "TYPE_INT64": "tensor(int64)",
    "TYPE_FP16": "tensor(float16)",
    "TYPE_FP32": "tensor(float)",
    "TYPE_FP64": "tensor(double)",
}


class RequestError(Exception):
    """A request that cannot be served; its message goes back to the client."""


class TensorContract:
    """One input or output of the config: name, numpy dtype, dims (-1 = any), allowed value range."""

    def __init__(self, entry: dict, parameters: dict, model: str):
        self.name = entry["name"]
        self.data_type = entry["data_type"]
        if self.data_type not in NUMPY_TYPES:
            raise ValueError(
                f"model '{model}': tensor '{self.name}' has {self.data_type}; numeric types only"
            )
        self.dtype = np.dtype(NUMPY_TYPES[self.data_type])
        self.dims = [int(d) for d in entry["dims"]]
        self.min_value = _number(parameters, f"min_value:{self.name}", model)
        self.max_value = _number(parameters, f"max_value:{self.name}", model)

    def check(self, array: np.ndarray, batched: bool, max_batch_size: int) -> None:
        """RequestError unless ``array`` has this dtype, these dims (after the batch axis) and range."""
        if array.dtype != self.dtype:
            raise RequestError(f"'{self.name}' must be {self.data_type}, got {array.dtype}")
        shape = list(array.shape)
        expected = ([-1] if batched else []) + self.dims
        fits = len(shape) == len(expected) and all(e in (-1, s) for e, s in zip(expected, shape, strict=True))
        if not fits:
            raise RequestError(f"'{self.name}' has shape {shape}, the model takes {_shape_text(expected)}")
        if batched and not 1 <= shape[0] <= max_batch_size:
            raise RequestError(f"'{self.name}' has batch {shape[0]}, the model takes 1..{max_batch_size}")
        if array.size and self.min_value is not None and array.min() < self.min_value:
            raise RequestError(f"'{self.name}' holds {array.min()}, below its minimum {self.min_value}")
        if array.size and self.max_value is not None and array.max() > self.max_value:
            raise RequestError(f"'{self.name}' holds {array.max()}, above its maximum {self.max_value}")


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.model = config["name"]
        self.parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.max_batch_size = int(config.get("max_batch_size", 0))
        self.batched = self.max_batch_size > 0
        self.inputs = [TensorContract(entry, self.parameters, self.model) for entry in config["input"]]
        self.outputs = [TensorContract(entry, self.parameters, self.model) for entry in config["output"]]
        folder = os.path.join(args["model_repository"], args["model_version"])
        self.session = self._open_session(
            os.path.join(folder, self.parameters.get("onnx_file", "model.onnx"))
        )
        self.postprocess = None
        if "postprocess" in self.parameters:
            self.postprocess = _load_postprocess(os.path.join(folder, self.parameters["postprocess"]))
        self._check_graph()
        # The names asked of onnxruntime: the config's outputs, or every graph output for postprocess.
        graph_outputs = [o.name for o in self.session.get_outputs()]
        self.onnx_outputs = graph_outputs if self.postprocess else [o.name for o in self.outputs]

    def execute(self, requests):
        responses = [None] * len(requests)
        feeds = {}
        for index, request in enumerate(requests):
            try:
                feeds[index] = self._read_request(request)
            except RequestError as e:
                responses[index] = _error_response(f"model '{self.model}': {e}")
        for group in self._groups(feeds):
            for index, result in self._run_group(group, feeds).items():
                responses[index] = result
        return responses

    def finalize(self):
        self.session = None

    def _open_session(self, path):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"model '{self.model}': ONNX file {path} not found")
        options = ort.SessionOptions()
        threads = os.environ.get("ZOO_ORT_THREADS") or self.parameters.get("intra_op_threads", "0")
        options.intra_op_num_threads = int(threads)
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def _check_graph(self):
        """Fail at load time when config.pbtxt and the ONNX graph disagree on names or types."""
        graph_inputs = {i.name: i.type for i in self.session.get_inputs()}
        if sorted(graph_inputs) != sorted(t.name for t in self.inputs):
            raise ValueError(
                f"model '{self.model}': config inputs {[t.name for t in self.inputs]} are not the ONNX "
                f"inputs {sorted(graph_inputs)}"
            )
        for tensor in self.inputs:
            if graph_inputs[tensor.name] != ONNX_TYPES[tensor.data_type]:
                raise ValueError(
                    f"model '{self.model}': input '{tensor.name}' is {tensor.data_type} in the config, "
                    f"{graph_inputs[tensor.name]} in the ONNX file"
                )
        if self.postprocess is None:
            missing = {t.name for t in self.outputs} - {o.name for o in self.session.get_outputs()}
            if missing:
                raise ValueError(f"model '{self.model}': the ONNX file has no output(s) {sorted(missing)}")

    def _read_request(self, request) -> dict:
        feed, batch_sizes = {}, set()
        for tensor in self.inputs:
            found = pb_utils.get_input_tensor_by_name(request, tensor.name)
            if found is None:
                raise RequestError(f"input '{tensor.name}' is missing")
            array = found.as_numpy()
            tensor.check(array, self.batched, self.max_batch_size)
            feed[tensor.name] = array
            batch_sizes.add(array.shape[0] if self.batched else None)
        if len(batch_sizes) > 1:
            raise RequestError(f"inputs have different batch sizes {sorted(batch_sizes)}")
        return feed

    def _groups(self, feeds: dict) -> list:
        """Requests that can run as one batch: same shapes after the batch axis (all alone if unbatched)."""
        if not self.batched:
            return [[index] for index in feeds]
        groups = {}
        for index, feed in feeds.items():
            key = tuple(feed[t.name].shape[1:] for t in self.inputs)
            groups.setdefault(key, []).append(index)
        return list(groups.values())

    def _run_group(self, group: list, feeds: dict) -> dict:
        """{request index: response} for ``group``; a failing batch falls back to one request at a time."""
        if len(group) > 1:
            try:
                return self._run_batch(group, feeds)
            except Exception:
                pass  # one request broke the batch: run each alone below, so only that one gets an error
        responses = {}
        for index in group:
            try:
                responses[index] = self._response(self._run(feeds[index]))
            except Exception as e:  # onnxruntime's or postprocess's reason goes back to the client
                responses[index] = _error_response(f"model '{self.model}': {_one_line(e)}")
        return responses

    def _run_batch(self, group: list, feeds: dict) -> dict:
        joined = {t.name: np.concatenate([feeds[i][t.name] for i in group]) for t in self.inputs}
        sizes = [len(feeds[i][self.inputs[0].name]) for i in group]
        parts = _split(self._run(joined), sizes)
        return {index: self._response(outputs) for index, outputs in zip(group, parts, strict=True)}

    def _run(self, feed: dict) -> dict:
        return dict(zip(self.onnx_outputs, self.session.run(self.onnx_outputs, feed), strict=True))

    def _response(self, onnx_outputs: dict):
        """One request's response: postprocess, then every config output cast to its type and checked."""
        outputs = self.postprocess(onnx_outputs, dict(self.parameters)) if self.postprocess else onnx_outputs
        tensors = []
        for tensor in self.outputs:
            if tensor.name not in outputs:
                raise RequestError(f"no output '{tensor.name}' was produced")
            array = np.ascontiguousarray(np.asarray(outputs[tensor.name]).astype(tensor.dtype, copy=False))
            tensor.check(array, self.batched, self.max_batch_size)
            tensors.append(pb_utils.Tensor(tensor.name, array))
        return pb_utils.InferenceResponse(output_tensors=tensors)


def _split(results: dict, sizes: list) -> list:
    """Per-request slices of batched outputs; ValueError when an output's batch axis is not sum(sizes)."""
    for name, array in results.items():
        if len(array) != sum(sizes):
            raise ValueError(f"output '{name}' has batch {len(array)}, expected {sum(sizes)}")
    bounds = np.cumsum([0] + sizes)
    return [
        {name: array[a:b] for name, array in results.items()}
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]


def _load_postprocess(path):
    if not os.path.isfile(path):
        raise FileNotFoundError(f"postprocess file {path} not found")
    spec = importlib.util.spec_from_file_location("zoo_postprocess", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "postprocess", None)):
        raise ValueError(f"{path} defines no postprocess(outputs, parameters)")
    return module.postprocess


def _error_response(message: str):
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))


def _number(parameters: dict, key: str, model: str):
    """The number in parameter ``key``, None when absent; ValueError naming it when it is no number."""
    if key not in parameters:
        return None
    try:
        value = float(parameters[key])
    except ValueError:
        raise ValueError(
            f"model '{model}': parameter {key} must be a number, got {parameters[key]!r}"
        ) from None
    return int(value) if value.is_integer() else value


def _shape_text(dims: list) -> str:
    return "[" + ", ".join("any" if d == -1 else str(d) for d in dims) + "]"


def _one_line(error: BaseException) -> str:
    """zoo.errors.one_line, which this file cannot import: it runs in a python stub without zoo."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
