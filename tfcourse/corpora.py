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

And the batches of the three objectives, each knowing how to feed its model:
``batch.loss_inputs(model) -> (logits, targets)``.
"""

import json
import os
import random
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

import torch
from babel import Locale, UnknownLocaleError

from tfcourse.data import PAD, SPECIALS, Task, Vocab, pad_sequences
from tfcourse.masks import padding_mask
from tfcourse.variants import mask_tokens

# ------------------------------------------------------------------- language identification

LANGUAGES = ("en", "de", "nl", "sv", "fr", "es", "pt", "it", "pl", "tr")
CLS_TOKEN, MASK_TOKEN = "<cls>", "<mask>"
CLS, MASK = len(SPECIALS), len(SPECIALS) + 1  # their ids: the first symbols of the vocabulary


@dataclass
class ClassificationTask(Task):
    """Pairs (text, class name); ``classes`` in the order of the model's outputs."""

    classes: tuple


def cldr_names(language):
    """(item, name) pairs: what CLDR calls each item in ``language``, e.g. (("territory",
    "JP"), "Japon") in "fr". An item may have several names (plural forms, abbreviations)."""
    try:
        data = Locale.parse(language)._data
    except (UnknownLocaleError, ValueError):
        raise ValueError(f"unknown language {language!r}: use a CLDR code such as 'fr'") from None
    for category, field in (("language", "languages"), ("territory", "territories"),
                            ("script", "scripts"), ("variant", "variants"),
                            ("currency", "currency_names")):
        for item, name in data[field].items():
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
    names = {}  # (language, casefolded name) -> (item, name): the first of each
    for language in languages:
        for item, name in cldr_names(language):
            name = _clean(name)
            if len(name) > 1:
                names.setdefault((language, name.casefold()), (item, name))
    speakers = Counter(folded for _, folded in names)  # how many languages have each name
    items = sorted({item for item, _ in names.values()})
    random.Random(seed).shuffle(items)
    n = round(held_out * len(items))
    split_of = {item: split for split, part in (("val", items[:n]), ("test", items[n:2 * n]),
                                                ("train", items[2 * n:])) for item in part}
    pairs = {"train": [], "val": [], "test": []}
    for (language, folded), (item, name) in sorted(names.items()):
        if speakers[folded] == 1:  # so each text is in the data once, with one language
            pairs[split_of[item]].append((name, language))
    rng = random.Random(seed + 1)
    for split in pairs.values():
        rng.shuffle(split)
    characters = sorted({c for text, _ in pairs["train"] for c in text})
    vocab = Vocab([CLS_TOKEN, MASK_TOKEN, *characters])
    return ClassificationTask("language_id", vocab, pairs["train"], pairs["val"], pairs["test"],
                              classes=tuple(languages))


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

    def ids(self, split):
        """The split's text as ids, (n_characters,)."""
        return torch.tensor(self.vocab.encode(getattr(self, split)), dtype=torch.long)


def stdlib_corpus(directory=STDLIB):
    """The shipped Python source corpus (see tfcourse/texts/python_stdlib/README.md)."""
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    texts, files = {"train": [], "val": [], "test": []}, {"train": [], "val": [], "test": []}
    for entry in manifest["files"]:
        with open(os.path.join(directory, entry["file"]), encoding="utf-8", newline="") as f:
            texts[entry["split"]].append(f.read())
        files[entry["split"]].append(entry["file"])
    texts = {split: "".join(parts) for split, parts in texts.items()}
    return TextCorpus(manifest["name"], Vocab.from_texts([texts["train"]]), **texts, files=files)


# ------------------------------------------------------------------------------- batches


def _to(batch, device):
    return type(batch)(*(getattr(batch, f).to(device) for f in batch.__dataclass_fields__))


