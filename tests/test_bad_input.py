"""The bad-input matrix (docs/ARCHITECTURE.md, "Quality bar"): every model's entry points, run as a user
runs them (``scripts/*.sh`` in the model's venv) on inputs they must refuse. Each row must end with

- an exit code other than 0,
- a last non-empty stderr line that names the problem (the row's ``expect`` substring),
- no "Traceback" anywhere in the output,
- nothing created, changed or removed in the results directory, the checkpoint cache, the working
  directory or the data the row reads (file names, sizes and mtimes before and after; folders by
  name, so a folder a run made and removed again leaves its parent as it was).

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
    {wiki_unfinished}   BERT's (see BERT_FIXTURES); {bert_ids_beyond_vocab} {bert_lying_metadata}
                {bert_metadata_not_json} damaged copies of {bert_data} (see _damaged_copies)
    {numbers_offsets_reversed} {numbers_ids_beyond_vocab} {numbers_cut_shard} {criteo_meta_20_tables}
    {criteo_meta_not_json} {criteo_label_7} {criteo_nan_feature} {criteo_cut_shard}   damaged copies of
                {numbers} and {criteo}; {transformer_model} an untrained model.pt and its tokenizer.json
                (see FIXTURES)
    {tf_r50_cut_checkpoint} {tf_bert_cut_checkpoint} {mx_cut_states}   results directories whose
                training checkpoint lost the second half of a file (see TF_FIXTURES, MX_FIXTURES)
    {pulls}     registries (hdf5.yaml, savedmodel.yaml, mxnet-params.yaml) naming one digestless
                entry ``cut`` each, served from 127.0.0.1 cut in half (see pull_server)

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

# Damaged copies, one fault each: Transformer shards (offsets reversed, a token id past the vocabulary,
# cut in half), DLRM data (meta.json naming 20 of 26 tables or not JSON, a label of 7, a NaN feature,
# a shard cut in half); and an untrained Transformer model.pt with its tokenizer.json.
import json
import shutil

import numpy as np

def damaged(name, source, file):
    shutil.copytree(root / source, root / name)
    return root / name / file

def change_npz(path, change):
    arrays = dict(np.load(path))
    change(arrays)
    with open(path, "wb") as f:
        np.savez(f, **arrays)

def poke(path, offset, value):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(np.float32(value).tobytes())

def reverse_offsets(arrays):
    arrays["src_offsets"] = arrays["src_offsets"][::-1].copy()

change_npz(damaged("numbers_offsets_reversed", "numbers", "train.001.npz"), reverse_offsets)
change_npz(damaged("numbers_ids_beyond_vocab", "numbers", "train.001.npz"), lambda a: a["tgt"].put(5, 5000))
cut = damaged("numbers_cut_shard", "numbers", "train.001.npz")
cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
meta = damaged("criteo_meta_20_tables", "criteo", "meta.json")
meta.write_text(json.dumps({**json.loads(meta.read_text()), "num_embeddings": [65] * 20}))
damaged("criteo_meta_not_json", "criteo", "meta.json").write_text('{"format": "dlrm-bin-1",')
poke(damaged("criteo_label_7", "criteo", "train/part-00000.bin"), 32 + 4 * 5, 7)
poke(damaged("criteo_nan_feature", "criteo", "train/part-00000.bin"), 32 + 4 * 1024 + 4 * 40, float("nan"))
cut = damaged("criteo_cut_shard", "criteo", "train/part-00000.bin")
cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])

from transformer.data import load_tokenizer
from transformer.model import build_model
from transformer.train import save_model
from zoo.recipe import load_recipe

recipe = load_recipe(Path(sys.argv[3]) / "configs" / "numbers_cpu.yaml")
vocab_size = load_tokenizer(root / "numbers").get_vocab_size()
(root / "transformer_model").mkdir()
save_model(root / "transformer_model" / "model.pt", build_model(recipe["model"], vocab_size), recipe, vocab_size)
shutil.copy(root / "numbers" / "tokenizer.json", root / "transformer_model")
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


# The TensorFlow models' training checkpoints (zoo.tf's layout, state.json naming the model) whose
# variables' data file lost its second half; an HDF5 file and a SavedModel tarball cut the same way.
TF_FIXTURES = r"""
import io
import json
import sys
import tarfile
from pathlib import Path

import h5py
import numpy as np
import tensorflow as tf

