"""Proves the exercise checks, for every item of every exercise (tfcourse.checking.items()):
the reference passes, the stub says "Not implemented yet", every buggy solution in
tests/buggy_solutions gets the title of the mistake it is tagged with on the first line,
and every catalogued mistake has such a solution. Then what a learner meets: check() in a
notebook, hostile code (exits, endless loops, huge prints, a broken file), and pytest run on
the exercises as a learner runs it in an 80-column terminal (three runs in all). Meta-tests
of the catalogues: every mistake shows on a case by a clear margin, the knobbed copies of the
references are right with default knobs, the cases reach the regimes where bugs hide, every
mistake points to a section of its notebook and has its own second hint; and the checker's
modules import only those above them."""

import ast
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import buggy_solutions
import pytest
import torch

from tfcourse.checking import (
    Case,
    CheckFailure,
    Item,
    Mistake,
    check,
    entry,
    explanation,
    mistakes,
    pipeline,
    run_check,
    sandbox,
)

ITEMS = entry.items()
EXERCISES = sorted({item.exercise for item in ITEMS})
SHARED = {m.key: m for m in (*mistakes.SHARED, *mistakes.FILE_MISTAKES)}


def _solutions():
    """(exercise, name, solution) for every tagged buggy solution."""
    found = []
    for module in pkgutil.iter_modules(buggy_solutions.__path__):
        solutions = importlib.import_module(f"buggy_solutions.{module.name}")
        found += [(module.name, name, value) for name, value in vars(solutions).items()
                  if hasattr(value, "mistake") and getattr(value, "__module__", "") == solutions.__name__]
    return found


SOLUTIONS = _solutions()


def failure(item, target):
    """The CheckFailure that `item`'s check raises on `target` (the test fails if none)."""
    with pytest.raises(CheckFailure) as raised:
        item.check(target)
    return raised.value


def first_line(error):
    return str(error).splitlines()[0]


def title_prefix(mistake):
    """The part of a mistake's title that every report of it starts with."""
    return mistake.title.split("{")[0] if "{" in mistake.title else mistake.title + ":"


@pytest.mark.parametrize("item", ITEMS, ids=lambda i: i.key)
def test_reference_passes_and_leaves_the_global_random_state_alone(item):
    state = torch.random.get_rng_state()
    item.check(item.reference)
    assert torch.equal(state, torch.random.get_rng_state())


@pytest.mark.parametrize("item", ITEMS, ids=lambda i: i.key)
def test_stub_is_not_implemented_yet(item):
    stub = getattr(entry.load_exercise(entry.exercises_dir() / f"{item.exercise}.py"), item.name)
    line = first_line(failure(item, stub))
    assert line.startswith("Not implemented yet: replace `raise NotImplementedError` in "), line


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda s: f"{s[0]}.{s[1]}")
def test_buggy_solution_gets_its_mistake(solution, monkeypatch):
    exercise, _, target = solution
    item = entry.item(f"{exercise}.{target.item}")
    mistake = item.catalogue.get(target.mistake) or SHARED[target.mistake]
    if mistake.key == "too_slow":
        monkeypatch.setattr(sandbox, "TIME_LIMIT", 0.5)
    error = failure(item, target)
    assert (error.key, first_line(error)[:len(title_prefix(mistake))]) == (
        mistake.key, title_prefix(mistake)), str(error)


@pytest.mark.parametrize("item", ITEMS, ids=lambda i: i.key)
def test_every_catalogued_mistake_has_a_buggy_solution(item):
    shown = {s.mistake for exercise, _, s in SOLUTIONS
             if exercise == item.exercise and s.item == item.name}
    assert not set(item.catalogue) - shown, f"no buggy solution for {sorted(set(item.catalogue) - shown)}"


