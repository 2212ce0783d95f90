def test_the_benchmark_times_ours_and_the_peer_and_writes_its_table(tmp_path, capsys, monkeypatch):
    import json

    from gpt_testutil import MODEL_DIR

    monkeypatch.chdir(MODEL_DIR)

    from gpt.benchmark import main

    rows = main(["--recipe", "configs/tiny_cpu.yaml", "--steps", "1", "--warmup", "0", "--device", "cpu",
                 "--output", str(tmp_path / "report.json")])  # fmt: skip
    (row,) = rows
    assert row["ours_tokens_per_s_per_gpu"] > 0 and row["peer_tokens_per_s_per_gpu"] > 0
    assert row["ours_mfu"] is None  # no GPU peak on a CPU: MFU is not made up
    out = capsys.readouterr().out
    assert (
        "| GPUs | ours tokens/s/GPU" in out
        and "command: scripts/benchmark.sh --recipe configs/tiny_cpu.yaml" in out
    )
    assert json.loads((tmp_path / "report.json").read_text())["results"][0]["gpus"] == 1
