"""The tfcourse command: train a model on a task, decode, sample or classify with a checkpoint.

    tfcourse train --task copy                   # 100% exact match on the copy task
    tfcourse train --task dates --out dates.pt   # written-out dates -> ISO 8601
    tfcourse decode --checkpoint dates.pt "samedi 21 novembre 2026" "May 3, 1999"
    tfcourse sample --prompt "def " --temperature 0.8 --top-k 20    # the shipped Python LM
    tfcourse classify "Mitteleuropäische Sommerzeit" "dolarów"        # the shipped language ID
    tfcourse export lm-llama.pt lm-llama-hf      # the folder transformers' from_pretrained reads
    torchrun --nproc-per-node 2 -m tfcourse train --task dates --batch-size 32 --out ddp.pt

How long each takes, and the commands and held-out metrics of the shipped checkpoints in
tfcourse/checkpoints (tests/test_shipped_checkpoint.py repeats those commands): README.md,
"Training from the command line". The options of `train` are made from the fields of
TrainConfig and of the recipes' model configs (their help text and ranges).
"""

import os

# OpenMP threads that wait for work sleep instead of spinning: a spinning thread takes a
# core that another program (or the other threads of this one) needs. Set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import hashlib  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import typing  # noqa: E402
import warnings  # noqa: E402
from dataclasses import asdict, fields  # noqa: E402

import torch  # noqa: E402

from tfcourse.checkpoint import load_checkpoint, writing  # noqa: E402
from tfcourse.config import check_value  # noqa: E402
from tfcourse.decoding import SEEDS, TEMPERATURES  # noqa: E402
from tfcourse.device import check_fits, resolve_device, set_threads  # noqa: E402
from tfcourse.inference import NOT_SURE, classify, complete, output_confidence, predict  # noqa: E402
from tfcourse.model import Transformer  # noqa: E402
from tfcourse.recipes import RECIPES, recipe  # noqa: E402
from tfcourse.tokens import BPE  # noqa: E402
from tfcourse.training import Interrupted, TrainConfig, train  # noqa: E402
from tfcourse.variants import DecoderLM, EncoderClassifier  # noqa: E402
from tfcourse.vocab import Vocab  # noqa: E402

CHECKPOINTS = os.path.join(os.path.dirname(__file__), "checkpoints")
DATES_CHECKPOINT = os.path.join(CHECKPOINTS, "dates.pt")
CLASSIFY_CHECKPOINT = os.path.join(CHECKPOINTS, "classify.pt")
LM_CHECKPOINT = os.path.join(CHECKPOINTS, "lm.pt")
MLM_CHECKPOINT = os.path.join(CHECKPOINTS, "mlm.pt")  # the encoder pre-trained by masked LM
# Several samples are drawn as one batch and printed at the end: at most so many characters
# each (one sample is printed as it comes, at any length).
MAX_NEW_BATCHED = 10_000
# The settings of `tfcourse train`: every TrainConfig field, and every field of a recipe's
# model config except those its task sets (vocabulary sizes, classes, padding).
TRAIN_SETTINGS = {f.name: f for f in fields(TrainConfig)}
_TASK_SETS = ("vocab_size", "src_vocab_size", "tgt_vocab_size", "n_classes", "pad_id")


def model_settings():
    """name -> dataclass field, over the model config classes of every recipe."""
    settings = {}
    for r in RECIPES.values():
        for f in fields(r.model_class.config_class):
            if f.name not in _TASK_SETS:
                settings.setdefault(f.name, f)
    return settings


def _option(name):
    return "--" + name.replace("_", "-")


def _as_options(settings):
    """{"eval_every": 100, "norm_first": True} -> ["--eval-every 100", "--norm-first"]"""
    return [(_option(k) if v else f"--no-{k.replace('_', '-')}") if isinstance(v, bool)
            else f"{_option(k)} {v}" for k, v in settings.items()]