@pytest.mark.parametrize("item", [i for i in ITEMS if i.twins], ids=lambda i: i.key)
def test_every_knobbed_twin_with_default_knobs_computes_the_reference(item):
    """The catalogue's copies of the reference (whose knobs its mistakes turn) are right with
    every knob at its default: each on every case where the item's catalogue is looked for,
    and on the cases with a catalogue of their own, every case by one of them (decode_step's
    two twins: one without a cache, one with), gradient cases aside."""
    right = {id(twin): {id(c) for c in item.cases if item.computes_expected(twin, c)}
             for twin in item.twins}
    for twin in item.twins:
        assert right[id(twin)], "a twin right on no case"
        assert [c.label for c in item.cases if c.mistakes is None and id(c) not in right[id(twin)]] == []
    values = [c for c in item.cases if not (c.what or "").startswith("gradient")]
    assert [c.label for c in values if not any(id(c) in r for r in right.values())] == []


@pytest.mark.parametrize("item", ITEMS, ids=lambda i: i.key)
def test_every_catalogued_mistake_shows_on_a_case_by_a_clear_margin(item):
    """No mistake can pass: each computation of each mistake differs from the reference (or
    raises) on at least one case where the mistake is looked for, by more than 10 times the
    comparison's tolerance (items with a comparison of their own: by more than it)."""
    hidden = [(key, i) for key, mistake in item.catalogue.items()
              for i, compute in enumerate(mistake.computes)
              if all(item.computes_expected(compute, case, margin=10)
                     for case in item.mistake_cases(mistake))]
    assert hidden == []


# The regimes where real bugs hide, by the kind of item: attention over masked scores (a
# finite fill, a running maximum, an axis), losses over logits (log of an underflowed
# softmax). Each item of a kind must have a case in each regime.
REGIMES = {
    "ex01_attention.scaled_dot_product_attention": {"masked", "magnitude", "rank", "float64"},
    "ex02_multi_head_attention.MultiHeadAttention": {"masked", "magnitude"},
    "ex10_tiled_attention.tiled_attention": {"masked", "magnitude", "rank", "float64"},
    "ex07_training.label_smoothing_loss": {"magnitude", "rank"},
    "ex09_variants.lm_loss": {"magnitude", "float64"},
}


@pytest.mark.parametrize("key", REGIMES)
def test_every_item_has_cases_in_the_regimes_where_its_bugs_hide(key):
    item = entry.item(key)
    found = set().union(*(explanation.case_features(c.args, c.train) for c in item.cases))
    assert REGIMES[key] <= found, REGIMES[key] - found
    odd = [c for c in item.cases for a in c.args if isinstance(a, torch.Tensor)
           and any(size % 2 and size > 1 for size in a.shape)]
    assert odd  # an odd size: a length that no block or head count divides


def test_every_item_of_a_chapter_with_a_knobbed_copy_declares_it():
    assert len([twin for item in ITEMS for twin in item.twins]) >= 19


LAYERS = ("diagnosis", "mistakes", "comparison", "sandbox", "errors", "explanation", "sequences", "state",
          "readings", "gradients", "confirmation", "pipeline", "entry")


def test_each_module_of_the_checker_imports_only_those_above_it():
    for i, name in enumerate(LAYERS):
        tree = ast.parse((Path(entry.__file__).parent / f"{name}.py").read_text())
        imported = {node.module or alias.name for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.level == 1
                    for alias in node.names}
        assert imported <= set(LAYERS[:i]), (name, imported - set(LAYERS[:i]))


def test_a_duplicate_key_is_an_error():
    item = ITEMS[0]
    with pytest.raises(ValueError, match="duplicate exercise item"):
        entry.collect([item, Item(item.exercise, item.name, item.reference, [])])
    twice = Mistake("twice", "A", "a"), Mistake("twice", "B", "b")
    with pytest.raises(ValueError, match="duplicate mistake keys"):
        Item("ex99_test", "f", abs, [Case((1,))], twice)
    with pytest.raises(ValueError, match="duplicate mistake keys"):
        Item("ex99_test", "f", abs, [Case((1,))], (Mistake("in_place", "Mine", "mine"),))
    assert not entry.items("ex99_test")


# ---------------------------------------------------------------------------------------
# In a notebook: check(...)


def _named_solution(exercise):
    """A buggy solution of `exercise` that a catalogued mistake names, and its item."""
    for ex, _, solution in SOLUTIONS:
        item = entry.item(f"{ex}.{solution.item}")
        if ex == exercise and solution.mistake in item.catalogue and solution.mistake != "too_slow":
            return item, solution
    raise LookupError(exercise)


