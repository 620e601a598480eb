"""Chapter 13's model: the recipe "llm" (byte-level BPE, Llama's block, today's training
recipe) as `tfcourse train --task llm` builds it, and the command line training it. The
shipped checkpoint and its payoff are in test_shipped_checkpoint.py."""

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from tfcourse import checkpoint, cli
from tfcourse.baselines import NGramLM
from tfcourse.corpora import TextCorpus, lm_task, stdlib_corpus
from tfcourse.modern import LlamaLM
from tfcourse.recipes import build
from tfcourse.schedules import cosine_lr
from tfcourse.tokens import BPE
from tfcourse.vocab import EOS, Vocab


def test_the_llm_recipe_assembles_chapters_11_and_12_with_todays_recipe():
    task, model, config = build("llm")
    assert task.name == "llm" and isinstance(task.vocab, BPE) and len(task.vocab) == 1024
    assert task.metric == "loss (nats/token)" and task.train.block_size == 64
    assert type(model) is LlamaLM and model.config.vocab_size == 1024
    assert sum(p.numel() for p in model.parameters()) == 869_504
    assert (config.optimizer, config.beta2, config.weight_decay, config.clip) == ("adamw", 0.95, 0.1, 1.0)
    assert (config.schedule, config.min_lr_ratio) == ("cosine", 0.1)
    # trained past its warm-up to the end of its schedule: the last step at the floor
    assert config.warmup < config.steps
    assert cosine_lr(config.steps, config.warmup, config.steps, config.min_lr_ratio) == 0.1


def test_the_llm_task_ends_every_file_with_the_end_of_text_token():
    """The files are documents: each ends with EOS, so the model learns where a text ends
    (chapters 09-12's tasks run them together). EOS's bits count, its bytes do not."""
    task = build("llm")[0]
    corpus = stdlib_corpus()
    for split in ("train", "val", "test"):
        ids = getattr(task, split).ids
        ends = (ids == EOS).nonzero().flatten().tolist()
        assert len(ends) == len(corpus.files[split]) and ends[-1] == len(ids) - 1
        starts = [0, *(e + 1 for e in ends[:-1])]
        texts = [task.vocab.decode(ids[a:b]) for a, b in zip(starts, ends)]
        assert texts == corpus.documents[split]  # each file's text, whole
    assert task.text_bytes(task.test.ids) == len(corpus.test.encode()) == 48_021
    assert task.text_bytes(torch.tensor([task.vocab.encode(" return")[0], EOS])) == 7

    class Uniform(torch.nn.Module):  # log2(1,024) = 10 bits for every target, EOS included
        def __init__(self):
            super().__init__()
            self.unused = torch.nn.Parameter(torch.zeros(1))

        def forward(self, ids):
            return torch.zeros(*ids.shape, len(task.vocab))

    targets = len(task.test.ids) - 1  # every id but the first, the 3 EOS among them
    assert task.bits_per_byte(Uniform(), task.test) == pytest.approx(10 * targets / 48_021, rel=1e-4)


def test_tfcourse_train_task_llm_saves_the_model_with_its_tokenizer(tmp_path):
    out = str(tmp_path / "llm.pt")
    assert cli.main(["train", "--task", "llm", "--steps", "3", "--warmup", "1", "--eval-every", "3",
                     "--d-model", "32", "--n-layers", "1", "--d-ff", "64", "--out", out,
                     "--threads", "1", "--no-progress"]) == 0
    model, vocab, state = checkpoint.load_checkpoint(out)
    assert state["task"] == "llm" and state["kind"] == "llama" and state["step"] == 3
    assert isinstance(vocab, BPE) and vocab == build("llm")[0].vocab
    # the schedule ran to its end: the last step's rate is the floor, 10% of the peak
    lr = state["train_config"]["lr"]
    assert state["history"]["lr"] == pytest.approx([lr, lr * (0.1 + 0.9 * 0.5), lr * 0.1])
    assert torch.isfinite(torch.tensor(state["history"]["loss"])).all()


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "benchmarks_llm", Path(__file__).parents[1] / "benchmarks" / "llm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scaling_fit_recovers_a_power_law_and_predicts_from_it():
    llm = _benchmark()
    n = [1e4, 3e4, 1e5, 3e5]
    a, alpha = llm.power_law(n, [7.0 * x**-0.12 for x in n])
    assert (a, alpha) == (pytest.approx(7.0), pytest.approx(0.12))
    a, alpha = llm.power_law(n, [7.0 * x**-0.12 * (1.01 if i % 2 else 0.99) for i, x in enumerate(n)])
    assert 6.0 < a < 8.0 and 0.1 < alpha < 0.14


def test_ngram_bits_per_byte_counts_each_predicted_tokens_bytes():
    """Over ASCII characters (a byte each) an n-gram's bits per byte is its mean -log2 p over
    every character after the first: here the order-1 n-gram (Kneser-Ney's lowest order)."""
    llm = _benchmark()
    corpus = TextCorpus("t", Vocab.from_texts(["abcab"]), "abcab" * 40, "abcabc", "abcabca" * 3, {})
    task = lm_task(block_size=4, corpus=corpus)
    model = NGramLM(task.train.ids.tolist(), len(task.vocab), 1)
    ids = task.test.ids.tolist()
    bits = -sum(math.log2(model.probability((), i)) for i in ids[1:])
    assert llm.ngram_bpb(task, 1) == pytest.approx(bits / (len(ids) - 1))


def test_the_stored_results_hold_every_row_at_the_recipes_length():
    """benchmarks/llm.json (what notebook 13 and the README read): three seeds of every
    trained row, each at the recipe's steps; seed 0 of the recipe is the shipped llm.pt."""
    llm = _benchmark()
    results, steps = llm.load_results(), build("llm")[2].steps
    for row in ("llm", "adam2017", "gpt_bpe", "llama_chars"):
        assert sorted(results[row]) == ["0", "1", "2"]
        assert {run["steps"] for run in results[row].values()} == {steps}
    model, _, _ = checkpoint.load_checkpoint(llm.SHIPPED)
    task = build("llm")[0]
    assert results["llm"]["0"]["bpb"] == pytest.approx(task.bits_per_byte(model, task.test), abs=1e-6)
    fit = results["scaling"]["fit"]
    assert fit["fitted_on"] == len(llm.SCALING) - 1 and fit["predicted"] > 0
