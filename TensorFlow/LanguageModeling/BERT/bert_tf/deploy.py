"""Answer questions through Triton: tokenise and window on the client, run the span model on the server,
decode the best span on the client (``zoo.bert.ask_triton``, the client both BERTs share).

    python -m bert_tf.deploy --model-repository results/triton --question "..." --context "..."
    python -m bert_tf.deploy --model-repository results/triton --squad-file dev-v1.1.json --limit 16

Without --url a local tritonserver (the nvidia-pytriton wheel's, python backend only: the default model
bert_tf_python) serves the model and is stopped on every way out; with --url a running server (NVIDIA's
Triton container, which also serves bert_tf_savedmodel and bert_tf_onnx) is used. Load mode
(--concurrency 1,4,16 --requests N) prints throughput, p50/p99 latency and errors per level.
"""

from __future__ import annotations

from zoo.bert import ask_triton, deploy_parser
from zoo.cli import entry_point

# this model's repository and models (zoo.bert.deploy_parser's defaults)
SERVED = dict(
    repository="model_repository",
    model="bert_tf_python",
    models_help="bert_tf_python, bert_tf_onnx or bert_tf_savedmodel",
)


@entry_point
def main(argv=None) -> dict:
    parser = deploy_parser("deploy_triton.sh", __doc__.splitlines()[0], **SERVED)
    return ask_triton(parser.parse_args(argv))


if __name__ == "__main__":
    main()
