"""Benchmarks: tfcourse against torch.nn, and the key/value cache, each row a ratio.

    python benchmarks/run.py            # every row, about 7 minutes on a 2-core CPU,
                                        # about 30 more for chapter 09's (7.) and 10
                                        # for chapter 11's (8.)
    python benchmarks/run.py --quick    # fewer seeds and repeats, a rough look
    python benchmarks/run.py --only throughput --only cache --seeds 5 --threads 1

1. copy: the copy task (vocabulary 11, length 10), wall time until greedy exact match on
   the validation split reaches 100%, tfcourse.Transformer vs torch.nn.Transformer of the
   same size, both trained by tfcourse.training.train with the course's recipe
   (tfcourse.recipes), the same data and seeds, validated every 25 steps. The time includes
   the validation rounds (greedy decoding: tfcourse's uses its key/value cache,
   torch.nn.Transformer has none).
2. throughput: training tokens/s (source + target tokens through forward, backward and an
   Adam step), same configuration for both.
3. cache: greedy decoding of 256 tokens (16 sources) with and without the key/value cache.
4. lm: chapter 09's decoder-only language model (the lm recipe: Python source, characters,
   chapter 10's fused attention, attn_impl="sdpa") against the same-size model built from
   torch.nn.TransformerEncoderLayer with a causal mask (TorchLM), both trained by the same
   step (tfcourse.training.train_step, the recipe's batches and settings, warmup then the
   peak rate) for the same wall time: held-out loss in nats per character on the
   validation split (lower is better).
5. lm throughput: training tokens/s of the same two models, same batches.
6. tying: held-out loss of the LM with its output layer tied to the input embeddings vs
   untied (its own vocab x d_model matrix), after the same number of steps: what tying
   costs or gains on top of the parameters it saves.
7. chapter 09's payoff: pre-training (the classifier fine-tuned from the masked-LM encoder
   vs from scratch, same budget) and the shipped models against simple baselines on the
   same splits (naive Bayes for language ID, a 6-gram for the LM, a month-table rule for
   dates), and the AUROC of `tfcourse decode`'s confidence.
8. chapter 11's byte-level BPE (benchmarks/tokens.py): training time against Hugging Face
   tokenizers and encoding throughput against tiktoken (both equal in what they produce);
   the lm recipe's model on BPE tokens against characters, the same settings and the same
   CPU time, in held-out bits per byte; how many characters 64 positions read.
9. chapter 12's Llama-style model against transformers' LlamaForCausalLM with the same
   config and weights (benchmarks/llama_speed.py): a training step and cached greedy
   generation, tokens per CPU second, from the tiny model to 10M parameters, on one thread
   and on all; and its step against the course's own GPT block at the same size.
10. chapter 13's small LM (benchmarks/llm.py, its runs stored in benchmarks/llm.json): the
    llm recipe against 2017's recipe, chapter 09's GPT block, the same model on characters
    (each trained from the same seed for the same steps), the best n-grams over its tokens
    and over characters, and chapter 09's lm.pt, in held-out bits per byte of the test files.

How a row is measured, so that a busy machine cannot fake a result: for each seed (or
repeat) the two sides run back to back, and the row reports the median of the per-seed
ratios, and their lowest and highest (the spread over seeds). Around each pair the CPU
time that other programs used is measured (/proc/stat); a pair during which they kept busy
a core this run needed is marked, and a row with marked pairs says so. A row is a
Benchmark in BENCHMARKS: adding one is adding an entry.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see tfcourse.cli; before torch loads

import argparse  # noqa: E402
import functools  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

from tfcourse.baselines import DateRule, NaiveBayes, NGramLM  # noqa: E402
from tfcourse.batches import make_batch  # noqa: E402
from tfcourse.checkpoint import load_checkpoint  # noqa: E402
from tfcourse.cli import DATES_CHECKPOINT, LM_CHECKPOINT  # noqa: E402
from tfcourse.corpora import lm_task, stdlib_corpus  # noqa: E402
from tfcourse.data import copy_task, dates_task, unfamiliar_dates  # noqa: E402
from tfcourse.decoding import greedy_decode  # noqa: E402
from tfcourse.device import free_cpu_cores  # noqa: E402
from tfcourse.encoder import Embeddings  # noqa: E402
from tfcourse.inference import auroc, exact_match, output_confidence, predict  # noqa: E402
from tfcourse.masks import causal_mask, padding_mask, target_mask  # noqa: E402
from tfcourse.model import Transformer, TransformerConfig  # noqa: E402
from tfcourse.positional import LearnedPositionalEncoding, PositionalEncoding  # noqa: E402
from tfcourse.recipes import RECIPES  # noqa: E402
from tfcourse.recipes import build as build_recipe  # noqa: E402
from tfcourse.training import TrainConfig, train, train_step  # noqa: E402
from tfcourse.variants import DecoderLM, DecoderLMConfig  # noqa: E402
from tfcourse.vocab import BOS, PAD  # noqa: E402

# ------------------------------------------------------------------ the torch.nn model


class TorchTransformer(nn.Module):
    """torch.nn.Transformer with tfcourse's embeddings, positions and output layer, and the
    interface tfcourse.training and tfcourse.decoding use (encode, decode, generator,
    init_cache, config). Post-norm without the final LayerNorms, as the paper and tfcourse;
    initialized as tfcourse.Transformer is."""

    def __init__(self, config):
        super().__init__()
        c = self.config = config
        self.src_embed = Embeddings(c.src_vocab_size, c.d_model)
        self.tgt_embed = self.src_embed if c.share_embeddings else Embeddings(c.tgt_vocab_size, c.d_model)
        self.positional = PositionalEncoding(c.d_model, c.max_len, c.dropout)
        self.transformer = nn.Transformer(
            c.d_model, c.n_heads, c.n_layers, c.n_layers, c.d_ff, c.dropout, c.activation,
            batch_first=True, norm_first=c.norm_first,
        )
        if not c.norm_first:
            self.transformer.encoder.norm = self.transformer.decoder.norm = nn.Identity()
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)
        for name, p in self.named_parameters():
            if p.dim() > 1 and "_embed." not in name:  # in_proj_weight: one Xavier matrix
                nn.init.xavier_uniform_(p)
        if c.tie_output:
            self.generator.weight = self.tgt_embed.embedding.weight

    def encode(self, src, src_mask):
        # torch's masks: True = blocked. src_mask (batch, 1, 1, src_len) -> (batch, src_len)
        x = self.positional(self.src_embed(src))
        return self.transformer.encoder(x, src_key_padding_mask=~src_mask[:, 0, 0])

    def decode(self, tgt, memory, src_mask, tgt_mask, cache=None):
        """tgt_mask is rebuilt from the ids (causal, and padding on the keys). nn.Transformer
        has no key/value cache: a cache here keeps the tokens and everything is recomputed."""
        if cache is not None:
            new = tgt.size(1)
            tgt = cache.tokens = tgt if cache.tokens is None else torch.cat((cache.tokens, tgt), 1)
        y = self.positional(self.tgt_embed(tgt))
        h = self.transformer.decoder(
            y, memory, tgt_mask=~causal_mask(tgt.size(1), tgt.device),
            tgt_key_padding_mask=tgt == self.config.pad_id,
            memory_key_padding_mask=~src_mask[:, 0, 0],
        )
        return h if cache is None else h[:, -new:]

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.generator(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))

    def init_cache(self):
        return TokenCache()


class TokenCache:
    """The decoded tokens so far (all nn.Transformer can keep between steps)."""

    def __init__(self):
        self.tokens = None

    def __len__(self):
        return 0 if self.tokens is None else self.tokens.size(1)

    def reorder(self, index):
        self.tokens = self.tokens.index_select(0, index)


def build(kind, config, seed=0):
    torch.manual_seed(seed)
    return (Transformer if kind == "tfcourse" else TorchTransformer)(config)


class TorchLM(nn.Module):
    """A decoder-only language model built from torch.nn.TransformerEncoderLayer run with a
    causal mask, with tfcourse's token embeddings, learned positions and tied output layer,
    initialized as tfcourse.variants.DecoderLM is (its parameters have the same names, under
    torch.nn's names for the layers: tfcourse.parity maps one onto the other). config.attn_impl
    is not read: torch.nn's layer takes its fused path whenever it can.
    forward(tokens) -> logits (batch, seq, vocab_size), as LMBatch.loss_inputs calls it."""

    def __init__(self, config):
        super().__init__()
        c = self.config = config
        if c.positional != "learned":
            raise ValueError("TorchLM has learned positions only")
        self.embed = Embeddings(c.vocab_size, c.d_model)
        self.positional = LearnedPositionalEncoding(c.d_model, c.max_len, c.dropout)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, c.activation,
                                       batch_first=True, norm_first=c.norm_first)
            for _ in range(c.n_layers))
        self.norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.generator = nn.Linear(c.d_model, c.vocab_size, bias=False)
        for name, p in self.named_parameters():
            if p.dim() > 1 and not name.startswith(("embed.", "positional.")):
                nn.init.xavier_uniform_(p)  # in_proj_weight: one Xavier matrix, as tfcourse's
        nn.init.normal_(self.embed.embedding.weight, std=c.d_model**-0.5)
        if c.tie_output:
            self.generator.weight = self.embed.embedding.weight

    def forward(self, tokens):
        x = self.positional(self.embed(tokens))
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.size(1), device=tokens.device)
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        return self.generator(self.norm(x))  # (batch, seq, vocab_size)


def build_lm(kind, config, seed=0):
    torch.manual_seed(seed)
    return (DecoderLM if kind == "tfcourse" else TorchLM)(config)


# ------------------------------------------------------------------ the rows


@dataclass
class Benchmark:
    """One row. measure(seed) -> (a, b) for one pair, run back to back (None: this seed
    gave no result, e.g. a model that never reached 100%); the row's ratio is the median
    over seeds of ratio(a, b). `columns` name the two sides, show(value) formats one side's
    median."""

    name: str
    title: str
    columns: tuple
    measure: object
    show: object
    ratio: object
    goal: str
    seeds: int = 5  # pairs in a full run (--seeds overrides)
    quick: int = 1  # pairs with --quick


@functools.cache
def _copy_task():
    return copy_task(seed=0, n_train=20_000, n_val=200, n_test=200)


def copy_pair(seed):
    """Seconds (and steps) until 100% greedy exact match on the copy task's validation
    split, tfcourse then torch.nn, both trained with the course's copy recipe."""
    recipe, task = RECIPES["copy"], _copy_task()
    config = recipe.config(task, **recipe.model)
    train_config = recipe.train_config(seed, eval_every=25, eval_size=200)
    results = []
    for kind in ("tfcourse", "torch.nn"):
        model = build(kind, config, seed)
        start = time.perf_counter()
        history = train(model, task, train_config, device="cpu", progress=False, stop_at=1.0)
        seconds = time.perf_counter() - start
        reached = history["val_metric"][-1] == 1.0
        results.append((seconds, history["val_step"][-1]) if reached else None)
        print(f"    {kind}: {seconds:.1f} s, {history['val_step'][-1]} steps"
              + ("" if reached else ", missed 100%"), flush=True)
    return results


def _time(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def throughput_pair(seed, batch=32, seq=32, steps=10, attn_impl="explicit"):
    """Training tokens per second (source + target) of both models, same configuration
    (`attn_impl`: tfcourse's attention, chapter 10)."""
    config = TransformerConfig(32, 32, d_model=256, n_heads=8, d_ff=1024, n_layers=2,
                               dropout=0.1, max_len=512, attn_impl=attn_impl)
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 32, (batch, seq), generator=g)
    tgt = torch.randint(4, 32, (batch, seq + 1), generator=g)
    src[: batch // 4, -seq // 4:] = PAD  # some padding, as in real batches
    tgt[: batch // 4, -seq // 4:] = PAD
    tgt[:, 0] = BOS
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    src_mask, tgt_mask = padding_mask(src, PAD), target_mask(tgt_in, PAD)
    tokens = steps * (src.numel() + tgt_in.numel())
    results = []
    for kind in ("tfcourse", "torch.nn"):
        model = build(kind, config, seed).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)  # as train()

        def run(model=model, optimizer=optimizer):
            for _ in range(steps):
                logits = model(src, tgt_in, src_mask, tgt_mask)
                loss = nn.functional.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(),
                                                   ignore_index=PAD)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

        run()  # warm-up
        results.append(tokens / _time(run))
    return results


_CACHE_MODEL = {}


def cache_pair(seed, n_tokens=256, batch=16):
    """Seconds to decode n_tokens greedily for `batch` sources, with then without the cache."""
    if not _CACHE_MODEL:
        config = TransformerConfig.tiny(32, d_model=128, n_heads=4, d_ff=512, n_layers=2,
                                        dropout=0.0)
        _CACHE_MODEL["model"] = build("tfcourse", config).eval()
    model = _CACHE_MODEL["model"]
    src = torch.randint(4, 32, (batch, 32), generator=torch.Generator().manual_seed(seed))
    src_mask = padding_mask(src, PAD)
    outputs, seconds = [], []
    for use_cache in (True, False):
        # eos_id=-1 is never produced: every run decodes all n_tokens
        def run(use_cache=use_cache):
            outputs.append(greedy_decode(model, src, src_mask, n_tokens, BOS, -1,
                                         use_cache=use_cache))
        run()  # warm-up
        seconds.append(_time(run))
    assert torch.equal(outputs[0], outputs[-1]) and outputs[0].size(1) == n_tokens
    return seconds


@functools.cache
def _lm_task():
    return lm_task(seed=0)


# The LM rows compare the two implementations at DecoderLMConfig.tiny's size (d_model 64,
# 2 layers, 0.1M parameters) with the settings the lm recipe had at that size, as measured
# before the recipe grew (tfcourse/recipes.py).
TINY_LM = dict(dropout=0.0, attn_impl="sdpa")
TINY_LM_TRAIN = dict(steps=800, lr=0.01, warmup=50, eval_every=200, label_smoothing=0.0,
                     eval_size=200, batch_size=16, schedule="cosine")


def _lm_setup(**model):
    """The tiny LM's config and settings on windows of 128 characters."""
    task = _lm_task()
    config = DecoderLMConfig.tiny(len(task.vocab), **{**TINY_LM, "max_len": task.train.block_size,
                                                      **model})
    return task, config, TrainConfig(**TINY_LM_TRAIN)


def _train_lm(model, task, config, seed, seconds=None, steps=None, clock=time.perf_counter):
    """Train with tfcourse.training.train_step on the recipe's batches, linear warmup then
    the peak learning rate, for `seconds` of `clock` (default wall time) or `steps` steps;
    returns the steps."""
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, betas=(0.9, 0.98), eps=1e-9,
                                 fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer,
                                                  lambda k: min(1.0, (k + 1) / config.warmup))
    g = torch.Generator().manual_seed(seed)
    model.train()
    done, start = 0, clock()
    while (done < steps) if steps else (clock() - start < seconds):
        drawn = torch.randint(len(task.train), (config.batch_size,), generator=g).tolist()
        batch = task.make_batch([task.train[i] for i in drawn])
        train_step(model, [batch], optimizer, config.label_smoothing, config.clip)
        scheduler.step()
        done += 1
    return done


