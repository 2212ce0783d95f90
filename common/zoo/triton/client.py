"""Talking to a Triton server: one reused client (HTTP or gRPC), single requests, and the one way a
deploy script gets a server: start ``tritonserver`` on the exported repository, or use ``--url``.

    with serve_or_connect(args.repository, args.model, url=args.url, protocol=args.protocol) as url:
        with TritonClient(url, args.protocol) as client:  # one connection for many requests
            logits = [client.infer(args.model, {"input": b}, ["logits"])["logits"] for b in batches]

A failed request is an :class:`InferenceError` naming the protocol, model and url with the server's
message.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile

from zoo.errors import UserError
from zoo.triton.repository import single_model_repository
from zoo.triton.server import TritonServer, sweep_stale_work_dirs, work_dir_prefix


class InferenceError(UserError, RuntimeError):
    """A request the server refused or could not answer."""


class TritonClient:
    """One client (one connection) to the server at ``url``, reused for every request; a context manager.

        with TritonClient(url, protocol="grpc") as client:
            for batch in batches:
                logits = client.infer("resnet50_onnx", {"input": batch}, ["logits"])["logits"]

    Its methods raise InferenceError naming the protocol, model and url with the server's message.
    Not shared between threads: give each thread its own.
    """

    def __init__(self, url: str, protocol: str = "http"):
        self.url, self.protocol = url, protocol
        self._lib = _client_lib(protocol)
        self._client = self._lib.InferenceServerClient(url)

    def infer(self, model, inputs: dict, outputs: list) -> dict:
        """One request; returns {output name: np.ndarray}."""
        from tritonclient.utils import InferenceServerException, np_to_triton_dtype

        try:
            request = []
            for name, array in inputs.items():
                tensor = self._lib.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
                tensor.set_data_from_numpy(array)
                request.append(tensor)
            wanted = [self._lib.InferRequestedOutput(name) for name in outputs]
            result = self._client.infer(model, request, outputs=wanted)
        except InferenceServerException as e:
            raise InferenceError(
                f"{self.protocol} inference on '{model}' at {self.url} failed: {e.message()}"
            ) from None
        return {name: result.as_numpy(name) for name in outputs}

    def model_io(self, model) -> tuple[list[str], list[str]]:
        """The input names and output names the server declares for ``model``."""
        metadata = self.metadata(model)
        return [t["name"] for t in metadata["inputs"]], [t["name"] for t in metadata["outputs"]]

    def input_shape(self, model) -> list[int]:
        """The shape the server declares for ``model``'s first input, batch dimension included (-1)."""
        return [int(size) for size in self.metadata(model)["inputs"][0]["shape"]]

    def metadata(self, model) -> dict:
        """The model's metadata as the server gives it (name, versions, inputs and outputs with shapes)."""
        from tritonclient.utils import InferenceServerException

        try:
            if self.protocol == "grpc":
                metadata = self._client.get_model_metadata(model, as_json=True)
            else:
                metadata = self._client.get_model_metadata(model)
        except InferenceServerException as e:
            raise InferenceError(
                f"{self.protocol} metadata of '{model}' at {self.url}: {e.message()}"
            ) from None
        return metadata

    def close(self) -> None:
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def infer(url, model, inputs: dict, outputs: list, protocol: str = "http") -> dict:
    """Run one request against ``url`` ("host:port") on a client of its own; returns {output name: np.ndarray}.

    For more than one request, keep a ``TritonClient`` open instead (no connection set-up per request).
    """
    with TritonClient(url, protocol) as client:
        return client.infer(model, inputs, outputs)


def model_io(url, model, protocol: str = "http") -> tuple[list[str], list[str]]:
    """The input names and output names the server at ``url`` declares for ``model``."""
    with TritonClient(url, protocol) as client:
        return client.model_io(model)


def _client_lib(protocol: str):
    if protocol == "http":
        import tritonclient.http as client_lib

        _interrupts_reach_the_main_greenlet()
    elif protocol == "grpc":
        import tritonclient.grpc as client_lib
    else:
        raise ValueError(f"protocol must be 'http' or 'grpc', not {protocol!r}")
    return client_lib


def _interrupts_reach_the_main_greenlet() -> None:
    """The HTTP client runs on gevent: a SIGTERM (``zoo.cli.Terminated``) or Ctrl-C that comes while a
    request waits in gevent's loop is raised there, where gevent prints its traceback and goes on. As
    system errors gevent throws them into the main greenlet instead, unprinted, where the entry point
    reports them in one line."""
    from gevent.hub import Hub

    from zoo.cli import Terminated

    Hub.SYSTEM_ERROR = tuple(dict.fromkeys((*Hub.SYSTEM_ERROR, Terminated)))
    Hub.NOT_ERROR = tuple(dict.fromkeys((*Hub.NOT_ERROR, Terminated, KeyboardInterrupt)))


@contextlib.contextmanager
def serve_or_connect(repository, model: str, *, url=None, protocol="http", python_env=None, log_path=None):
    """Yield the ``host:port`` to send ``model``'s requests to over ``protocol``: ``url`` when given (a
    server already running), else that of a tritonserver started here on a copy of ``repository``'s
    ``model`` alone (``single_model_repository``) and stopped however the block ends (its end, an
    error, Ctrl-C, SIGTERM). ``python_env`` runs python-backend models; ``log_path`` keeps the log."""
    if url:
        yield url
        return
    sweep_stale_work_dirs()
    with tempfile.TemporaryDirectory(prefix=work_dir_prefix("serve")) as only:
        served = single_model_repository(repository, model, only)
        print(f"starting tritonserver on 127.0.0.1 with {repository}/{model} ...", file=sys.stderr)
        with TritonServer(served, python_env=python_env, log_path=log_path) as server:
            print(f"tritonserver ready: HTTP {server.http_url}  gRPC {server.grpc_url}", file=sys.stderr)
            yield server.http_url if protocol == "http" else server.grpc_url
