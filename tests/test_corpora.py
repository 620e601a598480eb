import glob
import hashlib
import json
import math
import os
from collections import Counter

import pytest
import tomllib
import torch

import tfcourse
from tfcourse.batches import (
    ClassificationBatch,
    LMBatch,
    MaskedLMBatch,
    classification_batch,
    lm_batch,
    masked_lm_batch,
)
from tfcourse.corpora import (
    LANGUAGES,
    STDLIB,
    TextWindows,
    _clean,
    cldr_names,
    language_id_task,
    lm_task,
    mlm_task,
    stdlib_corpus,
    unfamiliar_texts,
)
from tfcourse.decoding import lm_generate, sampler
from tfcourse.inference import classify, complete
from tfcourse.variants import DecoderLM, DecoderLMConfig, EncoderClassifier, EncoderClassifierConfig
from tfcourse.vocab import CLS, CLS_TOKEN, MASK, MASK_TOKEN, PAD, UNK

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def task():
    return language_id_task(seed=0)


@pytest.fixture(scope="module")
def corpus():
    return stdlib_corpus()


# ---------------------------------------------------------------- language identification


def test_language_id_splits_and_class_balance(task):
    assert task.name == "classify" and task.classes == LANGUAGES
    sizes = {split: len(getattr(task, split)) for split in ("train", "val", "test")}
    assert 12_000 < sizes["train"] < 16_000 and 1_300 < sizes["val"] < 2_000
    assert 1_300 < sizes["test"] < 2_000
    for split in ("train", "val", "test"):
        counts = Counter(language for _, language in getattr(task, split))
        assert set(counts) == set(LANGUAGES)
        share = [counts[lang] / sizes[split] for lang in LANGUAGES]
        assert 0.06 < min(share) and max(share) < 0.17, (split, counts)  # chance is 10%


def test_every_text_once_with_one_language_and_held_out_items_unseen(task):
    every = [(t.casefold(), lang) for split in (task.train, task.val, task.test) for t, lang in split]
    assert len({t for t, _ in every}) == len(every)  # no text twice, in any split or language
    item_of = {}
    for language in LANGUAGES:
        for item, name in cldr_names(language):
            item_of.setdefault((language, _clean(name).casefold()), item)
    items = {split: {item_of[(lang, t.casefold())] for t, lang in getattr(task, split)}
             for split in ("train", "val", "test")}
    assert not items["train"] & items["val"] and not items["train"] & items["test"]
    assert not items["val"] & items["test"]
    texts = {t for t, _ in task.train + task.val + task.test}
    assert "August" not in texts and "Angola" not in texts  # in several languages: dropped
    pairs = set(task.train + task.val + task.test)
    assert ("Mitteleuropäische Sommerzeit", "de") in pairs
    assert ("dolarów amerykańskich", "pl") in pairs
    assert all(1 < len(t) == len(t.strip()) and "{0}" not in t and "\u00a0" not in t
               for t in texts)


def test_language_id_is_deterministic(task):
    again = language_id_task(seed=0)
    assert again.train == task.train and again.test == task.test and again.vocab == task.vocab
    other = language_id_task(seed=1)
    assert set(other.test) != set(task.test)
    three = language_id_task(languages=("fr", "es", "it"))
    assert {lang for _, lang in three.train} == {"fr", "es", "it"}


def test_unfamiliar_texts_are_in_none_of_the_languages(task):
    """Names of test items in five other languages and random letters: none is a name in one
    of the classifier's languages (so every answer on them is wrong), none is seen in
    training or pre-training, the same for the same seed."""
    texts = unfamiliar_texts(seed=0)
    assert len(texts) == 600 and texts == unfamiliar_texts(seed=0)
    ours = {_clean(name).casefold() for language in LANGUAGES for _, name in cldr_names(language)}
    assert not {t.casefold() for t in texts} & ours
    assert not set(texts) & {t for t, _ in mlm_task(seed=0).train}
    assert "Francijas Polinēzija" in texts  # Latvian


