"""The command-line vocabulary every model's entry points share (docs/ARCHITECTURE.md, "The command line").

    parser = argparse.ArgumentParser(prog="python -m resnet50.train", ...)
    add_run_args(parser, default_recipe=DEFAULT_RECIPE)
    add_target_arg(parser, "top1", unit="%", example=75.9)
    args = parse_args(parser, argv, renamed={"--target-accuracy": "--target-top1"})
    recipe = recipe_from_args(args, {"batch_size": "data.batch_size"})
    resume_from = resolve_resume(args.resume, results_dir / "checkpoint.pt")

Flags: ``--recipe FILE``, repeatable ``--set KEY=VALUE``, ``--amp {bf16,fp16,fp32}``,
``--resume {auto,PATH,none}``, ``--data-dir`` ($DATA_DIR), ``--results-dir`` ($RESULTS_DIR),
``--target-<metric>`` in the metric's published unit, ``--verbose`` (zoo.console); ``--gpus``/``NGPU``
belong to the shell launcher. A parser is built from light modules only: the framework is imported after
parsing, so that ``--help`` and a bad flag answer at once (tests/test_help.py).
"""

from __future__ import annotations

import argparse
import functools
import os
import pathlib
import sys

from zoo.errors import UserError, one_line

AMP_CHOICES = ("bf16", "fp16", "fp32")

# Spellings the models used before the shared vocabulary; each now ends in a one-line error.
RENAMED_FLAGS = {
    "--config": "--recipe",
    "--precision": "--amp",
    "--no-resume": "--resume none",
    "--target-accuracy": "--target-top1",
}

RESUME_HELP = (
    "auto: continue RESULTS_DIR's checkpoint if there is one; PATH: continue that checkpoint; "
    "none: start over (an existing checkpoint is overwritten). Default: start a new run, and stop "
    "with an error if RESULTS_DIR already holds a checkpoint"
)


def add_run_args(
    parser: argparse.ArgumentParser,
    *,
    default_recipe,
    data_dir: bool = True,
    results_dir: bool = True,
    amp: bool = True,
    resume: bool = True,
    data_help: str = "dataset folder ($DATA_DIR)",
) -> argparse.ArgumentParser:
    """Add the shared flags to ``parser``; a value left unset (None) keeps the recipe's."""
    parser.add_argument(
        "--recipe", default=str(default_recipe), action=_GivenRecipe, help="recipe YAML (configs/*.yaml)"
    )
    # The default recipe is the model's schema: a key it lacks is a misspelling (zoo.recipe's strict check).
    # recipe_given: whether --recipe was on the command line (a checkpoint's own recipe yields to it).
    parser.set_defaults(recipe_keys_from=str(default_recipe), recipe_given=False)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe key, e.g. --set optimizer.lr=0.1 (repeatable)",
    )
    if amp:
        parser.add_argument(
            "--amp", choices=AMP_CHOICES, default=None, help="mixed precision (default: the recipe's)"
        )
    if data_dir:
        parser.add_argument("--data-dir", default=os.environ.get("DATA_DIR"), help=data_help)
    if results_dir:
        parser.add_argument(
            "--results-dir",
            default=os.environ.get("RESULTS_DIR", "results"),
            help="logs, checkpoints and curves ($RESULTS_DIR)",
        )
    if resume:
        parser.add_argument("--resume", default=None, metavar="{auto,PATH,none}", help=RESUME_HELP)
    add_verbose_arg(parser)
    return parser


def add_verbose_arg(parser: argparse.ArgumentParser) -> None:
    """``--verbose``: MLPerf lines and third-party warnings on the console too (zoo.console)."""
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also print MLPerf :::MLLOG lines and the frameworks' warnings (default: the log files only)",
    )