def lm_pair(seed, seconds=6.0):
    """Held-out loss (nats/char) after `seconds` of training, tfcourse then TorchLM."""
    task, config, train_config = _lm_setup()
    results = []
    for kind in ("tfcourse", "torch.nn"):
        model = build_lm(kind, config, seed)
        steps = _train_lm(model, task, train_config, seed, seconds=seconds)
        loss = task.evaluate(model, task.val[:100])
        results.append((loss, steps))
        print(f"    {kind}: {steps} steps, held-out loss {loss:.3f}", flush=True)
    return results


def lm_throughput_pair(seed, steps=10):
    """Training tokens per second of the two LMs on the same batches."""
    task, config, train_config = _lm_setup()
    tokens = steps * train_config.batch_size * task.train.block_size
    results = []
    for kind in ("tfcourse", "torch.nn"):
        model = build_lm(kind, config, seed)
        _train_lm(model, task, train_config, seed, steps=2)  # warm-up
        results.append(tokens / _time(lambda model=model: _train_lm(model, task, train_config,
                                                                      seed, steps=steps)))
    return results


def tying_pair(seed, steps=200):
    """Held-out loss (nats/char) after `steps` steps, tied then untied output layer."""
    results = []
    for tie in (True, False):
        task, config, train_config = _lm_setup(tie_output=tie)
        model = build_lm("tfcourse", config, seed)
        _train_lm(model, task, train_config, seed, steps=steps)
        results.append(task.evaluate(model, task.val[:100]))
        n = sum(p.numel() for p in model.parameters())
        print(f"    {'tied' if tie else 'untied'}: {n:,} parameters, held-out loss "
              f"{results[-1]:.3f}", flush=True)
    return results