def test_language_id_vocabulary(task):
    assert task.vocab.itos[CLS] == CLS_TOKEN and task.vocab.itos[MASK] == MASK_TOKEN
    assert set(task.vocab.symbols[2:]) == {c for t, _ in task.train for c in t}
    assert "ł" in task.vocab.stoi and "ß" in task.vocab.stoi and "ğ" in task.vocab.stoi
    unknown = sum(c not in task.vocab.stoi for t, _ in task.val + task.test for c in t)
    assert unknown < 10


def test_language_id_errors():
    with pytest.raises(ValueError, match="unknown language 'xx'"):
        language_id_task(languages=("en", "xx"))
    with pytest.raises(ValueError, match="two or more distinct codes"):
        language_id_task(languages=("en", "en"))
    with pytest.raises(ValueError, match=r"held_out must be in \(0, 0.5\), got 0.5"):
        language_id_task(held_out=0.5)


def test_classification_batch(task):
    pairs = [("Nederland", "nl"), ("noc", "pl")]
    batch = classification_batch(pairs, task.vocab, task.classes)
    assert isinstance(batch, ClassificationBatch)
    v = task.vocab
    assert batch.tokens.tolist() == [[CLS, *v.encode("Nederland")],
                                     [CLS, *v.encode("noc"), *[PAD] * 6]]
    assert batch.mask.shape == (2, 1, 1, 10) and batch.mask.sum().item() == 10 + 4
    assert batch.labels.tolist() == [LANGUAGES.index("nl"), LANGUAGES.index("pl")]
    assert batch.n_targets == 2
    torch.manual_seed(0)
    model = EncoderClassifier(EncoderClassifierConfig.tiny(len(v), len(task.classes)))
    logits, targets = batch.to("cpu").loss_inputs(model.eval())
    assert logits.shape == (2, 10) and targets is batch.labels
    torch.testing.assert_close(logits, model(batch.tokens, batch.mask))


def test_masked_lm_batch_never_masks_cls_padding_or_unknown(task):
    texts = [t for t, _ in task.train[:500]] + ["?x" * 20]
    batch = masked_lm_batch(texts, task.vocab, torch.Generator().manual_seed(0))
    assert isinstance(batch, MaskedLMBatch)
    chosen = batch.targets != PAD
    tokens = classification_batch([(t, "en") for t in texts], task.vocab, task.classes).tokens
    assert not chosen[:, 0].any() and not chosen[tokens == PAD].any()
    assert not chosen[tokens == UNK].any()
    assert torch.equal(batch.targets[chosen], tokens[chosen])
    assert batch.n_targets == chosen.sum().item()
    assert 0.13 < batch.n_targets / ((tokens > MASK).sum().item()) < 0.2
    again = masked_lm_batch(texts, task.vocab, torch.Generator().manual_seed(0))
    assert torch.equal(again.inputs, batch.inputs)
    model = EncoderClassifier(EncoderClassifierConfig.tiny(len(task.vocab), 10)).eval()
    logits, targets = batch.loss_inputs(model)
    assert logits.shape == (*tokens.shape, len(task.vocab)) and targets is batch.targets


# ----------------------------------------------------------------------- the stdlib corpus


