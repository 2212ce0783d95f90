"""zoo.mlperf: every benchmark's event sequence passes the real MLPerf compliance checker."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from zoo.errors import UserError
from zoo.mlperf import (
    CLOSED_TARGETS,
    RULESETS,
    MLPerfComplianceError,
    MLPerfLogger,
    check_log,
    detect_platform,
    logged_benchmark,
    main,
)

# The reference recipes' closed-division hyper-parameters (values the checker's rules accept).
CLOSED_HYPERPARAMETERS = {
    "resnet": {
        "opt_name": "sgd",
        "sgd_opt_base_learning_rate": 2.048,
        "sgd_opt_end_learning_rate": 0.0001,
        "sgd_opt_learning_rate_decay_poly_power": 2,
        "sgd_opt_learning_rate_decay_steps": 25000,
        "sgd_opt_weight_decay": 0.0001 * 2**-1,
        "sgd_opt_momentum": 0.9,
        "model_bn_span": 256,
        "opt_learning_rate_warmup_epochs": 2,
    },
    "bert": {
        "opt_base_learning_rate": 0.00035,
        "opt_lamb_epsilon": 1e-6,
        "opt_learning_rate_training_steps": 15000,
        "opt_learning_rate_warmup_steps": 0,
        "num_warmup_steps": 0,
        "start_warmup_step": 0,
        "opt_lamb_beta_1": 0.9,
        "opt_lamb_beta_2": 0.999,
        "opt_lamb_weight_decay_rate": 0.01,
    },
    "ssd": {
        "model_bn_span": 32,
        "opt_learning_rate_warmup_factor": 0,
        "opt_learning_rate_warmup_steps": 650,
        "opt_weight_decay": 0.0005,
        "opt_base_learning_rate": 0.003,
        "max_samples": 50,
        "opt_learning_rate_decay_boundary_epochs": [40, 50],
    },
    "maskrcnn": {
        "opt_base_learning_rate": 0.12,
        "opt_learning_rate_warmup_steps": 625,
        "opt_learning_rate_warmup_factor": 0.000192,
        "num_image_candidates": 6000,
        "opt_learning_rate_decay_factor": 0.1,
        "opt_learning_rate_decay_steps": [12000, 16000],
        "min_image_size": 800,
        "max_image_size": 1333,
    },
    "transformer": {
        "opt_name": "adam",
        "opt_base_learning_rate": 0.001,
        "opt_learning_rate_warmup_steps": 1000,
        "opt_adam_beta_1": 0.9,
        "opt_adam_beta_2": 0.98,
        "opt_adam_epsilon": 1e-9,
    },
    "dlrm_dcnv2": {
        "opt_name": "adagrad",
        "opt_base_learning_rate": 0.005,
        "opt_adagrad_learning_rate_decay": 0,
        "opt_weight_decay": 0,
        "opt_adagrad_initial_accumulator_value": 0,
        "opt_adagrad_epsilon": 1e-8,
        "opt_learning_rate_warmup_steps": 0,
        "opt_learning_rate_decay_start_step": 0,
        "opt_learning_rate_decay_steps": 0,
    },
    "rnnt": {
        "opt_name": "lamb",
        "opt_base_learning_rate": 0.004,
        "opt_lamb_epsilon": 1e-9,
        "opt_lamb_learning_rate_decay_poly_power": 0.935,
        "opt_lamb_learning_rate_hold_epochs": 40,
        "opt_learning_rate_warmup_epochs": 6,
        "opt_weight_decay": 1e-3,
        "opt_lamb_beta_1": 0.9,
        "opt_lamb_beta_2": 0.999,
        "opt_gradient_clip_norm": 1,
        "opt_learning_rate_alt_decay_func": True,
        "opt_learning_rate_alt_warmup_func": True,
        "opt_lamb_learning_rate_min": 1e-5,
        "data_train_max_duration": 16.7,
        "data_train_num_buckets": 6,
        "data_speed_perturbaton_min": 0.85,
        "data_speed_perturbaton_max": 1.15,
        "data_spec_augment_freq_n": 2,
        "data_spec_augment_freq_min": 0,
        "data_spec_augment_freq_max": 20,
        "data_spec_augment_time_n": 10,
        "data_spec_augment_time_min": 0,
        "data_spec_augment_time_max": 0.03,
        "model_eval_ema_factor": 0.999,
        "eval_max_prediction_symbols": 300,
    },
    "unet3d": {
        "opt_name": "sgd",
        "opt_base_learning_rate": 2.0,
        "opt_learning_rate_warmup_epochs": 200,
        "opt_learning_rate_decay_boundary_epochs": [],
        "opt_learning_rate_decay_factor": 1.0,
        "opt_weight_decay": 0.0,
        "opt_momentum": 0.9,
        "oversampling": 0.4,
        "training_input_shape": [128, 128, 128],
        "validation_input_shape": [128, 128, 128],
        "validation_overlap": 0.5,
    },
    "retinanet": {
        "opt_name": "adam",
        "opt_base_learning_rate": 0.0001,
        "opt_weight_decay": 0.0,
        "opt_learning_rate_warmup_epochs": 1,
        "opt_learning_rate_warmup_factor": 0.001,
    },
    "gpt3": {
        "max_sequence_length": 2048,
        "opt_name": "adam",
        "opt_base_learning_rate": 2e-5,
        "opt_end_learning_rate": 2e-6,
        "opt_learning_rate_decay_steps": 166809,
        "opt_learning_rate_warmup_steps": 265,
        "opt_learning_rate_decay_schedule": "cosine with linear warmup",
        "opt_adam_beta_1": 0.9,
        "opt_adam_beta_2": 0.95,
        "opt_adam_epsilon": 1e-8,
        "opt_gradient_clip_norm": 1.0,
        "init_checkpoint_step": 4000,
    },
    "llama31_8b": {
        "max_sequence_length": 8192,
        "opt_name": "adamw",
        "opt_base_learning_rate": 8e-4,
        "opt_end_learning_rate": 8e-6,
        "opt_learning_rate_warmup_steps": 16,
        "opt_learning_rate_decay_steps": 1_200_000 - 16,
        "opt_learning_rate_decay_schedule": "cosine with linear warmup",
        "opt_adamw_beta_1": 0.9,
        "opt_adamw_beta_2": 0.95,
        "opt_adamw_epsilon": 1e-05,
        "opt_adamw_weight_decay": 0.1,
        "opt_gradient_clip_norm": 1.0,
        "max_steps": 1200000,
    },
}
# gpt3's open rules keep the closed keys and quality window: a tiny open run logs them too.
OPEN_HYPERPARAMETERS = {"gpt3": CLOSED_HYPERPARAMETERS["gpt3"]}
EVAL_SAMPLES = {"dlrm_dcnv2": 89137319, "rnnt": 2703, "unet3d": 42, "llama31_8b": 1024}
TRAIN_SAMPLES = {"unet3d": 168}  # KiTS19's split
# What a tiny CPU run reaches: far below every closed target (transformer's open rules keep its target).
TINY_ACCURACY = {
    "resnet": 0.12,
    "bert": 0.05,
    "ssd": 0.01,
    "maskrcnn": {"BBOX": 0.01, "SEGM": 0.005},
    "transformer": 0.25,
    "dlrm_dcnv2": 0.55,
    "rnnt": 0.9,  # word error rate
    "unet3d": 0.3,  # mean Dice
    "retinanet": 0.01,  # COCO-style mAP on OpenImages-MLPerf
    "gpt3": 2.65,  # log perplexity: both divisions ask for a value in (2.6, 2.69]
    "llama31_8b": 0.9,  # the open rules ask only for a value below 1
}


def _emit_run(
    path,
    benchmark,
    *,
    division="open",
    accuracies=(),
    hyperparameters=None,
    blocks=False,
    stop=True,
):
    """One run's sequence as a model emits it: init, hyper-parameters, epochs with evals, run_stop."""
    with MLPerfLogger(path, benchmark, division=division, platform="1xCPU") as mlperf:
        mlperf.cache_clear()
        mlperf.init_start()
        mlperf.seed(np.int64(1234))
        mlperf.global_batch_size(256)
        mlperf.gradient_accumulation_steps(1)
        mlperf.train_samples(TRAIN_SAMPLES.get(benchmark, 1281167))
        mlperf.eval_samples(EVAL_SAMPLES.get(benchmark, 50000))
        mlperf.hyperparameters(**(hyperparameters or {}))
        if benchmark == "transformer":
            mlperf.event("max_sequence_length", 256, {"method": "discard"})
        mlperf.init_stop()
        mlperf.run_start()
        for epoch, accuracy in enumerate(accuracies, 1):
            if blocks:
                mlperf.block_start(epoch, epoch_count=1, samples=epoch * 256)
                mlperf.block_stop(epoch, samples=epoch * 256)
            else:
                mlperf.epoch_start(epoch)
                mlperf.epoch_stop(epoch)
            mlperf.eval_start(epoch)
            mlperf.eval_stop(epoch)
            # llama31_8b's rules ask for the samples trained so far beside each score
            mlperf.eval_accuracy(accuracy, epoch, samples=epoch * 256 if benchmark == "llama31_8b" else None)
        if stop:
            mlperf.run_stop("success")


