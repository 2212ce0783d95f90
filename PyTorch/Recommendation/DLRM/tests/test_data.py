import numpy as np
import pytest
from dlrm.data import Batches, Shard, Split, expand_categorical, read_meta, write_shard
from dlrm.download import preprocess, write_raw_tsv
from dlrm_testing import TINY, run_module
from zoo.errors import UserError

GOOD = "\t".join(["1"] + ["3"] * 13 + ["68fd1e64"] * 26)


def test_shard_roundtrip_and_rank_slices(tmp_path):
    labels = np.arange(10, dtype=np.float32)
    dense = np.arange(130, dtype=np.float32).reshape(10, 13)
    cats = np.arange(260, dtype=np.int32).reshape(10, 26)
    (tmp_path / "train").mkdir()
    write_shard(tmp_path / "train" / "part-00000.bin", labels[:6], dense[:6], cats[:6])
    write_shard(tmp_path / "train" / "part-00001.bin", labels[6:], dense[6:], cats[6:])
    split = Split(tmp_path, "train")
    assert split.rows == 10
    got = split.batch(4, 9)  # across the shard boundary
    np.testing.assert_array_equal(got[0], labels[4:9])
    np.testing.assert_array_equal(got[2], cats[4:9])
    rank1 = Batches(split, 4, 1, 2, [1000] * 26, [1] * 26, drop_last=False)
    assert rank1.count == 3
    lab, _, sparse, weight = rank1.get(2)  # rows 8..11 of 10: rank 1 gets 10, 11 -> padding
    assert weight.tolist() == [0, 0] and lab.tolist() == [0, 0]
    lab, _, sparse, weight = rank1.get(0)
    assert lab.tolist() == [2, 3] and weight.tolist() == [1, 1]
    assert sparse[0, 5].item() == cats[2, 5]


def test_multi_hot_expansion_is_per_table_and_in_range():
    cats = np.array([[5, 7]], np.int32)
    out = expand_categorical(cats, [10, 1000], [1, 3])
    assert out.shape == (1, 4)
    assert out[0, 0] == 5
    assert out[0, 1] == 7 and len(set(out[0, 1:].tolist())) == 3 and out.max() < 1000


def test_truncated_shard_is_a_one_line_error(tmp_path):
    path = tmp_path / "part-00000.bin"
    write_shard(path, np.zeros(8, np.float32), np.zeros((8, 13), np.float32), np.zeros((8, 26), np.int32))
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(UserError, match=r"part-00000.bin: truncated or corrupt shard"):
        Shard(path)


@pytest.mark.parametrize(
    "line, message",
    [
        (
            "\t".join(["1"] + ["3"] * 12 + ["68fd1e64"] * 26),
            r"train\.txt:2: 39 tab-separated columns, Criteo has 40",
        ),
        (
            "\t".join(["1", "x"] + ["3"] * 12 + ["68fd1e64"] * 26),
            r"train\.txt:2: non-numeric label or dense field",
        ),
        ("\t".join(["1"] + ["3"] * 13 + ["zz"] * 26), r"categorical field 'zz' is not hexadecimal"),
        (
            "\t".join(["7"] + ["3"] * 13 + ["68fd1e64"] * 26),
            r"train\.txt:2: label 7, Criteo's labels are 0 or 1",
        ),
    ],
)
def test_bad_raw_lines_are_one_line_errors(tmp_path, line, message):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "train.txt").write_text(GOOD + "\n" + line + "\n" + GOOD + "\n")
    with pytest.raises(UserError, match=message) as info:
        preprocess(raw, tmp_path / "out", categorical="hash", threshold=1, hash_rows=100)
    assert "\n" not in str(info.value)


def prepared(tmp_path, change_meta=None, change_shard=None):
    """A one-shard data folder of 6 rows as preparation leaves it (manifest included), then changed."""
    from dlrm.data import record_checked_shards, write_meta

    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    labels, dense, cats = np.ones(6, np.float32), np.ones((6, 13), np.float32), np.ones((6, 26), np.int32)
    if change_shard:
        change_shard(labels, dense, cats)
    write_shard(data / "train" / "part-00000.bin", labels, dense, cats)
    if not change_shard:
        record_checked_shards(data)
    write_meta(data, [10] * 26)
    if change_meta:
        change_meta(data / "meta.json")
    return data