def test_shipped_corpus_is_the_recorded_snapshot():
    with open(os.path.join(STDLIB, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["source"] == "CPython 3.11.7, Lib/"
    for entry in manifest["files"]:
        with open(os.path.join(STDLIB, entry["file"]), "rb") as f:
            data = f.read()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["bytes"], entry["sha256"])
    names = {e["file"] for e in manifest["files"]}
    assert set(os.listdir(STDLIB)) == names | {"manifest.json", "README.md", "LICENSE.txt"}
    with open(os.path.join(STDLIB, "LICENSE.txt")) as f:
        assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in f.read()
    assert manifest["bytes"] == {"train": 969_494, "val": 48_385, "test": 48_021}


def test_stdlib_corpus_splits_by_file(corpus):
    assert corpus.name == "python_stdlib"
    assert not set(corpus.files["train"]) & (set(corpus.files["val"]) | set(corpus.files["test"]))
    assert corpus.files["val"] == ["fractions.py.txt", "textwrap.py.txt"]
    assert corpus.files["test"] == ["heapq.py.txt", "queue.py.txt", "shlex.py.txt"]
    assert corpus.val.startswith("# Originally contributed by Sjoerd Mullender.")
    assert "class TextWrapper:" in corpus.val and "class TextWrapper:" not in corpus.train
    assert len(corpus.train) == 969_491  # characters (a few are two or three UTF-8 bytes)


def test_stdlib_vocabulary_and_ids(corpus):
    assert len(corpus.vocab) == 102  # 4 specials, printable ASCII, newline, "Ł" and "–"
    ids = corpus.ids("val")
    assert ids.dtype == torch.long and ids.shape == (len(corpus.val),)
    assert corpus.vocab.decode(ids[:200]) == corpus.val[:200]
    assert (ids == UNK).sum().item() == 5  # "±" is not in the training text
    assert (corpus.ids("test") == UNK).sum().item() == 63  # the Latin-1 letters in shlex
    assert not ((ids == PAD) | (ids == 1) | (ids == 2)).any()


def test_windows_targets_are_the_next_characters(corpus):
    ids = corpus.ids("val")
    windows = TextWindows(ids, 32)
    assert len(windows) == len(ids) - 32  # every full window
    assert torch.equal(windows[5], ids[5:38]) and torch.equal(windows[-1], ids[-33:])
    batch = lm_batch(windows[100:108])
    assert isinstance(batch, LMBatch) and batch.inputs.shape == batch.targets.shape == (8, 32)
    assert torch.equal(batch.inputs[:, 1:], batch.targets[:, :-1])
    assert batch.n_targets == 8 * 32 and batch.pad_id == PAD
    text = corpus.vocab.decode(torch.cat((batch.inputs[0], batch.targets[0, -1:])))
    assert text in corpus.val
    with pytest.raises(ValueError, match=r"block_size must be in \[1, 10\)"):
        TextWindows(ids[:10], 10)
    with pytest.raises(IndexError):
        windows[len(windows)]
    torch.manual_seed(0)
    model = DecoderLM(DecoderLMConfig.tiny(len(corpus.vocab))).eval()
    logits, targets = batch.loss_inputs(model)
    assert logits.shape == (8, 32, 102) and targets is batch.targets


def test_consecutive_windows_predict_every_character_once(corpus):
    ids = corpus.ids("test")[:1000]
    windows = TextWindows(ids, 64, stride=64)
    assert len(windows) == 16  # 999 targets: 15 full windows and one of 39
    batch = lm_batch(windows[:])
    assert torch.equal(batch.targets[batch.targets != PAD], ids[1:])
    assert torch.equal(batch.inputs.flatten()[:999], ids[:-1])
    assert batch.n_targets == 999 and (batch.targets[-1] != PAD).sum() == 39


def test_lm_task_is_judged_by_held_out_nats_per_character(corpus):
    task = lm_task(corpus=corpus)
    assert (task.name, task.metric, task.higher_is_better) == ("lm", "loss (nats/char)", False)
    assert task.vocab == corpus.vocab and task.train.block_size == 128
    assert sum(lm_batch([w]).n_targets for w in task.val) == len(corpus.val) - 1
    torch.manual_seed(0)
    model = DecoderLM(DecoderLMConfig.tiny(len(corpus.vocab)))
    loss = task.evaluate(model, task.val[:20])
    batch = lm_batch(task.val[:20])
    logits = model(batch.inputs)
    want = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())
    assert loss == pytest.approx(want.item(), rel=1e-5)
    assert abs(loss - math.log(len(corpus.vocab))) < 0.5  # untrained: about uniform
    assert not model.training  # evaluated in eval mode
    line, = task.show(model, task.test[:1])
    assert line.startswith(repr(corpus.test[:40]) + " -> '")
    # the loss at each position, (128,): position t scored against every window's t + 1
    by_position = task.loss_by_position(model, task.val[:20])
    per_target = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.targets,
                                                   reduction="none")  # (20, 128)
    torch.testing.assert_close(by_position, per_target.mean(0).detach(), rtol=1e-5, atol=1e-5)
    assert by_position.mean().item() == pytest.approx(loss, rel=1e-5)  # full windows: equal weights