@pytest.mark.parametrize("benchmark", sorted(RULESETS))
def test_a_tiny_open_division_run_passes_the_checker(tmp_path, benchmark):
    log = tmp_path / "mlperf.log"
    tiny = TINY_ACCURACY[benchmark]
    _emit_run(
        log, benchmark, accuracies=[tiny, tiny], blocks=benchmark == "bert",
        hyperparameters=OPEN_HYPERPARAMETERS.get(benchmark),
    )  # fmt: skip
    output = check_log(log, benchmark)
    assert "SUCCESS" in output and f"training_{RULESETS[benchmark]}/open_{benchmark}.yaml" in output


@pytest.mark.parametrize("benchmark", sorted(RULESETS))
def test_a_closed_run_with_the_documented_keys_passes_at_the_target(tmp_path, benchmark):
    log = tmp_path / "mlperf.log"
    target = CLOSED_TARGETS[benchmark]
    final = {k: v + 0.001 for k, v in target.items()} if isinstance(target, dict) else target + 0.001
    if benchmark in ("rnnt", "gpt3", "llama31_8b"):  # a word error rate, a log perplexity: at or below
        final = target - 0.001
    _emit_run(
        log,
        benchmark,
        division="closed",
        accuracies=[TINY_ACCURACY[benchmark], final],
        hyperparameters=CLOSED_HYPERPARAMETERS[benchmark],
    )
    output = check_log(log)  # the benchmark comes from the log's submission_benchmark
    assert "SUCCESS" in output and f"training_{RULESETS[benchmark]}/closed_{benchmark}.yaml" in output


