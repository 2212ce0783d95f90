"""Export parity (ONNX encoder with its features, prediction step and joint against PyTorch; the served
greedy loop against rnnt.model.greedy_decode) and the real tritonserver transcribing like transcribe.sh."""

import importlib.util
import subprocess

import numpy as np
import onnxruntime as ort
import pytest
import torch
from rnnt_testutil import MODEL_DIR, subprocess_env


@pytest.fixture(scope="module")
def exported(trained, spoken_data, tmp_path_factory):
    """(recognizer, repository, dev audio files, their arrays) of the trained model."""
    from rnnt.data import read_audio, read_manifest
    from rnnt.export import write_repository
    from rnnt.inference import load_recognizer

    results, _ = trained
    recognizer = load_recognizer(results / "model.pt")
    repo = write_repository(recognizer, tmp_path_factory.mktemp("triton_repo"))
    files = [spoken_data / entry["audio"] for entry in read_manifest(spoken_data, "dev")[:3]]
    return recognizer, repo, files, [read_audio(path) for path in files]


def test_onnx_encoder_and_greedy_loop_equal_pytorch(exported):
    from rnnt.data import collate
    from rnnt.export import TRITON_MODEL

    recognizer, repo, _, audio = exported
    folder = repo / TRITON_MODEL / "1"
    samples, lengths, _, _ = collate((torch.from_numpy(a), []) for a in audio)
    enc, enc_lengths = ort.InferenceSession(str(folder / "model.onnx")).run(
        None, {"audio": samples.numpy(), "audio_lengths": lengths.numpy()}
    )
    with torch.no_grad():
        feats, feat_lengths = recognizer.features(samples, lengths)
        expected, expected_lengths = recognizer.model.encode(feats, feat_lengths)
        expected = recognizer.model.joint_enc(expected)
    assert enc_lengths.tolist() == expected_lengths.tolist()
    for row, n in enumerate(enc_lengths):
        assert np.allclose(enc[row, :n], expected[row, :n].numpy(), atol=1e-4)
    spec = importlib.util.spec_from_file_location("served_greedy", folder / "greedy.py")
    served = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(served)
    model = recognizer.model
    parameters = {"decoder_file": "decoder.onnx", "joint_file": "joint.onnx", "blank": model.blank}
    parameters |= {"pred_layers": model.pred_rnn.num_layers, "pred_hidden": model.pred_rnn.hidden_size}
    tokens = served.postprocess({"enc": enc, "enc_lengths": enc_lengths}, parameters)["tokens"]
    assert [[int(t) for t in row if t >= 0] for row in tokens] == recognizer.transcribe_ids(audio)


def test_tritonserver_transcribes_like_transcribe_sh(exported):
    recognizer, repo, files, audio = exported
    cmd = [
        "bash",
        str(MODEL_DIR / "scripts" / "deploy_triton.sh"),
        "--repository",
        str(repo),
        *map(str, files),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    served = [line.split("\t", 1)[1] for line in proc.stdout.strip().splitlines()]
    assert served == recognizer.transcribe(audio)


def test_deploy_load_mode_prints_a_table_without_errors(exported):
    _, repo, files, _ = exported
    cmd = [
        "bash",
        str(MODEL_DIR / "scripts" / "deploy_triton.sh"),
        "--repository",
        str(repo),
        *map(str, files),
    ]
    cmd += ["--concurrency", "1,2", "--requests", "4"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "concurrency" in proc.stdout.lower()
