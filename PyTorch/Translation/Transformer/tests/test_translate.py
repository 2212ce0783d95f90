import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from transformer.data import encode_line, load_tokenizer, pad_batch
from transformer.evaluate import load_model
from transformer.export import TRITON_MODEL, export_onnx, write_repository
from transformer.model import build_model
from transformer.translate import greedy, translate_ids

MODEL_DIR = Path(__file__).resolve().parents[1]
TINY = {"d_model": 32, "heads": 4, "ffn": 64, "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.0}


@pytest.fixture(scope="module")
def model_and_source(trained, numbers_data):
    results, _ = trained
    model, _ = load_model(results / "model.pt")
    tokenizer = load_tokenizer(numbers_data)
    lines = (numbers_data / "test.en").read_text().splitlines()[:8]
    return model, tokenizer, lines, pad_batch([encode_line(tokenizer, line) for line in lines])


@pytest.mark.parametrize("pre_norm", [False, True])
def test_cached_steps_equal_the_full_decoder(pre_norm):
    torch.manual_seed(0)
    model = build_model({**TINY, "pre_norm": pre_norm}, 50).eval()
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 10, 11, 12], [1, 13, 14, 15]])
    with torch.no_grad():
        full = torch.log_softmax(model(src, tgt), dim=-1)
        cross_k, cross_v, src_mask = model.encode(src)
        self_k, self_v = model.empty_cache(2)
        for t in range(tgt.shape[1]):
            logp, self_k, self_v = model.decode_step(tgt[:, t], cross_k, cross_v, src_mask, self_k, self_v)
            torch.testing.assert_close(logp, full[:, t], rtol=1e-4, atol=1e-5)


def test_beam_one_is_greedy(model_and_source):
    model, _, _, src = model_and_source
    assert translate_ids(model, src, beam=1) == greedy(model, src)
    torch.manual_seed(1)
    untrained = build_model(TINY, model.cfg.vocab_size).eval()
    assert translate_ids(untrained, src, beam=1) == greedy(untrained, src)


def test_beam_search_translates_numbers(model_and_source):
    model, tokenizer, lines, src = model_and_source
    hyps = [tokenizer.decode(ids) for ids in translate_ids(model, src, beam=4)]
    from num2words import num2words

    assert tokenizer.decode(
        translate_ids(model, pad_batch([encode_line(tokenizer, "twenty-one , five , eighty")]))[0]
    ) == " ".join(num2words(n, lang="de") for n in (21, 5, 80))
    assert len(hyps) == len(lines) and all(hyps)


