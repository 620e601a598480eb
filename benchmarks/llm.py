"""Chapter 13's measurements: the small language model (recipe "llm": byte-level BPE, Llama's
block, AdamW, warm-up then cosine to 10%, clipping) against every baseline, the vocabulary
size it uses, and how its held-out loss scales with its size. Every figure is in bits per
byte of the test files (`heapq`, `queue`, `shlex`: the lm task's test split), read in
consecutive windows of 64 tokens (or characters) as the models read them, so characters and
BPE tokens are measured in one unit on the same text.

    python benchmarks/llm.py                  # everything (about 100 CPU minutes, one thread)
    python benchmarks/llm.py runs --seed 1    # one part: baselines, vocab, lr, scaling,
                                              # dropout, runs (--row, --seed, --ship)

Each part stores its results in benchmarks/llm.json (the notebook and the README read them
from there, without retraining); benchmarks/run.py's rows llm_* take the same runs. Times
are this process's CPU seconds (time.process_time, one thread): what other programs' load
cannot lengthen.

The rows of the payoff (3 seeds each, the same number of steps and tokens):
- llm: the recipe (`tfcourse train --task llm --seed S`);
- adam2017: the same model and tokens with 2017's recipe: Adam (beta2 0.98, eps 1e-9), the
  paper's schedule (noam; its factor set so that its peak is the recipe's 6e-3), no weight
  decay, no clipping;
- llama_chars: the same model and recipe on characters (the lm task's, each file ending
  with EOS as the llm task's tokens do);
- gpt_bpe: chapter 09's GPT block (DecoderLM) on the same tokens and recipe, at the same
  parameters (d_ff 451: 869,900 against 869,504);
and the baselines: interpolated Kneser-Ney n-grams over the same BPE tokens and over
characters (tfcourse.baselines.NGramLM), and chapter 09's shipped lm.pt (on its own task: the
files run together, no EOS to predict). EOS stands for no text: its bits count, its bytes are 0.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see tfcourse.cli; before torch loads

import argparse  # noqa: E402
import contextlib  # noqa: E402
import fcntl  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from tfcourse import cli  # noqa: E402
from tfcourse.baselines import NGramLM  # noqa: E402
from tfcourse.checkpoint import load_checkpoint  # noqa: E402
from tfcourse.corpora import lm_task  # noqa: E402
from tfcourse.recipes import LLM_VOCAB, LM_CONTEXT, RECIPES, build  # noqa: E402
from tfcourse.training import train  # noqa: E402
from tfcourse.variants import DecoderLM  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llm.json")
SHIPPED = os.path.join(cli.CHECKPOINTS, "llm.pt")
SEEDS = 3
VOCABS = (512, 1024, 2048)
RATES = (3e-3, 6e-3, 1e-2)
ORDERS = {"bpe": (2, 3, 4, 5, 6), "chars": (6, 7)}  # chars: the best two (README: 5-gram 1.62 nats)
# 2017's recipe: noam's peak is lr * d_model^-0.5 * warmup^-0.5; this factor makes it the
# recipe's peak (6e-3 at d_model 128, warm-up 150 steps), so that only the recipe differs.
_LLM = RECIPES["llm"].train
ADAM_2017 = dict(optimizer="adam", beta2=0.98, schedule="noam", weight_decay=0.0,
                 min_lr_ratio=0.0, clip=0.0, lr=_LLM["lr"] * 128**0.5 * _LLM["warmup"]**0.5)
GPT_BLOCK = dict(d_model=128, n_heads=4, d_ff=451, n_layers=4, dropout=0.1, attn_impl="sdpa",
                 max_len=LM_CONTEXT)
# Scaling: Llama's block at five widths (4 layers, 4 heads, SwiGLU about 8/3 as wide), each
# trained SCALING_STEPS steps on the same tokens, in the same order, with the recipe.
SCALING = ((32, 88), (48, 128), (64, 176), (96, 256), (128, 352))  # (d_model, d_ff)
SCALING_STEPS = 600
SHORT = dict(steps=400, warmup=40, eval_every=0)  # the runs that compare peak rates


# ------------------------------------------------------------------ results on disk


@contextlib.contextmanager
def _stored():
    """benchmarks/llm.json as a dict, written back at the end (locked: parts may run at once)."""
    with open(RESULTS, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read()
        results = json.loads(text) if text.strip() else {}
        yield results
        f.seek(0)
        f.truncate()
        json.dump(results, f, indent=1, sort_keys=True)
        f.write("\n")


def load_results(path=RESULTS):
    """The stored results (what the notebook reads)."""
    with open(path) as f:
        return json.load(f)


def _store(part, key, value):
    with _stored() as results:
        results.setdefault(part, {})[key] = value
    print(f"  {part}/{key}: {value}", flush=True)


# ------------------------------------------------------------------------- measuring


def n_params(model, embedding=True):
    """Parameters of ``model`` (a tied table once); without the embedding table (Kaplan et
    al.'s N) when ``embedding`` is False."""
    total = sum(p.numel() for p in model.parameters())
    return total if embedding else total - model.embed.embedding.weight.numel()


def _trained(task, model, config):
    """Train with the course's loop; the held-out test bits per byte and the CPU time."""
    start = time.process_time()
    train(model, task, config, device="cpu", progress=False)
    seconds = time.process_time() - start
    return _figures(task, model, config, seconds)


def _figures(task, model, config, seconds):
    """What a run reached: test (and validation) bits per byte, its CPU time and size."""
    return dict(bpb=task.bits_per_byte(model, task.test), val_bpb=task.bits_per_byte(model, task.val),
                cpu_s=round(seconds, 1), steps=config.steps,
                tokens=config.steps * config.batch_size * LM_CONTEXT, params=n_params(model),
                non_embedding=n_params(model, embedding=False))


@functools.cache
def _chars_task(eos=True):
    """The lm task's characters, each file ending with EOS as the llm task's tokens (eos=False:
    chapter 09's task, which lm.pt was trained and is judged on)."""
    return lm_task(block_size=LM_CONTEXT, eos=eos)


def _by_command(seed, out):
    """`tfcourse train --task llm --seed SEED --out OUT` (one thread), as the README states it;
    the checkpoint's figures."""
    start = time.process_time()
    if cli.main(["train", "--task", "llm", "--seed", str(seed), "--out", out, "--threads", "1",
                 "--no-progress", "--overwrite"]):
        raise SystemExit(f"tfcourse train --task llm --seed {seed} failed")
    seconds = time.process_time() - start
    model, _, _ = load_checkpoint(out)
    return _figures(RECIPES["llm"].make_task(seed), model, RECIPES["llm"].train_config(seed),
                    seconds)


def run(row, seed, out=None):
    """One run of a payoff row (llm, adam2017, llama_chars, gpt_bpe) -> its figures. The llm
    row trains by the command that makes the shipped checkpoint, into ``out`` (a temporary
    file when None)."""
    llm = RECIPES["llm"]
    if row == "llm":
        if out is not None:
            return _by_command(seed, out)
        with tempfile.TemporaryDirectory() as folder:
            return _by_command(seed, os.path.join(folder, "llm.pt"))
    if row == "adam2017":
        task, model, config = build("llm", seed, train=ADAM_2017)
    elif row == "llama_chars":
        task = _chars_task()
        model, config = llm.build_model(task, seed), llm.train_config(seed)
    elif row == "gpt_bpe":
        task = llm.make_task(seed)
        torch.manual_seed(seed)
        model = DecoderLM(RECIPES["lm-bpe"].config(task, **GPT_BLOCK))
        config = llm.train_config(seed)
    else:
        raise ValueError(f"unknown row {row!r}")
    result = _trained(task, model, config)
    print(f"    {row}, seed {seed}: {result['bpb']:.3f} bits/byte, {result['cpu_s']:.0f} CPU s",
          flush=True)
    return result


def ngram_bpb(task, order):
    """Held-out test bits per byte of an interpolated Kneser-Ney ``order``-gram over the
    task's tokens, fitted on its training text and read in the model's windows."""
    train_ids, test_ids = task.train.ids.tolist(), task.test.ids.tolist()
    nats = NGramLM(train_ids, len(task.vocab), order).nats(test_ids, task.test.block_size)
    return nats * (len(test_ids) - 1) / math.log(2) / task.text_bytes(task.test.ids[1:])


def baselines():
    """The n-grams over BPE tokens and characters, and chapter 09's lm.pt, on the test files."""
    for name, task in (("bpe", RECIPES["llm"].make_task()), ("chars", _chars_task())):
        for order in ORDERS[name]:
            _store("baselines", f"{name} {order}-gram", ngram_bpb(task, order))
    model, _, _ = load_checkpoint(cli.LM_CHECKPOINT)
    chapter_09 = _chars_task(eos=False)
    _store("baselines", "lm.pt", chapter_09.bits_per_byte(model, chapter_09.test))


def vocab_sizes():
    """For each vocabulary size: bytes per token, and the validation bits per byte of the
    recipe trained to its end from seed 0 (a choice: made on the validation files, not the
    test files). The recipe's own size is the llm row's seed 0 when that ran already."""
    for size in VOCABS:
        task = lm_task(block_size=LM_CONTEXT, bpe_vocab=size)
        stored = load_results().get("llm", {}).get("0") if os.path.exists(RESULTS) else None
        if size == LLM_VOCAB and stored:
            result = stored
        else:
            result = _trained(task, RECIPES["llm"].build_model(task, 0),
                              RECIPES["llm"].train_config(0))
        _store("vocab", str(size), dict(
            bytes_per_token=task.text_bytes(task.val.ids) / len(task.val.ids),
            val_bpb=result["val_bpb"], cpu_s=result["cpu_s"], params=result["params"]))


def rates():
    """The recipe's validation bits per byte at each peak learning rate, at 400 steps as
    vocab_sizes (a choice: on the validation files)."""
    for lr in RATES:
        task, model, config = build("llm", 0, train=dict(lr=lr, **SHORT))
        train(model, task, config, device="cpu", progress=False)
        _store("lr", f"{lr:g}", task.bits_per_byte(model, task.val))


def no_dropout(seed=0):
    """The recipe without dropout from seed 0: its mean training loss over the last 100
    steps (nats/token) beside its validation loss, as the shipped checkpoint's history
    (dropout 0.1) has them: what dropout buys on nine passes over the text."""
    task, model, config = build("llm", seed, model=dict(dropout=0.0))
    start = time.process_time()
    history = train(model, task, config, device="cpu", progress=False)
    result = _figures(task, model, config, time.process_time() - start)
    _store("dropout", "0", dict(result, train_loss=sum(history["loss"][-100:]) / 100,
                                val_loss=history["val_loss"][-1]))
    shipped = load_checkpoint(SHIPPED)[2]["history"]
    _store("dropout", "0.1 (llm.pt)", dict(train_loss=sum(shipped["loss"][-100:]) / 100,
                                           val_loss=shipped["val_loss"][-1]))


def power_law(params, losses):
    """Least squares of log L = log a - alpha log N: (a, alpha)."""
    x = torch.tensor(params, dtype=torch.float64).log()
    y = torch.tensor(losses, dtype=torch.float64).log()
    slope = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    return math.exp(y.mean() - slope * x.mean()), -slope.item()


def scaling():
    """Train the four smaller sizes, fit L = a N^-alpha (N: parameters without the embedding
    table), store the prediction for the largest, then train it and store what it reached."""
    points = []
    for d_model, d_ff in SCALING:
        if len(points) == len(SCALING) - 1:
            a, alpha = power_law([p["non_embedding"] for p in points], [p["loss"] for p in points])
            task, model, _ = build("llm", 0, model=dict(d_model=d_model, d_ff=d_ff))
            predicted = a * n_params(model, embedding=False) ** -alpha
            _store("scaling", "fit", dict(a=a, alpha=alpha, predicted=predicted,
                                          fitted_on=len(points)))
        task, model, config = build("llm", 0, model=dict(d_model=d_model, d_ff=d_ff),
                                    train=dict(steps=SCALING_STEPS, warmup=SCALING_STEPS // 10,
                                               eval_every=0))
        result = _trained(task, model, config)
        # nats per token: the loss the fit reads (bits per byte is the same up to a factor)
        result["loss"] = task.evaluate(model, task.test)
        result["d_model"] = d_model
        points.append(result)
        _store("scaling", f"d{d_model}", result)


# ------------------------------------------------------------- benchmarks/run.py's rows


@functools.cache
def _run_bpb(row, seed):
    return run(row, seed)["bpb"]


BASELINES = ("bpe n-gram", "chars n-gram", "lm.pt")


@functools.cache
def _baselines():
    task, chars = RECIPES["llm"].make_task(), _chars_task()
    model, _, _ = load_checkpoint(cli.LM_CHECKPOINT)
    chapter_09 = _chars_task(eos=False)
    return {"bpe n-gram": min(ngram_bpb(task, n) for n in ORDERS["bpe"]),
            "chars n-gram": min(ngram_bpb(chars, n) for n in ORDERS["chars"]),
            "lm.pt": chapter_09.bits_per_byte(model, chapter_09.test)}


def pair(seed, other):
    """Held-out test bits per byte: the llm recipe trained from ``seed``, then ``other``: a
    row trained from the same seed (adam2017, llama_chars, gpt_bpe) or a baseline (bpe
    n-gram, chars n-gram: the best order; lm.pt)."""
    theirs = _baselines()[other] if other in BASELINES else _run_bpb(other, seed)
    return _run_bpb("llm", seed), theirs


def main(argv=None):
    parts = {"baselines": baselines, "vocab": vocab_sizes, "lr": rates, "scaling": scaling,
             "dropout": no_dropout}
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", nargs="?", choices=[*parts, "runs", "all"], default="all")
    parser.add_argument("--seed", type=int, action="append", help="runs: this seed (repeat)")
    parser.add_argument("--ship", action="store_true",
                        help="runs: the llm row's seed 0 writes the shipped checkpoint")
    parser.add_argument("--row", action="append", choices=("llm", "adam2017", "llama_chars",
                                                           "gpt_bpe"), help="runs: this row")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for name, part in parts.items():
        if args.part in (name, "all"):
            part()
    if args.part in ("runs", "all"):
        for seed in args.seed or range(SEEDS):
            for row in args.row or ("llm", "adam2017", "llama_chars", "gpt_bpe"):
                out = SHIPPED if args.ship and row == "llm" and seed == 0 else None
                _store(row, str(seed), run(row, seed, out))


if __name__ == "__main__":
    main()
