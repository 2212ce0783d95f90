"""zoo.mx's training checkpoint: Gluon parameters, trainer states and the run's position, written atomically.

MXNet is in the MXNet venv only (`.venv/mxnet/bin/python -m pytest common/tests/test_mx_checkpoint.py`); the
MXNet ResNet-50's suite exercises the same functions through its train.py.
"""

from __future__ import annotations

import numpy as np
import pytest

mx = pytest.importorskip("mxnet", reason="MXNet is installed in the MXNet venv only")

from zoo.checkpoint_folder import CHECKPOINT_NAME  # noqa: E402
from zoo.errors import UserError  # noqa: E402
from zoo.mx import load_training_checkpoint, save_training_checkpoint  # noqa: E402

WHAT = "a demo training checkpoint"


def trained_pair(steps: int, units: int = 3):
    """A Dense layer and its SGD-with-momentum trainer after ``steps`` updates."""
    mx.random.seed(0)
    net = mx.gluon.nn.Dense(units, in_units=4)
    net.initialize(mx.init.Xavier())
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    for _ in range(steps):
        with mx.autograd.record():
            loss = net(mx.nd.ones((2, 4))).sum()
        loss.backward()
        trainer.step(2)
    return net, trainer


def save(results, net, trainer, step: int):
    return save_training_checkpoint(
        results / CHECKPOINT_NAME,
        net,
        trainer,
        name="demo",
        step=step,
        epoch=1,
        recipe={"run": {}},
        scale=2.0,
    )


def test_save_then_load_continues_the_same_updates(tmp_path):
    net, trainer = trained_pair(steps=2)
    save(tmp_path, net, trainer, step=2)
    fresh, fresh_trainer = trained_pair(steps=0)
    state = load_training_checkpoint(tmp_path, fresh, fresh_trainer, name="demo", what=WHAT)
    assert state["step"] == 2 and state["scale"] == 2.0 and sorted(state["params"]) == ["bias", "weight"]
    for a, b in ((net, trainer), (fresh, fresh_trainer)):  # one more step each: momentum came back too
        with mx.autograd.record():
            loss = a(mx.nd.ones((2, 4))).sum()
        loss.backward()
        b.step(2)
    np.testing.assert_array_equal(net.weight.data().asnumpy(), fresh.weight.data().asnumpy())


def test_a_save_killed_midway_leaves_the_previous_checkpoint_whole(tmp_path):
    net, trainer = trained_pair(steps=1)
    save(tmp_path, net, trainer, step=1)
    before = sorted((p.name, p.stat().st_size) for p in (tmp_path / CHECKPOINT_NAME).rglob("*"))

    class Killed(Exception):
        pass

    def killed(path):
        open(path, "wb").write(b"half")  # noqa: SIM115
        raise Killed

    trainer.save_states = killed
    with pytest.raises(Killed):
        save(tmp_path, net, trainer, step=2)
    after = sorted((p.name, p.stat().st_size) for p in (tmp_path / CHECKPOINT_NAME).rglob("*"))
    assert after == before
    assert load_training_checkpoint(tmp_path, name="demo", what=WHAT)["step"] == 1


def test_the_reader_refuses_another_models_torn_or_unfitting_checkpoint(tmp_path):
    net, trainer = trained_pair(steps=1)
    folder = save(tmp_path, net, trainer, step=1)
    with pytest.raises(UserError, match="is not an SSD checkpoint \\(it is a checkpoint of demo\\)"):
        load_training_checkpoint(tmp_path, name="ssd", what="an SSD checkpoint")
    wider, _ = trained_pair(steps=0, units=5)
    with pytest.raises(UserError, match="does not fit this model"):
        load_training_checkpoint(tmp_path, wider, name="demo", what=WHAT)
    (folder / "model.params").write_bytes(b"PK\x03\x04 a zip, not parameters")
    with pytest.raises(
        UserError, match=f"--resume {tmp_path} is not a demo training checkpoint \\(cannot be read"
    ):
        load_training_checkpoint(tmp_path, name="demo", what=WHAT)
    text = tmp_path / "notes.txt"
    text.write_text("notes")
    with pytest.raises(UserError, match="notes.txt is not a demo training checkpoint"):
        load_training_checkpoint(text, name="demo", what=WHAT)


def test_trainer_states_cut_short_are_refused_before_anything_is_restored(tmp_path):
    """Trainer.save_states writes one pickle: a cut one ended in UnpicklingError inside load_states."""
    net, trainer = trained_pair(steps=1)
    folder = save(tmp_path, net, trainer, step=1)
    states = folder / "trainer.states"
    whole = states.read_bytes()
    for kept in (len(whole) - 1, len(whole) // 2):
        states.write_bytes(whole[:kept])
        for pair in ((), (net, trainer)):
            with pytest.raises(UserError) as error:
                load_training_checkpoint(tmp_path, *pair, name="demo", what=WHAT)
            message = str(error.value)
            assert message.startswith(
                f"--resume {tmp_path} is cut short or damaged (trainer.states: {kept} bytes"
            )
    states.write_bytes(whole + b"\0")
    with pytest.raises(UserError, match=r"\(trainer.states: 1 bytes after its end\)"):
        load_training_checkpoint(tmp_path, name="demo", what=WHAT)
