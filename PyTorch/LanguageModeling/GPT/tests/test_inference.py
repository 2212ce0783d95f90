"""Generation with the KV cache, the Hugging Face export's logits, and tritonserver's generation."""

import pytest
import torch
from gpt.export import to_hf
from gpt.inference import generate
from gpt.model import build_model

TINY = {"vocab_size": 97, "dim": 32, "layers": 2, "heads": 4, "ffn_dim": 64, "max_seq_len": 32}
SHAPES = {
    "llama": {**TINY, "shape": "llama", "kv_heads": 2, "tie_embeddings": False, "rope_theta": 10000.0},
    "gpt3": {**TINY, "shape": "gpt3", "kv_heads": 4, "tie_embeddings": True},
}


@pytest.fixture(params=sorted(SHAPES))
def model(request):
    torch.manual_seed(0)
    return build_model(SHAPES[request.param]).eval()


def test_cached_steps_equal_the_full_forward(model):
    tokens = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache(2, 12)
        pieces = [model(tokens[:, :5], cache=cache, start=0)]
        pieces += [model(tokens[:, t : t + 1], cache=cache, start=t) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-4, atol=1e-5)


def test_greedy_is_the_argmax_and_sampling_follows_the_seed(model):
    prompt = [5, 17, 3]
    greedy = generate(model, prompt, max_new_tokens=6)
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(6):  # no cache: the whole sequence every time
            tokens.append(int(model(torch.tensor([tokens]))[0, -1].argmax()))
    assert greedy == tokens
    sampled = [
        generate(model, prompt, max_new_tokens=8, temperature=1.0, top_k=10, seed=s) for s in (1, 1, 2)
    ]
    assert sampled[0] == sampled[1] != sampled[2]
    assert len(generate(model, prompt, max_new_tokens=100)) == 32  # stops at max_seq_len


def test_the_hugging_face_export_gives_our_logits(model, tmp_path):
    from gpt.export import export_hf

    tokens = torch.randint(0, 97, (2, 16))
    with torch.no_grad():
        ours = model(tokens)
        theirs = to_hf(model)(input_ids=tokens).logits
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-4)
    folder = export_hf(model, tmp_path / "hf")
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(loaded).__name__ == ("LlamaForCausalLM" if model.cfg.shape == "llama" else "GPT2LMHeadModel")
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=tokens).logits, ours, rtol=1e-4, atol=1e-4)


def test_tritonserver_generates_what_generate_sh_prints(trained, tmp_path):
    from gpt.deploy import main as deploy
    from gpt.export import main as export
    from gpt.generate import main as generate_text
    from zoo.triton.server import ServerError

    results, _ = trained
    export(["--checkpoint", str(results / "model.pt"), "--repository", str(tmp_path / "repo")])
    settings = ["--max-new-tokens", "12", "--temperature", "0.9", "--top-k", "20", "--seed", "7"]
    prompt = ["--prompt", "The for statement"]
    expected = generate_text(
        ["--checkpoint", str(results / "model.pt"), *prompt, *settings, "--device", "cpu"]
    )
    try:
        served = deploy(["--repository", str(tmp_path / "repo"), *prompt, *settings])
    except ServerError as e:
        pytest.fail(f"tritonserver did not start: {str(e).splitlines()[0]}")
    assert served == expected and served.startswith("The for statement")


def test_the_onnx_prefill_and_step_give_our_logits(model, tmp_path):
    import numpy as np
    import onnxruntime as ort
    from gpt.export import export_onnx

    prefill, step = (ort.InferenceSession(str(p)) for p in export_onnx(model, tmp_path))
    tokens = torch.randint(0, 97, (1, 9))
    with torch.no_grad():
        full = model(tokens)[0]
    settings = {"max_new_tokens": np.array([4], np.int32), "temperature": np.array([0.0], np.float32),
                "top_k": np.array([0], np.int32), "seed": np.array([0], np.int64)}  # fmt: skip
    logits, keys, values, *_ = prefill.run(None, {"prompt_ids": tokens[0, :6].numpy(), **settings})
    np.testing.assert_allclose(logits[0], full[5].numpy(), rtol=1e-4, atol=1e-4)
    for t in range(6, 9):
        feed = {"tokens": tokens[:, t : t + 1].numpy(), "past_keys": keys, "past_values": values}
        logits, keys, values = step.run(None, feed)
        np.testing.assert_allclose(logits[0], full[t].numpy(), rtol=1e-4, atol=1e-4)
    assert keys.shape[3] == 9
