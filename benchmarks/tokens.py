"""Chapter 11's rows of benchmarks/run.py: byte-level BPE against Hugging Face tokenizers
(training) and tiktoken (encoding), and what BPE buys chapter 09's language model.

Bits per byte: the held-out loss summed over every predicted token, in bits, divided by the
UTF-8 bytes those tokens hold; a character model and a BPE model are then measured in one
unit, on the same text (the validation files: every window of 64 tokens, each token after
the first of a window predicted from those before it in the window).
"""

import functools
import random
import string
import time

import tiktoken
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from tfcourse.corpora import TextCorpus, lm_task, stdlib_corpus
from tfcourse.recipes import LM_CONTEXT, RECIPES
from tfcourse.tokens import BPE, train_bpe
from tfcourse.training import TrainConfig, train_step
from tfcourse.vocab import SPECIALS

BPE_VOCAB = 1024  # the LM's tokenizer; the training rows also time 4,096


@functools.cache
def _corpus():
    return stdlib_corpus()


def hf_train(texts, vocab_size):
    """Hugging Face tokenizers' byte-level BPE, as tfcourse.tokens trains it (GPT-2's
    pattern, no prefix space, every byte, the four specials)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def _cpu_seconds(fn, *args):
    """The CPU time of this process (every thread of it) that fn(*args) takes, and its
    result: what other programs' load cannot lengthen, as wall time can."""
    start = time.process_time()
    result = fn(*args)
    return time.process_time() - start, result


def train_time_pair(seed, vocab_size=4096):
    """CPU seconds to train a tokenizer of `vocab_size` on the Python training files:
    tfcourse, then Hugging Face tokenizers."""
    text = _corpus().train
    ours, _ = _cpu_seconds(train_bpe, text, vocab_size)
    theirs, _ = _cpu_seconds(hf_train, [text], vocab_size)
    print(f"    tfcourse {ours:.2f} s, tokenizers {theirs:.2f} s", flush=True)
    return ours, theirs


@functools.cache
def _python_bpe(vocab_size=BPE_VOCAB):
    return train_bpe(_corpus().train, vocab_size)


def encode_pair(seed):
    """Encoding throughput on the Python test files, bytes per CPU second: tfcourse (its
    cache of pre-tokens empty), then tiktoken built from its ranks (the same ids)."""
    bpe = _python_bpe()
    text = _corpus().test
    fresh = BPE.from_dict(bpe.to_dict())
    encoding = tiktoken.Encoding("tfcourse", **bpe.tiktoken_parts())
    mine, ours = _cpu_seconds(fresh.encode, text)
    tik, theirs = _cpu_seconds(functools.partial(encoding.encode, allowed_special="all"), text)
    assert ours == theirs
    size = len(text.encode())
    return size / mine, size / tik


def letters_pair(seed, n, word=None):
    """CPU seconds to encode ``n`` random lowercase letters, one word without a space
    (``word`` None: one pre-token of n bytes) or words of ``word`` letters: tfcourse (its
    cache of pre-tokens empty), then tiktoken built from its ranks (the same ids). Time that
    grows linearly with n, for both shapes, is the goal (merging a pre-token pass after pass
    took 86 s for one word of 1,000,000 letters)."""
    rng = random.Random(seed)
    text = "".join(rng.choice(string.ascii_lowercase) for _ in range(n))
    if word is not None:
        text = " ".join(text[i:i + word] for i in range(0, n, word))
    bpe = _python_bpe()
    fresh = BPE.from_dict(bpe.to_dict())
    encoding = tiktoken.Encoding("tfcourse", **bpe.tiktoken_parts())
    mine, ours = _cpu_seconds(fresh.encode, text)
    tik, theirs = _cpu_seconds(encoding.encode_ordinary, text)
    assert ours == theirs
    return mine, tik


# ------------------------------------------------------------------ the language model


@functools.cache
def _tasks():
    """The lm task on characters and on BPE tokens (1,024), the same files."""
    corpus = _corpus()
    bpe = _python_bpe()
    tokens = TextCorpus(corpus.name, bpe, corpus.train, corpus.val, corpus.test, corpus.files)
    return {"chars": lm_task(block_size=LM_CONTEXT, corpus=corpus),
            "bpe": lm_task(block_size=LM_CONTEXT, corpus=tokens)}


def lm_pair(seed, seconds=45.0):
    """Bits per byte on the validation files after `seconds` of training, the lm recipe's
    model (the same settings: its label smoothing, 0, and clipping) on BPE tokens, then on
    characters. The time is this process's
    CPU time (one thread), which other programs' load cannot shorten."""
    recipe = RECIPES["lm"]
    results = {}
    for name in ("bpe", "chars"):
        task = _tasks()[name]
        model = recipe.build_model(task, seed)
        config = TrainConfig(**{**recipe.train, "seed": seed})
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, betas=(0.9, 0.98), eps=1e-9)
        warm = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda k, w=config.warmup: min(1.0, (k + 1) / w))
        g = torch.Generator().manual_seed(seed)
        model.train()
        steps, start = 0, time.process_time()
        while time.process_time() - start < seconds:
            drawn = torch.randint(len(task.train), (config.batch_size,), generator=g).tolist()
            train_step(model, [task.make_batch([task.train[i] for i in drawn])], optimizer,
                       config.label_smoothing, config.clip)
            warm.step()
            steps += 1
        bpb = task.bits_per_byte(model, task.val)
        n_params = sum(p.numel() for p in model.parameters())
        results[name] = (bpb, steps)
        print(f"    {name}: {steps} steps, {n_params:,} parameters, {bpb:.3f} bits/byte", flush=True)
    return results["bpe"], results["chars"]


def context_pair(seed):
    """Characters that 64 positions hold, on average over the validation files: BPE tokens,
    then characters (64)."""
    task = _tasks()["bpe"]
    ids = task.vocab.encode(_corpus().val)
    return len(_corpus().val) / len(ids) * LM_CONTEXT, float(LM_CONTEXT)