# ------------------------------------------- chapter 09: pre-training, and simple baselines


def pretrain_pair(seed):
    """Held-out test accuracy of language identification after the classify recipe's
    fine-tuning budget (300 steps): the encoder pre-trained first by the mlm recipe (2,000
    steps of masked characters on 2.2x the texts, unlabelled: `tfcourse train --task mlm`),
    then from scratch. The same split, model and settings; only the starting weights
    differ."""
    results = []
    mlm, pre, pre_config = build_recipe("mlm", seed, train=dict(eval_every=0))
    train(pre, mlm, pre_config, device="cpu", progress=False)
    for start in ("pre-trained", "scratch"):
        task, model, config = build_recipe("classify", seed)
        if start == "pre-trained":
            model.load_state_dict(pre.state_dict())
        train(model, task, config, device="cpu", progress=False)
        results.append(task.evaluate(model, task.test))
        print(f"    {start}: {results[-1]:.1%}", flush=True)
    return results


def classify_baseline_pair(seed):
    """Held-out test accuracy of language identification: the classify recipe (trained with
    `seed`, on language_id_task(seed)'s split) vs character n-gram naive Bayes on the
    same split."""
    task, model, config = build_recipe("classify", seed)
    train(model, task, config, device="cpu", progress=False)
    ours, bayes = task.evaluate(model, task.test), NaiveBayes(task.train, order=5).accuracy(task.test)
    print(f"    transformer {ours:.1%}, naive Bayes {bayes:.1%}", flush=True)
    return ours, bayes


