"""The MLPerf RNN-T: an LSTM encoder that stacks pairs of frames between its two LSTM stacks, an LSTM
prediction network over the labels so far, and a joint network over every (frame, label) pair.

    model = RNNT(recipe["model"], vocab_size=1023, in_features=240)
    logits, enc_lengths = model(feats, feat_lengths, targets)   # (B, T/2, U + 1, vocab + 1)
    tokens = greedy_decode(model, feats, feat_lengths)          # list of id lists, batched on the device

The blank is the last class (``vocab_size``); the prediction network starts from blank, whose
embedding is zero (the reference's start-of-sequence input).
"""

from __future__ import annotations

import torch
from torch import nn


def lstm(input_size: int, hidden: int, layers: int, dropout: float, cfg: dict) -> nn.LSTM:
    """nn.LSTM initialised as the reference: weights scaled by ``weights_init_scale``, the input-hidden
    forget-gate bias at ``forget_gate_bias`` and the hidden-hidden biases at 0."""
    module = nn.LSTM(
        input_size, hidden, num_layers=layers, dropout=dropout if layers > 1 else 0.0, batch_first=True
    )
    scale = float(cfg["weights_init_scale"])
    with torch.no_grad():
        for name, param in module.named_parameters():
            param.mul_(scale)
            if name.startswith("bias_hh"):
                param.zero_()
            elif name.startswith("bias_ih"):
                param[hidden : 2 * hidden] = float(cfg["forget_gate_bias"])
    return module


class StackTime(nn.Module):
    """(B, T, H) -> (B, ceil(T / factor), H x factor): ``factor`` consecutive frames side by side."""

    def __init__(self, factor: int):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, frames, hidden = x.shape
        x = nn.functional.pad(x, (0, 0, 0, (-frames) % self.factor))
        return x.reshape(batch, -1, hidden * self.factor), (lengths + self.factor - 1) // self.factor


class RNNT(nn.Module):
    """``cfg`` is the recipe's model: section (enc_n_hid, enc_pre_rnn_layers, enc_post_rnn_layers,
    enc_stack_time_factor, enc_dropout, pred_n_hid, pred_rnn_layers, pred_dropout, joint_n_hid,
    joint_dropout, forget_gate_bias, weights_init_scale)."""

    def __init__(self, cfg: dict, vocab_size: int, in_features: int):
        super().__init__()
        self.vocab_size, self.blank = vocab_size, vocab_size
        enc, pred = int(cfg["enc_n_hid"]), int(cfg["pred_n_hid"])
        factor = int(cfg["enc_stack_time_factor"])
        self.pre_rnn = lstm(in_features, enc, int(cfg["enc_pre_rnn_layers"]), float(cfg["enc_dropout"]), cfg)
        self.stack_time = StackTime(factor)
        self.post_rnn = lstm(
            enc * factor, enc, int(cfg["enc_post_rnn_layers"]), float(cfg["enc_dropout"]), cfg
        )
        self.embed = nn.Embedding(vocab_size, pred)
        self.pred_rnn = lstm(pred, pred, int(cfg["pred_rnn_layers"]), float(cfg["pred_dropout"]), cfg)
        self.pred_dropout = nn.Dropout(float(cfg["pred_dropout"]))
        self.enc_dropout = nn.Dropout(float(cfg["enc_dropout"]))
        joint = int(cfg["joint_n_hid"])
        self.joint_enc = nn.Linear(enc, joint)
        self.joint_pred = nn.Linear(pred, joint)
        self.joint_net = nn.Sequential(
            nn.ReLU(), nn.Dropout(float(cfg["joint_dropout"])), nn.Linear(joint, vocab_size + 1)
        )

    def encode(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features (B, F, T) -> encoder output (B, T', enc_n_hid) and its lengths."""
        x, _ = self.pre_rnn(self.enc_dropout(feats.transpose(1, 2)))
        x, lengths = self.stack_time(x, lengths)
        x, _ = self.post_rnn(x)
        return x, lengths

    def predict(self, tokens: torch.Tensor, state=None):
        """Label ids (B, U) (blank = start) -> prediction output (B, U, pred_n_hid) and LSTM state."""
        is_label = tokens != self.blank
        emb = self.embed(torch.where(is_label, tokens, 0)) * is_label[..., None].to(self.embed.weight.dtype)
        g, state = self.pred_rnn(emb, state)
        return self.pred_dropout(g), state

    def joint(self, f: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """Encoder (B, T, H) and prediction (B, U, H) outputs -> logits (B, T, U, vocab + 1)."""
        return self.joint_net(self.joint_enc(f)[:, :, None, :] + self.joint_pred(g)[:, None, :, :])

    def forward(self, feats, lengths, targets):
        """Joint logits over the lattice (B, T', U + 1, vocab + 1) and the encoder lengths."""
        f, lengths = self.encode(feats, lengths)
        start = torch.full_like(targets[:, :1], self.blank)
        g, _ = self.predict(torch.cat([start, targets], dim=1))
        return self.joint(f, g), lengths


def build_model(model_cfg: dict, vocab_size: int, in_features: int) -> RNNT:
    return RNNT(model_cfg, vocab_size, in_features)


@torch.no_grad()
def greedy_decode(
    model: RNNT, feats, lengths, max_symbols_per_step: int = 30, max_symbols: int = 300
) -> list:
    """Greedy transducer decoding, batched: at each encoder frame every utterance emits its most likely
    label until it picks blank (at most ``max_symbols_per_step`` a frame, ``max_symbols`` in all)."""
    f, f_lengths = model.encode(feats, lengths)
    batch, frames, _ = f.shape
    f = model.joint_enc(f)
    tokens = torch.full((batch, 1), model.blank, dtype=torch.long, device=f.device)
    g, state = model.predict(tokens)
    g = model.joint_pred(g[:, 0])
    emitted = torch.zeros(batch, dtype=torch.long, device=f.device)
    out = torch.full((batch, max_symbols), -1, dtype=torch.long, device=f.device)
    rows = torch.arange(batch, device=f.device)
    for t in range(frames):
        open_rows = (t < f_lengths) & (emitted < max_symbols)
        for _ in range(max_symbols_per_step):
            best = model.joint_net(f[:, t] + g).argmax(dim=-1)
            emit = open_rows & (best != model.blank)
            if not bool(emit.any()):
                break
            out[rows[emit], emitted[emit]] = best[emit]
            emitted = emitted + emit.long()
            g_new, state_new = model.predict(best[:, None], state)
            g = torch.where(emit[:, None], model.joint_pred(g_new[:, 0]), g)
            state = tuple(
                torch.where(emit[None, :, None], new, old) for new, old in zip(state_new, state, strict=True)
            )
            open_rows = emit & (emitted < max_symbols)
    return [row[:n].tolist() for row, n in zip(out.cpu(), emitted.cpu(), strict=True)]
