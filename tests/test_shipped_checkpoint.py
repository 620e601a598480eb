"""The checkpoints shipped in the package (dates; chapter 09's classify and lm): their held-out
metric, and that the command stated in README.md makes each again from scratch."""

import hashlib
import os

import pytest
import torch

from tfcourse.checkpoint import load_checkpoint
from tfcourse.cli import (
    CHECKPOINTS,
    CLASSIFY_CHECKPOINT,
    DATES_CHECKPOINT,
    LM_CHECKPOINT,
    MLM_CHECKPOINT,
    main,
)
from tfcourse.corpora import unfamiliar_texts
from tfcourse.data import dates_task, unfamiliar_dates
from tfcourse.inference import NOT_SURE, auroc, classify, complete, exact_match, output_confidence, predict
from tfcourse.model import TransformerConfig
from tfcourse.modern import LlamaConfig
from tfcourse.recipes import RECIPES
from tfcourse.training import TrainConfig

GOAL = 0.98  # held-out exact match (issue 4)
GOAL_CLASSIFY = 0.83  # held-out accuracy of language identification (10 languages; shipped: 0.850)
GOAL_LM = 1.55  # held-out nats per character of Python source (shipped: 1.477; 6-gram: 1.60)
GOAL_MLM = 0.37  # held-out masked accuracy of the pre-trained encoder (shipped: 0.387)


def _settings(saved):
    """A checkpoint's training settings, with the fields added since it was saved at their
    defaults (which train as before)."""
    return TrainConfig(**saved).__dict__


@pytest.fixture(scope="module")
def task():
    return dates_task(seed=0)


def test_shipped_checkpoint_is_small_and_plain():
    assert os.path.getsize(DATES_CHECKPOINT) < 2 * 2**20
    state = torch.load(DATES_CHECKPOINT, weights_only=True)
    # made by `tfcourse train --task dates --seed 0`: the task's recipe, nothing else
    expected = RECIPES["dates"].train_config(seed=0)
    assert _settings(state["train_config"]) == {**expected.__dict__, "amp": state["train_config"]["amp"]}
    assert state["task"] == "dates" and state["kind"] == "seq2seq"
    assert state["step"] == expected.steps


def test_shipped_checkpoint_accuracy(task):
    model, vocab, _ = load_checkpoint(DATES_CHECKPOINT)
    assert vocab == task.vocab
    assert exact_match(model, task.test, vocab) >= GOAL
    texts = ["samedi 21 novembre 2026", "November 21, 2026", "21 nov. 2026"]
    assert predict(model, texts, vocab) == ["2026-11-21"] * 3


def test_decode_confidence_tells_right_from_wrong(task):
    """`tfcourse decode`'s confidence (the weakest character's probability) on the held-out
    test dates and on what a user may type that training never showed (other languages and
    formats, nonsense): AUROC >= 0.9 (issue 18), and 'not sure' (below NOT_SURE) flags most
    wrong outputs and few right ones."""
    model, vocab, _ = load_checkpoint(DATES_CHECKPOINT)
    pairs = task.test + unfamiliar_dates()
    outputs = predict(model, [s for s, _ in pairs], vocab)
    right = [o == t for o, (_, t) in zip(outputs, pairs, strict=True)]
    confidence = output_confidence(model, list(zip([s for s, _ in pairs], outputs)), vocab)
    assert auroc(confidence, right) >= 0.95  # measured: 0.986
    flagged = [c < NOT_SURE["seq2seq"] for c in confidence]
    wrong = len(right) - sum(right)
    assert sum(f for f, r in zip(flagged, right) if not r) >= 0.9 * wrong  # measured: 257 of 269
    assert sum(f for f, r in zip(flagged, right) if r) <= 0.03 * sum(right)  # measured: 32 of 2,151


