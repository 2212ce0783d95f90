"""What the PyTorch and TensorFlow BERTs share beyond their data (``zoo.data.bert``, ``zoo.data.squad``):
the model sizes, the command line of pretraining and of SQuAD fine-tuning, the MLPerf record of a
pretraining run (its hyper-parameters and its blocks of training between evaluations) and the points
where a pretraining run stops to evaluate or to save. Framework-neutral: no torch or tensorflow here.

    config = bert_config("bert-large", vocab_size=30522)
    parser = pretraining_parser("python -m bert.pretrain", "...", default_recipe=..., data_help=...)
    recipe = pretraining_recipe(args, {"compile": "compile"})      # run: section checked
    log_mlperf_hyperparameters(mlperf, recipe, run, max_seq=128, global_batch=..., ...)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

from zoo.data.squad import DEV_FILE, TRAIN_FILE  # the files scripts/download_data.sh squad writes
from zoo.errors import UserError

# ----------------------------------------------------------------------------------------- model sizes


@dataclasses.dataclass
class BertConfig:
    """The architecture, in our field names (``from_dict`` also reads Google's bert_config.json names)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    # PyTorch only: under autocast, keep the residual stream (the LayerNorm outputs) in fp32 instead of
    # casting it to the autocast dtype (half-precision BERT recipes, apex O2, cast it).
    fp32_residual: bool = False

    def __post_init__(self):
        if self.hidden_size % self.num_heads:
            raise UserError(f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}")

    @classmethod
    def from_dict(cls, values: dict) -> BertConfig:
        """Our field names, or Google's / Hugging Face's ``bert_config.json`` names (num_hidden_layers, ...)."""
        aliases = {
            "num_hidden_layers": "num_layers",
            "num_attention_heads": "num_heads",
            "hidden_dropout_prob": "hidden_dropout",
            "attention_probs_dropout_prob": "attention_dropout",
        }
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{aliases.get(k, k): v for k, v in values.items() if aliases.get(k, k) in fields})

    def to_google(self) -> dict:
        """The ``bert_config.json`` Google's code reads."""
        return {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_act": "gelu",
            "hidden_dropout_prob": self.hidden_dropout,
            "attention_probs_dropout_prob": self.attention_dropout,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "initializer_range": self.initializer_range,
        }


CONFIGS = {
    "bert-large": dict(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096),
    "bert-base": dict(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072),
    "bert-tiny": dict(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256),
}


def bert_config(name: str, **overrides) -> BertConfig:
    """A named architecture (bert-large, bert-base, bert-tiny) with field overrides (vocab_size, ...)."""
    if name not in CONFIGS:
        raise UserError(f"unknown BERT config {name!r}; known: {', '.join(CONFIGS)}")
    return BertConfig(**{**CONFIGS[name], **overrides})


# ------------------------------------------------------------------------------- the command lines


def steps_interval(text: str) -> str:
    """``--eval-every 200`` / ``--checkpoint-every 200`` as the run: interval "200 steps"."""
    return f"{int(text)} steps"


# Pretraining flags of both BERTs -> the recipe keys they set (zoo.cli.RUN_FLAGS adds --amp,
# --batch-size, --accumulation, --steps, --log-every, --seed and --target-mlm-accuracy).
PRETRAINING_FLAG_KEYS = {
    "model": "model",
    "lr": "optimizer.lr",
    "warmup": "schedule.warmup",
    "max_seq": "max_seq",
    "vocab_size": "vocab_size",
    "eval_every": "run.eval_every",
    "checkpoint_every": "run.checkpoint_every",
}
# this entry point's own old spellings (zoo.cli rejects --config, --no-resume, ... for every model)
PRETRAINING_RENAMED = {"--target-mlm-loss": "--target-mlm-accuracy (a fraction, e.g. 0.720)"}


