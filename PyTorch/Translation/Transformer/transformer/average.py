"""Average the weights of several checkpoints (e.g. the last five) into one model.pt.

    python -m transformer.average results/ckpt_a.pt results/ckpt_b.pt --output results/averaged.pt

Inputs are model.pt or checkpoint.pt files of the same model; the output is a model.pt (the first
input's settings with the mean of every weight) that evaluate and export read.
"""

from __future__ import annotations

import argparse
import pathlib

from zoo.cli import entry_point
from zoo.errors import UserError


def average(paths: list) -> dict:
    """A model.pt dict whose weights are the element-wise mean of ``paths``' weights."""
    from transformer.evaluate import load_model

    if len(paths) < 2:
        raise UserError("averaging needs at least two checkpoints")
    total, settings, vocab_size = None, None, None
    for path in paths:
        model, these = load_model(path)
        weights = model.state_dict()
        if total is None:
            total = {k: v.double().clone() for k, v in weights.items()}
            settings, vocab_size = these, model.cfg.vocab_size
            continue
        if weights.keys() != total.keys() or any(weights[k].shape != total[k].shape for k in total):
            raise UserError(f"{path} holds a different model than {paths[0]}")
        for key, value in weights.items():
            total[key] += value.double()
    mean = {k: (v / len(paths)).to(weights[k].dtype) for k, v in total.items()}
    return {"kind": "transformer", "model": mean, "vocab_size": vocab_size, **settings}


@entry_point
def main(argv=None) -> pathlib.Path:

    parser = argparse.ArgumentParser(
        prog="python -m transformer.average", description=__doc__.splitlines()[0]
    )
    parser.add_argument("checkpoints", nargs="+", help="model.pt / checkpoint.pt files")
    parser.add_argument("--output", required=True, help="the averaged model.pt")
    args = parser.parse_args(argv)

    import torch
    from zoo.io import atomic_write

    state = average(args.checkpoints)
    output = pathlib.Path(args.output)
    with atomic_write(output) as tmp:
        torch.save(state, tmp)
    print(f"averaged {len(args.checkpoints)} checkpoints into {output}")
    return output


if __name__ == "__main__":
    main()
