"""The training loop and the evaluation (validation log-perplexity), as train.py calls them.

GPT's run is counted in optimizer steps: ``train_one_epoch`` trains one stretch of steps, from where the
run stands to the next evaluation, checkpoint or the run's end (what an epoch is to the other models).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from gpt.step import batch_to


def train_one_epoch(step, sampler, run, *, until: int, layout, logger, position: dict, stop=None) -> bool:
    """Run updates ``position["step"]`` .. ``until - 1`` of ``step`` (a :class:`gpt.step.TrainStep`).

    Each update reads this data-parallel rank's micro-batches of ``sampler`` (gpt.data.Sampler: the
    windows follow from the step number alone, so a resumed run reads what the unbroken one would).
    ``position`` ("step": updates done, "samples": windows trained on) is advanced in place. Logs the
    loss (averaged over the ranks), gradient norm, learning rate and tokens/s of all ranks every
    ``run.log_every`` updates and at the stretch's end. ``stop(updates_done)`` (zoo.cli.Preemption's
    ``requested``) ends the stretch early after an update; returns whether it did.
    """
    began, tokens_seen = time.perf_counter(), 0
    first = position["step"]
    for update in range(first, until):
        loss, grad_norm, tokens = step(sampler.micro_batches(update, layout.dp_rank))
        position["step"] = update + 1
        position["samples"] += sampler.global_batch
        tokens_seen += tokens
        if position["step"] % run.log_every == 0 or update == until - 1:
            seconds = time.perf_counter() - began
            readings = {
                "loss": mean_over_ranks(loss, layout),  # the one host sync of a logged update
                "grad_norm": float(grad_norm),
                "lr": step.lr,
                "throughput": tokens_seen * layout.dp / max(seconds, 1e-9),
            }
            logger.log(position["step"], readings, units={"throughput": "tokens/s"})
        if stop is not None and stop(position["step"]):
            return True
    return False


def mean_over_ranks(value: torch.Tensor, layout) -> float:
    """The mean of a 0-dim tensor over every process (tensor-parallel ranks hold the same value)."""
    if layout.world == 1:
        return float(value)
    import torch.distributed as dist

    value = value.detach().clone()
    dist.all_reduce(value)
    return float(value) / layout.world


@torch.no_grad()
def evaluate(
    model, dataset, samples: int, batch: int, *, device, amp: str, layout, autocast: bool = True
) -> dict:
    """{"log_perplexity", "loss", "samples", "seconds"}: the mean next-token negative log-likelihood
    (nats) over the first ``samples`` windows of ``dataset`` (the validation split), ``batch`` windows
    at a time, each data-parallel rank scoring a contiguous share. A collective: every rank calls it."""
    import torch.nn.functional as F
    from zoo.torch import autocast as autocast_for

    began = time.perf_counter()
    count = min(samples, len(dataset)) if samples else len(dataset)
    share = -(-count // layout.dp)
    mine = range(layout.dp_rank * share, min(count, (layout.dp_rank + 1) * share))
    nll_sum = torch.zeros((), dtype=torch.float64, device=device)
    token_count = torch.zeros((), dtype=torch.float64, device=device)
    was_training = model.training
    model.eval()
    # Every rank runs the same number of forwards: FSDP gathers weights collectively.
    rounds = -(-share // batch)
    for round_index in range(rounds):
        indices = list(mine[round_index * batch : (round_index + 1) * batch])
        real = len(indices)
        indices = indices or [0]
        tokens = batch_to(np.stack([dataset.window(i) for i in indices]), device)
        with autocast_for(device, amp) if autocast else torch.autocast(device.type, enabled=False):
            logits = model(tokens[:, :-1])
        nll = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
        if real:
            nll_sum += nll.double().sum()
            token_count += nll.numel()
    model.train(was_training)
    if layout.world > 1:
        import torch.distributed as dist

        totals = torch.stack([nll_sum, token_count])
        dist.all_reduce(totals)
        nll_sum, token_count = totals[0] / layout.tp, totals[1] / layout.tp
    log_perplexity = float(nll_sum / token_count)
    return {
        "log_perplexity": log_perplexity,
        "loss": log_perplexity,
        "samples": count,
        "seconds": time.perf_counter() - began,
    }