@pytest.mark.parametrize("exercise", EXERCISES)
def test_notebook_check_prints_the_same_diagnosis(exercise, capsys):
    item, solution = _named_solution(exercise)
    check(solution, item.key)
    title = item.catalogue[solution.mistake].title
    assert capsys.readouterr().out.startswith(f"✗ {item.name}: {title}:")
    check(item.reference, item.key)
    assert capsys.readouterr().out == f"✓ {item.name}: every check passes.\n"
    check(exercise)
    lines = capsys.readouterr().out.splitlines()
    stubs = [line for line in lines if line.startswith("✗ ")]
    assert [line.split(":")[0] for line in stubs] == [f"✗ {i.name}" for i in entry.items(exercise)]
    assert all(": Not implemented yet: " in line for line in stubs)


def test_notebook_check_names_an_item_only_unambiguously(capsys):
    check(abs, "no_such_item")
    assert capsys.readouterr().out.startswith("✗ no exercise item is named 'no_such_item'")
    check(abs, "MultiHeadAttention")
    assert capsys.readouterr().out.startswith("✗ MultiHeadAttention: Wrong type: MultiHeadAttention "
                                              "should be a class")


# ---------------------------------------------------------------------------------------
# Hostile code: one clear line each, and Python goes on


ATTENTION = entry.item("ex01_attention.scaled_dot_product_attention")


def _attention(query, key, value, mask=None):
    """A right attention, for the hostile solutions below."""
    scores = query @ key.transpose(-2, -1) / query.size(-1) ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, -1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return weights @ value, weights


def test_prints_are_shown_under_a_failure_trimmed_with_their_size():
    def prints_then_forgets_the_scale(query, key, value, mask=None):
        for i in range(30_000):
            print("debug", i, query.shape)
        return _attention(query * query.size(-1) ** 0.5, key, value, mask)

    error = failure(ATTENTION, prints_then_forgets_the_scale)
    text = str(error)
    assert first_line(error).startswith("Scores not scaled:")
    assert "your code printed 30,000 lines, " in text and "debug 0 torch.Size([2, 5, 8])" in text
    assert "debug 29999" not in text and len(text) < 1500


@pytest.mark.parametrize("how", ["sys.exit(0)", "exit()", "os._exit(0)", "raise SystemExit(3)"])
def test_an_exit_inside_the_learners_code_is_reported_and_python_goes_on(how):
    source = f"import os, sys\ndef scaled_dot_product_attention(q, k, v, mask=None):\n    {how}\n"
    namespace = {}
    exec(compile(source, "<exercise>", "exec"), namespace)
    error = failure(ATTENTION, namespace["scaled_dot_product_attention"])
    assert first_line(error).startswith("Your code tried to end Python: scaled_dot_product_attention "
                                        "called ")


def test_an_exception_is_located_in_the_learners_file():
    def typo(query, key, value, mask=None):
        scores = query @ key.transpose(-2, -1)
        return scores.softmaks(-1)

    text = str(failure(ATTENTION, typo))
    assert text.startswith("Raised AttributeError: 'Tensor' object has no attribute 'softmaks'")
    assert "at line " in text and "test_checks.py: `return scores.softmaks(-1)`" in text


HOSTILE_FILES = {
    "syntax": ("def scaled_dot_product_attention(q, k, v, mask=None)\n    pass\n",
               "Syntax error: ex01_attention.py, line 1: expected ':'"),
    "name": ("import torch\nx = torhc.ones(3)\n",
             "Your file could not be imported: ex01_attention.py raised NameError: name 'torhc' is "
             "not defined"),
    "exit": ("import sys\nsys.exit(0)\n",
             "Your file exited while being imported: sys.exit(0) at the top level of ex01_attention.py"),
    "os_exit": ("import os\nos._exit(0)\n",
                "Your file exited while being imported: os._exit(0) at the top level"),
    "loop": ("while True:\n    pass\n",
             "Too slow: importing ex01_attention.py did not finish within 0.5 s"),
    "missing": ("def scaled_dot_product_atention(q, k, v, mask=None):\n    return q\n",
                "Missing: ex01_attention.py has no `scaled_dot_product_attention`: was it renamed or "
                "deleted? It has `scaled_dot_product_atention`."),
    "reference": ("from tfcourse.attention import scaled_dot_product_attention\n",
                  "Reference imported: `scaled_dot_product_attention` in ex01_attention.py is "
                  "tfcourse's own tfcourse.attention.scaled_dot_product_attention"),
    "wrapper": ("import tfcourse.attention as a\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
                "    return a.scaled_dot_product_attention(q, k, v, mask)\n",
                "Reference used instead of your own code: scaled_dot_product_attention runs "
                "tfcourse's own tfcourse.attention.scaled_dot_product_attention"),
}


