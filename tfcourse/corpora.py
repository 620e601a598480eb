"""Chapter 09: real text for the encoder-only and the decoder-only model, offline and fixed.

- ``language_id_task``: which of 10 languages a short text is in ("Mitteleuropäische
  Sommerzeit": de, "dolarów amerykańskich": pl). The texts are the names that the Unicode
  CLDR gives, in each language, to languages, countries, scripts, currencies, units, time
  zones, months and weekdays, read from the copy of CLDR that Babel installs. Strings that
  two languages share ("Angola", "August") say nothing about the language: they are left
  out. The split is by item (the country JP, the unit "meter", ...): a held-out item is held
  out in every language, so no held-out string, nor its plural or other forms, is seen in
  training.
- ``stdlib_corpus``: about 1 MB of Python source, 36 modules of the standard library of
  CPython 3.11.7 shipped in tfcourse/texts/python_stdlib (PSF licence, README.md and
  manifest.json there; made by tools/make_stdlib_corpus.py), split into train, validation
  and test by file. Characters, not words: the vocabulary is the training text's characters.

Their batches are in tfcourse.batches, using a trained model in tfcourse.inference.
"""

import json
import math
import os
import random
import re
import unicodedata
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from babel import Locale, UnknownLocaleError

from tfcourse.batches import classification_batch, lm_batch, masked_lm_batch
from tfcourse.data import Task
from tfcourse.inference import classify, complete, eval_batches
from tfcourse.tokens import train_bpe
from tfcourse.vocab import CLS_TOKEN, EOS, MASK, MASK_TOKEN, PAD, Vocab

# ------------------------------------------------------------------- language identification

LANGUAGES = ("en", "de", "nl", "sv", "fr", "es", "pt", "it", "pl", "tr")


@dataclass
class ClassificationTask(Task):
    """Pairs (text, class name); ``classes`` in the order of the model's outputs (checkpoints
    record them). Judged by accuracy: the fraction of texts whose most probable class is
    right."""

    classes: tuple
    metric = "accuracy"
    higher_is_better = True

    def make_batch(self, examples):
        return classification_batch(examples, self.vocab, self.classes)

    def evaluate(self, model, examples):
        guesses = classify(model, [text for text, _ in examples], self.vocab, self.classes)
        right = sum(g == c for (g, _), (_, c) in zip(guesses, examples, strict=True))
        return right / len(examples)

    def show(self, model, examples):
        guesses = classify(model, [text for text, _ in examples], self.vocab, self.classes)
        return [f"{text} -> {guess} (p = {p:.2f}; {'ok' if guess == c else f'WRONG, it is {c}'})"
                for (text, c), (guess, p) in zip(examples, guesses, strict=True)]


@dataclass
class MaskedLMTask(Task):
    """Texts (pairs (text, class name), the class not used) for BERT's pre-training
    objective: predict the chosen characters (masked_lm_batch). Judged by masked accuracy:
    the fraction of chosen characters predicted right. A batch's masking is drawn from a
    generator seeded by its texts: a run repeats exactly, resumed or not, and every
    validation round sees the same masks."""

    metric = "masked accuracy"

    def make_batch(self, examples):
        texts = [text for text, _ in examples]
        seed = zlib.crc32("\n".join(texts).encode())
        return masked_lm_batch(texts, self.vocab, torch.Generator().manual_seed(seed))

    @torch.no_grad()
    def evaluate(self, model, examples, batch_size=500):
        right = chosen = 0
        for device, chunk in eval_batches(model, examples, batch_size):
            batch = self.make_batch(chunk).to(device)
            logits, targets = batch.loss_inputs(model)
            counted = targets != PAD
            right += int((logits.argmax(-1)[counted] == targets[counted]).sum())
            chosen += int(counted.sum())
        return right / chosen

    @torch.no_grad()
    def show(self, model, examples):
        """What the model sees ([MASK] as _) -> its guesses at the chosen characters
        (in brackets), and how many are right."""
        model.eval()
        device = next(model.parameters()).device
        lines = []
        for example in examples:
            batch = self.make_batch([example]).to(device)
            logits, targets = batch.loss_inputs(model)
            inputs, targets, guesses = batch.inputs[0, 1:], targets[0, 1:], logits[0, 1:].argmax(-1)
            seen = "".join("_" if i == MASK else self.vocab.decode([i]) for i in inputs.tolist())
            filled = "".join(f"[{self.vocab.decode([g])}]" if t != PAD else self.vocab.decode([i])
                             for i, t, g in zip(inputs.tolist(), targets.tolist(), guesses.tolist()))
            chosen = targets != PAD
            right = int((guesses[chosen] == targets[chosen]).sum())
            lines.append(f"{seen} -> {filled} ({right} of {int(chosen.sum())} right)")
        return lines


