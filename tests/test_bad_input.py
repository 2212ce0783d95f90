"""The bad-input matrix (docs/ARCHITECTURE.md, "Quality bar"): every model's entry points, run as a user
runs them (``scripts/*.sh`` in the model's venv) on inputs they must refuse. Each row must end with

- an exit code other than 0,
- a last non-empty stderr line that names the problem (the row's ``expect`` substring),
- no "Traceback" anywhere in the output,
- nothing created, changed or removed in the results directory, the checkpoint cache, the working
  directory or the data the row reads (file names, sizes and mtimes before and after).

A row's arguments may name these placeholders (filled in per row, see ``_paths``):

    {sandbox}   the row's own folder (its ``files`` are written there first)
    {results}   the row's results directory (absent unless the row's ``files`` put something in it)
    {cache}     the row's checkpoint cache ($ZOO_CACHE; exists, empty)
    {missing}   a path that does not exist ("no_such_path")
    {text}      a text file ("notes.txt") given where a checkpoint is expected
    {foreign}   another network's PyTorch checkpoint ("resnet18_checkpoint.pt": torchvision ResNet-18
                weights under "model")
    {recipe}    a recipe file the row's ``recipe`` text is written to
    {coco} {numbers} {criteo} {mx_digits} {tf_digits}   tiny prepared datasets (COCO-format shapes,
                number words, Criteo-format rows, scikit-learn's digits as RecordIO and TFRecords), made
                once per session; {mx_truncated} {tf_truncated} {tf_missing_shard} {tf_five_classes}
                damaged copies (see _damaged_copies)
    {bert_vocab} {bert_data} {bert_truncated} {squad} {squad_no_answer} {squad_past_context}
    {wiki_unfinished}   BERT's (see BERT_FIXTURES)

Every model directory has rows (tests/test_contract.py fails one without them); they live in
``tests/bad_input_rows/<framework>_<model>.py``, one module per model, and a new model adds its own. Rows run in parallel on a few threads, each with its own sandbox.
"""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from bad_input_rows import ROWS, Row
from bad_input_rows.mxnet_resnet50 import MX_R50
from bad_input_rows.pytorch_bert import BERT
from bad_input_rows.pytorch_dlrm import DLRM
from bad_input_rows.pytorch_maskrcnn import MASKRCNN
from bad_input_rows.pytorch_transformer import TRANSFORMER
from bad_input_rows.tensorflow_resnet50 import TF_R50
from zoo_tree import ROOT, model_env, venv_bin

# --------------------------------------------------------------------------------------- the harness

# Tiny datasets and files the rows read, made once per session in the PyTorch venv.
FIXTURES = r"""
import sys
from pathlib import Path

import torch
import torchvision

root = Path(sys.argv[1])
for model in sys.argv[2:]:
    sys.path.insert(0, model)
(root / "notes.txt").write_text("these are notes, not weights\n")
net = torchvision.models.resnet18(num_classes=10)
torch.save({"model": net.state_dict(), "epoch": 3}, root / "resnet18_checkpoint.pt")

from maskrcnn.shapes import make_shapes_coco
make_shapes_coco(root / "coco", images=4, size=64, max_objects=2, seed=0, split="train")
make_shapes_coco(root / "coco", images=2, size=64, max_objects=2, seed=1, split="val")

from transformer.data import make_numbers
make_numbers(root / "numbers", train=200, valid=20, test=20, vocab_size=120)

from dlrm.download import write_synthetic
write_synthetic(root / "criteo", train_rows=1024, val_rows=512, seed=0)
"""


