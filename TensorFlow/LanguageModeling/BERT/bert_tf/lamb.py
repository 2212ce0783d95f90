"""LAMB (You et al., "Large Batch Optimization for Deep Learning", 2019) as a Keras 3 optimizer, and the
BERT learning-rate schedule (linear warm-up, then polynomial decay to 0).

Per variable p with gradient g (after clipping the global gradient norm to ``global_clipnorm``):
    m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,  m^ = m / (1 - b1^t),  v^ = v / (1 - b2^t)
    u = m^ / (sqrt(v^) + eps) + wd p
    r = ||p|| / ||u||   (1 where either norm is 0, and for biases and LayerNorm parameters)
    p = p - lr r u
Biases and LayerNorm parameters take no weight decay and no trust ratio (the original recipe). The
slots live in the optimizer's variables, so a tf.train.Checkpoint of the optimizer resumes exactly.
``tensorflow_addons.optimizers.LAMB`` (end of life) is not needed.
"""

from __future__ import annotations

import keras
from keras import ops
from zoo.errors import UserError

# Variables whose last name is one of these take no weight decay and no trust ratio.
NO_DECAY_NAMES = ("bias", "gamma", "beta", "mlm_bias")


class Lamb(keras.optimizers.Optimizer):
    def __init__(
        self,
        learning_rate=1e-3,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        weight_decay_rate: float = 0.01,
        name: str = "lamb",
        **kwargs,
    ):
        """``global_clipnorm`` (a Keras optimizer argument) clips the global gradient norm first."""
        if epsilon < 0 or not (0 <= beta_1 < 1 and 0 <= beta_2 < 1):
            raise UserError(f"bad LAMB hyper-parameters betas=({beta_1}, {beta_2}) eps={epsilon}")
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.weight_decay_rate = weight_decay_rate

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._momentums = [self.add_variable_from_reference(v, "momentum") for v in var_list]
        self._velocities = [self.add_variable_from_reference(v, "velocity") for v in var_list]
        # decided here on the Keras variables (update_step may see the backend's variable, named "x:0")
        self._adapts = [uses_decay_and_trust_ratio(v) for v in var_list]

    def update_step(self, gradient, variable, learning_rate):
        lr = ops.cast(learning_rate, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        step = ops.cast(self.iterations + 1, variable.dtype)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        self.assign(m, self.beta_1 * m + (1 - self.beta_1) * gradient)
        self.assign(v, self.beta_2 * v + (1 - self.beta_2) * ops.square(gradient))
        m_hat = m / (1 - ops.power(ops.cast(self.beta_1, variable.dtype), step))
        v_hat = v / (1 - ops.power(ops.cast(self.beta_2, variable.dtype), step))
        update = m_hat / (ops.sqrt(v_hat) + self.epsilon)
        if self._adapts[index]:
            update = update + self.weight_decay_rate * variable
            weight_norm, update_norm = (
                ops.norm(ops.reshape(variable, [-1])),
                ops.norm(ops.reshape(update, [-1])),
            )
            ratio = ops.where(
                ops.logical_and(weight_norm > 0, update_norm > 0),
                weight_norm / update_norm,
                ops.ones_like(weight_norm),
            )
            update = update * ratio
        self.assign_sub(variable, lr * update)

    def get_config(self):
        return {
            **super().get_config(),
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "weight_decay_rate": self.weight_decay_rate,
        }


def uses_decay_and_trust_ratio(variable) -> bool:
    """Weights and embeddings do; biases and LayerNorm parameters do not."""
    return variable.name.split("/")[-1] not in NO_DECAY_NAMES


class WarmupPolyDecay(keras.optimizers.schedules.LearningRateSchedule):
    """``peak * (step + 1) / warmup_steps`` during warm-up, then ``peak * (1 - progress) ** power``."""

    def __init__(self, peak: float, total_steps: int, warmup: float, power: float = 0.5):
        """warmup: a fraction of total_steps (< 1) or a step count."""
        self.peak, self.total_steps, self.power = float(peak), int(total_steps), float(power)
        self.warmup_steps = float(warmup * total_steps if warmup < 1 else warmup)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warm = (step + 1) / max(self.warmup_steps, 1e-9)
        progress = (step - self.warmup_steps) / max(1.0, self.total_steps - self.warmup_steps)
        decay = ops.power(ops.maximum(0.0, 1.0 - progress), self.power)
        return self.peak * ops.where(step < self.warmup_steps, warm, decay)

    def get_config(self):
        return {
            "peak": self.peak,
            "total_steps": self.total_steps,
            "warmup": self.warmup_steps,
            "power": self.power,
        }


def build_optimizer(recipe: dict, precision: str, total_steps: int):
    """LAMB with the recipe's schedule over ``total_steps``; fp16 wraps it in Keras' dynamic loss scaling."""
    opt = recipe["optimizer"]
    betas = opt.get("betas", (0.9, 0.999))
    schedule = WarmupPolyDecay(
        opt["lr"], total_steps, recipe["schedule"]["warmup"], recipe["schedule"].get("decay_power", 0.5)
    )
    optimizer = Lamb(
        schedule,
        beta_1=betas[0],
        beta_2=betas[1],
        epsilon=opt.get("eps", 1e-6),
        weight_decay_rate=opt["weight_decay"],
        global_clipnorm=opt.get("max_grad_norm") or None,
    )
    if precision == "fp16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
