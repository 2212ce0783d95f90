"""``python -m zoo.triton``: serve a model repository until Ctrl-C, or check every config.pbtxt in it
(used by the models' deploy_triton.sh and export_triton.sh).

    python -m zoo.triton serve --model-repository R [--http-port 8000 --grpc-port 8001]
    python -m zoo.triton validate R
"""

from __future__ import annotations

import argparse
import signal
import sys

from zoo.cli import entry_point
from zoo.errors import UserError
from zoo.triton.repository import validate_repository
from zoo.triton.server import TritonServer


@entry_point
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
    serve.add_argument("--metrics-port", type=int, help="default: no metrics endpoint")
    serve.add_argument("--python-env", help="venv that runs python-backend models (default: this one)")
    serve.add_argument("--log-path", help="tritonserver log file (default: a temp file)")
    serve.add_argument("--startup-timeout", type=float, default=120)
    validate = commands.add_parser("validate", help="parse every config.pbtxt under a repository")
    validate.add_argument("model_repository")
    args = parser.parse_args(argv)

    if args.command == "validate":
        configs = validate_repository(args.model_repository)
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
        raise UserError(f"tritonserver exited with code {code} (log: {server.log_path})")
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
