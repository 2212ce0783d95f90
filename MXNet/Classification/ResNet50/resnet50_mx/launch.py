"""Start a parameter-server job on this machine: one scheduler, S servers and N workers (dist_sync).

Each process is ``python -m resnet50_mx.train <args>`` with MXNet's launcher variables set:
DMLC_ROLE, DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_NUM_WORKER, DMLC_NUM_SERVER. Scheduler and
servers do their work inside ``import mxnet``. Across nodes, start the same processes with the same
variables on each node (the scheduler's address in DMLC_PS_ROOT_URI): see the README.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

from zoo.cli import entry_point
from zoo.errors import UserError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(
    train_args: list[str], *, workers: int, servers: int, port: int | None = None, timeout=None
) -> int:
    """Run the job; returns 0 when every worker succeeded, else the first failing worker's exit code."""
    base = dict(
        os.environ,
        DMLC_PS_ROOT_URI="127.0.0.1",
        DMLC_PS_ROOT_PORT=str(port or _free_port()),
        DMLC_NUM_WORKER=str(workers),
        DMLC_NUM_SERVER=str(servers),
        DMLC_NODE_HOST="127.0.0.1",
    )
    cmd = [sys.executable, "-m", "resnet50_mx.train", *train_args]
    helpers = [subprocess.Popen(cmd, env=dict(base, DMLC_ROLE="scheduler"))]
    helpers += [subprocess.Popen(cmd, env=dict(base, DMLC_ROLE="server")) for _ in range(servers)]
    procs = [subprocess.Popen(cmd, env=dict(base, DMLC_ROLE="worker")) for _ in range(workers)]
    deadline = None if timeout is None else time.monotonic() + timeout
    code = 0
    try:
        for proc in procs:
            left = None if deadline is None else max(1.0, deadline - time.monotonic())
            rc = proc.wait(timeout=left)
            code = code or rc
        for proc in helpers:
            proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        code = 124
    finally:
        for proc in procs + helpers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return code


@entry_point
def main(argv=None):
    p = argparse.ArgumentParser(
        prog="train.sh --local-workers N",
        description="Run resnet50_mx.train as a dist_sync job on this machine (scheduler + servers + workers).",
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--servers", type=int, default=1)
    p.add_argument("--port", type=int, help="scheduler port (default: a free one)")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="arguments for train (after --)")
    args = p.parse_args(argv)
    if args.workers < 1 or args.servers < 1:
        raise UserError("--workers and --servers must be >= 1")
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    code = launch(train_args, workers=args.workers, servers=args.servers, port=args.port)
    if code:
        raise UserError(f"a worker failed with exit code {code}")


if __name__ == "__main__":
    main()