@pytest.mark.parametrize("case", HOSTILE_FILES)
def test_a_broken_exercise_file_gets_one_line_from_check_and_from_pytest(case, tmp_path, monkeypatch,
                                                                        capsys):
    source, expected = HOSTILE_FILES[case]
    (tmp_path / "ex01_attention.py").write_text(source)
    monkeypatch.setattr(entry, "exercises_dir", lambda: tmp_path)
    monkeypatch.setattr(sandbox, "TIME_LIMIT", 0.5)
    check("ex01_attention")
    out = capsys.readouterr().out
    assert out.splitlines()[0].split(": ", 1)[1].startswith(expected), out
    assert "Traceback" not in out
    with pytest.raises(pytest.fail.Exception) as failed:
        run_check(tmp_path / "ex01_attention.py", "scaled_dot_product_attention")
    assert str(failed.value).startswith(expected)


def test_a_file_that_fails_to_import_is_not_run_again_until_it_changes(tmp_path, monkeypatch):
    path = tmp_path / "ex01_attention.py"
    path.write_text("import time\ntime.sleep(0.3)\nraise RuntimeError('boom')\n")
    for _ in range(2):
        with pytest.raises(CheckFailure, match="RuntimeError: boom"):
            entry.load_exercise(path)
    assert len([k for k in entry._BROKEN if k[0] == str(path.resolve())]) == 1
    path.write_text("x = 1\n")
    assert entry.load_exercise(path).x == 1


# ---------------------------------------------------------------------------------------
# pytest on the exercises, as a learner runs it


def _with_bodies(exercise, bodies):
    """The stub of `exercise` with its `raise NotImplementedError` lines replaced, in order,
    by `bodies` (None: left as it is)."""
    lines = (entry.exercises_dir() / f"{exercise}.py").read_text().splitlines(keepends=True)
    stubs = iter(bodies)
    out = []
    for line in lines:
        if line.strip() == "raise NotImplementedError":
            body = next(stubs)
            if body is not None:
                indent = line[: len(line) - len(line.lstrip())]
                line = textwrap.indent(textwrap.dedent(body).strip("\n") + "\n", indent)
        out.append(line)
    return "".join(out)