def cldr_names(language):
    """(item, name) pairs: what CLDR calls each item in ``language``, e.g. (("territory",
    "JP"), "Japon") in "fr". An item may have several names (plural forms, abbreviations)."""
    try:
        data = Locale.parse(language)._data
    except (UnknownLocaleError, ValueError):
        raise ValueError(f"unknown language {language!r}: use a CLDR code such as 'fr'") from None
    for category, key in (("language", "languages"), ("territory", "territories"),
                          ("script", "scripts"), ("variant", "variants"),
                          ("currency", "currency_names")):
        for item, name in data[key].items():
            yield (category, item), name
    for item, forms in data["currency_names_plural"].items():  # "dollars des États-Unis"
        for name in forms.values():
            yield ("currency", item), name
    for context in ("format", "stand-alone"):
        for width in ("wide", "abbreviated"):
            for category in ("months", "days"):
                for item, name in data[category][context][width].items():
                    yield (category, str(item)), name
    for item, widths in data["unit_patterns"].items():  # "{0} kilomètres par heure"
        for pattern in widths.get("long", {}).values():
            if isinstance(pattern, str):
                yield ("unit", item), pattern
    for item, names in data["meta_zones"].items():  # "heure normale d’Europe centrale"
        for name in names.get("long", {}).values():
            yield ("time zone", item), name


def _clean(text):
    """One form per text: Unicode NFC, without the "{0}" placeholder and soft hyphens, with
    no-break and other spaces as one plain space."""
    text = unicodedata.normalize("NFC", text).replace("{0}", "").replace("\u00ad", "")
    return re.sub(r"\s+", " ", text).strip()


def _names(languages):
    """{(language, casefolded name): (item, name)}: each language's names, the first of each."""
    names = {}
    for language in languages:
        for item, name in cldr_names(language):
            name = _clean(name)
            if len(name) > 1:
                names.setdefault((language, name.casefold()), (item, name))
    return names


def _item_splits(names, seed, held_out):
    """item -> "train", "val" or "test": the items shuffled with ``seed`` and cut."""
    items = sorted({item for item, _ in names.values()})
    random.Random(seed).shuffle(items)
    n = round(held_out * len(items))
    return {item: split for split, part in (("val", items[:n]), ("test", items[n:2 * n]),
                                            ("train", items[2 * n:])) for item in part}


