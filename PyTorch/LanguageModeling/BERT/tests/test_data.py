"""Data: sentence split, Wikipedia extraction and download, packing, masking, shards, loader."""

import bz2
import functools
import http.server
import threading

import numpy as np
import pytest
import torch
from bert.data import PretrainingBatches
from bert.model import packed_position_ids
from zoo.cli import entry_point
from zoo.data import bert_prepare
from zoo.data.bert import PretrainingData, SampleSpec, Specials, mask_tokens, pack_best_fit
from zoo.data.bert_prepare import prepare
from zoo.data.text import clean_wikitext, iter_wikipedia_articles, read_documents, split_sentences
from zoo.data.wordpiece import load_tokenizer
from zoo.errors import UserError


def test_sentence_split_keeps_abbreviations_and_initials():
    text = "Dr. Smith met J. R. Doe at 5 p.m. on Main St. today. It rained! Did it? Yes.\nIt did."
    assert split_sentences(text) == [
        "Dr. Smith met J. R. Doe at 5 p.m. on Main St. today.",
        "It rained!",
        "Did it?",
        "Yes.",
        "It did.",
    ]


def test_documents_from_wrapped_prose(english_text):
    docs = list(read_documents([english_text / "Apache-2.0"]))
    assert len(docs) > 20
    assert any(len(d) > 3 for d in docs)
    assert all(s and "\n" not in s for d in docs for s in d)


WIKI_XML = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">
<page><title>Aardvark</title><ns>0</ns><revision><text xml:space="preserve">{{Infobox animal|name=x}}
The '''aardvark''' is a [[mammal|medium-sized]] burrowing animal.&lt;ref&gt;Book, p. 3.&lt;/ref&gt; It is native to [[Africa]].

