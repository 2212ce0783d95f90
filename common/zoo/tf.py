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

And ``preemption(runtime)``: the ``zoo.cli.Preemption`` of a training loop, whose worker processes agree
through the run's own collective (the strategy's all-reduce, or Horovod's) on the step to stop after.
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
        _restore_sigterm()
        resolver = strategy.cluster_resolver
        index = resolver.task_id if resolver and resolver.task_id is not None else 0
        workers = len(resolver.cluster_spec().as_dict().get("worker", [])) if resolver else 1
        return Runtime(strategy, int(index), max(int(workers), 1), "multiworker")
    if distribution == "mirrored":
        return Runtime(tf.distribute.MirroredStrategy(), 0, 1, "mirrored")
    return Runtime(tf.distribute.get_strategy(), 0, 1, "default")


def _restore_sigterm() -> None:
    """Building a MultiWorkerMirroredStrategy puts TensorFlow's own SIGTERM handler in place of the one this
    process had: a SIGTERM then neither ends the process nor reaches zoo.cli's handler (a training loop's
    Preemption). Give the signal back to Python's handler, or to the default action where there is none."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        handler = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, signal.SIG_DFL if handler is None else handler)


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


def any_flag(runtime):
    """``agree(flag) -> bool`` for ``zoo.cli.Preemption``: whether any worker process's flag is set, through
    the run's collective (a SUM all-reduce of the strategy, one value per replica, or Horovod's). Every
    process calls it at the same steps, as every collective of the run."""
    import tensorflow as tf

    hvd, strategy = runtime.hvd, runtime.strategy
    if hvd is not None:
        return lambda flag: float(hvd.allreduce(tf.constant(float(flag)), op=hvd.Sum)) > 0

    @tf.function
    def reduce(flag):
        flags = strategy.run(tf.identity, args=(flag,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, flags, axis=None)

    return lambda flag: float(reduce(tf.constant(float(flag)))) > 0


def preemption(runtime, every: int = 10):
    """The ``zoo.cli.Preemption`` of a training loop under ``runtime``: a SIGTERM to any worker process
    stops every one after the same step (agreed every ``every`` steps through :func:`any_flag`)."""
    from zoo.cli import Preemption

    return Preemption(runtime.num_workers, every=every, agree=any_flag(runtime))


# ------------------------------------------------------------------------------ training checkpoints
# RESULTS_DIR/checkpoint/ (zoo.checkpoint_folder): latest.json names the newest step-N folder, which holds
# state.json (name, step, epoch, recipe, the model's own fields) and variables.index / variables.data-*,
# the tf.train.Checkpoint of the objects the model passed.
VARIABLES = "variables"


def save_training_checkpoint(
    directory,
    objects: dict,
    *,
    name: str,
    step: int,
    epoch: int,
    recipe: dict,
    keep: int = 1,
    mark_best: bool = False,
    chief: bool = True,
    **fields,
) -> Path | None:
    """Write ``tf.train.Checkpoint(**objects)`` and the run's position into ``directory``
    (RESULTS_DIR/checkpoint) atomically; returns the new checkpoint's folder.

    ``objects``: whatever the model trains (``{"model": model, "optimizer": optimizer, ...}``: Keras models,
    optimizers, variables, tf.random.Generators). ``name`` says which model wrote it (the reader refuses
    another's); ``step`` (optimizer steps done), ``epoch`` (epochs done) and ``recipe`` are the fields every
    state holds, ``fields`` the model's own (JSON). ``keep``: how many checkpoints stay (the newest is the one
    --resume continues); ``mark_best``: it also becomes checkpoint/best/ (zoo.retention). Under a multi-worker strategy every worker calls it (collectives may run while
    variables are read); only the ``chief``'s is kept.
    """
    import tensorflow as tf

    from zoo.checkpoint_folder import save_folder

    state = {"name": name, "step": int(step), "epoch": int(epoch), "recipe": recipe, **fields}
    checkpoint = tf.train.Checkpoint(**objects)
    return save_folder(
        directory,
        state,
        lambda folder: checkpoint.write(str(folder / VARIABLES)),
        keep=keep,
        mark_best=mark_best,
        chief=chief,
    )


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

    from zoo.checkpoint_folder import read_state

    state = read_state(path, name=name, what=what, flag=flag)
    prefix = str(state["folder"] / VARIABLES)
    try:
        tf.train.load_checkpoint(prefix)
    except (ValueError, tf.errors.OpError) as e:
        raise UserError(f"{flag} {path} is not {what} (cannot be read: {one_line(e, limit=160)})") from None
    problem = checkpoint_data_problem(prefix)
    if problem:
        raise UserError(f"{flag} {path} is cut short or damaged: {problem}")
    if objects:
        try:
            status = tf.train.Checkpoint(**objects).read(prefix)
            (status.expect_partial() if partial else status).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            raise UserError(f"{flag} {path} does not fit this model ({one_line(e, limit=200)})") from None
        except IndexError as e:  # TensorFlow's OUT_OF_RANGE: a data file shorter than its index says
            raise UserError(f"{flag} {path} is cut short or damaged ({one_line(e, limit=160)})") from None
    return state


def checkpoint_data_problem(prefix) -> str | None:
    """Why the data files of the TensorFlow checkpoint ``prefix`` (``PREFIX.index`` and
    ``PREFIX.data-NNNNN-of-NNNNN``) do not hold every tensor their index names, or None. Only the index is
    read (every tensor's shard, offset and size), so a checkpoint cut short is refused in moments, before
    a run writes anything. An index this reader cannot walk is left to TensorFlow's own reading."""
    from tensorflow.core.protobuf import tensor_bundle_pb2

    prefix = str(prefix)
    try:
        records = _table_records(Path(prefix + ".index").read_bytes())
    except (OSError, ValueError, IndexError):
        return None
    ends: dict[int, tuple[int, str]] = {}  # shard -> (the end of its last tensor, that tensor's name)
    shards = 1
    for key, value in records:
        if not key:
            shards = tensor_bundle_pb2.BundleHeaderProto.FromString(value).num_shards
            continue
        entry = tensor_bundle_pb2.BundleEntryProto.FromString(value)
        end = entry.offset + entry.size
        if end > ends.get(entry.shard_id, (0, ""))[0]:
            ends[entry.shard_id] = (end, key.decode(errors="replace"))
    for shard, (end, name) in sorted(ends.items()):
        data = Path(f"{prefix}.data-{shard:05d}-of-{shards:05d}")
        size = data.stat().st_size if data.is_file() else None
        if size is None:
            return f"{data.name} is missing"
        if size < end:
            return f"{data.name} has {size} bytes, its index places {name} up to byte {end}"
    return None


def _varint(buffer: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buffer[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte < 0x80:
            return value, at


def _block_records(buffer: bytes, offset: int, size: int) -> list[tuple[bytes, bytes]]:
    """The (key, value) entries of one uncompressed block of a LevelDB-format table (TensorFlow's
    checkpoint index): prefix-compressed keys, then the restart points and their count."""
    if buffer[offset + size] != 0:  # the block trailer's compression type: only uncompressed is read
        raise ValueError("a compressed index block")
    restarts = int.from_bytes(buffer[offset + size - 4 : offset + size], "little")
    end, at, key, out = offset + size - 4 * (restarts + 1), offset, b"", []
    while at < end:
        shared, at = _varint(buffer, at)
        fresh, at = _varint(buffer, at)
        length, at = _varint(buffer, at)
        key = key[:shared] + buffer[at : at + fresh]
        out.append((key, buffer[at + fresh : at + fresh + length]))
        at += fresh + length
    return out


def _table_records(buffer: bytes) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of a LevelDB-format table, through its footer's index block."""
    footer = buffer[-48:]
    if len(buffer) < 48 or footer[-8:] != (0xDB4775248B80FB57).to_bytes(8, "little"):
        raise ValueError("not a table")
    _, at = _varint(footer, 0)  # the metaindex block's handle
    _, at = _varint(footer, at)
    index_offset, at = _varint(footer, at)
    index_size, _ = _varint(footer, at)
    records = []
    for _, handle in _block_records(buffer, index_offset, index_size):
        block_offset, at = _varint(handle, 0)
        block_size, _ = _varint(handle, at)
        records += _block_records(buffer, block_offset, block_size)
    return records
