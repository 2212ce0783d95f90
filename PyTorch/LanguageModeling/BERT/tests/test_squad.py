"""SQuAD v1.1: the official metric on hand-made cases, windowed features, span decoding, fine-tuning."""

import json
import os

import numpy as np
import pytest
from bert import finetune_squad
from zoo.cli import entry_point
from zoo.data.squad import (
    Example,
    best_spans,
    evaluate_predictions,
    exact_match,
    f1_score,
    make_features,
    normalize_answer,
    read_squad,
    score_asked,
    write_first_word_task,
)
from zoo.data.text import read_documents
from zoo.data.wordpiece import load_tokenizer
from zoo.errors import UserError

MODEL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_official_normalisation_and_scores():
    assert normalize_answer("  The Quick, brown fox!  ") == "quick brown fox"
    assert normalize_answer("An apple a day") == "apple day"
    assert exact_match("the Eiffel Tower.", "Eiffel tower") == 1.0
    assert exact_match("Eiffel", "Eiffel tower") == 0.0
    assert f1_score("big red cat", "red cat sat") == pytest.approx(2 / 3)
    assert f1_score("red red", "red") == pytest.approx(2 * 0.5 * 1 / 1.5)  # counts clipped by the truth
    assert f1_score("dog", "cat") == 0.0
    assert f1_score("the", "a") == 0.0  # both normalise to nothing


def test_evaluate_takes_best_truth_and_counts_missing_as_wrong(tmp_path):
    data = [
        {
            "paragraphs": [
                {
                    "context": "x",
                    "qas": [
                        {"id": "q1", "answers": [{"text": "Denver Broncos"}, {"text": "Broncos"}]},
                        {"id": "q2", "answers": [{"text": "Carolina Panthers"}]},
                        {"id": "q3", "answers": [{"text": "Santa Clara"}]},
                    ],
                }
            ]
        }
    ]
    scores = evaluate_predictions(data, {"q1": "broncos", "q2": "the Panthers"})
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
    # A deploy's scores: only the questions it asked (q3 was not, q4 has no answers) count.
    data[0]["paragraphs"][0]["qas"].append({"id": "q4", "answers": []})
    (tmp_path / "dev.json").write_text(json.dumps({"data": data}))
    asked = score_asked(tmp_path / "dev.json", {"q1": "broncos", "q2": "the Panthers", "q4": "x"})
    assert asked == pytest.approx({"exact_match": 50.0, "f1": 100 * (1 + 2 / 3) / 2, "questions": 2})
    assert score_asked(tmp_path / "dev.json", {"q4": "x"}) is None


def long_example(english_text):
    doc = [s for d in read_documents([english_text / "GPL-3"]) for s in d][:30]
    context = " ".join(doc)
    answer = doc[3]
    return Example("q0", "What is said in the fourth sentence?", context, context.index(answer), answer)


def test_windows_cover_the_context_and_locate_the_answer(english_text, tiny_vocab):
    tok = load_tokenizer(tiny_vocab)
    ex = long_example(english_text)
    f = make_features([ex], tok, max_seq=64, doc_stride=16, max_query=16)
    assert len(f) > 5
    assert f.input_ids.shape == (len(f), 64) and (f.attention_mask.sum(1) <= 64).all()
    with_answer = np.flatnonzero(f.start_positions > 0)
    assert len(with_answer) >= 1
    for w in with_answer:
        s, e = f.start_positions[w], f.end_positions[w]
        text = ex.context[f.offsets[w][s, 0] : f.offsets[w][e, 1]]
        assert normalize_answer(text) == normalize_answer(ex.answer_text)
    # every context token has exactly one best window
    n_context = len(tok.encode(ex.context, add_special_tokens=False).ids)
    assert sum(int(m.sum()) for m in f.max_context) == n_context
    # decoding logits that point at the answer gives the answer back
    start = np.full((len(f), 64), -5.0)
    end = np.full((len(f), 64), -5.0)
    w = with_answer[0]
    start[w, f.start_positions[w]] = 5.0
    end[w, f.end_positions[w]] = 5.0
    predicted = best_spans([ex], f, start, end)["q0"]
    assert exact_match(predicted, ex.answer_text) == 1.0 or f.max_context[w][f.start_positions[w]] == 0


