"""Proves the checks of exercise 07: the reference passes, the stub is 'not implemented
yet', and every buggy solution fails with its diagnosis on the first line."""

from pathlib import Path

import pytest
from buggy_solutions import ex07_training as buggy
from buggy_solutions import first_line, run_as_learner, solutions

from tfcourse import data, training
from tfcourse.checking import CheckFailure, check, core
from tfcourse.checking.ch07_training import (
    BATCH_MISTAKES,
    LOSS_MISTAKES,
    NOAM_MISTAKES,
    STEP_MISTAKES,
    STEP_ZERO,
    check_label_smoothing_loss,
    check_make_batch,
    check_noam_lr,
    check_train_step,
)

EXERCISES = Path(__file__).parents[1] / "exercises"
CHECKS = {
    "make_batch": check_make_batch,
    "label_smoothing_loss": check_label_smoothing_loss,
    "noam_lr": check_noam_lr,
    "train_step": check_train_step,
}
REFERENCES = {
    "make_batch": data.make_batch,
    "label_smoothing_loss": training.label_smoothing_loss,
    "noam_lr": training.noam_lr,
    "train_step": training.train_step,
}


def check_for(solution):
    """Which check a buggy solution is for: by its first argument's name."""
    first = solution.__code__.co_varnames[0]
    return {"pairs": check_make_batch, "logits": check_label_smoothing_loss,
            "step": check_noam_lr, "model": check_train_step}[first]


@pytest.mark.parametrize("name", CHECKS)
def test_reference_passes(name):
    CHECKS[name](REFERENCES[name])


@pytest.mark.parametrize("name", CHECKS)
def test_stub_is_not_implemented_yet(name):
    stub = getattr(core.load_exercise(EXERCISES / "ex07_training.py"), name)
    assert first_line(CHECKS[name], stub).startswith("Not implemented yet")


@pytest.mark.parametrize("solution", solutions(buggy))
def test_mistake_is_named_on_the_first_line(solution):
    line = first_line(check_for(solution), solution)
    assert line.startswith(solution.expected), line


def test_every_catalogued_mistake_has_buggy_solutions():
    tagged = {s.values[0].expected for s in solutions(buggy)}
    catalogue = {m.title for m in (*BATCH_MISTAKES, *LOSS_MISTAKES, *NOAM_MISTAKES, STEP_ZERO,
                                   *STEP_MISTAKES)}
    assert catalogue <= tagged


def test_huge_prints_are_hidden(capsys):
    with pytest.raises(CheckFailure) as failure:
        check_train_step(buggy.prints_then_raises)
    assert len(str(failure.value)) < 1000
    assert capsys.readouterr().out == ""


def test_notebook_check_prints_the_same_diagnosis(capsys):
    check(buggy.never_zeroed, "train_step")
    assert capsys.readouterr().out.startswith(
        "✗ train_step: Gradients not zeroed between steps:")
    check(training.label_smoothing_loss)
    assert capsys.readouterr().out == "✓ label_smoothing_loss: every check passes.\n"


def test_pytest_output_for_learners(tmp_path):
    """Run pytest on the exercise as a learner does: the reference's make_batch, loss and
    schedule, and a training step that never zeroes the gradients."""
    run = run_as_learner(tmp_path, "ex07_training",
        "import torch\n"
        "from tfcourse.data import PAD, make_batch  # noqa: F401\n"
        "from tfcourse.training import label_smoothing_loss, noam_lr  # noqa: F401\n"
        "def train_step(model, batches, optimizer, label_smoothing=0.1, clip=1.0,\n"
        "               autocast_dtype=None):\n"
        "    for batch in batches:\n"
        "        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)\n"
        "        loss = label_smoothing_loss(logits, batch.tgt_out, label_smoothing)\n"
        "        (loss / len(batches)).backward()\n"
        "    if clip > 0:\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)\n"
        "    optimizer.step()\n"
        "    return loss.item()\n"
    )
    failed = [line for line in run.stdout.splitlines() if line.startswith("FAILED ")]
    assert len(failed) == 1, run.stdout
    assert "test_train_step" in failed[0]
    assert failed[0].split(" - ", 1)[1].startswith(
        "Failed: Gradients not zeroed between steps"), run.stdout
    assert "Traceback" not in run.stdout and "3 passed" in run.stdout
