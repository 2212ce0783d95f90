"""The model-directory contract of docs/ARCHITECTURE.md ("One model directory" and "The command
line"), checked for every model in the tree. CONTRIBUTING.md lists what a new model must pass here."""

from __future__ import annotations

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from zoo_tree import model_dirs, model_env, model_id

REQUIRED_FILES = ["README.md", "Dockerfile", "requirements.txt"]
REQUIRED_SCRIPTS = [
    "download_data.sh",
    "download_checkpoint.sh",
    "train.sh",
    "evaluate.sh",
    "benchmark.sh",
    "export_triton.sh",
    "deploy_triton.sh",
]
MODELS = model_dirs()


def test_there_are_models():
    assert MODELS, "no <Framework>/<Domain>/<Model>/README.md found"


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_required_layout(model_dir):
    missing = [f for f in REQUIRED_FILES if not (model_dir / f).is_file()]
    missing += [f"scripts/{s}" for s in REQUIRED_SCRIPTS if not (model_dir / "scripts" / s).is_file()]
    if not list(model_dir.glob("configs/*.yaml")):
        missing.append("configs/*.yaml")
    if not list(model_dir.glob("tests/test_*.py")):
        missing.append("tests/test_*.py")
    packages = [p.parent for p in model_dir.glob("*/__init__.py") if p.parent.name != "tests"]
    if not packages:
        missing.append("<package>/__init__.py")
    assert not missing, f"{model_id(model_dir)} lacks {missing}"


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_scripts_are_executable(model_dir):
    scripts = sorted((model_dir / "scripts").glob("*.sh"))
    not_executable = [s.name for s in scripts if not os.access(s, os.X_OK)]
    assert not not_executable, f"not executable: {not_executable}"
    no_shebang = [s.name for s in scripts if not s.read_text().startswith("#!")]
    assert not no_shebang, f"no #! line: {no_shebang}"


# What each entry point's --help must show (docs/ARCHITECTURE.md, "The command line").
AMP = "--amp {bf16,fp16,fp32}"
REQUIRED_FLAGS = {
    "train.sh": [
        "--recipe",
        "--set",
        AMP,
        "--resume",
        "--data-dir",
        "--results-dir",
        "--target-",
        "--gpus",
        "NGPU",
    ],
    "evaluate.sh": ["--data-dir", AMP],
    "benchmark.sh": [AMP],
    "download_data.sh": ["--data-dir"],
    "download_checkpoint.sh": ["list", "pull NAME"],
}
OLD_SPELLINGS = ["--config", "--precision", "--no-resume", "--target-accuracy"]


def _help(script, env):
    proc = subprocess.run(
        ["bash", str(script), "--help"], capture_output=True, text=True, env=env, timeout=240
    )
    return script.name, proc


@pytest.fixture(scope="module")
def help_texts():
    """{model id: {script name: CompletedProcess of `script --help`}}, each script run once."""
    cache = {}

    def get(model_dir):
        key = model_id(model_dir)
        if key not in cache:
            env = model_env(model_dir)
            scripts = sorted((model_dir / "scripts").glob("*.sh"))
            with ThreadPoolExecutor(max_workers=2) as pool:
                cache[key] = dict(pool.map(lambda s: _help(s, env), scripts))
        return cache[key]

    return get


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_every_script_answers_help(model_dir, help_texts):
    for name, proc in help_texts(model_dir).items():
        assert proc.returncode == 0, f"{name} --help exited {proc.returncode}: {proc.stderr[-800:]}"
        assert "usage" in (proc.stdout + proc.stderr).lower(), f"{name} --help printed no usage"


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_entry_points_speak_the_shared_vocabulary(model_dir, help_texts):
    texts = {name: proc.stdout + proc.stderr for name, proc in help_texts(model_dir).items()}
    missing = {
        script: [flag for flag in flags if flag not in texts.get(script, "")]
        for script, flags in REQUIRED_FLAGS.items()
    }
    missing = {script: flags for script, flags in missing.items() if flags}
    assert not missing, f"{model_id(model_dir)}: --help lacks {missing}"
    for name, text in texts.items():
        old = [flag for flag in OLD_SPELLINGS if re.search(rf"{flag}(?![-\w])", text)]
        assert not old, f"{name} --help still offers {old}"
        for choices in re.findall(r"--amp \{([^}]*)\}", text):
            assert choices == "bf16,fp16,fp32", f"{name}: --amp {{{choices}}} (want {{bf16,fp16,fp32}})"


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_dockerfile_builds_on_the_framework_base(model_dir):
    text = (model_dir / "Dockerfile").read_text()
    framework = model_id(model_dir).split(os.sep)[0].lower()
    assert f"ARG BASE_IMAGE=zoo/{framework}:" in text, (
        "Dockerfile must take ARG BASE_IMAGE=zoo/<framework>:<tag>"
    )
    assert "FROM ${BASE_IMAGE}" in text


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_old_spellings_end_in_one_line_naming_the_new(model_dir):
    proc = subprocess.run(
        ["bash", str(model_dir / "scripts" / "train.sh"), "--config", "recipe.yaml"],
        capture_output=True,
        text=True,
        env=model_env(model_dir),
        timeout=240,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "--config" in last and "--recipe" in last, proc.stderr[-800:]


# Helpers that live once in common/zoo (docs/ARCHITECTURE.md, "The common layer"); a model that
# defines its own is keeping a copy.
SHARED_HELPERS = re.compile(
    r"^\s*(def (init_distributed|setup_distributed|autocast\w*|seed_everything|parameter_groups|"
    r"replicas_agree|check_replicas_agree|percentiles|time_loop|time_windows|recipe_flag|"
    r"gather_objects|gather_rng|gather_results|merge_rank_detections|broadcast_flag|triton_interpreted)\(|"
    r"class (Meter|TritonPythonModel|AsyncScorer)\b)",
    re.M,
)


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_no_copies_of_shared_helpers(model_dir):
    copies = [
        f"{path.relative_to(model_dir)}: {match.group(1).strip()}"
        for path in sorted(model_dir.rglob("*.py"))
        for match in SHARED_HELPERS.finditer(path.read_text())
    ]
    assert not copies, f"{model_id(model_dir)} defines its own copy of a zoo helper: {copies}"


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_every_main_reports_user_errors_in_one_line(model_dir):
    """A module's ``main`` runs under ``zoo.cli.entry_point``: a zoo.errors.UserError raised anywhere
    below it ends in one ``error: ...`` line, not a traceback."""
    bare = [
        str(path.relative_to(model_dir))
        for path in sorted(model_dir.rglob("*.py"))
        if "tests" not in path.relative_to(model_dir).parts
        for match in re.finditer(r"(.*)\n(?:async )?def main\(", path.read_text())
        if match.group(1).strip() != "@entry_point"
    ]
    assert not bare, (
        f"{model_id(model_dir)}: main without @entry_point (from zoo.cli import entry_point) in {bare}"
    )


# Entry points every model's rows in the bad-input matrix (tests/test_bad_input.py) must cover.
BAD_INPUT_SCRIPTS = ["train.sh", "evaluate.sh", "download_checkpoint.sh"]


@pytest.mark.parametrize("model_dir", MODELS, ids=model_id)
def test_bad_input_matrix_has_rows_for_the_model(model_dir):
    from bad_input_rows import ROWS

    covered = {row.script for row in ROWS if row.model == model_id(model_dir)}
    missing = [script for script in BAD_INPUT_SCRIPTS if script not in covered]
    assert not missing, (
        f"{model_id(model_dir)} has no rows in tests/bad_input_rows/ for {missing}: add its bad inputs to its module there"
    )
