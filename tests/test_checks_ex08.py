"""Proves the checks of exercise 08: the reference passes, the stub is 'not implemented
yet', and every buggy solution fails with its diagnosis on the first line."""

from pathlib import Path

import pytest
from buggy_solutions import ex08_decoding as buggy
from buggy_solutions import first_line, run_as_learner, solutions

from tfcourse import decoding
from tfcourse.checking import check, core
from tfcourse.checking.ch08_decoding import (
    BEAM_MISTAKES,
    GREEDY_MISTAKES,
    STEP_MISTAKES_CACHED,
    STEP_MISTAKES_UNCACHED,
    check_beam_search_step,
    check_decode_step,
    check_greedy_decode,
)

EXERCISES = Path(__file__).parents[1] / "exercises"
CHECKS = {
    "greedy_decode": check_greedy_decode,
    "beam_search_step": check_beam_search_step,
    "decode_step": check_decode_step,
}


def check_for(solution):
    """Which check a buggy solution is for: by its first argument's name."""
    first = solution.__code__.co_varnames[0]
    return {"scores": check_beam_search_step}.get(first) or (
        check_greedy_decode if "src" in solution.__code__.co_varnames[:3] else check_decode_step
    )


@pytest.mark.parametrize("name", CHECKS)
def test_reference_passes(name):
    CHECKS[name](getattr(decoding, name))


@pytest.mark.parametrize("name", CHECKS)
def test_stub_is_not_implemented_yet(name):
    stub = getattr(core.load_exercise(EXERCISES / "ex08_decoding.py"), name)
    assert first_line(CHECKS[name], stub).startswith("Not implemented yet")


@pytest.mark.parametrize("solution", solutions(buggy))
def test_mistake_is_named_on_the_first_line(solution):
    line = first_line(check_for(solution), solution)
    assert line.startswith(solution.expected), line


def test_every_catalogued_mistake_has_buggy_solutions():
    tagged = {s.values[0].expected for s in solutions(buggy)}
    catalogue = {m.title for m in (*GREEDY_MISTAKES, *BEAM_MISTAKES, *STEP_MISTAKES_CACHED,
                                   *STEP_MISTAKES_UNCACHED)}
    assert catalogue <= tagged


def test_notebook_check_prints_the_same_diagnosis(capsys):
    check(buggy.never_stops, "greedy_decode")
    assert capsys.readouterr().out.startswith(
        "✗ greedy_decode: Greedy decoding does not stop at EOS:")
    check(decoding.decode_step)
    assert capsys.readouterr().out == "✓ decode_step: every check passes.\n"


def test_pytest_output_for_learners(tmp_path):
    """Run pytest on the exercise as a learner does: the reference's greedy_decode and
    decode_step, a beam-search step without length normalization."""
    run = run_as_learner(tmp_path, "ex08_decoding",
        "from tfcourse.decoding import decode_step, greedy_decode  # noqa: F401\n"
        "def beam_search_step(scores, log_probs, lengths, alpha=0.6):\n"
        "    candidates = (scores[:, :, None] + log_probs).flatten(1)\n"
        "    best = candidates.topk(scores.size(1)).indices\n"
        "    vocab = log_probs.size(-1)\n"
        "    return candidates.gather(1, best), best // vocab, best % vocab\n"
    )
    failed = [line for line in run.stdout.splitlines() if line.startswith("FAILED ")]
    assert len(failed) == 1, run.stdout
    assert "test_beam_search_step" in failed[0]
    assert failed[0].split(" - ", 1)[1].startswith("Failed: No length normalization"), run.stdout
    assert "Traceback" not in run.stdout and "2 passed" in run.stdout
