"""Log-mel features: the filterbank against librosa's formula written out plainly, the exportable
spectrum against torch.stft, frame stacking, SpecAugment, the model's shapes and greedy decoding."""

import math

import numpy as np
import pytest
import torch
import yaml
from rnnt.features import LogMelFeatures, mel_filterbank, spec_augment, stack_frames
from rnnt_testutil import MODEL_DIR

FEATURES = yaml.safe_load((MODEL_DIR / "configs" / "rnnt_1gpu.yaml").read_text())["features"]


def slaney_mel(freq: float) -> float:
    return freq / (200 / 3) if freq < 1000 else 15 + math.log(freq / 1000) / (math.log(6.4) / 27)


def slaney_hz(mel: float) -> float:
    return mel * (200 / 3) if mel < 15 else 1000 * math.exp((mel - 15) * math.log(6.4) / 27)


def test_filterbank_is_librosas_slaney_filterbank():
    """librosa.filters.mel(sr=16000, n_fft=512, n_mels=80) (htk=False, norm="slaney"), one filter at a time."""
    bank = mel_filterbank(16000, 512, 80)
    edges = [slaney_hz(slaney_mel(0) + i * (slaney_mel(8000) - slaney_mel(0)) / 81) for i in range(82)]
    bins = [i * 16000 / 512 for i in range(257)]
    for m in range(80):
        low, centre, high = edges[m], edges[m + 1], edges[m + 2]
        for k, freq in enumerate(bins):
            rise, fall = (freq - low) / (centre - low), (high - freq) / (high - centre)
            expected = max(0.0, min(rise, fall)) * 2 / (high - low)
            assert bank[m, k] == pytest.approx(expected, rel=1e-5, abs=1e-9), (m, k)


def test_exportable_spectrum_equals_torch_stft():
    audio = torch.randn(2, 16000, generator=torch.Generator().manual_seed(0))
    lengths = torch.tensor([16000, 12345])
    stft, conv = LogMelFeatures(FEATURES).eval(), LogMelFeatures(FEATURES, exportable=True).eval()
    assert torch.allclose(stft.power_spectrum(audio), conv.power_spectrum(audio), rtol=1e-3, atol=1e-3)
    feats, frames = stft(audio, lengths)
    assert feats.shape == (2, 240, math.ceil(101 / 3)) and frames.tolist() == [34, 26]
    assert torch.allclose(feats, conv(audio, lengths)[0], atol=1e-3)


def test_each_band_is_normalised_over_the_utterance_frames_only():
    audio = torch.randn(1, 8000, generator=torch.Generator().manual_seed(1))
    features = LogMelFeatures(FEATURES).eval()
    normed, frames = features.normalized_logmel(
        torch.cat([audio, torch.zeros(1, 4000)], 1), torch.tensor([8000])
    )
    valid = normed[0, :, : int(frames)]
    assert torch.allclose(valid.mean(-1), torch.zeros(80), atol=1e-4)
    assert torch.allclose(valid.std(-1), torch.ones(80), atol=1e-3)
    assert torch.all(normed[0, :, int(frames) :] == 0)


def test_stacking_puts_three_frames_side_by_side():
    feats = torch.arange(2 * 7, dtype=torch.float32).reshape(1, 2, 7)
    stacked = stack_frames(feats, 3)
    assert stacked.shape == (1, 6, 3)
    assert stacked[0, :, 0].tolist() == [0, 7, 1, 8, 2, 9]
    assert stacked[0, :, 2].tolist() == [6, 13, 0, 0, 0, 0]


def test_spec_augment_masks_bands_and_spans_within_the_limits():
    feats = torch.ones(2, 80, 100)
    augment = {"freq_masks": 2, "min_freq": 5, "max_freq": 5, "time_masks": 3, "min_time": 4, "max_time": 4}
    masked = spec_augment(feats, torch.tensor([100, 50]), augment, torch.Generator().manual_seed(0))
    for row in range(2):
        bands = (masked[row].sum(1) == 0).sum()
        assert 5 <= bands <= 10
    assert (masked[0].sum(0) == 0).sum() <= 12


def test_greedy_decoding_is_batch_independent():
    from rnnt.model import build_model, greedy_decode

    cfg = yaml.safe_load((MODEL_DIR / "configs" / "spoken_cpu.yaml").read_text())["model"]
    full = yaml.safe_load((MODEL_DIR / "configs" / "rnnt_1gpu.yaml").read_text())["model"]
    torch.manual_seed(0)
    model = build_model({**full, **cfg}, 10, 240).eval()
    feats = torch.randn(3, 240, 20)
    lengths = torch.tensor([20, 13, 7])
    logits, enc_lengths = model(feats, lengths, torch.zeros(3, 4, dtype=torch.long))
    assert logits.shape == (3, 10, 5, 11) and enc_lengths.tolist() == [10, 7, 4]
    together = greedy_decode(model, feats, lengths, max_symbols_per_step=3)
    alone = [
        greedy_decode(model, feats[i : i + 1, :, : int(lengths[i])], lengths[i : i + 1], 3)[0]
        for i in range(3)
    ]
    assert together == alone
    assert all(len(ids) <= 3 * int(n) for ids, n in zip(together, enc_lengths, strict=True))
    assert np.all([0 <= i < 10 for ids in together for i in ids])
