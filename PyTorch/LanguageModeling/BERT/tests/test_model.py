"""Model: checkpoint layouts (Hugging Face, Google TF), packing equivalence, masked-only MLM head."""

import pytest
import torch
import transformers
from bert import convert
from bert.model import (
    BertForPreTraining,
    BertForQuestionAnswering,
    BertModel,
    bert_config,
    packed_position_ids,
    parameter_count,
)
from zoo.checkpoints import CheckpointError

HF_TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
)


def hf_tiny(cls):
    torch.manual_seed(0)
    config = transformers.BertConfig(**HF_TINY, attn_implementation="eager")
    model = cls(config).eval()
    with torch.no_grad():  # random LayerNorm/bias values so a wrong mapping cannot hide behind 1s and 0s
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def ours_tiny(cls):
    return cls(bert_config("bert-tiny", **{convert_key(k): v for k, v in HF_TINY.items()})).eval()


def convert_key(k):
    return {"num_hidden_layers": "num_layers", "num_attention_heads": "num_heads"}.get(k, k)


def batch(seed=1, b=3, t=12):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, HF_TINY["vocab_size"], (b, t), generator=g)
    types = torch.randint(0, 2, (b, t), generator=g)
    mask = torch.ones(b, t, dtype=torch.long)
    mask[1, 8:] = 0
    mask[2, 5:] = 0
    return ids, types, mask


