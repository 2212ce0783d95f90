"""Answer questions through Triton: tokenise and window on the client, run the model on the server,
decode the best span on the client.

Without --url a local tritonserver (zoo.triton) serves the chosen model of the repository; with
--url an already running server (e.g. the Triton container serving the whole repository) is used.
Requests go one at a time over one connection. Load mode (--concurrency 1,4,16 --requests N) sends
the questions' requests from that many clients at once per level, prints throughput, p50/p99
latency and errors per level, and exits non-zero if any request failed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from zoo.cli import entry_point
from zoo.data.squad import Example, answer_through_triton, load_squad_json, make_features, request_inputs
from zoo.data.wordpiece import load_tokenizer
from zoo.errors import UserError


def questions_of(path) -> list[Example]:
    """The questions of a SQuAD-format JSON file; answers are not needed to ask them (unlike training
    and scoring, which read the file with zoo.data.squad.read_squad and its answer checks)."""
    raw = load_squad_json(path)
    try:
        return [
            Example(qa["id"], qa["question"], paragraph["context"])
            for article in raw
            for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]
        ]
    except (KeyError, TypeError) as e:
        raise UserError(f"{path} is not a SQuAD file: a question lacks {e}") from None


@entry_point
def main(argv=None) -> None:
    from zoo.bench import percentiles
    from zoo.triton.client import serve_or_connect
    from zoo.triton.load import add_load_args, run_load_mode

    p = argparse.ArgumentParser(prog="python -m bert.deploy", description=__doc__.splitlines()[0])
    p.add_argument("--model-repository", default="results/triton_repository")
    p.add_argument("--model", default="bert_squad_python", help="bert_squad_python or bert_squad_onnx")
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
    vocab = Path(args.vocab) if args.vocab else repo / "vocab.txt"
    tokenizer = load_tokenizer(vocab)
    if args.squad_file:
        examples = questions_of(args.squad_file)[: args.limit]
    elif args.question and args.context:
        examples = [Example("question", args.question, args.context)]
    else:
        raise UserError("give --question and --context, or --squad-file")
    window = dict(protocol=args.protocol, max_seq=args.max_seq, doc_stride=args.doc_stride)

    with serve_or_connect(repo, args.model, url=args.url, protocol=args.protocol) as url:
        if args.concurrency:
            features = make_features(examples, tokenizer, max_seq=args.max_seq, doc_stride=args.doc_stride)
            outcome = run_load_mode(
                url, args.model, request_inputs(features, 8), args, outputs=["start_logits", "end_logits"]
            )
        else:
            outcome = answer_through_triton(url, args.model, examples, tokenizer, **window)
    if args.concurrency:
        return
    answers, latencies = outcome
    for example in examples:
        print(json.dumps({"id": example.qid, "question": example.question, "answer": answers[example.qid]}))
    stats = percentiles(latencies, (50, 99))
    print(f"{len(latencies)} requests, latency p50 {stats['p50']:.1f} ms, p99 {stats['p99']:.1f} ms")


if __name__ == "__main__":
    main()
