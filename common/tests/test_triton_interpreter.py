"""zoo.torch.triton_interpreted: true only when Triton's interpreter was on before triton was first
imported (each case in a fresh interpreter, since Triton decides at import)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
COMMON = Path(__file__).resolve().parents[1]

KERNEL_THEN_LAUNCH = """
import os, sys, torch
{before}
import triton, triton.language as tl
{after}
from zoo.torch import triton_interpreted

@triton.jit
def row_sums(x_ptr, out_ptr, N: tl.constexpr):
    row = tl.program_id(0)
    tl.store(out_ptr + row, tl.sum(tl.load(x_ptr + row * N + tl.arange(0, N)), axis=0))

x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
out = torch.empty(3)
ok = triton_interpreted()
if ok:
    row_sums[(3,)](x, out, N=4)
    assert out.tolist() == [6.0, 22.0, 38.0], out
print("interpreted" if ok else "not interpreted")
"""


def run(tmp_path, before: str = "", after: str = "") -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(COMMON)
    script = tmp_path / "kernel.py"  # Triton reads a kernel's source from its file
    script.write_text(KERNEL_THEN_LAUNCH.format(before=before, after=after))
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


def test_on_before_triton_is_imported_runs_kernels_on_the_cpu(tmp_path):
    assert run(tmp_path, before="os.environ['TRITON_INTERPRET'] = '1'") == "interpreted"


def test_on_after_triton_is_imported_counts_as_off(tmp_path):
    """Set late, a launch would fail ("Cannot call @triton.jit'd outside of the scope of a kernel")."""
    assert run(tmp_path, after="os.environ['TRITON_INTERPRET'] = '1'") == "not interpreted"


def test_off_is_off(tmp_path):
    assert run(tmp_path) == "not interpreted"
