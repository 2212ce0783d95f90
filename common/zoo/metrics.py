"""The metrics vocabulary: one name and one unit for each thing a run logs, in every model and framework.

    from zoo.metrics import unit_of
    logger.log(step, {"loss": 2.31, "lr": 0.1, "throughput": 2350.0}, units={"throughput": "img/s"})
    logger.log(step, {"top1": 76.2, "top5": 93.0, "loss": 0.97}, phase="eval")

``metrics.jsonl`` has two phases: ``train`` (readings during training) and ``eval`` (a pass over the
validation set). A quality metric is logged in its published unit, the unit ``--target-<metric>`` and a
recipe's ``run.target`` use: top-1 in percent, MLM accuracy and COCO AP as fractions, BLEU on sacreBLEU's
0-100 scale. ``zoo.log.MetricsLogger`` refuses a phase or a name not listed here (a model that needs a new
one adds it here, with its unit, for every model); names starting with ``loss_`` are parts of a loss
(``loss_box``, ``loss_mask``). ``throughput`` is samples per second of all ranks, in the model's sample
unit (one of THROUGHPUT_UNITS, given by the caller). docs/ARCHITECTURE.md lists this table.
"""

from __future__ import annotations

PHASES = ("train", "eval")

# name -> (unit, what it is). Units: "%" percent, "fraction" 0..1, "BLEU" sacreBLEU 0..100, "" a plain number.
VOCABULARY = {
    # readings of any phase
    "loss": ("", "the objective (mean over the step's or the evaluation's samples)"),
    "lr": ("", "learning rate after the step"),
    "epoch": ("", "epochs finished (a counter)"),
    "throughput": ("samples/s", "samples per second of all ranks, in the model's sample unit"),
    "grad_norm": ("", "global gradient norm before clipping"),
    "loss_scale": ("", "fp16 grad scaler's scale"),
    "samples": ("", "samples an evaluation scored"),
    "seconds": ("s", "wall-clock seconds of the phase"),
    # quality metrics, in their published unit
    "top1": ("%", "top-1 accuracy (image classification)"),
    "top5": ("%", "top-5 accuracy"),
    "mlm_accuracy": ("fraction", "masked-LM accuracy (BERT pretraining, MLPerf's unit)"),
    "f1": ("%", "SQuAD F1"),
    "exact_match": ("%", "SQuAD exact match"),
    "map": ("fraction", "COCO box AP@[.5:.95] (detection)"),
    "mask_map": ("fraction", "COCO mask AP@[.5:.95] (instance segmentation)"),
    "bleu": ("BLEU", "sacreBLEU, 0-100 (translation)"),
    "auc": ("fraction", "ROC AUC (recommendation)"),
    "wer": ("fraction", "word error rate (speech recognition)"),
    "dice": ("fraction", "mean Dice score (segmentation)"),
    "log_perplexity": ("", "mean negative log-likelihood per token, nats (language modelling)"),
}
# The sample unit of ``throughput``, per model: images, sequences, tokens, click samples, utterances.
THROUGHPUT_UNITS = ("img/s", "seq/s", "tokens/s", "samples/s", "utt/s")
LOSS_PART_PREFIX = "loss_"


def unit_of(name: str) -> str:
    """The vocabulary's unit of ``name`` (a ``loss_`` part has the loss's); ValueError if not listed."""
    if name.startswith(LOSS_PART_PREFIX):
        return VOCABULARY["loss"][0]
    if name not in VOCABULARY:
        raise ValueError(
            f"metric {name!r} is not in zoo.metrics.VOCABULARY (known: {', '.join(VOCABULARY)}): "
            "use a listed name, or add it there with its unit"
        )
    return VOCABULARY[name][0]


def check_phase(phase: str) -> str:
    """``phase`` if it is one of PHASES; ValueError otherwise."""
    if phase not in PHASES:
        raise ValueError(f"phase {phase!r} is not one of {', '.join(PHASES)} (zoo.metrics.PHASES)")
    return phase


def units_for(metrics: dict, given: dict | None = None) -> dict:
    """{name: unit} for ``metrics``: the vocabulary's, checked against ``given``; ``throughput`` takes
    its unit from ``given`` (one of THROUGHPUT_UNITS). ValueError on a name or unit off the vocabulary."""
    given = dict(given or {})
    units = {}
    for name in metrics:
        unit = unit_of(name)
        stated = given.pop(name, None)
        if name == "throughput":
            if stated is None or stated.strip() not in THROUGHPUT_UNITS:
                raise ValueError(
                    f"throughput needs its unit, one of {', '.join(THROUGHPUT_UNITS)}, not {stated!r}"
                )
            unit = stated.strip()
        elif stated is not None and stated.strip() != unit:
            raise ValueError(
                f"metric {name!r} is in {unit!r} (zoo.metrics.VOCABULARY), not {stated.strip()!r}"
            )
        units[name] = unit
    if given:
        raise ValueError(f"units given for metrics not logged: {', '.join(given)}")
    return units


def quality_metrics() -> tuple[str, ...]:
    """The names whose unit is a published quality unit (what a run's target can name)."""
    return ("top1", "top5", "mlm_accuracy", "f1", "exact_match", "map", "mask_map", "bleu", "auc", "wer", "dice",
            "log_perplexity")  # fmt: skip


# Lower is better for these quality metrics (a target is reached at or below its value).
LOWER_IS_BETTER = frozenset({"wer", "log_perplexity"})


def reached(metric: str, value: float, target: float) -> bool:
    """Whether ``value`` of ``metric`` has reached ``target`` (at or above it; at or below it for
    the metrics of LOWER_IS_BETTER)."""
    return value <= target if metric in LOWER_IS_BETTER else value >= target
