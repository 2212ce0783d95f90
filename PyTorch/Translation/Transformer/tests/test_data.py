"""Prepared shards and text inputs: what a damaged or foreign file ends in (one line naming it)."""

import shutil

import numpy as np
import pytest
from transformer.data import Pairs, make_numbers, read_lines, read_shard
from zoo.errors import UserError


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return make_numbers(tmp_path_factory.mktemp("tiny"), train=40, valid=4, test=4, vocab_size=120)


def damaged(tmp_path, tiny_data, change):
    """A copy of ``tiny_data`` whose second train shard's arrays went through ``change``."""
    copy = tmp_path / "data"
    shutil.copytree(tiny_data, copy)
    shard = copy / "train.001.npz"
    arrays = dict(np.load(shard))
    change(arrays)
    np.savez(shard, **arrays)
    return copy, shard


def offsets_reversed(arrays):
    arrays["src_offsets"] = arrays["src_offsets"][::-1].copy()


def offsets_past_the_end(arrays):
    arrays["tgt_offsets"][-1] += 5


def id_beyond_the_vocabulary(arrays):
    arrays["tgt"][3] = 5000


def negative_id(arrays):
    arrays["src"][0] = -2


def one_sentence_lost(arrays):
    arrays["tgt_offsets"] = arrays["tgt_offsets"][:-1]
    arrays["tgt"] = arrays["tgt"][: arrays["tgt_offsets"][-1]]


@pytest.mark.parametrize(
    "change, message",
    [
        (offsets_reversed, "src_offsets do not cut its"),
        (offsets_past_the_end, "tgt_offsets do not cut its"),
        (id_beyond_the_vocabulary, "tgt token id 5000 is outside the vocabulary of 120"),
        (negative_id, "src holds the negative token id -2"),
        (one_sentence_lost, "source but"),
        (lambda arrays: arrays.pop("src_offsets"), "has no 'src_offsets' array"),
    ],
)
def test_a_damaged_shard_is_one_line_naming_it(tmp_path, tiny_data, change, message):
    data, shard = damaged(tmp_path, tiny_data, change)
    with pytest.raises(UserError, match=message) as e:
        Pairs(data, "train", vocab_size=120)
    assert str(shard) in str(e.value) and "\n" not in str(e.value)


def test_a_cut_shard_is_one_line_and_a_whole_one_reads(tmp_path, tiny_data):
    shard = tmp_path / "train.000.npz"
    whole = (tiny_data / "train.000.npz").read_bytes()
    shard.write_bytes(whole)
    src, tgt = read_shard(shard, vocab_size=120)
    assert len(src[1]) == len(tgt[1]) > 1 and src[1][-1] == len(src[0])
    shard.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(UserError, match=r"train.000.npz cannot be read"):
        read_shard(shard)


def test_inputs_must_be_text(tmp_path, tiny_data):
    (tmp_path / "ok.en").write_text("twenty-one\nthree\n", encoding="utf-8")
    assert read_lines(tmp_path / "ok.en") == ["twenty-one", "three"]
    (tmp_path / "shard.en").write_bytes((tiny_data / "train.000.npz").read_bytes())
    with pytest.raises(UserError, match=r"shard.en is not UTF-8 text"):
        read_lines(tmp_path / "shard.en")
    (tmp_path / "nul.en").write_bytes(b"one\x00two\n")
    with pytest.raises(UserError, match="holds NUL bytes"):
        read_lines(tmp_path / "nul.en")
    with pytest.raises(UserError, match="no such file"):
        read_lines(tmp_path / "none.en")
