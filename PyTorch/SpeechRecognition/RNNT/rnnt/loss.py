"""The RNN-Transducer loss (Graves 2012), in PyTorch: the log-space forward recursion over the
(frame, label) lattice, computed one anti-diagonal at a time so each step is one vectorised operation
over the batch and the frames; gradients by autograd.

    losses = rnnt_loss(logits, targets, logit_lengths, target_lengths, blank)   # (B,) -log p(y | x)

``logits`` (B, T, U + 1, V) are the joint network's scores (any float dtype; the loss runs in fp32),
``targets`` (B, U) label ids (padding is ignored), ``blank`` the blank id. Equal to
``torchaudio.functional.rnnt_loss(..., reduction="none")`` (checked in tests against a dynamic program
over all alignments and with gradcheck).
"""

from __future__ import annotations

import torch

# Log-probability of an impossible lattice cell: finite, so that logaddexp and its gradient stay finite.
IMPOSSIBLE = -1.0e30


def lattice_log_probs(logits, targets, blank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(blank log-probs (B, T, U + 1), label log-probs (B, T, U + 1)): emitting blank, or the next
    label ``targets[:, u]``, at lattice cell (t, u). The label term of the last column is impossible."""
    logits = logits if logits.dtype == torch.float64 else logits.float()
    batch, frames, columns, _ = logits.shape
    norm = torch.logsumexp(logits, dim=-1)
    blank_lp = logits[..., blank] - norm
    labels = targets[:, None, :, None].expand(batch, frames, columns - 1, 1).long()
    label_lp = logits[:, :, : columns - 1].gather(3, labels).squeeze(3) - norm[:, :, : columns - 1]
    label_lp = torch.cat([label_lp, label_lp.new_full((batch, frames, 1), IMPOSSIBLE)], dim=2)
    return blank_lp, label_lp


def skew(lattice: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T, U + 1) -> (B, T + U, T): row d holds the cells (t, d - t) of anti-diagonal d, and the mask of
    those inside the lattice."""
    batch, frames, columns = lattice.shape
    diagonals = frames + columns - 1
    t = torch.arange(frames, device=lattice.device)
    u = torch.arange(diagonals, device=lattice.device)[:, None] - t[None, :]  # (D, T)
    inside = (u >= 0) & (u < columns)
    index = u.clamp(0, columns - 1).T[None].expand(batch, frames, diagonals)  # (B, T, D)
    return lattice.gather(2, index).transpose(1, 2), inside


def rnnt_loss(logits, targets, logit_lengths, target_lengths, blank: int) -> torch.Tensor:
    """Per-utterance -log p(targets | inputs) (B,), fp32; see the module docstring."""
    blank_lp, label_lp = lattice_log_probs(logits, targets, blank)
    batch, frames, _ = blank_lp.shape
    blank_d, inside = skew(blank_lp)
    label_d, _ = skew(label_lp)
    alpha = blank_lp.new_full((batch, frames), IMPOSSIBLE)
    alpha[:, 0] = 0.0
    alphas = [alpha]
    shift_in = blank_lp.new_full((batch, 1), IMPOSSIBLE)
    for d in range(1, blank_d.shape[1]):
        # (t, u) is reached from (t - 1, u) by a blank, or from (t, u - 1) by label u - 1
        by_blank = torch.cat([shift_in, (alpha + blank_d[:, d - 1])[:, :-1]], dim=1)
        by_label = alpha + label_d[:, d - 1]
        alpha = torch.where(inside[d], torch.logaddexp(by_blank, by_label), IMPOSSIBLE)
        alphas.append(alpha)
    alphas = torch.stack(alphas, dim=1)  # (B, D, T)
    last_t = (logit_lengths.long() - 1).to(alphas.device)
    last_u = target_lengths.long().to(alphas.device)
    rows = torch.arange(batch, device=alphas.device)
    final = alphas[rows, last_t + last_u, last_t] + blank_lp[rows, last_t, last_u]
    return -final


def rnnt_loss_plain(logits, targets, logit_lengths, target_lengths, blank: int) -> torch.Tensor:
    """The same loss as a user would first write it: a full log-softmax over the lattice and the forward
    recursion cell by cell (frames, then labels), vectorised over the batch only. The benchmark's peer
    and the tests' second opinion."""
    logp = torch.log_softmax(logits if logits.dtype == torch.float64 else logits.float(), dim=-1)
    batch, frames, columns, _ = logp.shape
    rows = torch.arange(batch, device=logp.device)
    blank_lp = logp[..., blank]
    alpha = [[None] * columns for _ in range(frames)]
    for t in range(frames):
        for u in range(columns):
            if t == 0 and u == 0:
                alpha[t][u] = logp.new_zeros(batch)
                continue
            paths = []
            if t > 0:
                paths.append(alpha[t - 1][u] + blank_lp[:, t - 1, u])
            if u > 0:
                paths.append(alpha[t][u - 1] + logp[rows, t, u - 1, targets[:, u - 1]])
            alpha[t][u] = torch.logsumexp(torch.stack(paths), dim=0)
    table = torch.stack([torch.stack(row, dim=1) for row in alpha], dim=1)  # (B, T, U + 1)
    last_t, last_u = logit_lengths.long() - 1, target_lengths.long()
    return -(table[rows, last_t, last_u] + blank_lp[rows, last_t, last_u])
