"""The pipeline that every exercise check goes through: Case, Item and the order of diagnosis.

An exercise *item* (a function or class the learner writes) is declared as data in its
chapter's module: its reference, the cases it runs on, and its catalogue of mistakes, each
a `Mistake` with a key, a title, a hint and the ways it computes. `Item.check(target)`
runs the learner's `target` on every case and, on the first case where something is wrong,
fails with one message whose first line names what is wrong. The order of diagnosis is
fixed, the same for every item:

  1. Call the learner's code: a class is built (its __init__), then run (a class that is
     not an nn.Module, such as chapter 13's TextStream, is handed to the item's `run`
     as it is, which makes its objects); each call has a time limit, its prints are
     captured, randomness is seeded, exceptions are located in the learner's file, and
     sys.exit / os._exit cannot end Python.
  2. Still the stub (NotImplementedError)               -> "Not implemented yet"
  3. It tried to end Python                             -> "Your code tried to end Python"
  4. Past the time limit                                -> "Too slow"
  5. It called a built-in the item forbids, or ran the reference itself -> that mistake
  6. It raised: a catalogued mistake whose own computation raises the same way on this
     case (and not on the cases passed so far); torch's complaint that sizes do not match,
     where the sizes are one (batch, seq, ...) input's batch and sequence length -> "Batch
     and sequence axes mixed up"; else "Raised <error>" with the line, and what torch's
     common errors mean (explain_error: a weight not transposed, classes not on axis 1, ...)
  7. An input (or the module's own parameters) changed in place -> "Input modified in place"
  8. Equal to the reference                              -> the case passes
  9. It returned None                                    -> "Nothing returned"
     (A result with the reference's values in another kind, a list for a tuple, a 0-d
     tensor for a float, a list of lists for a flat list, is not equal: it goes on, and is
     named after step 10 -> "Wrong kind of result".) A function wrong here that gets the
     case right with its module's state put back, or gives another result when called
     again on the same inputs -> "state kept between calls" (state.py).
 10. A catalogued mistake computes the same result (and agrees with the reference on the
     cases passed so far; a computation equal to the reference here is not looked at)
                                                         -> its title and hint
 11. A tuple whose parts are the expected ones in another order -> "Results returned in the
     wrong order"; wrong type, shape or dtype            -> "Wrong type" / "Wrong shape" / ...
     A wrong shape says what it tells (shape_story): an extra or missing axis, axes swapped,
     an axis reduced instead of concatenated, a length off by one.
 12. NaN or inf where the reference has none             -> "Not finite"
 13. The result resembles the expected one (a constant factor or offset, an elementwise or
     monotone function, the values in another order) -> "Wrong <what> ...: your <what> is
     2 times the expected ..."
 14. Otherwise                                           -> "Wrong <what> ..., and no common
                                                            mistake matches" with the largest
                                                            difference
Catalogued mistakes come before the type, shape and dtype messages because a mistake may
change the shape (weights averaged over heads): its name says more than the shape does.
After the first line, a failure shows the case, the line of the learner's file that raised,
and what the learner's code printed (trimmed, with its size).

Mistakes shared by every item (in place, None, shape, too slow, ...) are declared once, in
mistakes.py, with one wording each. Item keys ("ex05_encoder.Encoder") and mistake keys
("ex05_encoder.Encoder.no_final_norm") are qualified by exercise; a duplicate mistake key is
an error when the item is declared.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from .comparison import (
    as_kind_of,
    clone,
    describe,
    kind_of,
    module_state,
    randomize,
    safely,
    same,
    unchanged,
    wrong_kind,
)
from .confirmation import confirmed
from .diagnosis import CheckFailure
from .errors import fail_if_stopped, fail_on_error, same_error
from .explanation import (
    case_features,
    fail_if_reordered,
    first_difference,
    news_of,
    not_finite,
    structure_problem,
)
from .gradients import NO_GRADIENT_MORE, gradient_case  # noqa: F401  (the chapters import them from here)
from .mistakes import (
    BATCH_OF_ONE,
    FILE_MISTAKES,
    IN_PLACE,
    NO_MATCH,
    NOT_FINITE,
    NOTHING_RETURNED,
    OFF_BY_ONE,
    PARAMETERS_CHANGED,
    REFERENCE_USED,
    RENAMED,
    RESEMBLES,
    RETURN_KIND,
    SHARED,
    STATE_KEPT,
    WRONG_TYPE,
    Mistake,
)
from .readings import fail_if_float32, fail_if_read_otherwise
from .sandbox import Printed, call, first_line, makes_half, seed_torch
from .state import Snapshot, fail_if_unrepeatable, vary_each_argument


@dataclass
class Case:
    """One run of an item. A function item is called as target(*args, **kwargs); a class
    item is built as target(*init, **init_kwargs), given the reference's parameters, then
    called as module(*args, **kwargs). Everything runs after torch.manual_seed(seed).

    label: how messages name the case (default: the named arguments' shapes and values).
    names: the name of each argument; an argument with a name must not be changed in place.
    train: run the modules in training mode (dropout on, the same seeded randomness).
    state: parameters for both modules (default: the reference's, randomized); dtype: theirs.
    run, mistakes, same, what, parts: this case's own, instead of the item's.
    """

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    label: str = ""
    names: tuple = ()
    init: tuple = ()
    init_kwargs: dict = field(default_factory=dict)
    state: dict = None
    dtype: torch.dtype = None
    train: bool = False
    seed: int = 0
    run: object = None
    mistakes: tuple = None
    same: object = None
    what: str = None
    parts: tuple = None

    def __post_init__(self):
        if not self.label:
            self.label = describe(**{n: a for n, a in zip(self.names, self.args) if n})


@dataclass(eq=False)
class Item:
    """An exercise item, declared as data; `check(target)` is the whole pipeline.

    exercise, name: e.g. "ex01_attention", "scaled_dot_product_attention" (the key joins them).
    reference: tfcourse's function or class.
    cases: the Cases, in order: the first that fails is reported.
    mistakes: the catalogue, tried in this order. A mistake with neither `computes` nor
        `uses` is reported only by an `after` check.
    same: compares a result with the expected one (default `same`).
    match: compares a result with a mistake's (default `same`).
    what, parts: how messages name the result, and the parts of a tuple result.
    formula: the last sentence of the fall-back message (what to compare with).
    prep, show: a failure's second line is "  {prep} {label}{show(case, result, expected)}".
    build: class items: (cls, case) -> module, run as learner code (default: cls(*init)).
    run: (obj, args, case) -> result (default obj(*args, **kwargs)).
    after: checks run once every case passed: fn(item, target), raising CheckFailure.
    section: (notebook, heading) of the section that teaches the item, e.g. ("01_attention",
        "3. Build it, one step at a time"): a failure's pointer at hint level 2.
    twins: the catalogue's copies of the reference with knobs (the computations its mistakes
        vary), every knob at its default: each must compute the reference (a meta-test).
    shifts: (argument index, name, kind) for each argument that is a length, a position, a
        step or a count (kind says which): a wrong result that the reference gives with that
        argument one more or one less is named "Off by one".
    axes: the names of the result's axes ("batch", "seq", "d_model"; of its first part for a
        tuple), so that a wrong shape or layout says which axes are swapped or merged.
    explain: (case, result, expected) -> (mistake, fields) or None: what a wrong result
        tells when no catalogued mistake matches (chapter 11's sequences: sequences.py).
    again: once all passed, run every case once more, in reverse order, from the state before
        the first: a function right in one order and wrong in the other keeps state.
    """

    exercise: str
    name: str
    reference: object
    cases: list
    mistakes: tuple = ()
    same: object = same
    match: object = None
    what: str = "output"
    parts: tuple = ()
    formula: str = ""
    prep: str = "on"
    show: object = None
    build: object = None
    run: object = None
    after: tuple = ()
    twins: tuple[Callable, ...] = ()
    section: tuple[str, str] | None = None
    shifts: tuple[tuple[int, str, str], ...] = ()
    axes: tuple[str, ...] = ()
    explain: object = None
    again: bool = False
    _results: dict = field(default_factory=dict, init=False, repr=False)
    _snapshot: Snapshot | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        declared = [*self.mistakes, *(m for case in self.cases for m in case.mistakes or ())]
        distinct = {id(m): m for m in declared}.values()
        keys = [m.key for m in distinct] + [m.key for m in (*SHARED, *FILE_MISTAKES)]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise ValueError(f"{self.key}: duplicate mistake keys {duplicates}")

    @property
    def key(self) -> str:
        return f"{self.exercise}.{self.name}"

    @property
    def is_class(self) -> bool:
        return isinstance(self.reference, type)

    @property
    def is_module(self) -> bool:
        """A class item whose objects are nn.Modules (built, given the reference's parameters,
        then called); other class items are handed to `run` as classes."""
        return self.is_class and issubclass(self.reference, nn.Module)

    @property
    def catalogue(self) -> dict[str, Mistake]:
        """Every catalogued mistake of the item (the cases' own included), by key."""
        found = {}
        for m in (*self.mistakes, *(m for c in self.cases for m in c.mistakes or ())):
            found.setdefault(m.key, m)
        return found

    def reference_code(self):
        """The code objects whose running means the learner called the reference."""
        if self.is_class and not self.is_module:  # every method of a plain class
            return {f.__code__ for f in vars(self.reference).values() if inspect.isfunction(f)}
        target = self.reference.forward if self.is_class else self.reference
        return {inspect.unwrap(target).__code__}

    def fail(self, mistake: Mistake, case: Case, result=None, expected=None, **fields):
        """Report `mistake` on `case`, with the usual second line."""
        mistake.fail(self._details(case, result, expected), label=case.label, **fields)

    def mistake_cases(self, mistake: Mistake) -> list[Case]:
        """The cases on which `mistake` is looked for."""
        return [c for c in self.cases if mistake in (self.mistakes if c.mistakes is None else c.mistakes)]

    def computes_expected(self, compute: Callable, case: Case, margin: float = 1.0) -> bool:
        """Whether `compute` (a computation with the mistakes' signature) gives the
        reference's result on `case`, by the comparison that names mistakes (the default
        one's tolerances times `margin`)."""
        reference = self._reference_object(case)
        try:
            result = self._compute(compute, reference, case)
        except Exception:
            return False
        compare = self.match or case.same or self.same
        if compare is same:
            compare = functools.partial(same, margin=margin)
        return safely(compare, result, self._expected(reference, case))

    # -- the pipeline ---------------------------------------------------------------------

    def check(self, target: Callable) -> None:
        """Run `target` on every case; raise CheckFailure naming the first thing wrong (its
        second hint and section default to the item's formula and section)."""
        watch = () if target is self.reference else self.reference_code()
        self._snapshot = None if target is self.reference else Snapshot(target)
        passed = []
        try:
            for case in self.cases:
                self._check_case(target, case, passed, watch)
                passed.append(case)
            if self.again and self._snapshot is not None:
                self._check_again(target, passed)
            for check_after in self.after:
                check_after(self, target)
        except CheckFailure as failure:
            found = failure.diagnosis
            more = found.more or (self.formula if self.formula not in found.text() else "")
            raise CheckFailure(dataclasses.replace(
                found, more=more, section=found.section or self.section)) from None

    def _check_case(self, target, case, passed, watch):
        mistakes = self.mistakes if case.mistakes is None else case.mistakes
        reference = self._reference_object(case)
        expected = self._expected(reference, case)  # first: torch's one-off start-up is not timed
        printed = Printed()
        try:
            obj = self._learner_object(target, case, watch, printed)
            given = clone(case.args)
            before = module_state(obj) if isinstance(obj, nn.Module) else None
            outcome = call(self._run, obj, given, case, seed=case.seed, watch=watch, printed=printed,
                           record=any(m.uses for m in mistakes))
            self._diagnose(outcome, case, passed, mistakes, reference, expected, given, before, obj)
        except CheckFailure as failure:
            found = dataclasses.replace(failure.diagnosis, printed=printed.getvalue())
            raise CheckFailure(found) from None

    def _reference_object(self, case):
        if not self.is_module:
            return self.reference
        with torch.random.fork_rng(devices=[]):
            seed_torch(case.seed)
            module = (self.build or _construct)(self.reference, case)
        if case.dtype is not None:
            module.to(case.dtype)
        if case.state is None:
            randomize(module, case.seed)
        else:
            module.load_state_dict(case.state)
        return module.train(case.train)

    def _remembered(self, case, key, compute):
        """compute(), or what it gave (or raised) before for `case`: the reference's and the
        mistakes' results are the same on every check, and computing them is most of a
        check's time."""
        if not any(c is case for c in self.cases):  # a probe: made for one check only
            return compute()
        memo = (id(case), key)
        if memo not in self._results:
            try:
                self._results[memo] = (True, compute())
            except Exception as error:  # the mistake cannot run here: that is remembered too
                self._results[memo] = (False, error)
        ok, value = self._results[memo]
        if not ok:
            raise value.with_traceback(None)
        return value

    def _expected(self, reference, case):
        def compute():
            with torch.random.fork_rng(devices=[]):
                seed_torch(case.seed)
                return self._run(reference, clone(case.args), case)

        return self._remembered(case, "expected", compute)

    def _learner_object(self, target, case, watch, printed):
        """The learner's function, or the learner's class built (as learner code) and
        given the reference's parameters (a plain class: as it is, for `run`)."""
        if not self.is_module:
            return target
        init = ", ".join([*map(repr, case.init), *(f"{k}={v!r}" for k, v in case.init_kwargs.items())])
        name = f"{self.name}({init})"
        built = call(self.build or _construct, target, case, seed=case.seed, watch=watch,
                     printed=printed)
        self._fail_on_error(built, name, f"{self.name}.__init__", case, (), ())
        module = built.value
        if not isinstance(module, nn.Module):
            WRONG_TYPE.fail(problem=f"{name} should build an nn.Module, got {kind_of(module)}",
                            label=case.label)
        _prepare(module, case, self._reference_object(case))
        return module

    def _run(self, obj, args, case):
        run = case.run or self.run
        if run is not None:
            return run(obj, args, case)
        return obj(*args, **case.kwargs)

    def _compute(self, compute, reference, case):
        """What `compute` (a mistake's) gives on `case`, seeded like the learner's run."""

        def run():
            args = clone(case.args)
            with torch.random.fork_rng(devices=[]):
                seed_torch(case.seed)
                if self.is_class:
                    return compute(reference, *args, **case.kwargs)
                return compute(*args, **case.kwargs)

        return self._remembered(case, compute, run)

    def _agrees(self, mistake, compute, passed, kind, values=True):
        """Whether `compute` runs on every case passed so far (of those of the same `kind`,
        where `mistake` is looked for) and, with `values`, gives the reference's result there:
        a mistake that would have failed earlier is not this one."""
        for case in passed:
            if (case.run or self.run) is not kind or mistake not in (
                    self.mistakes if case.mistakes is None else case.mistakes):
                continue
            reference = self._reference_object(case)
            try:
                result = self._compute(compute, reference, case)
            except Exception:
                return False
            if values and not safely(self.match or case.same or self.same, result,
                                      self._expected(reference, case)):
                return False
        return True

    def _matching(self, mistakes, result, reference, case, passed, obj=None):
        """The first mistake that computes `result` on this case and the reference's result
        on the cases passed so far, and that computation, or (None, None). For a function
        (`obj`: the learner's), every such mistake is a candidate that the later cases
        confirm or contradict (confirmation.confirmed)."""
        compare = self.match or case.same or self.same
        expected = self._expected(reference, case)
        found = []  # (mistake, a computation of it that gives `result`)
        for mistake in mistakes:
            for compute in mistake.computes:
                try:
                    predicted = self._compute(compute, reference, case)
                except Exception:  # the mistake cannot run on these inputs
                    continue
                if safely(case.same or self.same, predicted, expected):
                    continue  # no mistake here: a looser `match` (or a result of the wrong kind)
                if safely(compare, result, predicted) and self._agrees(
                        mistake, compute, passed, case.run or self.run):
                    found.append((mistake, compute))
            if found and (obj is None or self.is_module):
                break
        if obj is None or self.is_module:
            return found[0] if found else (None, None)
        return confirmed(self, found, obj, case)

    def _raising(self, mistakes, error, reference, case, passed):
        """The first mistake whose own computation raises like `error` on this case, and
        runs on the cases passed so far, and that computation, or (None, None)."""
        for mistake in mistakes:
            for compute in mistake.computes:
                try:
                    self._compute(compute, reference, case)
                except Exception as own:
                    if same_error(error, own) and self._agrees(
                            mistake, compute, passed, case.run or self.run, values=False):
                        return mistake, compute
        return None, None

    def _shown(self, case, result=None, expected=None):
        """What the item's `show` says of a result ('' when the result cannot be shown)."""
        if self.show is None:
            return ""
        try:
            return self.show(case, result, expected)
        except Exception:  # the learner's result cannot be shown
            return ""

    def _details(self, case, result=None, expected=None):
        return f"  {self.prep} {case.label}{self._shown(case, result, expected)}"

    def _probing(self, mistakes, error, case, obj):
        """The first mistake whose probe the learner's code gets right, or None."""
        for mistake in mistakes:
            probe = mistake.probe(case, error) if mistake.probe is not None else None
            if probe is None:
                continue
            expected = self._expected(self._reference_object(probe), probe)
            outcome = call(self._run, obj, clone(probe.args), probe, seed=probe.seed)
            if outcome.error is None and safely(probe.same or self.same, outcome.value, expected):
                return mistake
        return None

    def _fail_on_error(self, outcome, name, where, case, mistakes, passed, reference=None, obj=None):
        """Steps 2-6 for one call: stub, exit, time limit, forbidden calls, exceptions."""
        error = outcome.error
        fail_if_stopped(outcome, name, where, case.label)
        for mistake in mistakes:
            if set(mistake.uses) & outcome.torch_calls:
                mistake.fail(f"  on {case.label}", label=case.label)
        if outcome.reference_ran:
            ref = self.reference
            REFERENCE_USED.fail(name=self.name, reference=f"{ref.__module__}.{ref.__qualname__}")
        if error is None:
            return
        if reference is not None:
            self._fail_if_state_kept(obj, case, passed, name, "with its state as before the first case")
            mistake, compute = self._raising(mistakes, error, reference, case, passed)
            mistake = mistake or self._probing(mistakes, error, case, obj)
            if mistake is not None:  # a computation of a family says which member it is
                mistake.fail(f"{self._details(case)}\n  it raised {type(error).__name__}: "
                             f"{first_line(error)}", at=outcome.where, label=case.label,
                             **getattr(compute, "fields", {}))
            self._fail_if_batch_of_one(obj, case, name, f"raised {type(error).__name__}",
                                       f"\n  it raised {type(error).__name__}: {first_line(error)}")
        fail_on_error(outcome, name, case.label, _inputs(case), news=news_of(case, passed))

    def _diagnose(self, outcome, case, passed, mistakes, reference, expected, given, before, obj):
        name = f"{self.name}.forward" if self.is_module else self.name
        self._fail_on_error(outcome, name, name, case, mistakes, passed, reference, obj)
        changed = [n for n, a, b in zip(case.names, given, case.args) if n and not unchanged(a, b)]
        if changed:
            IN_PLACE.fail(name=name, names=" and ".join(changed), label=case.label)
        if before is not None:
            moved = [k for k, v in module_state(obj).items() if k in before and not unchanged(v, before[k])]
            if moved:
                PARAMETERS_CHANGED.fail(f"  on {case.label}", names=", ".join(moved), label=case.label)
        result, compare = outcome.value, case.same or self.same
        kind = wrong_kind(result, expected, case.what or self.what)  # right values, wrong kind
        kind = kind and safely(compare, as_kind_of(result, expected), expected) and kind
        if not kind and safely(compare, result, expected):
            return
        self._fail_if_state_kept(obj, case, passed, name, "with its state as before the first case")
        fail_if_unrepeatable(self, obj, case, result, name)
        mistake, compute = self._matching(mistakes, result, reference, case, passed, obj)
        if mistake is not None:  # a computation of a family says which member it is (`fields`)
            mistake.fail(self._details(case, result, expected), label=case.label,
                         **getattr(compute, "fields", {}))
        if kind:
            RETURN_KIND.fail(label=case.label, got=kind[0], want=kind[1], what=kind[2], why=kind[3])
        if result is None and expected is not None:
            NOTHING_RETURNED.fail(name=name, label=case.label)
        try:
            told = self.explain and self.explain(case, result, expected)
        except Exception:  # a learner's result the explanation cannot read
            told = None
        if told:
            told[0].fail(self._details(case), label=case.label, **told[1])
        what, parts = case.what or self.what, case.parts or self.parts
        self._fail_if_batch_of_one(obj, case, name, f"got the {what.removeprefix('the ')} wrong")
        self._fail_if_shifted(result, reference, case, what)
        fail_if_read_otherwise(self, result, reference, case, what)
        fail_if_float32(self, result, reference, case, what)
        problem = structure_problem(result, expected, what, parts, _inputs(case), self.axes)
        if problem:
            fail_if_reordered(result, expected, what, parts, compare, case.label)
            problem[0].fail(problem=problem[1], label=case.label)
        news = news_of(case, passed)
        bad = not_finite(result, expected, what, parts)
        if bad:
            NOT_FINITE.fail(what=bad[0], bad=bad[1], count=bad[2], total=bad[3], label=case.label,
                            news=news)
        what, diff, told = first_difference(result, expected, what, parts, self.axes)
        if "rounding noise" in diff and not self._makes_half(obj, case):  # a story told only if true
            what, diff, told = first_difference(result, expected, what, parts, self.axes, rounding=False)
        shown = self._shown(case, result, expected)
        details = shown if shown.startswith("\n") else shown and "  " + shown.lstrip()
        (RESEMBLES if told else NO_MATCH).fail(
            details, what=what, prep=self.prep, label=case.label, difference=diff,
            formula=news + (f" {self.formula}" if self.formula else ""))

    def _fail_if_state_kept(self, obj, case, passed, name, first, later="after the earlier cases ran"):
        """STATE_KEPT when the learner's code, wrong on `case` (or raising) after the cases
        `passed`, gets it right once its module's state is put back as it was before them."""
        kept = self._snapshot.changed() if self._snapshot is not None and passed else []
        if not kept:
            return
        self._snapshot.restore()
        outcome = call(self._run, obj, clone(case.args), case, seed=case.seed)
        if outcome.error is None and safely(case.same or self.same, outcome.value,
                                            self._expected(self._reference_object(case), case)):
            STATE_KEPT.fail(self._details(case), name=name, first=first, later=later,
                            kept=" and ".join(kept), label=case.label)

    def _makes_half(self, obj, case):
        """Whether the learner's code makes a float16 or bfloat16 tensor on `case`."""
        outcome = call(lambda: makes_half(lambda: self._run(obj, clone(case.args), case)), seed=case.seed)
        return outcome.error is None and outcome.value

    def _check_again(self, target, passed):
        """A function's cases once more, in reverse order, from the state before the first
        (`again`): what a call leaves for the next now comes from other cases."""
        self._snapshot.restore()
        for case in passed[::-1]:
            outcome = call(self._run, target, clone(case.args), case, seed=case.seed)
            if outcome.error is None and safely(case.same or self.same, outcome.value,
                                                self._expected(self._reference_object(case), case)):
                continue
            kept = " and ".join(self._snapshot.changed()) or "something it keeps"
            STATE_KEPT.fail(self._details(case), name=self.name, first="in the cases' order",
                            later="in reverse order, from the state before the first case", kept=kept,
                            label=case.label)
        vary_each_argument(self, target, passed)

    def _fail_if_batch_of_one(self, obj, case, name, how, raised=""):
        """BATCH_OF_ONE when the case is a batch of one and the learner's code gets it right
        with the batch doubled (every input whose first axis is 1, twice)."""
        if obj is None or "batch1" not in case_features(case.args, case.train):
            return
        def double(a):
            return torch.cat((a, a)) if isinstance(a, torch.Tensor) and a.dim() >= 2 and a.size(0) == 1 else a

        probe = dataclasses.replace(case, args=tuple(map(double, case.args)),
                                    kwargs={k: double(v) for k, v in case.kwargs.items()})
        try:
            expected = self._expected(self._reference_object(probe), probe)
        except Exception:  # the reference refuses the doubled inputs
            return
        outcome = call(self._run, obj, clone(probe.args), probe, seed=probe.seed)
        if outcome.error is None and safely(self.same, outcome.value, expected):
            BATCH_OF_ONE.fail(self._details(case) + raised, name=name, how=how, label=case.label)

    def _default(self, name):
        """The default of the reference's argument `name`, or None."""
        try:
            function = self.reference.forward if self.is_module else self.reference
            default = inspect.signature(function).parameters[name].default
        except (KeyError, TypeError, ValueError):  # no such argument, or no signature
            return None
        return None if default is inspect.Parameter.empty else default

    def _fail_if_shifted(self, result, reference, case, what):
        """OFF_BY_ONE when `result` is the reference's with one of the item's `shifts` (a
        length, position, step or count) one more or one less."""
        for index, name, kind in self.shifts:
            value = (case.args[index] if index < len(case.args)
                     else case.kwargs.get(name, self._default(name)))
            if isinstance(value, bool) or not isinstance(value, (int, torch.Tensor)):
                continue
            for delta in (1, -1):
                moved = value + delta
                args = list(case.args)
                if index < len(args):
                    args[index] = moved
                shifted = dataclasses.replace(case, args=tuple(args), kwargs={
                    **case.kwargs, **({} if index < len(case.args) else {name: moved})})
                try:
                    expected = self._expected(reference, shifted)
                except Exception:  # the reference refuses the shifted value
                    continue
                if safely(case.same or self.same, result, expected):
                    sign = "+" if delta > 0 else "-"
                    OFF_BY_ONE.fail(self._details(case, result), what=what.removeprefix("the "),
                                    name=name, kind=kind,
                                    moved=f"= {moved} (not {value})" if isinstance(value, int)
                                    else f"{sign} 1 (not {name})", label=case.label,
                                    how="too many" if delta > 0 else "too few")



def _inputs(case):
    """(name, tensor) for each named tensor argument of `case`."""
    return [(n, a) for n, a in zip(case.names, case.args) if n and isinstance(a, torch.Tensor)]


def _construct(cls, case):
    return cls(*case.init, **case.init_kwargs)


def _prepare(module, case, reference):
    """The learner's module with the reference's parameters, in the case's mode."""
    state = reference.state_dict()
    try:
        if case.dtype is not None:
            module.to(case.dtype)
        module.load_state_dict(state)
    except Exception as error:
        said = " ".join(str(error).strip().splitlines()[:3])[:300]
        RENAMED.fail(said=said)
    module.train(case.train)