def lm_baseline_pair(seed):
    """Held-out test loss (nats/char) of the shipped LM (`tfcourse train --task lm --seed 0`:
    6,000 steps, 15-20 CPU minutes, so one seed, the shipped file) vs a character 6-gram
    (interpolated Kneser-Ney) read in the same windows: 1.599 (the 7-gram 1.598, the 8-gram
    1.605)."""
    model, _, _ = load_checkpoint(LM_CHECKPOINT)
    task = RECIPES["lm"].make_task(seed=0)
    ngram = _ngram_nats(task.train.block_size)
    ours = task.evaluate(model, task.test)
    print(f"    transformer {ours:.3f}, 6-gram {ngram:.3f}", flush=True)
    return ours, ngram


@functools.cache
def _ngram_nats(block_size):
    corpus = stdlib_corpus()
    train_ids = corpus.vocab.encode(corpus.train)
    return NGramLM(train_ids, len(corpus.vocab), 6).nats(corpus.vocab.encode(corpus.test), block_size)


def dates_baseline_pair(seed):
    """Held-out exact match on the dates task: the shipped dates model vs a rule that reads
    the numbers and a month table learned from the training pairs (baselines.DateRule)."""
    task = dates_task(seed=0)
    model, vocab, _ = load_checkpoint(DATES_CHECKPOINT)
    return exact_match(model, task.test, vocab), DateRule(task.train).accuracy(task.test)


