"""Triton model repositories, config.pbtxt checked against Triton's ModelConfig, a local server, a client.

    config = model_config("resnet50_onnx", backend="onnxruntime", max_batch_size=64,
                          inputs=[TensorSpec("input", "FP32", [3, 224, 224])],
                          outputs=[TensorSpec("logits", "FP32", [1000])],
                          dynamic_batching={"preferred_batch_size": [16, 32], "max_queue_delay_microseconds": 100})
    write_model("model_repository", config, {"model.onnx": "resnet50.onnx"})
    with TritonServer("model_repository") as server:
        logits = infer(server.http_url, "resnet50_onnx", {"input": batch}, ["logits"])["logits"]
        with TritonClient(server.http_url) as client:  # one connection for many requests
            logits = [client.infer("resnet50_onnx", {"input": b}, ["logits"])["logits"] for b in batches]
        rows = load_test(server.http_url, "resnet50_onnx", [{"input": b} for b in batches],
                         concurrency=(1, 4, 16), requests=256)
        print(load_table(rows))  # concurrency, requests, errors, infer/s, p50 and p99 ms

A model with only an ONNX file is served by the python backend through one shared model file:

    write_model(repo, config, {"model.py": ONNX_PYTHON_MODEL, "model.onnx": "resnet50.onnx"})

(``config`` with ``backend="python"``; see zoo/triton_onnx_model.py for the parameters it reads.)

A started server never outlives its process's orderly exit: it is stopped at the end of the block,
on an error, on Ctrl-C, and on SIGTERM/SIGHUP (which raise SystemExit while a server runs).

Command line (used by the models' deploy_triton.sh):

    python -m zoo.triton serve --model-repository R [--http-port 8000 --grpc-port 8001]
    python -m zoo.triton validate R
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass

from zoo.io import atomic_write

ONNX_PYTHON_MODEL = pathlib.Path(__file__).with_name("triton_onnx_model.py")
"""The python-backend model.py that serves an ONNX file with onnxruntime (contract in config.pbtxt)."""


@dataclass
class TensorSpec:
    name: str
    dtype: str  # "FP32", "FP16", "INT64", "BYTES", ... (the TYPE_ prefix is optional)
    dims: list


def model_config(
    name,
    *,
    backend: str | None = None,
    platform: str | None = None,
    max_batch_size: int,
    inputs: list,
    outputs: list,
    instance_kind: str = "KIND_GPU",
    instance_count: int = 1,
    dynamic_batching: dict | None = None,
    parameters: dict | None = None,
):
    """Build and check a ``tritonclient.grpc.model_config_pb2.ModelConfig``.

    ``dynamic_batching`` holds ModelDynamicBatching fields, e.g. ``{"preferred_batch_size": [8, 16],
    "max_queue_delay_microseconds": 100}``; ``{}`` turns it on with Triton's defaults, None leaves it off.
    ``parameters`` become ``parameters { key: ... value { string_value: ... } }`` entries.
    """
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2 as pb

    config = pb.ModelConfig(name=name, max_batch_size=max_batch_size)
    if backend:
        config.backend = backend
    if platform:
        config.platform = platform
    for spec in inputs:
        config.input.add(name=spec.name, data_type=_data_type(spec.dtype), dims=list(spec.dims))
    for spec in outputs:
        config.output.add(name=spec.name, data_type=_data_type(spec.dtype), dims=list(spec.dims))
    config.instance_group.add(kind=pb.ModelInstanceGroup.Kind.Value(instance_kind), count=instance_count)
    if dynamic_batching is not None:
        config.dynamic_batching.SetInParent()
        json_format.ParseDict(dynamic_batching, config.dynamic_batching)
    for key, value in (parameters or {}).items():
        config.parameters[key].string_value = str(value)
    _validate(config)
    return config


def config_to_pbtxt(config) -> str:
    """The protobuf text form Triton reads from config.pbtxt."""
    from google.protobuf import text_format

    return text_format.MessageToString(config)


def parse_pbtxt(text: str):
    """Parse config.pbtxt text into ModelConfig; ValueError with the reason on bad text or fields."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    config = pb.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as e:
        raise ValueError(f"not a Triton ModelConfig: {e}") from None
    _validate(config)
    return config


