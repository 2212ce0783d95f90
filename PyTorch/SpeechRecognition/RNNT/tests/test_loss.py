"""The transducer loss against a dynamic program over all alignments, autograd's gradcheck and the
plain cell-by-cell recursion."""

import itertools

import numpy as np
import pytest
import torch
from rnnt.loss import rnnt_loss, rnnt_loss_plain


def alignments_loss(logp: np.ndarray, labels: list, frames: int, blank: int) -> float:
    """-log of the summed probability of every alignment: each path of ``frames`` blanks and the labels
    in order, where a frame's last emission is its blank (enumerated, so only for tiny sizes)."""
    total = -np.inf
    steps = frames + len(labels)
    for label_slots in itertools.combinations(range(steps - 1), len(labels)):
        t, u, score = 0, 0, 0.0
        for slot in range(steps):
            if slot in label_slots:
                score += logp[t, u, labels[u]]
                u += 1
            else:
                score += logp[t, u, blank]
                t += 1
        if t == frames and u == len(labels):
            total = np.logaddexp(total, score)
    return -total


@pytest.fixture
def lattice():
    generator = torch.Generator().manual_seed(0)
    batch, frames, labels, vocab = 3, 5, 3, 5
    logits = torch.randn(batch, frames, labels + 1, vocab, dtype=torch.float64, generator=generator)
    targets = torch.randint(0, vocab - 1, (batch, labels), generator=generator)
    return logits, targets, torch.tensor([5, 3, 4]), torch.tensor([3, 1, 0]), vocab - 1


def test_equals_the_sum_over_all_alignments(lattice):
    logits, targets, frames, labels, blank = lattice
    losses = rnnt_loss(logits, targets, frames, labels, blank)
    logp = torch.log_softmax(logits, -1).numpy()
    for b in range(len(losses)):
        expected = alignments_loss(logp[b], targets[b, : labels[b]].tolist(), int(frames[b]), blank)
        assert float(losses[b]) == pytest.approx(expected, rel=1e-9)


def test_gradients_pass_gradcheck(lattice):
    logits, targets, frames, labels, blank = lattice
    logits = logits.clone().requires_grad_(True)
    check = torch.autograd.gradcheck  # fast mode: one random projection of the Jacobian
    assert check(lambda x: rnnt_loss(x, targets, frames, labels, blank), (logits,), fast_mode=True)


def test_the_plain_recursion_agrees_in_value_and_gradient(lattice):
    logits, targets, frames, labels, blank = lattice
    ours = logits.clone().requires_grad_(True)
    plain = logits.clone().requires_grad_(True)
    rnnt_loss(ours, targets, frames, labels, blank).sum().backward()
    rnnt_loss_plain(plain, targets, frames, labels, blank).sum().backward()
    assert torch.allclose(ours.grad, plain.grad, atol=1e-10)


def test_fp32_and_bf16_logits_give_fp32_losses(lattice):
    logits, targets, frames, labels, blank = lattice
    exact = rnnt_loss(logits, targets, frames, labels, blank)
    for dtype, tolerance in ((torch.float32, 1e-4), (torch.bfloat16, 0.1)):
        losses = rnnt_loss(logits.to(dtype), targets, frames, labels, blank)
        assert losses.dtype == torch.float32
        assert torch.allclose(losses.double(), exact, rtol=tolerance)
