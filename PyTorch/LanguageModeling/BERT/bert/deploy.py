"""Answer questions through Triton: tokenise and window on the client, run the model on the server,
decode the best span on the client (``zoo.bert.ask_triton``, the client both BERTs share).

Without --url a local tritonserver (zoo.triton) serves the chosen model of the repository; with
--url an already running server (e.g. the Triton container serving the whole repository) is used.
Requests go one at a time over one connection. Load mode (--concurrency 1,4,16 --requests N) sends
the questions' requests from that many clients at once per level, prints throughput, p50/p99
latency and errors per level, and exits non-zero if any request failed.
"""

from __future__ import annotations

from zoo.bert import ask_triton, deploy_parser
from zoo.cli import entry_point

# this model's repository and models (zoo.bert.deploy_parser's defaults)
SERVED = dict(
    repository="results/triton_repository",
    model="bert_squad_python",
    models_help="bert_squad_python or bert_squad_onnx",
)


@entry_point
def main(argv=None) -> dict:
    parser = deploy_parser("python -m bert.deploy", __doc__.splitlines()[0], **SERVED)
    return ask_triton(parser.parse_args(argv))


if __name__ == "__main__":
    main()
