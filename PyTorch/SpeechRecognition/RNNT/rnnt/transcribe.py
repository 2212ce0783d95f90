"""Transcribe WAV or FLAC files (16 kHz) with a trained RNN-T: greedy decoding, one line per file.

python -m rnnt.transcribe --checkpoint results/model.pt speech.flac [more.wav ...]
"""

from __future__ import annotations

import argparse

from zoo.cli import AMP_CHOICES, entry_point


@entry_point
def main(argv=None) -> list[str]:
    from zoo.cli import parse_args

    parser = argparse.ArgumentParser(
        prog="scripts/transcribe.sh",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("audio", nargs="+", help="16 kHz WAV or FLAC files")
    parser.add_argument("--checkpoint", required=True, help="model.pt written by train.py")
    parser.add_argument("--amp", choices=AMP_CHOICES, default="fp32", help="precision (default fp32)")
    parser.add_argument("--device", default=None, help="cpu, cuda (default: cuda where CUDA is)")
    args = parse_args(parser, argv)

    import torch

    from rnnt.data import read_audio
    from rnnt.inference import load_recognizer

    audio = [read_audio(path) for path in args.audio]
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    texts = load_recognizer(args.checkpoint, device, args.amp).transcribe(audio)
    for path, text in zip(args.audio, texts, strict=True):
        print(f"{path}\t{text}" if len(args.audio) > 1 else text)
    return texts


if __name__ == "__main__":
    main()
