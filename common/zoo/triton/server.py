"""A local ``tritonserver`` (from the nvidia-pytriton wheel, $TRITONSERVER or PATH), stopped on every
exit path, and the process signals that make sure of it.

    with TritonServer("model_repository") as server:
        print(server.http_url, server.grpc_url)

The wheel's server is copied into a work directory with the python-backend stub that matches the
python of ``python_env``, and runs with the wheel's libraries and that python's libpython on its
library path. A started server never outlives its process's orderly exit: it is stopped at the end of
the block, on an error, on Ctrl-C, and on SIGTERM/SIGHUP (which raise SystemExit while a server runs,
see exit_on_termination_signals). A server that cannot start is a :class:`ServerError`.
"""

from __future__ import annotations

import contextlib
import functools
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

from zoo.dist import end_with_parent, process_gone
from zoo.errors import UserError


class ServerError(UserError, RuntimeError):
    """tritonserver could not start or serve: the first line is the cause, the rest the log's tail."""


class TritonServer:
    """A local tritonserver (from the nvidia-pytriton wheel, $TRITONSERVER or PATH); a context manager.

    Ports left as None are picked free. ``python_env`` is the venv whose python runs python-backend
    models (default: this one). The server's output goes to ``log_path`` (default: a temp file);
    a failed start raises ServerError whose first line is the cause, followed by the log's tail.
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
        # None: no metrics endpoint. A port picked free here can be taken before the server binds it, and
        # Triton, ready by then, exits when its metrics service cannot start (seen with parallel servers).
        self.metrics_port = metrics_port
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
    def metrics_url(self) -> str | None:
        return f"{_client_host(self.host)}:{self.metrics_port}" if self.metrics_port else None

    def start(self):
        """Launch tritonserver and wait until it and every model in the repository are ready.

        Whatever ends the wait (a model that fails to load, the timeout, Ctrl-C, SIGTERM) stops the
        server first. A failed start raises ServerError whose first line is the cause: the failing
        models' reasons (or the server's last error) and the log's path.
        """
        if not self.model_repository.is_dir():
            raise ServerError(f"model repository not found: {self.model_repository}")
        self._signal_guard.enter_context(exit_on_termination_signals())
        try:
            self._launch()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self) -> None:
        sweep_stale_work_dirs()
        self._workdir = pathlib.Path(tempfile.mkdtemp(prefix=work_dir_prefix("triton")))
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
            *(
                [
                    f"--metrics-address={self.host}",
                    f"--metrics-port={self.metrics_port}",
                    "--allow-gpu-metrics=false",
                ]
                if self.metrics_port
                else ["--allow-metrics=false"]
            ),
            "--strict-readiness=true",
            "--exit-on-error=true",
            "--exit-timeout-secs=10",
        ]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self._workdir, start_new_session=True,
                # SIGTERM when this process dies, even by SIGKILL (the server then stops its python stubs)
                preexec_fn=functools.partial(end_with_parent, signal.SIGTERM, os.getpid()),
            )  # fmt: skip

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
                raise ServerError(
                    "no tritonserver: install nvidia-pytriton, or set TRITONSERVER to the binary"
                )
            binary = pathlib.Path(binary).resolve()
            return binary, pathlib.Path(os.environ.get("TRITON_BACKENDS", "/opt/tritonserver/backends")), env

        server_dir = self._workdir / "tritonserver"
        shutil.copytree(wheel_dir, server_dir, symlinks=True)
        version = _python_version(python)
        stub = wheel_dir / "python_backend_stubs" / version / "triton_python_backend_stub"
        if not stub.is_file():
            raise ServerError(f"nvidia-pytriton ships no python backend stub for Python {version}")
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
                raise ServerError(
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
        raise ServerError(
            f"tritonserver not ready after {self.startup_timeout} s: {self._startup_problem()}"
            f" (log: {self.log_path})\n{self.log_tail()}"
        )


def _pytriton_server_dir() -> pathlib.Path | None:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    return path if (path / "bin" / "tritonserver").is_file() else None


def _python_version(python: pathlib.Path) -> str:
    if not python.exists():
        raise ServerError(f"python_env has no bin/python: {python.parent.parent}")
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


def work_dir_prefix(kind: str) -> str:
    """``zoo-<kind>-<pid>-``: a temporary folder named after the process that owns it (sweep_stale_work_dirs)."""
    return f"zoo-{kind}-{os.getpid()}-"


def sweep_stale_work_dirs() -> list[pathlib.Path]:
    """Remove the temporary folders (``zoo-<kind>-<pid>-*``) of processes that no longer run: what a deploy
    killed with SIGKILL left behind. Returns them."""
    removed = []
    for folder in pathlib.Path(tempfile.gettempdir()).glob("zoo-*-*-*"):
        match = re.fullmatch(r"zoo-[a-z]+-(\d+)-.*", folder.name)
        if not match or not folder.is_dir() or int(match.group(1)) == os.getpid():
            continue
        if not process_gone(int(match.group(1))):
            continue  # its process still runs
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


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
    # A signal handler must unwind the stack so that every finally block (the server's stop) runs.
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
