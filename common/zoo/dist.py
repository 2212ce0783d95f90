"""Rank, local rank and world size from the launcher's environment: torchrun, SLURM, MPI, or none.

Checked in this order, so that torchrun started inside an ``srun`` step wins over SLURM's variables.
A helper process (a Triton server, a background scorer) calls ``end_with_parent`` so that it does not
outlive a parent killed with SIGKILL.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_MASTER_PORT = 29500


@dataclass
class DistEnv:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    master_addr: str
    master_port: int
    launcher: str  # "torchrun", "slurm", "mpi", "horovod" or "single"

    @property
    def is_primary(self) -> bool:
        return self.rank == 0


def get_dist_env(environ: Mapping | None = None) -> DistEnv:
    """Read the process's place in the job from ``environ`` (default ``os.environ``)."""
    env = os.environ if environ is None else environ
    master_addr = env.get("MASTER_ADDR", "127.0.0.1")
    master_port = int(env.get("MASTER_PORT", DEFAULT_MASTER_PORT))

    if "RANK" in env and "WORLD_SIZE" in env:  # torchrun / torch.distributed.launch (env://)
        world = int(env["WORLD_SIZE"])
        return DistEnv(
            rank=int(env["RANK"]),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            world_size=world,
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", world)),
            master_addr=master_addr,
            master_port=master_port,
            launcher="torchrun",
        )
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        nodelist = (
            env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        )
        return DistEnv(
            rank=int(env["SLURM_PROCID"]),
            local_rank=int(env.get("SLURM_LOCALID", 0)),
            world_size=int(env["SLURM_NTASKS"]),
            local_world_size=_slurm_tasks_on_node(env),
            master_addr=env.get("MASTER_ADDR") or (first_slurm_host(nodelist) if nodelist else "127.0.0.1"),
            master_port=master_port,
            launcher="slurm",
        )
    for prefix in ("OMPI_COMM_WORLD_", "MV2_COMM_WORLD_"):  # Open MPI, MVAPICH
        if prefix + "RANK" in env:
            world = int(env[prefix + "SIZE"])
            return DistEnv(
                rank=int(env[prefix + "RANK"]),
                local_rank=int(env.get(prefix + "LOCAL_RANK", 0)),
                world_size=world,
                local_world_size=int(env.get(prefix + "LOCAL_SIZE", world)),
                master_addr=master_addr,
                master_port=master_port,
                launcher="mpi",
            )
    if "PMI_RANK" in env:  # MPICH / Intel MPI (hydra)
        world = int(env["PMI_SIZE"])
        return DistEnv(
            rank=int(env["PMI_RANK"]),
            local_rank=int(env.get("MPI_LOCALRANKID", 0)),
            world_size=world,
            local_world_size=int(env.get("MPI_LOCALNRANKS", world)),
            master_addr=master_addr,
            master_port=master_port,
            launcher="mpi",
        )
    if "HOROVOD_RANK" in env:  # horovodrun with its gloo controller
        world = int(env["HOROVOD_SIZE"])
        return DistEnv(
            rank=int(env["HOROVOD_RANK"]),
            local_rank=int(env.get("HOROVOD_LOCAL_RANK", 0)),
            world_size=world,
            local_world_size=int(env.get("HOROVOD_LOCAL_SIZE", world)),
            master_addr=master_addr,
            master_port=master_port,
            launcher="horovod",
        )
    return DistEnv(0, 0, 1, 1, master_addr, master_port, "single")


def is_primary(environ: Mapping | None = None) -> bool:
    """True on global rank 0 (and in a single-process run)."""
    return get_dist_env(environ).rank == 0


def first_slurm_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``"gpu[003-005,9],cpu1"`` -> ``"gpu003"``."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        raise ValueError(f"cannot read SLURM node list '{nodelist}'")
    prefix, ranges = match.groups()
    if not ranges:
        return prefix
    return prefix + re.split(r"[-,]", ranges)[0]


def _slurm_tasks_on_node(env: Mapping) -> int:
    """Tasks on this node from SLURM_TASKS_PER_NODE (``"4(x2),2"``) and SLURM_NODEID."""
    if "SLURM_NTASKS_PER_NODE" in env:
        return int(env["SLURM_NTASKS_PER_NODE"])
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if not spec:
        return int(env["SLURM_NTASKS"])
    counts = []
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            return int(env["SLURM_NTASKS"])
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    node = int(env.get("SLURM_NODEID", 0))
    return counts[node] if node < len(counts) else counts[-1]


def end_with_parent(sig: int, parent: int | None = None) -> None:
    """Called in a child process: the kernel sends it ``sig`` when its parent dies (Linux
    PR_SET_PDEATHSIG), so a parent killed with SIGKILL, whose clean-up never runs, leaves no child
    behind. ``parent``: the pid the child was started by; a child whose parent died before this call
    gets ``sig`` at once. Elsewhere than Linux: nothing."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)


def process_gone(pid: int) -> bool:
    """Whether no process ``pid`` runs any more (one of another user counts as running): for folders named
    after the process that owns them, which a later start removes once their owner has died."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
