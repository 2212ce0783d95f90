"""The speed levers give the plain path's values: fused projections, the one-pass loss, fused Adam,
torch.compile, and a step that leaves its results on the device."""

import copy

import pytest
import torch
import torch.nn.functional as F
from transformer.model import BOS, EOS, PAD, build_model
from transformer.step import (
    TranslationLoss,
    build_optimizer,
    compile_mode,
    inverse_sqrt,
    smoothed_loss,
    train_step,
    training_net,
)
from zoo.errors import UserError

DIMS = {"d_model": 32, "heads": 4, "ffn": 64, "encoder_layers": 2, "decoder_layers": 3, "dropout": 0.0}
VOCAB = 50


def batch(sentences=3, src_len=7, tgt_len=5, seed=0) -> dict:
    """Random pairs with right padding of different lengths (pads in src, tgt_in and tgt_out)."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (sentences, src_len), generator=generator)
    tgt = torch.randint(4, VOCAB, (sentences, tgt_len), generator=generator)
    for row in range(sentences):
        src[row, src_len - row :] = PAD
        src[row, src_len - row - 1] = EOS
        tgt[row, tgt_len - row :] = PAD
        tgt[row, tgt_len - row - 1] = EOS
    tgt_in = torch.cat([torch.full((sentences, 1), BOS), tgt[:, :-1]], dim=1)
    tgt_in[tgt_in == EOS] = PAD
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt}


def models(**levers):
    """(plain model, model with ``levers``) holding the same weights."""
    torch.manual_seed(0)
    plain = build_model(DIMS, VOCAB)
    fused = build_model({**DIMS, **levers}, VOCAB)
    fused.load_state_dict(plain.state_dict())
    return plain, fused


def test_smoothed_loss_equals_cross_entropy_with_label_smoothing():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, VOCAB, requires_grad=True)
    target = batch()["tgt_out"]
    loss, nll = smoothed_loss(logits, target, 0.1)
    flat, labels = logits.reshape(-1, VOCAB), target.reshape(-1)
    expected = F.cross_entropy(flat, labels, ignore_index=PAD, label_smoothing=0.1, reduction="sum")
    expected_nll = F.cross_entropy(flat, labels, ignore_index=PAD, reduction="sum")
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(nll, expected_nll)
    assert not nll.requires_grad
    (grad,) = torch.autograd.grad(loss, logits)
    (expected_grad,) = torch.autograd.grad(expected, logits)
    torch.testing.assert_close(grad, expected_grad)
    assert grad[target == PAD].abs().max() == 0


@pytest.mark.parametrize("levers", [{"fused_qkv": True}, {"fused_cross_kv": True}])
def test_fused_projections_give_the_plain_logits_and_gradients(levers):
    plain, fused = models(**levers)
    assert plain.state_dict().keys() == fused.state_dict().keys()
    data = batch()
    losses = []
    for model in (plain, fused):
        loss, _ = TranslationLoss(model, 0.1)(data["src"], data["tgt_in"], data["tgt_out"])
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0])
    grads = dict(fused.named_parameters())
    for name, param in plain.named_parameters():
        torch.testing.assert_close(grads[name].grad, param.grad, msg=name)
    assert plain.decoder[1].cross_attn.k.weight.grad.abs().sum() > 0


def test_fused_projections_give_the_plain_cache_and_decoder_step():
    plain, fused = models(fused_qkv=True, fused_cross_kv=True)
    src = batch()["src"]
    tokens = torch.tensor([BOS, 7, 9])
    with torch.no_grad():
        outputs = []
        for model in (plain, fused):
            cross_k, cross_v, mask = model.encode(src)
            self_k, self_v = model.empty_cache(len(src))
            logp, self_k, self_v = model.decode_step(tokens, cross_k, cross_v, mask, self_k, self_v)
            logp, self_k, self_v = model.decode_step(tokens, cross_k, cross_v, mask, self_k, self_v)
            outputs.append((cross_k, cross_v, logp, self_k, self_v))
    assert outputs[0][0].shape == (3, 3, 4, 7, 8)
    for expected, actual in zip(*outputs, strict=True):
        torch.testing.assert_close(actual, expected)


def test_decoding_in_eval_mode_multiplies_the_projections_apart(monkeypatch):
    """fused_qkv is a training lever: a decoding step (eval mode) would concatenate and cast the q/k/v
    weights for one token per sentence, which measured slower on a GPU."""
    import transformer.model as model_module

    _, fused = models(fused_qkv=True)
    fused.eval()
    called = []
    original = model_module.concatenated_linear
    monkeypatch.setattr(
        model_module, "concatenated_linear", lambda *a: called.append(len(a[1])) or original(*a)
    )
    src = batch()["src"]
    with torch.no_grad():
        cross_k, cross_v, mask = fused.encode(src)
        self_k, self_v = fused.empty_cache(len(src))
        fused.decode_step(torch.tensor([BOS, 7, 9]), cross_k, cross_v, mask, self_k, self_v)
    assert 3 not in called  # no q/k/v concatenation (the cross-attention k/v lever may still run)
    fused.train()
    TranslationLoss(fused, 0.1)(src, batch()["tgt_in"], batch()["tgt_out"])
    assert 3 in called


def test_fused_adam_takes_the_plain_steps():
    plain, fused = models()
    data = batch()
    # Key biases get gradients of rounding-noise size (softmax ignores them): an eps well above that
    # keeps Adam from amplifying the noise into different steps.
    opt_cfg = {"lr": 1e-3, "betas": [0.9, 0.98], "eps": 1e-3, "weight_decay": 0.0}
    for model, flag in ((plain, False), (fused, True)):
        optimizer = build_optimizer(model, {**opt_cfg, "fused": flag})
        assert optimizer.defaults["fused"] is flag
        for _ in range(3):
            loss, _ = TranslationLoss(model, 0.1)(data["src"], data["tgt_in"], data["tgt_out"])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    moved = fused.state_dict()
    for name, value in plain.state_dict().items():
        torch.testing.assert_close(moved[name], value, msg=name)
    assert not torch.equal(moved["embed.weight"], models()[0].state_dict()["embed.weight"])


@pytest.mark.parametrize(
    "value, mode",
    [(False, None), ("false", None), (None, None), (True, "default"), ("default", "default")]
    + [("max-autotune-no-cudagraphs", "max-autotune-no-cudagraphs")],
)
def test_compile_mode_reads_the_recipe_value(value, mode):
    assert compile_mode(value) == mode


@pytest.mark.parametrize("value", ["reduce-overhead", "max-autotune"])
def test_cuda_graph_modes_are_refused_in_one_line(value):
    with pytest.raises(UserError, match=f"train.compile {value} replays CUDA graphs"):
        compile_mode(value)


def test_an_unknown_compile_mode_is_a_one_line_error():
    with pytest.raises(UserError, match="train.compile must be false or one of default"):
        compile_mode("fastest")


def test_compiled_loss_is_one_graph_with_the_eager_values_on_two_shapes():
    """The model and loss trace without a graph break (fullgraph) and give eager's loss and gradients;
    a second batch shape makes one dynamic graph that a third shape reuses."""
    from torch._dynamo.testing import CompileCounterWithBackend

    _, eager = models(fused_qkv=True, fused_cross_kv=True)
    traced = copy.deepcopy(eager)
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(TranslationLoss(traced, 0.1), backend=counter, fullgraph=True)
    for shape in ((3, 7, 5), (4, 9, 6), (5, 6, 8)):
        data = batch(*shape)
        expected, expected_nll = TranslationLoss(eager, 0.1)(data["src"], data["tgt_in"], data["tgt_out"])
        loss, nll = compiled(data["src"], data["tgt_in"], data["tgt_out"])
        torch.testing.assert_close(loss, expected)
        torch.testing.assert_close(nll, expected_nll)
        expected.backward()
        loss.backward()
    grads = dict(traced.named_parameters())
    for name, param in eager.named_parameters():
        torch.testing.assert_close(grads[name].grad, param.grad, msg=name)
    assert counter.frame_count == 2


def test_train_step_returns_device_tensors_normalised_by_target_tokens():
    _, model = models(fused_qkv=True, fused_cross_kv=True)
    recipe = {"train": {"label_smoothing": 0.1, "compile": False}}
    opt_cfg = {"lr": 1e-3, "betas": [0.9, 0.98], "eps": 1e-9, "weight_decay": 0.0, "fused": False}
    before = copy.deepcopy(model)
    batches = [batch(), batch(4, 6, 6, seed=1)]
    tokens = sum(int((b["tgt_out"] != PAD).sum()) for b in batches)
    sums = [TranslationLoss(before, 0.1)(b["src"], b["tgt_in"], b["tgt_out"]) for b in batches]
    net = training_net(model, recipe, "cpu")
    optimizer = build_optimizer(model, opt_cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, inverse_sqrt(10))
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    loss, nll, counted = train_step(
        net, batches, optimizer, scheduler, scaler, device="cpu", amp="fp32", clip_norm=0
    )
    assert isinstance(loss, torch.Tensor) and loss.shape == () and counted == tokens
    torch.testing.assert_close(loss, (sums[0][0] + sums[1][0]).detach() / tokens)
    torch.testing.assert_close(nll, (sums[0][1] + sums[1][1]) / tokens)
    assert not torch.equal(model.embed.weight, before.embed.weight)


def test_pad_batch_right_pads_after_an_optional_prefix():
    import numpy as np
    from transformer.data import pad_batch

    rows = [np.array([5, 6, 7]), [8], np.array([9, 10], dtype=np.int32)]
    expected = torch.tensor([[5, 6, 7], [8, PAD, PAD], [9, 10, PAD]])
    assert torch.equal(pad_batch(rows), expected)
    with_bos = pad_batch(rows, prefix=BOS)
    assert with_bos.dtype == torch.int64
    assert torch.equal(with_bos, torch.cat([torch.full((3, 1), BOS), expected], dim=1))
    to_eight = pad_batch(rows, prefix=BOS, multiple=8)
    assert to_eight.shape == (3, 8)
    assert torch.equal(to_eight[:, :4], with_bos) and bool((to_eight[:, 4:] == PAD).all())


def test_training_batches_are_padded_to_the_length_multiple_and_keep_the_token_budget(small_data):
    from transformer.data import LENGTH_MULTIPLE, Pairs, collate, token_batches

    pairs = Pairs(small_data, "train")
    max_tokens = 256
    batches = token_batches(pairs, max_tokens, seed=0, epoch=1)
    assert sum(len(b) for b in batches) == len(pairs)
    for indices in batches:
        batch = collate(pairs, indices)
        for name, tensor in batch.items():
            assert tensor.shape[1] % LENGTH_MULTIPLE == 0, name
            assert tensor.numel() <= max_tokens or len(indices) == 1, (name, tensor.shape)
        longest = max(len(pairs.tgt[i]) for i in indices)
        assert batch["tgt_out"].shape[1] - longest < LENGTH_MULTIPLE
        assert int((batch["tgt_out"] != PAD).sum()) == sum(len(pairs.tgt[i]) for i in indices)


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="inductor compiles this for about a minute on a CPU; runs on a GPU"
)
@pytest.mark.parametrize("mode", ["default"])
def test_compiled_training_takes_the_eager_steps_on_a_gpu(mode):
    """Two updates of two micro-batches each (gradient accumulation) through the compiled step give
    eager's losses and weights."""
    _, eager = models(fused_qkv=True, fused_cross_kv=True)
    eager = eager.cuda()
    opt_cfg = {"lr": 1e-3, "betas": [0.9, 0.98], "eps": 1e-3, "weight_decay": 0.0, "fused": True}
    runs = []
    for compile_value in (False, mode):
        model = copy.deepcopy(eager)
        net = training_net(model, {"train": {"label_smoothing": 0.1, "compile": compile_value}}, "cuda")
        optimizer = build_optimizer(model, opt_cfg)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, inverse_sqrt(10))
        scaler = torch.amp.GradScaler("cuda", enabled=False)
        losses = []
        for update in range(2):
            batches = [batch(seed=2 * update), batch(seed=2 * update + 1)]
            loss, _, _ = train_step(
                net, batches, optimizer, scheduler, scaler, device="cuda", amp="fp32", clip_norm=0
            )
            losses.append(float(loss))
        runs.append((losses, model.state_dict()))
    (eager_losses, eager_weights), (losses, weights) = runs
    assert losses == pytest.approx(eager_losses, rel=1e-4)
    for name, value in eager_weights.items():
        torch.testing.assert_close(weights[name], value, rtol=1e-4, atol=1e-5, msg=name)