def rewrite_meta(path, **fields):
    import json

    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


@pytest.mark.parametrize(
    "change_meta, change_shard, message",
    [
        (
            lambda p: rewrite_meta(p, num_embeddings=[10] * 20),
            None,
            "has 13 dense and 26 categorical columns, but",
        ),
        (lambda p: p.write_text('{"format": "dlrm-bin-1",'), None, r"meta.json is not JSON \("),
        (
            lambda p: rewrite_meta(p, num_embeddings=[10, 0]),
            None,
            "num_embeddings must be a list of table sizes",
        ),
        (lambda p: rewrite_meta(p, format="other"), None, "is not a dlrm-bin-1 description"),
        (
            None,
            lambda labels, dense, cats: labels.__setitem__(4, 7),
            r"row 4 has the label 7 \(labels are 0 or 1\)",
        ),
        (
            None,
            lambda labels, dense, cats: dense.__setitem__((2, 5), np.nan),
            "row 2 has a dense feature that is",
        ),
        (
            None,
            lambda labels, dense, cats: cats.__setitem__((3, 0), -1),
            "row 3 has a negative categorical id",
        ),
    ],
)
def test_data_that_does_not_fit_its_meta_or_labels_is_one_line(tmp_path, change_meta, change_shard, message):
    data = prepared(tmp_path, change_meta, change_shard)
    with pytest.raises(UserError, match=message) as info:
        Split(data, "train", read_meta(data))
    assert "\n" not in str(info.value)


def test_the_manifest_spares_a_prepared_shard_its_scan_until_it_changes(tmp_path):
    data = prepared(tmp_path)
    shard = data / "train" / "part-00000.bin"
    assert len(Split(data, "train", read_meta(data)).shards) == 1
    raw = bytearray(shard.read_bytes())
    raw[32:36] = np.float32(3).tobytes()  # the first label: 3, same size, new mtime
    shard.write_bytes(bytes(raw))
    with pytest.raises(UserError, match="row 0 has the label 3"):
        Split(data, "train", read_meta(data))


def test_bad_input_through_the_command_line_is_one_line(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "day_0").write_text(GOOD + "\n")
    (raw / "day_1").write_text("1\t2\n")
    done = run_module("dlrm.download", "--raw-dir", str(raw), "--data-dir", str(tmp_path / "d"), check=False)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"error: {raw / 'day_1'}:1: 2 tab-separated columns, Criteo has 40"
    ]


def test_planted_click_model_learned_from_raw_criteo_files(tmp_path):
    """Generated Criteo-format TSV -> thresholded vocabulary, last 1/7 validates -> AUC > 0.75."""
    from zoo.mlperf import check_log

    raw = tmp_path / "raw"
    raw.mkdir()
    write_raw_tsv(raw / "train.txt", 14000, seed=3)
    data = tmp_path / "data"
    preprocess(raw, data, categorical="threshold", threshold=2, hash_rows=0)
    meta = read_meta(data)
    assert meta["train_rows"] == 12000 and meta["val_rows"] == 2000
    assert all(rows <= 65 for rows in meta["num_embeddings"])
    results = tmp_path / "results"
    run_module(
        "dlrm.train",
        "--data-dir",
        str(data),
        "--results-dir",
        str(results),
        "--target-auc",
        "0.75",
        *TINY,
        "--epochs",
        "2",
        "--set",
        "run.eval_every=20 steps",
    )
    import json

    evals = [json.loads(x) for x in (results / "metrics.jsonl").read_text().splitlines()]
    aucs = [r["metrics"]["auc"] for r in evals if r["phase"] == "eval"]
    assert aucs[-1] > 0.75, aucs
    assert list((results / "tensorboard").iterdir())
    check_log(results / "mlperf.log", "dlrm_dcnv2")
    assert '"status": "success"' in (results / "mlperf.log").read_text()
