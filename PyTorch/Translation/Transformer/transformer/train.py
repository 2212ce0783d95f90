"""Train the Transformer: label-smoothed cross entropy, Adam with inverse-square-root warm-up,
token-count batches, gradient accumulation, mixed precision, DDP, exact resume, BLEU stop.

    python -m transformer.train --data-dir DATA --results-dir results [--target-bleu 25.0]
    torchrun --nproc_per_node 8 -m transformer.train --recipe configs/transformer_big_wmt14_8gpu.yaml

Writes RESULTS_DIR/checkpoint.pt (model, optimizer, schedule, generators, position in the epoch),
metrics.jsonl + tensorboard/ (MetricsLogger), mlperf.log (benchmark "transformer", ruleset 0.7.0;
a resumed run writes mlperf_resume<N>.log), model.pt (the weights and what evaluation needs) and,
with train.keep_checkpoints N, copies of the last N end-of-epoch checkpoints (checkpoint_epochEEE.pt).
"""

from __future__ import annotations

import argparse
import math
import pathlib
import shutil
import time

import torch
import torch.distributed as dist
import zoo.recipe
from torch import nn
from zoo.cli import entry_point

from transformer.data import Pairs, collate, load_tokenizer, make_numbers, token_batches
from transformer.model import PAD, build_model

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_RECIPE = MODEL_DIR / "configs" / "transformer_big_wmt14.yaml"
CHECKPOINT_NAME = "checkpoint.pt"
MODEL_NAME = "model.pt"
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
# The modes that replay CUDA graphs: on an H200 their backward overwrote a graph output still needed
# (the gradient of the embedding the encoder, the decoder and the output projection share).
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def build_parser() -> argparse.ArgumentParser:
    from zoo.cli import add_run_args, add_target_arg

    parser = argparse.ArgumentParser(
        prog="python -m transformer.train", description="Train the Transformer on a prepared data folder."
    )
    add_run_args(parser, default_recipe=DEFAULT_RECIPE, data_help="prepared data folder ($DATA_DIR)")
    add_target_arg(parser, "bleu", unit="BLEU points", example=25.0)
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default: the recipe's)")
    parser.add_argument(
        "--synthetic", action="store_true", help="the generated number-words task, no download"
    )
    parser.add_argument("--device", default=None, help="cpu, cuda (default: cuda:LOCAL_RANK where CUDA is)")
    return parser


def inverse_sqrt(warmup_steps: int):
    """The learning-rate factor at update ``step``: linear warm-up, then 1/sqrt(step) (peak 1.0)."""

    def factor(step: int) -> float:
        step = max(step, 1)
        if warmup_steps <= 0:
            return 1.0 / math.sqrt(step)
        return min(step / warmup_steps, math.sqrt(warmup_steps / step))

    return factor


def smoothed_loss(logits: torch.Tensor, target: torch.Tensor, smoothing: float) -> tuple:
    """(summed label-smoothed cross entropy, summed plain NLL) over the non-pad target tokens.

    The loss of ``F.cross_entropy(..., ignore_index=PAD, label_smoothing=smoothing, reduction="sum")``,
    from one fp32 log-softmax that also gives the NLL (which carries no gradient); no host sync.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    uniform = -logp.mean(dim=-1)
    real = target != PAD
    loss = torch.where(real, (1.0 - smoothing) * nll + smoothing * uniform, 0.0).sum()
    return loss, torch.where(real, nll.detach(), 0.0).sum()


class TranslationLoss(nn.Module):
    """The model and its training loss as one module: what DDP wraps, ``torch.compile`` compiles (one
    graph, so the fp32 loss over the vocabulary fuses with the logits) and :func:`train_step` calls.

    ``forward(src, tgt_in, tgt_out)`` -> :func:`smoothed_loss` of the teacher-forced logits.
    """

    def __init__(self, model: nn.Module, smoothing: float):
        super().__init__()
        self.model = model
        self.smoothing = smoothing

    def forward(self, src, tgt_in, tgt_out):
        return smoothed_loss(self.model(src, tgt_in), tgt_out, self.smoothing)


def compile_mode(value) -> str | None:
    """``train.compile`` as a ``torch.compile`` mode (zoo.recipe.compile_mode), without the CUDA-graph modes."""
    if value in CUDA_GRAPH_MODES:
        raise SystemExit(
            f"error: train.compile {value} replays CUDA graphs, which fail on this model's shared embedding "
            "gradient; use default or max-autotune-no-cudagraphs"
        )
    return zoo.recipe.compile_mode(value, modes=COMPILE_MODES)


def build_optimizer(model: nn.Module, opt_cfg: dict):
    """Adam with the recipe's settings; ``optimizer.fused`` runs its update as one fused kernel."""
    from zoo.torch import parameter_groups

    return torch.optim.Adam(
        parameter_groups(model, opt_cfg["weight_decay"]),
        lr=opt_cfg["lr"],
        betas=tuple(opt_cfg["betas"]),
        eps=opt_cfg["eps"],
        fused=zoo.recipe.flag(opt_cfg["fused"], "optimizer.fused"),
    )