def test_hf_pretraining_checkpoint_gives_equal_logits():
    hf = hf_tiny(transformers.BertForPreTraining)
    ours = ours_tiny(BertForPreTraining)
    convert.load_into(ours, hf.state_dict(), strict_heads=True)
    ids, types, mask = batch()
    with torch.no_grad():
        ref = hf(input_ids=ids, token_type_ids=types, attention_mask=mask)
        mlm, nsp = ours(ids, types, attention_mask=mask)
    valid = mask.bool()
    torch.testing.assert_close(mlm[valid], ref.prediction_logits[valid], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(nsp, ref.seq_relationship_logits, atol=1e-4, rtol=1e-4)


def test_ours_to_hf_round_trip_loads_strictly_into_transformers():
    ours = ours_tiny(BertForPreTraining)
    hf = transformers.BertForPreTraining(transformers.BertConfig(**HF_TINY)).eval()
    missing, unexpected = hf.load_state_dict(convert.ours_to_hf(ours.state_dict()), strict=False)
    assert not [k for k in missing if "position_ids" not in k] and not unexpected
    ids, types, mask = batch(2)
    with torch.no_grad():
        ref = hf(input_ids=ids, token_type_ids=types, attention_mask=mask)
        mlm, _ = ours(ids, types, attention_mask=mask)
    torch.testing.assert_close(mlm[mask.bool()], ref.prediction_logits[mask.bool()], atol=1e-4, rtol=1e-4)


def test_hf_question_answering_checkpoint_gives_equal_logits():
    hf = hf_tiny(transformers.BertForQuestionAnswering)
    ours = ours_tiny(BertForQuestionAnswering)
    convert.load_into(ours, hf.state_dict(), strict_heads=True)
    ids, types, mask = batch(3)
    with torch.no_grad():
        ref = hf(input_ids=ids, token_type_ids=types, attention_mask=mask)
        start, end = ours(ids, types, mask)
    valid = mask.bool()
    torch.testing.assert_close(start[valid], ref.start_logits[valid], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(end[valid], ref.end_logits[valid], atol=1e-4, rtol=1e-4)


def google_tf_names(hf_state):
    """The variable names and layouts of Google's original checkpoints, written out by hand."""
    out = {"global_step": torch.tensor(7).numpy()}
    for key, value in hf_state.items():
        v = value.numpy()
        if key.endswith("position_ids") or key.startswith("cls.predictions.decoder"):
            continue
        if key.startswith("bert.embeddings.") and key.endswith("_embeddings.weight"):
            name = key.replace(".weight", "").replace(".", "/")
        elif key == "cls.predictions.bias":
            name = "cls/predictions/output_bias"
        elif key.startswith("cls.seq_relationship"):
            name = "cls/seq_relationship/output_" + ("weights" if key.endswith("weight") else "bias")
        elif key.startswith("qa_outputs"):
            name = "cls/squad/output_" + ("weights" if key.endswith("weight") else "bias")
        else:
            parts = key.split(".")
            if parts[:3] == ["bert", "encoder", "layer"]:
                parts = ["bert", "encoder", f"layer_{parts[3]}"] + parts[4:]
            if parts[-2] == "LayerNorm":
                parts[-1] = {"weight": "gamma", "bias": "beta"}[parts[-1]]
            elif parts[-1] == "weight":
                parts[-1] = "kernel"
                v = v.T.copy()
            name = "/".join(parts)
            out[name + "/adam_m"] = v * 0  # optimizer slots are present in Google's files
        out[name] = v
    return out


@pytest.mark.parametrize("cls_pair", ["pretraining", "squad"])
def test_google_tf_layout_loads_to_the_same_weights(cls_pair):
    hf_cls, ours_cls = {
        "pretraining": (transformers.BertForPreTraining, BertForPreTraining),
        "squad": (transformers.BertForQuestionAnswering, BertForQuestionAnswering),
    }[cls_pair]
    hf = hf_tiny(hf_cls)
    tf_vars = google_tf_names(hf.state_dict())
    assert "bert/encoder/layer_1/attention/self/query/kernel" in tf_vars
    assert convert.detect_layout(tf_vars) == "tf"
    from_tf, from_hf = ours_tiny(ours_cls), ours_tiny(ours_cls)
    convert.load_into(from_tf, tf_vars, strict_heads=True)
    convert.load_into(from_hf, hf.state_dict(), strict_heads=True)
    for (k, a), b in zip(from_tf.state_dict().items(), from_hf.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=k)


def test_pretraining_checkpoint_initialises_squad_model():
    pre = ours_tiny(BertForPreTraining)
    qa = ours_tiny(BertForQuestionAnswering)
    report = convert.load_into(qa, pre.state_dict())
    assert "qa.weight" in report["missing"] and "mlm_bias" in report["unexpected"]
    torch.testing.assert_close(qa.bert.layers[1].qkv.weight, pre.bert.layers[1].qkv.weight)


def test_wrong_checkpoint_is_a_one_line_error(tmp_path):
    ours = ours_tiny(BertForPreTraining)
    bigger = BertForPreTraining(bert_config("bert-tiny", vocab_size=120, max_position_embeddings=64))
    with pytest.raises(CheckpointError, match="shape"):
        convert.load_into(ours, bigger.state_dict())
    with pytest.raises(CheckpointError, match="not a BERT"):
        convert.load_into(ours, {"fc.weight": torch.zeros(2)})
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot read") as info:
        convert.load_into(ours, junk)
    assert "\n" not in str(info.value)


def test_parameter_counts_match_transformers():
    for name, hf_kwargs in {
        "bert-base": dict(
            hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072
        ),
        "bert-large": dict(
            hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
        ),
    }.items():
        with torch.device("meta"):
            ours = BertForPreTraining(bert_config(name))
            hf = transformers.BertForPreTraining(transformers.BertConfig(**hf_kwargs))
        hf_count = sum(p.numel() for p in hf.parameters())  # tied decoder weight counted once
        assert parameter_count(ours) == hf_count, name
    with torch.device("meta"):
        assert parameter_count(BertModel(bert_config("bert-base"))) == 109_482_240


def test_packed_sample_equals_unpacked_sequences():
    torch.manual_seed(0)
    model = ours_tiny(BertForPreTraining)
    lengths = [5, 4, 3]
    g = torch.Generator().manual_seed(5)
    seqs = [torch.randint(0, 99, (n,), generator=g) for n in lengths]
    types = [torch.randint(0, 2, (n,), generator=g) for n in lengths]
    t = 14  # two padding tokens at the end of the packed row
    ids, tt, seq_ids = (
        torch.zeros(1, t, dtype=torch.long),
        torch.zeros(1, t, dtype=torch.long),
        torch.zeros(1, t, dtype=torch.long),
    )
    offset = 0
    for i, (s, ty) in enumerate(zip(seqs, types, strict=True)):
        ids[0, offset : offset + len(s)] = s
        tt[0, offset : offset + len(s)] = ty
        seq_ids[0, offset : offset + len(s)] = i + 1
        offset += len(s)
    assert packed_position_ids(seq_ids)[0, :12].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 1, 2]
    mlm_positions = torch.tensor([[1, 6, 10]])
    with torch.no_grad():
        packed_hidden = model.bert(ids, tt, seq_ids=seq_ids)
        packed_mlm, packed_nsp = model(
            ids, tt, seq_ids=seq_ids, mlm_positions=mlm_positions, cls_positions=torch.tensor([[0, 5, 9]])
        )
        offset = 0
        for i, (s, ty) in enumerate(zip(seqs, types, strict=True)):
            alone = model.bert(s[None], ty[None])
            torch.testing.assert_close(
                packed_hidden[0, offset : offset + len(s)], alone[0], atol=1e-5, rtol=1e-5
            )
            mlm_alone, nsp_alone = model(
                s[None], ty[None], mlm_positions=torch.tensor([[mlm_positions[0, i] - offset]])
            )
            torch.testing.assert_close(packed_mlm[0, i], mlm_alone[0, 0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(packed_nsp[0, i], nsp_alone[0], atol=1e-5, rtol=1e-5)
            offset += len(s)
    # without the block-diagonal mask the sequences would see each other: the check can fail
    with torch.no_grad():
        leaky = model.bert(ids[:, :12], tt[:, :12], position_ids=packed_position_ids(seq_ids)[:, :12])
    assert not torch.allclose(leaky[0, :5], model.bert(seqs[0][None], types[0][None])[0], atol=1e-3)


def test_mlm_head_at_positions_equals_full_head():
    model = ours_tiny(BertForPreTraining)
    ids, types, mask = batch(4)
    positions = torch.tensor([[0, 3, 7], [2, 2, 5], [1, 4, 4]])
    with torch.no_grad():
        full, _ = model(ids, types, attention_mask=mask)
        picked, _ = model(ids, types, attention_mask=mask, mlm_positions=positions)
    expected = torch.stack([full[b, positions[b]] for b in range(3)])
    torch.testing.assert_close(picked, expected)


def test_convert_cli_turns_google_variables_into_our_checkpoint(tmp_path):
    import numpy as np

    hf = hf_tiny(transformers.BertForPreTraining)
    np.savez(tmp_path / "google.npz", **google_tf_names(hf.state_dict()))
    convert.main([str(tmp_path / "google.npz"), str(tmp_path / "ours.pt")])
    from_file, from_hf = ours_tiny(BertForPreTraining), ours_tiny(BertForPreTraining)
    convert.load_into(from_file, tmp_path / "ours.pt", strict_heads=True)
    convert.load_into(from_hf, hf.state_dict(), strict_heads=True)
    for (k, a), b in zip(from_file.state_dict().items(), from_hf.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=k)
    convert.main([str(tmp_path / "ours.pt"), str(tmp_path / "hf.pt"), "--to", "hf"])
    assert "bert.encoder.layer.1.attention.self.value.weight" in torch.load(
        tmp_path / "hf.pt", weights_only=True
    )


def test_residual_stream_dtype_under_autocast():
    """Under bf16 autocast the residual stream is cast to bf16 (fp32 with fp32_residual); outside
    autocast both settings compute the same function."""
    torch.manual_seed(0)
    low = BertModel(bert_config("bert-tiny", vocab_size=99)).eval()
    high = BertModel(bert_config("bert-tiny", vocab_size=99, fp32_residual=True)).eval()
    high.load_state_dict(low.state_dict())
    ids = torch.randint(5, 99, (2, 16))
    torch.testing.assert_close(low(ids), high(ids), rtol=0, atol=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out_low, out_high = low(ids), high(ids)
    assert (out_low.dtype, out_high.dtype) == (torch.bfloat16, torch.float32)
    reference = low(ids)
    assert (out_low.float() - reference).abs().max() < 0.1 * reference.abs().max()
    assert (out_low.float() - out_high).abs().max() > 0  # the cast is real


def test_packed_phase2_samples_give_each_sequence_its_unpacked_mlm_loss(tmp_path, english_text, tiny_vocab):
    """Samples of 512 tokens from the pipeline (several sequences each): every sequence's masked-LM loss
    in its packed sample equals its loss alone in an unpacked sample (one sequence, padding)."""
    import torch.nn.functional as F
    from bert.data import PretrainingBatches
    from zoo.data.bert import PretrainingData, SampleSpec
    from zoo.data.bert_prepare import prepare

    prepare([english_text], tiny_vocab, tmp_path, SampleSpec(max_seq=512, max_predictions=80), workers=1)
    data = PretrainingData(tmp_path, seed=1)
    batch = PretrainingBatches(data, 4)[0]
    assert batch["sequences"] > 8  # packed: several sequences a sample
    torch.manual_seed(0)
    model = BertForPreTraining(bert_config("bert-tiny", vocab_size=data.specials.vocab_size)).eval()
    with torch.no_grad():
        logits, _ = model(
            batch["input_ids"], batch["token_type_ids"], seq_ids=batch["seq_ids"],
            mlm_positions=batch["mlm_positions"], next_sentence=False,
        )  # fmt: skip
    checked = 0
    for row in range(4):
        seq_ids, positions, labels = (
            batch["seq_ids"][row],
            batch["mlm_positions"][row],
            batch["mlm_labels"][row],
        )
        for k in range(1, int(seq_ids.max()) + 1):
            where = (seq_ids == k).nonzero().flatten()
            start, end = int(where[0]), int(where[-1]) + 1
            slots = ((labels != -100) & (positions >= start) & (positions < end)).nonzero().flatten()
            if not len(slots):
                continue
            packed_loss = F.cross_entropy(logits[row, slots], labels[slots])
            alone = {
                name: torch.zeros(1, 512, dtype=torch.long)
                for name in ("input_ids", "token_type_ids", "seq_ids")
            }
            alone["input_ids"][:] = data.specials.pad
            alone["input_ids"][0, : end - start] = batch["input_ids"][row, start:end]
            alone["token_type_ids"][0, : end - start] = batch["token_type_ids"][row, start:end]
            alone["seq_ids"][0, : end - start] = 1
            with torch.no_grad():
                alone_logits, _ = model(
                    **alone, mlm_positions=(positions[slots] - start)[None], next_sentence=False
                )
            torch.testing.assert_close(
                packed_loss, F.cross_entropy(alone_logits[0], labels[slots]), atol=1e-5, rtol=1e-5
            )
            checked += 1
    assert checked >= 8
