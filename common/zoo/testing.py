"""What the models' tests share to drive a training script as a user's machine would.

``sigterm_at_step(step, module, *args)`` is the command line of ``python -m module args`` whose process
receives SIGTERM right after optimizer step ``step`` (through :class:`zoo.cli.Preemption`, the check that
every training loop makes after each step): the preemption a scheduler sends, at a known step, so that a
test can compare the resumed run with an unbroken one step by step.
"""

from __future__ import annotations

import sys

_SIGTERM_AT_STEP = """
import os, runpy, signal, sys
import zoo.cli
at, module = int(sys.argv[1]), sys.argv[2]
requested = zoo.cli.Preemption.requested
def sigterm_at(self, step):
    if step == at:
        os.kill(os.getpid(), signal.SIGTERM)
    return requested(self, step)
zoo.cli.Preemption.requested = sigterm_at
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def sigterm_at_step(step: int, module: str, *args) -> list[str]:
    """The command: ``python -m module args``, sent SIGTERM after optimizer step ``step``."""
    return [sys.executable, "-c", _SIGTERM_AT_STEP, str(step), module, *map(str, args)]