def confidence_pair(seed):
    """AUROC of `tfcourse decode`'s confidence (the weakest character's probability) vs
    the product of the characters' probabilities, as tests of a right output: the shipped
    dates model on the 2,000 held-out test dates plus data.unfamiliar_dates() (dates in
    other languages and formats, nonsense)."""
    task = dates_task(seed=0)
    model, vocab, _ = load_checkpoint(DATES_CHECKPOINT)
    pairs = task.test + unfamiliar_dates(seed=seed + 1)
    outputs = predict(model, [s for s, _ in pairs], vocab)
    right = [o == t for o, (_, t) in zip(outputs, pairs, strict=True)]
    decoded = list(zip([s for s, _ in pairs], outputs, strict=True))
    weakest = output_confidence(model, decoded, vocab)
    product = []
    with torch.no_grad():
        for i in range(0, len(decoded), 500):
            batch = make_batch(decoded[i: i + 500], vocab)
            logits, targets = batch.loss_inputs(model)
            log_p = logits.log_softmax(-1).gather(-1, targets[..., None])[..., 0]
            product += log_p.masked_fill(targets == PAD, 0.0).sum(-1).exp().tolist()
    print(f"    {len(right) - sum(right)} wrong of {len(right)}", flush=True)
    return auroc(weakest, right), auroc(product, right)


BENCHMARKS = [
    Benchmark("copy", "copy task: seconds to 100% exact match", ("tfcourse", "torch.nn"),
              copy_pair, lambda r: f"{r[0]:.1f} s ({r[1]:.0f} steps)",
              lambda a, b: a[0] / b[0], "<= 1.0", seeds=20, quick=2),
    Benchmark("throughput", "training throughput, tokens/s", ("tfcourse", "torch.nn"),
              throughput_pair, lambda t: f"{t:,.0f}", lambda a, b: a / b, ">= 0.9"),
    Benchmark("cache", "greedy decoding, 16 x 256 tokens (tfcourse)", ("cached", "uncached"),
              cache_pair, lambda s: f"{s:.2f} s", lambda a, b: b / a, "speed-up"),
    Benchmark("lm", "LM: held-out nats/char after 6 s of training", ("tfcourse", "torch.nn"),
              lm_pair, lambda r: f"{r[0]:.3f} ({r[1]:.0f} steps)", lambda a, b: a[0] / b[0],
              "<= 1.0", quick=2),
    Benchmark("lm_throughput", "LM training throughput, tokens/s", ("tfcourse", "torch.nn"),
              lm_throughput_pair, lambda t: f"{t:,.0f}", lambda a, b: a / b, ">= 0.9"),
    Benchmark("tying", "LM held-out nats/char after 200 steps (tfcourse)", ("tied", "untied"),
              tying_pair, lambda x: f"{x:.3f}", lambda a, b: a / b, "<= 1.0", quick=2),
]

