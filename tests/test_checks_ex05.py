"""Proves the checks of exercise 05: the reference passes, the stubs are 'not implemented
yet', and every buggy solution fails with its diagnosis on the first line."""

from pathlib import Path

import pytest
import torch
from buggy_solutions import ex05_encoder as buggy
from buggy_solutions import first_line, run_as_learner, solutions

from tfcourse import encoder
from tfcourse.checking import ch05_encoder as ch05
from tfcourse.checking import check, core

EXERCISES = Path(__file__).parents[1] / "exercises"
CHECKS = {
    "Embeddings": (ch05.check_embeddings, ch05.EMBEDDING_MISTAKES),
    "EncoderLayer": (ch05.check_encoder_layer, ch05.LAYER_MISTAKES),
    "Encoder": (ch05.check_encoder, ch05.ENCODER_MISTAKES),
}


def item(solution):
    """The exercise item a buggy solution is written for."""
    return next(name for name in CHECKS if issubclass(solution, getattr(buggy.given, name)))


@pytest.mark.parametrize("name", CHECKS)
def test_reference_passes(name):
    CHECKS[name][0](getattr(encoder, name))


@pytest.mark.parametrize("name", CHECKS)
def test_stub_is_not_implemented_yet(name):
    stub = getattr(core.load_exercise(EXERCISES / "ex05_encoder.py"), name)
    assert first_line(CHECKS[name][0], stub).startswith("Not implemented yet")


@pytest.mark.parametrize("solution", solutions(buggy))
def test_mistake_is_named_on_the_first_line(solution):
    assert first_line(CHECKS[item(solution)][0], solution).startswith(solution.expected)


@pytest.mark.parametrize("name", CHECKS)
def test_every_catalogued_mistake_has_buggy_solutions(name):
    tagged = {s.values[0].expected for s in solutions(buggy) if item(s.values[0]) == name}
    assert {m.title for m in CHECKS[name][1]} <= tagged


def test_the_checks_own_layer_equals_the_reference():
    """_layer(), from which every layer mistake is computed, is the reference's forward."""
    for seed, (args, x, mask, training) in enumerate(ch05.LAYER_CASES):
        layer = ch05._randomize(encoder.EncoderLayer(*args), seed).train(training)
        torch.manual_seed(seed)
        want = layer(x, mask)
        torch.testing.assert_close(ch05._layer(layer, x, mask, seed), want)
        changed = (ch05._layer(layer, x, mask, seed + 1) - want).abs().max() > 0.1
        assert bool(changed) == training  # other seed, other dropout masks


def test_every_layer_mistake_shows_in_some_case():
    """Each mistake's computation differs from the reference on at least one case."""
    for mistake in ch05.LAYER_MISTAKES:
        for compute in mistake.computes:
            assert any(
                not ch05.close(compute(layer, x, mask, seed), ch05._layer(layer, x, mask, seed))
                for seed, (args, x, mask, training) in enumerate(ch05.LAYER_CASES)
                for layer in [ch05._randomize(encoder.EncoderLayer(*args), seed).train(training)]
            ), mistake.title


def test_notebook_check_prints_the_same_diagnosis(capsys):
    check(buggy.mask_transposed, "EncoderLayer")
    out = capsys.readouterr().out
    assert out.startswith("✗ EncoderLayer: Padding mask applied on the query axis instead"), out
    check(encoder.Encoder)
    assert capsys.readouterr().out == "✓ Encoder: every check passes.\n"


SOLVED = {
    "Embeddings": "        return self.embedding(tokens) * math.sqrt(self.embedding.embedding_dim)\n",
    "EncoderLayer": (
        "        attend = lambda h: self.self_attn(h, h, h, mask)[0]  # noqa: E731\n"
        "        for f, norm in ((attend, self.norm1), (self.feed_forward, self.norm2)):\n"
        "            if self.norm_first:\n"
        "                x = x + self.dropout(f(norm(x)))\n"
        "            else:\n"
        "                x = norm(x + self.dropout(f(x)))\n"
        "        return x\n"
    ),
    "Encoder": (
        "        for layer in self.layers:\n"
        "            x = layer(x, mask)\n"
        "        return self.norm(x)\n"
    ),
}


WRONG = {
    "Embeddings": "        return self.embedding(tokens)\n",
    "EncoderLayer": SOLVED["EncoderLayer"]
    .replace("f(norm(x))", "f(x)")
    .replace("    if self.norm_first:\n", "    if self.norm_first:\n                x = norm(x)\n"),
    "Encoder": "        raise NotImplementedError\n",
}


@pytest.mark.parametrize(
    "bodies, expected",
    [
        (SOLVED, {}),
        (
            WRONG,
            {
                "test_embeddings": "Embeddings not scaled",
                "test_encoder_layer": "Residual taken from the normalized input",
                "test_encoder": "Not implemented yet",
            },
        ),
    ],
    ids=["solved", "wrong"],
)
def test_pytest_output_for_learners(tmp_path, bodies, expected):
    """Run pytest on the exercise as a learner does and read the FAILED lines."""
    parts = (EXERCISES / "ex05_encoder.py").read_text().split("        raise NotImplementedError\n")
    assert len(parts) == 4, "one stub per class: Embeddings, EncoderLayer, Encoder"
    bodies = [bodies[name] for name in ("Embeddings", "EncoderLayer", "Encoder")]
    source = "".join(part + body for part, body in zip(parts, bodies)) + parts[-1]
    run = run_as_learner(tmp_path, "ex05_encoder", source)
    failed = [line for line in run.stdout.splitlines() if line.startswith("FAILED ")]
    assert len(failed) == len(expected), run.stdout
    for test, message in expected.items():
        line = next(f for f in failed if f"::{test} " in f)
        assert line.split(" - ", 1)[1].startswith(f"Failed: {message}"), run.stdout
    assert "Traceback" not in run.stdout