def test_stated_command_makes_it_again(tmp_path, capsys):
    out = tmp_path / "dates.pt"
    assert main(["train", "--task", "dates", "--seed", "0", "--out", str(out),
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    print(printed)  # shown with -s: the accuracy and the examples
    model, vocab, state = load_checkpoint(out)
    task = dates_task(seed=0)
    assert exact_match(model, task.test, vocab) >= GOAL
    shipped = torch.load(DATES_CHECKPOINT, weights_only=True)
    assert _settings(state["train_config"]) == _settings(shipped["train_config"])
    # the same model: fields added since (with their defaults) do not count
    assert TransformerConfig(**state["model_config"]) == TransformerConfig(**shipped["model_config"])


# ---------------------------------------------------- chapter 09: language ID and the Python LM

# task -> (shipped file, held-out test metric it must reach: accuracy at least, loss at most)
CHAPTER_9 = {"classify": (CLASSIFY_CHECKPOINT, GOAL_CLASSIFY), "lm": (LM_CHECKPOINT, GOAL_LM),
             "mlm": (MLM_CHECKPOINT, GOAL_MLM)}
# What each is made by, besides `tfcourse train --task NAME --seed 0`: the classifier is
# fine-tuned from the pre-trained encoder mlm.pt (4000 steps; from scratch 300 steps reach
# 68%). Retraining the encoder (2000 steps) or the classifier (4000): 2.5-5 minutes each; the
# LM (6,000 steps): 15-20 minutes on a quiet machine, more on a busy one. Only with --slow,
# each under its own time limit (the suite's 600 s per test would stop the LM's).
OPTIONS = {"classify": dict(init=MLM_CHECKPOINT, steps=4000)}
RETRAIN_LIMIT = {"classify": 1800, "mlm": 1800, "lm": 5400}  # seconds
RETRAIN = [pytest.param(name, marks=[pytest.mark.slow, pytest.mark.timeout(RETRAIN_LIMIT[name])])
           for name in CHAPTER_9]
SIZE_LIMIT = {"classify": 2**20, "mlm": 2**20, "lm": 4 * 2**20}  # bytes (lm: 0.8M float32 parameters)


def _sha256(path):
    with open(path, "rb") as file:
        return hashlib.sha256(file.read()).hexdigest()


def _reaches(task, value, goal):
    return value >= goal if task.higher_is_better else value <= goal


@pytest.mark.parametrize("name", CHAPTER_9)
def test_chapter_9_checkpoint_is_small_and_reaches_its_goal(name):
    path, goal = CHAPTER_9[name]
    assert os.path.getsize(path) < SIZE_LIMIT[name]
    model, vocab, state = load_checkpoint(path)
    options = OPTIONS.get(name, {})
    expected = RECIPES[name].train_config(seed=0, **{k: v for k, v in options.items() if k != "init"})
    assert _settings(state["train_config"]) == {**expected.__dict__, "amp": state["train_config"]["amp"]}
    assert state["task"] == name and state["step"] == expected.steps and "optimizer" not in state
    if "init" in options:  # started from the shipped file, as it is now
        assert state["init"]["sha256"] == _sha256(options["init"])
    else:
        assert not state.get("init")
    task = RECIPES[name].make_task(seed=0)
    assert vocab == task.vocab
    assert _reaches(task, task.evaluate(model, task.test), goal)


def test_classify_confidence_tells_right_from_wrong():
    """`tfcourse classify`'s confidence (the class's probability) on the held-out test texts
    and on texts in none of its languages (corpora.unfamiliar_texts: five other languages,
    random letters; every answer on them wrong): AUROC >= 0.9 (issue 18), and 'not sure'
    (below NOT_SURE, chosen on validation) flags most wrong answers and few right ones."""
    model, vocab, state = load_checkpoint(CLASSIFY_CHECKPOINT)
    task = RECIPES["classify"].make_task(seed=0)
    odd = unfamiliar_texts(seed=0)
    guesses = classify(model, [t for t, _ in task.test] + odd, vocab, state["classes"])
    right = [g == c for (g, _), (_, c) in zip(guesses, task.test)] + [False] * len(odd)
    confidence = [p for _, p in guesses]
    assert auroc(confidence, right) >= 0.89  # measured: 0.903 (the from-scratch 300 steps: 0.79)
    n = len(task.test)
    flagged = [p < NOT_SURE["classifier"] for p in confidence]
    wrong = n - sum(right)
    assert sum(f for f, r in zip(flagged[:n], right) if not r) >= 0.55 * wrong  # measured: 148 of 234
    assert sum(f for f, r in zip(flagged[:n], right) if r) <= 0.10 * sum(right)  # measured: 92 of 1,321
    assert sum(flagged[n:]) >= 0.4 * len(odd)  # measured: 343 of 600


def test_lm_reads_only_trained_positions():
    """The LM has as many positions as its training windows (so sampling never reads an
    untrained one: past them, a sliding window) and its held-out loss at the last positions
    is no worse than at the first (within 10%): each position trained as much."""
    model, _, _ = load_checkpoint(LM_CHECKPOINT)
    task = RECIPES["lm"].make_task(seed=0)
    assert model.config.max_len == task.train.block_size
    loss = task.loss_by_position(model, task.test)
    quarter = len(loss) // 4
    assert loss[-quarter:].mean() <= 1.1 * loss[:quarter].mean()


def test_shipped_classifier_and_lm_in_use():
    model, vocab, state = load_checkpoint(CLASSIFY_CHECKPOINT)
    texts = ["Mitteleuropäische Sommerzeit", "dolarów amerykańskich", "heure normale du Japon"]
    assert [g for g, _ in classify(model, texts, vocab, state["classes"])] == ["de", "pl", "fr"]
    model, vocab, _ = load_checkpoint(LM_CHECKPOINT)
    text, = complete(model, vocab, "    def __init__(self", 40)
    assert text.startswith(")") or text.startswith(",")  # it knows Python's shape


@pytest.mark.parametrize("name", RETRAIN)
def test_chapter_9_stated_command_makes_it_again(name, tmp_path, capsys):
    path, goal = CHAPTER_9[name]
    out = tmp_path / f"{name}.pt"
    options = [f"--{k}={v}" for k, v in OPTIONS.get(name, {}).items()]
    assert main(["train", "--task", name, *options, "--seed", "0", "--out", str(out),
                 "--no-progress"]) == 0
    print(capsys.readouterr().out)  # shown with -s: the metric and the examples
    model, vocab, state = load_checkpoint(out)
    task = RECIPES[name].make_task(seed=0)
    assert _reaches(task, task.evaluate(model, task.test), goal)
    shipped = torch.load(path, weights_only=True)
    assert _settings(state["train_config"]) == _settings(shipped["train_config"])
    assert state["model_config"] == shipped["model_config"]
    assert state["init"].get("sha256") == shipped.get("init", {}).get("sha256")


# ------------------------------------------- chapter 13: the small LM, trained to its schedule's end

LLM_CHECKPOINT = os.path.join(CHECKPOINTS, "llm.pt")
# Held-out test bits per byte of the shipped llm.pt (README's figure) and what it must beat:
# the strongest baseline, chapter 09's lm.pt (2.120; the best n-grams: 2.194 over the same
# BPE tokens, 2.296 over characters; benchmarks/llm.json).
LLM_BPB = 2.0882
LLM_BEATS = 2.120


def _llm_settings(train_config):
    """The recipe's training settings and the seed, as a checkpoint records them (fields
    added to TrainConfig later, with their defaults, do not count)."""
    return {k: train_config[k] for k in (*RECIPES["llm"].train, "seed")}


def _llm_bits_per_byte(model):
    task = RECIPES["llm"].make_task(seed=0)
    return task.bits_per_byte(model, task.test)


def test_llm_checkpoint_carries_its_tokenizer_and_beats_the_baselines():
    assert os.path.getsize(LLM_CHECKPOINT) < 4 * 2**20
    model, vocab, state = load_checkpoint(LLM_CHECKPOINT)
    # made by `tfcourse train --task llm --seed 0`: the recipe, to the end of its schedule
    expected = RECIPES["llm"].train_config(seed=0)
    assert _llm_settings(state["train_config"]) == _llm_settings(expected.__dict__)
    assert state["task"] == "llm" and state["step"] == expected.steps and "optimizer" not in state
    assert state["history"]["lr"][-1] == pytest.approx(expected.lr * expected.min_lr_ratio, rel=1e-3)
    assert vocab == RECIPES["llm"].make_task(seed=0).vocab  # its BPE, not a character vocabulary
    assert len(vocab) == 1024 and vocab.decode(vocab.encode("    return x\n")) == "    return x\n"
    # saved before LlamaConfig had head_dim: read as d_model / n_heads, as it was trained
    assert model.config.head_dim == 32 and model.layers[0].self_attn.w_q.weight.shape == (128, 128)
    bpb = _llm_bits_per_byte(model)
    assert bpb == pytest.approx(LLM_BPB, abs=5e-4)
    assert bpb < LLM_BEATS


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_llm_stated_command_makes_it_again(tmp_path, capsys):
    """`tfcourse train --task llm --seed 0 --threads 1` (README): about 5 CPU minutes on one
    thread; the held-out figure the README states, to 0.01 bits per byte (on another CPU
    the float rounding of 1,500 steps differs)."""
    out = tmp_path / "llm.pt"
    assert main(["train", "--task", "llm", "--seed", "0", "--threads", "1", "--out", str(out),
                 "--no-progress"]) == 0
    print(capsys.readouterr().out)
    model, _, state = load_checkpoint(out)
    shipped = torch.load(LLM_CHECKPOINT, weights_only=True)
    assert _llm_settings(state["train_config"]) == _llm_settings(shipped["train_config"])
    # the same model: fields added since (with their defaults) do not count
    assert LlamaConfig(**state["model_config"]) == LlamaConfig(**shipped["model_config"])
    assert state["tokenizer"] == shipped["tokenizer"]
    assert _llm_bits_per_byte(model) == pytest.approx(LLM_BPB, abs=0.01)
