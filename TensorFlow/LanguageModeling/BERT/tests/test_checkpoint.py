"""Weights in: Google's original TF1 checkpoint layout, the PyTorch BERT of this zoo (both ways, logits
compared), Hugging Face names; bad checkpoints are one-line errors."""

import json
import subprocess

import numpy as np
import pytest

VOCAB = 50
SEQ = 12


def tiny_config():
    from bert_tf.model import bert_config

    return bert_config("bert-tiny", vocab_size=VOCAB, max_position_embeddings=32)


def batch():
    """Two packed samples (two sequences and padding; one sequence) with masked positions."""
    rng = np.random.default_rng(0)
    seq_ids = np.array([[1] * 5 + [2] * 5 + [0] * 2, [1] * SEQ])
    return {
        "input_ids": rng.integers(5, VOCAB, (2, SEQ)).astype(np.int64),
        "token_type_ids": (rng.random((2, SEQ)) < 0.3).astype(np.int64),
        "seq_ids": seq_ids,
        "mlm_positions": np.array([[1, 3, 6, 8], [0, 4, 7, 11]]),
        "cls_positions": np.array([[0, 5], [0, -1]]),
    }


def keras_logits(model):
    out = model({k: np.asarray(v) for k, v in batch().items()})
    return {k: np.asarray(v) for k, v in out.items()}


def write_google_tf1_checkpoint(prefix, values: dict) -> None:
    """A TF1 checkpoint as Google's run_pretraining.py writes it (tf.compat.v1 Saver, graph mode)."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        variables = [
            tf.compat.v1.get_variable(name, initializer=tf.constant(value)) for name, value in values.items()
        ]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(prefix), write_meta_graph=False)


def random_google_values(seed=1) -> dict:
    import keras
    from bert_tf.checkpoint import model_to_google
    from bert_tf.model import build_pretrainer

    keras.utils.set_random_seed(seed)
    values = model_to_google(build_pretrainer(tiny_config(), nsp=True))
    rng = np.random.default_rng(seed)
    # non-trivial biases and LayerNorm parameters, so a dropped or misplaced one shows in the logits
    return {k: (v + 0.1 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in values.items()}


def test_google_tf1_checkpoint_loads_every_variable_in_place(tmp_path):
    from bert_tf.checkpoint import google_variables, load_weights, model_to_google
    from bert_tf.model import build_pretrainer

    values = random_google_values()
    assert values["cls/seq_relationship/output_weights"].shape == (2, 64)  # Google's [out, in]
    extra = {"global_step": np.int64(7), "bert/pooler/dense/kernel/adam_m": np.zeros((64, 64), np.float32)}
    write_google_tf1_checkpoint(tmp_path / "bert_model.ckpt", {**values, **extra})
    model = build_pretrainer(tiny_config(), nsp=True)
    report = load_weights(model, tmp_path / "bert_model.ckpt")
    assert report == {"missing": [], "unexpected": []}
    loaded = model_to_google(model)
    assert sorted(loaded) == sorted(values) and len(loaded) == len(google_variables(model))
    for name, value in values.items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)
    kernel = model.bert.layers[1].query.kernel.numpy()
    np.testing.assert_array_equal(kernel, values["bert/encoder/layer_1/attention/self/query/kernel"])


TORCH_SIDE = r"""
import json, sys
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
from bert.model import BertForPreTraining, bert_config
from bert.convert import load_into
work = sys.argv[2]
batch = dict(np.load(f"{work}/batch.npz"))
config = bert_config("bert-tiny", vocab_size=%(vocab)d, max_position_embeddings=32, hidden_dropout=0.0, attention_dropout=0.0)
def logits(model):
    model.eval()
    with torch.no_grad():
        t = {k: torch.from_numpy(v).long() for k, v in batch.items()}
        mlm, nsp = model(t["input_ids"], t["token_type_ids"], seq_ids=t["seq_ids"],
                         mlm_positions=t["mlm_positions"], cls_positions=t["cls_positions"].clamp(min=0))
    return mlm.numpy(), nsp.numpy()
# TF -> PyTorch: our Google-named export, read by bert.convert
model = BertForPreTraining(config)
load_into(model, f"{work}/from_tf.npz", strict_heads=True)
mlm, nsp = logits(model)
# PyTorch -> TF: a fresh PyTorch model's own state dict
torch.manual_seed(3)
fresh = BertForPreTraining(config)
with torch.no_grad():
    for p in fresh.parameters():
        p.add_(0.05 * torch.randn_like(p))
