"""Training throughput (utterances/s) of the recipe's RNN-T step next to the plainest correct PyTorch
RNN-T on the same batch, in the same run: a JSON report and a table.

    python -m rnnt.benchmark --recipe configs/rnnt_1gpu.yaml --amp bf16 --batch-size 32

"ours" is rnnt.step.TrainStep built from the recipe (features on the device, the anti-diagonal
transducer loss, LAMB, EMA). "plain" is what a user writes first: the same nn.LSTM network and
features, eager autocast, Adam, and the loss recursed cell by cell over the lattice
(rnnt.loss.rnnt_loss_plain; torchaudio's rnnt_loss does not exist for this torch). The batch is random
audio of ``benchmark.seconds`` and ``benchmark.labels`` random labels per utterance.
"""

from __future__ import annotations

import argparse
import datetime
import platform

from zoo.cli import entry_point


def random_batch(recipe: dict, batch: int, vocab_size: int, generator) -> tuple:
    import torch

    seconds, labels = float(recipe["benchmark"]["seconds"]), int(recipe["benchmark"]["labels"])
    samples = int(seconds * int(recipe["features"]["sample_rate"]))
    audio = 0.1 * torch.randn(batch, samples, generator=generator)
    targets = torch.randint(0, vocab_size, (batch, labels), generator=generator)
    return audio, torch.full((batch,), samples), targets, torch.full((batch,), labels)


class PlainStep:
    """The peer: model(features) -> full log-softmax lattice -> rnnt_loss_plain, Adam, eager autocast."""

    def __init__(self, model, recipe: dict, device, amp: str):
        import torch

        from rnnt.features import LogMelFeatures

        self.model, self.device, self.amp = model.to(device).train(), torch.device(device), amp
        self.features = LogMelFeatures(recipe["features"]).to(device)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def __call__(self, batches: list):
        import torch
        from zoo.torch import autocast

        from rnnt.loss import rnnt_loss_plain

        for audio, audio_lengths, labels, label_lengths in batches:
            audio, audio_lengths = audio.to(self.device), audio_lengths.to(self.device)
            labels, label_lengths = labels.to(self.device), label_lengths.to(self.device)
            with torch.no_grad():
                feats, feat_lengths = self.features(audio, audio_lengths)
            with autocast(self.device, self.amp):
                logits, enc_lengths = self.model(feats, feat_lengths, labels)
            loss = rnnt_loss_plain(logits, labels, enc_lengths, label_lengths, self.model.blank).mean()
            loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


@entry_point
def main(argv=None) -> dict:
    from zoo.cli import add_run_args, parse_args, recipe_from_args

    from rnnt import DEFAULT_RECIPE

    parser = argparse.ArgumentParser(
        prog="scripts/benchmark.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_run_args(parser, default_recipe=DEFAULT_RECIPE, data_dir=False, resume=False)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="utterances per step (default: the recipe's run.batch_per_gpu)",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help="SentencePiece pieces (default: the recipe's data.vocab_size)",
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per window (default 10)")
    parser.add_argument(
        "--windows", type=int, default=3, help="timing windows; the median counts (default 3)"
    )
    parser.add_argument("--peers", default="ours,plain", help="comma-separated: ours, plain (default both)")
    parser.add_argument("--device", default=None, help="cpu, cuda (default: cuda where CUDA is)")
    parser.add_argument("--output", default=None, help="the JSON report (default RESULTS_DIR/benchmark.json)")
    args = parse_args(parser, argv)
    import torch
    from zoo.bench import measure, write_report
    from zoo.recipe import run_config

    from rnnt.model import build_model
    from rnnt.step import TrainStep  # after parsing: it loads torch

    recipe = recipe_from_args(args)
    recipe["run"]["accumulation"] = 1  # one micro-batch a step: both sides time the same work
    run = run_config(recipe, args.recipe)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    vocab = args.vocab_size or int(recipe["data"]["vocab_size"])
    features_in = int(recipe["features"]["n_mels"]) * int(recipe["features"]["frame_stacking"])
    batch = random_batch(recipe, run.batch_per_gpu, vocab, torch.Generator().manual_seed(run.seed))
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    rows = []
    for peer in [p for p in args.peers.split(",") if p]:
        torch.manual_seed(run.seed)
        model = build_model(recipe["model"], vocab, features_in).to(device)
        step = (
            TrainStep(model, recipe, device).train()
            if peer == "ours"
            else PlainStep(model, recipe, device, run.precision)
        )
        summary = measure(
            lambda step=step: step([batch]),
            items_per_call=run.batch_per_gpu,
            warmup=args.warmup,
            iters=args.steps,
            windows=args.windows,
            sync=sync,
        )
        rows.append({"peer": peer, "batch": run.batch_per_gpu, "precision": run.precision, **summary})
        # each peer as it ends: the plain one takes minutes on a GPU
        print(f"{peer}: {summary['throughput']:.1f} utt/s", flush=True)
    ratio = rows[0]["throughput"] / rows[1]["throughput"] if len(rows) == 2 else None
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    command = "scripts/benchmark.sh " + " ".join(argv if argv is not None else __import__("sys").argv[1:])
    date = datetime.date.today().isoformat()
    output = args.output or f"{args.results_dir}/benchmark.json"
    write_report(output, rows, device=name, command=command, ratio=ratio, recipe=args.recipe)
    print("| peer | utt/s | batch | precision | device | date |\n| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['peer']} | {row['throughput']:.1f} | {row['batch']} | {row['precision']} | {name} | {date} |"
        )
    if ratio is not None:
        print(f"ours / plain: {ratio:.2f}x   ({command})")
    return {"rows": rows, "ratio": ratio}


if __name__ == "__main__":
    main()
