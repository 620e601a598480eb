"""A known mistake (`Mistake`: key, title, hint, and how it computes), and the mistakes
every item shares, declared once with one wording each: what goes wrong with any learner
code (in place, None, shape, too slow, ...) and with the exercise file itself."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from .diagnosis import CheckFailure, Diagnosis


@dataclass(frozen=True)
class Mistake:
    """A known mistake: a key (unique within its item), a title and a hint (never the
    answer), and how it shows.

    computes: functions with the item's mistake signature (the case's inputs; a class item's
        take the reference module first), each a way the mistake computes, so that a
        learner's result is recognised whatever their code looked like. A computation that
        raises on a case explains a learner's exception there (same type, same message).
    uses: names of torch functions whose call is this mistake (e.g. a forbidden built-in).
    probe: (case, error) -> a Case, or None. When the learner's code raises `error` on
        `case` but gets the probe (the same case, made so that this mistake cannot show)
        right, the error is this mistake's.
    more: a second hint, more concrete (still not the answer), for the learner who stays
        stuck (check(..., hint=2), pytest --hint=2); default: the item's formula.
    section: (notebook, heading) of the section that teaches the step; default: the item's.
    The title and hints may hold {fields}, filled in when the mistake is reported; a
    computation of a family (one mistake, many constants) names its member by its own
    attribute `fields`, a dict (see `member`).
    """

    key: str
    title: str
    hint: str
    computes: tuple[Callable, ...] = ()
    uses: tuple[str, ...] = ()
    probe: Callable | None = None
    more: str = ""
    section: tuple[str, str] | None = None

    def computing(self, *computes: Callable) -> Mistake:
        """The same mistake (key, title, hint), recognised by other computations."""
        return dataclasses.replace(self, computes=computes)

    def diagnosis(self, details: str = "", *, at: str = "", label: str | None = None,
                  **fields) -> Diagnosis:
        """This mistake found: its title and hint with `fields` filled in (`label`, the case,
        among them when there are fields); `details`, the lines under the first; `at`, the
        learner's line."""
        title, hint, more = self.title, self.hint, self.more
        if fields:
            fields = {"label": label or "", **fields}
            title, hint, more = title.format(**fields), hint.format(**fields), more.format(**fields)
        return Diagnosis(self.key, title, hint, details, label=label or "", at=at, more=more,
                         section=self.section)

    def fail(self, details: str = "", *, at: str = "", label: str | None = None, **fields):
        """Raise CheckFailure with this mistake's diagnosis."""
        raise CheckFailure(self.diagnosis(details, at=at, label=label, **fields))


def member(compute: Callable, **fields) -> Callable:
    """`compute`, one member of a mistake's family, with the `fields` that name it in the
    mistake's title and hints (e.g. the constant it uses)."""
    compute.fields = fields
    return compute


def laddered(mistakes, ladder: dict) -> tuple:
    """`mistakes` with their hint ladder: `ladder` maps a key to (section, second hint), the
    section (notebook, heading) or None for the item's own; a mistake not in it is unchanged."""
    return tuple(dataclasses.replace(m, section=ladder[m.key][0] or m.section, more=ladder[m.key][1])
                 if m.key in ladder else m for m in mistakes)


# Mistakes every item shares.

NOT_IMPLEMENTED = Mistake(
    "not_implemented", "Not implemented yet",
    "replace `raise NotImplementedError` in {where} with your code.")
EXITED = Mistake(
    "exited", "Your code tried to end Python",
    "{name} called {how} on {label}. That would end the checks (and a notebook's kernel): "
    "return a value, or raise an exception, instead.")
TOO_SLOW = Mistake(
    "too_slow", "Too slow",
    "{name} did not finish within {limit:g} s on {label}. An endless loop?")
RAISED = Mistake("raised", "Raised {error}", "\n  {name} failed on {label}")
RECURSION = Mistake(
    "recursion", "Endless recursion",
    "{name} kept calling itself until Python's recursion limit, on {label}. Does your `def` "
    "have the name of a function it means to call (an import, or the reference), and so call "
    "itself instead?")