np.savez(f"{work}/from_torch.npz", **{k: v.numpy() for k, v in fresh.state_dict().items()})
mlm2, nsp2 = logits(fresh)
np.savez(f"{work}/torch_logits.npz", mlm=mlm, nsp=nsp, mlm2=mlm2, nsp2=nsp2)
"""


def test_pytorch_bert_weights_both_ways_give_equal_logits(torch_side, tmp_path):
    from bert_tf.checkpoint import export_google_npz, load_weights
    from bert_tf.model import build_pretrainer

    values = random_google_values(seed=2)
    model = build_pretrainer(tiny_config(), nsp=True)
    load_weights_from = tmp_path / "values.npz"
    np.savez(load_weights_from, **values)
    load_weights(model, load_weights_from, strict_heads=True)
    export_google_npz(model, tmp_path / "from_tf.npz")
    np.savez(tmp_path / "batch.npz", **batch())
    script = TORCH_SIDE % {"vocab": VOCAB}
    proc = subprocess.run(
        [str(torch_side[0]), "-c", script, str(torch_side[1]), str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    torch_out = np.load(tmp_path / "torch_logits.npz")
    ours = keras_logits(model)
    assert ours["mlm_logits"].shape == (2, 4, VOCAB) and ours["nsp_logits"].shape == (2, 2, 2)
    np.testing.assert_allclose(ours["mlm_logits"], torch_out["mlm"], rtol=1e-4, atol=1e-4)
    # the second sample holds one sequence: its padding NSP slot (-1) is not compared
    np.testing.assert_allclose(ours["nsp_logits"][0], torch_out["nsp"][0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours["nsp_logits"][1, 0], torch_out["nsp"][1, 0], rtol=1e-4, atol=1e-4)

    from_torch = build_pretrainer(tiny_config(), nsp=True)
    assert load_weights(from_torch, tmp_path / "from_torch.npz", strict_heads=True)["missing"] == []
    theirs = keras_logits(from_torch)
    np.testing.assert_allclose(theirs["mlm_logits"], torch_out["mlm2"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(theirs["nsp_logits"][0], torch_out["nsp2"][0], rtol=1e-4, atol=1e-4)


def test_hugging_face_names_map_to_google_names():
    from bert_tf.checkpoint import to_google

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((4, 4)).astype(np.float32) for _ in range(3))
    hf = {
        "bert.encoder.layer.0.attention.self.query.weight": q,
        "bert.encoder.layer.0.output.LayerNorm.gamma": np.ones(4),
        "bert.embeddings.word_embeddings.weight": np.zeros((9, 4)),
        "cls.predictions.decoder.weight": np.zeros((9, 4)),
        "cls.predictions.bias": np.arange(9.0),
        "qa_outputs.weight": np.zeros((2, 4)),
    }
    google = to_google(hf)
    np.testing.assert_array_equal(google["bert/encoder/layer_0/attention/self/query/kernel"], q.T)
    assert sorted(google) == [
        "bert/embeddings/word_embeddings",
        "bert/encoder/layer_0/attention/self/query/kernel",
        "bert/encoder/layer_0/output/LayerNorm/gamma",
        "cls/predictions/output_bias",
        "cls/squad/output_weights",
    ]
    fused = to_google(
        {
            "bert.layers.0.qkv.weight": np.concatenate([q, k, v]),
            "bert.embeddings.word.weight": np.zeros((9, 4)),
        }
    )
    np.testing.assert_array_equal(fused["bert/encoder/layer_0/attention/self/value/kernel"], v.T)


def test_pretraining_weights_into_the_squad_model_leave_the_qa_head_fresh(tmp_path):
    from bert_tf.checkpoint import load_weights
    from bert_tf.model import build_question_answering

    np.savez(tmp_path / "w.npz", **random_google_values(seed=4))
    model = build_question_answering(tiny_config())
    report = load_weights(model, tmp_path / "w.npz")
    assert report["missing"] == ["cls/squad/output_weights", "cls/squad/output_bias"]
    assert "cls/predictions/output_bias" in report["unexpected"]


def test_bad_checkpoints_are_one_line_errors(tmp_path):
    from bert_tf.checkpoint import load_weights
    from bert_tf.model import bert_config, build_pretrainer
    from zoo.cli import entry_point

    load_weights = entry_point(load_weights)  # the line a script's user sees

    model = build_pretrainer(tiny_config())
    with pytest.raises(SystemExit, match="^error: checkpoint .*missing.npz does not exist$"):
        load_weights(model, tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(SystemExit, match="is not a readable .npz"):
        load_weights(model, tmp_path / "junk.npz")
    np.savez(tmp_path / "other.npz", **random_google_values())
    wider = build_pretrainer(bert_config("bert-tiny", vocab_size=VOCAB + 1, max_position_embeddings=32))
    with pytest.raises(SystemExit, match="word_embeddings has shape \\(50, 64\\), the model \\(51, 64\\)"):
        load_weights(wider, tmp_path / "other.npz")
    np.savez(tmp_path / "partial.npz", **{"bert/embeddings/word_embeddings": np.zeros((VOCAB, 64))})
    with pytest.raises(SystemExit) as error:
        load_weights(model, tmp_path / "partial.npz")
    assert str(error.value).startswith(
        "error: checkpoint does not fit the model: missing ["
    ) and "\n" not in str(error.value)
    (tmp_path / "config.json").write_text(json.dumps({}))
    with pytest.raises(SystemExit, match="not a checkpoint prefix"):
        load_weights(model, tmp_path / "config.json")


def test_googles_zip_is_unpacked_once_and_its_config_read(tmp_path):
    """The published layout: NAME.zip holding NAME/bert_model.ckpt.* and bert_config.json."""
    import zipfile

    from bert_tf.checkpoint import load_weights, read_google_config
    from bert_tf.model import BertConfig, build_pretrainer

    folder = tmp_path / "uncased_L-2_H-64_A-2"
    folder.mkdir()
    write_google_tf1_checkpoint(folder / "bert_model.ckpt", random_google_values(seed=5))
    (folder / "bert_config.json").write_text(json.dumps(tiny_config().to_google()))
    with zipfile.ZipFile(tmp_path / "google.zip", "w") as archive:
        for file in folder.iterdir():
            archive.write(file, f"uncased_L-2_H-64_A-2/{file.name}")
    config = BertConfig.from_dict(read_google_config(tmp_path / "google.zip"))
    assert config == tiny_config()
    model = build_pretrainer(config, nsp=True)
    assert load_weights(model, tmp_path / "google.zip") == {"missing": [], "unexpected": []}
    assert (tmp_path / "google" / "uncased_L-2_H-64_A-2" / "bert_model.ckpt.index").is_file()
