"""SQuAD v1.1 for both BERTs (numpy only): examples, windowed features (doc stride), answer-span decoding
and the official metric (`python -m zoo.data.squad dev-v1.1.json predictions.json`).

The metric follows the definition of the official v1.1 evaluation: answers are normalised
(lower case, punctuation and the articles a/an/the removed, whitespace collapsed); exact match
and token-level F1 are the maximum over the ground-truth answers, averaged over questions, x100.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import string
import time
from pathlib import Path

import numpy as np

from zoo.cli import entry_point
from zoo.errors import UserError, one_line

SQUAD_URLS = {
    "train-v1.1.json": "https://rajpurkar.github.io/SQuAD-explorer/dataset/train-v1.1.json",
    "dev-v1.1.json": "https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v1.1.json",
}


# --- official metric -------------------------------------------------------------------------


# The file names scripts/download_data.sh squad writes (both BERTs read them from --data-dir).
TRAIN_FILE, DEV_FILE = "train-v1.1.json", "dev-v1.1.json"


def normalize_answer(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(truth))


def f1_score(prediction: str, truth: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    truth_tokens = normalize_answer(truth).split()
    common = collections.Counter(pred_tokens) & collections.Counter(truth_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def evaluate_predictions(dataset: list[dict], predictions: dict[str, str]) -> dict[str, float]:
    """{"exact_match", "f1"} (percent) of predictions {question id: answer text} against the
    `data` list of a SQuAD v1.1 JSON file. Unanswered questions count as wrong."""
    em = f1 = total = 0.0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue
                truths = [a["text"] for a in qa["answers"]]
                em += max(exact_match(predictions[qa["id"]], t) for t in truths)
                f1 += max(f1_score(predictions[qa["id"]], t) for t in truths)
    if not total:
        raise UserError("the SQuAD file holds no questions")
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total}


def score_asked(path, answers: dict[str, str]) -> dict | None:
    """{"exact_match", "f1" (percent, ``evaluate_predictions``: the official scoring evaluate.sh uses),
    "questions"} of ``answers`` {question id: text} over the questions of the SQuAD file at ``path`` that
    were asked (a deploy's ``--limit``) and come with answers; None where none does (questions only)."""
    asked = [
        {"paragraphs": [{"qas": qas}]}
        for article in load_squad_json(path)
        for paragraph in article["paragraphs"]
        if (qas := [qa for qa in paragraph["qas"] if qa["id"] in answers and qa.get("answers")])
    ]
    if not asked:
        return None
    questions = sum(len(article["paragraphs"][0]["qas"]) for article in asked)
    return {**evaluate_predictions(asked, answers), "questions": questions}


# --- examples and features -------------------------------------------------------------------


@dataclasses.dataclass
class Example:
    qid: str
    question: str
    context: str
    answer_start: int | None = None  # character offset of the first answer (training)
    answer_text: str | None = None


def load_squad_json(path: str | Path) -> list[dict]:
    """The `data` list of a SQuAD JSON file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"SQuAD file {path} does not exist (scripts/download_data.sh squad fetches it)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))["data"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise UserError(f"{path} is not a SQuAD JSON file: {type(e).__name__}: {one_line(e)}") from None


def read_squad(path: str | Path) -> tuple[list[Example], list[dict]]:
    """(examples, raw `data` list) of a SQuAD v1.1 JSON file.

    Every question of SQuAD v1.1 (train and dev) has at least one answer lying inside its context;
    a question without one, or with an ``answer_start`` whose span runs past the context, is a
    one-line error naming the question (training would otherwise learn "no answer" from it)."""
    raw = load_squad_json(path)
    examples = []
    try:
        for article in raw:
            for paragraph in article["paragraphs"]:
                context = paragraph["context"]
                for qa in paragraph["qas"]:
                    for answer in qa["answers"]:
                        _check_answer(path, qa["id"], answer, context)
                    if not qa["answers"]:
                        raise UserError(
                            f"{path}: question {qa['id']} has no answer (SQuAD v1.1 gives each one)"
                        )
                    answer = qa["answers"][0]
                    examples.append(
                        Example(qa["id"], qa["question"], context, answer["answer_start"], answer["text"])
                    )
    except (KeyError, TypeError) as e:
        raise UserError(f"{path} is not a SQuAD v1.1 file: a question lacks {e}") from None
    return examples, raw


def _check_answer(path, qid: str, answer: dict, context: str) -> None:
    start, text = answer["answer_start"], answer["text"]
    if not isinstance(start, int) or start < 0 or start + len(text) > len(context):
        raise UserError(
            f"{path}: question {qid} has answer_start {start!r} with {len(text)} characters, "
            f"past its context of {len(context)} characters"
        )


@dataclasses.dataclass
class Features:
    """Arrays over windows [N, max_seq] and, per window, where its context tokens came from."""

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    attention_mask: np.ndarray
    start_positions: np.ndarray  # training targets (0 = [CLS]: answer not in this window)
    end_positions: np.ndarray
    example_index: np.ndarray  # window -> example
    offsets: list[np.ndarray]  # window -> [max_seq, 2] character span in the context (-1 = not context)
    max_context: list[np.ndarray]  # window -> [max_seq] bool: this window is the token's best context

    def __len__(self) -> int:
        return len(self.input_ids)


def make_features(
    examples: list[Example], tokenizer, *, max_seq: int = 384, doc_stride: int = 128, max_query: int = 64
) -> Features:
    """Windows of [CLS] question [SEP] context-window [SEP], sliding by `doc_stride` tokens."""
    cls_id, sep_id, pad_id = (tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
    questions = tokenizer.encode_batch([e.question for e in examples], add_special_tokens=False)
    contexts = tokenizer.encode_batch([e.context for e in examples], add_special_tokens=False)
    rows = collections.defaultdict(list)
    offsets_all, max_context_all = [], []
    for index, (example, q, c) in enumerate(zip(examples, questions, contexts, strict=True)):
        q_ids = q.ids[:max_query]
        room = max_seq - len(q_ids) - 3
        if room < 1:
            raise UserError(f"max_seq {max_seq} leaves no room for the context of question {example.qid}")
        c_ids, c_offsets = np.asarray(c.ids, np.int64), np.asarray(c.offsets, np.int64).reshape(-1, 2)
        answer_tokens = _answer_token_span(example, c_offsets)
        starts = [0]
        while starts[-1] + room < len(c_ids):
            starts.append(starts[-1] + doc_stride)
        for start in starts:
            length = min(room, len(c_ids) - start)
            ids = [cls_id, *q_ids, sep_id, *c_ids[start : start + length].tolist(), sep_id]
            first = len(q_ids) + 2  # position of the window's first context token
            row_types = [0] * first + [1] * (length + 1)
            pad = max_seq - len(ids)
            rows["input_ids"].append(ids + [pad_id] * pad)
            rows["token_type_ids"].append(row_types + [0] * pad)
            rows["attention_mask"].append([1] * len(ids) + [0] * pad)
            offsets = np.full((max_seq, 2), -1, np.int64)
            offsets[first : first + length] = c_offsets[start : start + length]
            offsets_all.append(offsets)
            best = np.zeros(max_seq, bool)
            for k in range(length):
                best[first + k] = _is_max_context(starts, room, len(c_ids), start, start + k)
            max_context_all.append(best)
            s_pos = e_pos = 0
            if answer_tokens and start <= answer_tokens[0] and answer_tokens[1] < start + length:
                s_pos, e_pos = first + answer_tokens[0] - start, first + answer_tokens[1] - start
            rows["start_positions"].append(s_pos)
            rows["end_positions"].append(e_pos)
            rows["example_index"].append(index)
    return Features(
        **{k: np.asarray(v, np.int64) for k, v in rows.items()},
        offsets=offsets_all,
        max_context=max_context_all,
    )


def _answer_token_span(example: Example, offsets: np.ndarray) -> tuple[int, int] | None:
    if example.answer_start is None or example.answer_text is None:
        return None
    begin, end = example.answer_start, example.answer_start + len(example.answer_text)
    inside = np.flatnonzero((offsets[:, 1] > begin) & (offsets[:, 0] < end))
    if not len(inside):
        return None
    return int(inside[0]), int(inside[-1])


def _is_max_context(starts, room, n_tokens, window_start, token) -> bool:
    """A token's best window is the one where it has the most context on its shorter side."""
    best_score, best_start = -1.0, None
    for s in starts:
        length = min(room, n_tokens - s)
        if not s <= token < s + length:
            continue
        score = min(token - s, s + length - 1 - token) + 0.01 * length
        if score > best_score:
            best_score, best_start = score, s
    return best_start == window_start


def best_spans(
    examples: list[Example],
    features: Features,
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    *,
    n_best: int = 20,
    max_answer_tokens: int = 30,
) -> dict[str, str]:
    """{question id: answer text}: the highest start+end logit span over all windows of a question,
    within the context, ending at or after its start, at most `max_answer_tokens` long."""
    best: dict[int, tuple[float, str]] = {}
    for w in range(len(features)):
        index = int(features.example_index[w])
        offsets, max_context = features.offsets[w], features.max_context[w]
        top_s = np.argsort(start_logits[w])[::-1][:n_best]
        top_e = np.argsort(end_logits[w])[::-1][:n_best]
        for s in top_s:
            if offsets[s, 0] < 0 or not max_context[s]:
                continue
            for e in top_e:
                if offsets[e, 0] < 0 or e < s or e - s + 1 > max_answer_tokens:
                    continue
                score = float(start_logits[w, s] + end_logits[w, e])
                if index not in best or score > best[index][0]:
                    context = examples[index].context
                    best[index] = (score, context[offsets[s, 0] : offsets[e, 1]])
    return {ex.qid: best.get(i, (0.0, ""))[1] for i, ex in enumerate(examples)}


# --- answering through Triton (deploy scripts of both BERTs) ------------------------------


def answer_through_triton(
    url, model, examples, tokenizer, *, protocol="http", max_seq=384, doc_stride=128, batch=8
):
    """({question id: answer}, per-request latencies in ms) from a served span model (inputs input_ids,
    token_type_ids, attention_mask; outputs start_logits, end_logits), over one connection."""
    from zoo.triton.client import TritonClient

    features = make_features(examples, tokenizer, max_seq=max_seq, doc_stride=doc_stride)
    starts, ends, latencies = [], [], []
    with TritonClient(url, protocol) as client:
        for inputs in request_inputs(features, batch):
            length = inputs["input_ids"].shape[1]
            began = time.perf_counter()
            out = client.infer(model, inputs, ["start_logits", "end_logits"])
            latencies.append((time.perf_counter() - began) * 1000)
            pad = ((0, 0), (0, max_seq - length))
            starts.append(np.pad(out["start_logits"], pad, constant_values=-1e4))
            ends.append(np.pad(out["end_logits"], pad, constant_values=-1e4))
    return best_spans(examples, features, np.concatenate(starts), np.concatenate(ends)), latencies


def request_inputs(features, batch: int) -> list[dict]:
    """The requests of ``batch`` windows each, cut to their longest window (no padding tail is sent)."""
    requests = []
    for first in range(0, len(features), batch):
        sl = slice(first, first + batch)
        length = int(features.attention_mask[sl].sum(1).max())  # dynamic sequence axis
        requests.append(
            {k: getattr(features, k)[sl, :length] for k in ("input_ids", "token_type_ids", "attention_mask")}
        )
    return requests


# --- a small task made from text ---------------------------------------------------------------


def write_first_word_task(text_paths, out_dir: str | Path, *, questions: int = 96) -> tuple[Path, Path]:
    """TRAIN_FILE and DEV_FILE in ``out_dir``: SQuAD v1.1 files whose every question asks for the first
    word of its paragraph (two sentences of a document of ``text_paths``), ``questions`` for training
    and a quarter as many, from other documents, for the dev set. A task a tiny model learns in a
    minute on a CPU: what the quick starts fine-tune, evaluate and serve."""
    from zoo.data.text import read_documents
    from zoo.io import atomic_write

    if questions < 4:
        raise UserError(f"--questions {questions}: at least 4 (the dev set gets a quarter as many)")
    dev_questions = questions // 4
    paragraphs = []
    for doc in read_documents(text_paths):
        context = " ".join(doc[:2])
        if len(doc) >= 2 and normalize_answer(context.split()[0]):
            paragraphs.append(context)
        if len(paragraphs) == questions + dev_questions:
            break
    if len(paragraphs) < questions + dev_questions:
        raise UserError(
            f"{' '.join(map(str, text_paths))} holds {len(paragraphs)} documents of two sentences or more: "
            f"{questions + dev_questions} needed for --questions {questions}"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, split, first in ((TRAIN_FILE, "train", 0), (DEV_FILE, "dev", questions)):
        chosen = paragraphs[first : first + (questions if split == "train" else dev_questions)]
        data = [
            {
                "context": context,
                "qas": [
                    {
                        "id": f"{split}{i}",
                        "question": "Which word opens the text?",
                        "answers": [{"text": context.split()[0], "answer_start": 0}],
                    }
                ],
            }
            for i, context in enumerate(chosen)
        ]
        with atomic_write(out / name) as tmp:
            tmp.write_text(
                json.dumps({"version": "1.1", "data": [{"title": "first words", "paragraphs": data}]})
            )
        written.append(out / name)
    return written[0], written[1]


@entry_point
def main(argv=None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m zoo.data.squad",
        description="Score SQuAD v1.1 predictions: exact match and F1 (percent).",
    )
    parser.add_argument("dataset", help="dev-v1.1.json")
    parser.add_argument("predictions", help="JSON {question id: answer text}")
    args = parser.parse_args(argv)
    raw = load_squad_json(args.dataset)
    try:
        predictions = json.loads(Path(args.predictions).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"cannot read predictions {args.predictions}: {e}") from None
    print(json.dumps(evaluate_predictions(raw, predictions)))


if __name__ == "__main__":
    main()
