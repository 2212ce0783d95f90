"""What the models' tests share to drive a training script as a user's machine would.

``sigterm_at_step(step, module, *args)`` is the command line of ``python -m module args`` whose process
receives SIGTERM right after optimizer step ``step`` (through :class:`zoo.cli.Preemption`, the check that
every training loop makes after each step): the preemption a scheduler sends, at a known step, so that a
test can compare the resumed run with an unbroken one step by step.

``tf_workers(count, command, logs)`` runs ``count`` TensorFlow workers on 127.0.0.1 as one
MultiWorkerMirroredStrategy cluster, for the multi-worker tests of the TensorFlow models.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys

_SIGTERM_AT_STEP = """
import os, runpy, signal, sys
import zoo.cli
at, module = int(sys.argv[1]), sys.argv[2]
requested = zoo.cli.Preemption.requested
def sigterm_at(self, step):
    if step == at:
        os.kill(os.getpid(), signal.SIGTERM)
    return requested(self, step)
zoo.cli.Preemption.requested = sigterm_at
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def sigterm_at_step(step: int, module: str, *args) -> list[str]:
    """The command: ``python -m module args``, sent SIGTERM after optimizer step ``step``."""
    return [sys.executable, "-c", _SIGTERM_AT_STEP, str(step), module, *map(str, args)]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (held together while chosen, so none repeats)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@contextlib.contextmanager
def tf_workers(count: int, command, logs, **env):
    """Start ``count`` processes, ``command(index)`` each, as the workers of one TensorFlow cluster on
    127.0.0.1 (TF_CONFIG names them all and each its own index; ``env`` is added to the environment, with
    TF_CPP_MIN_LOG_LEVEL=2). Each one's output goes to ``logs/worker{index}.log``. Yields the processes;
    on leaving, those still running are killed."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(count)]}
    procs, files = [], []
    try:
        for index in range(count):
            task = {"cluster": cluster, "task": {"type": "worker", "index": index}}
            worker_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env, TF_CONFIG=json.dumps(task))
            files.append(open(os.path.join(logs, f"worker{index}.log"), "w"))  # noqa: SIM115 - closed below
            procs.append(
                subprocess.Popen(command(index), env=worker_env, stdout=files[-1], stderr=subprocess.STDOUT)
            )
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for file in files:
            file.close()
