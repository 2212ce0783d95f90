"""Export: ONNX equals eager at other batch/sequence sizes; the real tritonserver answers like PyTorch."""

import numpy as np
import pytest
import torch
from bert.deploy import answer_through_triton, single_model_repository
from bert.export import export_onnx, load_squad_model, write_repository
from bert.model import BertForQuestionAnswering, bert_config
from bert.squad import Example, best_spans, make_features
from bert.tokenization import load_tokenizer


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_vocab):
    torch.manual_seed(0)
    vocab_size = load_tokenizer(tiny_vocab).get_vocab_size()
    model = BertForQuestionAnswering(bert_config("bert-tiny", vocab_size=vocab_size)).eval()
    out = tmp_path_factory.mktemp("export")
    onnx_path = export_onnx(model, out / "model.onnx")
    repo = out / "repository"
    write_repository(repo, onnx_path, max_batch_size=8)
    return model, onnx_path, repo


def test_onnx_matches_eager_for_other_shapes(exported):
    import onnxruntime as ort

    model, onnx_path, _ = exported
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    for batch, length in [(1, 9), (5, 77)]:
        g = torch.Generator().manual_seed(length)
        ids = torch.randint(0, 1000, (batch, length), generator=g)
        types = (torch.arange(length) > length // 3).long().expand(batch, -1).contiguous()
        mask = torch.ones_like(ids)
        mask[-1, length // 2 :] = 0
        with torch.no_grad():
            ref = model(ids, types, mask)
        got = session.run(
            None, {"input_ids": ids.numpy(), "token_type_ids": types.numpy(), "attention_mask": mask.numpy()}
        )
        for a, b in zip(got, ref, strict=True):
            np.testing.assert_allclose(a, b.numpy(), atol=1e-4, rtol=1e-4)


def test_repository_configs_parse(exported):
    from zoo.triton import parse_pbtxt

    _, _, repo = exported
    for name, backend in [("bert_squad_onnx", "onnxruntime"), ("bert_squad_python", "python")]:
        config = parse_pbtxt((repo / name / "config.pbtxt").read_text())
        assert config.backend == backend and config.max_batch_size == 8
        assert [list(i.dims) for i in config.input] == [[-1]] * 3
        assert (repo / name / "1" / "model.onnx").is_file()
    assert (repo / "bert_squad_python" / "1" / "model.py").is_file()


def test_tritonserver_answers_with_the_pytorch_span(exported, tiny_vocab, tmp_path):
    from zoo.triton import TritonServer

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
    with pytest.raises(SystemExit, match="does not exist"):
        load_squad_model(tmp_path / "none.pt", "bert-tiny", 1000)
    torch.save({"weights": 1}, tmp_path / "odd.pt")
    with pytest.raises(SystemExit, match="carries no config"):
        load_squad_model(tmp_path / "odd.pt", None, None)
