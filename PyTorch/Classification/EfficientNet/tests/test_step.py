"""The training step: RMSProp with the recipe's constants, mixup/cutmix targets, the weight average,
and train.py, the engine and the benchmark sharing it."""

import inspect

import pytest
import torch
from efficientnet import benchmark, step, train
from effnet_testutil import MODEL_DIR
from zoo.errors import UserError
from zoo.recipe import load_recipe

RECIPES = [
    "efficientnet_b0_8gpu",
    "efficientnet_b4_8gpu",
    "efficientnet_widese_b0_8gpu",
    "efficientnet_widese_b4_8gpu",
]


def tiny_recipe(**overrides):
    return load_recipe(MODEL_DIR / "configs" / "digits_cpu.yaml", overrides)


@pytest.mark.parametrize("name", RECIPES)
def test_published_recipes(name):
    recipe = load_recipe(MODEL_DIR / "configs" / f"{name}.yaml")
    b4 = "b4" in name
    assert recipe["model"]["variant"] == ("b4" if b4 else "b0")
    assert recipe["model"]["wide_se"] == ("widese" in name)
    assert recipe["data"]["image_size"] == (380 if b4 else 224)
    assert step.global_batch(recipe, 8) == 4096  # DeepLearningExamples' batch, its LR at that batch:
    assert step.peak_learning_rate(recipe, 8) == pytest.approx(0.16 if b4 else 0.08)
    assert recipe["optimizer"]["name"] == "rmsprop" and recipe["train"]["mixup"] == 0.2
    assert recipe["run"]["precision"] == "bf16" and recipe["train"]["channels_last"] is True


def test_rmsprop_and_ema_from_the_recipe():
    recipe = tiny_recipe(**{"optimizer.name": "rmsprop", "train.ema_decay": 0.5})
    train_step = step.build_train_step(recipe, "cpu")
    group = train_step.optimizer.param_groups[0]
    assert isinstance(train_step.optimizer, torch.optim.RMSprop)
    assert (group["alpha"], group["eps"], group["momentum"]) == (0.9, 0.01, 0.9)
    assert train_step.optimizer.param_groups[1]["weight_decay"] == 0.0  # BatchNorm and biases
    before = [p.clone() for p in train_step.average.model.parameters()]
    train_step(torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 2, 3]))
    averages, currents = train_step.average.model.parameters(), train_step.model.parameters()
    for old, averaged, current in zip(before, averages, currents, strict=True):
        torch.testing.assert_close(averaged, 0.5 * old + 0.5 * current)
    assert train_step.eval_model is train_step.average.model
    with pytest.raises(UserError, match="optimizer.name must be rmsprop or sgd"):
        step.build_train_step(tiny_recipe(**{"optimizer.name": "lars"}), "cpu")


@pytest.mark.parametrize("mixup,cutmix", [(0.2, 0.0), (0.0, 1.0), (0.2, 1.0)])
def test_mixed_targets_are_distributions_drawn_from_the_seed(mixup, cutmix):
    images, labels = torch.randn(6, 3, 16, 16), torch.arange(6) % 10

    def mixed():
        generator = torch.Generator().manual_seed(7)
        return step.mix_batch(images, labels, 10, mixup, cutmix, generator, smoothing=0.1)

    (first_images, first_targets), (again_images, again_targets) = mixed(), mixed()
    torch.testing.assert_close(first_images, again_images)
    torch.testing.assert_close(first_targets, again_targets)
    torch.testing.assert_close(first_targets.sum(1), torch.ones(6))
    assert not torch.equal(first_images, images)


def test_no_mixing_gives_smoothed_one_hot_targets():
    images, labels = torch.randn(2, 3, 8, 8), torch.tensor([3, 5])
    same, targets = step.mix_batch(images, labels, 10, 0.0, 0.0, torch.Generator(), smoothing=0.1)
    assert same is images and targets[0, 3] == pytest.approx(0.91) and targets[0, 0] == pytest.approx(0.01)


def test_beta_draws_have_the_beta_mean():
    generator = torch.Generator().manual_seed(0)
    draws = [step._beta(0.2, generator) for _ in range(2000)]
    assert all(0.0 <= d <= 1.0 for d in draws) and sum(draws) / len(draws) == pytest.approx(0.5, abs=0.03)


def test_train_py_and_the_benchmark_build_the_same_step():
    # Both import it inside the function that builds the run (the framework loads after parsing).
    for function in (train.train, benchmark.ours_train_step):
        assert "from efficientnet.step import" in inspect.getsource(function)
        assert "build_train_step(" in inspect.getsource(function)
    assert not hasattr(benchmark, "train")