def pretraining_parser(
    prog: str, description: str, *, default_recipe, data_help: str
) -> argparse.ArgumentParser:
    """The pretraining command line both BERTs share; a model adds its own levers to it."""
    from zoo.cli import add_run_args, add_target_arg

    p = argparse.ArgumentParser(prog=prog, description=description)
    add_run_args(p, default_recipe=default_recipe, data_help=data_help)
    add_target_arg(p, "mlm_accuracy", unit="a fraction of the masked tokens, MLPerf's unit", example=0.720)
    p.add_argument("--synthetic", action="store_true", help="random full-length samples (speed only)")
    p.add_argument(
        "--eval-data-dir",
        help="prepared held-out samples for the MLM accuracy (default: the first eval_samples of --data-dir)",
    )
    p.add_argument("--init-checkpoint", help="start from these weights (phase 1 -> 2 hand-off, HF, Google)")
    p.add_argument("--model", help="bert-large, bert-base or bert-tiny")
    p.add_argument("--steps", type=int, help="optimizer steps of the whole phase (run.steps)")
    p.add_argument("--stop-after", type=int, help="leave after this many steps of this run (resume later)")
    p.add_argument("--batch-size", type=int, help="samples per GPU per micro-step (run.batch_per_gpu)")
    p.add_argument("--accumulation", type=int, help="micro-steps per optimizer step (run.accumulation)")
    p.add_argument("--lr", type=float)
    p.add_argument("--warmup", type=float, help="warm-up: fraction of steps (<1) or a step count")
    p.add_argument("--seed", type=int)
    p.add_argument("--max-seq", type=int, help="synthetic data only (prepared data fixes it)")
    p.add_argument("--vocab-size", type=int, help="synthetic data only (recipe key vocab_size)")
    p.add_argument(
        "--checkpoint-every", type=steps_interval, metavar="N", help="optimizer steps between checkpoints"
    )
    p.add_argument("--log-every", type=int, help="optimizer steps between train readings (run.log_every)")
    p.add_argument(
        "--eval-every",
        type=steps_interval,
        metavar="N",
        help="optimizer steps between MLM accuracy evaluations",
    )
    return p


def pretraining_recipe(args, flag_keys: dict | None = None) -> dict:
    """The recipe with ``--set`` and the flags applied (zoo.cli.recipe_from_args), checked for what
    pretraining needs: a run counted in steps, intervals in steps, a target MLM accuracy that is a fraction."""
    from zoo.cli import recipe_from_args
    from zoo.recipe import run_config

    if args.stop_after is not None and args.stop_after < 1:  # 0 would write the untrained model as a result
        raise UserError(f"--stop-after must be a positive integer (steps of this run), not {args.stop_after}")
    recipe = recipe_from_args(args, {**PRETRAINING_FLAG_KEYS, **(flag_keys or {})})
    run = run_config(recipe, args.recipe)
    if run.steps is None:
        raise UserError(f"pretraining counts optimizer steps: set run.steps, not run.epochs ({args.recipe})")
    for key in ("eval_every", "checkpoint_every"):
        interval = getattr(run, key)
        if interval is not None and interval.unit != "steps":
            raise UserError(
                f"pretraining counts optimizer steps: run.{key} must be 'N steps', not '{interval}'"
            )
    target = run.target.value
    if target is not None and not 0 < target <= 1:
        raise UserError(f"target mlm_accuracy {target:g} is not a fraction in (0, 1] (MLPerf's 0.720)")
    return recipe


# SQuAD flags of both BERTs -> the recipe keys they set (zoo.cli.RUN_FLAGS adds --amp, --batch-size,
# --epochs, --steps (--max-steps), --seed and --target-f1).
SQUAD_FLAG_KEYS = {"model": "model", "lr": "optimizer.lr", "max_seq": "max_seq", "doc_stride": "doc_stride"}