def language_id_task(seed=0, languages=LANGUAGES, held_out=0.1):
    """Which language a short text is in, among ``languages``: pairs (text, language).

    The items (a country, a unit, a month ...) are shuffled with ``seed`` and cut: a
    ``held_out`` fraction for validation, as many for test, the rest for training; each item
    brings all its names in every language. A name is kept once per language (ignoring
    case) and dropped when another language has it too (ambiguous): every text appears
    once, so no held-out text is ever seen in training. The vocabulary is [CLS], [MASK] and
    the characters of the training texts; characters seen only in held-out texts become UNK.
    """
    if len(languages) < 2 or len(set(languages)) != len(languages):
        raise ValueError(f"languages must be two or more distinct codes, got {languages!r}")
    if not 0 < held_out < 0.5:
        raise ValueError(f"held_out must be in (0, 0.5), got {held_out}")
    names = _names(languages)
    speakers = Counter(folded for _, folded in names)  # how many languages have each name
    split_of = _item_splits(names, seed, held_out)
    pairs = {"train": [], "val": [], "test": []}
    for (language, folded), (item, name) in sorted(names.items()):
        if speakers[folded] == 1:  # so each text is in the data once, with one language
            pairs[split_of[item]].append((name, language))
    rng = random.Random(seed + 1)
    for split in pairs.values():
        rng.shuffle(split)
    characters = sorted({c for text, _ in pairs["train"] for c in text})
    vocab = Vocab([CLS_TOKEN, MASK_TOKEN, *characters])
    return ClassificationTask("classify", vocab, pairs["train"], pairs["val"], pairs["test"],
                              classes=tuple(languages))


# Languages no model of the course reads (not a class, not in pre-training), for
# unfamiliar_texts.
UNFAMILIAR_LANGUAGES = ("lt", "lv", "eu", "sq", "vi")


def unfamiliar_texts(seed=0, n=100):
    """What a user may give language_id_task(seed)'s classifier that is in none of its
    languages: ``n`` names of its *test* items in each of UNFAMILIAR_LANGUAGES (Lithuanian,
    Latvian, Basque, Albanian, Vietnamese: never seen in training or pre-training), those
    that are also a name in one of its languages left out, and ``n`` strings of random
    letters and spaces ("xqzvt kwpb"). Every answer on them is wrong: what the classifier's
    confidence must tell apart from its answers on its own test texts."""
    task = language_id_task(seed)
    rng = random.Random(seed + 3)
    split_of = _item_splits(_names(task.classes), seed, 0.1)
    known = set(_names(task.classes))
    known = {folded for _, folded in known}
    texts = []
    for language in UNFAMILIAR_LANGUAGES:
        names = sorted({name for (_, folded), (item, name) in _names([language]).items()
                        if split_of.get(item) == "test" and folded not in known})
        texts += rng.sample(names, min(n, len(names)))
    letters = "abcdefghijklmnopqrstuvwxyz"
    for _ in range(n):
        texts.append(" ".join("".join(rng.choices(letters, k=rng.randint(2, 8)))
                              for _ in range(rng.randint(1, 3))))
    return texts


# Unlabelled text for pre-training: CLDR's names in 14 more languages written in the Latin
# alphabet (none of them a class of language_id_task).
MLM_EXTRA_LANGUAGES = ("da", "nb", "ca", "ro", "cs", "fi", "hu", "id", "af", "gl", "sk", "sl",
                       "hr", "et")


def mlm_task(seed=0, extra_languages=MLM_EXTRA_LANGUAGES, **options):
    """BERT's pre-training texts, unlabelled, about 2.2 times language_id_task(seed)'s
    training set (30,267 texts for seed 0): its training texts, the names it leaves out as
    ambiguous ("Angola") and the names in ``extra_languages``, all of its *training* items
    only (a held-out item is held out of pre-training too, in every language, and so is
    every held-out text). Texts
    with a character outside language_id_task's vocabulary are left out, so that a model
    pre-trained here, then trained on language_id_task(seed), reads the same characters
    with the same ids. The validation and test texts are language_id_task's."""
    task = language_id_task(seed, **options)
    languages = options.get("languages", LANGUAGES)
    split_of = _item_splits(_names(languages), seed, options.get("held_out", 0.1))
    known = set(task.vocab.symbols)
    held = {text.casefold() for text, _ in (*task.val, *task.test)}  # another item's name too
    texts = {text for text, _ in task.train}
    for (_, folded), (item, name) in sorted(_names((*languages, *extra_languages)).items()):
        if split_of.get(item) == "train" and set(name) <= known and folded not in held:
            texts.add(name)
    train = sorted(texts)
    random.Random(seed + 2).shuffle(train)
    return MaskedLMTask("mlm", task.vocab, [(text, None) for text in train], task.val, task.test)


