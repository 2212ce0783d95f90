"""The inference model: model.pt (train.py's EMA weights with the SentencePiece model and the feature
settings) loaded into the network, its feature extractor and its tokenizer.

    recognizer = load_recognizer("results/model.pt", device)
    texts = recognizer.transcribe([samples, ...])      # 16 kHz float arrays -> strings (greedy)
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from zoo.errors import UserError

from rnnt.data import collate, tokenizer_from_bytes
from rnnt.features import LogMelFeatures
from rnnt.model import RNNT, build_model, greedy_decode

TRAINING_KIND = "rnnt-training"  # rnnt.train's checkpoints (rnnt.train.TRAINING_KIND)
MODEL_FIELDS = ("kind", "model", "model_recipe", "features", "eval", "vocab_size", "tokenizer")


@dataclasses.dataclass
class Recognizer:
    model: RNNT
    features: LogMelFeatures
    tokenizer: object
    settings: dict  # model.pt's fields other than the weights
    device: torch.device
    amp: str = "fp32"

    @torch.no_grad()
    def transcribe_ids(self, audio: list) -> list[list[int]]:
        from zoo.torch import autocast

        samples, lengths, _, _ = collate((torch.as_tensor(a, dtype=torch.float32), []) for a in audio)
        eval_cfg = self.settings["eval"]
        with autocast(self.device, self.amp):
            feats, feat_lengths = self.features(samples.to(self.device), lengths.to(self.device))
            return greedy_decode(
                self.model,
                feats,
                feat_lengths,
                int(eval_cfg["max_symbols_per_step"]),
                int(eval_cfg["max_symbols"]),
            )

    def transcribe(self, audio: list) -> list[str]:
        return [self.tokenizer.decode(ids) for ids in self.transcribe_ids(audio)]


def read_model_file(path) -> dict:
    """model.pt's fields; a UserError naming the file when it is not an RNN-T model file."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        raise UserError(f"--checkpoint {path}: no such file") from None
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same to a user
        reason = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise UserError(f"--checkpoint {path} is not an RNN-T model.pt (cannot be read: {reason})") from None
    if isinstance(state, dict) and state.get("kind") == TRAINING_KIND and "tokenizer" in state:
        recipe = state["recipe"]  # a training checkpoint (best.pt, checkpoint.pt): its recipe rebuilds it
        state = {
            "kind": "rnnt", "model": state["model"], "ema": state["ema"], "model_recipe": recipe["model"],
            "features": recipe["features"], "eval": recipe["eval"], "vocab_size": state["vocab_size"],
            "tokenizer": state["tokenizer"],
        }  # fmt: skip
    if not isinstance(state, dict) or state.get("kind") != "rnnt" or not set(MODEL_FIELDS) <= set(state):
        raise UserError(
            f"--checkpoint {path} is not an RNN-T model.pt (train.py writes RESULTS_DIR/model.pt)"
        )
    return state


def load_recognizer(path, device="cpu", amp: str = "fp32") -> Recognizer:
    state = read_model_file(path)
    features = LogMelFeatures(state["features"]).eval()
    model = build_model(state["model_recipe"], int(state["vocab_size"]), features.out_features)
    try:
        model.load_state_dict(state["model"])
        if state.get("ema") is not None:  # a training checkpoint: evaluation scored the weights' average
            with torch.no_grad():
                for param, value in zip(model.parameters(), state["ema"], strict=True):
                    param.copy_(value)
    except (RuntimeError, ValueError) as e:
        raise UserError(
            f"--checkpoint {path} does not fit its own recipe: {str(e).strip().splitlines()[-1][:160]}"
        ) from None
    device = torch.device(device)
    settings = {key: value for key, value in state.items() if key not in ("model", "ema")}
    return Recognizer(
        model.to(device).eval(),
        features.to(device),
        tokenizer_from_bytes(state["tokenizer"]),
        settings,
        device,
        amp,
    )


# The three graphs of the ONNX export (rnnt.export): the encoder, one prediction step, the joint network.
class Encoder(nn.Module):
    def __init__(self, model: RNNT, features: LogMelFeatures):
        super().__init__()
        self.model, self.features = model, features

    def forward(self, audio, audio_lengths):
        feats, lengths = self.features(audio, audio_lengths)
        enc, enc_lengths = self.model.encode(feats, lengths)
        return self.model.joint_enc(enc), enc_lengths


class PredictionStep(nn.Module):
    def __init__(self, model: RNNT):
        super().__init__()
        self.model = model

    def forward(self, tokens, h, c):
        g, (h, c) = self.model.predict(tokens, (h, c))
        return self.model.joint_pred(g[:, 0]), h, c


class Joint(nn.Module):
    def __init__(self, model: RNNT):
        super().__init__()
        self.model = model

    def forward(self, f, g):
        return self.model.joint_net(f + g)