def training_net(model: nn.Module, recipe: dict, device, distributed: bool = False) -> nn.Module:
    """What :func:`train_step` runs: :class:`TranslationLoss` around ``model`` (label smoothing from
    ``train.label_smoothing``), under DDP when ``distributed``, compiled as ``train.compile`` says.

    Token-count batches change shape every step: torch.compile compiles the first shape, recompiles
    with the dimensions that changed made dynamic (once, when the second batch changes all three),
    and then reuses that graph (lengths are multiples of ``data.LENGTH_MULTIPLE``, so inductor's
    alignment guard holds; a small last batch of an epoch may add one more graph).
    """
    from zoo.torch import distributed_model

    train_cfg = recipe["train"]
    mode = compile_mode(train_cfg["compile"])
    net = TranslationLoss(model, float(train_cfg["label_smoothing"]))
    if distributed:
        net = distributed_model(net, device)
    return torch.compile(net, mode=mode) if mode else net


def batch_to(batch: dict, device) -> dict:
    """The batch's tensors on ``device``; from pinned memory on a GPU, so the copy does not block the host."""
    device = torch.device(device)
    if device.type != "cuda":
        return {k: v.to(device) for k, v in batch.items()}
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}


def train_step(
    net,
    batches: list,
    optimizer,
    scheduler,
    scaler,
    *,
    device,
    amp: str,
    clip_norm: float,
):
    """One update over ``batches`` (host tensors; gradient accumulation: one backward each, one
    optimizer step). ``net`` is what :func:`training_net` returns.

    The loss is normalised by the update's target tokens (counted on the host). Returns (loss per token,
    nll per token) as 0-dim tensors on ``device`` and the tokens: reading the tensors waits for the GPU,
    so a caller reads them only when it logs.
    """
    from zoo.torch import autocast

    tokens = sum(int((b["tgt_out"] != PAD).sum()) for b in batches)
    total_loss = total_nll = torch.zeros((), device=device)
    for i, batch in enumerate(batches):
        batch = batch_to(batch, device)
        # Only the last micro-batch all-reduces gradients.
        sync = i == len(batches) - 1 or not hasattr(net, "no_sync")
        context = net.no_sync() if not sync else _null()
        with context:
            with autocast(device, amp):
                loss, nll = net(batch["src"], batch["tgt_in"], batch["tgt_out"])
            scaler.scale(loss / tokens).backward()
        total_loss = total_loss + loss.detach()
        total_nll = total_nll + nll
    if clip_norm > 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(net.parameters(), clip_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    return total_loss / tokens, total_nll / tokens, tokens


def _null():
    import contextlib

    return contextlib.nullcontext()


def bleu_on(model, tokenizer, data_dir, split: str, eval_recipe: dict, device, amp: str, langs) -> tuple:
    """(BLEU points, sacrebleu signature) of ``split``'s source translated against its raw reference."""
    from zoo.torch import autocast

    from transformer.evaluate import score_bleu
    from transformer.translate import translate_lines

    src_lines, refs = read_split_text(data_dir, split, langs)
    model.eval()
    with autocast(device, amp):
        hyps = translate_lines(
            model,
            tokenizer,
            src_lines,
            beam=eval_recipe["beam"],
            device=device,
            batch_tokens=eval_recipe["batch_tokens"],
            length_penalty=eval_recipe["length_penalty"],
            max_length_a=eval_recipe["max_length_a"],
            max_length_b=eval_recipe["max_length_b"],
        )
    model.train()
    return score_bleu(hyps, refs)


def read_split_text(data_dir, split: str, langs) -> tuple[list, list]:
    from transformer.data import read_parallel

    data_dir = pathlib.Path(data_dir)
    return read_parallel(data_dir / f"{split}.{langs[0]}", data_dir / f"{split}.{langs[1]}")


def read_training_checkpoint(path) -> dict:
    """A checkpoint.pt written by this training, loaded; a one-line SystemExit where it is not one."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file: say which one, in one line
        raise SystemExit(f"error: {path}: not a readable PyTorch checkpoint ({type(e).__name__})") from None
    if not isinstance(state, dict) or state.get("kind") != "transformer-training":
        raise SystemExit(f"error: {path} is not a Transformer training checkpoint")
    return state


def mlperf_log_path(results: pathlib.Path, resumed: bool) -> pathlib.Path:
    """mlperf.log for a new run; a resumed run writes mlperf_resume<N>.log (one run per file)."""
    if not resumed:
        return results / "mlperf.log"
    n = 1
    while (results / f"mlperf_resume{n}.log").exists():
        n += 1
    return results / f"mlperf_resume{n}.log"


@entry_point
def main(argv=None) -> dict:
    from zoo.cli import parse_args, recipe_from_args, resolve_resume
    from zoo.io import atomic_write
    from zoo.log import MetricsLogger
    from zoo.mlperf import MLPerfLogger
    from zoo.rng import rng_state, set_rng_state
    from zoo.torch import (
        check_replicas_agree,
        close_distributed,
        fast_math,
        gather_objects,
        grad_scaler,
        init_distributed,
        seed_everything,
    )

    args = parse_args(build_parser(), argv)
    recipe = recipe_from_args(args, {"target_bleu": "eval.target_bleu", "epochs": "train.epochs"})
    results = pathlib.Path(args.results_dir)
    resume_from = resolve_resume(args.resume, results / CHECKPOINT_NAME)
    # Everything a run reads is checked before it writes anything into the results folder.
    state = read_training_checkpoint(resume_from) if resume_from is not None else None
    if not args.synthetic:
        if not args.data_dir:
            raise SystemExit("error: pass --data-dir (or set DATA_DIR), or --synthetic")
        data_dir = pathlib.Path(args.data_dir)
        if not data_dir.is_dir():
            raise SystemExit(f"error: data dir {data_dir} does not exist")
        load_tokenizer(data_dir)
    env, device = init_distributed(args.device)
    fast_math(device)
    results.mkdir(parents=True, exist_ok=True)
    if args.synthetic:
        data_dir = results / "synthetic_data"
        if env.is_primary and not (data_dir / "meta.json").is_file():
            make_numbers(data_dir)
        if env.world_size > 1:
            dist.barrier()
    tokenizer = load_tokenizer(data_dir)
    data, train_cfg, opt_cfg, eval_cfg = recipe["data"], recipe["train"], recipe["optimizer"], recipe["eval"]
    langs = data["langs"]
    amp = recipe["amp"]
    seed = int(recipe["seed"])
    seed_everything(seed)

    model = build_model(recipe["model"], tokenizer.get_vocab_size()).to(device)
    optimizer = build_optimizer(model, opt_cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, inverse_sqrt(opt_cfg["warmup_steps"]))
    scaler = grad_scaler(device, amp)
    train_set = Pairs(data_dir, "train", data["max_length"])
    eval_split = eval_cfg["split"]
    eval_size = len(read_split_text(data_dir, eval_split, langs)[0])
    position = {"epoch": 1, "batch": 0, "step": 0, "best_bleu": 0.0}
    if state is not None:
        try:
            model.load_state_dict(state["model"])
        except RuntimeError as e:
            raise SystemExit(
                f"error: {resume_from} does not fit the recipe's model: {str(e).strip().splitlines()[-1][:200]}"
            ) from None
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        position = state["position"]
        set_rng_state(state["rng"][env.rank] if env.rank < len(state["rng"]) else state["rng"][0])
    net = training_net(model, recipe, device, distributed=env.world_size > 1)
    accumulation = int(train_cfg["accumulation"])
    epochs = int(train_cfg["epochs"])
    target = eval_cfg.get("target_bleu")
    max_tokens = int(data["max_tokens"])

    def save_checkpoint():
        rngs = gather_objects(rng_state(), env.world_size)
        if not env.is_primary:
            return
        state = {
            "kind": "transformer-training",
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "position": dict(position),
            "rng": rngs,
            "recipe": recipe,
        }
        with atomic_write(results / CHECKPOINT_NAME) as tmp:
            torch.save(state, tmp)

    bleu = signature = None
    mlperf_path = mlperf_log_path(results, resume_from is not None)
    with (
        MLPerfLogger(mlperf_path, "transformer", enabled=env.is_primary, stdout=False) as mlperf,
        MetricsLogger(results / "metrics.jsonl", enabled=env.is_primary) as logger,
    ):
        mlperf.cache_clear()
        mlperf.init_start()
        mlperf.seed(seed)
        mlperf.global_batch_size(max_tokens * env.world_size * accumulation)
        mlperf.gradient_accumulation_steps(accumulation)
        mlperf.train_samples(len(train_set))
        mlperf.eval_samples(eval_size)
        mlperf.hyperparameters(
            opt_name="adam",
            opt_base_learning_rate=opt_cfg["lr"],
            opt_learning_rate_warmup_steps=opt_cfg["warmup_steps"],
            opt_adam_beta_1=opt_cfg["betas"][0],
            opt_adam_beta_2=opt_cfg["betas"][1],
            opt_adam_epsilon=opt_cfg["eps"],
        )
        mlperf.event("max_sequence_length", data["max_length"], {"method": "discard"})
        mlperf.init_stop()
        mlperf.run_start()
        status = "aborted"
        net.train()
        for epoch in range(position["epoch"], epochs + 1):
            mlperf.epoch_start(epoch)
            every = token_batches(train_set, max_tokens, seed=seed, epoch=epoch)
            per_rank = len(every) // env.world_size
            if per_rank == 0:
                raise SystemExit(f"error: {len(every)} batches cannot feed {env.world_size} processes")
            mine = every[: per_rank * env.world_size][env.rank :: env.world_size]
            updates = len(mine) // accumulation
            began, tokens_seen = time.perf_counter(), 0
            for update in range(position["batch"] // accumulation, updates):
                group = mine[update * accumulation : (update + 1) * accumulation]
                batches = [collate(train_set, indices) for indices in group]
                loss, nll, tokens = train_step(
                    net,
                    batches,
                    optimizer,
                    scheduler,
                    scaler,
                    device=device,
                    amp=amp,
                    clip_norm=opt_cfg["clip_norm"],
                )
                position["step"] += 1
                position["batch"] = (update + 1) * accumulation
                tokens_seen += tokens
                if position["step"] % int(train_cfg["log_every"]) == 0 or update == updates - 1:
                    seconds = time.perf_counter() - began
                    logger.log(
                        position["step"],
                        {
                            "loss": float(loss),
                            "nll": float(nll),
                            "lr": scheduler.get_last_lr()[0],
                            "tokens_per_s": tokens_seen * env.world_size / max(seconds, 1e-9),
                        },
                        units={"tokens_per_s": " tok/s"},
                    )
                every_steps = int(train_cfg["checkpoint_every_steps"])
                if every_steps and position["step"] % every_steps == 0:
                    save_checkpoint()
            mlperf.epoch_stop(epoch)
            mlperf.eval_start(epoch)
            bleu = signature = None
            if env.is_primary:
                bleu, signature = bleu_on(
                    model, tokenizer, data_dir, eval_split, eval_cfg, device, amp, langs
                )
            if env.world_size > 1:
                shared = [bleu]
                dist.broadcast_object_list(shared, src=0)
                bleu = shared[0]
            mlperf.eval_stop(epoch)
            mlperf.eval_accuracy(bleu / 100, epoch)
            logger.log(position["step"], {"bleu": bleu, "epoch": epoch}, phase="val")
            if signature:
                print(f"epoch {epoch}: BLEU {bleu:.2f} on {eval_split} ({signature})", flush=True)
            position.update(epoch=epoch + 1, batch=0, best_bleu=max(position["best_bleu"], bleu))
            save_checkpoint()
            keep = int(train_cfg["keep_checkpoints"])
            if keep and env.is_primary:  # per-epoch copies for transformer.average
                shutil.copyfile(results / CHECKPOINT_NAME, results / f"checkpoint_epoch{epoch:03d}.pt")
                for old in sorted(results.glob("checkpoint_epoch*.pt"))[:-keep]:
                    old.unlink()
            if target is not None and bleu >= target:
                status = "success"
                break
        mlperf.run_stop(status)
    check_replicas_agree(model, env)
    if env.is_primary:
        with atomic_write(results / MODEL_NAME) as tmp:
            torch.save(
                {
                    "kind": "transformer",
                    "model": model.state_dict(),
                    "model_recipe": recipe["model"],
                    "langs": langs,
                    "vocab_size": tokenizer.get_vocab_size(),
                    "eval": eval_cfg,
                },
                tmp,
            )
        tokenizer.save(str(results / "tokenizer.json"))
    close_distributed()
    return {"bleu": bleu, "signature": signature, "step": position["step"], "status": status}


if __name__ == "__main__":
    main()