ATTENTION_BODY = """
scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
if mask is not None:
    scores = scores.masked_fill(~mask, float("-inf"))
weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
return weights @ value, weights
"""
LEARNER_FILES = {  # each exercise: some items right, some wrong, some left as stubs
    "ex01_attention": [ATTENTION_BODY],
    "ex02_multi_head_attention": [
        "batch, seq, d_model = x.shape\n"
        "return x.view(batch, seq, n_heads, d_model // n_heads).transpose(1, 2)",
        "return x.reshape(x.size(0), x.size(2), -1)", None],
    "ex03_positional_encoding": [
        "pe = torch.zeros(max_len, d_model)\n"
        "angle = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)\n"
        "pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()\nreturn pe",
        None, "return positional_encoding(embedding(tokens))"],
    "ex04_feed_forward_and_norm": [
        "return self.weight * (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True)"
        " + self.eps) + self.bias",
        "return self.linear2(self.dropout(self.activation(self.linear1(x))))", None],
    "ex05_encoder": [
        "return self.embedding(tokens) * math.sqrt(self.embedding.embedding_dim)",
        "for f, s in ((lambda h: self.self_attn(h, h, h, mask)[0], self.sublayers[0]),\n"
        "             (self.feed_forward, self.sublayers[1])):\n"
        "    h = s.norm(x) if s.norm_first else x\n"
        "    x = x + s.dropout(f(h))\n"
        "    x = x if s.norm_first else s.norm(x)\n"
        "return x", None],
    "ex06_decoder": [
        "return torch.ones(size, size, dtype=torch.bool, device=device).tril()",
        "x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask)[0])\n"
        "x = self.sublayers[1](x, lambda y: self.cross_attn(y, memory, memory, tgt_mask)[0])\n"
        "return self.sublayers[2](x, self.feed_forward)"],
    "ex07_training": [
        None,
        "q = torch.full_like(logits, eps / logits.size(-1)).scatter(\n"
        "    -1, target[..., None], 1 - eps + eps / logits.size(-1))\n"
        "return -(q * F.log_softmax(logits, -1)).sum(-1).mean()",
        "if step < 1:\n    raise ValueError('steps count from 1')\n"
        "return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)", None],
    "ex08_decoding": [
        None,
        "candidates = (scores[:, :, None] + log_probs).flatten(1)\n"
        "best = candidates.topk(scores.size(1)).indices\n"
        "vocab = log_probs.size(-1)\n"
        "return candidates.gather(1, best), best // vocab, best % vocab", None],
    "ex09_variants": [
        "return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], ignore_index=pad_id)",
        None, "return h.mean(1)",
        "x = self.positional(self.embed(tokens))\nfor layer in self.layers:\n    x = layer(x)\n"
        "return self.generator(self.norm(x))"],
    "ex10_tiled_attention": [
        "m = torch.full_like(query[..., :1], -math.inf)\n"
        "l, o = torch.zeros_like(m), 0\n"
        "for j in range(0, key.size(-2), block_size):\n"
        "    s = query @ key[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(query.size(-1))\n"
        "    if mask is not None:\n"
        "        s = s.masked_fill(~mask[..., j:j + block_size], -math.inf)\n"
        "    m_new = torch.maximum(m, s.amax(-1, keepdim=True))\n"
        "    p, r = torch.exp(s - m_new), torch.exp(m - m_new)\n"
        "    l, o, m = r * l + p.sum(-1, keepdim=True), r * o + p @ value[..., j:j + block_size, :], m_new\n"
        "return o / l",
        "i = torch.arange(size)\nreturn (i[:, None] - i[None, :]).abs() < window"],
    "ex11_tokens": [
        "counts = Counter()\nfor word, freq in words.items():\n"
        "    for pair in zip(word, word[1:]):\n        counts[pair] += freq\nreturn counts",
        "out, i = [], 0\nwhile i < len(word) - 1:\n"
        "    if (word[i], word[i + 1]) == pair:\n        out.append(new_id)\n        i += 2\n"
        "    else:\n        out.append(word[i])\n        i += 1\nreturn tuple(out)",
        None, None,
        "return ''.join(vocab[i].decode('utf-8') for i in ids)"],
    "ex12_modern_block": [
        "return self.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
        "return self.down(self.dropout(F.silu(self.up(x)) * self.gate(x)))", None, None],
    "ex13_small_llm": [
        None, "if step <= warmup:\n    return (step - 1) / warmup\n"
        "progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))\n"
        "return min_ratio + (1 - min_ratio) * (1 + math.cos(math.pi * progress)) / 2",
        "grads = [p.grad for p in parameters if p.grad is not None]\n"
        "norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))\n"
        "for g in grads:\n    g.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))\n"
        "return norm", None, None, None, None],
}
EXPECTED = {  # test -> None (passes) or the start of its FAILED line
    "test_ex01_attention.py::test_scaled_dot_product_attention": None,
    "test_ex02_multi_head_attention.py::test_split_heads": None,
    "test_ex02_multi_head_attention.py::test_merge_heads": "Heads merged in the wrong order:",
    "test_ex02_multi_head_attention.py::test_multi_head_attention": "Not implemented yet:",
    "test_ex03_positional_encoding.py::test_sinusoidal_encoding": None,
    "test_ex03_positional_encoding.py::test_positional_encoding": "Not implemented yet:",
    "test_ex03_positional_encoding.py::test_embed_and_encode": "Embeddings not scaled by sqrt(d_model):",
    "test_ex04_feed_forward_and_norm.py::test_layer_norm": "Unbiased variance:",
    "test_ex04_feed_forward_and_norm.py::test_position_wise_feed_forward": None,
    "test_ex04_feed_forward_and_norm.py::test_sublayer_connection": "Not implemented yet:",
    "test_ex05_encoder.py::test_embeddings": None,
    "test_ex05_encoder.py::test_encoder_layer": None,
    "test_ex05_encoder.py::test_encoder": "Not implemented yet:",
    "test_ex06_decoder.py::test_causal_mask": None,
    "test_ex06_decoder.py::test_decoder_layer": "Target mask used for cross-attention:",
    "test_ex07_training.py::test_make_batch": "Not implemented yet:",
    "test_ex07_training.py::test_label_smoothing_loss": "Loss counts padding:",
    "test_ex07_training.py::test_noam_lr": None,
    "test_ex07_training.py::test_train_step": "Not implemented yet:",
    "test_ex08_decoding.py::test_greedy_decode": "Not implemented yet:",
    "test_ex08_decoding.py::test_beam_search_step": "No length normalization:",
    "test_ex08_decoding.py::test_decode_step": "Not implemented yet:",
    "test_ex09_variants.py::test_lm_loss": None,
    "test_ex09_variants.py::test_mask_tokens": "Not implemented yet:",
    "test_ex09_variants.py::test_mean_pool": "Pooled over the padding too:",
    "test_ex09_variants.py::test_decoder_lm": "No causal mask: every position reads the future:",
    "test_ex10_tiled_attention.py::test_tiled_attention": "A fully masked block gives NaN:",
    "test_ex10_tiled_attention.py::test_sliding_window_mask": "Window one key too narrow:",
    "test_ex11_tokens.py::test_count_pairs": None,
    "test_ex11_tokens.py::test_merge": "The word's last token dropped:",
    "test_ex11_tokens.py::test_learn_merges": "Not implemented yet:",
    "test_ex11_tokens.py::test_encode": "Not implemented yet:",
    "test_ex11_tokens.py::test_decode": "Tokens decoded one by one: a character cut between tokens is lost:",
    "test_ex12_modern_block.py::test_rms_norm": "Computed in float16: the squares overflow:",
    "test_ex12_modern_block.py::test_swiglu": "Gate and up swapped:",
    "test_ex12_modern_block.py::test_rotate": "Not implemented yet:",
    "test_ex12_modern_block.py::test_rotary_attention": "Not implemented yet:",
    "test_ex13_small_llm.py::test_adamw_step": "Not implemented yet:",
    "test_ex13_small_llm.py::test_cosine_lr": "Warm-up off by one:",
    "test_ex13_small_llm.py::test_clip_grad_norm": None,
    "test_ex13_small_llm.py::test_param_groups": "Not implemented yet:",
    "test_ex13_small_llm.py::test_text_stream": "Not implemented yet:",
}


