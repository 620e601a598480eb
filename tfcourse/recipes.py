"""Recipes: for each named task, the model and the training settings the course uses, in
one place for `tfcourse train --task NAME`, notebook 07 and the benchmarks.

    task, model, config = build("copy", seed=0)        # the course's copy run
    train(model, task, config)

A recipe's settings were found by measuring on a 2-core CPU: without dropout (the data are
plentiful) and with a cosine schedule that ends at 0, these tasks reach their accuracy in
the fewest steps. Chapter 09's: "classify" (language identification, an encoder
classifier), "mlm" (the same texts, masked-LM pre-training of the same model) and "lm" (a
decoder-only character model of Python source, with chapter 10's fused attention, as
a real system computes it). The first two train in about a minute; "mlm" (2,000 steps) and
"lm" (0.8M parameters, 6,000 steps: about 15-20 minutes on one CPU thread) are the shipped
checkpoints that `make test` remakes only when asked (`make test ARGS=--slow`).
"""

import dataclasses
import datetime
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from tfcourse.corpora import LANGUAGES, language_id_task, lm_task, mlm_task
from tfcourse.data import copy_task, dates_task, reverse_task
from tfcourse.interface import TaskLike
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.modern import LlamaConfig, LlamaLM
from tfcourse.training import TrainConfig
from tfcourse.variants import DecoderLM, DecoderLMConfig, EncoderClassifier, EncoderClassifierConfig


@dataclass(frozen=True)
class Recipe:
    """How the course trains on one task.

    make_task(seed) -> the task; model_class(config(task, **model)) -> the model, with the
    recipe's model overrides ``model`` (a dict) and TrainConfig values ``train`` (a dict).
    ``about`` says what the task is (for --help); ``check_output(text)`` names what is wrong
    with an output that cannot be right (None when nothing is), for `tfcourse decode`."""

    about: str
    make_task: Callable
    model_class: type
    config: Callable
    model: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)
    check_output: Callable = lambda text: None

    def build_model(self, task: TaskLike, seed: int = 0, **overrides: Any) -> nn.Module:
        """The recipe's model for ``task``, its weights drawn from ``seed``."""
        torch.manual_seed(seed)
        return self.model_class(self.config(task, **{**self.model, **overrides}))

    def train_config(self, seed: int = 0, **overrides: Any) -> TrainConfig:
        """The recipe's TrainConfig, with ``overrides``."""
        return TrainConfig(**{**self.train, "seed": seed, **overrides})


def _tiny_seq2seq(task, **overrides):
    return TransformerConfig.tiny(len(task.vocab), **overrides)


def _tiny_classifier(task, **overrides):
    return EncoderClassifierConfig.tiny(len(task.vocab), len(task.classes), **overrides)


def _tiny_mlm(task, **overrides):  # with a classifier head for the languages, to train next
    return EncoderClassifierConfig.tiny(len(task.vocab), len(LANGUAGES), **overrides)


def _tiny_lm(task, **overrides):
    return DecoderLMConfig.tiny(len(task.vocab), **overrides)


def _tiny_llama(task, **overrides):
    return LlamaConfig.tiny(len(task.vocab), **overrides)


def _lm_task_named(name):
    """The lm task under another recipe's name (what a checkpoint records, --resume checks)."""
    return lambda seed=0: dataclasses.replace(RECIPES["lm"].make_task(seed=seed), name=name)


def _iso_date_problem(text):
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return "not a date in ISO form (YYYY-MM-DD)"
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return "not a valid date"
    return None


_FAST = dict(batch_size=64, schedule="cosine")
# The LM has as many positions as its training windows are long, so that every position it
# reads was trained; a longer text is read through a sliding window of the last 64
# characters (decoding.lm_generate). Measured on the 0.1M-parameter model of an earlier
# recipe, windows of 128 or 256 (at the same steps) ended with a worse held-out loss. This
# one (4 layers of 128, dropout 0.1, 6,000 steps of 32 windows: 12M characters, about 12
# passes over the training text) reaches 1.48 nats/char on the test files, under the 6-gram's
# 1.60 (validation 1.38 at step 5,000 and 6,000 alike: more steps would buy little).
LM_CONTEXT = 64
RECIPES = {
    "copy": Recipe(
        "copy 10 symbols", copy_task, Transformer, _tiny_seq2seq, dict(dropout=0.0),
        dict(steps=400, lr=0.008, warmup=50, eval_every=100, **_FAST)),
    "reverse": Recipe(
        "reverse 1-10 symbols", reverse_task, Transformer, _tiny_seq2seq, dict(dropout=0.0),
        dict(steps=500, lr=0.008, warmup=50, eval_every=100, **_FAST)),
    "dates": Recipe(
        "written-out dates in 8 languages -> ISO 8601", dates_task, Transformer, _tiny_seq2seq,
        dict(dropout=0.0), dict(steps=800, lr=0.005, warmup=100, eval_every=200, **_FAST),
        _iso_date_problem),
    "classify": Recipe(
        "which of 10 languages a short text is in (CLDR names)", language_id_task,
        EncoderClassifier, _tiny_classifier, dict(dropout=0.1),
        dict(steps=300, lr=0.003, warmup=30, eval_every=100, label_smoothing=0.0, **_FAST)),
    "mlm": Recipe(
        "masked characters of the classify texts (BERT's pre-training)", mlm_task,
        EncoderClassifier, _tiny_mlm, dict(dropout=0.1),
        dict(steps=2000, lr=0.003, warmup=30, eval_every=500, label_smoothing=0.0, **_FAST)),
    "lm": Recipe(
        "next character of Python source (CPython 3.11.7's standard library)",
        functools.partial(lm_task, block_size=LM_CONTEXT),
        DecoderLM, _tiny_lm, dict(d_model=128, n_heads=4, d_ff=512, n_layers=4, dropout=0.1,
                                  attn_impl="sdpa", max_len=LM_CONTEXT),
        dict(steps=6000, lr=0.003, warmup=200, eval_every=1000, label_smoothing=0.0,
             eval_size=200, batch_size=32, schedule="cosine")),
}
# Chapter 11: the same model and settings on byte-level BPE tokens (1,024 ids, trained on the
# training files when the task is made): 64 positions read about 170 characters.
RECIPES["lm-bpe"] = Recipe(
    "next byte-level BPE token (1,024 ids) of the same Python source",
    functools.partial(lm_task, block_size=LM_CONTEXT, bpe_vocab=1024), DecoderLM, _tiny_lm,
    RECIPES["lm"].model, RECIPES["lm"].train)
