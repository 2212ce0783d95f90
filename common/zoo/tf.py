"""TensorFlow set-up shared by the TensorFlow models: which tf.distribute strategy a run uses, and where
this process sits in the job (TensorFlow is imported when a function is called, not at import).

- one node: MirroredStrategy over the visible GPUs (all-reduce with NCCL), or the default strategy
  on one device;
- several nodes: MultiWorkerMirroredStrategy, one process per node, the cluster read from TF_CONFIG
  or, under SLURM (`srun`, one task per node), from SLURM's environment;
- Horovod (`--distribution horovod`, one process per GPU under horovodrun/mpirun) where the
  container has it: the default strategy plus hvd.allreduce of the gradients.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from zoo.errors import UserError

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
