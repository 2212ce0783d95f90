"""The training step's levers on a CPU: channels_last_3d gives the step of the default layout, two
accumulated micro-steps the step of one batch, bf16 runs; the LR warm-up follows MLPerf's per-epoch rule."""

import copy

import pytest
import torch
from conftest import MODEL_DIR
from unet3d.step import build_train_step, lr_schedule
from zoo.recipe import load_recipe

PATCH = (16, 16, 16)


def recipe(**run):
    loaded = load_recipe(MODEL_DIR / "configs" / "synthetic_cpu.yaml")
    loaded["model"].update(width=2, levels=3)
    loaded["data"]["patch"] = list(PATCH)
    loaded["run"].update(run)
    return loaded


def batch():
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(2, 1, *PATCH, generator=generator)
    return images, torch.randint(0, 3, (2, 1, *PATCH), generator=generator, dtype=torch.uint8)


def step_result(levers: dict, **run):
    chosen = recipe(**run)
    chosen["train"].update(levers)
    torch.manual_seed(0)
    step = build_train_step(chosen, "cpu")
    loss = step(*batch())
    return float(loss), copy.deepcopy(step.model.state_dict())


def test_channels_last_3d_and_accumulation_give_the_same_step():
    loss, weights = step_result({})
    for levers, run in (({"channels_last": True}, {}), ({}, {"batch_per_gpu": 1, "accumulation": 2})):
        other_loss, other = step_result(levers, **run)
        tolerance = (
            1e-5 if not run else 1e-2
        )  # two halves: each sample's instance norm is its own, the Dice not
        assert other_loss == pytest.approx(loss, rel=tolerance)
        for name, tensor in weights.items():
            torch.testing.assert_close(other[name].contiguous(), tensor, rtol=1e-3, atol=1e-4, msg=name)


def test_bf16_step_runs_and_the_warmup_is_mlperfs():
    loss, _ = step_result({}, precision="bf16")
    assert 0 < loss < 2
    chosen = recipe()
    chosen["optimizer"].update(lr=0.8, init_lr=1e-4)
    chosen["schedule"]["warmup_epochs"] = 4
    step = build_train_step(chosen, "cpu")
    scheduler = lr_schedule(chosen, step.optimizer, steps_per_epoch=3)
    rates = []
    for _ in range(15):
        rates.append(scheduler.get_last_lr()[0])
        step.optimizer.step()
        scheduler.step()
    # epoch e (1-based) of the warm-up: 1e-4 + (0.8 - 1e-4) * e / 4; constant 0.8 after it
    assert rates[0] == rates[2] == pytest.approx(1e-4 + (0.8 - 1e-4) / 4)
    assert rates[3] == pytest.approx(1e-4 + (0.8 - 1e-4) * 2 / 4)
    assert rates[12] == rates[14] == pytest.approx(0.8)
