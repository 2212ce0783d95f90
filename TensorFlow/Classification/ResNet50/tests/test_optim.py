"""The recipes' optimizer (SGD momentum / LARS, weight decay on kernels only) and schedule."""

import math

import numpy as np
import pytest


def _step(optimizer, variables, grads):
    optimizer.apply(grads, variables)
    return [v.numpy().copy() for v in variables]


def test_momentum_sgd_matches_the_pytorch_update_rule():
    import keras
    from resnet50_tf.optim import MomentumSGD

    kernel = keras.Variable(np.array([1.0, -2.0], np.float32), name="kernel")
    gamma = keras.Variable(np.array([0.5], np.float32), name="gamma")
    opt = MomentumSGD(learning_rate=0.1, momentum=0.9, l2_decay=0.01)
    g_k, g_g = np.array([0.3, 0.1], np.float32), np.array([0.2], np.float32)
    w, v = np.array([1.0, -2.0]), np.zeros(2)
    for _ in range(3):  # v = m v + (g + wd w); w -= lr v   (decay on the kernel only)
        k, gm = _step(opt, [kernel, gamma], [g_k, g_g])
        v = 0.9 * v + (g_k + 0.01 * w)
        w = w - 0.1 * v
        np.testing.assert_allclose(k, w, rtol=1e-6)
    np.testing.assert_allclose(gm, 0.5 - 0.1 * 0.2 * (1 + 1.9 + 2.71), rtol=1e-6)  # no decay on gamma


def test_lars_scales_kernels_by_the_trust_ratio():
    import keras
    from resnet50_tf.optim import MomentumSGD

    kernel = keras.Variable(np.array([3.0, 4.0], np.float32), name="kernel")  # |w| = 5
    bias = keras.Variable(np.array([1.0], np.float32), name="bias")
    opt = MomentumSGD(learning_rate=1.0, momentum=0.0, l2_decay=0.0, lars_eta=0.01)
    k, b = _step(opt, [kernel, bias], [np.array([0.0, 2.0], np.float32), np.array([0.5], np.float32)])
    trust = 0.01 * 5.0 / 2.0
    np.testing.assert_allclose(k, [3.0, 4.0 - trust * 2.0], rtol=1e-6)
    np.testing.assert_allclose(b, [0.5], rtol=1e-6)  # biases: plain SGD


def test_warmup_cosine_schedule():
    from resnet50_tf.optim import WarmupCosine

    s = WarmupCosine(peak_lr=1.0, warmup_steps=10, total_steps=110)
    assert float(s(0)) == pytest.approx(0.1)
    assert float(s(9)) == pytest.approx(1.0)
    assert float(s(10)) == pytest.approx(1.0)
    assert float(s(60)) == pytest.approx(0.5)
    assert float(s(110)) == pytest.approx(0.0, abs=1e-7)
    assert float(s(35)) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.25)))


def test_recipes_build(tmp_path):
    from pathlib import Path

    import keras
    from resnet50_tf.optim import MomentumSGD, build_optimizer
    from zoo.recipe import load_recipe

    configs = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
    assert len(configs) >= 4
    for config in configs:
        recipe = load_recipe(config)
        opt = build_optimizer(recipe, steps_per_epoch=100, global_batch=1024, precision="fp16")
        assert isinstance(opt, keras.optimizers.LossScaleOptimizer)
        inner = opt.inner_optimizer
        assert isinstance(inner, MomentumSGD)
        assert (inner.lars_eta is not None) == (recipe["optimizer"]["name"] == "lars")
        peak = recipe["optimizer"]["lr_per_256"] * 1024 / 256  # linear scaling with the global batch
        assert inner._learning_rate.peak_lr == pytest.approx(peak)