class _GivenRecipe(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        namespace.recipe, namespace.recipe_given = values, True


def add_target_arg(parser: argparse.ArgumentParser, metric: str, *, unit: str, example) -> None:
    """``--target-<metric> VALUE``: stop once the quality metric reaches VALUE (in ``unit``)."""
    parser.add_argument(
        f"--target-{metric.replace('_', '-')}",
        type=float,
        default=None,
        metavar="VALUE",
        # argparse %-formats help strings: a unit such as "%" must reach it as "%%".
        help=f"stop once {metric} reaches VALUE ({unit}, e.g. {example}); default: the recipe's".replace(
            "%", "%%"
        ),
    )


def reject_renamed(argv, renamed: dict | None = None) -> None:
    """A flag spelt the old way (``--config``, ``--precision``, ...) ends in one line naming the new one."""
    table = {**RENAMED_FLAGS, **(renamed or {})}
    for i, item in enumerate(argv):
        flag, _, value = item.partition("=")
        if flag in table:
            raise UserError(f"{flag} was renamed: use {table[flag]}")
        if flag == "--amp" and not value and i + 1 < len(argv):
            value = argv[i + 1]
        if flag == "--amp" and value == "none":
            raise UserError("--amp none was renamed: use --amp fp32")


def parse_args(parser: argparse.ArgumentParser, argv=None, *, renamed: dict | None = None):
    """``parser.parse_args`` after :func:`reject_renamed`; a parser with ``--verbose`` sets the console
    (``zoo.console.configure``: quiet unless ``--verbose``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    reject_renamed(argv, renamed)
    args = parser.parse_args(argv)
    if hasattr(args, "verbose"):
        from zoo.console import configure

        configure(args.verbose)
    return args


# Flags every training entry point may offer, and the run: key each one sets (zoo.recipe.RUN_KEYS).
# ``--target-<metric>`` (add_target_arg) sets run.target.value.
RUN_FLAGS = {
    "amp": "run.precision",
    "batch_size": "run.batch_per_gpu",
    "accumulation": "run.accumulation",
    "epochs": "run.epochs",
    "steps": "run.steps",
    "log_every": "run.log_every",
    "seed": "run.seed",
}


def recipe_from_args(args, flag_to_key: dict | None = None, saved: dict | None = None) -> dict:
    """Load ``args.recipe`` with ``--set`` items, then the flags that were given: those of RUN_FLAGS and
    ``--target-<metric>`` into the recipe's run: section, those of ``flag_to_key`` (``{"image_size":
    "data.image_size"}``) where the table says.

    ``saved``: the recipe a training checkpoint carries (evaluation, export): it replaces the default
    recipe unless ``--recipe`` was given, so a checkpoint is evaluated with the settings it was trained
    with; ``--set`` and the flags still apply on top."""
    from zoo.recipe import load_recipe, parse_overrides, saved_recipe

    overrides = parse_overrides(args.set)
    table = dict(RUN_FLAGS)
    table.update(flag_to_key or {})
    for flag, key in table.items():
        value = getattr(args, flag, None)
        if value is not None:
            overrides[key] = value
    for name, value in vars(args).items():
        if name.startswith("target_") and value is not None:
            overrides["run.target.value"] = value
    _one_length(overrides)
    keys_from = getattr(args, "recipe_keys_from", None)
    if saved is not None and not getattr(args, "recipe_given", False):
        return saved_recipe(saved, overrides, "the checkpoint's recipe", defaults_from=keys_from)
    return load_recipe(args.recipe, overrides, known_keys_from=keys_from)


def _one_length(overrides: dict) -> None:
    """A run is as long as run.epochs or run.steps: giving one of them (a flag or --set) without the other
    sets the other to null, so ``--steps 200`` works on a recipe counted in epochs and the reverse."""
    for given, other in (("run.epochs", "run.steps"), ("run.steps", "run.epochs")):
        if overrides.get(given) not in (None, "null", "") and other not in overrides:
            overrides[other] = None


def resolve_resume(resume: str | None, checkpoint: pathlib.Path | str) -> pathlib.Path | None:
    """The checkpoint a run continues from, or None for a new run.

    ``checkpoint`` is where this run writes its own (RESULTS_DIR/<name>). ``auto`` takes it when it
    exists; ``none`` starts over; a path must exist. Not given (None) starts over, but refuses a
    results folder that already holds a checkpoint, so that no finished work is overwritten.
    Temporary files that a run killed mid-write left beside ``checkpoint`` are removed first.
    """
    from zoo.io import remove_stale_temps

    checkpoint = pathlib.Path(checkpoint)
    check_results_dir(checkpoint.parent)
    # A run killed while writing a checkpoint left its temporary file (zoo.checkpoints.atomic_write).
    for stale in remove_stale_temps(checkpoint.parent):
        print(f"removed {stale}, left by a run killed while writing it", file=sys.stderr)
    if resume is None:
        if checkpoint.exists():
            raise UserError(
                f"{checkpoint} exists: pass --resume auto to continue it, --resume none to start "
                "over (it will be overwritten), or another --results-dir"
            )
        return None
    if resume == "none":
        return None
    if resume == "auto":
        return checkpoint if checkpoint.exists() else None
    path = pathlib.Path(resume)
    if not path.exists():
        raise UserError(f"--resume {resume}: no such checkpoint")
    return path


def check_results_dir(results_dir) -> None:
    """UserError unless ``results_dir`` is a folder or can be made one: the first part of it that exists
    must be a folder (a results dir under a file fails here, before any work, not at the first save)."""
    path = pathlib.Path(results_dir)
    for part in (path, *path.parents):
        if part.exists():
            if not part.is_dir():
                where = "is a file" if part == path else f"is under {part}, which is a file"
                raise UserError(f"results dir {path} {where}: give --results-dir a folder")
            return


def entry_point(main):
    """Decorate a script's ``main(argv=None)``: a :class:`~zoo.errors.UserError` raised anywhere below
    it ends the process with ``error: <message>`` on stderr and exit status 1, no traceback; Ctrl-C ends
    it with ``interrupted (Ctrl-C)`` and status 130; SIGTERM (a scheduler's preemption, ``kill``) ends it
    with ``terminated (SIGTERM)`` and status 143 after the ``finally`` blocks and context managers below
    have run (temporary files removed, child processes stopped, logs closed), where the default action
    would end the process on the spot. Checkpoints are written then renamed, so the last whole one is
    where ``--resume auto`` continues. The only place a UserError becomes an exit (``SystemExit``):
    library code raises, entry points report."""

    @functools.wraps(main)
    def run(*args, **kwargs):
        cpu_thread_defaults()
        installed = _raise_on_sigterm()
        try:
            return main(*args, **kwargs)
        except UserError as error:
            sys.stdout.flush()
            raise SystemExit(f"error: {one_line(error, limit=2000)}") from None
        except KeyboardInterrupt:
            if getattr(sys.excepthook, "reports_interrupts", False):
                raise  # a served model's hook reports it once the server has stopped (zoo.triton.server)
            sys.stdout.flush()
            print("interrupted (Ctrl-C)", file=sys.stderr, flush=True)
            raise SystemExit(130) from None  # 128 + SIGINT, as a shell reports it
        except Terminated:
            sys.stdout.flush()
            print(
                "terminated (SIGTERM): --resume auto continues from the last checkpoint",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(143) from None  # 128 + SIGTERM
        finally:
            if installed:  # main called in-process (a test, another script) leaves SIGTERM as it found it
                import signal

                signal.signal(signal.SIGTERM, signal.SIG_DFL)

    return run


class Terminated(BaseException):
    """SIGTERM arrived (raised by the handler entry_point installs). A BaseException, as KeyboardInterrupt
    is, so that ``except Exception`` blocks let it through."""


class Preemption:
    """SIGTERM deferred to a step boundary, where a training loop writes a checkpoint before it ends, so
    that ``--resume auto`` continues from that very step (not from the last scheduled checkpoint)::

        with Preemption(env.world_size, device) as preemption:
            for ...:  # after each optimizer step
                if preemption.requested(state.step):
                    save()              # the state after this step: resumed, the run is the unbroken one
                    preemption.stop()   # raises Terminated: entry_point reports it, exit status 143

    While entered (in the main thread of a process whose entry point installed the SIGTERM handler), a
    SIGTERM only sets ``signalled``. With several ranks the flag is agreed (any rank's) every ``every``
    steps, at the same steps on every rank, so all of them stop after the same step; one rank alone reads
    its own flag at each step. A second SIGTERM while the checkpoint is written is ignored (SIGKILL is
    not); one that comes during an evaluation is taken at the next training step.

    ``world`` counts processes. They agree through torch.distributed (a MAX all-reduce on ``device``),
    or through ``agree(flag) -> bool``, any process's flag, for another framework's collective
    (TensorFlow's strategy, MXNet's kvstore); ``stop`` calls it once more as the barrier.
    """

    active: Preemption | None = None

    def __init__(self, world: int = 1, device=None, every: int = 10, agree=None):
        self.world, self.device, self.every, self.agree = world, device, max(1, every), agree
        self.signalled = False

    def __enter__(self) -> Preemption:
        Preemption.active = self
        return self

    def __exit__(self, *exc) -> None:
        Preemption.active = None  # a SIGTERM after the last step's check lets the run finish as it was

    def requested(self, step: int) -> bool:
        """Whether the loop should checkpoint and stop after ``step`` (the optimizer steps done)."""
        if self.world == 1:
            return self.signalled
        if step % self.every:
            return False
        if self.agree is not None:
            self.signalled = bool(self.agree(self.signalled))
            return self.signalled
        import torch
        import torch.distributed as dist

        flag = torch.tensor([int(self.signalled)], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        self.signalled = bool(flag.item())
        return self.signalled

    def stop(self) -> None:
        """End every rank together, after the checkpoint is written (raises Terminated)."""
        if self.world > 1 and self.agree is not None:
            self.agree(True)  # a collective: every process is here, so rank 0 has written the checkpoint
        elif self.world > 1:
            import torch.distributed as dist

            dist.barrier()  # rank 0 has written the checkpoint
        Preemption.active = None
        raise Terminated()


def cpu_thread_defaults(environ=None, dev="/dev") -> None:
    """On a machine without a visible NVIDIA GPU, make OpenMP's idle threads sleep instead of spinning
    (``OMP_WAIT_POLICY=PASSIVE``) unless the caller set the variable. OpenMP reads it once, when the
    framework is loaded, so :func:`entry_point` calls this before ``main`` imports torch or MXNet.
    Spinning threads on cores that other jobs use cost a CPU run 2-8x its time, sleeping ones 1.1-1.5x on
    an idle CPU (ResNet-50 digits on 2 cores, its PERF.md); GPU machines keep OpenMP's default."""
    environ = os.environ if environ is None else environ
    if "OMP_WAIT_POLICY" not in environ and not gpu_visible(environ, dev):
        environ["OMP_WAIT_POLICY"] = "PASSIVE"


def gpu_visible(environ=None, dev="/dev") -> bool:
    """Whether an NVIDIA GPU is there for this process, without importing a framework: a device node
    ``/dev/nvidia<N>`` exists and ``CUDA_VISIBLE_DEVICES`` (when set) does not hide them all."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        first = visible.split(",")[0].strip()
        if not first or first.startswith("-"):
            return False
    return any(
        name.isdigit() for name in (p.name.removeprefix("nvidia") for p in pathlib.Path(dev).glob("nvidia*"))
    )


def _raise_on_sigterm() -> bool:
    """Make SIGTERM raise :class:`Terminated` in this process's main thread. Processes forked later
    (data-loader workers, a background scorer) keep the default action: the handler re-sends the signal
    there after restoring it; those forked inside a :class:`Preemption` ignore it (the loop that forked
    them ends them after its checkpoint). Returns whether the handler was installed (the default action
    was set)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return False  # the program set its own
    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:
            if Preemption.active is not None:
                # a data-loader worker forked by a loop that checkpoints: a scheduler signals every process
                # of the job, and the loop needs its batches until the step ends; it stops its workers
                return
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if Preemption.active is not None:  # a training loop checkpoints at its next step boundary
            Preemption.active.signalled = True
            return
        raise Terminated()

    signal.signal(signal.SIGTERM, handler)
    return True
