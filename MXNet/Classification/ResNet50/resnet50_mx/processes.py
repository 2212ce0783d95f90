"""The devices and processes a run uses: GPUs of this process, and the kvstore (or Horovod) that joins
devices and processes.

  * one process, several GPUs: ``--gpus 0,1,2,3`` with kvstore ``device`` (or ``nccl``);
  * several processes / nodes: MXNet's parameter-server launcher. Every process runs train.py;
    ``DMLC_ROLE`` (scheduler | server | worker), ``DMLC_PS_ROOT_URI``/``DMLC_PS_ROOT_PORT``,
    ``DMLC_NUM_WORKER`` and ``DMLC_NUM_SERVER`` come from the environment (``mxnet/tools/launch.py``,
    ``resnet50_mx.launch`` or a cluster scheduler sets them). Scheduler and server processes serve inside
    ``import mxnet`` and never reach the training loop; workers use kvstore ``dist_sync``;
  * ``--horovod``: Horovod's MXNet binding where it is installed (one process per GPU).

A SIGTERM is taken at a step boundary (``Processes.preemption``, a zoo.cli.Preemption): the processes
agree on it through the kvstore (or Horovod's allreduce), so that all of them stop after the same step.
"""

from __future__ import annotations

import os

from zoo.errors import UserError, one_line

# The kvstore key through which workers agree on a preemption: an int, as the trainer's keys (its
# parameters' indices) are, and past all of them.
PREEMPTION_KEY = 1 << 20


def gpu_ids(value: str | None) -> list[int]:
    """``"0,1"`` -> [0, 1]; ``"4"`` alone means the first four; empty/None means the CPU. Needs no MXNet:
    :func:`parse_gpus` also checks that the machine has them."""
    if value in (None, "", "cpu"):
        return []
    try:
        items = [int(v) for v in str(value).split(",") if v.strip()]
    except ValueError:
        raise UserError(f"--gpus must be a count or a comma list of GPU ids, got {value!r}") from None
    if any(item < 0 for item in items):  # range(-1) would be no GPU at all: a silent CPU run
        raise UserError(f"--gpus {value}: a GPU count or ids must not be negative (0 or cpu: the CPU)")
    return list(range(items[0])) if len(items) == 1 and "," not in str(value) else items


def parse_gpus(value: str | None) -> list[int]:
    """:func:`gpu_ids`, every one of them a GPU of this machine."""
    import mxnet as mx

    gpus = gpu_ids(value)
    available = mx.context.num_gpus()
    if gpus and max(gpus) >= available:
        raise UserError(f"--gpus {value} asks for GPU {max(gpus)} but this machine has {available} GPU(s)")
    return gpus


class Processes:
    """This process's place in the job and the kvstore that joins the processes / devices."""

    def __init__(self, kvstore: str, num_devices: int, horovod: bool):
        self.hvd = None
        self.kv = None
        role = os.environ.get("DMLC_ROLE")
        if horovod:
            try:
                import horovod.mxnet as hvd
            except ImportError as e:
                raise UserError(f"--horovod needs horovod built with MXNet support: {one_line(e)}") from None
            hvd.init()
            self.hvd, self.rank, self.world, self.local_rank = hvd, hvd.rank(), hvd.size(), hvd.local_rank()
            return
        if role == "worker":
            kvstore = kvstore if kvstore.startswith("dist") else "dist_sync"
        elif kvstore.startswith("dist"):
            raise UserError(f"kvstore {kvstore} needs the DMLC_* environment of MXNet's launcher")
        if kvstore.startswith("dist") or num_devices > 1:
            import mxnet as mx

            self.kv = mx.kv.create(kvstore)
        self.rank = self.kv.rank if self.kv else 0
        self.world = self.kv.num_workers if self.kv else 1
        self.local_rank = 0

    @property
    def primary(self) -> bool:
        return self.rank == 0

    def barrier(self):
        if self.kv is not None and self.world > 1:
            self.kv._barrier()

    def preemption(self):
        """A zoo.cli.Preemption for this job. With several processes their flags are summed through the
        kvstore (a push and a pull of one number under PREEMPTION_KEY; dist_sync sums what every worker
        pushed) or Horovod's allreduce, at the same steps on every process. Creating it is a collective
        with the kvstore (the key's init): every worker calls it at the same point."""
        from zoo.cli import Preemption

        if self.world == 1:
            return Preemption()
        import mxnet as mx

        if self.hvd is not None:  # not run by the tests (no Horovod here)
            hvd = self.hvd
            return Preemption(
                self.world,
                agree=lambda flag: hvd.allreduce(mx.nd.array([float(flag)]), average=False, name="preemption")
                .asscalar() > 0,
            )  # fmt: skip
        self.kv.init(PREEMPTION_KEY, mx.nd.zeros((1,)))
        return Preemption(self.world, agree=self._any_flag)

    def _any_flag(self, flag: bool) -> bool:
        """Whether any worker's ``flag`` is set (every worker calls it together)."""
        import mxnet as mx

        self.kv.push(PREEMPTION_KEY, mx.nd.array([float(flag)]))
        total = mx.nd.zeros((1,))
        self.kv.pull(PREEMPTION_KEY, out=total)
        return float(total.asscalar()) > 0
