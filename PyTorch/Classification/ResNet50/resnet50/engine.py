"""The training loop: one epoch of training steps (train_one_epoch), and the evaluation of the validation
set (evaluate), shared by the image classifiers and read in zoo.classification.engine:

    state = TrainState()
    for epoch in range(state.epoch, epochs):
        train_one_epoch(step, scheduler, train_loader, state, logger, throughput, steps_per_epoch=..., last_step=...)
        metrics = evaluate(step.model, val_loader, device, precision)        # {"top1", "top5", "loss"}

``train.py`` builds what these take (the recipe's step, the loaders, the loggers) and decides when to
evaluate, checkpoint and stop.
"""

from zoo.classification.engine import (
    THROUGHPUT_WARMUP_STEPS,
    Throughput,
    TrainState,
    evaluate,
    train_one_epoch,
)

__all__ = ["THROUGHPUT_WARMUP_STEPS", "Throughput", "TrainState", "evaluate", "train_one_epoch"]