IN_PLACE = Mistake(
    "in_place", "Input modified in place",
    "{name} changed the caller's {names}. Use out-of-place operations (x = x + y, not "
    "x += y; masked_fill, not masked_fill_).")
PARAMETERS_CHANGED = Mistake(
    "parameters_changed", "Parameters changed by forward",
    "forward changed the module's own {names}, so every call would change it again. Compute "
    "with the parameters; do not modify them (no self.weight *= ... or .data changes).")
NOTHING_RETURNED = Mistake(
    "nothing_returned", "Nothing returned",
    "{name} returned None on {label}: did you forget a `return`?")
WRONG_TYPE = Mistake("wrong_type", "Wrong type", "{problem} on {label}")
WRONG_SHAPE = Mistake("wrong_shape", "Wrong shape", "{problem}\n  on {label}")
WRONG_DTYPE = Mistake("wrong_dtype", "Wrong dtype", "{problem} on {label}")
NOT_FINITE = Mistake(
    "not_finite", "Not finite",
    "{what} contains {bad} at {count} of {total} entries on {label}, where the reference has "
    "none. Look for a division by zero, a log of 0, or -inf in a softmax row with no finite "
    "entry.{news}")
NO_MATCH = Mistake(
    "no_match", "Wrong {what} {prep} {label}, and no common mistake matches",
    "{difference}.{formula}")
RESEMBLES = Mistake(
    "resembles", "Wrong {what} {prep} {label}",
    "{difference}.{formula}")  # no catalogued mistake, but the result tells what it is
REFERENCE_USED = Mistake(
    "reference_used", "Reference used instead of your own code",
    "{name} runs tfcourse's own {reference}; the exercise is to write it yourself.")
RENAMED = Mistake(
    "renamed", "Parameters renamed",
    "keep __init__ as the exercise gives it: the check copies the reference's weights into "
    "your module by name; write only forward.\n  load_state_dict said: {said}")
SEQ_FIRST = Mistake(
    "seq_first", "Batch and sequence axes mixed up",
    "{name} combined sizes {a} and {b} on one axis, on {label}: {a} is {input}'s {first} and "
    "{b} its {second}. {input} is (batch, seq, ...), batch first: {input}.size(0) is the batch, "
    "{input}.size(1) the sequence length, and a (seq, d_model) table broadcasts over the batch "
    "as it is (or as table[None] / unsqueeze(0), not unsqueeze(1)): the seq-first (seq, batch, "
    "...) layout of PyTorch's tutorials does not apply here.\n  it raised {error}")
OFF_BY_ONE = Mistake(
    "off_by_one", "Off by one: the reference with {name} {moved} gives exactly your {what}",
    "{name} is a {kind}, and yours counts one {how}, on {label}: a range or a slice that "
    "starts or stops one early or late, a `< n` where `<= n` is meant, a + 1 or - 1 too many, "
    "or another library's convention (counting from 1, or including the end).")
MASK_READ_INVERTED = Mistake(
    "mask_read_inverted", "Mask read with the other polarity: {names} inverted {gives} exactly "
    "your {what}",
    "here True means 'may attend' (keep); your code treats True as 'masked out', the "
    "convention of nn.MultiheadAttention's key_padding_mask and bool attn_mask (and False as "
    "'keep', as a 0 in Hugging Face's attention_mask): use {names} as given, on {label}.")
READ_SEQ_FIRST = Mistake(
    "read_seq_first", "Batch and sequence axes mixed up: {names} read as (seq, batch, ...) "
    "{gives} exactly your {what}",
    "{names} {are} (batch, seq, ...), batch first; your code reads axis 0 as the sequence and "
    "axis 1 as the batch, the layout of nn.MultiheadAttention's default batch_first=False "
    "and of PyTorch's tutorials, on {label}.")
BATCH_OF_ONE = Mistake(
    "batch_axis_dropped", "Wrong with a batch of one only: the batch axis dropped or assumed",
    "{name} {how} on {label}, and gets the same inputs right as a batch of two: a squeeze() "
    "with no dim removes every axis of size 1, the batch's too, and an index or a loop may "
    "assume several sequences. Name the axis you mean: squeeze(-1), x[:, -1].")
