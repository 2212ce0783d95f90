"""Every script answers --help at once: the arguments are parsed before the framework is imported
(docs/ARCHITECTURE.md, "The command line"). Each model's every scripts/*.sh --help runs in its framework's
venv with PYTHONPROFILEIMPORTTIME=1, so python lists every module it imported on stderr, and the list must
hold no framework. No wall-time assertion: the import list is what makes --help slow or fast."""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from zoo_tree import model_dirs, model_env, model_id

# Packages whose import takes seconds (a framework, or a library that loads one).
HEAVY = {
    "torch", "torchvision", "torchaudio", "torchrec", "tensorflow", "keras", "tf_keras", "mxnet",
    "transformers", "timm", "monai", "onnx", "onnxruntime", "tf2onnx", "horovod", "jax", "sklearn", "scipy",
    "matplotlib", "pandas",
}  # fmt: skip
IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$", re.M)


def imported_modules(stderr: str) -> set[str]:
    """The modules python -X importtime reported."""
    return set(IMPORT_LINE.findall(stderr))


def heavy_imports(stderr: str) -> list[str]:
    return sorted({name for name in imported_modules(stderr) if name.split(".")[0] in HEAVY})


def run_help(script, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script), "--help"], capture_output=True, text=True, timeout=300,
        env={**env, "PYTHONPROFILEIMPORTTIME": "1", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip


def test_the_import_list_is_read():
    """The parser of python's import-time lines finds nested imports and a framework among them."""
    stderr = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       412 |        412 |   _io\n"
        "import time:      2113 |    4021312 |     torch._C\n"
        "import time:      9000 |    4090000 | torch\n"
        "usage: x\n"
    )
    assert imported_modules(stderr) == {"_io", "torch._C", "torch"}
    assert heavy_imports(stderr) == ["torch", "torch._C"]
    assert heavy_imports(stderr.replace("torch", "zoo")) == []


MODELS = model_dirs()


@pytest.fixture(scope="module")
def help_runs():
    """{script path: CompletedProcess of `script --help`} of every model, three at a time."""
    jobs = [(s, model_env(m)) for m in MODELS for s in sorted((m / "scripts").glob("*.sh"))]
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip([s for s, _ in jobs], pool.map(lambda job: run_help(*job), jobs), strict=True))


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_help_parses_before_the_framework_is_imported(model_dir, help_runs):
    scripts = sorted((model_dir / "scripts").glob("*.sh"))
    assert scripts, f"{model_id(model_dir)} has no scripts"
    for script in scripts:
        proc = help_runs[script]
        name = f"{model_id(model_dir)}/scripts/{script.name}"
        assert proc.returncode == 0, f"{name} --help exited {proc.returncode}: {proc.stderr[-800:]}"
        text = proc.stdout + "\n".join(
            line for line in proc.stderr.splitlines() if not line.startswith("import time:")
        )
        assert "usage" in text.lower(), f"{name} --help printed no usage"
        assert not heavy_imports(proc.stderr), f"{name} --help imported {heavy_imports(proc.stderr)}"