def test_complete_greedy_and_seeded_draws(corpus):
    torch.manual_seed(0)
    model = DecoderLM(DecoderLMConfig.tiny(len(corpus.vocab)))
    vocab = corpus.vocab
    greedy, = complete(model, vocab, "def f(x):", 20)
    assert len(greedy) == 20 and complete(model, vocab, "def f(x):", 20, top_k=1) == [greedy]
    draws = complete(model, vocab, "def", 30, temperature=1.5, samples=3, seed=1)
    assert len(draws) == 3 and len(set(draws)) == 3  # three different draws
    assert complete(model, vocab, "def", 30, temperature=1.5, samples=3, seed=1) == draws
    ids = torch.tensor([vocab.encode("def")])
    steps = lm_generate(model, ids, 30, sampler(1.5, generator=torch.Generator().manual_seed(1)))
    one, = complete(model, vocab, "def", 30, temperature=1.5, seed=1)
    assert vocab.decode(steps[0, 3:]) == one  # the text helper is lm_generate's loop
    with pytest.raises(ValueError, match="the prompt is empty"):
        complete(model, vocab, "", 5)


def test_classification_task_accuracy_and_show(task):
    torch.manual_seed(0)
    model = EncoderClassifier(EncoderClassifierConfig.tiny(len(task.vocab), 10))
    examples = task.val[:50]
    guesses = classify(model, [t for t, _ in examples], task.vocab, task.classes)
    assert all(g in LANGUAGES and 0.1 <= p <= 1 for g, p in guesses)
    batch = task.make_batch(examples)
    want = model.eval()(batch.tokens, batch.mask).argmax(-1)
    assert [LANGUAGES.index(g) for g, _ in guesses] == want.tolist()
    right = (want == batch.labels).float().mean().item()
    assert task.evaluate(model, examples) == pytest.approx(right)
    assert (task.metric, task.higher_is_better) == ("accuracy", True)
    lines = task.show(model, examples[:3])
    assert lines[0].startswith(f"{examples[0][0]} -> {guesses[0][0]} (p = ")


def test_mlm_task_same_texts_masks_repeat_and_masked_accuracy(task):
    mlm = mlm_task(seed=0)
    assert mlm.name == "mlm" and mlm.vocab == task.vocab and mlm.val == task.val
    examples = mlm.val[:40]
    batch = mlm.make_batch(examples)
    assert isinstance(batch, MaskedLMBatch) and batch.pad_id == PAD
    assert torch.equal(mlm.make_batch(examples).inputs, batch.inputs)  # the same masks
    assert not torch.equal(mlm.make_batch(examples[1:] + examples[:1]).targets, batch.targets)
    torch.manual_seed(0)
    model = EncoderClassifier(EncoderClassifierConfig.tiny(len(task.vocab), 10))
    logits = model.eval()(batch.inputs, batch.mask, mlm=True)
    chosen = batch.targets != PAD
    right = (logits.argmax(-1)[chosen] == batch.targets[chosen]).float().mean().item()
    assert mlm.evaluate(model, examples) == pytest.approx(right)
    line, = mlm.show(model, examples[:1])
    assert line.endswith(f"of {int(chosen[0].sum())} right)") and "[" in line


# ------------------------------------------------------------------------------ packaging


def test_shipped_files_are_package_data():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        patterns = tomllib.load(f)["tool"]["setuptools"]["package-data"]["tfcourse"]
    package = os.path.dirname(tfcourse.__file__)
    shipped = {p for pattern in patterns for p in glob.glob(pattern, root_dir=package)}
    texts = glob.glob("texts/**/*", root_dir=package, recursive=True)
    files = {p for p in texts if os.path.isfile(os.path.join(package, p))}
    assert files and files <= shipped