def run_as_learner(folder, files, env=None, args=()):
    """Run `pytest` in `folder`, which holds the exercises' checks and `files` (name ->
    source), as a learner runs it in an 80-column terminal; the finished process (stdout,
    returncode)."""
    for path in entry.exercises_dir().iterdir():
        if path.name.startswith("test_") or path.suffix in (".ini",) or path.name == "conftest.py":
            (folder / path.name).write_text(path.read_text())
    for name, source in files.items():
        (folder / name).write_text(source)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:timeout", *args], cwd=folder,
                          capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "80", **(env or {})})


def failed_blocks(run):
    """test id -> its failure as printed: the lines from 'FAILED <test> - ' to the next
    blank line, the first without that prefix."""
    blocks, current = {}, None
    for line in run.stdout.splitlines():
        if line.startswith("FAILED "):
            test, first = line.split(" ", 1)[1].split(" - ", 1)
            current = blocks[test] = [first]
        elif not line.strip():
            current = None
        elif current is not None:
            current.append(line)
    return {test: "\n".join(lines) for test, lines in blocks.items()}


def failed_lines(run):
    """test id -> the first line of its diagnosis (unwrapped)."""
    return {test: " ".join(block.split("\n  ")[0].split("\n"))
            for test, block in failed_blocks(run).items()}