def write_first_word_squad(path, english_text, n):
    """Questions whose answer is the first word of the context: a tiny model can learn it."""
    docs = [d for d in read_documents([english_text]) if len(d) >= 2 and normalize_answer(d[0].split()[0])][
        :n
    ]
    paragraphs = []
    for i, d in enumerate(docs):
        context = " ".join(d[:2])
        first = context.split()[0]
        paragraphs.append(
            {
                "context": context,
                "qas": [
                    {
                        "id": f"q{i}",
                        "question": "Which word opens the text?",
                        "answers": [{"text": first, "answer_start": 0}],
                    }
                ],
            }
        )
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}))
    return path


def test_the_task_made_from_text_is_squad_with_first_word_answers(tmp_path, english_text):
    from zoo.data import bert_prepare

    bert_prepare.main(
        ["squad", "--from-text", str(english_text), "--questions", "8", "--data-dir", str(tmp_path)]
    )
    train, train_records = read_squad(tmp_path / "train-v1.1.json")
    dev, _ = read_squad(tmp_path / "dev-v1.1.json")
    assert (len(train), len(dev)) == (8, 2)
    for example in train + dev:
        assert example.answer_start == 0 and example.context.startswith(example.answer_text)
        assert " " not in example.answer_text
    assert not {e.context for e in train} & {e.context for e in dev}  # dev paragraphs are unseen
    with pytest.raises(UserError, match="holds .* documents of two sentences or more: 1250 needed"):
        write_first_word_task([english_text], tmp_path / "big", questions=1000)
    assert not (tmp_path / "big").exists()


def eval_records(results):
    records = [json.loads(line) for line in open(results / "metrics.jsonl")]
    return [r for r in records if r.get("phase") == "eval"]


def test_tiny_fine_tuning_learns_spans_and_stops_at_the_target_f1(tmp_path, english_text, tiny_vocab):
    data = tmp_path / "squad"
    data.mkdir()
    write_first_word_squad(data / "train-v1.1.json", english_text, 96)
    (data / "dev-v1.1.json").write_text((data / "train-v1.1.json").read_text())
    recipe = os.path.join(MODEL_DIR, "configs", "squad_tiny_cpu.yaml")
    common = ["--recipe", recipe, "--vocab", str(tiny_vocab), "--device", "cpu", "--data-dir", str(data)]
    before = finetune_squad.main([*common, "--do-predict", "--results-dir", str(tmp_path / "untrained")])
    after = finetune_squad.main(
        [*common, "--do-train", "--do-predict", "--epochs", "10", "--target-f1", "85", "--results-dir",
         str(tmp_path / "r")]
    )  # fmt: skip
    assert after["exact_match"] > before["exact_match"] + 40, (before, after)
    assert after["f1"] >= after["exact_match"] and after["f1"] >= 85
    # the dev set is scored after every epoch; training stops at the first epoch at the target
    scored = eval_records(tmp_path / "r")
    epochs = [r["metrics"]["epoch"] for r in scored]
    assert epochs == list(range(1, len(epochs) + 1)) and len(epochs) < 10, scored
    assert [r["metrics"]["f1"] >= 85 for r in scored] == [False] * (len(epochs) - 1) + [True]
    assert scored[-1]["metrics"]["f1"] == after["f1"]  # the final score is that epoch's, not recomputed
    predictions = json.loads((tmp_path / "r" / "predictions.json").read_text())
    assert len(predictions) == 96
    # evaluate.sh from the checkpoint alone: its recipe (window, precision) and vocabulary, the same scores
    alone = ["--init-checkpoint", str(tmp_path / "r" / "squad_model.pt"), "--device", "cpu"]
    again = finetune_squad.main(
        [*alone, "--do-predict", "--data-dir", str(data), "--results-dir", str(tmp_path / "e")]
    )
    assert again == after, (again, after)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--target-f1", "0.905"], r"target f1 0.905 is not a percentage in \(1, 100\]"),
        (["--config", "x.yaml"], "error: --config was renamed: use --recipe"),
        (["--amp", "none"], "error: --amp none was renamed: use --amp fp32"),
    ],
)
def test_bad_fine_tuning_flags_are_one_line_errors(tmp_path, tiny_vocab, flags, message):
    with pytest.raises(SystemExit, match=message):
        finetune_squad.main(["--vocab", str(tiny_vocab), "--do-predict", "--data-dir", str(tmp_path), *flags])