def test_a_run_without_run_stop_fails_with_the_checkers_reason(tmp_path):
    log = tmp_path / "mlperf.log"
    _emit_run(log, "resnet", accuracies=[0.1], stop=False)
    with pytest.raises(MLPerfComplianceError) as failure:
        check_log(log, "resnet")
    first_line, checker_output = str(failure.value).split("\n", 1)
    assert first_line == f"{log} fails the MLPerf training 4.0.0 compliance check for resnet:"
    assert "Required EXACTLY_ONE occurrence of 'run_stop' but found 0" in checker_output
    assert "FAILED" in checker_output and "Logging output also at" not in checker_output


def test_closed_division_below_the_target_fails(tmp_path):
    log = tmp_path / "mlperf.log"
    _emit_run(
        log, "resnet", division="closed", accuracies=[0.5], hyperparameters=CLOSED_HYPERPARAMETERS["resnet"]
    )
    with pytest.raises(MLPerfComplianceError, match="v\\['value'\\] >= 0.7590"):
        check_log(log)


def test_transformer_open_division_keeps_the_bleu_target(tmp_path):
    log = tmp_path / "mlperf.log"
    _emit_run(log, "transformer", accuracies=[0.1, 0.2])
    with pytest.raises(MLPerfComplianceError, match="Failed checks for eval_accuracy"):
        check_log(log)


def test_closed_division_without_the_benchmark_keys_fails(tmp_path):
    log = tmp_path / "mlperf.log"
    _emit_run(log, "ssd", division="closed", accuracies=[0.25])
    with pytest.raises(MLPerfComplianceError, match="'max_samples' but found 0"):
        check_log(log)


