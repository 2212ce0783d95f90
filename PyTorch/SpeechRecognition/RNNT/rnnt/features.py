"""Log-mel features on the device, as the MLPerf RNN-T reference computes them, and the augmentations
of its training (speed perturbation happens in the data set, rnnt.data).

    features = LogMelFeatures(recipe["features"]).to(device)
    feats, lengths = features(audio, audio_lengths)      # (B, 240, T/3) after stacking 3 frames
    feats = spec_augment(feats, lengths, recipe["augment"], generator)   # training only

Pre-emphasis 0.97, 20 ms Hann windows every 10 ms, a 512-point power spectrum, 80 mel bands (the
librosa/Slaney filterbank), natural log, per-utterance mean/std normalisation of each band over its
frames, then 3 frames stacked into one every 3 frames (240 features, a third of the frame rate).
The spectrum comes from ``torch.stft``, or, with ``exportable=True``, from a convolution with the
same windowed Fourier basis (what ONNX export traces); the two agree to float precision.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn


def hz_to_mel(freq):
    """Slaney's mel scale (librosa's default, htk=False): linear to 1 kHz, logarithmic above."""
    freq = np.asarray(freq, dtype=np.float64)
    mel = freq / (200.0 / 3)
    log_part = 15.0 + np.log(np.maximum(freq, 1e-10) / 1000.0) / (math.log(6.4) / 27.0)
    return np.where(freq >= 1000.0, log_part, mel)


def mel_to_hz(mel):
    mel = np.asarray(mel, dtype=np.float64)
    freq = mel * (200.0 / 3)
    log_part = 1000.0 * np.exp((math.log(6.4) / 27.0) * (mel - 15.0))
    return np.where(mel >= 15.0, log_part, freq)


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax=None) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1) triangular filters, area-normalised (librosa.filters.mel, norm="slaney")."""
    fmax = sample_rate / 2 if fmax is None else fmax
    fft_freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    mel_freqs = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    widths = np.diff(mel_freqs)
    ramps = mel_freqs[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    return (weights * (2.0 / (mel_freqs[2:] - mel_freqs[:-2]))[:, None]).astype(np.float32)


class LogMelFeatures(nn.Module):
    """Audio (B, samples) float and lengths (B,) -> stacked log-mel features (B, n_mels x stack, frames)
    and frame lengths. ``features`` is the recipe's features: section."""

    def __init__(self, features: dict, exportable: bool = False):
        super().__init__()
        self.sample_rate = int(features["sample_rate"])
        self.n_fft = int(features["n_fft"])
        self.hop = int(round(self.sample_rate * float(features["window_stride"])))
        self.win_length = int(round(self.sample_rate * float(features["window_size"])))
        self.preemph = float(features["preemph"])
        self.dither = float(features["dither"])
        self.stack = int(features["frame_stacking"])
        self.exportable = exportable
        window = torch.hann_window(self.win_length, periodic=False)
        self.register_buffer("window", window, persistent=False)
        fbank = mel_filterbank(self.sample_rate, self.n_fft, int(features["n_mels"]))
        self.register_buffer("fbank", torch.from_numpy(fbank), persistent=False)
        # the window centred in n_fft samples, times the DFT's cosines and sines: the exportable spectrum
        left = (self.n_fft - self.win_length) // 2
        padded = torch.zeros(self.n_fft, dtype=torch.float64)
        padded[left : left + self.win_length] = window.double()
        bins = torch.arange(self.n_fft // 2 + 1, dtype=torch.float64)[:, None]
        angle = 2 * math.pi * bins * torch.arange(self.n_fft, dtype=torch.float64)[None, :] / self.n_fft
        basis = torch.cat([torch.cos(angle) * padded, -torch.sin(angle) * padded])
        self.register_buffer("dft_basis", basis.float()[:, None, :], persistent=False)

    @property
    def out_features(self) -> int:
        return self.fbank.shape[0] * self.stack

    def frame_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Valid frames of each utterance after stacking (before: 1 + samples // hop)."""
        frames = lengths // self.hop + 1
        return (frames + self.stack - 1) // self.stack

    def power_spectrum(self, audio: torch.Tensor) -> torch.Tensor:
        """(B, n_fft // 2 + 1, 1 + samples // hop) |STFT|^2 with reflect padding (torch.stft center=True)."""
        if not self.exportable:
            spec = torch.stft(
                audio,
                self.n_fft,
                hop_length=self.hop,
                win_length=self.win_length,
                window=self.window.to(audio.dtype),
                center=True,
                pad_mode="reflect",
                return_complex=True,
            )
            return spec.real.square() + spec.imag.square()
        padded = nn.functional.pad(audio[:, None, :], (self.n_fft // 2, self.n_fft // 2), mode="reflect")
        both = nn.functional.conv1d(padded, self.dft_basis, stride=self.hop)
        real, imag = both.chunk(2, dim=1)
        return real.square() + imag.square()

    def normalized_logmel(
        self, audio: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, n_mels, frames) log-mels, each band normalised over the utterance's frames (0 beyond), and
        the frames of each utterance (1 + samples // hop)."""
        audio = audio.float()
        if self.training and self.dither > 0:
            audio = audio + self.dither * torch.randn_like(audio)
        audio = torch.cat([audio[:, :1], audio[:, 1:] - self.preemph * audio[:, :-1]], dim=1)
        logmel = torch.log(torch.matmul(self.fbank, self.power_spectrum(audio)) + 1e-20)
        frames = lengths // self.hop + 1
        valid = torch.arange(logmel.shape[-1], device=logmel.device)[None, :] < frames[:, None]
        valid = valid[:, None, :].to(logmel.dtype)
        count = frames[:, None, None].to(logmel.dtype)
        mean = (logmel * valid).sum(-1, keepdim=True) / count
        var = ((logmel - mean).square() * valid).sum(-1, keepdim=True) / (count - 1).clamp(min=1)
        return (logmel - mean) / (var.sqrt() + 1e-5) * valid, frames

    def forward(
        self, audio: torch.Tensor, lengths: torch.Tensor, augment: dict | None = None, generator=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Stacked features and their lengths; ``augment`` (the recipe's augment: section) applies
        SpecAugment before stacking, as in training."""
        normed, frames = self.normalized_logmel(audio, lengths)
        if augment is not None:
            normed = spec_augment(normed, frames, augment, generator)
        return stack_frames(normed, self.stack), self.frame_lengths(lengths)


def stack_frames(feats: torch.Tensor, stack: int) -> torch.Tensor:
    """(B, F, T) -> (B, F x stack, ceil(T / stack)): frames t..t+stack-1 side by side, every stack-th t."""
    batch, bands, frames = feats.shape
    pad = (-frames) % stack
    feats = nn.functional.pad(feats, (0, pad))
    feats = feats.reshape(batch, bands, -1, stack).permute(0, 3, 1, 2)
    return feats.reshape(batch, bands * stack, -1)


def spec_augment(feats: torch.Tensor, lengths: torch.Tensor, augment: dict, generator=None) -> torch.Tensor:
    """SpecAugment on normalised log-mels (B, F, T) before stacking: ``freq_masks`` bands of 0..``max_freq``
    mel bins and ``time_masks`` spans of 0..``max_time`` frames (a fraction < 1: of the utterance's
    frames) set to 0. Drawn on the CPU from ``generator`` (the run's seeded stream), applied as one mask."""
    if not augment["freq_masks"] and not augment["time_masks"]:
        return feats
    batch, bands, frames = feats.shape
    keep = torch.ones(batch, bands, frames, dtype=torch.bool)
    for row in range(batch):
        for _ in range(int(augment["freq_masks"])):
            width = int(
                torch.randint(
                    int(augment["min_freq"]), int(augment["max_freq"]) + 1, (1,), generator=generator
                )
            )
            start = int(torch.randint(0, max(1, bands - width + 1), (1,), generator=generator))
            keep[row, start : start + width, :] = False
        valid = int(lengths[row])
        max_time = float(augment["max_time"])
        longest = int(max_time * valid) if max_time < 1 else int(max_time)
        for _ in range(int(augment["time_masks"])):
            width = int(
                torch.randint(
                    int(augment["min_time"]),
                    max(int(augment["min_time"]), longest) + 1,
                    (1,),
                    generator=generator,
                )
            )
            start = int(torch.randint(0, max(1, valid - width + 1), (1,), generator=generator))
            keep[row, :, start : start + width] = False
    return feats * keep.to(feats.device)
