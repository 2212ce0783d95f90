"""Nothing left running: a deploy script's server path, run against the real tritonserver (the
nvidia-pytriton wheel's, on 127.0.0.1), leaves no tritonserver and no triton_python_backend_stub
process behind however it ends: normally, on an error while the model loads or while it serves, and
on SIGINT or SIGTERM while the model loads or while it serves.

One cheap model stands for all: PyTorch ResNet-50 at 32x32 pixels served by the python backend
(every deploy script starts its server through zoo.triton.server.TritonServer).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time

import pytest
from zoo.triton.processes import signal_when_serving, triton_processes
from zoo_tree import ROOT, model_env, venv_bin

MODEL_DIR = ROOT / "PyTorch" / "Classification" / "ResNet50"
SIZE = 32
SERVED = "resnet50_python"

EXPORT = r"""
import sys

import torch
from PIL import Image
from resnet50.export import export_repository
from resnet50.model import resnet50

torch.manual_seed(0)
export_repository(resnet50(num_classes=10).eval(), sys.argv[1], image_size=32, models=("python",), max_batch_size=8)
for i, colour in enumerate([(200, 30, 20), (20, 200, 30), (30, 20, 200)]):
    Image.new("RGB", (40, 48), colour).save(f"{sys.argv[2]}/{i}.png")
"""

SERVED_COPIES = (
    5_000  # copies of the three images each signal test asks the deploy to classify (argv ~0.7 MB)
)


def deploy_env() -> dict:
    env = model_env(MODEL_DIR)
    env["PYTHONPATH"] = str(MODEL_DIR)
    return env


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(model repository with resnet50_python, three PNG images)."""
    repo = tmp_path_factory.mktemp("repository")
    images = tmp_path_factory.mktemp("images")
    done = subprocess.run(
        [str(venv_bin(MODEL_DIR) / "python"), "-c", EXPORT, str(repo), str(images)],
        capture_output=True,
        text=True,
        env=deploy_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return repo, sorted(str(p) for p in images.glob("*.png"))


def deploy_command(repo, images, *extra) -> list[str]:
    script = MODEL_DIR / "scripts" / "deploy_triton.sh"
    return ["bash", str(script), "--repository", str(repo), "--model", SERVED, *extra, *images]


def run_watched(command, timeout=240):
    """Run ``command`` to its end, noting the Triton processes under it; returns (returncode, output,
    processes seen, processes of theirs still alive once it has ended)."""
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=deploy_env())
        seen = {}
        deadline = time.monotonic() + timeout
        try:
            while process.poll() is None and time.monotonic() < deadline:
                for found in triton_processes(descending_from=process.pid):
                    seen[found.pid] = found
                time.sleep(0.05)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
        output.seek(0)
        text = output.read()
    sessions = {p.session for p in seen.values()}
    left = []
    settle = time.monotonic() + 5  # a stub killed with its server may take a moment to be reaped
    while time.monotonic() < settle:
        left = [p for p in triton_processes() if p.session in sessions or p.pid in seen]
        if not left:
            break
        time.sleep(0.2)
    return process.returncode, text, list(seen.values()), left


def names(processes) -> list[str]:
    return sorted({p.name for p in processes})


@pytest.mark.timeout(300)
def test_normal_end_leaves_nothing_running(exported):
    repo, images = exported
    code, output, seen, left = run_watched(deploy_command(repo, images, "--image-size", str(SIZE)))
    assert code == 0, output[-3000:]
    assert "latency p50" in output, output[-3000:]
    assert names(seen) == ["triton_python_backend_stub", "tritonserver"], output[-3000:]
    assert left == [], output[-3000:]


@pytest.mark.timeout(300)
def test_error_while_the_model_loads_leaves_nothing_running(exported, tmp_path):
    repo, images = exported
    broken = tmp_path / "repo"
    shutil.copytree(repo, broken)
    (broken / SERVED / "1" / "model.onnx").write_bytes(b"not an onnx file")
    code, output, seen, left = run_watched(deploy_command(broken, images, "--image-size", str(SIZE)))
    assert code != 0 and "Traceback" not in output, output[-3000:]
    assert output.strip().splitlines()[-1].startswith("error: tritonserver exited"), output[-3000:]
    assert "tritonserver" in names(seen), output[-3000:]
    assert left == [], output[-3000:]


@pytest.mark.timeout(300)
def test_error_while_serving_leaves_nothing_running(exported):
    repo, images = exported
    # Images of another size than the served model's: every request fails while the server runs.
    command = deploy_command(
        repo, images, "--image-size", str(SIZE + 8), "--concurrency", "1", "--requests", "4"
    )
    code, output, seen, left = run_watched(command)
    assert code != 0 and "Traceback" not in output, output[-3000:]
    assert "request(s) failed under load" in output.strip().splitlines()[-1], output[-3000:]
    assert names(seen) == ["triton_python_backend_stub", "tritonserver"], output[-3000:]
    assert left == [], output[-3000:]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("while_", ["loading", "serving"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_leaves_nothing_running(exported, sig, while_):
    repo, images = exported
    # Enough images that the deploy is still serving when the signal arrives: 3,000 took 16 s idle, and
    # beside a make test's suites the signal once came after they were all served.
    command = deploy_command(repo, images * SERVED_COPIES, "--image-size", str(SIZE))
    ready_text = "tritonserver ready" if while_ == "serving" else None
    run = signal_when_serving(command, sig, ready_text=ready_text, env=deploy_env(), timeout=240)
    assert "tritonserver" in names(run.served_by), run.output[-3000:]
    assert run.left_running == [], run.output[-3000:]
    assert run.returncode != 0 and "latency p50" not in run.output, "the signal came after the deploy ended"
    assert "Traceback" not in run.output, run.output[-3000:]
    if sig == signal.SIGINT:  # ended as Ctrl-C ends a program (killed by SIGINT), reported in one line
        assert run.returncode == -signal.SIGINT, run.output[-3000:]
        assert run.output.strip().splitlines()[-1] == "interrupted (Ctrl-C): tritonserver stopped", run.output


@pytest.mark.timeout(300)
def test_sigkill_of_the_deploy_takes_its_server_down(exported, tmp_path, monkeypatch):
    """kill -9 runs no clean-up in the deploy: the server goes down with it all the same (the kernel sends
    it SIGTERM when its parent dies), and the next start removes the dead one's temporary folders."""
    from zoo.triton.server import sweep_stale_work_dirs

    repo, images = exported
    # A temporary folder of its own, for the deploy and for the sweep below: deploys that run meanwhile (a
    # model suite's, beside this test in make test) make zoo-* folders in /tmp and sweep the dead ones there.
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    command = deploy_command(repo, images * SERVED_COPIES, "--image-size", str(SIZE))
    run = signal_when_serving(
        command,
        signal.SIGKILL,
        ready_text="tritonserver ready",
        env={**deploy_env(), "TMPDIR": str(private)},
        timeout=240,
        settle=30,
    )
    assert "tritonserver" in names(run.served_by), run.output[-3000:]
    assert run.returncode == -signal.SIGKILL
    assert run.left_running == [], run.output[-3000:]
    left_behind = set(private.glob("zoo-*"))
    assert left_behind, "the killed deploy left no temporary folder: nothing for the sweep to show"
    assert left_behind <= set(sweep_stale_work_dirs())
    assert not any(p.exists() for p in left_behind)