# BERT's: a WordPiece vocabulary and packed shards of real English text, the same shards with one cut
# in half, SQuAD folders (a good one, a question without answers, an answer past its context) and a
# Wikipedia extraction killed midway (text files, no completion marker).
BERT_FIXTURES = r"""
import json
import shutil
import sys
from pathlib import Path

from zoo.data.bert_prepare import main as bert_data

root = Path(sys.argv[1])
licenses = Path("/usr/share/common-licenses")
bert_data(["vocab", "--data-dir", str(root / "bert_vocab"), "--train", str(licenses), "--vocab-size", "1000"])
bert_data(["prepare", "--input", str(licenses), "--vocab", str(root / "bert_vocab" / "vocab.txt"),
           "--data-dir", str(root / "bert_data"), "--shard-size", "150", "--workers", "1"])
shutil.copytree(root / "bert_data", root / "bert_truncated")
shard = sorted((root / "bert_truncated").glob("shard_*.npz"))[1]
shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])

context = "The quick brown fox jumps over the lazy dog near the river bank."
good = [{"text": "the lazy dog", "answer_start": context.index("the lazy dog")}]
def squad(answers):
    question = {"id": "q7", "question": "What does the fox jump over?", "answers": answers}
    return {"version": "1.1", "data": [{"title": "fox", "paragraphs": [{"context": context, "qas": [question]}]}]}
for name, answers in [("squad", good), ("squad_no_answer", []),
                      ("squad_past_context", [{"text": "far", "answer_start": 200}])]:
    (root / name).mkdir()
    (root / name / "train-v1.1.json").write_text(json.dumps(squad(answers)))
    (root / name / "dev-v1.1.json").write_text(json.dumps(squad(good)))

wiki = root / "wiki_unfinished"
wiki.mkdir()
(wiki / "wiki_00.txt").write_text((licenses / "GPL-3").read_text()[:5000])
(wiki / "wiki_01.txt.tmp").write_text("half an article")
"""


def _damaged_copies(root: Path) -> None:
    """Copies of the MXNet and TensorFlow digits with one fault each (their manifest.json kept: it no
    longer matches the damaged file)."""
    import json
    import shutil

    def cut_in_half(path: Path) -> None:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    shutil.copytree(root / "mx_digits", root / "mx_truncated")
    cut_in_half(root / "mx_truncated" / "train.rec")
    shutil.copytree(root / "tf_digits", root / "tf_truncated")
    cut_in_half(sorted((root / "tf_truncated").glob("train-*-of-*"))[1])
    shutil.copytree(root / "tf_digits", root / "tf_missing_shard")
    sorted((root / "tf_missing_shard").glob("train-*-of-*"))[-1].unlink()
    shutil.copytree(root / "tf_digits", root / "tf_five_classes")
    listing = root / "tf_five_classes" / "dataset.json"
    dataset = json.loads(listing.read_text())
    dataset["classes"] = dataset["classes"][:5]
    listing.write_text(json.dumps(dataset))


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory) -> dict[str, Path]:
    """{placeholder: path} of the files and datasets rows read, made by four processes side by side."""
    root = tmp_path_factory.mktemp("bad_input_fixtures")
    torch_python = str(venv_bin(ROOT / MASKRCNN) / "python")
    models = [str(ROOT / m) for m in (MASKRCNN, TRANSFORMER, DLRM)]
    digits = {
        MX_R50: ["--digits", "--data-dir", str(root / "mx_digits")],
        TF_R50: ["--digits", "--data-dir", str(root / "tf_digits"), "--workers", "1"],
    }
    commands = [
        ([torch_python, "-c", FIXTURES, str(root), *models], model_env(ROOT / MASKRCNN)),
        ([torch_python, "-c", BERT_FIXTURES, str(root)], model_env(ROOT / BERT)),
        *[
            (["bash", str(ROOT / model / "scripts" / "download_data.sh"), *args], model_env(ROOT / model))
            for model, args in digits.items()
        ],
    ]
    makers = [
        subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        for command, env in commands
    ]
    for maker in makers:
        _, stderr = maker.communicate(timeout=300)
        assert maker.returncode == 0, f"{maker.args}: {stderr[-3000:]}"
    _damaged_copies(root)
    names = ["coco", "numbers", "criteo", "bert_data", "bert_truncated", "squad", "squad_no_answer"]
    names += ["squad_past_context", "wiki_unfinished", "mx_digits", "mx_truncated", "tf_digits"]
    names += ["tf_truncated", "tf_missing_shard", "tf_five_classes"]
    return {
        "text": root / "notes.txt",
        "foreign": root / "resnet18_checkpoint.pt",
        "bert_vocab": root / "bert_vocab" / "vocab.txt",
        **{name: root / name for name in names},
    }


