"""One metrics vocabulary (zoo.metrics): names, units and phases."""

from __future__ import annotations

import pytest
from zoo.metrics import VOCABULARY, check_phase, reached, unit_of, units_for


def test_units_come_from_the_vocabulary():
    assert units_for({"top1": 76.0, "loss": 1.0}) == {"top1": "%", "loss": ""}
    assert units_for({"throughput": 10.0}, {"throughput": "img/s"}) == {"throughput": "img/s"}
    assert unit_of("loss_box") == "" and unit_of("map") == "fraction" and unit_of("bleu") == "BLEU"


@pytest.mark.parametrize(
    "metrics, units, message",
    [
        ({"accuracy": 0.5}, None, "not in zoo.metrics.VOCABULARY"),
        ({"top1": 0.76}, {"top1": "fraction"}, "is in '%'"),
        ({"throughput": 10.0}, None, "throughput needs its unit"),
        ({"throughput": 10.0}, {"throughput": "frames/s"}, "throughput needs its unit"),
        ({"loss": 1.0}, {"top1": "%"}, "units given for metrics not logged: top1"),
    ],
)
def test_names_and_units_off_the_vocabulary_are_refused(metrics, units, message):
    with pytest.raises(ValueError, match=message):
        units_for(metrics, units)


def test_phases_and_direction():
    assert check_phase("eval") == "eval"
    with pytest.raises(ValueError, match="phase 'val' is not one of train, eval"):
        check_phase("val")
    assert reached("top1", 76.0, 75.9) and not reached("top1", 75.0, 75.9)
    assert reached("wer", 0.05, 0.058) and not reached("wer", 0.06, 0.058)
    assert all(isinstance(unit, str) for unit, _ in VOCABULARY.values())