# ---------------------------------------------------------------- the Python source corpus

STDLIB = os.path.join(os.path.dirname(__file__), "texts", "python_stdlib")


@dataclass
class TextCorpus:
    """One long text per split (its files one after the other) and their character vocabulary."""

    name: str
    vocab: Vocab
    train: str
    val: str
    test: str
    files: dict  # split -> file names, in order
    documents: dict = field(default_factory=dict)  # split -> the files' texts, in order

    def ids(self, split, eos=False):
        """The split's text as ids, (n_ids,); with ``eos``, each file's ids followed by the
        end-of-text token (EOS), so that a model learns where a text ends."""
        if not eos:
            return torch.tensor(self.vocab.encode(getattr(self, split)), dtype=torch.long)
        ids = [i for text in self.documents[split] for i in (*self.vocab.encode(text), EOS)]
        return torch.tensor(ids, dtype=torch.long)


def stdlib_corpus(directory=STDLIB):
    """The shipped Python source corpus (see tfcourse/texts/python_stdlib/README.md)."""
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    texts, files = {"train": [], "val": [], "test": []}, {"train": [], "val": [], "test": []}
    for entry in manifest["files"]:
        with open(os.path.join(directory, entry["file"]), encoding="utf-8", newline="") as f:
            texts[entry["split"]].append(f.read())
        files[entry["split"]].append(entry["file"])
    joined = {split: "".join(parts) for split, parts in texts.items()}
    return TextCorpus(manifest["name"], Vocab.from_texts([joined["train"]]), **joined, files=files,
                      documents=texts)


# ---------------------------------------------------------------------- language modelling


class TextWindows(Sequence):
    """Windows of block_size + 1 ids of a text ``ids`` (n,): window i is
    ids[i * stride: i * stride + block_size + 1], the last one padded with PAD where the text
    runs out. Its first block_size ids are the model's input, its last block_size ids the
    targets (each the next character). stride=1: every full window (training draws from
    them); stride=block_size: consecutive windows in which every character after the first
    is a target exactly once, predicted from the earlier characters of its window
    (evaluation)."""

    def __init__(self, ids, block_size, stride=1):
        if not 1 <= block_size < len(ids):
            raise ValueError(f"block_size must be in [1, {len(ids)}) for a text of {len(ids)} "
                             f"characters, got {block_size}")
        if not 1 <= stride <= block_size:
            raise ValueError(f"stride must be in [1, block_size={block_size}], got {stride}")
        self.ids, self.block_size, self.stride = ids, block_size, stride
        self._len = -(-(len(ids) - 1 - block_size) // stride) + 1

    def __len__(self):
        return self._len

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(self._len)[i]]
        if not -self._len <= i < self._len:
            raise IndexError(f"window {i} of {self._len}")
        start = (i % self._len) * self.stride
        window = self.ids[start: start + self.block_size + 1]
        pad = self.block_size + 1 - len(window)
        return torch.cat((window, window.new_full((pad,), PAD))) if pad else window