LOWER_PRECISION = Mistake(
    "lower_precision", "Computed in float32: float64 inputs lose their precision",
    "your {what} equals the expected one computed in float32 (to float32's 7 digits), on "
    "{label}: float64 inputs must stay float64 throughout: no .float(), and no float32 tensor "
    "made along the way (torch.tensor and torch.zeros default to float32: pass dtype=x.dtype).")
WRONG_ORDER = Mistake(
    "results_order", "Results returned in the wrong order",
    "return ({expected}), in that order; yours are the same {how} in the order ({got}), on "
    "{label}.")
WRONG_LENGTH = Mistake("wrong_length", "Wrong length: {length}", "{story}, {prep} {label}")
SEQUENCE_DIFFERS = Mistake("sequence_differs", "Wrong {what} {prep} {label}", "{story}")
RETURN_KIND = Mistake(
    "return_kind", "Wrong kind of result: {got} returned where {want} expected",
    "{what} on {label} has the right values but the wrong kind: {why}")
STATE_KEPT = Mistake(
    "state_kept", "Right when called first, wrong after earlier calls: state kept between calls",
    "{name} gets {label} right {first}, and wrong {later}: {kept} changed from one call to the "
    "next. A mutable default argument (counts={{}}, cache=[]) is made once and shared by every "
    "call; a module-level cache or table must be keyed on everything the result depends on "
    "(not the length alone, not one argument alone), or built in each call.")
STATE_CHANGES = Mistake(
    "state_changes", "The same call gives another result the second time: state kept between calls",
    "{name} called twice on {label}, with the same inputs, gives two results: something it "
    "keeps ({kept}) carries from one call to the next (an incremental decoder never flushed, "
    "a buffer, a counter, a cache). Each call must depend on its arguments alone: build such "
    "an object in the call, or flush it (final=True) before returning.")
SHARED = (NOT_IMPLEMENTED, EXITED, TOO_SLOW, RAISED, SEQ_FIRST, BATCH_OF_ONE, LOWER_PRECISION,
          WRONG_LENGTH, SEQUENCE_DIFFERS, RETURN_KIND, STATE_KEPT, STATE_CHANGES, WRONG_ORDER, OFF_BY_ONE,
          MASK_READ_INVERTED, READ_SEQ_FIRST, RECURSION, IN_PLACE,
          PARAMETERS_CHANGED, NOTHING_RETURNED, WRONG_TYPE, WRONG_SHAPE, WRONG_DTYPE, NOT_FINITE, NO_MATCH,
          RESEMBLES, REFERENCE_USED, RENAMED)

# What can go wrong with the exercise file itself (checked before any item).
SYNTAX_ERROR = Mistake("syntax_error", "Syntax error", "{file}, line {line}: {msg}{text}")
IMPORT_FAILED = Mistake(
    "import_failed", "Your file could not be imported",
    "{file} raised {error}{where}\n  (code at the top level of the file runs when the check "
    "imports it)")
IMPORT_TOO_SLOW = Mistake(
    "import_too_slow", "Too slow",
    "importing {file} did not finish within {limit:g} s: does code at the top level of the "
    "file (outside any function) loop forever?")
IMPORT_EXITED = Mistake(
    "import_exited", "Your file exited while being imported",
    "{how} at the top level of {file}{where}. The check imports your file, which runs that "
    "line: remove it.")
MISSING = Mistake("missing", "Missing", "{file} has no `{name}`: was it renamed or deleted?{close}")
REFERENCE_IMPORTED = Mistake(
    "reference_imported", "Reference imported",
    "`{name}` in {file} is tfcourse's own {reference}, imported instead of written. Remove that "
    "import and write {name} yourself.")
NOT_CLASS = Mistake("not_class", "Wrong type", "{name} should be {kind}, got {got}")
FILE_MISTAKES = (SYNTAX_ERROR, IMPORT_FAILED, IMPORT_TOO_SLOW, IMPORT_EXITED, MISSING,
                 REFERENCE_IMPORTED, NOT_CLASS)
