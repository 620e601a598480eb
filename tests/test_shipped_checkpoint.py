"""The dates checkpoint shipped in the package: its accuracy, and that the command stated in
tfcourse/cli.py makes it again from scratch."""

import os

import pytest
import torch

from tfcourse.cli import DATES_CHECKPOINT, main
from tfcourse.data import dates_task
from tfcourse.model import TransformerConfig
from tfcourse.recipes import RECIPES
from tfcourse.training import exact_match, load_checkpoint, predict

GOAL = 0.98  # held-out exact match (issue 4)


@pytest.fixture(scope="module")
def task():
    return dates_task(seed=0)


def test_shipped_checkpoint_is_small_and_plain():
    assert os.path.getsize(DATES_CHECKPOINT) < 2 * 2**20
    state = torch.load(DATES_CHECKPOINT, weights_only=True)
    # made by `tfcourse train --task dates --seed 0`: the task's recipe, nothing else
    expected = RECIPES["dates"].train_config(seed=0)
    assert state["train_config"] == {**expected.__dict__, "amp": state["train_config"]["amp"]}
    assert state["task"] == "dates" and state["kind"] == "seq2seq"
    assert state["step"] == expected.steps


def test_shipped_checkpoint_accuracy(task):
    model, vocab, _ = load_checkpoint(DATES_CHECKPOINT)
    assert vocab == task.vocab
    assert exact_match(model, task.test, vocab) >= GOAL
    texts = ["samedi 21 novembre 2026", "November 21, 2026", "21 nov. 2026"]
    assert predict(model, texts, vocab) == ["2026-11-21"] * 3


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
    assert state["train_config"] == shipped["train_config"]
    # the same model: fields added since (with their defaults) do not count
    assert TransformerConfig(**state["model_config"]) == TransformerConfig(**shipped["model_config"])
