"""The training loop of ResNet-50 (Gluon): one epoch of optimizer steps, and an evaluation pass.

train.py builds the parts (recipe, data, network, trainer, TrainStep, loggers) and calls these once per
epoch; evaluate.py calls ``evaluate`` on a checkpoint.
"""

from __future__ import annotations

import time

import mxnet as mx
from mxnet import gluon
from zoo.errors import UserError


def train_one_epoch(step, loader, *, first_step: int, steps_per_epoch: int, lr_at, run, logger,
                    world: int, skip: int = 0, preemption=None, save=None) -> tuple[int, dict]:  # fmt: skip
    """Up to ``steps_per_epoch`` batches of ``loader`` through ``step`` (the TrainStep), at the learning
    rate ``lr_at(steps done)``. Every ``run.log_every`` steps of the epoch and at the end, the mean loss and
    train top-1 (%) of the images since the last reading, the learning rate and the throughput of all
    ``world`` processes go to ``logger``. Returns (steps done, the last reading).

    ``skip``: the epoch's first batches were trained on before a preemption (a mid-epoch checkpoint): they
    are read and dropped, so that the epoch's other batches come in the unbroken run's order.
    ``preemption`` (a zoo.cli.Preemption) is asked after every step; when it asks to stop, the pending
    reading is logged, ``save(steps done, steps done in this epoch)`` writes the checkpoint and
    ``preemption.stop()`` ends the run."""
    done, pending, reading, started = first_step, [], {}, time.time()

    def read_pending() -> dict:  # reading values waits for the devices: only now and then
        images = sum(count for _, _, count in pending)
        return {
            "loss": sum(float(loss.asscalar()) for loss, _, _ in pending) / images,
            "top1": 100 * sum(int(hits.asscalar()) for _, hits, _ in pending) / images,
            "lr": lr,
            "throughput": images * world / max(time.time() - started, 1e-9),
        }

    for i, (data, label, _pad) in enumerate(loader):
        if i >= steps_per_epoch:
            break
        if i < skip:
            started = time.time()
            continue
        lr = lr_at(done)
        loss, hits = step(data, label, lr)
        done += 1
        pending.append((loss, hits, data.shape[0]))
        # readings counted from the epoch's start: a resumed epoch logs at the unbroken run's steps
        if (i + 1) % run.log_every == 0:
            reading = read_pending()
            logger.log(done, reading, units={"throughput": "img/s"})
            pending, started = [], time.time()
        logger.progress(
            done, data.shape[0] * world, {"loss": reading["loss"], "lr": lr} if reading else {"lr": lr}
        )
        if preemption is not None and preemption.requested(done):
            if pending:
                logger.log(done, read_pending(), units={"throughput": "img/s"})
            mx.nd.waitall()  # as at the epoch's end (below), before the parameters are saved
            save(done, i + 1)
            preemption.stop()
    if pending:
        reading = read_pending()
        logger.log(done, reading, units={"throughput": "img/s"})
    # BatchNorm's running statistics are written by the engine outside the static graph's dependency
    # tracking: wait for every pending write before anything reads or saves them.
    mx.nd.waitall()
    return done, reading


def evaluate(net, loader, ctx, progress=None) -> dict:
    """Top-1 and top-5 (%) and the images scored over one pass of ``loader`` (filler samples of ``pad``
    ignored). ``progress``: a ``zoo.log.MetricsLogger`` whose progress line shows batches done / total and
    images/s (its ``total_steps`` is ``loader.batches``)."""
    correct1 = correct5 = total = 0
    for batch, (data, label, pad) in enumerate(loader, 1):
        valid = data.shape[0] - pad
        if valid <= 0:
            continue
        datas = gluon.utils.split_and_load(data[:valid], ctx, even_split=False)
        labels = gluon.utils.split_and_load(label[:valid], ctx, even_split=False)
        for x, y in zip(datas, labels, strict=True):
            logits = net(x).astype("float32")
            k = min(5, logits.shape[1])
            top = mx.nd.topk(logits, axis=1, k=k).astype("int64")
            hits = top == y.astype("int64").reshape((-1, 1))
            correct1 += int(hits[:, 0].sum().asscalar())
            correct5 += int(hits.sum().asscalar())
            total += x.shape[0]
        if progress is not None:
            progress.progress(batch, valid, {"top1": 100 * correct1 / total})
    if total == 0:
        raise UserError("the validation set is empty")
    return {"top1": 100 * correct1 / total, "top5": 100 * correct5 / total, "samples": total}