BENCHMARKS += [
    Benchmark("pretrain", "language ID: held-out accuracy, 300 steps after MLM pre-training vs "
              "from scratch", ("pre-trained", "scratch"), pretrain_pair,
              lambda a: f"{a:.1%}", lambda a, b: a / b, "> 1.0", seeds=3),
    Benchmark("classify_baseline", "language ID: held-out accuracy, the classify recipe vs "
              "character n-gram naive Bayes", ("transformer", "naive Bayes"),
              classify_baseline_pair, lambda a: f"{a:.1%}", lambda a, b: a / b, ">= 1.0",
              seeds=3),
    Benchmark("lm_baseline", "LM: held-out nats/char, the shipped lm.pt vs a 6-gram (Kneser-Ney)",
              ("transformer", "6-gram"), lm_baseline_pair, lambda x: f"{x:.3f}",
              lambda a, b: a / b, "<= 1.0", seeds=1),
    Benchmark("dates_baseline", "dates: held-out exact match, the shipped model vs a month-table "
              "rule", ("transformer", "rule"), dates_baseline_pair, lambda a: f"{a:.2%}",
              lambda a, b: a / b, ">= 1.0", seeds=1),
    Benchmark("confidence", "decode: AUROC of the confidence, held-out + unfamiliar inputs",
              ("weakest character", "product"), confidence_pair, lambda a: f"{a:.3f}",
              lambda a, b: a / b, "AUROC >= 0.9", seeds=1),
]

# Chapter 10's rows; their measuring functions are in benchmarks/efficiency.py.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import efficiency  # noqa: E402

BENCHMARKS += [
    Benchmark("fused", "fused multi-head attention, forward + backward, (8, 256, 256), 8 heads",
              ("tfcourse, attn_impl='sdpa'", "nn.MultiheadAttention"), efficiency.fused_attention_pair,
              lambda s: f"{s * 1e3:.1f} ms", lambda a, b: a / b, "<= 1.0"),
    Benchmark("fused_throughput", "training throughput with attn_impl='sdpa', tokens/s",
              ("tfcourse", "torch.nn"), functools.partial(throughput_pair, attn_impl="sdpa"),
              lambda t: f"{t:,.0f}", lambda a, b: a / b, ">= 1.0"),
    Benchmark("tiled", "tiled attention (blocks of 128), peak memory at n = 4,096",
              ("tiled", "chapter 01's"), efficiency.tiled_memory_pair,
              lambda b: f"{b / 2**20:.1f} MiB", lambda a, b: a / b, "<= 0.1", seeds=1),
    Benchmark("local_memory", "local attention (128 keys each side), peak memory at n = 16,384",
              ("local", "chapter 01's exact"), efficiency.local_memory_pair,
              lambda b: f"{b / 2**20:.1f} MiB", lambda a, b: a / b, "<= 0.1", seeds=1),
    Benchmark("local_time", "local attention (128 keys each side), forward time at n = 16,384",
              ("local", "exact fused (SDPA)"), efficiency.local_time_pair,
              lambda s: f"{s * 1e3:.0f} ms", lambda a, b: a / b, "< 1.0", seeds=3),
]

# Chapter 11's rows; their measuring functions are in benchmarks/tokens.py.
import tokens  # noqa: E402

BENCHMARKS += [
    Benchmark("bpe_train", "BPE training, vocabulary 4,096, on the Python training files, CPU seconds",
              ("tfcourse", "HF tokenizers"), tokens.train_time_pair,
              lambda s: f"{s:.2f} s", lambda a, b: a / b, "slower: Python", seeds=3),
    Benchmark("bpe_encode", "BPE encoding of the Python test files, bytes per CPU second",
              ("tfcourse", "tiktoken"), tokens.encode_pair, lambda t: f"{t:,.0f}",
              lambda a, b: a / b, "slower: Python", seeds=3),
    *(Benchmark(f"bpe_word_{n:.0e}".replace("+0", ""), f"BPE encoding of one word of {n:,} random "
                f"letters (no space), CPU seconds", ("tfcourse", "tiktoken"),
                functools.partial(tokens.letters_pair, n=n), lambda s: f"{s:.3f} s",
                lambda a, b: a / b, "< 20: Python", seeds=3) for n in (10_000, 100_000, 1_000_000)),
    Benchmark("bpe_words_1e6", "BPE encoding of 1,000,000 random letters in words of 6, CPU seconds",
              ("tfcourse", "tiktoken"), functools.partial(tokens.letters_pair, n=1_000_000, word=6),
              lambda s: f"{s:.3f} s", lambda a, b: a / b, "< 20: Python", seeds=3),
    Benchmark("bpe_lm", "LM: held-out bits/byte after 45 CPU-seconds of training, BPE (1,024) vs characters",
              ("BPE", "characters"), tokens.lm_pair, lambda r: f"{r[0]:.3f} ({r[1]:.0f} steps)",
              lambda a, b: a[0] / b[0], "< 1.0", seeds=3, quick=1),
    Benchmark("bpe_context", "characters that 64 positions read, BPE (1,024) vs characters",
              ("BPE", "characters"), tokens.context_pair, lambda c: f"{c:.0f}",
              lambda a, b: a / b, "> 1.0", seeds=1),
]

# Chapter 12's rows; their measuring functions are in benchmarks/modern.py.
import modern  # noqa: E402


