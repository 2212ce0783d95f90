"""MXNet helpers shared by the MXNet models; MXNet is imported when a function is called, not at import.

One training checkpoint for every MXNet (Gluon) model, in the folder layout of zoo.checkpoint_folder:
RESULTS_DIR/checkpoint/latest.json names the newest step-N folder, which holds ``model.params``
(``Block.save_parameters``), ``trainer.states`` (``Trainer.save_states``: momentum and the like) and
``state.json`` (name, step, epoch, recipe and the model's own fields), written whole or not at all.
"""

from __future__ import annotations

import pickle
from pathlib import Path

from zoo.errors import UserError, one_line

PARAMS = "model.params"
TRAINER_STATES = "trainer.states"


def save_training_checkpoint(
    directory,
    net,
    trainer,
    *,
    name: str,
    step: int,
    epoch: int,
    recipe: dict,
    keep: int = 1,
    mark_best: bool = False,
    **fields,
) -> Path:
    """Write ``net``'s parameters, ``trainer``'s states and the run's position into ``directory``
    (RESULTS_DIR/checkpoint) atomically; returns the new checkpoint's folder.

    ``name`` says which model wrote it (the reader refuses another's); ``step`` (optimizer steps done),
    ``epoch`` (epochs done) and ``recipe`` are the fields every state holds, ``fields`` the model's own
    (JSON: the loss scaler's state, the classes). ``keep`` (``run.keep_checkpoints``): how many step
    folders stay; ``mark_best``: this one also becomes checkpoint/best/ (zoo.retention). Call it on the process
    that owns the state (rank 0).
    """
    from zoo.checkpoint_folder import save_folder

    def write(folder: Path) -> None:
        net.save_parameters(str(folder / PARAMS))
        trainer.save_states(str(folder / TRAINER_STATES))

    state = {"name": name, "step": int(step), "epoch": int(epoch), "recipe": recipe, **fields}
    return save_folder(directory, state, write, keep=keep, mark_best=mark_best)


def load_training_checkpoint(
    path, net=None, trainer=None, *, name: str, what: str, flag: str = "--resume", ctx=None
) -> dict:
    """The state a save_training_checkpoint wrote at ``path`` (a results directory, its checkpoint/
    folder or one step-N folder), and, given ``net`` / ``trainer``, their parameters / states restored
    (onto ``ctx``).

    A path that holds no such checkpoint, a torn one, another model's (``name`` differs) or one whose
    parameters do not fit ``net`` ends in one line naming ``flag`` and ``path``: ``--resume PATH is not
    <what> (...)``, ``what`` with its article ("an MXNet ResNet-50 training checkpoint"). Call it without
    ``net`` before a run writes anything, so that a wrong file leaves nothing behind; the returned dict has
    the fields saved, ``folder`` and ``params`` (the parameters as {name: NDArray}).
    """
    import mxnet as mx

    from zoo.checkpoint_folder import read_state

    state = read_state(path, name=name, what=what, flag=flag)
    folder = state["folder"]
    try:
        params = mx.nd.load(str(folder / PARAMS))
        if not (folder / TRAINER_STATES).is_file():
            raise OSError(f"{TRAINER_STATES} is missing")
        problem = _pickle_problem(folder / TRAINER_STATES)
    except (OSError, mx.base.MXNetError) as e:
        raise UserError(f"{flag} {path} is not {what} (cannot be read: {mxnet_reason(e)})") from None
    if problem:
        raise UserError(f"{flag} {path} is cut short or damaged ({TRAINER_STATES}: {problem})")
    try:
        if net is not None:
            net.load_parameters(str(folder / PARAMS), ctx=ctx)
        if trainer is not None:
            trainer.load_states(str(folder / TRAINER_STATES))
    except (AssertionError, OSError, mx.base.MXNetError) as e:
        raise UserError(f"{flag} {path} does not fit this model ({mxnet_reason(e)})") from None
    except (pickle.UnpicklingError, EOFError, ValueError) as e:
        raise UserError(f"{flag} {path} is cut short or damaged ({TRAINER_STATES}: {one_line(e)})") from None
    return {**state, "params": params}


def _pickle_problem(path: Path) -> str | None:
    """Why ``path`` (Trainer.save_states: one pickle) is not a whole pickle, or None. Its opcodes are
    walked to STOP without building any object, so nothing in the file runs."""
    import pickletools

    data = path.read_bytes()
    try:
        for opcode, _, position in pickletools.genops(data):
            if opcode.name == "STOP":
                return (
                    None if position == len(data) - 1 else f"{len(data) - position - 1} bytes after its end"
                )
    except (ValueError, EOFError) as e:  # genops: "pickle exhausted before seeing STOP", a bad opcode
        return f"{len(data)} bytes: {e}"
    return f"{len(data)} bytes, no pickle's end"


def mxnet_reason(error: BaseException) -> str:
    """The informative line of an MXNet error (its text starts with a C++ traceback)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    useful = [line for line in lines if "Check failed" in line or "Error" in line]
    return (useful or lines)[-1][:200] if lines else one_line(error)
