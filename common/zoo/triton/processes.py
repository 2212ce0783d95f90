"""The tritonserver and python-stub processes seen in /proc, for tests of the deploy scripts: which
servers a command started, and which of them outlived it after a signal.

    run = signal_when_serving([sys.executable, "-m", "resnet50.deploy", ...], signal.SIGTERM,
                              ready_text="tritonserver ready")
    assert run.left_running == []
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass


@dataclass
class TritonProcess:
    pid: int
    parent: int
    session: int
    name: str  # "tritonserver" or "triton_python_backend_stub"


def triton_processes(descending_from: int | None = None) -> list[TritonProcess]:
    """Live tritonserver and python-stub processes from a /proc scan (zombies left out).

    With ``descending_from``, only the children, grandchildren... of that pid. A server stopped
    properly leaves none; a test records ``session`` of a deploy's servers while it serves and
    checks that no process of those sessions survives it.
    """
    names = ("tritonserver", "triton_python_backend_stub")
    table = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:  # exited during the scan
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp session ...
        if fields[0] in ("Z", "X"):
            continue
        table[int(entry.name)] = (int(fields[1]), int(fields[3]), pathlib.Path(argv0).name)
    found = []
    for pid, (parent, session, name) in table.items():
        if name not in names:
            continue
        ancestor = parent
        while descending_from is not None and ancestor not in (descending_from, 0, 1) and ancestor in table:
            ancestor = table[ancestor][0]
        if descending_from is None or ancestor == descending_from:
            found.append(TritonProcess(pid, parent, session, name))
    return found


@dataclass
class SignalledRun:
    returncode: int
    output: str
    served_by: list  # the TritonProcess entries seen under the command when it was signalled
    left_running: list  # those, or others of their sessions, still alive after the command ended


def signal_when_serving(
    command, sig, *, ready_text=None, env=None, cwd=None, timeout=300, settle=5.0
) -> SignalledRun:
    """Run ``command``, send it ``sig`` while it serves, and report what of its servers outlived it.

    The signal goes once the command has printed ``ready_text`` (when given) and a tritonserver with
    a python stub runs under it; with ``ready_text=None`` it arrives while models still load. For
    tests of the deploy scripts: ``left_running`` (what still runs ``settle`` seconds after the command
    ended) must be empty. The command starts with SIGINT at its
    default, as a program in a terminal does, also where this process runs in the background (where
    the shell ignored SIGINT and the command would inherit that).
    """

    def default_sigint():
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=cwd, preexec_fn=default_sigint
        )
        try:
            deadline = time.monotonic() + timeout
            served_by = []
            while not (
                any(p.name == "triton_python_backend_stub" for p in served_by)
                and (ready_text is None or ready_text in _read_all(output))
            ):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{command[:3]} ended or timed out before serving:\n{_read_all(output)[-3000:]}"
                    )
                time.sleep(0.1)
                served_by = triton_processes(descending_from=process.pid)
            process.send_signal(sig)
            process.wait(timeout=timeout)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        sessions = {p.session for p in served_by}
        pids = {p.pid for p in served_by}
        deadline = time.monotonic() + settle  # a killed stub may take a moment to be reaped
        while (left := [p for p in triton_processes() if p.session in sessions or p.pid in pids]) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.2)
        return SignalledRun(process.returncode, _read_all(output), served_by, left)


def _read_all(file) -> str:
    """What the command wrote so far. pread, not seek + read: the command's stdout shares this file's
    offset, and a seek to 0 while it writes put its next lines over the first ones (a ready line lost)."""
    fd = file.fileno()
    return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")
