"""The Keras BERT: packed samples keep their sequences apart (== each sequence alone), LAMB against its
formula, the warm-up + poly-decay schedule, mixed precision and XLA steps."""

import numpy as np
import pytest


def tiny(**overrides):
    from bert_tf.model import bert_config

    return bert_config("bert-tiny", vocab_size=60, max_position_embeddings=32, **overrides)


def test_packed_sample_equals_its_sequences_run_alone():
    """Two sequences packed in one row (+ padding) give the logits each gives in a row of its own."""
    import keras
    from bert_tf.model import build_pretrainer

    keras.utils.set_random_seed(0)
    model = build_pretrainer(tiny(), nsp=True)
    rng = np.random.default_rng(0)
    a, b = rng.integers(5, 60, 7), rng.integers(5, 60, 5)
    types_a, types_b = np.array([0, 0, 0, 1, 1, 1, 1]), np.array([0, 0, 1, 1, 1])
    packed = {
        "input_ids": np.concatenate([a, b, [0, 0]])[None],
        "token_type_ids": np.concatenate([types_a, types_b, [0, 0]])[None],
        "seq_ids": np.array([[1] * 7 + [2] * 5 + [0, 0]]),
        "mlm_positions": np.array([[1, 4, 6, 8, 11]]),
        "cls_positions": np.array([[0, 7]]),
    }
    out = model(packed)
    alone = [
        model({"input_ids": a[None], "token_type_ids": types_a[None], "seq_ids": np.ones((1, 7), int),
               "mlm_positions": np.array([[1, 4, 6]]), "cls_positions": np.array([[0]])}),
        model({"input_ids": b[None], "token_type_ids": types_b[None], "seq_ids": np.ones((1, 5), int),
               "mlm_positions": np.array([[1, 4]]), "cls_positions": np.array([[0]])}),
    ]  # fmt: skip
    expected = np.concatenate([np.asarray(x["mlm_logits"])[0] for x in alone])
    np.testing.assert_allclose(np.asarray(out["mlm_logits"])[0], expected, rtol=1e-5, atol=1e-5)
    nsp = np.concatenate([np.asarray(x["nsp_logits"])[0] for x in alone])
    np.testing.assert_allclose(np.asarray(out["nsp_logits"])[0], nsp, rtol=1e-5, atol=1e-5)
    # without seq_ids the two sequences see each other: the logits differ (the test can fail)
    unmasked = model({**packed, "seq_ids": None})
    assert not np.allclose(np.asarray(unmasked["mlm_logits"])[0, :3], expected[:3], atol=1e-3)


def test_position_ids_restart_per_sequence():
    from bert_tf.model import packed_position_ids

    seq_ids = np.array([[1, 1, 1, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
    assert np.asarray(packed_position_ids(seq_ids)).tolist() == [
        [0, 1, 2, 0, 1, 0, 0, 1],
        [0, 1, 2, 3, 4, 5, 6, 7],
    ]


def lamb_reference(p, grads, lr, b1=0.9, b2=0.999, eps=1e-6, wd=0.01, adapt=True):
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, 1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        u = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        if adapt:
            u = u + wd * p
            ratio = np.linalg.norm(p) / np.linalg.norm(u)
            u = ratio * u
        p = p - lr * u
    return p


def test_lamb_follows_its_formula_with_and_without_trust_ratio():
    import keras
    from bert_tf.lamb import Lamb

    rng = np.random.default_rng(0)
    kernel0, bias0 = rng.standard_normal((4, 3)), rng.standard_normal(3)
    kernel = keras.Variable(kernel0.astype(np.float32), name="kernel")
    bias = keras.Variable(bias0.astype(np.float32), name="bias")
    grads = [(rng.standard_normal((4, 3)), rng.standard_normal(3)) for _ in range(3)]
    optimizer = Lamb(learning_rate=0.1, weight_decay_rate=0.01)
    for gk, gb in grads:
        optimizer.apply([gk.astype(np.float32), gb.astype(np.float32)], [kernel, bias])
    expected_kernel = lamb_reference(kernel0, [g for g, _ in grads], 0.1)
    expected_bias = lamb_reference(
        bias0, [g for _, g in grads], 0.1, adapt=False
    )  # biases: no decay, no ratio
    np.testing.assert_allclose(kernel.numpy(), expected_kernel, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bias.numpy(), expected_bias, rtol=1e-5, atol=1e-6)


def test_warmup_then_poly_decay():
    from bert_tf.lamb import WarmupPolyDecay

    schedule = WarmupPolyDecay(1.0, total_steps=10, warmup=0.2, power=0.5)
    values = [float(schedule(step)) for step in range(11)]
    expected = [0.5, 1.0] + [(1 - (s - 2) / 8) ** 0.5 for s in range(2, 11)]
    np.testing.assert_allclose(values, expected, rtol=1e-6)


@pytest.mark.parametrize("amp, xla, accumulation", [("bf16", True, 2), ("fp16", False, 1)])
def test_mixed_precision_and_xla_steps_train(amp, xla, accumulation, policy):
    """LAMB steps on one repeated batch lower the loss: bf16 with XLA over 2 accumulated micro-batches,
    fp16 with dynamic loss scaling."""
    import keras
    from bert_tf.data import SyntheticMicroBatches, stacked
    from bert_tf.lamb import build_optimizer
    from bert_tf.model import build_pretrainer
    from bert_tf.step import PRECISIONS, build_pretraining_train_step, pretraining_readings
    from zoo.tf import make_runtime

    runtime = make_runtime("default")
    keras.mixed_precision.set_global_policy(PRECISIONS[amp])
    keras.utils.set_random_seed(0)
    recipe = {
        "optimizer": {"lr": 1e-2, "weight_decay": 0.01, "max_grad_norm": 1.0},
        "schedule": {"warmup": 0, "decay_power": 1.0},
    }
    model = build_pretrainer(tiny(hidden_dropout=0.0, attention_dropout=0.0))
    optimizer = build_optimizer(recipe, amp, total_steps=1000)
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer) == (amp == "fp16")
    assert model.bert.layers[0].query.compute_dtype == ("bfloat16" if amp == "bf16" else "float16")
    step = build_pretraining_train_step(
        runtime, model, optimizer, accumulation=accumulation, nsp=False, xla=xla
    )
    batches = stacked(SyntheticMicroBatches(4, 16, 3, 60), 0, accumulation)
    losses = [pretraining_readings(step(batches))["loss"] for _ in range(6)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0] - 0.2, losses


def test_bert_base_has_googles_parameter_count():
    """bert-base with the SQuAD head: Google's BERT-Base (109,482,240 with its pooler) minus the pooler
    (590,592) plus the span layer (1,538); every weight has a Google name."""
    from bert_tf.checkpoint import google_variables
    from bert_tf.model import bert_config, build_question_answering, parameter_count

    model = build_question_answering(bert_config("bert-base"))
    assert parameter_count(model) == 109_482_240 - 590_592 + 1_538
    assert len(google_variables(model)) == len(model.trainable_variables) == 5 + 12 * 16 + 2
