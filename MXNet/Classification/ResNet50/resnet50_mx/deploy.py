"""Serve a model repository with tritonserver and classify validation images through tritonclient (HTTP).

The server comes from the ``nvidia-pytriton`` wheel through ``zoo.triton``. When this interpreter
has no ``pytriton`` (the MXNet venv), ``python -m zoo.triton serve`` runs in ``$ZOO_TRITON_PYTHON``
(default: the checkout's ``.venv/pytorch/bin/python``); python-backend models run in
``--python-env`` (default: this venv, which has onnxruntime and numpy). The models take ``images``
FP32 NCHW and answer ``logits``. The server is stopped however the run ends (its end, an error,
Ctrl-C, SIGTERM). Requests go one at a time over one connection. Load mode (--concurrency 1,4,16
--requests N) sends the images' requests from that many HTTP clients at once per level, prints
throughput, p50/p99 latency and errors per level, and exits non-zero if any request failed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
from zoo.cli import entry_point
from zoo.errors import UserError

from .triton_repo import INPUT_NAME, OUTPUT_NAME, zoo_triton_python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_python() -> str:
    if importlib.util.find_spec("pytriton") is not None:
        return sys.executable
    candidate = zoo_triton_python()
    if candidate is None or not Path(candidate).is_file():
        raise UserError(
            "no tritonserver here: install nvidia-pytriton, or set ZOO_TRITON_PYTHON to a python that has it"
        )
    return candidate


@contextlib.contextmanager
def serve(
    model_repository,
    *,
    models: list[str] | None = None,
    python_env: str | None = None,
    http_port: int | None = None,
    timeout: float = 180,
):
    """Run tritonserver on ``model_repository`` until the block ends; yields the HTTP url ("host:port").

    ``models`` limits the server to those models (linked into a temporary repository): the server
    of the nvidia-pytriton wheel has the python backend only, not onnxruntime.
    """
    repo = Path(model_repository)
    names = served_models(repo, models)
    from zoo.dist import end_with_parent
    from zoo.triton.server import exit_on_termination_signals, sweep_stale_work_dirs, work_dir_prefix

    sweep_stale_work_dirs()  # what deploys killed with SIGKILL left
    served = Path(tempfile.mkdtemp(prefix=work_dir_prefix("repo")))
    for name in names:
        (served / name).symlink_to((repo / name).resolve())
    port = http_port or _free_port()
    url = f"127.0.0.1:{port}"
    descriptor, log = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
    os.close(descriptor)
    with exit_on_termination_signals(), tempfile.TemporaryFile("w+") as output:
        proc = None
        try:
            cmd = [server_python(), "-m", "zoo.triton", "serve", "--model-repository", str(served)]
            cmd += ["--http-port", str(port), "--python-env", python_env or sys.prefix, "--log-path", log]
            # SIGTERM to the helper when this process dies, even by SIGKILL: it stops the server and its stubs
            proc = subprocess.Popen(
                cmd, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=functools.partial(end_with_parent, signal.SIGTERM, os.getpid()),
            )  # fmt: skip
            _wait_ready(proc, url, output, log, timeout)
            print(f"tritonserver ready: HTTP {url} (log: {log})", file=sys.stderr)
            yield url
        finally:
            if proc is not None:
                _stop(proc)
            for link in served.iterdir():
                link.unlink()
            served.rmdir()


def served_models(model_repository, models: list[str] | None = None) -> list[str]:
    """The models :func:`serve` starts (``models``, else every one of the repository), each config.pbtxt
    checked (:func:`check_config`): a one-line error before a server starts or an image is read."""
    repo = Path(model_repository)
    if not repo.is_dir():
        raise UserError(f"model repository {repo} does not exist (make it with scripts/export_triton.sh)")
    names = models or [p.name for p in repo.iterdir() if (p / "config.pbtxt").is_file()]
    for name in names:
        if not (repo / name / "config.pbtxt").is_file():
            raise UserError(f"model repository {repo} has no model {name}")
        check_config(repo / name)
    return names


def check_config(model_dir: Path) -> None:
    """A one-line error when ``model_dir/config.pbtxt`` is not a valid Triton ModelConfig: parsed by
    ``python -m zoo.triton validate`` in the server's python (this venv's protobuf cannot load Triton's
    schema), before the server would fail with "failed to load all models"."""
    proc = subprocess.run(
        [server_python(), "-m", "zoo.triton", "validate", str(model_dir)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
        reason = lines[-1].removeprefix("error: ") if lines else f"exit code {proc.returncode}"
        raise UserError(reason)


def _wait_ready(proc: subprocess.Popen, url: str, output, log: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            output.seek(0)
            lines = output.read().strip().splitlines()
            # zoo.triton serve's last line is "error: <why>" (the failing models' reasons).
            why = next((line for line in reversed(lines) if line.startswith("error:")), None)
            raise UserError(
                why.removeprefix("error: ") if why else f"tritonserver did not start (log: {log})"
            )
        try:
            with urllib.request.urlopen(f"http://{url}/v2/health/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise UserError(f"tritonserver not ready after {timeout:.0f} s (log: {log})")
        time.sleep(0.5)


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT to ``python -m zoo.triton serve`` (it stops the server and its python stubs); kill the rest."""
    from zoo.triton.processes import triton_processes

    # The server runs in a session of its own: note it now, to kill it should the wrapper fail to.
    servers = [p for p in triton_processes(descending_from=proc.pid) if p.name == "tritonserver"]
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                pass
    finally:
        for group in [proc.pid] + [server.session for server in servers]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        proc.wait()


