"""The one training step (resnet50.step): train.py and benchmark.py build the same one from a recipe,
every lever is a recipe key, and the GPU recipes default to the fastest measured settings."""

import pytest
import torch
from r50_testutil import MODEL_DIR
from resnet50 import benchmark, step, train
from zoo.recipe import load_recipe
from zoo.torch import parameter_groups, seed_everything

DIGITS = str(MODEL_DIR / "configs" / "digits_cpu.yaml")
TINY = ["--recipe", DIGITS, "--batch-size", "2", "--set", "data.image_size=32"]


def test_train_py_runs_the_step_benchmark_times(tmp_path, monkeypatch):
    """train.py's step object and the benchmark's "ours" are one class built from the same recipe with
    the same levers and hyper-parameters; from equal weights, one step on one batch gives equal weights."""
    built = []

    def recording(*args, **kwargs):
        built.append(step.build_train_step(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(train, "build_train_step", recording)
    train.train(train.parse_args([*TINY, "--synthetic", "--epochs", "1", "--steps-per-epoch", "1", "--device", "cpu",
                                  "--results-dir", str(tmp_path)]))  # fmt: skip
    (trained,) = built
    ours = benchmark.ours_train_step(benchmark.parse_args(TINY).recipe_dict, torch.device("cpu"), 1)
    assert type(trained) is type(ours) is step.TrainStep
    assert trained.levers == ours.levers == {"amp": "fp32", "compile": None, "channels_last": False,
                                             "fused_optimizer": False, "cudnn_benchmark": True}  # fmt: skip
    assert trained.peak_lr == ours.peak_lr == pytest.approx(0.4 * 2 / 256)
    for mine, theirs in zip(trained.optimizer.param_groups, ours.optimizer.param_groups, strict=True):
        assert {k: v for k, v in mine.items() if k not in ("params", "lr", "initial_lr")} == {
            k: v for k, v in theirs.items() if k not in ("params", "lr", "initial_lr")
        }
    assert trained.criterion.label_smoothing == ours.criterion.label_smoothing == 0.1

    recipe = benchmark.parse_args(TINY).recipe_dict
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    labels = torch.tensor([1, 7])
    weights = []
    for build in (lambda: step.build_train_step(train.build_recipe(train.parse_args(TINY)), "cpu"),
                  lambda: benchmark.ours_train_step(recipe, torch.device("cpu"), 1)):  # fmt: skip
        seed_everything(0)
        one = build()
        loss = one(images, labels)
        assert loss.requires_grad is False and float(loss) > 0
        weights.append(one.model.state_dict())
    changed = [k for k in weights[0] if not torch.equal(weights[0][k], weights[1][k])]
    assert changed == []
    assert not torch.equal(weights[0]["fc.weight"], step.build_model(recipe).fc.weight)  # the step moved them


def test_set_and_flags_reach_the_benchmark_recipe():
    args = benchmark.parse_args(["--set", "optimizer.fused=false", "--set", "train.compile=default",
                                 "--batch-size", "128", "--amp", "fp16"])  # fmt: skip
    recipe = args.recipe_dict
    assert (
        recipe["optimizer"]["fused"] is False and recipe["train"]["compile"] == "default"
    )  # both --set kept
    assert (recipe["data"]["batch_size"], recipe["train"]["amp"]) == (128, "fp16")
    assert benchmark.levers("ours", recipe) == {"amp": "fp16", "compile": "default", "channels_last": True,
                                                "fused_optimizer": False, "cudnn_benchmark": True, "fold_bn": True}  # fmt: skip
    assert benchmark.levers("tv-compile", recipe)["compile"] == "default"
    assert benchmark.levers("tv-eager", recipe)["fused_optimizer"] is False
    with pytest.raises(SystemExit, match="unknown recipe key 'train.compile_mode'"):
        benchmark.parse_args(["--set", "train.compile_mode=default"])


@pytest.mark.parametrize(
    "name", ["resnet50_1gpu_90ep", "resnet50_1gpu_250ep", "resnet50_8gpu_90ep", "resnet50_8gpu_250ep"]
)
def test_gpu_recipes_default_to_the_fastest_measured_settings(name):
    recipe = load_recipe(MODEL_DIR / "configs" / f"{name}.yaml")
    assert step.recipe_levers(recipe) == {"amp": "bf16", "compile": "reduce-overhead", "channels_last": True,
                                          "fused_optimizer": True, "cudnn_benchmark": True}  # fmt: skip
    assert recipe["data"]["batch_size"] == 256  # per GPU: the batch the published accuracy is for


def test_cpu_recipe_stays_eager():
    levers = step.recipe_levers(load_recipe(DIGITS))
    assert (levers["compile"], levers["fused_optimizer"], levers["amp"]) == (None, False, "fp32")


@pytest.mark.parametrize(
    ("value", "mode"),
    [(False, None), ("none", None), (True, "default"), ("reduce-overhead", "reduce-overhead")],
)
def test_compile_mode_reads_the_recipe_value(value, mode):
    assert step.compile_mode(value) == mode


def test_steps_share_the_zoo_parameter_groups():
    recipe = load_recipe(DIGITS)
    built = step.build_train_step(recipe, "cpu")
    decay, no_decay = built.optimizer.param_groups
    reference = parameter_groups(built.model, float(recipe["optimizer"]["weight_decay"]))
    assert [len(decay["params"]), len(no_decay["params"])] == [len(g["params"]) for g in reference]
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == recipe["optimizer"]["weight_decay"]


def test_stopwatch_counts_only_the_steps_after_the_warm_up():
    clock = train.Stopwatch("cpu")
    for done in range(1, 6):
        clock.count(10, start_now=done == 3)  # the warm-up ends with step 3
    assert clock.images == 20  # steps 4 and 5
    assert clock.rate() > 0
    assert train.Stopwatch("cpu").rate() is None  # an epoch that ended within the warm-up
    assert train.Stopwatch("cpu", started=True).images == 0