def squad_parser(
    prog: str, description: str, *, default_recipe, checkpoint_help: str
) -> argparse.ArgumentParser:
    """The SQuAD fine-tuning / prediction command line both BERTs share; a model adds its own levers."""
    from zoo.cli import add_run_args, add_target_arg

    p = argparse.ArgumentParser(prog=prog, description=description)
    add_run_args(
        p,
        default_recipe=default_recipe,
        resume=False,
        data_help=f"folder with {TRAIN_FILE} and {DEV_FILE} (scripts/download_data.sh squad; $DATA_DIR)",
    )
    add_target_arg(p, "f1", unit="%", example=90.5)
    p.add_argument("--do-train", action="store_true")
    p.add_argument("--do-predict", action="store_true")
    p.add_argument("--train-file", help=f"default: DATA_DIR/{TRAIN_FILE}")
    p.add_argument("--predict-file", help=f"default: DATA_DIR/{DEV_FILE}")
    p.add_argument("--vocab", help="vocab.txt of the pretrained model (default: the fine-tuned checkpoint's)")
    p.add_argument("--init-checkpoint", help=checkpoint_help)
    p.add_argument("--model", help="bert-large, bert-base or bert-tiny")
    p.add_argument("--epochs", type=int, help="epochs of fine-tuning (run.epochs)")
    p.add_argument(
        "--steps", "--max-steps", dest="steps", type=int, help="optimizer steps instead of epochs (run.steps)"
    )
    p.add_argument("--batch-size", type=int, help="samples per GPU (run.batch_per_gpu)")
    p.add_argument("--lr", type=float)
    p.add_argument("--max-seq", type=int)
    p.add_argument("--doc-stride", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument(
        "--force",
        action="store_true",
        help="with --do-train: replace the fine-tuned model the results dir holds",
    )
    return p


def parse_squad_args(parser: argparse.ArgumentParser, argv=None, *, outputs=()) -> argparse.Namespace:
    """Parse, fill ``--train-file`` / ``--predict-file`` from ``--data-dir`` and check that what
    ``--do-train`` / ``--do-predict`` need is there (``parser.error`` otherwise). ``outputs``: what
    fine-tuning writes in the results dir (files or folders); one that is there already is a UserError
    with ``--do-train`` unless ``--force``, before anything is read or trained."""
    from zoo.cli import parse_args

    args = parse_args(parser, argv)
    if args.data_dir:
        args.train_file = args.train_file or str(Path(args.data_dir) / TRAIN_FILE)
        args.predict_file = args.predict_file or str(Path(args.data_dir) / DEV_FILE)
    if not (args.do_train or args.do_predict):
        parser.error("give --do-train and/or --do-predict")
    if args.do_train and not args.train_file:
        parser.error("--do-train needs --train-file or --data-dir")
    if args.do_predict and not args.predict_file:
        parser.error("--do-predict needs --predict-file or --data-dir")
    if args.do_train and not args.force:
        for name in outputs:
            if os.path.lexists(Path(args.results_dir) / name):
                raise UserError(
                    f"{Path(args.results_dir) / name} exists (an earlier fine-tuning's): pass --force to replace it, "
                    "or give another --results-dir"
                )
    return args


def squad_recipe(args, flag_keys: dict | None = None, saved: dict | None = None) -> dict:
    """The recipe with ``--set`` and the flags applied; ``--steps N`` replaces the recipe's epochs. The dev
    set is scored every run.eval_every epochs; a target F1 must be a percentage and needs the dev set
    (``--do-predict``). ``saved``: the state of a fine-tuned checkpoint (:func:`fine_tuned_state`): its
    recipe replaces the default one (prediction scores with the settings fine-tuning scored with)."""
    from zoo.cli import recipe_from_args
    from zoo.recipe import run_config

    if args.steps is not None:
        args.set = [*args.set, "run.epochs=null"]  # a run is counted in epochs or in steps, not both
    keys = {**SQUAD_FLAG_KEYS, **(flag_keys or {})}
    recipe = recipe_from_args(args, keys, saved=(saved or {}).get("recipe"))
    run = run_config(recipe, args.recipe)
    if run.eval_every is not None and run.eval_every.unit != "epochs":
        raise UserError(
            f"SQuAD is scored after whole epochs: run.eval_every must be 'N epochs' or null ({args.recipe})"
        )
    if run.checkpoint_every is not None:
        raise UserError(
            f"SQuAD fine-tuning keeps no training checkpoint: run.checkpoint_every must be null ({args.recipe})"
        )
    target = run.target.value
    if target is not None and not 1 < target <= 100:
        raise UserError(f"target f1 {target:g} is not a percentage in (1, 100] (e.g. 90.5)")
    if target is not None and not args.do_predict:
        raise UserError("--target-f1 needs --do-predict (F1 is measured on the dev set)")
    return recipe


def fine_tuned_state(args, read_state) -> dict | None:
    """The state a SQuAD fine-tuning run saved with its weights (``task: squad``, ``recipe``, ``vocab``)
    when ``--init-checkpoint`` is such a checkpoint and this run only predicts; ``read_state(path)`` reads
    it (None for any other file). ``--vocab`` left out becomes the checkpoint's."""
    saved = None
    if args.init_checkpoint and not args.do_train:
        state = read_state(args.init_checkpoint)
        saved = state if isinstance(state, dict) and state.get("task") == "squad" else None
    if args.vocab is None:
        args.vocab = (saved or {}).get("vocab")
        if not args.vocab or not Path(args.vocab).is_file():
            where = f" (the checkpoint's {args.vocab} is gone)" if args.vocab else ""
            raise UserError(f"give --vocab (the vocab.txt of the pretrained model){where}")
    return saved


# ------------------------------------------------------------------------------- a pretraining run


def warmup_steps(warmup: float, total_steps: int) -> int:
    """The schedule's ``warmup``: a fraction of ``total_steps`` (< 1) or a step count."""
    return int(warmup * total_steps if warmup < 1 else warmup)


def steps_to_stop(done: int, end: int, *intervals) -> int:
    """Optimizer steps from ``done`` to the next step where one of ``intervals`` (zoo.recipe.Interval in
    steps, or None: only at the end) is due, at most to ``end``."""
    stops = [end] + [(done // i.count + 1) * i.count for i in intervals if i is not None]
    return min(stops) - done


def log_mlperf_hyperparameters(
    mlperf, recipe: dict, run, *, max_seq: int, global_batch: int, train_samples: int, eval_samples: int
) -> None:
    """The sizes and hyper-parameters MLPerf's BERT rules ask for, from this run's recipe and its
    ``run`` (zoo.recipe.RunConfig)."""
    optimizer = recipe["optimizer"]
    warmup = warmup_steps(recipe["schedule"]["warmup"], run.steps)
    beta_1, beta_2 = optimizer.get("betas", (0.9, 0.999))
    mlperf.seed(run.seed)
    mlperf.global_batch_size(global_batch)
    mlperf.gradient_accumulation_steps(run.accumulation)
    mlperf.train_samples(train_samples)
    mlperf.eval_samples(eval_samples)
    mlperf.hyperparameters(
        opt_name="lamb",
        opt_base_learning_rate=optimizer["lr"],
        opt_lamb_epsilon=optimizer.get("eps", 1e-6),
        opt_lamb_beta_1=beta_1,
        opt_lamb_beta_2=beta_2,
        opt_lamb_weight_decay_rate=optimizer["weight_decay"],
        opt_learning_rate_training_steps=run.steps,
        opt_learning_rate_warmup_steps=warmup,
        num_warmup_steps=warmup,
        start_warmup_step=0,
        max_sequence_length=max_seq,
    )


class MLPerfBlocks:
    """MLPerf BERT's progress events (zoo.mlperf.MLPerfLogger ``mlperf``): training between two
    evaluations is one block, and progress is counted in samples trained (``global_batch`` a step).

        blocks = MLPerfBlocks(mlperf, global_batch, run.eval_every, end)
        blocks.start(step)                 # before training: opens a block unless one is open
        blocks.eval_start(step)            # closes the block
        blocks.eval_stop(step, accuracy)   # eval_stop and eval_accuracy
        blocks.close()                     # at the end (a run without evaluation data)
    """

    def __init__(self, mlperf, global_batch: int, eval_every, end: int):
        self.mlperf, self.global_batch, self.eval_every, self.end = mlperf, global_batch, eval_every, end
        self.first = None  # samples trained when the open block began

    def start(self, step: int) -> None:
        if self.first is None:
            self.first = step * self.global_batch
            steps = steps_to_stop(step, self.end, self.eval_every)
            self.mlperf.block_start(self.first, steps * self.global_batch)

    def close(self) -> None:
        if self.first is not None:
            self.mlperf.block_stop(self.first)
            self.first = None

    def eval_start(self, step: int) -> None:
        self.close()
        self.mlperf.eval_start(step * self.global_batch)

    def eval_stop(self, step: int, accuracy: float) -> None:
        self.mlperf.eval_stop(step * self.global_batch)
        self.mlperf.eval_accuracy(accuracy, step * self.global_batch)


# ------------------------------------------------------------------------------- the Triton client


def deploy_parser(prog: str, description: str, *, repository: str, model: str, models_help: str):
    """The command line of both BERTs' ``deploy_triton.sh``: the repository and model, a question and its
    context or a SQuAD file, the server (``--url`` or a local one) and the load mode's flags."""
    from zoo.triton.load import add_load_args

    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--model-repository", default=repository)
    p.add_argument("--model", default=model, help=models_help)
    p.add_argument("--vocab", help="vocab.txt (default: the repository's copy)")
    p.add_argument("--url", help="host:port of a running server (default: start a local one)")
    p.add_argument("--protocol", choices=["http", "grpc"], default="http")
    p.add_argument("--question", help="a question about --context")
    p.add_argument("--context", help="the paragraph that holds the answer")
    p.add_argument("--squad-file", help="answer the questions of a SQuAD JSON file instead")
    p.add_argument("--limit", type=int, default=16, help="questions of --squad-file to answer")
    p.add_argument("--max-seq", type=int, default=384)
    p.add_argument("--doc-stride", type=int, default=128)
    add_load_args(p)
    return p


def questions_of(path) -> list:
    """The questions (zoo.data.squad.Example) of a SQuAD-format JSON file; answers are not needed to ask
    them (unlike training and scoring, which read the file with zoo.data.squad.read_squad and its checks)."""
    from zoo.data.squad import Example, load_squad_json

    raw = load_squad_json(path)
    try:
        return [
            Example(qa["id"], qa["question"], paragraph["context"])
            for article in raw
            for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]
        ]
    except (KeyError, TypeError) as e:
        raise UserError(f"{path} is not a SQuAD file: a question lacks {e}") from None


def ask_triton(args) -> dict:
    """``deploy_parser``'s command: serve ``--model`` (a local tritonserver, or ``--url``), ask the questions
    (windowed and decoded here, zoo.data.squad), print and return each answer, the latency and, where the
    SQuAD file gives answers, their exact match and F1 (``score_asked``); with ``--concurrency``, the load table."""
    import json

    from zoo.bench import percentiles
    from zoo.data.squad import Example, answer_through_triton, make_features, request_inputs, score_asked
    from zoo.data.wordpiece import load_tokenizer
    from zoo.triton.client import serve_or_connect
    from zoo.triton.load import run_load_mode

    repo = Path(args.model_repository)
    if args.url is None and not (repo / args.model / "config.pbtxt").is_file():
        raise UserError(f"{repo} has no model {args.model} (run scripts/export_triton.sh)")
    tokenizer = load_tokenizer(Path(args.vocab) if args.vocab else repo / "vocab.txt")
    if args.squad_file:
        examples = questions_of(args.squad_file)[: args.limit]
    elif args.question and args.context:
        examples = [Example("question", args.question, args.context)]
    else:
        raise UserError("give --question and --context, or --squad-file")
    with serve_or_connect(repo, args.model, url=args.url, protocol=args.protocol) as url:
        if args.concurrency:
            features = make_features(examples, tokenizer, max_seq=args.max_seq, doc_stride=args.doc_stride)
            requests = request_inputs(features, 8)
            return {
                "load": run_load_mode(url, args.model, requests, args, outputs=["start_logits", "end_logits"])
            }
        window = dict(protocol=args.protocol, max_seq=args.max_seq, doc_stride=args.doc_stride)
        answers, latencies = answer_through_triton(url, args.model, examples, tokenizer, **window)
    for example in examples:
        print(json.dumps({"id": example.qid, "question": example.question, "answer": answers[example.qid]}))
    stats = percentiles(latencies, (50, 99))
    print(f"{len(latencies)} requests, latency p50 {stats['p50']:.1f} ms, p99 {stats['p99']:.1f} ms")
    result = {"answers": answers, "latency_ms_p50": stats["p50"], "latency_ms_p99": stats["p99"]}
    if args.squad_file and (scores := score_asked(args.squad_file, answers)):  # the file gives answers
        print(f"served answers against the file's: exact match {scores['exact_match']:.2f}%, "
              f"F1 {scores['f1']:.2f}% over {scores['questions']} questions")  # fmt: skip
        result.update(scores)
    return result
