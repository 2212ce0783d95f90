"""The one training step (resnet50.step): train.py and benchmark.py build the same one from a recipe,
every lever is a recipe key, and the GPU recipes default to the fastest measured settings."""

import pytest
import torch
from r50_testutil import MODEL_DIR
from resnet50 import benchmark, engine, step, train
from zoo.errors import UserError
from zoo.recipe import load_recipe, run_config
from zoo.torch import parameter_groups, seed_everything

DIGITS = str(MODEL_DIR / "configs" / "digits_cpu.yaml")
TINY = ["--recipe", DIGITS, "--batch-size", "2", "--set", "data.image_size=32"]


def test_train_py_runs_the_step_benchmark_times(tmp_path, monkeypatch):
    """train.py's step object and the benchmark's "ours" are one class built from the same recipe with
    the same levers and hyper-parameters; from equal weights, one step on one batch gives equal weights."""
    built, build_step = [], step.build_train_step

    def recording(*args, **kwargs):
        built.append(build_step(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(step, "build_train_step", recording)  # train.py imports it when a run starts
    train.train(train.parse_args([*TINY, "--synthetic", "--epochs", "1", "--steps-per-epoch", "1", "--device", "cpu",
                                  "--results-dir", str(tmp_path)]))  # fmt: skip
    (trained,) = built
    monkeypatch.undo()
    ours = benchmark.ours_train_step(benchmark.parse_args(TINY).recipe_dict, torch.device("cpu"))
    assert type(trained) is type(ours) is step.TrainStep
    assert trained.levers == ours.levers == {"precision": "fp32", "compile": None, "channels_last": False,
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
                  lambda: benchmark.ours_train_step(recipe, torch.device("cpu"))):  # fmt: skip
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
    assert (recipe["run"]["batch_per_gpu"], recipe["run"]["precision"]) == (128, "fp16")
    assert benchmark.levers("ours", recipe) == {"precision": "fp16", "compile": "default", "channels_last": True,
                                                "fused_optimizer": False, "cudnn_benchmark": True, "fold_bn": True}  # fmt: skip
    assert benchmark.levers("tv-compile", recipe)["compile"] == "default"
    assert benchmark.levers("tv-eager", recipe)["fused_optimizer"] is False
    with pytest.raises(UserError, match="unknown recipe key 'train.compile_mode'"):
        benchmark.parse_args(["--set", "train.compile_mode=default"])


@pytest.mark.parametrize(
    "name", ["resnet50_1gpu_90ep", "resnet50_1gpu_250ep", "resnet50_8gpu_90ep", "resnet50_8gpu_250ep"]
)
def test_gpu_recipes_default_to_the_fastest_measured_settings(name):
    recipe = load_recipe(MODEL_DIR / "configs" / f"{name}.yaml")
    assert step.recipe_levers(recipe) == {"precision": "bf16", "compile": "reduce-overhead", "channels_last": True,
                                          "fused_optimizer": True, "cudnn_benchmark": True}  # fmt: skip
    assert run_config(recipe).batch_per_gpu == 256  # per GPU: the batch the published accuracy is for


def test_cpu_recipe_stays_eager():
    levers = step.recipe_levers(load_recipe(DIGITS))
    assert (levers["compile"], levers["fused_optimizer"], levers["precision"]) == (None, False, "fp32")


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


def test_throughput_counts_only_the_steps_after_the_warm_up():
    clock = engine.Throughput("cpu", warmup_steps=3)
    clock.start_epoch()
    for _ in range(5):
        clock.count(10)  # the warm-up ends with step 3
    assert clock.images == 20  # steps 4 and 5
    assert clock.rate() > 0
    clock.start_epoch()  # the next epoch counts from its first step
    clock.count(10)
    assert clock.images == 10
    fresh = engine.Throughput("cpu", warmup_steps=3)
    fresh.start_epoch()
    fresh.count(10)
    assert fresh.rate() is None  # an epoch that ended within the warm-up


@pytest.mark.parametrize(("rule", "peak"), [("linear", 0.8), ("sqrt", 0.4 * 2**0.5), ("none", 0.4)])
def test_the_peak_lr_follows_the_global_batch_by_the_recipe_rule(rule, peak):
    recipe = load_recipe(
        DIGITS, {"optimizer.lr_scaling": rule, "run.batch_per_gpu": "64", "run.accumulation": "2"}
    )
    assert step.global_batch(recipe, world_size=4) == 512  # 64 per GPU x 2 micro-steps x 4 GPUs
    assert step.peak_learning_rate(recipe, world_size=4) == pytest.approx(peak)  # lr_per_256 0.4 at 2x 256
    recipe["optimizer"]["lr_scaling"] = "cubic"
    with pytest.raises(
        UserError, match="optimizer.lr_scaling must be one of linear, sqrt, none, not 'cubic'"
    ):
        step.peak_learning_rate(recipe, world_size=1)


def test_one_step_of_two_micro_steps_averages_their_gradients():
    """run.accumulation 2: one call makes two forward/backward passes of batch_per_gpu images and one SGD
    update with the mean of their gradients (BatchNorm statistics per micro-step)."""
    common = {"run.batch_per_gpu": "2", "data.image_size": "16", "optimizer.lr_scaling": "none"}
    images = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(5))
    labels = torch.tensor([1, 7, 3, 3])
    seed_everything(0)
    accumulated = step.build_train_step(load_recipe(DIGITS, {**common, "run.accumulation": "2"}), "cpu")
    loss = accumulated(images, labels)
    seed_everything(0)
    by_hand = step.build_train_step(load_recipe(DIGITS, common), "cpu")
    by_hand.optimizer.zero_grad()
    losses = [
        by_hand.criterion(by_hand.model(x), y) / 2
        for x, y in ((images[:2], labels[:2]), (images[2:], labels[2:]))
    ]
    for part in losses:
        part.backward()
    by_hand.optimizer.step()
    assert float(loss) == pytest.approx(float(sum(losses).detach()))
    for key, value in accumulated.model.state_dict().items():
        assert torch.allclose(value, by_hand.model.state_dict()[key], atol=1e-6), key


def test_a_fixed_global_batch_sets_the_accumulation_of_each_gpu_count():
    recipe = load_recipe(DIGITS, {"optimizer.global_batch": "128", "run.batch_per_gpu": "32"})
    assert [step.accumulation(recipe, gpus) for gpus in (1, 2, 4)] == [4, 2, 1]
    assert {step.global_batch(recipe, gpus) for gpus in (1, 2, 4)} == {128}
    assert step.peak_learning_rate(recipe, 1) == step.peak_learning_rate(recipe, 4) == pytest.approx(0.2)
    assert step.accumulation(load_recipe(DIGITS, {"run.accumulation": "3"}), 8) == 3  # null: the run's own
    with pytest.raises(
        UserError, match=r"global_batch 128 is not a multiple of run.batch_per_gpu x GPUs \(32 x 8\)"
    ):
        step.accumulation(recipe, 8)
    with pytest.raises(UserError, match="leave run.accumulation at 1"):
        step.accumulation(load_recipe(DIGITS, {"optimizer.global_batch": "128", "run.accumulation": "2"}), 1)
