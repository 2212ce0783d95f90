"""SQuAD v1.1: the official metric (zoo.data.squad, shared with the PyTorch BERT) on hand-made cases, and a
tiny fine-tuning from the pretrained run that learns spans and stops at the target F1."""

import json
from pathlib import Path

import numpy as np
import pytest

MODEL_DIR = Path(__file__).resolve().parents[1]

TINY = str(MODEL_DIR / "configs" / "squad_tiny_cpu.yaml")


def test_official_metric_on_hand_made_cases():
    from zoo.data.squad import evaluate_predictions, exact_match, f1_score, normalize_answer

    assert normalize_answer("  The Quick, brown fox!  ") == "quick brown fox"
    assert exact_match("the Eiffel Tower.", "Eiffel tower") == 1.0
    assert f1_score("big red cat", "red cat sat") == pytest.approx(2 / 3)
    assert f1_score("the", "a") == 0.0
    qas = [
        {"id": "q1", "answers": [{"text": "Denver Broncos"}, {"text": "Broncos"}]},
        {"id": "q2", "answers": [{"text": "Carolina Panthers"}]},
        {"id": "q3", "answers": [{"text": "Santa Clara"}]},
    ]
    scores = evaluate_predictions(
        [{"paragraphs": [{"context": "x", "qas": qas}]}], {"q1": "broncos", "q2": "the Panthers"}
    )
    assert scores == pytest.approx({"exact_match": 100 / 3, "f1": 100 * (1 + 2 / 3) / 3})


def test_fine_tuning_learns_spans_and_stops_at_the_target_f1(squad_run):
    run, before, after = squad_run
    assert after["exact_match"] > before["exact_match"] + 40, (before, after)
    assert after["f1"] >= 85
    scored = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    scored = [r for r in scored if r.get("phase") == "eval"]
    epochs = [r["metrics"]["epoch"] for r in scored]
    assert epochs == list(range(1, len(epochs) + 1)) and len(epochs) < 8
    assert [r["metrics"]["f1"] >= 85 for r in scored] == [False] * (len(epochs) - 1) + [True]
    assert len(json.loads((run / "predictions.json").read_text())) == 64
    assert json.loads((run / "run.json").read_text())["task"] == "squad"
    assert np.load(run / "squad_model.npz")["cls/squad/output_weights"].shape == (2, 64)


def test_evaluate_reads_the_fine_tuned_run(squad_run, squad_data, tmp_path):
    """The run alone (no --recipe, no --vocab): its recipe and vocabulary come with its checkpoint."""
    from bert_tf.finetune_squad import main

    run, _, after = squad_run
    scores = main(["--data-dir", str(squad_data), "--do-predict", "--init-checkpoint", str(run),
                   "--results-dir", str(tmp_path)])  # fmt: skip
    assert scores == pytest.approx(after)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--do-train", "--target-f1", "0.905"], r"target f1 0.905 is not a percentage in \(1, 100\]"),
        (["--do-train", "--target-f1", "90"], "--target-f1 needs --do-predict"),
        (["--do-predict", "--config", "x.yaml"], "error: --config was renamed: use --recipe"),
    ],
)
def test_bad_flags_are_one_line_errors(flags, message, squad_data, tiny_vocab, tmp_path):
    from bert_tf.finetune_squad import main

    with pytest.raises(SystemExit, match=message):
        main(["--recipe", TINY, "--vocab", str(tiny_vocab), "--data-dir", str(squad_data), *flags])


def test_a_missing_dev_file_stops_before_training(tiny_vocab, squad_data, tmp_path):
    from bert_tf.finetune_squad import main

    with pytest.raises(SystemExit, match="does not exist"):
        main(["--recipe", TINY, "--vocab", str(tiny_vocab), "--do-train", "--do-predict", "--train-file",
              str(squad_data / "train-v1.1.json"), "--predict-file", str(tmp_path / "nope.json"),
              "--results-dir", str(tmp_path / "r")])  # fmt: skip
    assert not (tmp_path / "r").exists()
