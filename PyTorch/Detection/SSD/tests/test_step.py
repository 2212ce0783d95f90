"""The one training step: what it computes, and the recipe keys that build it."""

import copy

import pytest
import torch
from ssd.boxes import default_boxes, match
from ssd.data import SyntheticLoader
from ssd.loss import SSDLoss
from ssd.step import TrainStep
from zoo.coco import learning_rate
from zoo.errors import UserError
from zoo.recipe import load_recipe

from .conftest import MODEL_DIR

SMOKE = MODEL_DIR / "configs" / "shapes_smoke.yaml"


def smoke_recipe(**overrides):
    return load_recipe(SMOKE, {"run.precision": "fp32", "run.batch_per_gpu": 2, **overrides})


def test_step_returns_the_loss_of_the_weights_it_started_from_and_updates_them():
    torch.manual_seed(0)
    step = TrainStep(smoke_recipe(), "cpu", steps_per_epoch=10, num_classes=4)
    before = copy.deepcopy(step.model)
    batch = SyntheticLoader(2, 1, num_classes=4, image_size=300).batch
    loss = step(batch.images, batch.boxes, batch.labels)
    # The same matching, forward and loss written out by hand, on the weights before the update.
    loc_target, cls_target = match(batch.boxes, batch.labels, default_boxes())
    before.train()
    with torch.no_grad():
        expected = SSDLoss(3)(*before(batch.images), loc_target, cls_target)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    # The first SGD step, by hand: momentum's buffer is the gradient, decay only on weights.
    lr = step.optimizer.param_groups[0]["lr"]
    assert lr == pytest.approx(0.005 / 5 * 2)  # the schedule has moved to warm-up step 2 of 5
    first_lr = 0.005 / 5
    for name, decay in (("backbone.conv1.weight", 0.0005), ("conf_heads.0.bias", 0.0)):
        new, old = step.model.get_parameter(name), before.get_parameter(name)
        assert new.grad is not None and new.grad.abs().sum() > 0, name
        torch.testing.assert_close(new, old - first_lr * (new.grad + decay * old), rtol=1e-5, atol=1e-7)


def test_learning_rate_scales_with_the_global_batch_and_warms_up():
    recipe = smoke_recipe()  # base_lr 0.02 for a global batch of 8, warm-up over 5 steps
    assert learning_rate(recipe, world_size=1) == pytest.approx(0.02 * 2 / 8)
    assert learning_rate(recipe, world_size=4) == pytest.approx(0.02)
    step = TrainStep(recipe, "cpu", steps_per_epoch=10, num_classes=4)
    assert step.scheduler.get_last_lr()[0] == pytest.approx(0.005 / 5)  # first step of the warm-up
    groups = step.optimizer.param_groups
    assert groups[0]["weight_decay"] == 0.0005 and groups[1]["weight_decay"] == 0.0  # not on BN/bias
    assert not groups[0]["fused"]  # the fused kernel is for GPUs; the CPU keeps the default one


def test_speed_keys_of_the_recipe_build_the_step():
    default = load_recipe(MODEL_DIR / "configs" / "ssd300_coco_65ep.yaml")
    assert (default["channels_last"], default["compile"], default["optimizer"]["fused"]) == (True, True, True)
    step = TrainStep(smoke_recipe(channels_last=True), "cpu", steps_per_epoch=1, num_classes=4)
    assert step.model.backbone.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert not step.compiled and not step.cuda_graphs
    with pytest.raises(UserError, match="compile_mode 'fast' is not one of default, reduce-overhead"):
        TrainStep(smoke_recipe(compile_mode="fast"), "cpu", steps_per_epoch=1, num_classes=4)


def test_batchnorm_statistics_become_the_average_over_the_batches():
    from ssd.model import estimate_batchnorm_statistics

    norm = torch.nn.BatchNorm1d(2, momentum=0.3)
    batches = [torch.tensor([[0.0, 1.0], [2.0, 3.0]]), torch.tensor([[4.0, 5.0], [6.0, 9.0]])]
    estimate_batchnorm_statistics(norm, batches, norm)
    torch.testing.assert_close(norm.running_mean, torch.tensor([3.0, 4.5]))  # mean of the batch means
    torch.testing.assert_close(norm.running_var, torch.tensor([2.0, 5.0]))  # of the unbiased variances
    assert norm.momentum == 0.3 and norm.training