# Chapter 12: the same task and training with Llama's block, at the GPT model's parameters
# (812,928 against 814,592): the 2/3-wide SwiGLU of d_ff = 512 would be 341 wide; the two
# key/value heads (of 4) and the absent position table leave room for d_ff = 392.
RECIPES["lm-llama"] = Recipe(
    "the lm task with Llama's block (RMSNorm, SwiGLU, rotary positions, grouped-query "
    "attention; chapter 12)", _lm_task_named("lm-llama"), LlamaLM, _tiny_llama,
    dict(d_model=128, n_heads=4, n_kv_heads=2, d_ff=392, n_layers=4, dropout=0.1,
         attn_impl="sdpa", max_len=LM_CONTEXT),
    RECIPES["lm"].train)


# Chapter 13: chapters 11 and 12 assembled and trained the way today's models are. Byte-level
# BPE of 1,024 ids (chosen by measurement: benchmarks/llm.py's vocab part, notebook 13),
# Llama's block (4 layers of 128, two key/value heads, SwiGLU 352 wide: 869,504 parameters)
# and Llama 2's recipe scaled down (section 2.2): AdamW with beta2 0.95 and weight decay 0.1
# on the weight matrices (tfcourse.optim.param_groups), 150 steps of warm-up then a cosine to
# 10% of the peak, clipping at 1.0. 1,500 steps of 32 windows of 64 tokens: 3M tokens, about
# 8.3M bytes (nine passes over the training text), about 5 minutes on one CPU thread. Every
# file ends with <eos> (lm_task's eos), so the model learns where a text ends. 1,000 steps
# (warm-up 100) left seed 1 at 2.124 bits per byte, above lm.pt's 2.120; 1,500 give 2.088-2.094.
# The peak rate, measured first with torch.optim.AdamW at 600 steps without dropout
# (validation bits per byte, seed 0): 1e-3 2.27, 3e-3 1.99, 6e-3 1.95, 1e-2 1.96, 1.5e-2
# 2.01; this recipe at 400 steps: 3e-3 2.22, 6e-3 2.12, 1e-2 2.11 (benchmarks/llm.py lr): 1e-2
# by 0.6%, less than the seeds' spread (validation 1.88-1.91 at 1,500 steps); 6e-3 kept.
# Dropout 0.1 is not Llama's: without it this model memorizes its 340,000 training tokens,
# read nine times (training loss 1.75 nats/token, validation 3.81, test 2.250 bits per byte;
# with 0.1: 2.34, 3.54, 2.088; benchmarks/llm.py dropout); 0.2 did worse at 1,000 steps
# (validation 1.90 against 1.88 with torch.optim.AdamW).
LLM_VOCAB = 1024


def _llm_task(seed=0):
    task = lm_task(seed, block_size=LM_CONTEXT, bpe_vocab=LLM_VOCAB, eos=True)
    task.name = "llm"  # what a checkpoint records and --resume checks
    return task


RECIPES["llm"] = Recipe(
    "next byte-level BPE token (1,024 ids) of the Python source, each file ending with <eos>, "
    "with Llama's block and today's training recipe (chapter 13)", _llm_task, LlamaLM, _tiny_llama,
    dict(d_model=128, n_heads=4, n_kv_heads=2, d_ff=352, n_layers=4, dropout=0.1,
         attn_impl="sdpa", max_len=LM_CONTEXT),
    dict(steps=1500, lr=6e-3, warmup=150, schedule="cosine", min_lr_ratio=0.1,
         optimizer="adamw", beta2=0.95, weight_decay=0.1, clip=1.0, batch_size=32,
         label_smoothing=0.0, eval_every=250, eval_size=300))


def recipe(name: str) -> Recipe:
    """The recipe called ``name`` (one of RECIPES)."""
    if name not in RECIPES:
        raise ValueError(f"unknown task {name!r}, choose one of {', '.join(RECIPES)}")
    return RECIPES[name]


def build(name: str, seed: int = 0, model: dict | None = None, train: dict | None = None
          ) -> tuple[TaskLike, nn.Module, TrainConfig]:
    """(task, model, TrainConfig) of the recipe ``name``: the task's data and the model's
    weights drawn from ``seed``, with overrides of the model's config (``model``, a dict)
    and of the training settings (``train``, a dict)."""
    r = recipe(name)
    task = r.make_task(seed=seed)
    return task, r.build_model(task, seed, **(model or {})), r.train_config(seed, **(train or {}))
