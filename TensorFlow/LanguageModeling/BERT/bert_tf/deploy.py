"""Answer questions through Triton: tokenise and window on the client, run the span model on the server,
decode the best span on the client (``zoo.data.squad``, as the PyTorch BERT's client does).

    python -m bert_tf.deploy --model-repository results/triton --question "..." --context "..."
    python -m bert_tf.deploy --model-repository results/triton --squad-file dev-v1.1.json --limit 16

Without --url a local tritonserver (the nvidia-pytriton wheel's, python backend only: the default model
bert_tf_python) serves the model and is stopped on every way out; with --url a running server (NVIDIA's
Triton container, which also serves bert_tf_savedmodel and bert_tf_onnx) is used. Load mode
(--concurrency 1,4,16 --requests N) prints throughput, p50/p99 latency and errors per level.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from zoo.cli import entry_point


@entry_point
def main(argv=None) -> dict | None:
    from zoo.bench import percentiles
    from zoo.data.squad import Example, answer_through_triton, make_features, read_squad, request_inputs
    from zoo.data.wordpiece import load_tokenizer
    from zoo.triton.client import serve_or_connect
    from zoo.triton.load import add_load_args, run_load_mode

    p = argparse.ArgumentParser(prog="deploy_triton.sh", description=__doc__.splitlines()[0])
    p.add_argument("--model-repository", default="model_repository")
    p.add_argument(
        "--model", default="bert_tf_python", help="bert_tf_python, bert_tf_onnx or bert_tf_savedmodel"
    )
    p.add_argument("--vocab", help="vocab.txt (default: the repository's copy)")
    p.add_argument("--url", help="host:port of a running server (default: start a local one)")
    p.add_argument("--protocol", choices=["http", "grpc"], default="http")
    p.add_argument("--question", help="a question about --context")
    p.add_argument("--context", help="the paragraph that holds the answer")
    p.add_argument("--squad-file", help="answer the questions of a SQuAD JSON file instead")
    p.add_argument("--limit", type=int, default=16, help="questions of --squad-file to answer")
    p.add_argument("--max-seq", type=int, default=384)
    p.add_argument("--doc-stride", type=int, default=128)
    add_load_args(p)
    args = p.parse_args(argv)
    repo = Path(args.model_repository)
    if not (repo / args.model / "config.pbtxt").is_file():
        raise SystemExit(f"error: {repo} has no model {args.model} (run scripts/export_triton.sh)")
    tokenizer = load_tokenizer(Path(args.vocab) if args.vocab else repo / "vocab.txt")
    if args.squad_file:
        examples = read_squad(args.squad_file)[0][: args.limit]
    elif args.question and args.context:
        examples = [Example("question", args.question, args.context)]
    else:
        raise SystemExit("error: give --question and --context, or --squad-file")

    with serve_or_connect(repo, args.model, url=args.url, protocol=args.protocol) as url:
        if args.concurrency:
            features = make_features(examples, tokenizer, max_seq=args.max_seq, doc_stride=args.doc_stride)
            requests = request_inputs(features, 8)
            outcome = run_load_mode(url, args.model, requests, args, outputs=["start_logits", "end_logits"])
        else:
            outcome = answer_through_triton(
                url, args.model, examples, tokenizer, protocol=args.protocol, max_seq=args.max_seq,
                doc_stride=args.doc_stride,
            )  # fmt: skip
    if args.concurrency:
        return {"load": outcome}
    answers, latencies = outcome
    for example in examples:
        print(json.dumps({"id": example.qid, "question": example.question, "answer": answers[example.qid]}))
    stats = percentiles(latencies, (50, 99))
    print(f"{len(latencies)} requests, latency p50 {stats['p50']:.1f} ms, p99 {stats['p99']:.1f} ms")
    return {"answers": answers, "latency_ms_p50": stats["p50"], "latency_ms_p99": stats["p99"]}


if __name__ == "__main__":
    main()