def test_pytest_on_the_exercises_as_a_learner_sees_it(tmp_path):
    files = {f"{exercise}.py": _with_bodies(exercise, bodies)
             for exercise, bodies in LEARNER_FILES.items()}
    run = run_as_learner(tmp_path, files)
    failed = failed_lines(run)
    for test, expected in EXPECTED.items():
        if expected is None:
            assert f"PASSED {test}" in run.stdout, run.stdout
        else:
            assert failed[test].startswith(expected), run.stdout
    assert len(failed) == sum(e is not None for e in EXPECTED.values()), run.stdout
    assert run.returncode == 1 and "Traceback" not in run.stdout, run.stdout
    # It leads with the diagnoses: no header, each once, wrapped at word boundaries to 80 columns.
    assert run.stdout.splitlines()[1:2] == [""] and "platform" not in run.stdout, run.stdout
    assert max(len(line) for line in run.stdout.splitlines()) <= 80, run.stdout
    flat = " ".join(run.stdout.split())
    for expected in {e for e in EXPECTED.values() if e}:
        assert flat.count(expected) == list(EXPECTED.values()).count(expected), expected
    item = entry.item("ex07_training.label_smoothing_loss")
    module = entry.load_exercise(tmp_path / "ex07_training.py")
    with pytest.raises(CheckFailure) as raised:
        item.check(module.label_smoothing_loss)
    shown = failed_blocks(run)["test_ex07_training.py::test_label_smoothing_loss"]
    assert shown.split() == str(raised.value).split(), shown  # the whole diagnosis, no word cut


def test_pytest_k_selects_an_item_by_the_name_in_its_stub_and_says_when_nothing_matches(tmp_path):
    files = {f"{e}.py": (entry.exercises_dir() / f"{e}.py").read_text()
             for e in ("ex11_tokens", "ex12_modern_block")}  # the stubs
    # "RMSNorm" is test_rms_norm's item; "merge" is merge's alone, not learn_merges'.
    run = run_as_learner(tmp_path, files, args=("-k", "RMSNorm or merge"))
    assert set(failed_lines(run)) == {"test_ex12_modern_block.py::test_rms_norm",
                                      "test_ex11_tokens.py::test_merge"}, run.stdout
    run = run_as_learner(tmp_path, files, args=("test_ex12_modern_block.py", "-q", "-k", "RMSnorm2"))
    assert run.returncode == 5, run.stdout
    assert "No check matches -k 'RMSnorm2'" in run.stdout, run.stdout
    assert "test_ex12_modern_block.py: RMSNorm, SwiGLU, rotate, rotary_attention" in run.stdout


HOSTILE_RUN = {  # exercise file -> (its source, the start of every FAILED line of its tests)
    "ex01_attention.py": (
        "import os\ndef scaled_dot_product_attention(query, key, value, mask=None):\n"
        "    os._exit(0)\n",
        "Your code tried to end Python: scaled_dot_product_attention called os._exit(0)"),
    "ex02_multi_head_attention.py": ("import sys\nsys.exit(0)\n",
                                     "Your file exited while being imported: sys.exit(0)"),
    "ex03_positional_encoding.py": ("while True:\n    pass\n",
                                    "Too slow: importing ex03_positional_encoding.py did not finish"),
    "ex04_feed_forward_and_norm.py": ("class LayerNorm(\n", "Syntax error: ex04_feed_forward_and_norm.py"),
    "ex05_encoder.py": ("from tfcourse.encoder import Embeddings, Encoder, EncoderLayer\n",
                        "Reference imported: `"),
}


def test_hostile_files_under_pytest_fail_with_one_line_each_and_never_succeed(tmp_path):
    files = {name: source for name, (source, _) in HOSTILE_RUN.items()}
    run = run_as_learner(tmp_path, files, env={"TFCOURSE_CHECK_TIME_LIMIT": "1"})
    failed = failed_lines(run)
    for name, (_, expected) in HOSTILE_RUN.items():
        tests = [f for f in failed if f.startswith(f"test_{Path(name).stem}.py::")]
        assert tests and all(failed[t].startswith(expected) for t in tests), run.stdout
    assert run.returncode == 1 and " failed" in run.stdout.splitlines()[-1], run.stdout
    assert "Traceback" not in run.stdout