@dataclass
class ClassificationBatch:
    """tokens (batch, seq): [CLS] + text, right-padded; mask (batch, 1, 1, seq), True = not
    padding; labels (batch,) class indices. Every label counts, class 0 too: a loss that
    ignores PAD targets must not be given labels."""

    tokens: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor

    to = _to

    @property
    def n_targets(self):
        return self.labels.numel()

    def loss_inputs(self, model):
        return model(self.tokens, self.mask), self.labels  # (batch, n_classes), (batch,)


def encode_texts(texts, vocab):
    """Texts -> [CLS] + their characters' ids, padded: (batch, seq), and its padding mask."""
    tokens = pad_sequences([[CLS, *vocab.encode(t)] for t in texts])
    return tokens, padding_mask(tokens, PAD)


def classification_batch(pairs, vocab, classes):
    """Pairs (text, class name) -> ClassificationBatch."""
    tokens, mask = encode_texts([t for t, _ in pairs], vocab)
    index = {c: i for i, c in enumerate(classes)}
    return ClassificationBatch(tokens, mask, torch.tensor([index[c] for _, c in pairs]))


@dataclass
class MaskedLMBatch:
    """inputs (batch, seq): [CLS] + text after mask_tokens; mask (batch, 1, 1, seq); targets
    (batch, seq): the original tokens at the chosen positions, PAD elsewhere (not counted)."""

    inputs: torch.Tensor
    mask: torch.Tensor
    targets: torch.Tensor

    to = _to

    @property
    def n_targets(self):
        return int((self.targets != PAD).sum())

    def loss_inputs(self, model):
        return model(self.inputs, self.mask, mlm=True), self.targets  # (b, seq, V), (b, seq)


def masked_lm_batch(texts, vocab, generator=None, rate=0.15):
    """Texts -> MaskedLMBatch: ``rate`` of the characters chosen, of those 80% [MASK],
    10% a random character, 10% unchanged (mask_tokens); [CLS], UNK and padding never."""
    tokens, mask = encode_texts(texts, vocab)
    specials = range(len(SPECIALS) + 2)  # PAD, BOS, EOS, UNK, [CLS], [MASK]
    inputs, targets = mask_tokens(tokens, MASK, specials, len(vocab), rate, generator)
    return MaskedLMBatch(inputs, mask, targets)


@dataclass
class LMBatch:
    """inputs (batch, block) and targets (batch, block): the same text shifted by one, so that
    targets[:, t] = inputs[:, t + 1] is the next character. PAD targets do not count."""

    inputs: torch.Tensor
    targets: torch.Tensor

    to = _to

    @property
    def n_targets(self):
        return int((self.targets != PAD).sum())

    def loss_inputs(self, model):
        return model(self.inputs), self.targets  # (batch, block, V), (batch, block)


def lm_batch(ids, block_size, batch_size, generator=None):
    """``batch_size`` windows of ``block_size`` + 1 characters from random places of ``ids``
    (n,) -> LMBatch: every position of every window is a prediction to learn from."""
    if not 1 <= block_size < len(ids):
        raise ValueError(f"block_size must be in [1, {len(ids)}) for a text of {len(ids)} "
                         f"characters, got {block_size}")
    starts = torch.randint(len(ids) - block_size, (batch_size,), generator=generator)
    windows = ids[starts[:, None] + torch.arange(block_size + 1)]  # (batch, block + 1)
    return LMBatch(windows[:, :-1], windows[:, 1:])


def lm_eval_batches(ids, block_size, batch_size):
    """The whole of ``ids`` (n,) in consecutive windows, as LMBatches: each character after
    the first is a target exactly once, predicted from the earlier characters of its window
    (the first of a window from none). The last window is padded."""
    n = len(ids) - 1  # targets
    windows = -(-n // block_size)
    inputs = torch.full((windows * block_size,), PAD, dtype=torch.long)
    targets = torch.full((windows * block_size,), PAD, dtype=torch.long)
    inputs[:n], targets[:n] = ids[:-1], ids[1:]
    inputs, targets = inputs.view(windows, block_size), targets.view(windows, block_size)
    for i in range(0, windows, batch_size):
        yield LMBatch(inputs[i:i + batch_size], targets[i:i + batch_size])
