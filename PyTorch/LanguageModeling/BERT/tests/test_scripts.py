"""The user-facing scripts, run as a user runs them (bash, venv python first on PATH)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

MODEL_DIR = Path(__file__).resolve().parents[1]


def sh(script, *args, timeout=300, threads=1):
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        OMP_NUM_THREADS=str(threads),
    )
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        ["bash", str(MODEL_DIR / "scripts" / script), *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_data_prepare_and_train_through_the_scripts(tmp_path, english_text, tiny_vocab):
    proc = sh(
        "download_data.sh",
        "prepare",
        "--input",
        english_text,
        "--vocab",
        tiny_vocab,
        "--data-dir",
        tmp_path / "d",
        "--max-seq",
        64,
        "--workers",
        1,
    )
    assert proc.returncode == 0, proc.stderr
    assert "samples holding" in proc.stdout
    proc = sh(
        "train.sh", "--gpus", 1, "--recipe", MODEL_DIR / "configs" / "pretrain_tiny_cpu.yaml", "--data-dir", tmp_path / "d",
        "--results-dir", tmp_path / "r", "--max-seq", 64, "--steps", 3, "--log-every", 1, "--device", "cpu",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "r" / "model.pt").is_file()


TINY = MODEL_DIR / "configs" / "pretrain_tiny_cpu.yaml"
TINY_BENCH = ("--recipe", TINY, "--device", "cpu", "--iters", 3, "--warmup", 1, "--windows", 1)


@pytest.mark.parametrize("extra", [(), ("--amp", "bf16", "--set", "weights=bf16", "--set", "compile=true")])
def test_benchmark_times_the_recipe_step_on_cpu(tmp_path, extra):
    proc = sh("benchmark.sh", *TINY_BENCH, "--vocab-size", 2000, "--output", tmp_path / "bench.json", *extra)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ours / transformers:" in proc.stdout
    report = json.loads((tmp_path / "bench.json").read_text())
    assert [r["model"] for r in report["results"]] == ["ours", "hf"]
    assert all(r["sequences_per_s"] > 0 for r in report["results"])
    # same initial weights and data: both compute the same loss (ours in bf16 weights too)
    losses = [r["first_loss"] for r in report["results"]]
    assert abs(losses[0] - losses[1]) < 0.05
    ours, hf = report["results"]
    # the levers are the recipe's keys, read back from what ran
    assert ours["weights"] == ("bf16 + fp32 masters" if extra else "fp32") and hf["weights"] == "fp32"
    assert (ours["compile"], hf["compile"]) == (("default", "default") if extra else (None, None))
    assert ours["precision"] == hf["precision"] == ("bf16" if extra else "fp32")
    assert report["meta"]["overrides"] == list(extra[3::2])


def test_benchmark_packs_real_text_against_padding(tmp_path):
    proc = sh("benchmark.sh", *TINY_BENCH, "--set", "max_seq=64", "--set", "max_predictions=10", "--text",
              "--accumulation", 2, "--output", tmp_path / "bench.json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((tmp_path / "bench.json").read_text())
    packed, padded = report["meta"]["data"]["packed"], report["meta"]["data"]["padded"]
    assert packed["sequences"] == padded["sequences"] and padded["samples"] == padded["sequences"]
    assert packed["padding_fraction"] < 0.05 < 0.2 < padded["padding_fraction"]
    assert "padding: " in proc.stdout and " of tokens packed" in proc.stdout
    ours, hf = report["results"]
    assert (ours["data"], hf["data"], ours["seq"]) == ("packed", "padded", 64)
    assert ours["accumulation"] == hf["accumulation"] == 2  # both sum two micro-batches per optimizer step


def test_benchmark_gpus_times_the_recipe_step_on_one_and_two_processes(tmp_path):
    """The scaling mode (zoo.scaling): one launch per process count through train.sh's launcher, the
    replicas' weights equal after the timed steps."""
    report = tmp_path / "scaling.json"
    short = (
        "--set",
        "max_seq=32",
        "--set",
        "max_predictions=5",
    )  # two launches of two processes: keep them quick
    proc = sh("benchmark.sh", "--gpus", 2, "--recipe", TINY, "--window-seconds", 0.2, "--windows", 1,
              "--warmup", 1, "--set", "run.accumulation=2", *short, "--output", report, threads=1)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(report.read_text())["results"]
    assert [row["gpus"] for row in rows] == [1, 2]
    assert [row["replicas_agree"] for row in rows] == [None, True]
    assert all(row["batch_per_gpu"] == 8 and row["accumulation"] == 2 for row in rows)
    assert all(row["unit"] == "seq/s" and row["throughput"] > 0 for row in rows)
    assert "scripts/benchmark.sh --gpus 2" in proc.stdout and "equal" in proc.stdout