def load_images(data_dir: str, image_size: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` validation images, preprocessed as for evaluation (NCHW float32)."""
    import mxnet as mx

    from .data import DataSpec, build_loader
    from .records import check_dataset

    check_dataset(data_dir, ["val"])  # the C++ reader would crash on a bad record
    spec = DataSpec("recordio", data_dir, batch_size=min(count, 64), image_size=image_size, num_classes=0)
    images, labels = [], []
    for data, label, pad in build_loader(spec, train=False, epoch=0, seed=0, ctx=mx.cpu()):
        valid = data.shape[0] - pad
        images.append(data[:valid].asnumpy())
        labels.append(label[:valid].asnumpy().astype(np.int64))
        if sum(len(x) for x in images) >= count:
            break
    return np.concatenate(images)[:count], np.concatenate(labels)[:count]


def classify(url: str, model: str, images: np.ndarray, batch_size: int) -> tuple[np.ndarray, list[float]]:
    """Logits for ``images`` from the served ``model`` (over one connection) and each request's latency (ms)."""
    from zoo.triton.client import TritonClient

    logits, latencies = [], []
    with TritonClient(url, "http") as client:
        for inputs in request_inputs(images, batch_size):
            tic = time.perf_counter()
            out = client.infer(model, inputs, [OUTPUT_NAME])[OUTPUT_NAME]
            latencies.append((time.perf_counter() - tic) * 1000)
            logits.append(out)
    return np.concatenate(logits), latencies


def request_inputs(images: np.ndarray, batch_size: int) -> list[dict]:
    """One request of ``batch_size`` images (the last one shorter) per dict."""
    return [
        {INPUT_NAME: np.ascontiguousarray(images[start : start + batch_size], dtype=np.float32)}
        for start in range(0, len(images), batch_size)
    ]


@entry_point
def main(argv=None):
    from zoo.triton.load import add_load_args, run_load_mode

    p = argparse.ArgumentParser(
        prog="deploy_triton.sh",
        description="Serve a Triton model repository (scripts/export_triton.sh) and classify validation images.",
    )
    p.add_argument("--model-repository", default="model_repository")
    p.add_argument("--model", default="resnet50_mx_python", help="resnet50_mx_python or resnet50_mx_onnx")
    p.add_argument("--data-dir", required=True, help="folder with val.rec/.idx")
    p.add_argument("--image-size", type=int, help="default: read from the model's config.pbtxt")
    p.add_argument("--num-images", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--url", help="query a running server at host:port instead of starting one")
    p.add_argument("--http-port", type=int, help="port for the started server (default: a free one)")
    p.add_argument("--python-env", help="venv running python-backend models (default: this one)")
    p.add_argument(
        "--labels", help="class names, one a line in label order (default: the model's labels.txt)"
    )
    add_load_args(p)
    args = p.parse_args(argv)
    for flag in ("image_size", "num_images", "batch_size"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise SystemExit(f"error: --{flag.replace('_', '-')} must be a positive integer, not {value}")

    image_size = args.image_size or _config_image_size(
        Path(args.model_repository) / args.model / "config.pbtxt"
    )
    if not args.url:  # the served model's configuration is checked before MXNet reads the images
        served_models(args.model_repository, [args.model])
    images, labels = load_images(args.data_dir, image_size, args.num_images)
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(
            serve(
                args.model_repository,
                models=[args.model],
                python_env=args.python_env,
                http_port=args.http_port,
            )
        )
        if args.concurrency:
            batches = request_inputs(images, args.batch_size)
            return {
                "load": run_load_mode(url, args.model, batches, args, outputs=[OUTPUT_NAME], protocol="http")
            }
        logits, latencies = classify(url, args.model, images, args.batch_size)
    from zoo.bench import percentiles
    from zoo.triton.labels import label_of, read_labels

    predictions = logits.argmax(axis=1)
    names = read_labels(args.model_repository, args.model, labels_file=args.labels)
    for i in range(min(10, len(predictions))):
        print(f"image {i}: predicted {label_of(names, predictions[i])} (label {label_of(names, labels[i])})")
    result = {
        "model": args.model,
        "images": int(len(images)),
        "top1": 100 * float((predictions == labels).mean()),  # %, as training and evaluate.sh print it
        "batch_size": args.batch_size,
        "latency_ms": percentiles(latencies),
    }
    print(json.dumps(result))
    return result


def _config_image_size(config: Path) -> int:
    if not config.is_file():
        raise UserError(f"{config} not found: is --model right and the repository exported?")
    try:
        dims = [
            int(line.split(":")[1])
            for line in config.read_text().splitlines()
            if line.strip().startswith("dims:")
        ]
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"{config} is not a model configuration written by export_triton.sh") from None
    return dims[2] if len(dims) >= 3 else 224


if __name__ == "__main__":
    main()
