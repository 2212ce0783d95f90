"""Segment volumes through Triton: the sliding window runs here, each batch of windows is answered by the
server (``unet3d_python`` or ``unet3d_onnx`` of export.py), and the mean Dice over a prepared folder's
held-out cases is printed (the score evaluate.py gives the same model).

    python -m unet3d.deploy --repository triton_repo --data-dir /data/kits19_npy      # starts tritonserver
    python -m unet3d.deploy --url 127.0.0.1:8000 --model unet3d_onnx --data-dir ...   # a running server
    python -m unet3d.deploy --repository triton_repo --data-dir ... --concurrency 1,4 --requests 32  # load

Load mode sends single windows cut from the held-out volumes (their centres and corners) at each
concurrency level and prints throughput and latency (zoo.triton.load).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

import numpy as np
from zoo.cli import entry_point, parse_args
from zoo.errors import UserError
from zoo.triton.client import TritonClient, serve_or_connect
from zoo.triton.load import add_load_args, run_load_mode
from zoo.triton.repository import parse_pbtxt

from unet3d.export import INPUT_NAME, OUTPUT_NAME

if TYPE_CHECKING:
    import torch


def served_settings(repository, model: str) -> tuple[tuple, float]:
    """(window shape, overlap) recorded in the model's config.pbtxt by export.py."""
    import pathlib

    path = pathlib.Path(repository) / model / "config.pbtxt"
    if not path.is_file():
        raise UserError(f"{path} not found: export the model with scripts/export_triton.sh")
    config = parse_pbtxt(path.read_text())
    parameters = {key: value.string_value for key, value in config.parameters.items()}
    return tuple(json.loads(parameters["patch"])), float(parameters["overlap"])


def served_dice(url: str, model: str, cases: dict, patch, overlap: float, protocol: str = "http") -> dict:
    """Mean Dice of ``cases`` segmented by the served model (windows batched by the sliding window)."""
    import torch

    from unet3d.inference import segment_volume
    from unet3d.losses import dice_scores

    client = TritonClient(url, protocol=protocol)

    def ask(windows: torch.Tensor) -> torch.Tensor:
        answer = client.infer(model, {INPUT_NAME: windows.cpu().numpy().astype(np.float32)}, [OUTPUT_NAME])
        return torch.from_numpy(np.array(answer[OUTPUT_NAME]))

    per_case = {}
    for name in sorted(cases):
        image, label = cases[name]
        volume = torch.from_numpy(np.array(image, dtype=np.float32)[None])
        logits = segment_volume(ask, volume, patch, "fp32", overlap=overlap, window_batch=2)
        per_case[name] = dice_scores(logits, torch.from_numpy(np.array(label)[None]))[0].tolist()
    scores = np.array(list(per_case.values()))
    return {"dice": float(scores.mean()), "dice_kidney": float(scores[:, 0].mean()),
            "dice_tumour": float(scores[:, 1].mean()), "cases": per_case}  # fmt: skip


def load_windows(cases: dict, patch) -> list[dict]:
    """One-window requests of the held-out volumes: the centre and the first corner of each."""
    from unet3d.inference import PADDING_VALUE

    requests = []
    for name in sorted(cases):
        image = np.asarray(cases[name][0], dtype=np.float32)
        grow = [(0, max(0, p - s)) for p, s in zip(patch, image.shape[1:], strict=True)]
        image = np.pad(image, [(0, 0), *grow], constant_values=PADDING_VALUE)
        for corner in ([0, 0, 0], [(s - p) // 2 for s, p in zip(image.shape[1:], patch, strict=True)]):
            window = image[(slice(None), *(slice(c, c + p) for c, p in zip(corner, patch, strict=True)))]
            requests.append({INPUT_NAME: np.ascontiguousarray(window[None])})
    return requests


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m unet3d.deploy", description=__doc__.split("\n")[0])
    p.add_argument("--repository", default="triton_repo", help="the model repository of export_triton.sh")
    p.add_argument(
        "--model", default="unet3d_python", help="unet3d_python (CPU, any tritonserver) or unet3d_onnx"
    )
    p.add_argument(
        "--url", default=None, help="host:port of a running server (default: start tritonserver here)"
    )
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument(
        "--data-dir", required=True, help="a prepared KiTS19 folder: its held-out cases are segmented"
    )
    p.add_argument("--server-log", default=None, help="keep tritonserver's log in this file")
    add_load_args(p)
    args = parse_args(p, argv)

    from unet3d.data import load_cases

    patch, overlap = served_settings(args.repository, args.model)
    cases = load_cases(args.data_dir)["val"]
    with serve_or_connect(
        args.repository, args.model, url=args.url, protocol=args.protocol, log_path=args.server_log
    ) as url:
        if args.concurrency:
            run_load_mode(url, args.model, load_windows(cases, patch), args, outputs=[OUTPUT_NAME])
            return
        result = served_dice(url, args.model, cases, patch, overlap, args.protocol)
    for name, (kidney, tumour) in result["cases"].items():
        print(f"{name}: Dice kidney {kidney:.4f} tumour {tumour:.4f}")
    print(f"served mean Dice {result['dice']:.4f} over {len(result['cases'])} volumes ({args.model})")


if __name__ == "__main__":
    main()