def snapshot(paths) -> dict:
    """{path: (size, mtime_ns)} of every file and folder under ``paths`` (a folder's size is None)."""
    seen = {}
    for top in paths:
        top = Path(top)
        if not top.exists():
            continue
        for path in [top, *top.rglob("*")]:
            try:
                stat = path.lstat()
            except FileNotFoundError:  # removed while the folder was listed
                continue
            seen[str(path)] = (None if path.is_dir() else stat.st_size, stat.st_mtime_ns)
    return seen


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    changed: list  # paths created, changed or removed by the run
    seconds: float


def _paths(row: Row, sandbox: Path, fixtures: dict) -> dict:
    paths = {name: str(path) for name, path in fixtures.items()}
    paths.update(
        results=str(sandbox / "results"),
        cache=str(sandbox / "cache"),
        missing=str(sandbox / "no_such_path"),
        recipe=str(sandbox / "recipe.yaml"),
        sandbox=str(sandbox),
    )
    return paths


def run_row(row: Row, sandbox: Path, fixtures: dict) -> Outcome:
    """Run ``row`` in ``sandbox`` (its working directory); what it changed under the watched paths."""
    sandbox.mkdir(parents=True)
    (sandbox / "cache").mkdir()
    (sandbox / "work").mkdir()
    paths = _paths(row, sandbox, fixtures)
    if row.recipe is not None:
        Path(paths["recipe"]).write_text(row.recipe)
    for relative, text in (row.files or {}).items():
        (sandbox / relative).parent.mkdir(parents=True, exist_ok=True)
        (sandbox / relative).write_text(text)
    args = [arg.format(**paths) for arg in row.args]
    env = model_env(ROOT / row.model)
    env.update(ZOO_CACHE=paths["cache"], RESULTS_DIR=paths["results"], OMP_NUM_THREADS="1")
    env.pop("DATA_DIR", None)
    watched = [sandbox] + [fixtures[name] for name in fixtures if "{" + name + "}" in " ".join(row.args)]
    before = snapshot(watched)
    script = ROOT / row.model / "scripts" / row.script
    began = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", str(script), *args],
            cwd=sandbox / "work",
            env=env,
            capture_output=True,
            text=True,
            timeout=150,
        )
    except subprocess.TimeoutExpired as e:
        return Outcome(-1, str(e.stdout), f"timed out after {e.timeout} s", [], e.timeout)
    after = snapshot(watched)
    changed = sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))
    return Outcome(done.returncode, done.stdout, done.stderr, changed, time.monotonic() - began)


@pytest.fixture(scope="module")
def outcomes(request, fixtures, tmp_path_factory):
    """{row id: Future of its Outcome}: every selected row submitted at once, run three at a time in
    the tests' order, so that each test waits for its own row only."""
    selected = [
        item.callspec.params["row"]
        for item in request.session.items
        if getattr(item, "callspec", None) and isinstance(item.callspec.params.get("row"), Row)
    ]
    root = tmp_path_factory.mktemp("bad_input_rows")
    pool = ThreadPoolExecutor(max_workers=3)
    yield {row.id: pool.submit(run_row, row, root / row.id, fixtures) for row in selected}
    pool.shutdown(cancel_futures=True)


def test_rows_have_unique_ids():
    ids = [row.id for row in ROWS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_bad_input(row, outcomes):
    outcome = outcomes[row.id].result()
    shown = f"({outcome.seconds:.1f} s) {row.script} {' '.join(row.args)}\n--- stdout\n{outcome.stdout[-1500:]}\n--- stderr\n{outcome.stderr[-3000:]}"
    assert outcome.returncode != 0, f"exit 0\n{shown}"
    assert "Traceback" not in outcome.stdout + outcome.stderr, shown
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    for expected in (row.expect,) if isinstance(row.expect, str) else row.expect:
        assert expected in last, f"last stderr line {last!r} lacks {expected!r}\n{shown}"
    assert not outcome.changed, f"changed on failure: {outcome.changed}\n{shown}"