def test_two_nodes_log_the_losses_of_one_node(tmp_path):
    """check_two_nodes.sh: 1 node x 2 processes against 2 nodes x 1 process (two train.sh launches with
    --nnodes 2 --node-rank 0/1, gloo): equal losses step for step."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = sh("check_two_nodes.sh", "--gpus-per-node", 1, "--results-dir", tmp_path, "--port", port, "--rtol", 0,
              "--", "--recipe", TINY, "--synthetic", "--max-seq", 32, "--set", "max_predictions=5", "--steps", 3,
              "--device", "cpu", threads=1)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    assert "same losses at all 3 steps (--rtol 0)" in proc.stdout


def test_evaluate_scores_a_predictions_file(tmp_path):
    data = {
        "data": [{"paragraphs": [{"context": "c", "qas": [{"id": "1", "answers": [{"text": "Paris"}]}]}]}]
    }
    (tmp_path / "dev.json").write_text(json.dumps(data))
    (tmp_path / "pred.json").write_text(json.dumps({"1": "paris."}))
    proc = sh("evaluate.sh", "--score", tmp_path / "dev.json", tmp_path / "pred.json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"exact_match": 100.0, "f1": 100.0}


def test_train_sh_help_shows_both_entry_points_in_the_shared_vocabulary():
    proc = sh("train.sh", "--help")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for flag in ("--gpus", "NGPU", "--recipe", "--set", "--amp {bf16,fp16,fp32}", "--resume", "--data-dir",
                 "--results-dir", "--target-mlm-accuracy", "--target-f1"):  # fmt: skip
        assert flag in text, flag
    assert "usage: python -m bert.pretrain" in text and "usage: python -m bert.finetune_squad" in text


def test_train_sh_squad_fine_tunes_and_scores(tmp_path, tiny_vocab):
    context = "Everyone is permitted to copy and distribute verbatim copies of this license document."
    question = {"question": "Who is permitted to copy?", "answers": [{"text": "Everyone", "answer_start": 0}]}
    paragraph = {"context": context, "qas": [{"id": f"q{i}", **question} for i in range(32)]}
    data = tmp_path / "squad"
    data.mkdir()
    for name in ("train-v1.1.json", "dev-v1.1.json"):
        (data / name).write_text(json.dumps({"version": "1.1", "data": [{"paragraphs": [paragraph]}]}))
    proc = sh(
        "train.sh", "squad", "--gpus", 1, "--recipe", MODEL_DIR / "configs" / "squad_tiny_cpu.yaml",
        "--data-dir", data, "--vocab", tiny_vocab, "--results-dir", tmp_path / "r", "--device", "cpu",
        "--max-steps", 2, "--amp", "fp32",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    scores = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(scores) == {"exact_match", "f1"} and 0 <= scores["f1"] <= 100
    assert (tmp_path / "r" / "squad_model.pt").is_file() and (tmp_path / "r" / "predictions.json").is_file()


def test_script_errors_are_one_line(tmp_path):
    proc = sh("train.sh", "--gpus", 1, "--data-dir", tmp_path, "--device", "cpu")
    assert proc.returncode != 0
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith("has no metadata.json: prepare it with scripts/download_data.sh")
    )
    proc = sh("train.sh", "--gpus", 1, "--no-resume")
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == ["error: --no-resume was renamed: use --resume none"]
    for command in ("phase1", "squad"):  # the shell chain and the python sub-commands alike
        proc = sh("download_data.sh", command, "--out", tmp_path)
        assert proc.returncode != 0
        assert proc.stderr.strip().splitlines() == ["error: --out was renamed: use --data-dir"]
    proc = sh("download_checkpoint.sh", "pull", "no-such-checkpoint")
    assert proc.returncode != 0 and "unknown checkpoint 'no-such-checkpoint'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = sh("download_checkpoint.sh", "hf-bert-large-uncased")  # the old spelling names the new one
    assert proc.returncode != 0
    assert proc.stderr.strip() == (
        "error: 'hf-bert-large-uncased' is not a command: "
        "use 'scripts/download_checkpoint.sh pull hf-bert-large-uncased'"
    )


def test_download_checkpoint_lists_the_registry():
    proc = sh("download_checkpoint.sh", "list")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()[1:]}
    assert rows["hf-bert-large-uncased"][1:3] == ["safetensors", "-"]
    assert rows["hf-bert-large-uncased-wwm-squad"][3:7] == ["f1", "93.15", "exact_match", "86.91"]
    assert rows["google-bert-large-uncased"][1] == "zip"


def test_google_zip_unpacks_to_its_checkpoint_prefix(tmp_path):
    import zipfile

    from zoo.checkpoints import CheckpointError
    from zoo.data.bert import unpack_bert_tf_zip

    archive = tmp_path / "uncased_L-2_H-128_A-2.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001", "vocab.txt"):
            zf.writestr(f"uncased_L-2_H-128_A-2/{name}", name)
    prefix = unpack_bert_tf_zip(archive)
    assert prefix == tmp_path / "uncased_L-2_H-128_A-2" / "uncased_L-2_H-128_A-2" / "bert_model.ckpt"
    assert (prefix.parent / "vocab.txt").read_text() == "vocab.txt"
    assert unpack_bert_tf_zip(archive) == prefix  # already unpacked: the same prefix, nothing extracted again
    (tmp_path / "bad.zip").write_text("<html>Not Found</html>")
    with pytest.raises(CheckpointError, match="not a zip archive"):
        unpack_bert_tf_zip(tmp_path / "bad.zip")
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad.partial").exists()
