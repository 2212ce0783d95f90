"""TensorFlow set-up shared by the TensorFlow models: which tf.distribute strategy a run uses, and where
this process sits in the job (TensorFlow is imported when a function is called, not at import).

- one node: MirroredStrategy over the visible GPUs (all-reduce with NCCL), or the default strategy
  on one device;
- several nodes: MultiWorkerMirroredStrategy, one process per node, the cluster read from TF_CONFIG
  or, under SLURM (`srun`, one task per node), from SLURM's environment;
- Horovod (`--distribution horovod`, one process per GPU under horovodrun/mpirun) where the
  container has it: the default strategy plus hvd.allreduce of the gradients.

And one training checkpoint for every TensorFlow model: ``save_training_checkpoint`` writes a
tf.train.Checkpoint of the objects a model trains, with its step, epoch and recipe, atomically under
RESULTS_DIR/checkpoint/; ``load_training_checkpoint`` is the one reader (refusing another model's or a
torn checkpoint in one line).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from zoo.errors import UserError, one_line

CHOICES = ("auto", "default", "mirrored", "multiworker", "horovod")


@dataclass
class Runtime:
    strategy: object  # tf.distribute.Strategy
    worker_index: int
    num_workers: int
    kind: str
    hvd: object | None = None  # the horovod.tensorflow module when --distribution horovod

    @property
    def is_chief(self) -> bool:
        return self.worker_index == 0

    @property
    def num_replicas(self) -> int:
        return self.hvd.size() if self.hvd else self.strategy.num_replicas_in_sync


def _tf_config() -> dict | None:
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None
    try:
        config = json.loads(raw)
        config["cluster"]["worker"], config["task"]["index"]  # noqa: B018 - validate the keys
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"TF_CONFIG is not valid (need cluster.worker and task.index): {e!r}") from None
    return config


def _slurm_world_size() -> int:
    from zoo.dist import get_dist_env

    env = get_dist_env()
    return env.world_size if env.launcher == "slurm" else 1


def _communication(gpus: list):
    import tensorflow as tf

    impl = tf.distribute.experimental.CommunicationImplementation
    return tf.distribute.experimental.CommunicationOptions(implementation=impl.NCCL if gpus else impl.RING)


def make_runtime(distribution: str = "auto") -> Runtime:
    """Build the strategy; call before any other TensorFlow op (collectives must be configured first)."""
    import tensorflow as tf

    if distribution not in CHOICES:
        raise UserError(f"unknown --distribution {distribution!r} (one of {', '.join(CHOICES)})")
    gpus = tf.config.list_physical_devices("GPU")
    if distribution == "horovod":
        return _horovod_runtime(gpus)
    tf_config = _tf_config()
    if distribution == "auto":
        if tf_config and len(tf_config["cluster"]["worker"]) > 1 or _slurm_world_size() > 1:
            distribution = "multiworker"
        elif len(gpus) > 1:
            distribution = "mirrored"
        else:
            distribution = "default"
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if distribution == "multiworker":
        resolver = None
        if not tf_config and _slurm_world_size() > 1:
            resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
                port_base=int(os.environ.get("ZOO_TF_PORT", 12345)), auto_set_gpu=False
            )
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver, communication_options=_communication(gpus)
        )
        resolver = strategy.cluster_resolver
        index = resolver.task_id if resolver and resolver.task_id is not None else 0
        workers = len(resolver.cluster_spec().as_dict().get("worker", [])) if resolver else 1
        return Runtime(strategy, int(index), max(int(workers), 1), "multiworker")
    if distribution == "mirrored":
        return Runtime(tf.distribute.MirroredStrategy(), 0, 1, "mirrored")
    return Runtime(tf.distribute.get_strategy(), 0, 1, "default")


def _horovod_runtime(gpus: list) -> Runtime:
    import tensorflow as tf

    try:
        import horovod.tensorflow as hvd
    except ImportError as e:
        raise UserError(
            f"--distribution horovod needs Horovod built for TensorFlow (not installed here: {e})"
        ) from None
    hvd.init()
    if gpus:
        tf.config.experimental.set_memory_growth(gpus[hvd.local_rank()], True)
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    return Runtime(tf.distribute.get_strategy(), hvd.rank(), hvd.size(), "horovod", hvd=hvd)


# ------------------------------------------------------------------------------ training checkpoints
# RESULTS_DIR/checkpoint/ holds a run's training state, the same way in every TensorFlow model:
#
#   checkpoint/latest.json          {"folder": "step-600"}: the newest whole checkpoint (what --resume reads)
#   checkpoint/step-600/state.json  name, step, epoch, recipe and the model's own fields
#   checkpoint/step-600/variables.index, variables.data-*   tf.train.Checkpoint of the objects passed
#
# A save writes a new folder under a temporary name, renames it into place, then points latest.json at
# it (zoo.io.atomic_write): a run killed at any moment leaves the previous checkpoint whole.
CHECKPOINT_NAME = "checkpoint"  # RESULTS_DIR/checkpoint/: what --resume auto continues
LATEST = "latest.json"
STATE = "state.json"
VARIABLES = "variables"
TRAINING_STATE_FIELDS = ("name", "step", "epoch", "recipe")
_TEMP_PREFIX = ".step-"


def checkpoint_pointer(results_dir) -> Path:
    """RESULTS_DIR/checkpoint/latest.json: it exists once a run has saved; pass it to zoo.cli.resolve_resume."""
    return Path(results_dir) / CHECKPOINT_NAME / LATEST


def save_training_checkpoint(
    directory,
    objects: dict,
    *,
    name: str,
    step: int,
    epoch: int,
    recipe: dict,
    keep: int = 1,
    chief: bool = True,
    **fields,
) -> Path | None:
    """Write ``tf.train.Checkpoint(**objects)`` and the run's position into ``directory``
    (RESULTS_DIR/checkpoint) atomically; returns the new checkpoint's folder.

    ``objects``: whatever the model trains (``{"model": model, "optimizer": optimizer, ...}``: Keras models,
    optimizers, variables, tf.random.Generators). ``name`` says which model wrote it (the reader refuses
    another's); ``step`` (optimizer steps done), ``epoch`` (epochs done) and ``recipe`` are the fields every
    state holds, ``fields`` the model's own (JSON). ``keep``: how many checkpoints stay (the newest is the one
    --resume continues). Under a multi-worker strategy every worker calls it (collectives may run while
    variables are read); only the ``chief``'s is kept, the others write to a temporary folder and delete it.
    """
    import shutil
    import tempfile

    import tensorflow as tf

    from zoo.io import atomic_write

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if chief:
        _remove_stale_checkpoint_temps(directory)
    # another worker's copy goes to its own machine's temporary folder, out of the chief's way
    temp = Path(
        tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}{step}.", suffix=".tmp", dir=directory if chief else None)
    )
    try:
        os.chmod(temp, 0o777 & ~_umask())  # mkdtemp's 0700 would hide checkpoints from the user's group
        tf.train.Checkpoint(**objects).write(str(temp / VARIABLES))
        if not chief:
            return None
        state = {"name": name, "step": int(step), "epoch": int(epoch), "recipe": recipe, **fields}
        (temp / STATE).write_text(json.dumps(state, indent=1, default=_json_scalar))
        folder = directory / f"step-{step}"
        for again in range(1, 1000):  # the same step saved twice (an epoch's end and a step interval)
            if not folder.exists():
                break
            folder = directory / f"step-{step}.{again}"
        temp.rename(folder)
        kept = [*_kept_folders(directory), folder.name][-keep:]
        with atomic_write(directory / LATEST) as tmp:
            tmp.write_text(json.dumps({"folder": folder.name, "kept": kept}) + "\n")
        for old in directory.glob("step-*"):  # older ones, and any a killed save renamed but never named
            if old.name not in kept:
                shutil.rmtree(old, ignore_errors=True)
        return folder
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def load_training_checkpoint(
    path, objects: dict | None = None, *, name: str, what: str, flag: str = "--resume", partial: bool = False
) -> dict:
    """The state a save_training_checkpoint wrote at ``path`` (a results directory, its checkpoint/
    folder or one step-N folder), and, given ``objects``, their values restored into them.

    A path that holds no such checkpoint, an unreadable or torn one, another model's (``name`` differs) or
    one whose variables do not fit ``objects`` ends in one line naming ``flag`` and ``path``:
    ``--resume PATH is not <what> (...)``, ``what`` with its article ("a TensorFlow ResNet-50 training
    checkpoint"). ``partial``: restore only ``objects`` (the model's weights for evaluation), ignoring the
    rest of the checkpoint. Call it without ``objects`` before a run writes anything, so that a wrong file
    leaves nothing behind; the returned dict has the fields saved and ``folder``.
    """
    import tensorflow as tf

    folder = _checkpoint_folder(Path(path), flag, what)
    try:
        state = json.loads((folder / STATE).read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{flag} {path} is not {what} (cannot be read: {one_line(e, limit=160)})") from None
    missing = (
        [field for field in TRAINING_STATE_FIELDS if field not in state] if isinstance(state, dict) else []
    )
    if missing or not isinstance(state, dict):
        raise UserError(
            f"{flag} {path} is not {what} (no {', '.join(missing) or 'fields'} in {folder / STATE})"
        )
    if state["name"] != name:
        raise UserError(f"{flag} {path} is not {what} (it is a checkpoint of {state['name']})")
    try:
        tf.train.load_checkpoint(str(folder / VARIABLES))
    except (ValueError, tf.errors.OpError) as e:
        raise UserError(f"{flag} {path} is not {what} (cannot be read: {one_line(e, limit=160)})") from None
    if objects:
        try:
            status = tf.train.Checkpoint(**objects).read(str(folder / VARIABLES))
            (status.expect_partial() if partial else status).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            raise UserError(f"{flag} {path} does not fit this model ({one_line(e, limit=200)})") from None
    return {**state, "folder": folder}


def _checkpoint_folder(path: Path, flag: str, what: str) -> Path:
    """The step-N folder ``path`` names: itself, or the one its latest.json (or checkpoint/latest.json) names."""
    pointers = (path, path / LATEST, path / CHECKPOINT_NAME / LATEST)
    pointer = next((p for p in pointers if p.name == LATEST and p.is_file()), None)
    if pointer is not None:
        try:
            folder = pointer.parent / json.loads(pointer.read_text())["folder"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UserError(f"{flag} {path} is not {what} ({pointer}: {one_line(e, limit=160)})") from None
        if not (folder / STATE).is_file():
            raise UserError(
                f"{flag} {path} is not {what} ({pointer} names {folder.name}, which is not there)"
            )
        return folder
    if (path / STATE).is_file():
        return path
    if not path.exists():
        raise UserError(f"{flag} {path}: no such checkpoint")
    raise UserError(f"{flag} {path} is not {what} (no {CHECKPOINT_NAME}/{LATEST} or {STATE})")


def _kept_folders(directory: Path) -> list[str]:
    """The folders latest.json keeps, oldest first ([] before the first save, or for an unreadable one)."""
    try:
        pointer = json.loads((directory / LATEST).read_text())
        return [name for name in pointer.get("kept", [pointer["folder"]]) if (directory / name).is_dir()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def _remove_stale_checkpoint_temps(directory: Path) -> None:
    """What a save killed midway left: its temporary folder, TensorFlow's ``<prefix>_temp/`` in it."""
    import shutil

    for temp in directory.glob(f"{_TEMP_PREFIX}*.tmp"):
        shutil.rmtree(temp, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _json_scalar(value):
    """numpy and TensorFlow scalars in a checkpoint's state.json."""
    return value.item() if hasattr(value, "item") else str(value)