def _setting_options(group, settings, by_task=False):
    """One option per config field, with the field's help, its choices or the interval its
    number must lie in; ``by_task``: the tasks that take a model setting, where not all do."""
    for name, f in settings.items():
        options = dict(help=f.metadata.get("help"))
        tasks = [t for t, r in RECIPES.items()
                 if name in {g.name for g in fields(r.model_class.config_class)}]
        if by_task and len(tasks) < len(RECIPES):
            options["help"] = f"{options['help'] or ''} [--task {', '.join(tasks)} only]".lstrip()
        if typing.get_origin(f.type) is typing.Literal:
            options.update(choices=typing.get_args(f.type))
        elif f.type is bool:
            options.update(action=argparse.BooleanOptionalAction)
        else:
            options.update(type=_setting_type(name, f.type, f.metadata.get("interval")))
        group.add_argument(_option(name), **options)


def _setting_type(name, kind, interval):
    """An argparse type: a number of `kind` in the field's interval (config.check_value)."""

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None
        try:
            return check_value(name, kind, value, interval)
        except ValueError as error:  # argparse names the option: "--steps: must be ..."
            raise argparse.ArgumentTypeError(str(error).removeprefix(f"{name} ")) from None

    parse.__name__ = kind.__name__
    return parse


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not the usage block
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _number(kind, low, high=math.inf, low_open=False, high_open=True):
    """An argparse type: a finite number of `kind` in the interval low..high."""

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        if not (above and below and math.isfinite(value)):
            left, right = "(" if low_open else "[", ")" if high_open else "]"
            raise argparse.ArgumentTypeError(f"must be in {left}{low}, {high}{right}, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


_POSITIVE_INT = _number(int, 0, low_open=True)
_COUNT = _number(int, 0)


def _threads(text):
    return text if text == "auto" else _POSITIVE_INT(text)


def build_parser():
    intro = "\n\n".join(__doc__.split("\n\n")[:2])  # what it does, and examples
    parser = _Parser(prog="tfcourse", description=intro,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    tr = commands.add_parser(
        "train", help="train a model on a task, save a checkpoint, print test accuracy",
        description="Train a model on a task; show a progress bar; save a checkpoint (also "
        "every --eval-every steps and on Ctrl-C, so that --resume can carry on); print the "
        "task's metric on the held-out test split and some examples. Options left out take "
        "the task's recipe (tfcourse/recipes.py).",
        epilog="recipes:\n" + "\n".join(
            f"  {name}: " + " ".join(_as_options({**r.train, **r.model}))
            for name, r in RECIPES.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tr.add_argument("--task", required=True, choices=sorted(RECIPES),
                    help="; ".join(f"{name}: {r.about}" for name, r in RECIPES.items()))
    tr.add_argument("--out", help="checkpoint file to write (default: TASK.pt)")
    tr.add_argument("--resume", action="store_true",
                    help="carry on from the checkpoint in --out with its saved settings: "
                    "options that are given must match them, except --steps")
    tr.add_argument("--init", metavar="CHECKPOINT",
                    help="start from this checkpoint's weights (e.g. the pre-trained encoder "
                    "tfcourse/checkpoints/mlm.pt for --task classify): the same kind of model, "
                    "model settings and vocabulary; the new run trains them all on --task")
    tr.add_argument("--overwrite", action="store_true",
                    help="replace an existing --out with a new run (without it, an existing "
                    "checkpoint is never overwritten)")
    _setting_options(tr.add_argument_group("training (defaults: the task's recipe)"),
                     TRAIN_SETTINGS)
    _setting_options(tr.add_argument_group(
        "model (defaults: the task's recipe, e.g. TransformerConfig.tiny)"), model_settings(),
        by_task=True)
    group = tr.add_argument_group("running (may differ when resuming)")
    _running_options(group)
    group.add_argument("--no-progress", action="store_true", help="no progress bar")
    group.add_argument("--examples", type=_COUNT, default=5,
                       help="test examples to print after training (default 5)")

    de = commands.add_parser(
        "decode", help="turn inputs into outputs with a trained checkpoint",
        description="Decode each TEXT (or each line of standard input, UTF-8, when no TEXT "
        "is given or TEXT is -) with an encoder-decoder checkpoint; print 'TEXT -> OUTPUT "
        "(confidence ...)' "
        "per line, the confidence being the smallest probability the model gives one of the "
        f"output's characters ('not sure' below {NOT_SURE['seq2seq']}). Characters the "
        "model has never seen, and outputs that cannot be right, are pointed out; an empty "
        "or over-long input is refused (exit status 1) and the others are decoded.",
    )
    de.add_argument("text", nargs="*", metavar="TEXT", help="inputs, e.g. 'May 3, 1999'")
    de.add_argument("--checkpoint", default=DATES_CHECKPOINT,
                    help="a checkpoint written by `tfcourse train` (default: the shipped "
                    "dates model)")
    de.add_argument("--beam", type=_POSITIVE_INT, default=1,
                    help="beam size; 1 (default) is greedy decoding")
    de.add_argument("--max-len", type=_POSITIVE_INT, default=64,
                    help="at most so many output tokens (default 64)")
    _running_options(de)

    sa = commands.add_parser(
        "sample", help="continue a text with a trained language model",
        description="Continue --prompt with a language-model checkpoint (default: the shipped "
        "model of Python source), drawing each token (a character, or a BPE token) from "
        "softmax(logits / temperature) within the --top-k most probable and/or the --top-p "
        "nucleus, with the key/value cache (beyond the model's positions, a sliding window of "
        "the last ones); print the prompt and its continuation as it comes (the bytes of a "
        "character cut between BPE tokens held back until it is whole). A BPE model's text "
        "ends at its end-of-text token. A prompt that is empty, not UTF-8, or has characters "
        "the model has never seen is refused.",
    )
    sa.add_argument("--checkpoint", default=LM_CHECKPOINT,
                    help="a checkpoint of `tfcourse train --task lm` (default: the shipped one)")
    sa.add_argument("--prompt", default="def ", help="the text to continue (default 'def ')")
    sa.add_argument("--max-new", type=_POSITIVE_INT, default=200,
                    help="characters to add (default 200), for every tokenizer (a BPE token "
                    "may hold several: the last one is cut to fit), printed as they come "
                    f"(with --samples above 1, at the end: at most {MAX_NEW_BATCHED:,} then)")
    sa.add_argument("--heal", action=argparse.BooleanOptionalAction, default=True,
                    help="token healing (default on): back up the prompt's last token and "
                    "start the continuation with a token that begins with its text, so that "
                    "a prompt ending in a space or inside a word ('def ', '(se') goes on as "
                    "the training text would (' name', 'self': one token each); nothing "
                    "changes for a model of characters")
    sa.add_argument("--temperature", type=_number(float, *TEMPERATURES, high_open=False),
                    default=1.0, help="below 1 sharpens the distribution, above 1 flattens it "
                    "(default 1.0; --greedy is the limit of a low one)")
    sa.add_argument("--top-k", type=_POSITIVE_INT, help="draw among the k most probable only")
    sa.add_argument("--top-p", type=_number(float, 0, 1, low_open=True, high_open=False),
                    help="draw among the fewest most probable whose probabilities add up to p")
    sa.add_argument("--greedy", action="store_true",
                    help="always the most probable character (no draw)")
    sa.add_argument("--samples", type=_POSITIVE_INT, default=1,
                    help="continuations to draw (default 1)")
    sa.add_argument("--seed", type=_number(int, 0, SEEDS), default=0,
                    help="seeds the draws (default 0)")
    _running_options(sa)

    cl = commands.add_parser(
        "classify", help="say which language a text is in, with a trained classifier",
        description="Classify each TEXT (or each line of standard input, UTF-8, when no "
        "TEXT is given or TEXT is -) with a classifier checkpoint (default: the shipped "
        "language identifier); "
        "print 'TEXT -> CLASS (p = ...)' per line, p being the model's probability of it "
        f"('not sure' below {NOT_SURE['classifier']}). "
        "Characters the model has never seen are pointed out; an empty or over-long input "
        "is refused (exit status 1) and the others are classified.",
    )
    cl.add_argument("text", nargs="*", metavar="TEXT", help="inputs, e.g. 'dolarów amerykańskich'")
    cl.add_argument("--checkpoint", default=CLASSIFY_CHECKPOINT,
                    help="a checkpoint of `tfcourse train --task classify` (default: the "
                    "shipped one)")
    _running_options(cl)

    ex = commands.add_parser(
        "export", help="write a Llama-style checkpoint as the folder transformers reads",
        description="Write DIR (made if missing; an existing one must be empty) as "
        "transformers' save_pretrained would: config.json, model.safetensors, "
        "generation_config.json, tokenizer.json and tokenizer_config.json, so that "
        "AutoModelForCausalLM, AutoTokenizer and pipeline() read it (tfcourse.hf). The "
        "checkpoint must be of kind 'llama' (e.g. `tfcourse train --task lm-llama`).")
    ex.add_argument("checkpoint", metavar="CHECKPOINT", help="a checkpoint of kind 'llama'")
    ex.add_argument("directory", metavar="DIR", help="the folder to write")
    return parser


def _running_options(parser):
    parser.add_argument("--device", default="auto",
                        help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:1, mps")
    parser.add_argument("--threads", type=_threads, default="auto",
                        help="CPU threads for torch; auto (default): OMP_NUM_THREADS if set, "
                        "else as many as there are idle cores, at least 1 (a thread on a busy "
                        "core slows all the others down)")


def _resumed_settings(args, state, given_train, given_model):
    """The saved TrainConfig and model config, after checking that the options given agree."""
    saved_train, saved_model = state["train_config"], state["model_config"]
    if state["task"] != args.task:
        raise ValueError(f"{args.out} was trained on --task {state['task']}, not {args.task}")
    for name, value in [*given_train.items(), *given_model.items()]:
        saved = saved_train.get(name, saved_model.get(name))
        if name != "steps" and value != saved:
            option = _option(name)
            raise ValueError(f"{option} {value} differs from the checkpoint's {option} {saved}: "
                             "--resume goes on with the saved settings (only --steps may "
                             f"change); drop {option} or train a new run")
    return TrainConfig(**{**saved_train, **given_train})


def _train(args):
    rank = int(os.environ.get("RANK", 0))
    r = recipe(args.task)
    given_train = {name: getattr(args, name) for name in TRAIN_SETTINGS
                   if name != "amp" and getattr(args, name) is not None}
    given_model = {name: getattr(args, name) for name in model_settings()
                   if getattr(args, name) is not None}
    config_class = r.model_class.config_class
    for name in given_model:
        if name not in {f.name for f in fields(config_class)}:
            tasks = [t for t, q in RECIPES.items()
                     if name in {f.name for f in fields(q.model_class.config_class)}]
            twin = {"positional": "positions", "positions": "positional"}.get(name)
            raise ValueError(f"{_option(name)} is not a setting of the {args.task} model "
                             f"({config_class.__name__}), but of --task "
                             f"{', '.join(tasks)}"
                             + (f"; {args.task} takes {_option(twin)}" if twin in {
                                 f.name for f in fields(config_class)} else ""))
    _check_out(args)
    device = resolve_device(args.device)
    threads = set_threads(args.threads)
    with writing(args.out) if rank == 0 else contextlib.nullcontext():
        return _run(args, r, given_train, given_model, device, threads, rank)


def _run(args, r, given_train, given_model, device, threads, rank):
    """_train's run, once --out is this run's to write."""
    if args.resume:
        model, _, state = load_checkpoint(args.out)
        started = (state.get("init") or {}).get("path")
        if args.init is not None and args.init != started:
            raise ValueError(f"--init {args.init}: {args.out} started from "
                             f"{started or 'random weights'}; --resume carries on from "
                             f"{args.out} with its own start: drop --init")
        config = _resumed_settings(args, state, given_train, given_model)
        task = r.make_task(seed=config.seed)
    else:
        config = r.train_config(**{"seed": 0, **given_train})
        task = r.make_task(seed=config.seed)
        with torch.device("meta"):  # no memory: how big would it be?
            shape = r.build_model(task, **given_model)
        size = sum(p.numel() for p in shape.parameters())
        buffers = sum(b.numel() for b in shape.buffers())  # e.g. the positional table
        options = " ".join(_as_options(given_model)) or "the recipe's model"
        check_fits(16 * size + 4 * buffers, f"{options} (a model of {size:,} parameters, with "
                   f"their gradients and Adam's state, and {buffers:,} numbers of fixed tables)",
                   torch.device("cpu"), "choose a smaller model")
        if hasattr(shape.config, "max_len"):
            _check_positions(task, shape.config.max_len)
        model = r.build_model(task, config.seed, **given_model)
    init = _load_init(args.init, model, task) if args.init is not None and not args.resume else None
    if args.amp is not None:
        config.amp = args.amp
    if rank == 0:
        n_params = sum(p.numel() for p in model.parameters())
        print(f"task {task.name}: {len(task.train)} train, {len(task.val)} val, "
              f"{len(task.test)} test examples; {n_params:,} parameters; device {device}, "
              f"{threads}", flush=True)
    history = train(model, task, config, device=device, checkpoint=args.out,
                    resume=args.resume, progress=not args.no_progress, init=init)
    if rank != 0:
        return 0
    step = history["step"][-1] if history["step"] else 0
    try:
        result = f"test {task.metric} {task.evaluate(model, task.test):.4f}"
        if hasattr(task, "bits_per_byte"):  # one unit for characters and BPE tokens (ch. 11)
            result += f" = {task.bits_per_byte(model, task.test):.4f} bits per byte"
        print(f"step {step}: {result} ({len(task.test)} examples); checkpoint {args.out}")
        examples = random.Random(0).sample(task.test, min(args.examples, len(task.test)))
        for line in task.show(model, examples) if examples else []:
            print(f"  {line}")
    except KeyboardInterrupt:
        print(f"\ninterrupted during the test evaluation: the run is complete, {args.out} "
              f"holds its step {step}", file=sys.stderr)
        return 130
    return 0


def _check_positions(task, max_len):
    """ValueError naming --max-len when the longest example of ``task`` (of each split: the
    longest text of each field of its pairs, or a window of fixed length) takes more
    positions than the model has."""
    longest = []
    for split in (task.train, task.val, task.test):
        first = split[0] if len(split) else None
        if isinstance(first, tuple) and all(isinstance(field, str) for field in first):
            longest += [max(split, key=lambda pair, i=i: len(pair[i])) for i in range(len(first))]
        elif first is not None:
            longest.append(first)
    batch = task.make_batch(longest)
    needed = max(t.size(1) for t in vars(batch).values()
                 if isinstance(t, torch.Tensor) and t.dim() >= 2)
    if needed > max_len:
        raise ValueError(f"--max-len {max_len} is too short for --task {task.name}: its longest "
                         f"example takes {needed} positions; give --max-len {needed} or more")


def _load_init(path, model, task):
    """Copy the weights of the checkpoint at ``path`` into ``model`` (a new run on ``task``);
    ValueError naming the difference when its model kind, vocabulary or model settings are
    not the new run's. -> what the checkpoint records as its start (checkpoint.save_checkpoint)."""
    shipped = os.path.join(CHECKPOINTS, os.path.basename(path))
    if not os.path.exists(path) and os.path.isfile(shipped):  # README's path, from elsewhere
        raise FileNotFoundError(f"no checkpoint at {path} (from the folder {os.getcwd()}); the "
                                f"shipped one is {shipped}")
    start, vocab, state = load_checkpoint(path)
    if start.kind != model.kind:
        raise ValueError(f"--init {path} holds a {start.kind} model; --task {task.name} "
                         f"trains a {model.kind} model")
    if vocab != task.vocab:
        raise ValueError(f"--init {path} has another vocabulary than --task {task.name}'s "
                         f"({_difference(vocab, task.vocab)})")
    ours, theirs = asdict(model.config), asdict(start.config)  # fields added since: defaults
    differ = [f"{_option(k)} {theirs[k]} (this run: {v})" for k, v in ours.items()
              if theirs[k] != v]
    if differ:
        raise ValueError(f"--init {path} has other model settings: {'; '.join(differ)}")
    model.load_state_dict(start.state_dict())
    with open(path, "rb") as file:
        digest = hashlib.sha256(file.read()).hexdigest()
    return dict(path=path, task=state["task"], step=state["step"], sha256=digest)


def _difference(theirs, ours):
    """How two vocabularies differ, in a few words: their kinds (characters, BPE), sizes,
    and the first tokens in one only (as a list: a BPE token may be spaces or a newline) or
    the first merge that differs."""
    def kind(v):
        return f"a BPE tokenizer of {len(v)} ids" if isinstance(v, BPE) else \
            f"{len(v)} characters" if isinstance(v, Vocab) else f"{len(v)} tokens"

    said = f"{kind(theirs)} vs {kind(ours)}"
    if type(theirs) is not type(ours):
        return said
    if isinstance(ours, BPE):
        for name in ("pattern", "specials"):
            if getattr(theirs, name) != getattr(ours, name):
                return f"{said}; another {name}: {getattr(theirs, name)!r} vs {getattr(ours, name)!r}"
        merges = [list(v.merges) for v in (theirs, ours)]
        i = next((i for i, (a, b) in enumerate(zip(*merges)) if a != b), min(map(len, merges)))
        shown = [v.token_bytes[256 + i] if 256 + i < len(v.token_bytes) else None
                 for v in (theirs, ours)]
        return f"{said}; from merge {i} on: {shown[0]!r} vs {shown[1]!r}"
    only = sorted(set(theirs.symbols) ^ set(ours.symbols))
    return f"{said}; in one only: {only[:12]}{' ...' if len(only) > 12 else ''}" if only else \
        f"{said}; the same symbols in another order"


def _check_out(args):
    """Fail now, not after the first round of training, when --out cannot be used."""
    path = args.out
    for option in ("out", "init"):
        if getattr(args, option) == "":
            raise ValueError(f"--{option} is empty: give a file name (an unset shell variable?)")
    if os.path.isdir(path):
        raise ValueError(f"--out {path} is a directory: give a file name, e.g. "
                         f"{os.path.join(path, args.task + '.pt')}")
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(folder):  # the first folder of the path that exists
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise ValueError(f"--out {path}: {folder} is not a directory")
    if os.path.exists(path) and not os.path.isfile(path):
        raise ValueError(f"--out {path} is not a regular file (a device, a pipe?): a checkpoint "
                         "never replaces one, even with --overwrite; choose another --out")
    if args.resume and not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint to resume at {path}")
    if not args.resume and os.path.exists(path) and not args.overwrite:
        raise ValueError(f"{path} exists: carry on with --resume, replace it with "
                         "--overwrite, or choose another --out")
    probe = f"{path}.probe{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as error:
        raise OSError(f"cannot write the checkpoint {path}: {error.strerror or error}") from None


def _inputs(args):
    """The TEXT arguments, or else (none, or "-") the lines of standard input: UTF-8 text,
    its lines ended by \\n or \\r\\n (ValueError naming the first line that is not UTF-8)."""
    if args.text and args.text != ["-"]:
        return args.text
    if sys.stdin is None:
        raise ValueError("standard input is closed: give TEXT arguments")
    if sys.stdin.isatty():
        print(f"tfcourse {args.command}: reading inputs from standard input, one a line; end "
              "with Ctrl-D (or give them as arguments)", file=sys.stderr)
    texts = []
    for n, line in enumerate(sys.stdin.buffer, 1):
        try:
            text = line.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as error:
            raise ValueError(f"standard input is not UTF-8 text (line {n} has the byte "
                             f"{line[error.start]:#04x}): convert it first, e.g. with "
                             "iconv -f latin1 -t utf-8") from None
        if text.strip():
            texts.append(text)
    return texts


def _decode(args):
    texts = _inputs(args)
    if not texts:
        raise ValueError("no input: give TEXT arguments or lines on standard input")
    device = resolve_device(args.device)
    set_threads(args.threads)
    model, vocab, state = _load(args, device, Transformer, "an encoder-decoder")
    if args.beam > len(vocab):
        raise ValueError(f"--beam {args.beam} is more than the {len(vocab)} tokens of the "
                         "model's vocabulary: at most that many beams can differ")
    check_output = RECIPES[state["task"]].check_output if state["task"] in RECIPES else None
    refused = {}
    for i, text in enumerate(texts):
        if not text.strip():
            refused[i] = "an empty input: nothing to decode"
        elif len(text) > model.config.max_len:
            refused[i] = (f"{len(text):,} characters, more than the {model.config.max_len} "
                          "the model reads")
    accepted = [t for i, t in enumerate(texts) if i not in refused]
    outputs = predict(model, accepted, vocab, max_len=args.max_len, beam=args.beam)
    confidences = output_confidence(model, list(zip(accepted, outputs)), vocab)
    results = iter(zip(outputs, confidences))
    for i, text in enumerate(texts):
        if i in refused:
            print(f"tfcourse decode: input {i + 1} refused: {refused[i]}", file=sys.stderr)
            continue
        output, p = next(results)
        notes = [f"confidence {p:.2f}" + (": not sure" if p < NOT_SURE["seq2seq"] else "")]
        unknown = sorted({c for c in text if c not in vocab.stoi})
        if unknown:
            shown = "".join(unknown[:10])
            notes.append(f"not in the model's vocabulary, read as unknown: {shown!r}")
        problem = check_output(output) if check_output else None
        if problem:
            notes.append(problem)
        print(f"{text} -> {output}  ({'; '.join(notes)})")
    return 1 if refused else 0


def _load(args, device, cls, what):
    """The --checkpoint, whose model must be a `cls`: else a ValueError naming what it holds."""
    model, vocab, state = load_checkpoint(args.checkpoint, device=device)
    if not isinstance(model, cls):  # a subclass too: LlamaLM is a DecoderLM
        raise ValueError(f"{args.checkpoint} holds a {model.kind} model (task "
                         f"{state.get('task')!r}); {args.command} needs {what} ({cls.kind})")
    return model, vocab, state


def _sample(args):
    device = resolve_device(args.device)
    set_threads(args.threads)
    model, vocab, _ = _load(args, device, DecoderLM, "a language model")
    c = model.config
    positions = min(len(args.prompt) + args.max_new, c.max_len)  # a sliding window beyond
    cache = 2 * c.n_layers * positions * c.d_model * 4  # keys and values, float32
    check_fits(args.samples * (cache + 2 * c.vocab_size * 4), f"--samples {args.samples}",
               device, "draw fewer samples at a time")
    if args.samples > 1 and args.max_new > MAX_NEW_BATCHED:
        raise ValueError(f"--max-new {args.max_new} with --samples {args.samples}: several "
                         f"samples are printed when all are done, so at most "
                         f"{MAX_NEW_BATCHED:,} characters each; one sample (--samples 1) is "
                         "printed as it comes, at any length")
    greedy = args.greedy or args.top_k == 1
    options = (None if greedy else args.temperature, None if greedy else args.top_k,
               None if greedy else args.top_p, args.samples, args.seed)
    if args.samples == 1:  # the text as it comes: Ctrl-C keeps what is printed
        prompt = [args.prompt]  # printed with the first character, once complete() took it

        def show(chars):
            print(*prompt, chars[0], sep="", end="", flush=True)
            prompt.clear()

        complete(model, vocab, args.prompt, args.max_new, *options, emit=show,
                 healing=args.heal)
        print()
        return 0
    texts = complete(model, vocab, args.prompt, args.max_new, *options, healing=args.heal)
    for i, text in enumerate(texts):
        print(f"--- sample {i + 1} of {args.samples} ---")
        print(args.prompt + text)
    return 0


def _classify(args):
    texts = _inputs(args)
    if not texts:
        raise ValueError("no input: give TEXT arguments or lines on standard input")
    device = resolve_device(args.device)
    set_threads(args.threads)
    model, vocab, state = _load(args, device, EncoderClassifier, "a classifier")
    classes = state.get("classes")
    if not classes:
        raise ValueError(f"{args.checkpoint} was trained on task {state.get('task')!r}, which "
                         "has no classes: its classifier is untrained (train one with "
                         "`tfcourse train --task classify`)")
    refused = {}
    for i, text in enumerate(texts):
        if not text.strip():
            refused[i] = "an empty input: nothing to classify"
        elif len(text) >= model.config.max_len:  # [CLS] takes one position
            refused[i] = (f"{len(text):,} characters, more than the {model.config.max_len - 1} "
                          "the model reads")
        elif not any(c in vocab.stoi for c in text):
            refused[i] = "none of its characters is in the model's vocabulary"
    accepted = [t for i, t in enumerate(texts) if i not in refused]
    results = iter(classify(model, accepted, vocab, classes))
    for i, text in enumerate(texts):
        if i in refused:
            print(f"tfcourse classify: input {i + 1} refused: {refused[i]}", file=sys.stderr)
            continue
        guess, p = next(results)
        notes = [f"p = {p:.2f}" + (": not sure" if p < NOT_SURE["classifier"] else "")]
        unknown = sorted({c for c in text if c not in vocab.stoi})
        if unknown:
            shown = "".join(unknown[:10])
            notes.append(f"not in the model's vocabulary, read as unknown: {shown!r}")
        print(f"{text} -> {guess}  ({'; '.join(notes)})")
    return 1 if refused else 0


def _export(args):
    try:
        from tfcourse.hf import export  # transformers loads only here
    except ImportError as error:
        raise ValueError(f"export needs transformers and tokenizers (pip install "
                         f"'tfcourse[lab]'): {error}") from None
    files = export(args.checkpoint, args.directory)
    print(f"{args.directory}: {', '.join(files)}")
    return 0


COMMANDS = {"train": _train, "decode": _decode, "sample": _sample, "classify": _classify,
            "export": _export}


def _note(message, *_):
    """A warning (e.g. a checkpoint saved before its settings were checked) in one line."""
    print(f"tfcourse: note: {message}", file=sys.stderr)


def main(argv=None):
    warnings.showwarning = _note
    try:
        args = build_parser().parse_args(argv)
        if sys.stdout is None:  # started with standard output closed (>&-)
            raise OSError("standard output is closed: nowhere to write the results")
        if args.command == "train" and args.out is None:
            args.out = f"{args.task}.pt"
        return COMMANDS[args.command](args)
    except BrokenPipeError:  # e.g. `tfcourse sample | head -1`: stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141  # 128 + SIGPIPE, a shell's status of a command that a closed pipe stopped
    except UnicodeEncodeError as error:
        print(f"tfcourse {args.command}: error: standard output's encoding ({error.encoding}) "
              f"cannot write {ascii(error.object[error.start:error.end])}: set PYTHONIOENCODING=utf-8 "
              "(or a UTF-8 locale, e.g. LANG=C.UTF-8)", file=sys.stderr)
        return 1
    except Interrupted as stop:
        if stop.saved:
            message = (f"the last finished step ({stop.step}) is saved in {args.out}; carry on "
                       "with the same command and --resume")
        elif args.resume:
            message = f"no step finished; {args.out} is unchanged (step {stop.step})"
        else:
            message = "no step finished: nothing saved"
        print(f"\ninterrupted: {message}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, FloatingPointError) as error:
        if int(os.environ.get("RANK", 0)) == 0:  # under torchrun: once, not once a process
            print(f"tfcourse {args.command}: error: {_named(error)}", file=sys.stderr)
        return 1


def _named(error):
    """A config's "dropout must be ..." as the option the user typed: "--dropout must be ..."."""
    message = str(error)
    name = message.split(" ", 1)[0]
    if name in TRAIN_SETTINGS or name in model_settings():
        return _option(name) + message[len(name):]
    return message


if __name__ == "__main__":
    sys.exit(main())
