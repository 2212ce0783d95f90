"""The SQuAD inference model: what evaluation scores, export writes (ONNX, TorchScript) and Triton serves.

    model = load_squad_model("results/squad/squad_model.pt")      # fp32, eval mode
    served = inference_model(model, amp="fp16", device="cuda")      # a copy, weights in fp16
    start_logits, end_logits = served(input_ids, token_type_ids, attention_mask)

The weights are cast to the precision outright (no autocast, no per-call weight casts); inputs are
int64 token ids, type ids and the attention mask, outputs float32 start/end logits [batch, sequence]
whatever the precision inside, so callers, exported files and Triton's config.pbtxt see one interface.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from zoo.errors import UserError
from zoo.torch import amp_dtype

from bert.model import BertConfig, BertForQuestionAnswering, bert_config


def inference_model(
    model: BertForQuestionAnswering, *, amp: str = "fp32", device=None
) -> BertForQuestionAnswering:
    """An eval-mode copy of ``model`` with its weights in ``amp`` (fp32, fp16 or bf16), on ``device``
    (default: where ``model`` is). ``model`` itself is left as it was."""
    dtype = amp_dtype(amp) or torch.float32
    served = copy.deepcopy(model).eval().to(dtype=dtype)
    return served.to(device) if device is not None else served


def load_squad_model(
    checkpoint: str | Path, model_name: str | None = None, vocab_size: int | None = None
) -> BertForQuestionAnswering:
    """A fine-tuned SQuAD model (fp32, eval mode) from our squad_model.pt (it carries its config), or
    from any layout bert.convert reads given ``model_name`` and ``vocab_size``."""
    from zoo.checkpoints import CheckpointError

    from bert import convert

    checkpoint = Path(checkpoint)
    if not checkpoint.exists():
        raise UserError(f"checkpoint {checkpoint} does not exist")
    config = None
    try:
        saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
        if isinstance(saved, dict) and isinstance(saved.get("config"), dict):
            config = BertConfig.from_dict(saved["config"])
    except Exception:
        saved = None  # not a torch file: convert.load_into says what it is
    if config is None:
        if not (model_name and vocab_size):
            raise UserError(f"{checkpoint} carries no config: give --model and --vocab")
        config = bert_config(model_name, vocab_size=vocab_size)
    model = BertForQuestionAnswering(config)
    try:
        convert.load_into(model, checkpoint, strict_heads=True)
    except CheckpointError as e:
        raise UserError(f"{checkpoint}: {e}") from None
    return model.eval()
