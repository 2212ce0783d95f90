"""Export: ONNX equals eager at other batch/sequence sizes; the real tritonserver answers like PyTorch,
a bad request fails alone in its batch, and the deploy script stops its server however it ends."""

import json
import os
import signal
import sys

import numpy as np
import pytest
import torch
from bert.export import export_onnx, export_torchscript, write_repository
from bert.inference import inference_model, load_squad_model
from bert.model import BertForQuestionAnswering, bert_config
from zoo.data.squad import Example, answer_through_triton, best_spans, make_features
from zoo.data.wordpiece import load_tokenizer
from zoo.errors import UserError
from zoo.triton.repository import single_model_repository


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_vocab):
    torch.manual_seed(0)
    vocab_size = load_tokenizer(tiny_vocab).get_vocab_size()
    model = inference_model(BertForQuestionAnswering(bert_config("bert-tiny", vocab_size=vocab_size)))
    out = tmp_path_factory.mktemp("export")
    onnx_path = export_onnx(model, out / "model.onnx")
    repo = out / "repository"
    torchscript = export_torchscript(model, out / "model.pt")
    write_repository(repo, onnx_path, vocab_size=vocab_size, max_batch_size=8, torchscript_path=torchscript)
    return model, onnx_path, repo


def windows(batch, length):
    g = torch.Generator().manual_seed(length)
    ids = torch.randint(0, 1000, (batch, length), generator=g)
    types = (torch.arange(length) > length // 3).long().expand(batch, -1).contiguous()
    mask = torch.ones_like(ids)
    mask[-1, length // 2 :] = 0
    return ids, types, mask


@pytest.mark.parametrize("amp", ["fp32", "bf16"])
def test_torchscript_is_the_inference_model_at_other_shapes(exported, tmp_path, amp):
    model = inference_model(exported[0], amp=amp)
    assert next(model.parameters()).dtype == {"fp32": torch.float32, "bf16": torch.bfloat16}[amp]
    loaded = torch.jit.load(str(export_torchscript(model, tmp_path / "model.pt")))
    for batch, length in [(1, 9), (5, 77)]:
        with torch.no_grad():
            ref, got = model(*windows(batch, length)), loaded(*windows(batch, length))
        for a, b in zip(got, ref, strict=True):
            assert a.dtype == torch.float32 and a.shape == (batch, length)
            torch.testing.assert_close(a, b, atol=0, rtol=0)  # the same kernels on the same weights


def test_onnx_matches_eager_for_other_shapes(exported):
    import onnxruntime as ort

    model, onnx_path, _ = exported
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    for batch, length in [(1, 9), (5, 77)]:
        ids, types, mask = windows(batch, length)
        with torch.no_grad():
            ref = model(ids, types, mask)
        got = session.run(
            None, {"input_ids": ids.numpy(), "token_type_ids": types.numpy(), "attention_mask": mask.numpy()}
        )
        for a, b in zip(got, ref, strict=True):
            np.testing.assert_allclose(a, b.numpy(), atol=1e-4, rtol=1e-4)


def test_repository_configs_parse(exported):
    from zoo.triton.repository import parse_pbtxt

    model, _, repo = exported
    for name, backend in [("bert_squad_onnx", "onnxruntime"), ("bert_squad_python", "python")]:
        config = parse_pbtxt((repo / name / "config.pbtxt").read_text())
        assert config.backend == backend and config.max_batch_size == 8
        assert [list(i.dims) for i in config.input] == [[-1]] * 3
        assert (repo / name / "1" / "model.onnx").is_file()
    assert (repo / "bert_squad_python" / "1" / "model.py").is_file()
    libtorch = parse_pbtxt((repo / "bert_squad_libtorch" / "config.pbtxt").read_text())
    assert (
        libtorch.platform == "pytorch_libtorch"
        and (repo / "bert_squad_libtorch" / "1" / "model.pt").is_file()
    )
    assert [i.name for i in libtorch.input] == ["INPUT__0", "INPUT__1", "INPUT__2"]
    for name in ("bert_squad_onnx", "bert_squad_python", "bert_squad_libtorch"):
        config = parse_pbtxt((repo / name / "config.pbtxt").read_text())
        assert config.parameters["precision"].string_value == "fp32"
    parameters = parse_pbtxt((repo / "bert_squad_python" / "config.pbtxt").read_text()).parameters
    assert parameters["max_value:input_ids"].string_value == str(model.config.vocab_size - 1)
    assert parameters["max_value:token_type_ids"].string_value == "1"


def test_tritonserver_answers_with_the_pytorch_span(exported, tiny_vocab, tmp_path):
    from zoo.triton.server import TritonServer

    model, _, repo = exported
    tokenizer = load_tokenizer(tiny_vocab)
    examples = [
        Example("a", "Who may copy the program?", "Everyone is permitted to copy and distribute verbatim copies of this license document, but changing it is not allowed."),
        Example("b", "What is free software?", "The licenses for most software are designed to take away your freedom to share and change it. " * 6),
    ]  # fmt: skip
    features = make_features(examples, tokenizer, max_seq=64, doc_stride=24)
    with torch.no_grad():
        start, end = model(
            *(
                torch.from_numpy(getattr(features, k))
                for k in ("input_ids", "token_type_ids", "attention_mask")
            )
        )
    expected = best_spans(examples, features, start.numpy(), end.numpy())
    assert all(expected.values())
    served = single_model_repository(repo, "bert_squad_python", tmp_path)
    with TritonServer(served) as server:
        for url, protocol in [(server.http_url, "http"), (server.grpc_url, "grpc")]:
            answers, latencies = answer_through_triton(
                url,
                "bert_squad_python",
                examples,
                tokenizer,
                protocol=protocol,
                max_seq=64,
                doc_stride=24,
                batch=4,
            )
            assert answers == expected, protocol
            assert len(latencies) == (len(features) + 3) // 4


def test_export_bad_checkpoint_is_one_line_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_squad_model(tmp_path / "none.pt", "bert-tiny", 1000)
    torch.save({"weights": 1}, tmp_path / "odd.pt")
    with pytest.raises(UserError, match="carries no config"):
        load_squad_model(tmp_path / "odd.pt", None, None)


def test_a_token_id_outside_the_vocabulary_fails_only_its_own_request(exported, tmp_path):
    """Four requests in one batch over HTTP and gRPC: the one with token id 999999 gets an error, the
    others the logits onnxruntime gives for them alone."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    import onnxruntime as ort
    import tritonclient.http
    from zoo.triton.client import infer
    from zoo.triton.repository import config_to_pbtxt, parse_pbtxt
    from zoo.triton.server import TritonServer

    model, onnx_path, repo = exported
    served = single_model_repository(repo, "bert_squad_python", tmp_path)
    rng = np.random.default_rng(0)
    requests = []
    for batch in (1, 2, 1, 3):
        ids = rng.integers(0, model.config.vocab_size, (batch, 16))
        requests.append({"input_ids": ids, "token_type_ids": (np.arange(16) >= 6).astype(np.int64) + 0 * ids,
                         "attention_mask": np.ones_like(ids)})  # fmt: skip
    requests[2]["input_ids"][0, 5] = 999999
    # Hold the batcher until all four have arrived, so they run as one batch.
    config_path = served / "bert_squad_python" / "config.pbtxt"
    config = parse_pbtxt(config_path.read_text())
    config.dynamic_batching.preferred_batch_size[:] = [7]
    config.dynamic_batching.max_queue_delay_microseconds = 3_000_000
    config_path.write_text(config_to_pbtxt(config))
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = ["start_logits", "end_logits"]

    def send(url, protocol, request):
        try:
            return infer(url, "bert_squad_python", request, names, protocol=protocol)
        except RuntimeError as e:
            return str(e)

    with TritonServer(served) as server, ThreadPoolExecutor(4) as pool:
        stats = tritonclient.http.InferenceServerClient(server.http_url)
        for executions, (protocol, url) in enumerate(
            [("http", server.http_url), ("grpc", server.grpc_url)], 1
        ):
            results = list(pool.map(lambda r, u=url, p=protocol: send(u, p, r), requests))
            deadline = time.monotonic() + 5  # the server counts an execution after it has answered
            while (
                count := int(
                    stats.get_inference_statistics("bert_squad_python")["model_stats"][0]["execution_count"]
                )
            ) < executions and time.monotonic() < deadline:
                time.sleep(0.05)
            assert count == executions, "the four requests did not run as one batch"
            assert isinstance(results[2], str), protocol
            assert "'input_ids' holds 999999, above its maximum" in results[2], results[2]
            for index in (0, 1, 3):
                assert not isinstance(results[index], str), (protocol, results[index])
                expected = session.run(names, requests[index])
                for name, value in zip(names, expected, strict=True):
                    np.testing.assert_allclose(results[index][name], value, rtol=1e-5, atol=1e-5)
        stats.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_deploy_stops_tritonserver_and_its_stubs_on_a_signal(exported, tiny_vocab, tmp_path, sig, model_dir):
    from zoo.triton.processes import signal_when_serving

    _, _, repo = exported
    context = (model_dir / "README.md").read_text()[:3000]
    paragraphs = [{"context": context, "qas": [{"id": f"q{i}", "question": "What does it do?", "answers": []}
                                               for i in range(400)]}]  # fmt: skip
    squad = tmp_path / "questions.json"
    squad.write_text(json.dumps({"version": "1.1", "data": [{"title": "readme", "paragraphs": paragraphs}]}))
    command = [
        sys.executable,
        "-m",
        "bert.deploy",
        "--model-repository",
        str(repo),
        "--vocab",
        str(tiny_vocab),
    ]
    command += ["--squad-file", str(squad), "--limit", "400", "--max-seq", "64", "--doc-stride", "24"]
    env = {**os.environ, "PYTHONPATH": str(model_dir)}
    run = signal_when_serving(command, sig, ready_text="tritonserver ready", env=env, cwd=tmp_path)
    assert sorted({p.name for p in run.served_by}) == ["triton_python_backend_stub", "tritonserver"]
    assert run.left_running == [], run.output
    assert run.returncode != 0 and "latency p50" not in run.output, "the signal came after the deploy ended"


def test_deploy_load_mode_prints_a_table_without_errors(exported, tiny_vocab, capsys):
    from bert.deploy import main

    _, _, repo = exported
    args = [
        "--model-repository",
        str(repo),
        "--vocab",
        str(tiny_vocab),
        "--max-seq",
        "64",
        "--doc-stride",
        "24",
    ]
    args += ["--question", "Who may copy it?", "--context", "Everyone is permitted to copy verbatim copies."]
    main([*args, "--concurrency", "1,2", "--requests", "6"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3].split()[:3] == ["concurrency", "requests", "errors"]
    rows = [line.split() for line in lines[-2:]]
    assert [row[:3] for row in rows] == [["1", "6", "0"], ["2", "6", "0"]]
    assert all(float(row[3]) > 0 and 0 < float(row[4]) <= float(row[5]) for row in rows)


def test_export_writes_the_inference_model_in_the_precision_asked(tmp_path):
    import dataclasses

    import onnxruntime as ort
    from bert import export

    torch.manual_seed(0)
    model = BertForQuestionAnswering(bert_config("bert-tiny", vocab_size=1000)).eval()
    checkpoint = tmp_path / "squad_model.pt"
    torch.save({"model": model.state_dict(), "config": dataclasses.asdict(model.config)}, checkpoint)
    repo = tmp_path / "repo"
    export.main(["--checkpoint", str(checkpoint), "--model-repository", str(repo), "--amp", "fp16"])
    served = inference_model(model, amp="fp16")
    ids, types, mask = windows(3, 40)
    with torch.no_grad():
        expected = [t.numpy() for t in served(ids, types, mask)]
    session = ort.InferenceSession(
        str(repo / "bert_squad_onnx" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    got = session.run(
        None, {"input_ids": ids.numpy(), "token_type_ids": types.numpy(), "attention_mask": mask.numpy()}
    )
    for a, b in zip(got, expected, strict=True):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, atol=2e-3, rtol=0)  # fp16 kernels of two libraries
    traced = torch.jit.load(str(repo / "bert_squad_libtorch" / "1" / "model.pt"))
    assert {p.dtype for p in traced.parameters()} == {torch.float16}
    from zoo.triton.repository import parse_pbtxt

    config = parse_pbtxt((repo / "bert_squad_onnx" / "config.pbtxt").read_text())
    assert config.parameters["precision"].string_value == "fp16"
    export.main(
        ["--checkpoint", str(checkpoint), "--model-repository", str(tmp_path / "bf16"), "--amp", "bf16"]
    )
    assert sorted(p.name for p in (tmp_path / "bf16").iterdir()) == [
        "bert_squad_libtorch"
    ]  # no bf16 in onnxruntime