def write_model(repo_dir, config, files: dict, version: int = 1) -> pathlib.Path:
    """Write <repo>/<name>/config.pbtxt and <repo>/<name>/<version>/<file> for each of ``files``.

    A value of ``files`` is the content (bytes) or a file or directory to copy (str or Path; a
    directory such as ``model.savedmodel`` is copied whole). Returns <repo>/<name>.
    """
    _validate(config)
    model_dir = pathlib.Path(repo_dir) / config.name
    version_dir = model_dir / str(version)
    version_dir.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        target = version_dir / name
        if isinstance(source, bytes):
            with atomic_write(target) as tmp:
                tmp.write_bytes(source)
        elif pathlib.Path(source).is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        elif pathlib.Path(source).is_file():
            with atomic_write(target) as tmp:
                shutil.copyfile(source, tmp)
        else:
            raise FileNotFoundError(f"model file for {config.name}/{version}/{name} not found: {source}")
    with atomic_write(model_dir / "config.pbtxt") as tmp:
        tmp.write_text(config_to_pbtxt(config))
    return model_dir


class TritonServer:
    """A local tritonserver (from the nvidia-pytriton wheel, $TRITONSERVER or PATH); a context manager.

    Ports left as None are picked free. ``python_env`` is the venv whose python runs python-backend
    models (default: this one). The server's output goes to ``log_path`` (default: a temp file);
    a failed start raises RuntimeError whose first line is the cause, followed by the log's tail.
    The server runs in a session of its own (a terminal's Ctrl-C reaches only this process), so
    this object stops it: ``stop()``, the end of a ``with`` block, an interrupted ``start()``; while
    it runs, SIGTERM and SIGHUP raise SystemExit here (exit_on_termination_signals) so that those
    end the block too.
    """

    def __init__(
        self,
        model_repository,
        *,
        host="127.0.0.1",
        http_port=None,
        grpc_port=None,
        metrics_port=None,
        python_env: str | None = None,
        log_path=None,
        startup_timeout=120,
    ):
        self.model_repository = pathlib.Path(model_repository).resolve()
        self.host = host
        self.http_port = http_port or _free_port()
        self.grpc_port = grpc_port or _free_port()
        self.metrics_port = metrics_port or _free_port()
        self.python_env = pathlib.Path(python_env or sys.prefix)
        self.startup_timeout = startup_timeout
        self._workdir = None
        self.log_path = pathlib.Path(log_path) if log_path else None
        self.process = None
        self._signal_guard = contextlib.ExitStack()

    @property
    def http_url(self) -> str:
        return f"{_client_host(self.host)}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{_client_host(self.host)}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"{_client_host(self.host)}:{self.metrics_port}"

    def start(self):
        """Launch tritonserver and wait until it and every model in the repository are ready.

        Whatever ends the wait (a model that fails to load, the timeout, Ctrl-C, SIGTERM) stops the
        server first. A failed start raises RuntimeError whose first line is the cause: the failing
        models' reasons (or the server's last error) and the log's path.
        """
        if not self.model_repository.is_dir():
            raise FileNotFoundError(f"model repository not found: {self.model_repository}")
        self._signal_guard.enter_context(exit_on_termination_signals())
        try:
            self._launch()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self) -> None:
        self._workdir = pathlib.Path(tempfile.mkdtemp(prefix="zoo-triton-"))
        self.log_path = self.log_path or self._workdir / "tritonserver.log"
        binary, backends, env = self._prepare_server()
        cmd = [
            str(binary),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={backends}",
            f"--http-address={self.host}",
            f"--http-port={self.http_port}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self.metrics_port}",
            "--allow-gpu-metrics=false",
            "--strict-readiness=true",
            "--exit-on-error=true",
            "--exit-timeout-secs=10",
        ]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self._workdir, start_new_session=True
            )

    def stop(self):
        """Stop the server (SIGTERM, then SIGKILL after 20 s) and its python-backend stubs; idempotent."""
        process, self.process = self.process, None
        try:
            if process is not None and process.poll() is None:
                _signal_group(process, signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if process is not None:
                # The server's process group holds its python stubs: kill what a hung or crashed
                # server (or a second Ctrl-C during the wait above) left behind.
                _signal_group(process, signal.SIGKILL)
                process.wait()
            self._signal_guard.close()
        if self._workdir is not None:
            if self.log_path.parent != self._workdir:
                shutil.rmtree(self._workdir, ignore_errors=True)
            else:  # keep the log readable after stop; drop the copied server
                shutil.rmtree(self._workdir / "tritonserver", ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _startup_problem(self) -> str:
        """The log's model failures (its status table's UNAVAILABLE rows, model directories it could not
        read) and its final error line."""
        problems = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if row := re.fullmatch(r"\|\s*(\S+)\s*\|\s*(\d+)\s*\|\s*(UNAVAILABLE:.*?)\s*\|", line):
                problems.append(f"model '{row[1]}' version {row[2]}: {row[3]}")
            elif poll := re.search(r'\] "?(Poll failed for model directory .*?)"?$', line):
                # a config.pbtxt Triton cannot read leaves no row in the status table
                problems.append(poll[1])
            elif line.startswith("error:"):
                problems.append(line.removeprefix("error:").strip())
        return "; ".join(problems) or "see the log"

    def _prepare_server(self):
        """The binary, a backend directory with the python stub for ``python_env``, and the environment."""
        python = self.python_env / "bin" / "python"
        env = dict(os.environ)
        env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
        wheel_dir = _pytriton_server_dir()
        if wheel_dir is None:
            binary = os.environ.get("TRITONSERVER") or shutil.which("tritonserver")
            if not binary:
                raise RuntimeError(
                    "no tritonserver: install nvidia-pytriton, or set TRITONSERVER to the binary"
                )
            binary = pathlib.Path(binary).resolve()
            return binary, pathlib.Path(os.environ.get("TRITON_BACKENDS", "/opt/tritonserver/backends")), env

        server_dir = self._workdir / "tritonserver"
        shutil.copytree(wheel_dir, server_dir, symlinks=True)
        version = _python_version(python)
        stub = wheel_dir / "python_backend_stubs" / version / "triton_python_backend_stub"
        if not stub.is_file():
            raise RuntimeError(f"nvidia-pytriton ships no python backend stub for Python {version}")
        shutil.copy2(stub, server_dir / "backends" / "python" / stub.name)
        libs = [str(wheel_dir.parent.parent / "nvidia_pytriton.libs"), _python_libdir(python)]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libs + [env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
        binary = pathlib.Path(os.environ.get("TRITONSERVER") or server_dir / "bin" / "tritonserver")
        return binary, server_dir / "backends", env

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        url = f"http://{self.http_url}/v2/health/ready"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.stop()
                raise RuntimeError(
                    f"tritonserver exited with code {code} while starting: {self._startup_problem()}"
                    f" (log: {self.log_path})\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(
            f"tritonserver not ready after {self.startup_timeout} s: {self._startup_problem()}"
            f" (log: {self.log_path})\n{self.log_tail()}"
        )


class TritonClient:
    """One client (one connection) to the server at ``url``, reused for every request; a context manager.

        with TritonClient(url, protocol="grpc") as client:
            for batch in batches:
                logits = client.infer("resnet50_onnx", {"input": batch}, ["logits"])["logits"]

    Its methods raise RuntimeError naming the protocol, model and url with the server's message.
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
            raise RuntimeError(
                f"{self.protocol} inference on '{model}' at {self.url} failed: {e.message()}"
            ) from None
        return {name: result.as_numpy(name) for name in outputs}

    def model_io(self, model) -> tuple[list[str], list[str]]:
        """The input names and output names the server declares for ``model``."""
        from tritonclient.utils import InferenceServerException

        try:
            if self.protocol == "grpc":
                metadata = self._client.get_model_metadata(model, as_json=True)
            else:
                metadata = self._client.get_model_metadata(model)
        except InferenceServerException as e:
            raise RuntimeError(
                f"{self.protocol} metadata of '{model}' at {self.url}: {e.message()}"
            ) from None
        return [t["name"] for t in metadata["inputs"]], [t["name"] for t in metadata["outputs"]]

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


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def load_test(
    url,
    model,
    requests_inputs: list,
    *,
    outputs: list | None = None,
    concurrency=(1, 4, 16),
    requests: int = 64,
    protocol: str = "http",
    time_limit_s: float = 60.0,
    keep_outputs: int = 0,
) -> list[dict]:
    """Load a server on this machine with ``requests`` requests at each level of ``concurrency``.

    For a level of ``c``, ``c`` threads each open ONE client, send one untimed warm-up request, then
    take request indices 0, 1, ... from a shared counter until ``requests`` have been sent or
    ``time_limit_s`` has passed since the level began; request ``i`` sends ``requests_inputs[i %
    len(requests_inputs)]`` (a dict {input name: array}) and asks for ``outputs`` (default: all the
    model declares). Only ``url`` on 127.0.0.1/localhost is accepted (ValueError otherwise).

    Returns one dict per level: ``concurrency``, ``requests`` (sent and timed), ``errors`` (those of
    them that failed), ``first_error`` (its message, or None), ``throughput`` (successful
    inferences per second over the level's wall time), ``p50_ms``/``p99_ms`` (per-request latency,
    ``zoo.bench.percentiles``; None when no request succeeded), and with ``keep_outputs=k`` also
    ``outputs``: {i: {output name: array}} for the successful requests ``i < k``.
    """
    import threading

    from zoo.bench import percentiles

    host = url.rsplit(":", 1)[0]
    if host not in LOOPBACK_HOSTS:
        raise ValueError(f"load_test sends load to this machine only (127.0.0.1), not to {url}")
    if not requests_inputs or requests < 1:
        raise ValueError(f"load_test needs requests_inputs and requests >= 1 (got {requests})")
    levels = [int(c) for c in concurrency]
    if not levels or min(levels) < 1:
        raise ValueError(f"concurrency levels must be >= 1, got {list(concurrency)}")
    if outputs is None:
        outputs = model_io(url, model, protocol)[1]

    rows = []
    for level in levels:
        lock = threading.Lock()
        state = {"next": 0, "errors": 0, "first_error": None, "latencies": [], "outputs": {}}
        all_ready = threading.Barrier(level + 1)

        def worker(state=state, lock=lock, all_ready=all_ready):
            client = None
            try:
                client = TritonClient(url, protocol)
                client.infer(model, requests_inputs[0], outputs)  # connect and warm up, untimed
            except Exception:  # noqa: BLE001 - a failing warm-up fails again in the timed requests
                pass
            all_ready.wait()
            deadline = time.monotonic() + time_limit_s
            try:
                while True:
                    with lock:
                        index = state["next"]
                        if index >= requests or time.monotonic() > deadline:
                            return
                        state["next"] += 1
                    began = time.perf_counter()
                    try:
                        if client is None:  # its set-up failed before: try again, counted
                            client = TritonClient(url, protocol)
                        result = client.infer(model, requests_inputs[index % len(requests_inputs)], outputs)
                    except Exception as e:  # noqa: BLE001 - every failure is a counted error, not a crash
                        message = str(e).splitlines()[0] if str(e) else type(e).__name__
                        with lock:
                            state["errors"] += 1
                            state["first_error"] = state["first_error"] or message
                        continue
                    elapsed_ms = 1000 * (time.perf_counter() - began)
                    with lock:
                        state["latencies"].append(elapsed_ms)
                        if index < keep_outputs:
                            state["outputs"][index] = result
            finally:
                if client is not None:
                    client.close()

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(level)]
        for thread in threads:
            thread.start()
        all_ready.wait()  # every client has connected and warmed up: the clock starts now
        began = time.perf_counter()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - began
        latencies = state["latencies"]
        stats = percentiles(latencies, (50, 99)) if latencies else {"p50": None, "p99": None}
        row = {
            "concurrency": level,
            "requests": state["next"],
            "errors": state["errors"],
            "first_error": state["first_error"],
            "throughput": len(latencies) / seconds if seconds > 0 else 0.0,
            "p50_ms": stats["p50"],
            "p99_ms": stats["p99"],
        }
        if keep_outputs:
            row["outputs"] = state["outputs"]
        rows.append(row)
    return rows


def parse_concurrency(text: str) -> tuple[int, ...]:
    """``"1,4,16"`` -> (1, 4, 16); an argparse ``type=`` (ArgumentTypeError on a bad list)."""
    try:
        levels = tuple(int(part) for part in text.split(","))
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"--concurrency takes positive integers like 1,4,16, not {text!r}")
    return levels


def add_load_args(parser) -> None:
    """``--concurrency 1,4,16`` and ``--requests N``: the deploy scripts' load mode."""
    parser.add_argument(
        "--concurrency",
        type=parse_concurrency,
        default=None,
        help="load mode: concurrent clients per level, e.g. 1,4,16 (prints throughput and latency)",
    )
    parser.add_argument(
        "--requests", type=int, default=64, help="load mode: requests sent at each concurrency level"
    )
    parser.add_argument(
        "--time-limit", type=float, default=60.0, help="load mode: seconds at most per concurrency level"
    )


def load_table(rows: list[dict]) -> str:
    """The rows of ``load_test`` as a text table (concurrency, requests, errors, throughput, p50, p99)."""

    def ms(value):
        return "-" if value is None else f"{value:.2f}"

    lines = [f"{'concurrency':>11} {'requests':>8} {'errors':>6} {'infer/s':>9} {'p50 ms':>8} {'p99 ms':>8}"]
    for row in rows:
        lines.append(
            f"{row['concurrency']:>11} {row['requests']:>8} {row['errors']:>6} {row['throughput']:>9.1f}"
            f" {ms(row['p50_ms']):>8} {ms(row['p99_ms']):>8}"
        )
    return "\n".join(lines)


def run_load_mode(url, model, requests_inputs: list, args, *, outputs=None, protocol=None) -> list[dict]:
    """Load mode of a deploy script: ``load_test`` with ``add_load_args``' flags, print the table.

    Raises SystemExit with a one-line cause when any request failed (after printing the table).
    """
    if args.requests < 1:
        raise SystemExit(f"error: --requests must be >= 1, got {args.requests}")
    try:
        rows = load_test(
            url,
            model,
            requests_inputs,
            outputs=outputs,
            concurrency=args.concurrency,
            requests=args.requests,
            protocol=protocol or args.protocol,
            time_limit_s=args.time_limit,
        )
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    print(f"{model} over {protocol or args.protocol} at {url}:")
    print(load_table(rows), flush=True)
    failed = [row for row in rows if row["errors"]]
    if failed:
        total = sum(row["errors"] for row in failed)
        raise SystemExit(f"error: {total} request(s) failed under load: {failed[0]['first_error']}")
    return rows


def _client_lib(protocol: str):
    if protocol == "http":
        import tritonclient.http as client_lib
    elif protocol == "grpc":
        import tritonclient.grpc as client_lib
    else:
        raise ValueError(f"protocol must be 'http' or 'grpc', not {protocol!r}")
    return client_lib


def _data_type(dtype: str) -> int:
    from tritonclient.grpc import model_config_pb2 as pb

    name = dtype.upper().removeprefix("TYPE_")
    name = {"BYTES": "STRING"}.get(name, name)
    if f"TYPE_{name}" not in pb.DataType.keys():
        raise ValueError(f"unknown Triton data type {dtype!r}")
    return pb.DataType.Value(f"TYPE_{name}")


def _validate(config) -> None:
    """The checks Triton would fail a model on at load time, done before a server is involved."""
    label = f"model '{config.name}'" if config.name else "model config"
    if not config.name:
        raise ValueError("model config has no name")
    if not (config.backend or config.platform):
        raise ValueError(f"{label} names neither a backend nor a platform")
    if config.max_batch_size < 0:
        raise ValueError(f"{label}: max_batch_size must be >= 0, got {config.max_batch_size}")
    if not config.input or not config.output:
        raise ValueError(f"{label} must declare at least one input and one output")
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for tensor in tensors:
            if not tensor.name:
                raise ValueError(f"{label}: an {kind} has no name")
            if tensor.data_type == 0:
                raise ValueError(f"{label}: {kind} '{tensor.name}' has no data_type")
            if not tensor.dims and not tensor.HasField("reshape"):
                raise ValueError(f"{label}: {kind} '{tensor.name}' has no dims")
            if any(d < -1 or d == 0 for d in tensor.dims):
                raise ValueError(
                    f"{label}: {kind} '{tensor.name}' dims {list(tensor.dims)} must be > 0 or -1"
                )


def _pytriton_server_dir() -> pathlib.Path | None:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    return path if (path / "bin" / "tritonserver").is_file() else None


def _python_version(python: pathlib.Path) -> str:
    if not python.exists():
        raise RuntimeError(f"python_env has no bin/python: {python.parent.parent}")
    if python.parent.parent.resolve() == pathlib.Path(sys.prefix).resolve():
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    code = "import sys; print(f'{sys.version_info.major}.{sys.version_info.minor}')"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def _python_libdir(python: pathlib.Path) -> str:
    """Where libpython lives, which the python backend stub links against."""
    code = "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _client_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


TERMINATION_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def exit_on_termination_signals():
    """While active, SIGTERM and SIGHUP raise SystemExit(128 + signal) instead of killing the process.

    Python's default for them ends the process without running ``finally`` blocks, which would
    leave a tritonserver (started in a session of its own) running. Only signals still at their
    default are taken over, and only in the main thread (elsewhere this does nothing); the previous
    handlers come back at the end. Ctrl-C keeps Python's KeyboardInterrupt (``finally`` blocks run);
    if nothing catches it, the process reports it in one line instead of a traceback (``sys.excepthook``).
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in TERMINATION_SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:
            previous[sig] = signal.signal(sig, _raise_system_exit)
    if not getattr(sys.excepthook, "reports_interrupts", False):
        sys.excepthook = _interrupt_in_one_line(sys.excepthook)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _raise_system_exit(signum, frame):
    raise SystemExit(128 + signum)


def _interrupt_in_one_line(previous):
    """An excepthook reporting an uncaught KeyboardInterrupt in one line (Python then still ends the
    process as SIGINT would); any other exception goes to ``previous``."""

    def hook(kind, value, traceback):
        if issubclass(kind, KeyboardInterrupt):
            print("interrupted (Ctrl-C): tritonserver stopped", file=sys.stderr, flush=True)
        else:
            previous(kind, value, traceback)

    hook.reports_interrupts = True
    return hook


@dataclass
class TritonProcess:
    pid: int
    parent: int
    session: int
    name: str  # "tritonserver" or "triton_python_backend_stub"


def triton_processes(descending_from: int | None = None) -> list[TritonProcess]:
    """Live tritonserver and python-stub processes from a /proc scan (zombies left out).

    With ``descending_from``, only the children, grandchildren... of that pid. A server stopped
    properly leaves none; a test records ``session`` of a deploy's servers while it serves and
    checks that no process of those sessions survives it.
    """
    names = ("tritonserver", "triton_python_backend_stub")
    table = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:  # exited during the scan
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp session ...
        if fields[0] in ("Z", "X"):
            continue
        table[int(entry.name)] = (int(fields[1]), int(fields[3]), pathlib.Path(argv0).name)
    found = []
    for pid, (parent, session, name) in table.items():
        if name not in names:
            continue
        ancestor = parent
        while descending_from is not None and ancestor not in (descending_from, 0, 1) and ancestor in table:
            ancestor = table[ancestor][0]
        if descending_from is None or ancestor == descending_from:
            found.append(TritonProcess(pid, parent, session, name))
    return found


@dataclass
class SignalledRun:
    returncode: int
    output: str
    served_by: list  # the TritonProcess entries seen under the command when it was signalled
    left_running: list  # those, or others of their sessions, still alive after the command ended


def signal_when_serving(command, sig, *, ready_text=None, env=None, cwd=None, timeout=300) -> SignalledRun:
    """Run ``command``, send it ``sig`` while it serves, and report what of its servers outlived it.

    The signal goes once the command has printed ``ready_text`` (when given) and a tritonserver with
    a python stub runs under it; with ``ready_text=None`` it arrives while models still load. For
    tests of the deploy scripts: ``left_running`` must be empty. The command starts with SIGINT at its
    default, as a program in a terminal does, also where this process runs in the background (where
    the shell ignored SIGINT and the command would inherit that).
    """

    def default_sigint():
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=cwd, preexec_fn=default_sigint
        )
        try:
            deadline = time.monotonic() + timeout
            served_by = []
            while not (
                any(p.name == "triton_python_backend_stub" for p in served_by)
                and (ready_text is None or ready_text in _read_all(output))
            ):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{command[:3]} ended or timed out before serving:\n{_read_all(output)[-3000:]}"
                    )
                time.sleep(0.1)
                served_by = triton_processes(descending_from=process.pid)
            process.send_signal(sig)
            process.wait(timeout=timeout)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        sessions = {p.session for p in served_by}
        pids = {p.pid for p in served_by}
        deadline = time.monotonic() + 5  # a killed stub may take a moment to be reaped
        while (left := [p for p in triton_processes() if p.session in sessions or p.pid in pids]) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.2)
        return SignalledRun(process.returncode, _read_all(output), served_by, left)


def _read_all(file) -> str:
    file.flush()
    file.seek(0)
    return file.read()


def validate_repository(repo) -> list[pathlib.Path]:
    """Parse every config.pbtxt under ``repo``; ValueError naming the first bad file."""
    configs = sorted(pathlib.Path(repo).rglob("config.pbtxt"))
    if not configs:
        raise ValueError(f"no config.pbtxt under {repo}")
    for path in configs:
        try:
            parse_pbtxt(path.read_text())
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
    return configs


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m zoo.triton", description="Serve or check a Triton model repository."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run tritonserver on a model repository until Ctrl-C")
    serve.add_argument("--model-repository", required=True)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--http-port", type=int, help="default: a free port")
    serve.add_argument("--grpc-port", type=int, help="default: a free port")
    serve.add_argument("--metrics-port", type=int, help="default: a free port")
    serve.add_argument("--python-env", help="venv that runs python-backend models (default: this one)")
    serve.add_argument("--log-path", help="tritonserver log file (default: a temp file)")
    serve.add_argument("--startup-timeout", type=float, default=120)
    validate = commands.add_parser("validate", help="parse every config.pbtxt under a repository")
    validate.add_argument("model_repository")
    args = parser.parse_args(argv)

    if args.command == "validate":
        try:
            configs = validate_repository(args.model_repository)
        except ValueError as e:
            raise SystemExit(str(e)) from None
        print(f"{len(configs)} config.pbtxt file(s) under {args.model_repository} are valid ModelConfigs")
        return

    server = TritonServer(
        args.model_repository,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        python_env=args.python_env,
        log_path=args.log_path,
        startup_timeout=args.startup_timeout,
    )
    # SIGTERM is the ordinary way to stop a server: exit 0 after stopping it, as after Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started in the background
    try:
        server.start()
        print(
            f"serving {args.model_repository}: HTTP {server.http_url}  gRPC {server.grpc_url}"
            f"  log {server.log_path}"
        )
        print("Ctrl-C to stop", flush=True)
        code = server.process.wait()
        raise SystemExit(f"error: tritonserver exited with code {code} (log: {server.log_path})")
    except KeyboardInterrupt:
        pass
    except (RuntimeError, FileNotFoundError) as e:
        raise SystemExit(f"error: {str(e).splitlines()[0]}") from None
    finally:
        server.stop()


if __name__ == "__main__":
    main()