@dataclass
class LMTask:
    """A language model on a TextCorpus, of characters (or of BPE tokens, chapter 11: the
    corpus's vocab is then a tfcourse.tokens.BPE): the examples are TextWindows (train: every
    window; val and test: consecutive ones). Judged by the held-out loss, the cross entropy in
    nats per character (per token; lower is better; log(vocabulary size) for a model that
    knows nothing, 0 for a perfect one); bits_per_byte compares either with the other."""

    name: str
    vocab: Vocab
    train: TextWindows
    val: TextWindows
    test: TextWindows
    metric = "loss (nats/char)"
    higher_is_better = False

    def make_batch(self, examples):
        return lm_batch(examples)

    def _summed_losses(self, model, examples, batch_size):
        """For each batch of ``examples``: its loss summed over the targets (nats), and the
        targets that count (not padding)."""
        for device, chunk in eval_batches(model, examples, batch_size):
            logits, targets = lm_batch(chunk).to(device).loss_inputs(model)
            nats = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(),
                                   ignore_index=PAD, reduction="sum").item()
            yield nats, targets[targets != PAD].cpu()

    @torch.no_grad()
    def evaluate(self, model, examples, batch_size=100):
        losses = list(self._summed_losses(model, examples, batch_size))
        return sum(n for n, _ in losses) / sum(len(t) for _, t in losses)

    @torch.no_grad()
    def bits_per_byte(self, model, examples, batch_size=100):
        """The loss over ``examples`` in bits per UTF-8 byte: summed over every target, in
        bits, divided by the bytes of the targets' texts. One unit for every vocabulary
        (characters, BPE tokens), where nats per token are per character or per token."""
        losses = list(self._summed_losses(model, examples, batch_size))
        n_bytes = self.text_bytes(torch.cat([t for _, t in losses]))
        return sum(n for n, _ in losses) / math.log(2) / n_bytes

    def text_bytes(self, ids):
        """The UTF-8 bytes of the text ``ids`` (a tensor) stand for: the end-of-text token
        (EOS, between files with lm_task's eos) stands for none."""
        n_bytes = torch.tensor([0 if i == EOS else len(self.vocab.token(i))
                                for i in range(len(self.vocab))])
        return int(n_bytes[ids].sum())

    @torch.no_grad()
    def loss_by_position(self, model, examples, batch_size=100):
        """The held-out loss (nats/char) at each position of the windows, (block_size,):
        position t predicts the window's character t + 1 from the t + 1 before it."""
        total = torch.zeros(self.train.block_size)
        count = torch.zeros(self.train.block_size)
        for device, chunk in eval_batches(model, examples, batch_size):
            batch = lm_batch(chunk).to(device)
            logits, targets = batch.loss_inputs(model)  # (batch, T, vocab), (batch, T)
            loss = F.cross_entropy(logits.transpose(1, 2).float(), targets, ignore_index=PAD,
                                   reduction="none")  # (batch, T)
            total += loss.sum(0).cpu()
            count += (targets != PAD).sum(0).cpu()
        return total / count

    def show(self, model, examples, prompt_chars=40, new_chars=60):
        """Each window's first prompt_chars characters -> the model's greedy continuation."""
        lines = []
        for window in examples:
            prompt = self.vocab.decode(window[:prompt_chars])
            lines.append(f"{prompt!r} -> {complete(model, self.vocab, prompt, new_chars)[0]!r}")
        return lines


def lm_task(seed=0, block_size=128, corpus=None, bpe_vocab=None, eos=False):
    """The language-model task on the shipped Python source (stdlib_corpus()), windows of
    ``block_size`` characters, or of ``block_size`` byte-level BPE tokens with ``bpe_vocab``
    (a vocabulary size: the tokenizer is trained on the training files, task "lm-bpe"). With
    ``eos`` every file ends with the end-of-text token (chapter 13: a model that learns where
    a text ends can stop; chapters 09-12's tasks run the files together).
    ``seed`` is unused (the corpus is fixed; the training loop's draws of windows come from
    TrainConfig.seed); it is there as every task has one."""
    corpus = corpus or stdlib_corpus()
    name = "lm"
    if bpe_vocab is not None:
        corpus, name = replace(corpus, vocab=train_bpe(corpus.train, bpe_vocab)), "lm-bpe"
    task = LMTask(name, corpus.vocab, TextWindows(corpus.ids("train", eos), block_size),
                  *(TextWindows(corpus.ids(split, eos), block_size, block_size)
                    for split in ("val", "test")))
    if bpe_vocab is not None:
        task.metric = "loss (nats/token)"
    return task