def test_lines_name_the_calling_code_and_echo_to_stdout(tmp_path, capsys):
    log = tmp_path / "mlperf.log"
    with MLPerfLogger(log, "bert", platform="2xNVIDIA H200", stdout=True) as mlperf:
        mlperf.eval_accuracy(np.float32(0.5), 3, samples=1536)
    lines = log.read_text().splitlines()
    assert all(line.startswith(":::MLLOG {") for line in lines)
    records = [json.loads(line.split(" ", 1)[1]) for line in lines]
    assert [r["key"] for r in records] == [
        "submission_benchmark",
        "submission_org",
        "submission_division",
        "submission_status",
        "submission_platform",
        "eval_accuracy",
    ]
    assert [r["value"] for r in records[:5]] == ["bert", "zoo", "open", "onprem", "2xNVIDIA H200"]
    accuracy = records[-1]
    assert accuracy["value"] == 0.5 and accuracy["event_type"] == "POINT_IN_TIME"
    assert accuracy["metadata"]["epoch_num"] == 3 and accuracy["metadata"]["samples_count"] == 1536
    assert accuracy["metadata"]["file"] == __file__
    assert records[0]["metadata"]["file"] == __file__  # the constructor's caller, not zoo/mlperf.py
    assert capsys.readouterr().out.splitlines() == lines

    assert logged_benchmark(log) == "bert"


@pytest.mark.parametrize("verbose", [False, True])
def test_the_console_gets_mllog_lines_only_when_verbose(tmp_path, capsys, monkeypatch, verbose):
    """The default follows zoo.console (a script's --verbose): the file always, stdout only when verbose."""
    monkeypatch.setattr("zoo.console._verbose", verbose)
    log = tmp_path / "mlperf.log"
    with MLPerfLogger(log, "resnet", platform="cpu") as mlperf:
        mlperf.seed(1)
    lines = log.read_text().splitlines()
    assert len(lines) == 6 and all(line.startswith(":::MLLOG {") for line in lines)
    assert capsys.readouterr().out.splitlines() == (lines if verbose else [])


def test_an_exception_after_run_start_logs_an_aborted_run_stop(tmp_path):
    log = tmp_path / "mlperf.log"
    with pytest.raises(RuntimeError), MLPerfLogger(log, "resnet", stdout=False) as mlperf:
        mlperf.run_start()
        raise RuntimeError("diverged")
    last = json.loads(log.read_text().splitlines()[-1].split(" ", 1)[1])
    assert last["key"] == "run_stop" and last["metadata"]["status"] == "aborted"
    assert last["event_type"] == "INTERVAL_END"


def test_disabled_logger_writes_nothing(tmp_path, capsys):
    log = tmp_path / "mlperf.log"
    with MLPerfLogger(log, "resnet", enabled=False) as mlperf:
        mlperf.run_start()
        mlperf.run_stop()
    assert not log.exists() and capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"benchmark": "gnmt"}, "MLPerf benchmark 'gnmt' is not one of resnet, bert"),
        (
            {"benchmark": "resnet", "division": "closd"},
            "MLPerf division 'closd' is not one of open, closed",
        ),
        ({"benchmark": "resnet", "status": "home"}, "MLPerf submission status 'home'"),
    ],
)
def test_bad_arguments_are_one_line_errors(tmp_path, kwargs, message):
    with pytest.raises(UserError, match=message):
        MLPerfLogger(tmp_path / "mlperf.log", **kwargs)
    with MLPerfLogger(tmp_path / "ok.log", "resnet", stdout=False) as mlperf, pytest.raises(UserError):
        mlperf.run_stop("done")


def test_without_the_package_one_line_errors(tmp_path, monkeypatch):
    _emit_run(tmp_path / "mlperf.log", "resnet", accuracies=[0.1])
    for module in ("mlperf_logging", "mlperf_logging.mllog", "mlperf_logging.mllog.mllog"):
        monkeypatch.setitem(sys.modules, module, None)  # importing it now raises ImportError
    with pytest.raises(UserError, match="^zoo.mlperf needs mlperf-logging==4.1.68"):
        MLPerfLogger(tmp_path / "other.log", "resnet")
    with pytest.raises(MLPerfComplianceError, match="the compliance checker needs mlperf-logging"):
        check_log(tmp_path / "mlperf.log")


def test_platform_without_gpus_is_cpu(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi
    assert detect_platform() == "cpu"


def test_command_line_check(tmp_path, capsys):
    log = tmp_path / "mlperf.log"
    _emit_run(log, "maskrcnn", accuracies=[TINY_ACCURACY["maskrcnn"]])
    capsys.readouterr()
    main([str(log)])
    assert "SUCCESS" in capsys.readouterr().out
    with pytest.raises(SystemExit, match=f"error: {tmp_path / 'none.log'}: no such MLPerf log"):
        main([str(tmp_path / "none.log")])