@pytest.mark.parametrize("got, expected, told", [
    ((1, 50, 16), (50, 16), "an extra axis of size 1 in front"),
    ((16, 50), (50, 16), "axes 0 and 1 swapped"),
    ((5, 2, 8), (2, 5, 8), "batch and sequence?"),
    ((2, 5, 4), (2, 5, 12), "an axis of size 3 (3 is the size of x's axis 1) was reduced"),
    ((2, 8), (2, 5, 8), "axis 1, of size 5, is missing"),
    ((3, 7), (3, 8), "one too few (off by one"),
    ((3, 5, 8), (2, 5, 12), "the same number of entries, grouped otherwise"),
])
def test_a_wrong_shape_says_what_it_tells(got, expected, told):
    assert told in explanation.shape_story(got, expected, [("x", torch.zeros(2, 3, 5, 4))])


def test_torch_errors_are_explained_in_the_learners_terms():
    def weight_not_transposed(x):
        return x @ torch.zeros(10, 6)

    outcome = sandbox.call(weight_not_transposed, torch.zeros(4, 6))
    with pytest.raises(CheckFailure) as raised:
        pipeline.fail_on_error(outcome, "ffn", "x (4, 6)")
    assert "its transpose (6, 10) would fit" in first_line(raised.value)


def test_a_leftover_breakpoint_is_named():
    import bdb

    def stops_in_the_debugger(x):
        raise bdb.BdbQuit  # what breakpoint() raises when no terminal answers

    outcome = sandbox.call(stops_in_the_debugger, torch.zeros(4, 6))
    with pytest.raises(CheckFailure) as raised:
        pipeline.fail_on_error(outcome, "ffn", "x (4, 6)")
    assert "breakpoint() or pdb.set_trace() left in your code" in first_line(raised.value)


# ---------------------------------------------------------------------------------------
# The hint ladder: a second hint and the notebook section, for the learner who stays stuck


def _headings(notebook):
    cells = json.loads((Path(__file__).parents[1] / "notebooks" / f"{notebook}.ipynb").read_text())
    return {line.lstrip("#").strip() for cell in cells["cells"] if cell["cell_type"] == "markdown"
            for line in "".join(cell["source"]).splitlines() if line.startswith("#")}


@pytest.mark.parametrize("item", ITEMS, ids=lambda i: i.key)
def test_every_mistake_points_to_a_section_of_its_notebook(item):
    for section in {item.section, *(m.section for m in item.catalogue.values() if m.section)}:
        assert section is not None and section[1] in _headings(section[0]), section


@pytest.mark.parametrize("item", ITEMS, ids=lambda i: i.key)
def test_every_catalogued_mistake_has_its_own_second_hint(item):
    """Its own (not the item's formula, nor its first hint again), and never the answer: no
    assignment to one of the module's attributes in it."""
    assert [k for k, m in item.catalogue.items() if not m.more] == []
    for key, mistake in item.catalogue.items():
        assert mistake.more != mistake.hint and " = self." not in mistake.more, key


def test_a_second_hint_names_the_section_that_teaches_the_step(capsys):
    def no_scaling(query, key, value, mask=None):
        return _attention(query * query.size(-1) ** 0.5, key, value, mask)

    check(no_scaling, "scaled_dot_product_attention")
    first = capsys.readouterr().out
    assert "hint 2" not in first and "read:" not in first
    check(no_scaling, "scaled_dot_product_attention", hint=2)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == first.splitlines()[0]
    assert lines[1].startswith("  hint 2: print scores.std()")
    assert lines[2] == '  read: notebooks/01_attention.ipynb, section "4. Why divide by $\\sqrt{d_k}$?"'


def test_pytest_hint_2_gives_the_second_hint(tmp_path):
    stub = (entry.exercises_dir() / "ex02_multi_head_attention.py").read_text()
    run = run_as_learner(tmp_path, {"ex02_multi_head_attention.py": stub},
                         args=("--hint=2", "test_ex02_multi_head_attention.py"))
    block = failed_blocks(run)["test_ex02_multi_head_attention.py::test_split_heads"]
    assert "\n  read: notebooks/02_multi_head_attention.ipynb, section " in block, run.stdout
