"""The tfcourse command: train a Transformer on a task, decode with a checkpoint.

    tfcourse train --task copy                   # about 11 s on a 2-core CPU: 100% exact match
    tfcourse train --task dates --out dates.pt   # written-out dates -> ISO 8601
    tfcourse decode --checkpoint dates.pt "samedi 21 novembre 2026" "May 3, 1999"
    torchrun --nproc-per-node 2 -m tfcourse.cli train --task dates --batch-size 32

The shipped checkpoint tfcourse/checkpoints/dates.pt was made by

    tfcourse train --task dates --seed 0 --out tfcourse/checkpoints/dates.pt

(every other setting is the dates default in TASK_DEFAULTS): 800 steps, 30 s on a 2-core
CPU, 99.90% exact match on the 2000 held-out test dates. tests/test_shipped_checkpoint.py
repeats that command from scratch and checks the accuracy.
"""

import argparse
import os
import random
import sys
from dataclasses import fields

import torch

from tfcourse.data import TASKS, make_task
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.training import (
    TrainConfig,
    default_device,
    exact_match,
    load_checkpoint,
    predict,
    train,
)

DATES_CHECKPOINT = os.path.join(os.path.dirname(__file__), "checkpoints", "dates.pt")

# Per task: TransformerConfig.tiny overrides and TrainConfig values, the defaults of `train`.
# Found by measuring on a 2-core CPU: without dropout (the data are plentiful) and with a
# cosine schedule that ends at 0, these tasks reach their accuracy in the fewest steps.
_FAST = dict(batch_size=64, schedule="cosine")
TASK_DEFAULTS = {
    "copy": {"model": dict(dropout=0.0),
             "train": dict(steps=400, lr=0.008, warmup=50, eval_every=100, **_FAST)},
    "reverse": {"model": dict(dropout=0.0),
                "train": dict(steps=500, lr=0.008, warmup=50, eval_every=100, **_FAST)},
    "dates": {"model": dict(dropout=0.0),
              "train": dict(steps=800, lr=0.005, warmup=100, eval_every=200, **_FAST)},
}
MODEL_OPTIONS = ("d_model", "n_heads", "d_ff", "n_layers", "dropout")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not the usage block
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive(kind):
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def build_parser():
    intro = "\n\n".join(__doc__.split("\n\n")[:2])  # what it does, and examples
    parser = _Parser(prog="tfcourse", description=intro,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    tr = commands.add_parser(
        "train", help="train a model on a task, save a checkpoint, print test accuracy",
        description="Train a Transformer on a task; show a progress bar; save a checkpoint "
        "(also every --eval-every steps and on Ctrl-C, so that --resume can carry on); print "
        "the exact-match accuracy on the held-out test split and some examples. Options left "
        "out take the task's defaults (TASK_DEFAULTS in tfcourse/cli.py).",
        epilog="defaults:\n" + "\n".join(
            f"  {name}: " + " ".join(f"--{k.replace('_', '-')} {v}"
                                     for k, v in {**d["train"], **d["model"]}.items())
            for name, d in TASK_DEFAULTS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tr.add_argument("--task", required=True, choices=sorted(TASKS),
                    help="copy: copy 10 symbols; reverse: reverse 1-10 symbols; dates: "
                    "written-out dates in 8 languages -> ISO 8601")
    tr.add_argument("--seed", type=int,
                    help="seeds the data, the initial weights and the batches (default 0)")
    tr.add_argument("--out", help="checkpoint file to write (default: TASK.pt)")
    tr.add_argument("--resume", action="store_true",
                    help="carry on from the checkpoint in --out with its saved settings "
                    "(only --steps may change)")
    group = tr.add_argument_group("training (defaults depend on the task)")
    group.add_argument("--steps", type=_positive(int), help="optimizer steps")
    group.add_argument("--batch-size", type=_positive(int),
                       help="examples per micro-batch (per process under torchrun)")
    group.add_argument("--accum-steps", type=_positive(int),
                       help="micro-batches per optimizer step (gradient accumulation)")
    group.add_argument("--schedule", choices=("noam", "cosine"),
                       help="learning-rate schedule: noam (the paper's) or cosine, both warm up")
    group.add_argument("--lr", type=_positive(float),
                       help="noam: factor in front of the paper's formula; cosine: peak rate")
    group.add_argument("--warmup", type=_positive(int), help="warmup steps")
    group.add_argument("--label-smoothing", type=float, help="epsilon of label smoothing")
    group.add_argument("--clip", type=float, help="max gradient norm, 0 for no clipping")
    group.add_argument("--eval-every", type=int,
                       help="validate and save every so many steps (0: only at the end)")
    group = tr.add_argument_group("model (TransformerConfig.tiny unless given)")
    group.add_argument("--d-model", type=_positive(int), help="width of the model")
    group.add_argument("--n-heads", type=_positive(int), help="attention heads")
    group.add_argument("--d-ff", type=_positive(int), help="inner width of the feed-forward")
    group.add_argument("--n-layers", type=_positive(int), help="layers in encoder and decoder")
    group.add_argument("--dropout", type=float, help="dropout probability")
    group = tr.add_argument_group("running")
    group.add_argument("--device", default="auto",
                       help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:1, mps")
    group.add_argument("--no-amp", action="store_true", help="no mixed precision on cuda")
    group.add_argument("--no-progress", action="store_true", help="no progress bar")
    group.add_argument("--examples", type=int, default=5,
                       help="test examples to print after training (default 5)")

    de = commands.add_parser(
        "decode", help="turn inputs into outputs with a trained checkpoint",
        description="Decode each TEXT (or each line of standard input when no TEXT is "
        "given) with a checkpoint; print 'TEXT -> OUTPUT' per line.",
    )
    de.add_argument("text", nargs="*", metavar="TEXT", help="inputs, e.g. 'May 3, 1999'")
    de.add_argument("--checkpoint", default=DATES_CHECKPOINT,
                    help="a checkpoint written by `tfcourse train` (default: the shipped "
                    "dates model)")
    de.add_argument("--beam", type=_positive(int), default=1,
                    help="beam size; 1 (default) is greedy decoding")
    de.add_argument("--max-len", type=_positive(int), default=64,
                    help="at most so many output tokens (default 64)")
    de.add_argument("--device", default="auto", help="auto, cpu, cuda, mps")
    return parser


def _device(name):
    if name == "auto":
        return default_device()
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps") from None
    available = {"cuda": torch.cuda.is_available, "mps": torch.backends.mps.is_available}
    if device.type in available and not available[device.type]():
        raise ValueError(f"device {name!r} is not available on this machine")
    return device


def _train(args):
    rank = int(os.environ.get("RANK", 0))
    out = args.out
    defaults = TASK_DEFAULTS[args.task]
    given_train = {f.name: getattr(args, f.name) for f in fields(TrainConfig)
                   if getattr(args, f.name, None) is not None}
    given_model = {k: getattr(args, k) for k in MODEL_OPTIONS if getattr(args, k) is not None}
    if args.resume:
        if not os.path.exists(out):
            raise FileNotFoundError(f"no checkpoint to resume at {out}")
        changed = sorted(set(given_train) - {"steps"} | set(given_model))
        if changed:
            raise ValueError(f"--resume keeps the saved settings; drop --{changed[0]}"
                             .replace("_", "-"))
        _, _, state = load_checkpoint(out)
        if state["task"] != args.task:
            raise ValueError(f"{out} was trained on --task {state['task']}, not {args.task}")
        config = TrainConfig(**{**state["train_config"], **given_train})
        model_config = TransformerConfig(**state["model_config"])
    else:
        config = TrainConfig(**{**defaults["train"], **given_train})
        model_config = None
    config.amp = not args.no_amp
    task = make_task(args.task, seed=config.seed)
    if model_config is None:
        overrides = {**defaults["model"], **given_model}
        model_config = TransformerConfig.tiny(len(task.vocab), **overrides)
    torch.manual_seed(config.seed)
    model = Transformer(model_config)
    device = _device(args.device)
    if rank == 0:
        n_params = sum(p.numel() for p in model.parameters())
        print(f"task {task.name}: {len(task.train)} train, {len(task.val)} val, "
              f"{len(task.test)} test examples; {n_params:,} parameters; device {device}")
    history = train(model, task, config, device=device, checkpoint=out, resume=args.resume,
                    progress=not args.no_progress)
    if rank != 0:
        return 0
    accuracy = exact_match(model, task.test, task.vocab)
    print(f"step {history['step'][-1] if history['step'] else 0}: "
          f"test exact match {accuracy:.2%} ({len(task.test)} examples); checkpoint {out}")
    examples = random.Random(0).sample(task.test, min(args.examples, len(task.test)))
    outputs = predict(model, [s for s, _ in examples], task.vocab)
    for (source, target), output in zip(examples, outputs, strict=True):
        mark = "ok" if output == target else f"WRONG, expected {target}"
        print(f"  {source} -> {output}  ({mark})")
    return 0


def _decode(args):
    texts = args.text or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    device = _device(args.device)
    model, vocab, _ = load_checkpoint(args.checkpoint, device=device)
    outputs = predict(model, texts, vocab, max_len=args.max_len, beam=args.beam)
    for text, output in zip(texts, outputs, strict=True):
        print(f"{text} -> {output}")
    return 0


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        if args.command == "decode":
            return _decode(args)
        args.out = args.out or f"{args.task}.pt"
        return _train(args)
    except KeyboardInterrupt:
        if args.command == "train" and os.path.exists(args.out):
            print(f"\ninterrupted: the last finished step is saved in {args.out}; carry on "
                  "with the same command and --resume", file=sys.stderr)
        return 130
    except (FileNotFoundError, ValueError) as error:
        print(f"tfcourse {args.command}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
