"""Export parity (SavedModel and ONNX against Keras), config.pbtxt validity, and the real tritonserver
(python backend) answering with the same spans as TensorFlow."""

import json

import numpy as np
import pytest

INPUTS = ("input_ids", "token_type_ids", "attention_mask")


@pytest.fixture(scope="module")
def exported(squad_run, squad_data, tiny_vocab, tmp_path_factory):
    from bert_tf.engine import predict
    from bert_tf.export import load_squad_model, main
    from zoo.data.squad import best_spans, make_features, read_squad
    from zoo.data.wordpiece import load_tokenizer

    run = squad_run[0]
    repo = tmp_path_factory.mktemp("repo")
    main(["--checkpoint", str(run), "--vocab", str(tiny_vocab), "--model-repository", str(repo)]
         + ["--max-batch-size", "8", "--instance-kind", "KIND_CPU"])  # fmt: skip
    tokenizer = load_tokenizer(tiny_vocab)
    examples = read_squad(squad_data / "dev-v1.1.json")[0][:12]
    features = make_features(examples, tokenizer, max_seq=64, doc_stride=24, max_query=16)
    model = load_squad_model(run, tokenizer.get_vocab_size())
    start, end = predict(model, features)
    answers = best_spans(examples, features, start, end)
    return repo, examples, features, model, answers


def test_repository_configs_are_valid(exported):
    from zoo.triton.repository import parse_pbtxt

    repo = exported[0]
    assert sorted(p.parent.name for p in repo.glob("*/config.pbtxt")) == [
        "bert_tf_onnx", "bert_tf_python", "bert_tf_savedmodel",
    ]  # fmt: skip
    for path in repo.glob("*/config.pbtxt"):
        config = parse_pbtxt(path.read_text())
        assert [i.name for i in config.input] == list(INPUTS)
        assert [o.name for o in config.output] == ["start_logits", "end_logits"]
    assert (
        parse_pbtxt((repo / "bert_tf_savedmodel/config.pbtxt").read_text()).platform
        == "tensorflow_savedmodel"
    )
    assert (repo / "vocab.txt").is_file()


def test_savedmodel_and_onnx_equal_keras(exported):
    import onnxruntime as ort
    import tensorflow as tf

    repo, _, features, model, _ = exported
    loaded = tf.saved_model.load(str(repo / "bert_tf_savedmodel/1/model.savedmodel"))
    session = ort.InferenceSession(
        str(repo / "bert_tf_onnx/1/model.onnx"), providers=["CPUExecutionProvider"]
    )
    assert [i.name for i in session.get_inputs()] == list(INPUTS)
    for rows, length in ((slice(0, 1), 64), (slice(0, 5), 40)):  # dynamic batch and sequence
        inputs = {k: getattr(features, k)[rows, :length] for k in INPUTS}
        keras_out = model({k: v.astype(np.int32) for k, v in inputs.items()})
        saved = loaded.signatures["serving_default"](**{k: tf.constant(v) for k, v in inputs.items()})
        onnx_out = dict(
            zip(
                ("start_logits", "end_logits"),
                session.run(["start_logits", "end_logits"], inputs),
                strict=True,
            )
        )
        for name in ("start_logits", "end_logits"):
            expected = np.asarray(keras_out[name])
            assert saved[name].shape == expected.shape == (rows.stop, length)
            np.testing.assert_allclose(saved[name].numpy(), expected, rtol=1e-4, atol=1e-4, err_msg=name)
            np.testing.assert_allclose(onnx_out[name], expected, rtol=1e-4, atol=1e-4, err_msg=name)


def test_tritonserver_python_backend_answers_like_tensorflow(exported, tiny_vocab, tmp_path):
    from zoo.data.squad import answer_through_triton
    from zoo.data.wordpiece import load_tokenizer
    from zoo.triton.server import TritonServer

    repo, examples, _, _, answers = exported
    only = tmp_path / "repo"
    only.mkdir()
    (only / "bert_tf_python").symlink_to(repo / "bert_tf_python", target_is_directory=True)
    tokenizer = load_tokenizer(tiny_vocab)
    with TritonServer(only) as server:
        for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
            served, latencies = answer_through_triton(
                url, "bert_tf_python", examples, tokenizer, protocol=protocol, max_seq=64, doc_stride=24
            )
            assert served == answers and len(latencies) >= 2, protocol
    assert sum(bool(a) for a in answers.values()) == len(examples)


def test_deploy_script_answers_questions_and_scores_them(exported, capsys, tmp_path):
    """A SQuAD file's questions answered by the served model, and the served answers' exact match and F1
    against the file's answers: the first question's answer is the one TensorFlow gives (100), the second's
    shares no word with any answer (0)."""
    from bert_tf.deploy import main

    repo, examples, _, _, answers = exported
    given = {examples[0].qid: answers[examples[0].qid], examples[1].qid: "zzzq"}
    paragraphs = [
        {
            "context": e.context,
            "qas": [{"id": e.qid, "question": e.question, "answers": [{"text": given[e.qid]}]}],
        }
        for e in examples[:2]
    ]
    squad = tmp_path / "asked.json"
    squad.write_text(json.dumps({"version": "1.1", "data": [{"title": "asked", "paragraphs": paragraphs}]}))
    result = main(["--model-repository", str(repo), "--squad-file", str(squad), "--max-seq", "64",
                   "--doc-stride", "24"])  # fmt: skip
    assert result["answers"] == {e.qid: answers[e.qid] for e in examples[:2]}
    assert (result["exact_match"], result["f1"], result["questions"]) == (50.0, 50.0, 2)
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["answer"] for line in lines[:2]] == [answers[e.qid] for e in examples[:2]]
    assert lines[-1] == "served answers against the file's: exact match 50.00%, F1 50.00% over 2 questions"


def test_export_refuses_weights_without_a_span_head(pretrained_run, tiny_vocab, tmp_path):
    from bert_tf.export import main

    with pytest.raises(SystemExit, match="has no SQuAD span head"):
        main(["--checkpoint", str(pretrained_run[0] / "model.npz"), "--vocab", str(tiny_vocab),
              "--model-repository", str(tmp_path), "--model", "bert-tiny"])  # fmt: skip
    assert not list(tmp_path.iterdir())