root = Path(sys.argv[1])
def cut_in_half(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

states = {
    "tf_r50_cut_checkpoint": {"name": "resnet50_tf", "num_classes": 10, "image_size": 32},
    "tf_bert_cut_checkpoint": {"name": "TensorFlow BERT", "task": "pretraining", "config": {}, "nsp": False},
}
for folder, state in states.items():
    step = root / folder / "checkpoint" / "step-1"
    step.mkdir(parents=True)
    tf.train.Checkpoint(weights=tf.Variable(np.ones((64, 64), np.float32))).write(str(step / "variables"))
    (step / "state.json").write_text(json.dumps({**state, "step": 1, "epoch": 1, "recipe": {}}))
    (step.parent / "latest.json").write_text(json.dumps({"folder": "step-1", "kept": ["step-1"]}))
    cut_in_half(step / "variables.data-00000-of-00001")

pulls = root / "pulls"
pulls.mkdir(exist_ok=True)
with h5py.File(pulls / "cut.h5", "w") as f:
    f["weights"] = np.ones(4096, np.float32)
buffer = io.BytesIO()
with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
    info = tarfile.TarInfo("saved_model/variables/variables.data-00000-of-00001")
    payload = np.random.default_rng(0).bytes(16384)
    info.size = len(payload)
    archive.addfile(info, io.BytesIO(payload))
(pulls / "cut.tar.gz").write_bytes(buffer.getvalue())
for name in ("cut.h5", "cut.tar.gz"):
    cut_in_half(pulls / name)
"""


# MXNet ResNet-50's training checkpoint whose trainer.states lost its second half, and a .params file
# cut the same way.
MX_FIXTURES = r"""
import json
import sys
from pathlib import Path

import mxnet as mx

root = Path(sys.argv[1])
def cut_in_half(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

step = root / "mx_cut_states" / "checkpoint" / "step-1"
step.mkdir(parents=True)
net = mx.gluon.nn.Dense(3, in_units=4)
net.initialize()
trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
with mx.autograd.record():
    loss = net(mx.nd.ones((2, 4))).sum()
loss.backward()
trainer.step(2)
net.save_parameters(str(step / "model.params"))
trainer.save_states(str(step / "trainer.states"))
state = {"name": "resnet50_mx", "step": 1, "epoch": 1, "recipe": {}}
(step / "state.json").write_text(json.dumps(state))
(step.parent / "latest.json").write_text(json.dumps({"folder": "step-1", "kept": ["step-1"]}))
cut_in_half(step / "trainer.states")
(root / "pulls").mkdir(exist_ok=True)
mx.nd.save(str(root / "pulls" / "cut.params"), {"arg:weights": mx.nd.ones((64, 64))})
cut_in_half(root / "pulls" / "cut.params")
"""


@pytest.fixture(scope="session")
def pull_server(tmp_path_factory):
    """(folder, URL): an HTTP server on 127.0.0.1 serving the folder's files as they are (TF_FIXTURES and
    MX_FIXTURES put cut files there)."""
    import functools
    import http.server
    import threading

    folder = tmp_path_factory.mktemp("pulls_served")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _pull_registries(pulls: Path, served: Path, url: str) -> None:
    """Move the cut files to the server's folder; one registry per format, each naming its file ``cut``."""
    formats = {"cut.h5": "hdf5", "cut.tar.gz": "savedmodel", "cut.params": "mxnet-params"}
    for file_name, file_format in formats.items():
        (pulls / file_name).replace(served / file_name)
        (pulls / f"{file_format}.yaml").write_text(
            "checkpoints:\n"
            f"  - {{name: cut, url: '{url}/{file_name}', sha256: null, size: null, format: {file_format},"
            " framework: none, model: none}\n"
        )


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
    # BERT: a shard holding a token id past the vocabulary; a metadata.json naming a vocabulary smaller
    # than the one the shards were made with; a metadata.json that is not JSON
    import numpy as np

    shutil.copytree(root / "bert_data", root / "bert_ids_beyond_vocab")
    meta = json.loads((root / "bert_data" / "metadata.json").read_text())
    shard = root / "bert_ids_beyond_vocab" / meta["shards"][0]["file"]
    with np.load(shard) as f:
        arrays = {name: f[name] for name in f.files}
    arrays["input_ids"][0, 1] = meta["specials"]["vocab_size"] + 7
    with open(shard, "wb") as f:
        np.savez(f, **arrays)
    shutil.copytree(root / "bert_data", root / "bert_lying_metadata")
    meta["vocab_size"] = meta["specials"]["vocab_size"] = 50
    (root / "bert_lying_metadata" / "metadata.json").write_text(json.dumps(meta))
    shutil.copytree(root / "bert_data", root / "bert_metadata_not_json")
    (root / "bert_metadata_not_json" / "metadata.json").write_text('{"format": "zoo-bert-pretraining/v1",')


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory, pull_server) -> dict[str, Path]:
    """{placeholder: path} of the files and datasets rows read, made by six processes side by side."""
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
        ([str(venv_bin(ROOT / TF_R50) / "python"), "-c", TF_FIXTURES, str(root)], model_env(ROOT / TF_R50)),
        ([str(venv_bin(ROOT / MX_R50) / "python"), "-c", MX_FIXTURES, str(root)], model_env(ROOT / MX_R50)),
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
    _pull_registries(root / "pulls", *pull_server)
    names = ["coco", "numbers", "criteo", "bert_data", "bert_truncated", "squad", "squad_no_answer"]
    names += ["bert_ids_beyond_vocab", "bert_lying_metadata", "bert_metadata_not_json", "pulls"]
    names += ["tf_r50_cut_checkpoint", "tf_bert_cut_checkpoint", "mx_cut_states"]
    names += ["squad_past_context", "wiki_unfinished", "mx_digits", "mx_truncated", "tf_digits"]
    names += ["tf_truncated", "tf_missing_shard", "tf_five_classes"]
    names += ["numbers_offsets_reversed", "numbers_ids_beyond_vocab", "numbers_cut_shard"]
    names += ["transformer_model", "criteo_cut_shard"]
    names += ["criteo_meta_20_tables", "criteo_meta_not_json", "criteo_label_7", "criteo_nan_feature"]
    return {
        "text": root / "notes.txt",
        "foreign": root / "resnet18_checkpoint.pt",
        "bert_vocab": root / "bert_vocab" / "vocab.txt",
        **{name: root / name for name in names},
    }


def snapshot(paths) -> dict:
    """{path: (size, mtime_ns)} of every file under ``paths``, {path: (None, None)} of every folder."""
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
            # a folder by its existence: one whose entries were made and removed again is as it was
            seen[str(path)] = (None, None) if path.is_dir() else (stat.st_size, stat.st_mtime_ns)
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
    for relative, target in (row.links or {}).items():
        (sandbox / relative).symlink_to(target)
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
