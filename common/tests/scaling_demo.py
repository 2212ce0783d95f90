"""A tiny model whose benchmark hands --gpus to zoo.scaling (test_scaling.py launches it)."""

from __future__ import annotations

import pathlib

import torch
import zoo.scaling
from zoo.cli import entry_point
from zoo.recipe import run_config
from zoo.torch import distributed_model

DEFAULT_RECIPE = pathlib.Path(__file__).with_name("scaling_demo.yaml")


def scaling_step(recipe: dict, device, world_size: int) -> zoo.scaling.Step:
    batch = run_config(recipe).batch_per_gpu
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
    forward = distributed_model(model, device) if world_size > 1 else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(batch, 32, device=device), torch.randn(batch, 1, device=device)

    def call():
        loss = torch.nn.functional.mse_loss(forward(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return zoo.scaling.Step(call, items=batch, unit="samples/s", model=model)


@entry_point
def main(argv=None):
    return zoo.scaling.main(argv, module="scaling_demo", build=scaling_step, default_recipe=DEFAULT_RECIPE)


if __name__ == "__main__":
    main()