def test_target_f1_needs_the_dev_set(tmp_path, tiny_vocab):
    with pytest.raises(SystemExit, match="--target-f1 needs --do-predict"):
        finetune_squad.main(
            ["--vocab", str(tiny_vocab), "--do-train", "--data-dir", str(tmp_path), "--target-f1", "90"]
        )


def test_bad_squad_inputs_are_one_line_errors(tmp_path, tiny_vocab):
    with pytest.raises(UserError, match="does not exist"):
        read_squad(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UserError, match="not a SQuAD JSON"):
        read_squad(tmp_path / "bad.json")


@pytest.mark.parametrize(
    "answers, message",
    [
        ([], "question q7 has no answer"),
        (
            [{"text": "far", "answer_start": 200}],
            "question q7 has answer_start 200 with 3 characters, past its context of 30",
        ),
        (
            [{"text": "quick brown fox", "answer_start": 20}],
            "answer_start 20 with 15 characters, past its context",
        ),
        ([{"text": "quick", "answer_start": 4}, {"text": "x", "answer_start": -1}], "answer_start -1"),
    ],
    ids=["no-answer", "start-past-context", "span-past-context", "second-answer-negative"],
)
def test_questions_without_an_answer_inside_the_context_are_one_line_errors(tmp_path, answers, message):
    # SQuAD v1.1 (train and dev) gives every question an answer inside its context: anything else is
    # a damaged file, stopped before training learns "no answer" from it
    context = "The quick brown fox jumps far."
    assert len(context) == 30
    paragraph = {"context": context, "qas": [{"id": "q7", "question": "Who jumps?", "answers": answers}]}
    path = tmp_path / "train-v1.1.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [paragraph]}]}))
    with pytest.raises(SystemExit) as error:
        entry_point(read_squad)(path)  # the line a script's user sees
    assert str(error.value.code).startswith(f"error: {path}: ") and message in str(error.value.code)
    assert "\n" not in str(error.value.code)
    paragraph["qas"][0]["answers"] = [{"text": "quick brown fox", "answer_start": 4}]
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [paragraph]}]}))
    examples, _ = read_squad(path)
    assert [(e.answer_start, e.answer_text) for e in examples] == [(4, "quick brown fox")]


def test_fine_tuning_checks_both_files_before_it_writes(tmp_path, tiny_vocab):
    data = tmp_path / "squad"
    data.mkdir()
    good = {"context": "The quick brown fox.", "qas": [{"id": "q1", "question": "Who?", "answers": []}]}
    (data / "train-v1.1.json").write_text(json.dumps({"data": [{"title": "t", "paragraphs": [good]}]}))
    good["qas"][0]["answers"] = [{"text": "fox", "answer_start": 16}]
    (data / "dev-v1.1.json").write_text(json.dumps({"data": [{"title": "t", "paragraphs": [good]}]}))
    results = tmp_path / "r"
    common = ["--vocab", str(tiny_vocab), "--data-dir", str(data), "--results-dir", str(results)]
    with pytest.raises(SystemExit, match="train-v1.1.json: question q1 has no answer"):
        finetune_squad.main([*common, "--do-train", "--do-predict"])
    (data / "train-v1.1.json").write_text((data / "dev-v1.1.json").read_text())
    good["qas"][0]["answers"] = [{"text": "fox", "answer_start": 18}]  # runs past the 20 characters
    (data / "dev-v1.1.json").write_text(json.dumps({"data": [{"title": "t", "paragraphs": [good]}]}))
    with pytest.raises(SystemExit, match="dev-v1.1.json: question q1 has answer_start 18 with 3 characters"):
        finetune_squad.main([*common, "--do-train", "--do-predict"])
    assert not results.exists()
