"""The training loop of one epoch and the evaluation (BLEU), as train.py calls them."""

from __future__ import annotations

import pathlib
import time

from zoo.errors import UserError

from transformer.data import collate, read_parallel, token_batches


def train_one_epoch(
    step, train_set, epoch: int, run, *, env, logger, position: dict, save_checkpoint, stop=None
) -> bool:
    """Train ``epoch`` (1-based) of ``train_set`` with ``step`` (a :class:`~transformer.step.TrainStep`).

    The epoch's token batches (``run.batch_per_gpu`` padded tokens each, the same order on every rank
    and every resumed run) are dealt to the ranks in turn; each update takes ``run.accumulation`` of
    this rank's. ``position`` (``step``: updates so far, ``step_in_epoch``: updates of this epoch) is
    advanced in place; a resumed run starts at its ``step_in_epoch``. Logs loss, log-perplexity,
    learning rate and tokens/s of all ranks every ``run.log_every`` updates and at the epoch's end;
    calls ``save_checkpoint()`` every ``run.checkpoint_every`` updates when that counts steps.
    ``stop(updates_done)`` (zoo.cli.Preemption's ``requested``), asked after each update, ends the epoch
    there (its readings logged); returns whether it did.
    """
    batches = token_batches(train_set, run.batch_per_gpu, seed=run.seed, epoch=epoch)
    per_rank = len(batches) // env.world_size
    if per_rank == 0:
        raise UserError(f"{len(batches)} batches cannot feed {env.world_size} processes")
    mine = batches[: per_rank * env.world_size][env.rank :: env.world_size]
    updates = len(mine) // run.accumulation
    every = run.checkpoint_every if run.checkpoint_every and run.checkpoint_every.unit == "steps" else None
    began, tokens_seen = time.perf_counter(), 0
    for update in range(position["step_in_epoch"], updates):
        group = mine[update * run.accumulation : (update + 1) * run.accumulation]
        loss, nll, tokens = step([collate(train_set, indices) for indices in group])
        position["step"] += 1
        position["step_in_epoch"] = update + 1
        tokens_seen += tokens
        stopping = stop is not None and stop(position["step"])
        if position["step"] % run.log_every == 0 or update == updates - 1 or stopping:
            seconds = time.perf_counter() - began
            readings = {
                "loss": float(loss),  # the one host sync of a logged update
                "log_perplexity": float(nll),
                "lr": step.lr,
                "throughput": tokens_seen * env.world_size / max(seconds, 1e-9),
            }
            logger.log(position["step"], readings, units={"throughput": "tokens/s"})
        if stopping:
            return True
        if every and every.due(epoch - 1, position["step"]):
            save_checkpoint()
    return False


def evaluate(model, tokenizer, data_dir, recipe: dict, device, amp: str) -> tuple[dict, str]:
    """({"bleu", "samples", "seconds"}, sacrebleu's signature): detokenised BLEU of ``eval.split``'s
    source translated by beam search (the ``eval:`` settings) against its raw reference."""
    from zoo.torch import autocast

    from transformer.evaluate import score_bleu
    from transformer.translate import translate_lines

    settings, (source_lang, target_lang) = recipe["eval"], recipe["data"]["langs"]
    split = pathlib.Path(data_dir) / settings["split"]
    sources, references = read_parallel(f"{split}.{source_lang}", f"{split}.{target_lang}")
    began = time.perf_counter()
    model.eval()
    with autocast(device, amp):
        translations = translate_lines(
            model,
            tokenizer,
            sources,
            beam=settings["beam"],
            device=device,
            batch_tokens=settings["batch_tokens"],
            length_penalty=settings["length_penalty"],
            max_length_a=settings["max_length_a"],
            max_length_b=settings["max_length_b"],
        )
    model.train()
    bleu, signature = score_bleu(translations, references)
    return {"bleu": bleu, "samples": len(sources), "seconds": time.perf_counter() - began}, signature