def test_onnx_encoder_and_decoder_match_pytorch(model_and_source, tmp_path):
    model, _, _, src = model_and_source
    encoder, decoder = export_onnx(model, tmp_path)
    ck, cv, mask = ort.InferenceSession(str(encoder)).run(None, {"src_tokens": src.numpy()})
    with torch.no_grad():
        tk, tv, tmask = model.encode(src)
    np.testing.assert_allclose(ck, tk.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(cv, tv.numpy(), rtol=1e-4, atol=1e-5)
    assert (mask == tmask.numpy()).all()
    step = ort.InferenceSession(str(decoder))
    self_k, self_v = model.empty_cache(src.shape[0])
    onnx_k, onnx_v = self_k.numpy(), self_v.numpy()
    tokens = torch.full((src.shape[0],), 1)
    for _ in range(4):  # from an empty cache, through growing ones
        with torch.no_grad():
            logp, self_k, self_v = model.decode_step(tokens, tk, tv, tmask, self_k, self_v)
        feed = {
            "tokens": tokens.numpy(),
            "cross_k": ck,
            "cross_v": cv,
            "src_mask": mask,
            "self_k": onnx_k,
            "self_v": onnx_v,
        }
        onnx_logp, onnx_k, onnx_v = step.run(None, feed)
        np.testing.assert_allclose(onnx_logp, logp.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(onnx_k, self_k.numpy(), rtol=1e-4, atol=1e-5)
        tokens = logp.argmax(dim=-1)


def test_onnx_beam_search_equals_pytorch(model_and_source, tmp_path):
    model, tokenizer, _, src = model_and_source
    repo = write_repository(model, tmp_path / "repo", tokenizer, beam=4)
    version = repo / TRITON_MODEL / "1"
    assert sorted(p.name for p in version.iterdir()) == ["beam.py", "decoder.onnx", "model.onnx", "model.py"]
    ck, cv, mask = ort.InferenceSession(str(version / "model.onnx")).run(None, {"src_tokens": src.numpy()})
    import importlib.util

    spec = importlib.util.spec_from_file_location("served_beam", version / "beam.py")
    served = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(served)
    tokens = served.postprocess(
        {"cross_k": ck, "cross_v": cv, "src_mask": mask}, {"decoder_file": "decoder.onnx", "beam": "4"}
    )["tokens"]
    assert [[int(t) for t in row if t != 2] for row in tokens] == translate_ids(model, src, beam=4)


def test_tritonserver_translates_like_pytorch(model_and_source, tmp_path):
    from transformer.deploy import translate_served
    from transformer.translate import translate_lines
    from zoo.triton.server import TritonServer

    model, tokenizer, lines, _ = model_and_source
    repo = write_repository(model, tmp_path / "repo", tokenizer, beam=4)
    try:
        server = TritonServer(repo)
        server.start()
    except (RuntimeError, FileNotFoundError) as e:
        pytest.fail(f"tritonserver did not start: {str(e).splitlines()[0]}")
    try:
        served = translate_served(server.http_url, tokenizer, lines, batch=4)
    finally:
        server.stop()
    assert served == translate_lines(model, tokenizer, lines, beam=4)


def test_deploy_load_mode_prints_a_table_without_errors(model_and_source, tmp_path):
    model, tokenizer, lines, _ = model_and_source
    repo = write_repository(model, tmp_path / "repo", tokenizer, beam=4)
    source = tmp_path / "source.en"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    script = MODEL_DIR / "scripts" / "deploy_triton.sh"
    command = ["bash", str(script), "--repository", str(repo), "--input", str(source), "--batch", "4"]
    command += ["--concurrency", "1,2", "--requests", "4"]
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout.strip().splitlines()
    assert printed[-3].split()[:3] == ["concurrency", "requests", "errors"], result.stdout
    rows = [line.split() for line in printed[-2:]]
    assert [row[:3] for row in rows] == [["1", "4", "0"], ["2", "4", "0"]], result.stdout
    assert all(float(row[3]) > 0 and 0 < float(row[4]) <= float(row[5]) for row in rows), result.stdout


def test_deploy_stopped_by_sigterm_leaves_no_server_running(model_and_source, tmp_path):
    import signal

    from zoo.triton.processes import signal_when_serving

    model, tokenizer, lines, _ = model_and_source
    repo = write_repository(model, tmp_path / "repo", tokenizer, beam=4)
    source = tmp_path / "source.en"
    source.write_text("\n".join(lines * 400) + "\n", encoding="utf-8")  # still translating when signalled
    script = MODEL_DIR / "scripts" / "deploy_triton.sh"
    command = ["bash", str(script), "--repository", str(repo), "--input", str(source), "--batch", "1"]
    env = {**os.environ, "PYTHON": sys.executable}
    run = signal_when_serving(command, signal.SIGTERM, env=env, timeout=240)
    assert sorted({p.name for p in run.served_by}) == ["triton_python_backend_stub", "tritonserver"]
    assert run.left_running == [], run.output[-3000:]
    assert run.returncode != 0, "the signal came after the deploy ended"
    assert "Traceback" not in run.output, run.output[-3000:]


def test_translations_stop_where_the_decoder_positions_end(tmp_path):
    # a * S + b would be 1.2 * 8 + 10 = 19 steps; the decoder has 12 positions: 11 tokens at most
    torch.manual_seed(3)
    model = build_model({**TINY, "max_positions": 12}, 30).eval()
    from transformer.model import EOS

    decode_step = model.decode_step

    def never_ends(*args):  # EOS never wins: every search runs to its cap
        logp, self_k, self_v = decode_step(*args)
        return logp.index_fill(-1, torch.tensor([EOS]), float("-inf")), self_k, self_v

    model.decode_step = never_ends
    src = torch.randint(4, 30, (2, 8))
    for ids in greedy(model, src) + translate_ids(model, src, beam=2):
        assert len(ids) == 11
    from transformer.translate import max_lengths

    assert max_lengths(src, 1.2, 10).tolist() == [19, 19]
    assert max_lengths(src, 1.2, 10, positions=12).tolist() == [11, 11]