== Habitat ==
* a list item that is dropped
It lives in [[savanna]]s and grasslands of the region today.
</text></revision></page>
<page><title>Ardvark</title><ns>0</ns><redirect title="Aardvark"/><revision><text>#REDIRECT [[Aardvark]]</text></revision></page>
<page><title>Talk:Aardvark</title><ns>1</ns><revision><text>Talk page text that is long enough here.</text></revision></page>
</mediawiki>
"""


def test_wikipedia_markup_is_cleaned():
    paragraphs = clean_wikitext("{{a|{{b}}}}Text [[x|shown]] and [[y]] ''it'' <ref>r</ref>here.\n\n== H ==")
    assert paragraphs == ["Text shown and y it here."]


def serve(directory):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_wikipedia_dump_downloads_and_extracts(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "enwiki-test-pages-articles.xml.bz2").write_bytes(bz2.compress(WIKI_XML.encode()))
    articles = list(iter_wikipedia_articles(site / "enwiki-test-pages-articles.xml.bz2"))
    assert [title for title, _ in articles] == ["Aardvark"]
    server = serve(site)
    try:
        url = f"http://127.0.0.1:{server.server_port}/enwiki-test-pages-articles.xml.bz2"
        bert_prepare.main(["wikipedia", "--url", url, "--data-dir", str(tmp_path / "wiki")])
    finally:
        server.shutdown()
    text = (tmp_path / "wiki" / "text" / "wiki_00000.txt").read_text()
    assert text.splitlines()[:2] == [
        "The aardvark is a medium-sized burrowing animal.",
        "It is native to Africa.",
    ]
    assert "lives in savannas" in text and "Infobox" not in text and "list item" not in text


def test_best_fit_packing_places_every_item_once_within_capacity():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 129, 500)
    bins = pack_best_fit(lengths, 128, max_items=8)
    placed = sorted(i for b in bins for i in b)
    assert placed == list(range(500))
    assert all(sum(lengths[i] for i in b) <= 128 and len(b) <= 8 for b in bins)
    # no two items longer than half a bin share one: that and the total length bound the optimum
    lower_bound = max(int(np.ceil(lengths.sum() / 128)), int((lengths > 64).sum()))
    assert len(bins) <= lower_bound + 3


def test_packed_shards_hold_several_whole_sequences(packed_data, tiny_vocab):
    data = PretrainingData(packed_data)
    meta = data.meta
    assert meta["sequences"] / meta["samples"] > 1.3
    assert meta["tokens"] / (meta["samples"] * 128) > 0.9
    assert len(meta["shards"]) > 1
    tok = load_tokenizer(tiny_vocab)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    with np.load(packed_data / meta["shards"][0]["file"]) as shard:
        for ids, seq, cls in zip(
            shard["input_ids"][:20], shard["seq_ids"][:20], shard["cls_positions"][:20], strict=True
        ):
            starts = [int(c) for c in cls if c >= 0]
            assert all(ids[s] == cls_id and seq[s] == k + 1 for k, s in enumerate(starts))
            for k in range(1, len(starts) + 1):
                where = np.flatnonzero(seq == k)
                assert (np.diff(where) == 1).all() and ids[where[-1]] == sep_id
            positions = packed_position_ids(torch.from_numpy(seq.astype(np.int64))[None])[0]
            assert all(positions[s] == 0 for s in starts)


def test_masking_rates_and_targets():
    spec = SampleSpec(max_seq=128, max_predictions=20)
    specials = Specials(pad=0, cls=2, sep=3, mask=4, vocab_size=1000)
    rng = np.random.default_rng(0)
    ids = np.concatenate(
        [[2], rng.integers(5, 1000, 60), [3], [2], rng.integers(5, 1000, 60), [3], [0, 0, 0, 0]]
    )
    seq = np.concatenate([np.ones(62), np.full(62, 2), np.zeros(4)]).astype(np.uint8)
    kinds = {"mask": 0, "random": 0, "kept": 0}
    for _ in range(300):
        masked, positions, labels = mask_tokens(ids, seq, spec, specials, rng)
        real = labels >= 0
        assert real.sum() == 18  # 15% of 120 maskable tokens
        assert not np.isin(ids[positions[real]], [0, 2, 3]).any()
        assert (labels[real] == ids[positions[real]]).all()
        assert (
            masked[np.setdiff1d(np.arange(128), positions[real])]
            == ids[np.setdiff1d(np.arange(128), positions[real])]
        ).all()
        after = masked[positions[real]]
        kinds["mask"] += (after == 4).sum()
        kinds["kept"] += (after == ids[positions[real]]).sum()
        kinds["random"] += ((after != 4) & (after != ids[positions[real]])).sum()
    total = sum(kinds.values())
    assert 0.77 < kinds["mask"] / total < 0.83
    assert 0.08 < kinds["kept"] / total < 0.12


def test_loader_is_deterministic_split_across_ranks_and_remasks_per_epoch(packed_data):
    data = PretrainingData(packed_data, seed=3)
    whole = PretrainingBatches(data, 8)
    halves = [PretrainingBatches(data, 4, rank=r, world_size=2) for r in (0, 1)]
    a = whole[5]
    b = [h[5] for h in halves]
    torch.testing.assert_close(a["input_ids"], torch.cat([b[0]["input_ids"], b[1]["input_ids"]]))
    torch.testing.assert_close(whole[5]["mlm_positions"], a["mlm_positions"])
    assert a["mlm_labels"].shape == (8, 20) and a["sequences"] > 8
    next_epoch = whole[5 + whole.steps_per_epoch]
    assert not torch.equal(next_epoch["input_ids"], a["input_ids"])


def test_unpacked_nsp_static_samples(tmp_path, english_text, tiny_vocab):
    spec = SampleSpec(
        max_seq=64, max_predictions=10, packing=False, nsp=True, masking="static", short_seq_prob=0.1
    )
    prepare([english_text], tiny_vocab, tmp_path, spec, dupe_factor=2)
    data = PretrainingData(tmp_path)
    batch = PretrainingBatches(data, 16)[0]
    assert batch["nsp_labels"].shape == (16, 1) and set(batch["nsp_labels"].flatten().tolist()) <= {0, 1}
    assert batch["cls_positions"].eq(0).all() and batch["sequences"] == 16
    with np.load(tmp_path / data.meta["shards"][0]["file"]) as shard:
        labels = shard["nsp_labels"][:, 0]
        assert 0.2 < labels.mean() < 0.95  # both kinds present
        types = shard["token_type_ids"][0][shard["seq_ids"][0] > 0]
        assert types[0] == 0 and types[-1] == 1 and (np.diff(types.astype(int)) >= 0).all()
    assert torch.equal(PretrainingBatches(data, 16)[0]["input_ids"], batch["input_ids"])


def test_bad_inputs_are_one_line_errors(tmp_path, tiny_vocab):
    with pytest.raises(UserError, match="no metadata.json"):
        PretrainingData(tmp_path)
    with pytest.raises(UserError, match="does not exist"):
        prepare([tmp_path / "missing.txt"], tiny_vocab, tmp_path / "out", SampleSpec())
    bad_vocab = tmp_path / "vocab.txt"
    bad_vocab.write_text("a\nb\n")
    with pytest.raises(UserError, match="special tokens"):
        load_tokenizer(bad_vocab)


def articles_dump(path, count):
    pages = "".join(
        f"<page><title>A{i}</title><ns>0</ns><revision><text>Article number {i} is about a thing. "
        f"It has two sentences of text here.</text></revision></page>"
        for i in range(count)
    )
    path.write_text(f'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">{pages}</mediawiki>')
    return path


def test_wikipedia_extraction_killed_midway_is_never_read_and_is_redone(tmp_path, monkeypatch, tiny_vocab):
    from zoo.data import text as bert_text

    dump = articles_dump(tmp_path / "dump.xml", 23)
    out = tmp_path / "wiki"
    articles = bert_text.iter_wikipedia_articles

    def killed_after_twelve(path):
        for index, article in enumerate(articles(path)):
            if index == 12:
                raise KeyboardInterrupt  # as a kill would: the extraction stops between two files
            yield article

    monkeypatch.setattr(bert_text, "iter_wikipedia_articles", killed_after_twelve)
    with pytest.raises(SystemExit) as stopped:  # the entry point reports Ctrl-C as a shell does
        bert_prepare.main(["wikipedia", "--dump", str(dump), "--data-dir", str(out), "--docs-per-file", "5"])
    assert stopped.value.code == 130
    monkeypatch.undo()
    left = sorted(p.name for p in (out / "text").iterdir())
    assert left == ["wiki_00000.txt", "wiki_00001.txt", "wiki_00002.txt.tmp"]  # no marker
    for use in (
        lambda: bert_text.expand_text_paths([out / "text"]),
        lambda: prepare([out / "text"], tiny_vocab, tmp_path / "samples", SampleSpec()),
    ):
        with pytest.raises(UserError, match=r"text is an unfinished Wikipedia extraction \(no .complete"):
            use()
    bert_prepare.main(["wikipedia", "--dump", str(dump), "--data-dir", str(out), "--docs-per-file", "5"])
    files = sorted(p.name for p in (out / "text").iterdir())
    assert files == [".complete"] + [f"wiki_0000{i}.txt" for i in range(5)]
    documents = list(read_documents(bert_text.expand_text_paths([out / "text"])))
    assert [d[0] for d in documents] == [f"Article number {i} is about a thing." for i in range(23)]
    # a finished extraction is kept as it is, without reading the dump again
    dump.unlink()
    before = {p: p.stat().st_mtime_ns for p in (out / "text").iterdir()}
    bert_prepare.main(["wikipedia", "--dump", str(dump), "--data-dir", str(out)])
    assert {p: p.stat().st_mtime_ns for p in (out / "text").iterdir()} == before


def test_text_inputs_skip_partial_tmp_files(tmp_path):
    from zoo.data.text import expand_text_paths

    (tmp_path / "a.txt").write_text("One sentence here.\n")
    (tmp_path / "b.txt.tmp").write_text("A partial file.\n")
    assert [p.name for p in expand_text_paths([tmp_path])] == ["a.txt"]


def test_prepare_removes_what_an_earlier_run_left(tmp_path, english_text, tiny_vocab):
    out = tmp_path / "samples"
    out.mkdir()
    for stale in ("shard_000_00009.npz.tmp.npz", "metadata.json.tmp", "shard_003_00000.npz", "metadata.json"):
        (out / stale).write_bytes(b"from a crashed run")
    meta = prepare([english_text / "Apache-2.0"], tiny_vocab, out, SampleSpec(), shard_size=8)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["metadata.json", "manifest.json"] + [s["file"] for s in meta["shards"]]
    )
    assert len(PretrainingData(out)) == meta["samples"] > 8


def rewrite_shard(path, change):
    with np.load(path) as shard:
        arrays = {k: shard[k] for k in shard.files}
    change(arrays)
    np.savez(path, **arrays)


@pytest.mark.parametrize(
    "damage, problem",
    [
        (
            lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
            "BadZipFile: File is not a zip file",
        ),
        (lambda p: p.write_bytes(b""), "BadZipFile"),
        (
            lambda p: rewrite_shard(p, lambda a: a.update(seq_ids=a["seq_ids"][:10])),
            "array seq_ids has shape",
        ),
        (lambda p: rewrite_shard(p, lambda a: a.pop("cls_positions")), "no cls_positions arrays"),
        (
            lambda p: rewrite_shard(p, lambda a: a["input_ids"].__setitem__((3, 1), 60000)),
            "token id 60000, beyond the",
        ),
    ],
    ids=["cut-in-half", "empty", "rows-lost", "array-lost", "id-beyond-vocabulary"],
)
def test_damaged_shards_are_named_at_start(tmp_path, packed_data, damage, problem):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(packed_data, data)
    shard = data / PretrainingData(data).meta["shards"][2]["file"]
    damage(shard)
    with pytest.raises(SystemExit) as error:
        entry_point(PretrainingData)(data)  # the line a script's user sees
    message = str(error.value.code)
    assert message.startswith(f"error: shard {shard} is damaged (") and problem in message
    assert message.endswith(f"prepare {data} again (scripts/download_data.sh prepare)")


def test_metadata_that_is_not_json_or_names_too_small_a_vocabulary_is_named_at_start(tmp_path, packed_data):
    """metadata.json is read before any shard: not JSON, a field missing, special tokens or shard ids
    outside the vocabulary it names. The shards' largest id comes from the manifest prepare wrote."""
    import json
    import shutil

    data = tmp_path / "data"
    shutil.copytree(packed_data, data)
    path = data / "metadata.json"
    meta = json.loads(path.read_text())
    largest = 0
    for shard in meta["shards"]:
        with np.load(data / shard["file"]) as arrays:
            largest = max(largest, int(arrays["input_ids"].max()))
    manifest = json.loads((data / "manifest.json").read_text())["files"]
    assert max(entry["max_token_id"] for entry in manifest.values()) == largest

    def message_for(text: str) -> str:
        path.write_text(text)
        with pytest.raises(SystemExit) as error:
            entry_point(PretrainingData)(data)
        return str(error.value.code)

    def with_specials(**changes) -> str:
        return json.dumps({**meta, "specials": {**meta["specials"], **changes}})

    path.write_text(with_specials(vocab_size=largest + 1))
    assert len(PretrainingData(data)) == meta["samples"]
    assert message_for(with_specials(vocab_size=largest)).endswith(
        f"(token id {largest}, beyond the {largest}-token vocabulary metadata.json names): "
        f"prepare {data} again (scripts/download_data.sh prepare)"
    )
    assert message_for(with_specials(mask=10**6)) == (
        f"error: {path} places special tokens {{'mask': 1000000}} outside its "
        f"{meta['specials']['vocab_size']}-token vocabulary"
    )
    assert message_for('{"format": "zoo-bert-pretraining/v1",').startswith(
        f"error: {path} is not a readable JSON file (JSONDecodeError: "
    )
    no_specials = {k: v for k, v in meta.items() if k != "specials"}
    assert message_for(json.dumps(no_specials)) == f"error: {path} is damaged (KeyError: 'specials')"
