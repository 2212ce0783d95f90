"""The training loop of one epoch and the evaluation (word error rate), as train.py calls them."""

from __future__ import annotations

import time

import torch
from zoo.errors import UserError

from rnnt.data import collate, epoch_batches


class EpochBatches(torch.utils.data.Dataset):
    """This rank's micro-batches of an epoch, loaded and collated by DataLoader workers: item k is
    (audio, audio_lengths, labels, label_lengths) of this rank's share of global batch k."""

    def __init__(self, utterances, batches: list, rank: int, per_rank: int, speed, seed: int, epoch: int):
        self.utterances, self.batches, self.rank, self.per_rank = utterances, batches, rank, per_rank
        self.speed, self.seed, self.epoch = speed, seed, epoch

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, k: int):
        mine = self.batches[k][self.rank * self.per_rank : (self.rank + 1) * self.per_rank]
        return collate(self.utterances.load(i, self.speed, self.seed, self.epoch) for i in mine)


def epoch_loader(train_set, run, data_cfg: dict, env, epoch: int, first_update: int = 0):
    """Batches of ``epoch`` from optimizer step ``first_update`` on (a resumed run skips the done ones)."""
    batches = epoch_batches(
        train_set.durations, run.batch_per_gpu * env.world_size, run.seed, epoch, int(data_cfg["num_buckets"])
    )
    updates = len(batches) // run.accumulation
    if updates == 0:
        raise UserError(
            f"{len(train_set)} utterances make no update of {run.accumulation} x {run.batch_per_gpu} x {env.world_size}"
        )
    speed = data_cfg["speed_perturbation"] if data_cfg["speed_perturbation"] else None
    batches = batches[first_update * run.accumulation : updates * run.accumulation]
    dataset = EpochBatches(train_set, batches, env.rank, run.batch_per_gpu, speed, run.seed, epoch)
    workers = int(data_cfg["workers"])
    # a generator of its own: starting the loader must not draw from the global stream (dither), or a
    # run resumed mid-epoch would draw differently from an unbroken one
    generator = torch.Generator().manual_seed(run.seed * 1000 + epoch)
    return updates, torch.utils.data.DataLoader(
        dataset,
        batch_size=None,
        num_workers=workers,
        pin_memory=torch.cuda.is_available(),
        generator=generator,
    )


def train_one_epoch(
    step,
    train_set,
    epoch: int,
    run,
    *,
    data_cfg: dict,
    env,
    logger,
    position: dict,
    save_checkpoint,
    stop=None,
) -> bool:
    """Train ``epoch`` (1-based) with ``step`` (a :class:`~rnnt.step.TrainStep`) from its update
    ``position["step_in_epoch"]`` to its end. ``position`` (``step``, ``step_in_epoch``) advances in place.
    Logs loss, learning rate and utterances/s of all ranks every ``run.log_every`` updates and at the
    epoch's end; calls ``save_checkpoint()`` every ``run.checkpoint_every`` updates when that counts steps.
    ``stop(updates_done)`` (zoo.cli.Preemption's ``requested``), asked after each update, ends the epoch
    there (its readings logged); returns whether it did."""
    updates, loader = epoch_loader(train_set, run, data_cfg, env, epoch, position["step_in_epoch"])
    every = run.checkpoint_every if run.checkpoint_every and run.checkpoint_every.unit == "steps" else None
    began, utterances_seen, micro = time.perf_counter(), 0, []
    for batch in loader:
        micro.append(batch)
        if len(micro) < run.accumulation:
            continue
        loss, utterances, _ = step(micro)
        micro = []
        position["step"] += 1
        position["step_in_epoch"] += 1
        utterances_seen += utterances
        stopping = stop is not None and stop(position["step"])
        if position["step"] % run.log_every == 0 or position["step_in_epoch"] == updates or stopping:
            seconds = time.perf_counter() - began
            readings = {
                "loss": float(loss),
                "lr": step.lr,
                "throughput": utterances_seen * env.world_size / max(seconds, 1e-9),
            }
            logger.log(position["step"], readings, units={"throughput": "utt/s"})
        if stopping:
            return True
        if every and every.due(epoch - 1, position["step"]):
            save_checkpoint()
    return False


@torch.no_grad()
def evaluate(model, eval_set, features, device, amp: str, eval_cfg: dict, env, tokenizer) -> dict:
    """{"wer", "samples", "seconds"}: greedy transcripts of this rank's share of ``eval_set`` (longest
    first, ``eval.batch_size`` at a time) scored with jiwer against the references, summed over ranks."""
    import jiwer
    from zoo.torch import autocast, gather_objects

    from rnnt.model import greedy_decode

    began = time.perf_counter()
    model.eval()
    features.eval()
    order = sorted(range(len(eval_set)), key=lambda i: -eval_set.durations[i])[env.rank :: env.world_size]
    size = int(eval_cfg["batch_size"])
    hypotheses, references = [], []
    for start in range(0, len(order), size):
        indices = order[start : start + size]
        audio, lengths, _, _ = collate(eval_set.load(i) for i in indices)
        with autocast(device, amp):
            feats, feat_lengths = features(audio.to(device), lengths.to(device))
            ids = greedy_decode(
                model,
                feats,
                feat_lengths,
                int(eval_cfg["max_symbols_per_step"]),
                int(eval_cfg["max_symbols"]),
            )
        hypotheses += [tokenizer.decode(row) for row in ids]
        references += [eval_set.entries[i]["text"] for i in indices]
    counts = [0, 0]
    if references:
        scored = jiwer.process_words(references, hypotheses)
        counts = [
            scored.substitutions + scored.deletions + scored.insertions,
            scored.substitutions + scored.deletions + scored.hits,
        ]
    totals = [sum(c) for c in zip(*gather_objects(counts, env.world_size), strict=True)]
    return {
        "wer": totals[0] / max(1, totals[1]),
        "samples": len(eval_set),
        "seconds": time.perf_counter() - began,
    }
