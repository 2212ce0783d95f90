"""A small real-speech set spoken by espeak-ng (the Debian package), in LibriSpeech's layout: what the
CPU recipe, the tests and ``--synthetic`` train on.

    make_spoken(data_dir)     # LibriSpeech/train (48 digit sequences, two speaking rates), LibriSpeech/dev

Dev holds other digit sequences at a third speaking rate: speech the model has not heard.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import tempfile

import numpy as np
from zoo.errors import UserError

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def number_sentences(count: int, seed: int, words: int = 4) -> list[str]:
    """``count`` sequences of ``words`` digit words in random order: a prediction network cannot guess
    the next word, so the model has to hear it."""
    rng = np.random.default_rng(seed)
    return [" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), words)) for _ in range(count)]


# split -> (sentences, speaking rates in words per minute); dev's sentences and rate are new to training
SPLITS = {
    "train": (number_sentences(48, seed=1, words=3), (140, 180)),
    "dev": (number_sentences(8, seed=2, words=3), (160,)),
}
SPEAKER, CHAPTER = 1, 1
NOISE_FLOOR = 1e-3


def espeak_binary() -> str:
    found = shutil.which("espeak-ng")
    if found is None:
        raise UserError(
            "espeak-ng is not installed (apt-get install espeak-ng): it speaks the --synthetic set"
        )
    return found


def speak(text: str, rate: int) -> np.ndarray:
    """``text`` spoken by espeak-ng (en-us) at ``rate`` words per minute, as 16 kHz float32 samples."""
    import soundfile
    from scipy.signal import resample_poly

    with tempfile.TemporaryDirectory() as tmp:
        wav = pathlib.Path(tmp) / "speech.wav"
        subprocess.run(
            [espeak_binary(), "-v", "en-us", "-s", str(rate), "-w", str(wav), text],
            check=True,
            capture_output=True,
        )
        samples, sample_rate = soundfile.read(str(wav), dtype="float32")
    if sample_rate != 16000:
        divisor = np.gcd(16000, sample_rate)
        samples = resample_poly(samples, 16000 // divisor, sample_rate // divisor)
    # espeak-ng's pauses are digital silence, whose log-mels (log of 0) would swamp the normalisation:
    # a recording's noise floor, 60 dB down
    noise = np.random.default_rng(len(text) * 1000 + rate).standard_normal(len(samples))
    return (samples + NOISE_FLOOR * noise).astype(np.float32)


def make_spoken(data_dir, splits=None) -> pathlib.Path:
    """Write LibriSpeech/<split>/1/1/1-1-NNNN.flac and 1-1.trans.txt for each split of ``splits``
    (default SPLITS)."""
    import soundfile

    root = pathlib.Path(data_dir) / "LibriSpeech"
    for split, (sentences, rates) in (splits or SPLITS).items():
        folder = root / split / str(SPEAKER) / str(CHAPTER)
        folder.mkdir(parents=True, exist_ok=True)
        lines = []
        # the sentences take the rates in turn
        for number, text in enumerate(sentences):
            rate = rates[number % len(rates)]
            name = f"{SPEAKER}-{CHAPTER}-{number:04d}"
            soundfile.write(str(folder / f"{name}.flac"), speak(text, rate), 16000, format="FLAC")
            lines.append(f"{name} {text.upper()}")
        (folder / f"{SPEAKER}-{CHAPTER}.trans.txt").write_text("\n".join(lines) + "\n")
    return root