def _tiny_train(model, task, seed, seconds=None, steps=None):
    """_train_lm with the tiny LM's settings (chapter 12's rows), `seconds` of this process's
    CPU time (not wall time: the machine may be shared)."""
    return _train_lm(model, task, TrainConfig(**TINY_LM_TRAIN), seed, seconds, steps,
                     clock=time.process_time)


_CHANGES = {"scaled": "the sqrt(d) embedding scale added", "layernorm": "LayerNorm for RMSNorm",
            "gelu": "GELU FFN for SwiGLU",
            "learned": "learned positions for RoPE", "mha": "4 key/value heads for 2"}
BENCHMARKS += [
    Benchmark("llama", "LM: held-out nats/char after 60 CPU-seconds of training, equal parameters",
              ("Llama block", "GPT block"), functools.partial(modern.llama_pair, train=_tiny_train),
              lambda r: f"{r[0]:.3f} ({r[1]:.0f} steps)", lambda a, b: a[0] / b[0], "< 1.0",
              seeds=3, quick=1),
    Benchmark("llama_steps", f"LM: held-out nats/char after {modern.STEPS} steps, equal "
              "parameters", ("Llama block", "GPT block"),
              functools.partial(modern.steps_pair, train=_tiny_train), lambda x: f"{x:.3f}",
              lambda a, b: a / b, "< 1.0", seeds=3, quick=1),
    *(Benchmark(f"llama_{change}", f"LM: held-out nats/char after {modern.STEPS} steps, "
                f"Llama block without one change: {what}", ("Llama block", "changed back"),
                functools.partial(modern.change_pair, train=_tiny_train, change=change),
                lambda x: f"{x:.3f}", lambda a, b: a / b, "< 1.0", seeds=3, quick=1)
      for change, what in _CHANGES.items()),
    *(Benchmark(f"beyond_{other}", f"LM trained on 64 positions: held-out nats/char at positions "
                f"64-255 (0-63), RoPE vs {other}", ("RoPE", other),
                functools.partial(modern.beyond_pair, train=_tiny_train, other=other),
                lambda r: f"{r[1]:.3f} ({r[0]:.3f})", lambda a, b: a[1] / b[1], "< 1.0",
                seeds=1) for other in ("learned", "sinusoidal")),
]

# Chapter 13's rows; bfloat16 autocast on the CPU is in benchmarks/precision.py.
import precision  # noqa: E402

BENCHMARKS += [
    Benchmark(f"bf16_cpu_{d}", f"LM training on the CPU at d_model {d}: CPU ms per step "
              "(held-out nats/char after 60 steps), bfloat16 autocast vs float32",
              ("bfloat16", "float32"), functools.partial(precision.bf16_pair, d_model=d),
              lambda r: f"{r[0] * 1e3:.0f} ms ({r[1]:.3f})", lambda a, b: a[0] / b[0],
              "< 1.0 pays", seeds=3, quick=1) for d in (64, 256)]


# Chapter 12's model against transformers' LlamaForCausalLM, and against the course's GPT
# block; their measuring functions are in benchmarks/llama_speed.py.
import llama_speed  # noqa: E402

_ALL = os.cpu_count() or 1
BENCHMARKS += [
    *(Benchmark(f"{row}_{size}_{threads}t", f"{what}, {size} ({threads} thread"
                f"{'s' if threads > 1 else ''}), tokens per CPU second", columns,
                functools.partial(measure, size=size, threads=threads),
                lambda t: f"{t:,.0f}", lambda a, b: a / b, goal, seeds=3)
      for row, what, columns, measure, goal in (
          ("hf_step", "Llama training step (8 x 128)", ("tfcourse", "transformers"),
           llama_speed.step_pair, ">= 1.0"),
          ("hf_generate", "Llama greedy cached generation (1 x 128)",
           ("tfcourse", "transformers"), llama_speed.generate_pair, ">= 1.0"),
          ("llama_gpt", "training step (8 x 128), Llama block vs GPT block",
           ("Llama block", "GPT block"), llama_speed.llama_gpt_pair, "about 1.0"))
      for size in llama_speed.SIZES for threads in sorted({1, _ALL})),
]


# Chapter 13's rows; their measuring functions are in benchmarks/llm.py, which also stores
# every run in benchmarks/llm.json (python benchmarks/llm.py): about 5 CPU minutes a run.
import llm  # noqa: E402

_LLM_OTHERS = {"adam2017": "the same model, tokens and steps with 2017's recipe (Adam, noam, "
                           "no decay, no clipping)",
               "gpt_bpe": "chapter 09's GPT block, the same tokens, recipe and parameters",
               "llama_chars": "the same model and recipe on characters",
               "bpe n-gram": "the best Kneser-Ney n-gram over the same BPE tokens",
               "chars n-gram": "the best Kneser-Ney n-gram over characters",
               "lm.pt": "chapter 09's shipped character model"}
