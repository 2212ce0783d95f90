"""The training loop (an epoch, or the steps between two evaluations) and the evaluation (exact ROC AUC),
as train.py calls them."""

from __future__ import annotations

import time

import numpy as np
import torch
from zoo.errors import UserError


def train_one_epoch(
    step, batches, run, *, first: int, last: int, schedule: dict, logger, stop=None
) -> tuple[int, bool]:
    """Optimizer steps ``first`` .. ``last`` - 1 of the run with ``step`` (a :class:`~dlrm.step.TrainStep`):
    an epoch, or the part of one up to the next evaluation or checkpoint (train.py picks ``last``).
    Step ``s`` trains global batch ``order(epoch)[position]`` of ``batches`` (``epoch, position =
    divmod(s, batches.count)``; the order is shuffled per epoch from the seed, so a resumed run reads
    what an unbroken one would), this rank its slice of it.

    The learning rate follows ``schedule`` (dlrm.optim.lr_factor). Every ``run.log_every`` steps and at
    ``last`` it logs the loss (mean over the steps and ranks) and samples/s of all ranks. ``stop(done)``
    (zoo.cli.Preemption's ``requested``), asked after each step, ends the stretch after that step (its
    loss logged). Returns the steps done and whether ``stop`` ended the stretch.
    """
    from dlrm.optim import lr_factor

    losses, began = [], time.perf_counter()
    for index in range(first, last):
        epoch, position = divmod(index, batches.count)
        labels, dense, sparse, _ = batches.get(int(batches.order(epoch)[position]))
        step.set_lr(lr_factor(index, schedule))
        losses.append(step(labels, dense, sparse))
        done = index + 1
        logger.progress(done, batches.global_batch)
        stopping = stop is not None and stop(done)
        if done % run.log_every == 0 or done == last or stopping:
            readings = {
                "loss": mean_over_ranks(torch.stack(losses).mean()),  # the one host sync of a logged step
                "throughput": len(losses) * batches.global_batch / (time.perf_counter() - began),
            }
            logger.log(done, readings, units={"throughput": "samples/s"})
            losses, began = [], time.perf_counter()
        if stopping:
            return done, True
    return last, False


def evaluate(step, batches, logger=None) -> dict:
    """{"auc", "loss", "samples"}: exact ROC AUC, mean log loss and the rows scored over every row of
    ``batches``' split, gathered from all ranks (the padding of a last partial batch left out)."""
    import torch.distributed as dist
    from sklearn.metrics import roc_auc_score

    step.model.eval()
    probs, labels, weights = [], [], []
    with torch.no_grad():
        for i in range(batches.count):
            label, dense, sparse, weight = batches.get(i)
            probs.append(torch.sigmoid(step.forward(dense, sparse)).cpu())
            labels.append(label)
            weights.append(weight)
            if logger is not None:
                logger.progress(i + 1, batches.global_batch)
    step.model.train()
    local = torch.stack([torch.cat(probs), torch.cat(labels), torch.cat(weights)])
    if dist.is_initialized():
        gathered = [torch.empty_like(local) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, local)
        local = torch.cat(gathered, dim=1)
    prob, label, weight = (t.double().numpy() for t in local)
    keep = weight > 0
    prob, label = prob[keep], label[keep]
    if len(np.unique(label)) < 2:
        raise UserError("the validation split holds only one class: AUC is undefined")
    clipped = np.clip(prob, 1e-7, 1 - 1e-7)
    logloss = float(-np.mean(label * np.log(clipped) + (1 - label) * np.log(1 - clipped)))
    return {"auc": float(roc_auc_score(label, prob)), "loss": logloss, "samples": int(keep.sum())}


def mean_over_ranks(value: torch.Tensor) -> float:
    """``value``'s mean over every rank (itself in one process)."""
    import torch.distributed as dist

    value = value.detach().float().cpu().clone()
    if dist.is_initialized():
        dist.all_reduce(value)
        value /= dist.get_world_size()
    return float(value)