BENCHMARKS += [
    Benchmark(f"llm_{other.replace(' ', '_').replace('.', '_')}",
              f"small LM (recipe llm): held-out bits/byte vs {what}", ("llm", other),
              functools.partial(llm.pair, other=other), lambda x: f"{x:.3f}",
              lambda a, b: a / b, "< 1.0", seeds=3, quick=1)
    for other, what in _LLM_OTHERS.items()]


# ------------------------------------------------------------------ running them


def _cpu_ticks():
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:9]]
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - ticks[3] - ticks[4]) / hz, sum(ticks) / hz


def others_busy(fn, *args):
    """fn(*args), and how many cores other programs kept busy meanwhile (on average; None
    where /proc/stat is missing): the machine's busy CPU time minus this process's."""
    try:
        busy0, _ = _cpu_ticks()
    except OSError:
        busy0 = None
    start, own0 = time.perf_counter(), time.process_time()
    result = fn(*args)
    wall, own = time.perf_counter() - start, time.process_time() - own0
    if busy0 is None:
        return result, None
    return result, max(0.0, (_cpu_ticks()[0] - busy0 - own) / wall)


def run_row(bench, seeds, spare_cores):
    """The pairs of one row; returns (row cells, marked pairs, pairs with a result)."""
    pairs, marked = [], 0
    for seed in range(seeds):
        print(f"  {bench.name}, seed {seed}:", flush=True)
        result, busy = others_busy(bench.measure, seed)
        disturbed = busy is not None and busy > spare_cores + 0.25
        marked += disturbed
        if None in result:
            print("    no result for this seed (not counted)")
            continue
        ratio = bench.ratio(*result)
        pairs.append((*result, ratio))
        load = "" if busy is None else f"; other programs used {busy:.2f} cores"
        print(f"    ratio {ratio:.3f}{load}{' (DISTURBED)' if disturbed else ''}", flush=True)
    if not pairs:
        raise RuntimeError(f"{bench.name}: no seed gave a result")
    a, b = (_median([p[i] for p in pairs]) for i in (0, 1))
    ratios = [p[2] for p in pairs]
    spread = f" ({min(ratios):.2f} to {max(ratios):.2f})" if len(ratios) > 1 else ""
    cells = (f"{bench.title} (median of {len(pairs)} pairs)", bench.show(a), bench.show(b),
             statistics.median(ratios), bench.goal, spread)
    return cells, marked, seeds


def _median(values):
    """The median of numbers, or of tuples of numbers element by element."""
    if isinstance(values[0], tuple):
        return tuple(statistics.median(column) for column in zip(*values))
    return statistics.median(values)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main(argv=None):
    names = [b.name for b in BENCHMARKS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer seeds, a rough look")
    parser.add_argument("--seeds", type=int, default=None,
                        help="pairs per row (default: each row's own, e.g. 20 for copy)")
    parser.add_argument("--threads", default="auto",
                        help="torch threads; auto (default): the cores other programs leave idle")
    parser.add_argument("--only", choices=names, action="append",
                        help="run only this row (may be repeated)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
    cores = os.cpu_count() or 1
    torch.set_num_threads(free_cpu_cores() if args.threads == "auto" else int(args.threads))
    threads = torch.get_num_threads()
    print(f"machine : {cpu_name()}, {cores} cores, {platform.system()} {platform.release()}")
    print(f"versions: python {platform.python_version()}, torch {torch.__version__}")
    print(f"threads : torch {threads} ({args.threads}); load average before "
          f"{os.getloadavg()[0]:.1f}\n", flush=True)

    rows, notes = [], []
    for bench in BENCHMARKS:
        if args.only and bench.name not in args.only:
            continue
        seeds = args.seeds or (bench.quick if args.quick else bench.seeds)
        cells, marked, n = run_row(bench, seeds, spare_cores=cores - threads)
        rows.append(cells)
        if marked:
            notes.append(f"{bench.name}: {marked} of {n} pairs ran while other programs kept "
                         f"busy a core this run needed: UNRELIABLE, run it again on a quiet "
                         f"machine (or with --threads 1)")
        print(f"  {cells[0]}: {cells[1]} vs {cells[2]}, ratio {cells[3]:.2f}\n", flush=True)

    print(f"load average after: {os.getloadavg()[0]:.1f}\n")
    table = [("benchmark", "tfcourse / first", "torch.nn / second", "ratio", "goal")]
    table += [(*row[:3], f"{row[3]:.2f}{row[5]}", row[4]) for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(5)]
    for i, row in enumerate(table):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
        if i == 0:
            print("| " + " | ".join("-" * w for w in widths) + " |")
    for note in notes:
        print(f"\n{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
