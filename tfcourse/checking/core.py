"""The pipeline that every exercise check goes through.

An exercise *item* (a function or class the learner writes) is declared as data in its
chapter's module: its reference, the cases it runs on, and its catalogue of mistakes, each
a `Mistake` with a key, a title, a hint and the ways it computes. `Item.check(target)`
runs the learner's `target` on every case and, on the first case where something is wrong,
fails with one message whose first line names what is wrong. The order of diagnosis is
fixed, the same for every item:

  1. Call the learner's code: a class is built (its __init__), then run; each call has a
     time limit, its prints are captured, randomness is seeded, exceptions are located in
     the learner's file, and sys.exit / os._exit cannot end Python.
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
 10. A catalogued mistake computes the same result (and agrees with the reference on the
     cases passed so far)                                -> its title and hint
 11. A tuple whose parts are the expected ones in another order -> "Results returned in the
     wrong order"; wrong type, shape or dtype            -> "Wrong type" / "Wrong shape" / ...
     A wrong shape says what it tells (shape_story): an extra or missing axis, axes swapped,
     an axis reduced instead of concatenated, a length off by one.
 12. NaN or inf where the reference has none             -> "Not finite"
 13. Otherwise                                           -> "Wrong <what> ..., and no common
                                                            mistake matches" with the largest
                                                            difference
Catalogued mistakes come before the type, shape and dtype messages because a mistake may
change the shape (weights averaged over heads): its name says more than the shape does.
After the first line, a failure shows the case, the line of the learner's file that raised,
and what the learner's code printed (trimmed, with its size).

Mistakes shared by every item (in place, None, shape, too slow, ...) are declared once,
below, with one wording each. Item keys ("ex05_encoder.Encoder") and mistake keys
("ex05_encoder.Encoder.no_final_norm") are qualified by exercise; a duplicate is an error
at import time.
"""

import contextlib
import copy
import dataclasses
import difflib
import functools
import hashlib
import importlib.util
import inspect
import io
import itertools
import linecache
import math
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.fx.experimental.symbolic_shapes  # noqa: F401  (see below)
from torch import nn
from torch.overrides import TorchFunctionMode

# Under a TorchFunctionMode, torch.broadcast_shapes (which learner code may call) imports sympy
# lazily (about 1 s). Imported here, so that the time limit can never interrupt that import
# halfway and break torch.

# Seconds one call of learner code may take before it is reported as an endless loop.
TIME_LIMIT = float(os.environ.get("TFCOURSE_CHECK_TIME_LIMIT", "10"))


class CheckFailure(AssertionError):
    """A failed check. The first line of the message names the mistake; `key` is the
    mistake's key (e.g. "in_place", or "no_scaling" for a catalogued one)."""

    def __init__(self, message, key=None):
        super().__init__(message)
        self.key = key


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
    The title and hint may hold {fields}, filled in when the mistake is reported.
    """

    key: str
    title: str
    hint: str
    computes: tuple = ()
    uses: tuple = ()
    probe: object = None

    def computing(self, *computes):
        """The same mistake (key, title, hint), recognised by other computations."""
        return dataclasses.replace(self, computes=computes)

    def message(self, details="", **fields):
        text = self.title + ("" if self.hint.startswith("\n") else ": ") + self.hint
        if fields:
            text = text.format(**fields)
        return text + (f"\n{details}" if details else "")

    def fail(self, details="", **fields):
        raise CheckFailure(self.message(details, **fields), self.key)


# ---------------------------------------------------------------------------------------
# Mistakes every item shares: one wording each.

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
    "entry.")
NO_MATCH = Mistake(
    "no_match", "Wrong {what} {prep} {label}, and no common mistake matches",
    "{difference}.{formula}")
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
WRONG_ORDER = Mistake(
    "results_order", "Results returned in the wrong order",
    "return ({expected}), in that order; yours are the same {how} in the order ({got}), on "
    "{label}.")
SHARED = (NOT_IMPLEMENTED, EXITED, TOO_SLOW, RAISED, SEQ_FIRST, WRONG_ORDER, RECURSION, IN_PLACE,
          PARAMETERS_CHANGED, NOTHING_RETURNED, WRONG_TYPE, WRONG_SHAPE, WRONG_DTYPE, NOT_FINITE, NO_MATCH,
          REFERENCE_USED, RENAMED)

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


# ---------------------------------------------------------------------------------------
# Calling learner code


class _Timeout(BaseException):
    """Raised inside learner code by the alarm; BaseException so `except Exception` can't eat it."""


class _Exited(BaseException):
    """Raised by os._exit while learner code runs, instead of ending Python."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


@contextlib.contextmanager
def _time_limit(seconds):
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:  # Windows, or not the main thread: no limit rather than no check
        yield
        return

    def alarm(signum, frame):
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, alarm)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)  # e.g. pytest-timeout's alarm
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:  # give the outer alarm back what is left of it
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 1e-3))


@contextlib.contextmanager
def _no_exit():
    """os._exit raises _Exited instead of ending Python (sys.exit raises SystemExit anyway)."""
    import posix

    def refuse(code=0):
        raise _Exited(code)

    saved = os._exit, posix._exit
    os._exit = posix._exit = refuse
    try:
        yield
    finally:
        os._exit, posix._exit = saved


class _TorchCalls(TorchFunctionMode):
    """Records the name of every torch function called: how a check sees a built-in used."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.add(getattr(func, "__name__", repr(func)))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _watching(codes):
    """Notes whether any of the code objects `codes` runs (a reference called by the learner)."""
    ran = []
    if not codes:
        yield ran
        return
    previous = sys.getprofile()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            ran.append(frame.f_code)

    sys.setprofile(profile)
    try:
        yield ran
    finally:
        sys.setprofile(previous)


class _Printed(io.StringIO):
    """What learner code prints (a StringIO: prints cost little, even many)."""

    def report(self, shown=5):
        """'  your code printed 3 lines:' and the first `shown` of them, or ''."""
        text = self.getvalue()
        if not text:
            return ""
        lines = text.splitlines()
        size = f"{len(lines):,} line{'s' * (len(lines) != 1)}"
        if len(text) > 2000:
            size += f", {len(text):,} characters"
        head = "\n    ".join(line[:160] + (" ..." if len(line) > 160 else "") for line in lines[:shown])
        more = f"\n    ... ({len(lines) - shown:,} more)" if len(lines) > shown else ""
        return f"\n  your code printed {size}:\n    {head}{more}"


def _seed(seed):
    """torch.manual_seed for the CPU only (which is all the checks use): 100 times faster."""
    torch.default_generator.manual_seed(seed)


@dataclass
class Outcome:
    """What one call of learner code did."""

    value: object = None
    error: BaseException = None
    where: str = ""  # "line 12 of ex01_attention.py: `scores = ...`"
    qualname: str = ""  # the learner's function that raised, e.g. "LayerNorm.forward"
    raised_here: bool = False  # the `raise` itself is in the learner's code (a stub's is)
    printed: _Printed = field(default_factory=_Printed)
    torch_calls: frozenset = frozenset()
    reference_ran: bool = False


def call(fn, *args, seed=None, watch=(), printed=None, record=False, **kwargs):
    """Call learner code: time limit, prints captured, exceptions caught and located, no
    exit from Python; with `seed`, torch's randomness seeded (and the caller's left alone);
    `watch`: code objects whose running is noted (outcome.reference_ran); `printed`: a
    capture to add the prints to (one report for several calls); `record`: note the names
    of the torch functions called (outcome.torch_calls)."""
    outcome = Outcome(printed=printed if printed is not None else _Printed())
    calls = _TorchCalls() if record else contextlib.nullcontext()
    rng = torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
    ran = []
    try:
        with contextlib.redirect_stdout(outcome.printed), contextlib.redirect_stderr(outcome.printed):
            with rng, _no_exit(), _watching(frozenset(watch)) as ran:
                if seed is not None:
                    _seed(seed)
                with _time_limit(TIME_LIMIT), calls:
                    outcome.value = fn(*args, **kwargs)
    except _Timeout as error:
        outcome.error = error
    except (Exception, SystemExit, _Exited) as error:  # anything the learner's code raises
        outcome.error = error
        outcome.where, outcome.qualname, outcome.raised_here = _learner_frame(error)
    outcome.torch_calls = frozenset(calls.names) if record else frozenset()
    outcome.reference_ran = bool(ran)
    return outcome


_NOT_LEARNER = tuple(
    str(Path(p).resolve())
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, Path(torch.__file__).parent,
              Path(__file__).resolve().parents[1]}
)


@functools.lru_cache(maxsize=1024)
def _is_learner_file(filename):
    if filename.startswith("<frozen") or filename.startswith("<string"):
        return False
    try:
        resolved = str(Path(filename).resolve())
    except (OSError, ValueError):
        return True
    return not resolved.startswith(_NOT_LEARNER)


def _learner_frame(error):
    """The deepest line of the traceback in the learner's code (not torch's, not tfcourse's,
    not Python's): where, the name of its function, and whether the exception was raised
    there (rather than deeper, in torch or tfcourse)."""
    tb, last, deepest = error.__traceback__, None, None
    while tb is not None:
        deepest = tb
        if _is_learner_file(tb.tb_frame.f_code.co_filename):
            last = tb
        tb = tb.tb_next
    if last is None:
        return "", "", False
    code = last.tb_frame.f_code
    line = linecache.getline(code.co_filename, last.tb_lineno).strip()
    where = f"line {last.tb_lineno} of {Path(code.co_filename).name}: `{line}`"
    return where, getattr(code, "co_qualname", code.co_name), last is deepest


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def _same_error(a, b):
    """Same exception type and the same first line of message (whatever the class is called:
    "'MyEncoder' object has no attribute ..." is the same as "'Encoder' object ...")."""

    def text(error):
        return re.sub(r"^'\w+' object", "object", _first_line(error))

    return type(a) is type(b) and text(a) == text(b)


_SHAPE_WORDS = re.compile(r"size|shape|dimension|broadcast|expand|must match|out of range")


def shape_error(error):
    """Whether `error` is torch's (or the reference's) complaint about sizes or shapes."""
    return isinstance(error, (RuntimeError, ValueError, IndexError)) and bool(
        _SHAPE_WORDS.search(_first_line(error)))


_BROADCAST = re.compile(r"The size of tensor a \((\d+)\) must match the size of tensor b "
                        r"\((\d+)\) at non-singleton dimension (\d+)")
_MATMUL = re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)")
_AXIS_NAMES = ("batch size", "sequence length")


def _batch_and_seq(a, b, inputs):
    """(input, a's axis, b's axis) when sizes a and b are the batch (axis 0) and sequence
    (axis 1) of one (batch, seq, ...) input, each size found nowhere else among the inputs."""
    if a == b:
        return None
    for name, t in inputs:
        if t.dim() >= 3 and {a, b} == {t.shape[0], t.shape[1]}:
            found = [s for _, u in inputs for s in u.shape]
            if found.count(a) == 1 and found.count(b) == 1:
                return name, int(t.shape[1] == a), int(t.shape[1] == b)
    return None


def explain_error(error, inputs=()):
    """What a common torch error means in the learner's terms: ' (...)' or ''."""
    if type(error).__name__ == "BdbQuit":
        return (" (a breakpoint() or pdb.set_trace() left in your code: the check runs without a "
                "terminal, so the debugger quits at once: remove it, or print what you want to see)")
    text = _first_line(error)
    found = _BROADCAST.search(text)
    if found:
        a, b, dim = map(int, found.groups())
        if 0 in (a, b):
            return (f" (one of the two tensors is empty along axis {dim}: a slice whose end is "
                    "not after its start?)")
        said = [f"{size}{_sizes_of(size, inputs).replace(f'{size} is ', '')}" for size in (a, b)]
        return (f" (two tensors whose axis {dim} has {said[0]} and {said[1]} entries were "
                "combined: each axis of the two must be equal, or 1 to broadcast)")
    found = _MATMUL.search(text)
    if found:
        rows, inner, given, cols = map(int, found.groups())
        if cols == inner:
            return (f" (a ({rows}, {inner}) matrix times a ({given}, {cols}) one: the inner sizes "
                    f"{inner} and {given} differ, and its transpose ({cols}, {given}) would fit: "
                    "nn.Linear's weight is (out_features, in_features): x @ layer.weight.T, or "
                    "call the layer, layer(x))")
        return (f" (a ({rows}, {inner}) matrix times a ({given}, {cols}) one: the inner sizes "
                f"{inner} and {given} must be equal)")
    if "Boolean value of Tensor with more than one value is ambiguous" in text:
        return (" (a tensor used where Python wants one True or False: `if`, `and`/`or`, Python's "
                "max() or min(): use torch.maximum, torch.where, .any() or .all())")
    if re.search(r"expected (scalar type|m1 and m2 to have the same dtype)|"
                 r"expected both vectors to have same dtype|same dtype", text):
        return (" (tensors of two dtypes met: make new tensors with the inputs' dtype, "
                "dtype=x.dtype: torch.tensor and torch.arange default to float32 or int64)")
    if "Dimension out of range" in text:
        return " (an axis beyond the tensor's number of axes)"
    if "view size is not compatible" in text:
        return " (view after a transpose: use reshape, or .contiguous().view(...))"
    if re.search(r"shape '\[[\d, -]+\]' is invalid for input of size", text):
        return " (a view or reshape whose sizes do not multiply to the tensor's number of entries)"
    if "Expected target size" in text:
        return (" (F.cross_entropy takes the classes on axis 1: flatten the logits to (N, V) and "
                "the targets to (N,), or move the classes: logits.transpose(1, 2))")
    if re.search(r"Expected input batch_size \(\d+\) to match target batch_size", text):
        return (" (the logits and the targets give different numbers of positions: slice, and "
                "flatten, both the same way)")
    if "Index tensor must have the same number of dimensions" in text:
        return " (gather's index needs as many axes as the tensor: index.unsqueeze(-1))"
    if isinstance(error, TypeError) and "must be Tensor, not tuple" in text:
        return (" (a tuple where a tensor is wanted: a function that returns (output, weights) "
                "needs its [0])")
    return ""


def _exit_how(error):
    if isinstance(error, _Exited):
        return f"os._exit({error.code})"
    code = error.code
    return "sys.exit()" if code is None else f"sys.exit({code!r})"


# ---------------------------------------------------------------------------------------
# Comparing results


def describe(**values):
    """'query (2, 5, 8), mask (2, 1, 7)': how messages name the inputs of a case."""
    return ", ".join(
        f"{n} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else f"{n}={t!r}"
        for n, t in values.items()
        if t is not None
    )


def close(actual, expected):
    """Same shape, dtype and values (NaN equal to NaN), with a tolerance for the dtype."""
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
        return False
    if actual.dtype != expected.dtype:
        return False
    if not expected.is_floating_point():
        return torch.equal(actual, expected)
    tol = 1e-10 if expected.dtype == torch.float64 else 1e-5
    return torch.allclose(actual, expected, rtol=100 * tol, atol=tol, equal_nan=True)


def same(actual, expected):
    """Default comparison: tensors by `close`, tuples and lists part by part, numbers by
    value, dataclasses field by field, anything else by ==."""
    if isinstance(expected, torch.Tensor):
        return close(actual, expected)
    if expected is None:
        return actual is None
    if isinstance(expected, (tuple, list)):
        return (isinstance(actual, (tuple, list)) and len(actual) == len(expected)
                and all(same(a, e) for a, e in zip(actual, expected)))
    if dataclasses.is_dataclass(expected):
        return all(same(getattr(actual, f.name, _ABSENT), getattr(expected, f.name))
                   for f in dataclasses.fields(expected))
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return (isinstance(actual, (int, float)) and not isinstance(actual, bool)
                and math.isclose(actual, expected, rel_tol=1e-6, abs_tol=1e-12))
    return actual == expected


_ABSENT = object()


def _safely(compare, actual, expected):
    """compare(actual, expected), False when learner objects make the comparison fail."""
    try:
        return bool(compare(actual, expected))
    except Exception:
        return False


def _kind(value):
    return "None" if value is None else type(value).__name__


def _axis(i, ndim):
    return "the first axis" if i == 0 else "the last axis" if i == ndim - 1 else f"axis {i}"


def _sizes_of(size, inputs):
    """' (3 is the size of x's axis 1)' when exactly one input axis has that size, else ''."""
    hits = [f"{name}'s axis {i}" for name, t in inputs if isinstance(t, torch.Tensor)
            for i, s in enumerate(t.shape) if s == size]
    return f" ({size} is the size of {hits[0]})" if len(hits) == 1 else ""


def shape_story(got, expected, inputs=()):
    """What a wrong shape tells, in words: ': an extra axis of size 1 in front ...', or ''.
    `inputs`: (name, tensor) pairs, to say where a size comes from."""
    got, want = tuple(got), tuple(expected)
    n, m = len(got), len(want)
    if n == m + 1:
        for i in range(n):
            if got[:i] + got[i + 1:] == want:
                where = "in front" if i == 0 else "at the end" if i == n - 1 else f"at position {i}"
                if got[i] == 1:
                    return (f": an extra axis of size 1 {where}: an unsqueeze, a [None], a "
                            "keepdim=True or a batch axis too many")
                return (f": an extra axis of size {got[i]} {where}{_sizes_of(got[i], inputs)}: "
                        "it should have been merged into another axis (or reduced)")
    if n == m - 1:
        for i in range(m):
            if want[:i] + want[i + 1:] == got:
                if want[i] == 1:
                    return (f": the axis of size 1 at position {i} is missing: a squeeze or an "
                            "index [0] too many, or keepdim=True forgotten")
                return (f": {_axis(i, m)}, of size {want[i]}, is missing: reduced away (summed, "
                        "averaged or indexed) where it should stay")
    if n != m:
        return f": {n} axes where {m} are expected"
    diff = [i for i in range(n) if got[i] != want[i]]
    if sorted(got) == sorted(want):
        if len(diff) == 2:
            i, j = diff
            text = (f": axes {i} and {j} swapped (sizes {want[i]} and {want[j]}): a transpose "
                    "missing, or one too many")
            if (i, j) == (0, 1) and n >= 3:
                text += (" (batch and sequence? This course puts the batch first: (batch, seq, "
                         "...), not the (seq, batch, ...) of PyTorch's tutorials)")
            return text
        return ": the right sizes in the wrong order: the axes are permuted"
    if len(diff) == 1:
        i = diff[0]
        g, w = got[i], want[i]
        where = _axis(i, n)
        if abs(g - w) == 1:
            return (f": {where} has {g}, expected {w}: one {'too many' if g > w else 'too few'} "
                    "(off by one: a range, a slice or a length)")
        if g and w % g == 0:
            k = w // g
            return (f": {where} has {g}, expected {w} = {k} x {g}: an axis of size {k}"
                    f"{_sizes_of(k, inputs)} was reduced (summed or averaged) instead of "
                    "concatenated into this one")
        if w and g % w == 0:
            return (f": {where} has {g} = {g // w} x {w}: {g // w} times too many (concatenated "
                    "over an axis that should stay apart?)")
        return f": {where} has {g}{_sizes_of(g, inputs)}, expected {w}"
    axes = ", ".join(f"{_axis(i, n)} has {got[i]}{_sizes_of(got[i], inputs)} where {want[i]} is "
                     f"expected" for i in diff)
    if math.prod(got) == math.prod(want):
        return (f": the same number of entries, grouped otherwise ({axes}): axes merged or split "
                "in the wrong order? (a loop over a tensor walks its FIRST axis)")
    return f": {axes}"


def structure_problem(value, expected, what, parts=(), inputs=()):
    """The first way `value` cannot be `expected`'s kind of result: (mistake, text) with
    WRONG_TYPE, WRONG_SHAPE or WRONG_DTYPE, or None. A wrong shape says what it tells
    (shape_story), with `inputs` (name, tensor) to name where a size comes from."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(value, torch.Tensor):
            return WRONG_TYPE, f"{what} should be a torch.Tensor, got {_kind(value)}"
        if value.shape != expected.shape:
            return WRONG_SHAPE, (f"{what} has shape {tuple(value.shape)}, expected "
                                 f"{tuple(expected.shape)}{shape_story(value.shape, expected.shape, inputs)}")
        if value.dtype != expected.dtype:
            why = " (the inputs' dtype)" if expected.is_floating_point() else ""
            return WRONG_DTYPE, f"{what} has dtype {value.dtype}, expected {expected.dtype}{why}"
        return None
    if isinstance(expected, (tuple, list)):
        kind = "a tuple" if isinstance(expected, tuple) else "a list"
        names = parts if len(parts) == len(expected) else [f"{what}[{i}]" for i in range(len(expected))]
        shape = f" ({', '.join(names)})" if parts else f" of {len(expected)}"
        if not isinstance(value, (tuple, list)):
            return WRONG_TYPE, f"{what} should be {kind}{shape}, got {_kind(value)}"
        if len(value) != len(expected):
            return WRONG_TYPE, f"{what} should be {kind}{shape}, got {len(value)} values"
        for v, e, name in zip(value, expected, names):
            problem = structure_problem(v, e, name, inputs=inputs)
            if problem:
                return problem
        return None
    if expected is None:
        return None if value is None else (WRONG_TYPE, f"{what} should be None, got {_kind(value)}")
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return WRONG_TYPE, f"{what} should be a Python number, got {_kind(value)}"
        return None
    if dataclasses.is_dataclass(expected):
        missing = [f.name for f in dataclasses.fields(expected) if not hasattr(value, f.name)]
        if missing:
            return WRONG_TYPE, (f"{what} should be a {type(expected).__name__} "
                                f"({', '.join(f.name for f in dataclasses.fields(expected))}), "
                                f"got {_kind(value)}")
        for f in dataclasses.fields(expected):
            problem = structure_problem(getattr(value, f.name), getattr(expected, f.name), f.name,
                                        inputs=inputs)
            if problem:
                return problem
    return None


def _leaves(value, expected, what, parts=()):
    """(actual, expected, name) for each pair of tensors in the two results."""
    if isinstance(expected, torch.Tensor) and isinstance(value, torch.Tensor):
        yield value, expected, what
    elif isinstance(expected, (tuple, list)) and isinstance(value, (tuple, list)):
        names = parts if len(parts) == len(expected) else [f"{what}[{i}]" for i in range(len(expected))]
        for v, e, name in zip(value, expected, names):
            yield from _leaves(v, e, name)
    elif dataclasses.is_dataclass(expected):
        for f in dataclasses.fields(expected):
            yield from _leaves(getattr(value, f.name, None), getattr(expected, f.name), f.name)


def _not_finite(value, expected, what, parts):
    for v, e, name in _leaves(value, expected, what, parts):
        if v.is_floating_point() and v.shape == e.shape:
            bad = ~torch.isfinite(v) & torch.isfinite(e)
            if bad.any():
                kind = "NaN" if torch.isnan(v[bad]).any() else "inf"
                return name, kind, int(bad.sum()), v.numel()
    return None


def difference(actual, expected):
    """A short account of how two same-shape tensors differ."""
    if not actual.is_floating_point() or not expected.is_floating_point():
        wrong = actual != expected
        index = tuple(int(i) for i in wrong.nonzero()[0]) if wrong.any() else ()
        return (f"{int(wrong.sum())} of {actual.numel()} entries differ, first at index {index}: "
                f"got {actual[index].item()}, expected {expected[index].item()}")
    diff = (actual.double() - expected.double()).abs().nan_to_num(float("inf"))
    index = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    return (
        f"largest difference {diff.max().item():.3g} at index {index}: "
        f"got {actual[index].item():.4g}, expected {expected[index].item():.4g}"
    )


def _first_difference(value, expected, what, parts):
    """The name of the first tensor of a result that differs from the expected one, and how."""
    for v, e, name in _leaves(value, expected, what, parts):
        if v.shape == e.shape and not _safely(close, v, e):
            try:
                return name, difference(v, e)
            except Exception:  # a learner's tensor that cannot be described
                return name, "its values differ"
    return what, "its values differ"


def clone(value):
    """A copy of every tensor and module in `value` (in tuples, lists, dicts, dataclasses)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, nn.Module):
        return copy.deepcopy(value)
    if isinstance(value, (tuple, list)):
        return type(value)(clone(v) for v in value)
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: clone(getattr(value, f.name))
                                             for f in dataclasses.fields(value)})
    return value


def unchanged(a, b):
    """Whether `a` (the learner's copy of an input, after the call) still equals `b`."""
    if isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
                and torch.equal(a, b))
    if isinstance(b, nn.Module):
        return isinstance(a, nn.Module) and unchanged(_state(a), _state(b))
    if isinstance(b, (tuple, list)):
        return (isinstance(a, (tuple, list)) and len(a) == len(b)
                and all(unchanged(x, y) for x, y in zip(a, b)))
    if isinstance(b, dict):
        return isinstance(a, dict) and a.keys() == b.keys() and all(unchanged(a[k], b[k]) for k in b)
    if dataclasses.is_dataclass(b) and not isinstance(b, type):
        return all(unchanged(getattr(a, f.name, None), getattr(b, f.name))
                   for f in dataclasses.fields(b))
    return _safely(lambda x, y: x == y, a, b)


def _state(module):
    """Every parameter and buffer of `module` (non-persistent buffers too), copied."""
    state = {k: v.detach().clone() for k, v in module.named_parameters()}
    state.update({k: v.detach().clone() for k, v in module.named_buffers()})
    return state


def randomize(module, seed):
    """Random parameters, so that two parameters in different roles are never equal: the
    gains of norms around 1, their biases and other vectors around 0, matrices scaled by
    1 / sqrt(fan_in). (With the default init two LayerNorms are the same function, and a
    mistake that swaps them would be invisible.)"""
    g = torch.Generator().manual_seed(seed)
    norms = {name for name, m in module.named_modules()
             if isinstance(m, nn.LayerNorm) or type(m).__name__ == "LayerNorm"}
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            owner, _, kind = name.rpartition(".")
            if p.dim() >= 2:
                p.copy_(noise / p.shape[-1] ** 0.5)
            elif owner in norms and kind == "weight":
                p.copy_(1 + 0.5 * noise)
            else:
                p.copy_(0.5 * noise)
    return module


# ---------------------------------------------------------------------------------------
# Items and cases


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


_ITEMS = {}  # "ex01_attention.scaled_dot_product_attention" -> Item


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
    renames: (reference name, exercise name) pairs, for parameters the exercise names otherwise.
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
    renames: tuple = ()
    _results: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        declared = [*self.mistakes, *(m for case in self.cases for m in case.mistakes or ())]
        distinct = {id(m): m for m in declared}.values()
        keys = [m.key for m in distinct] + [m.key for m in (*SHARED, *FILE_MISTAKES)]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise ValueError(f"{self.key}: duplicate mistake keys {duplicates}")
        if self.key in _ITEMS:
            raise ValueError(f"duplicate exercise item {self.key!r}")
        _ITEMS[self.key] = self

    @property
    def key(self):
        return f"{self.exercise}.{self.name}"

    @property
    def is_class(self):
        return isinstance(self.reference, type)

    @property
    def catalogue(self):
        """Every catalogued mistake of the item (the cases' own included), by key."""
        found = {}
        for m in (*self.mistakes, *(m for c in self.cases for m in c.mistakes or ())):
            found.setdefault(m.key, m)
        return found

    def reference_code(self):
        """The code objects whose running means the learner called the reference."""
        target = self.reference.forward if self.is_class else self.reference
        return {inspect.unwrap(target).__code__}

    def fail(self, mistake, case, result=None, expected=None, **fields):
        """Report `mistake` on `case`, with the usual second line."""
        mistake.fail(self._details(case, result, expected), **fields)

    # -- the pipeline ---------------------------------------------------------------------

    def check(self, target):
        """Run `target` on every case; raise CheckFailure naming the first thing wrong."""
        watch = () if target is self.reference else self.reference_code()
        passed = []
        for case in self.cases:
            self._check_case(target, case, passed, watch)
            passed.append(case)
        for check_after in self.after:
            check_after(self, target)

    def _check_case(self, target, case, passed, watch):
        mistakes = self.mistakes if case.mistakes is None else case.mistakes
        reference = self._reference_object(case)
        expected = self._expected(reference, case)  # first: torch's one-off start-up is not timed
        printed = _Printed()
        try:
            obj = self._learner_object(target, case, watch, printed)
            given = clone(case.args)
            before = _state(obj) if isinstance(obj, nn.Module) else None
            outcome = call(self._run, obj, given, case, seed=case.seed, watch=watch, printed=printed,
                           record=any(m.uses for m in mistakes))
            self._diagnose(outcome, case, passed, mistakes, reference, expected, given, before, obj)
        except CheckFailure as failure:
            raise CheckFailure(str(failure) + printed.report(), failure.key) from None

    def _reference_object(self, case):
        if not self.is_class:
            return self.reference
        with torch.random.fork_rng(devices=[]):
            _seed(case.seed)
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
                _seed(case.seed)
                return self._run(reference, clone(case.args), case)

        return self._remembered(case, "expected", compute)

    def _learner_object(self, target, case, watch, printed):
        """The learner's function, or the learner's class built (as learner code) and
        given the reference's parameters."""
        if not self.is_class:
            return target
        init = ", ".join([*map(repr, case.init), *(f"{k}={v!r}" for k, v in case.init_kwargs.items())])
        name = f"{self.name}({init})"
        built = call(self.build or _construct, target, case, seed=case.seed, watch=watch,
                     printed=printed)
        self._fail_on_error(built, name, f"{self.name}.__init__", case, (), ())
        module = built.value
        if not isinstance(module, nn.Module):
            WRONG_TYPE.fail(problem=f"{name} should build an nn.Module, got {_kind(module)}",
                            label=case.label)
        _prepare(module, case, self._reference_object(case), self.renames)
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
                _seed(case.seed)
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
            if values and not _safely(self.match or case.same or self.same, result,
                                      self._expected(reference, case)):
                return False
        return True

    def _matching(self, mistakes, result, reference, case, passed):
        """The first mistake that computes `result` on this case and the reference's result
        on the cases passed so far, or None."""
        compare = self.match or case.same or self.same
        for mistake in mistakes:
            for compute in mistake.computes:
                try:
                    predicted = self._compute(compute, reference, case)
                except Exception:  # the mistake cannot run on these inputs
                    continue
                if _safely(compare, result, predicted) and self._agrees(
                        mistake, compute, passed, case.run or self.run):
                    return mistake
        return None

    def _raising(self, mistakes, error, reference, case, passed):
        """The first mistake whose own computation raises like `error` on this case, and
        runs on the cases passed so far, or None."""
        for mistake in mistakes:
            for compute in mistake.computes:
                try:
                    self._compute(compute, reference, case)
                except Exception as own:
                    if _same_error(error, own) and self._agrees(
                            mistake, compute, passed, case.run or self.run, values=False):
                        return mistake
        return None

    def _details(self, case, result=None, expected=None):
        shown = ""
        if self.show is not None:
            try:
                shown = self.show(case, result, expected)
            except Exception:  # the learner's result cannot be shown
                shown = ""
        return f"  {self.prep} {case.label}{shown}"

    def _probing(self, mistakes, error, case, obj):
        """The first mistake whose probe the learner's code gets right, or None."""
        for mistake in mistakes:
            probe = mistake.probe(case, error) if mistake.probe is not None else None
            if probe is None:
                continue
            expected = self._expected(self._reference_object(probe), probe)
            outcome = call(self._run, obj, clone(probe.args), probe, seed=probe.seed)
            if outcome.error is None and _safely(probe.same or self.same, outcome.value, expected):
                return mistake
        return None

    def _fail_on_error(self, outcome, name, where, case, mistakes, passed, reference=None, obj=None):
        """Steps 2-6 for one call: stub, exit, time limit, forbidden calls, exceptions."""
        error = outcome.error
        fail_if_stopped(outcome, name, where, case.label)
        for mistake in mistakes:
            if set(mistake.uses) & outcome.torch_calls:
                mistake.fail(f"  on {case.label}")
        if outcome.reference_ran:
            ref = self.reference
            REFERENCE_USED.fail(name=self.name, reference=f"{ref.__module__}.{ref.__qualname__}")
        if error is None:
            return
        if reference is not None:
            mistake = self._raising(mistakes, error, reference, case, passed)
            mistake = mistake or self._probing(mistakes, error, case, obj)
            if mistake is not None:
                mistake.fail(f"{self._details(case)}\n  it raised {type(error).__name__}: "
                             f"{_first_line(error)}" + _located(outcome))
        fail_on_error(outcome, name, case.label, _inputs(case))

    def _diagnose(self, outcome, case, passed, mistakes, reference, expected, given, before, obj):
        name = f"{self.name}.forward" if self.is_class else self.name
        self._fail_on_error(outcome, name, name, case, mistakes, passed, reference, obj)
        changed = [n for n, a, b in zip(case.names, given, case.args) if n and not unchanged(a, b)]
        if changed:
            IN_PLACE.fail(name=name, names=" and ".join(changed))
        if before is not None:
            moved = [k for k, v in _state(obj).items() if k in before and not unchanged(v, before[k])]
            if moved:
                PARAMETERS_CHANGED.fail(f"  on {case.label}", names=", ".join(moved))
        result, compare = outcome.value, case.same or self.same
        if _safely(compare, result, expected):
            return
        mistake = self._matching(mistakes, result, reference, case, passed)
        if mistake is not None:
            mistake.fail(self._details(case, result, expected))
        if result is None and expected is not None:
            NOTHING_RETURNED.fail(name=name, label=case.label)
        what, parts = case.what or self.what, case.parts or self.parts
        problem = structure_problem(result, expected, what, parts, _inputs(case))
        if problem:
            _fail_if_reordered(result, expected, what, parts, compare, case.label)
            problem[0].fail(problem=problem[1], label=case.label)
        bad = _not_finite(result, expected, what, parts)
        if bad:
            NOT_FINITE.fail(what=bad[0], bad=bad[1], count=bad[2], total=bad[3], label=case.label)
        what, diff = _first_difference(result, expected, what, parts)
        shown = self._details(case, result, expected).split(case.label, 1)[1]
        NO_MATCH.fail(shown if shown.startswith("\n") else shown and "  " + shown.lstrip(),
                      what=what, prep=self.prep, label=case.label, difference=diff,
                      formula=f" {self.formula}" if self.formula else "")


def _fail_if_reordered(result, expected, what, parts, compare, label):
    """WRONG_ORDER when a tuple result is the expected one with its parts in another order:
    the same values (or, failing that, the same types, shapes and dtypes)."""
    if not (isinstance(expected, tuple) and isinstance(result, (tuple, list))
            and len(result) == len(expected) and 1 < len(expected) <= 4):
        return
    names = parts if len(parts) == len(expected) else [f"{what}[{i}]" for i in range(len(expected))]
    for how, fits in (("values", lambda r: _safely(compare, r, expected)),
                      ("kinds of values", lambda r: structure_problem(r, expected, what, parts) is None)):
        for order in itertools.permutations(range(len(expected))):
            if list(order) != sorted(order) and fits(tuple(result[i] for i in order)):
                got = [names[order.index(i)] for i in range(len(expected))]
                WRONG_ORDER.fail(expected=", ".join(names), got=", ".join(got), how=how, label=label)


def _inputs(case):
    """(name, tensor) for each named tensor argument of `case`."""
    return [(n, a) for n, a in zip(case.names, case.args) if n and isinstance(a, torch.Tensor)]


def fail_if_stopped(outcome, name, where, label):
    """Steps 2-4 of the pipeline: the stub (`where` names the stub's function if the
    traceback cannot), an exit, the time limit."""
    error = outcome.error
    if isinstance(error, NotImplementedError) and outcome.raised_here:
        qualname = outcome.qualname
        NOT_IMPLEMENTED.fail(where=where if qualname in ("", "forward", "__init__") else qualname)
    if isinstance(error, (SystemExit, _Exited)):
        EXITED.fail(_located(outcome).lstrip("\n"), how=_exit_how(error), name=name, label=label)
    if isinstance(error, _Timeout):
        TOO_SLOW.fail(limit=TIME_LIMIT, name=name, label=label)


def fail_on_error(outcome, name, label, inputs=()):
    """For checks of their own (an Item's `after`): fail if the call `outcome` did not
    return (the stub, an exit, the time limit, an exception). `inputs`: (name, tensor) of
    the call, to say what a size in torch's error is."""
    fail_if_stopped(outcome, name, name, label)
    error = outcome.error
    if isinstance(error, RecursionError):
        RECURSION.fail(_located(outcome).lstrip("\n"), name=name, label=label)
    if error is None:
        return
    said = _first_line(error)
    raised = type(error).__name__ + (f": {said}" if said else "")
    found = _BROADCAST.search(said)
    axes = found and _batch_and_seq(int(found[1]), int(found[2]), inputs)
    if axes:
        first, second = (_AXIS_NAMES[i] for i in axes[1:])
        SEQ_FIRST.fail(_located(outcome).lstrip("\n"), name=name, label=label, a=found[1],
                       b=found[2], input=axes[0], first=first, second=second, error=raised)
    RAISED.fail(_located(outcome).lstrip("\n"), error=raised + explain_error(error, inputs),
                name=name, label=label)


def _located(outcome):
    return f"\n  at {outcome.where}" if outcome.where else ""


def _construct(cls, case):
    return cls(*case.init, **case.init_kwargs)


def _prepare(module, case, reference, renames=()):
    """The learner's module with the reference's parameters, in the case's mode."""
    state = reference.state_dict()
    if set(state) != set(module.state_dict()):
        for old, new in renames:
            state = {key.replace(old, new): value for key, value in state.items()}
    try:
        if case.dtype is not None:
            module.to(case.dtype)
        module.load_state_dict(state)
    except Exception as error:
        said = " ".join(str(error).strip().splitlines()[:3])[:300]
        RENAMED.fail(said=said)
    module.train(case.train)


def _detached_backward(*args, **kwargs):
    """What backward() does on a result cut off from its inputs: raise."""
    torch.zeros(1).sum().backward()


def no_gradient(inputs):
    """The mistake of an output that no gradient flows back from, to `inputs`."""
    return Mistake(
        "no_gradient", f"No gradient flows back to {inputs}",
        "training needs gradients through this code: stay in torch, in a graph (no "
        "torch.no_grad(), .detach(), .item(), .numpy() or new tensors built from values).",
        (_detached_backward, lambda *args, **kwargs: None))


def gradient_case(case, name):
    """A Case like `case` that backpropagates the sum of the output (its first part when it
    is a tuple) and gives the gradient of the first argument, called `name`."""

    def run(obj, args, c):
        first = args[0].requires_grad_()  # the learner's clone
        out = obj(first, *args[1:], **c.kwargs)
        (out[0] if isinstance(out, (tuple, list)) else out).sum().backward()
        return first.grad

    return dataclasses.replace(
        case, label=f"{case.label}, backward from the output's sum", run=run,
        what=f"gradient of {name}", mistakes=(no_gradient(name),), parts=None)


# ---------------------------------------------------------------------------------------
# Exercise files


def items(exercise=None):
    """Every exercise item (importing every chapter's checks), or those of one exercise."""
    from importlib import import_module
    from pkgutil import iter_modules

    for module in iter_modules([str(Path(__file__).parent)]):
        if re.match(r"ch\d+_", module.name):
            import_module(f"{__package__}.{module.name}")
    return [i for i in _ITEMS.values() if exercise is None or i.exercise == exercise]


def item(key):
    """The item of key "ex01_attention.scaled_dot_product_attention"."""
    items()
    return _ITEMS[key]


def exercises_dir():
    return Path(__file__).resolve().parents[2] / "exercises"


_BROKEN = {}  # (path, digest of the file) -> the CheckFailure its import gave


def load_exercise(path):
    """Import an exercise file afresh (so edits are seen), as learner code: time limit,
    prints captured, no exit from Python. A file that cannot be imported fails with one
    line (and, unchanged, fails again at once, without running a second time)."""
    path = Path(path)
    try:
        source = path.read_bytes()
    except OSError as error:
        raise CheckFailure(f"Missing: cannot read {path}: {error.strerror}", MISSING.key) from None
    memo = (str(path.resolve()), hashlib.sha1(source).hexdigest())
    if memo in _BROKEN:
        raise _BROKEN[memo]
    spec = importlib.util.spec_from_file_location(f"_exercise_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    outcome = call(spec.loader.exec_module, module)
    if outcome.error is None:
        return module
    try:
        _import_failure(path.name, outcome)
    except CheckFailure as failure:
        _BROKEN[memo] = failure
        raise


def _import_failure(file, outcome):
    error = outcome.error
    where = f"\n  at {outcome.where}" if outcome.where else ""
    if isinstance(error, SyntaxError):
        text = (error.text or "").rstrip("\n")
        shown = ""
        if text.strip():
            caret = " " * max((error.offset or 1) - 1 - (len(text) - len(text.lstrip())), 0) + "^"
            shown = f"\n    {text.strip()}\n    {caret}"
        SYNTAX_ERROR.fail(file=file, line=error.lineno, msg=error.msg, text=shown)
    if isinstance(error, _Timeout):
        IMPORT_TOO_SLOW.fail(file=file, limit=TIME_LIMIT)
    if isinstance(error, (SystemExit, _Exited)):
        IMPORT_EXITED.fail(how=_exit_how(error), file=file,
                           where=f" ({outcome.where})" if outcome.where else "")
    if isinstance(error, NotImplementedError):
        where += "\n  (a call at the top level of the file runs the stub when the check imports it)"
    IMPORT_FAILED.fail(file=file, error=f"{type(error).__name__}: {_first_line(error)}", where=where)


def _learner_item(module, item_, file):
    """The learner's object for `item_` in the imported exercise `module`, or CheckFailure."""
    obj = getattr(module, item_.name, _ABSENT)
    if obj is _ABSENT:
        names = [n for n in vars(module) if not n.startswith("_")]
        near = difflib.get_close_matches(item_.name, names, n=1)
        MISSING.fail(file=file, name=item_.name, close=f" It has `{near[0]}`." if near else "")
    if obj is item_.reference:
        ref = item_.reference
        REFERENCE_IMPORTED.fail(name=item_.name, file=file,
                                reference=f"{ref.__module__}.{ref.__qualname__}")
    if item_.is_class and not isinstance(obj, type):
        NOT_CLASS.fail(name=item_.name, kind="a class (class ...(nn.Module))", got=_kind(obj))
    if not item_.is_class and (isinstance(obj, type) or not callable(obj)):
        NOT_CLASS.fail(name=item_.name, kind="a function (def ...)", got=_kind(obj))
    return obj


def _checker_bug(error):
    return (f"The check itself failed ({type(error).__name__}: {_first_line(error)}): a bug in "
            "tfcourse's checks, not necessarily in your code. Please report it.")


def run_check(exercise_file, name):
    """One pytest test: check item `name` of `exercise_file`; a failure is one clean message."""
    import pytest

    path = Path(exercise_file)
    try:
        item_ = item(f"{path.stem}.{name}")
        module = load_exercise(path)
        item_.check(_learner_item(module, item_, path.name))
        return
    except CheckFailure as failure:
        message = str(failure)
    except Exception as error:  # noqa: BLE001  (never a traceback for the learner)
        message = _checker_bug(error)
    pytest.fail(message, pytrace=False)  # outside `except`: no chained traceback


def _resolve(name, target):
    """The item a notebook's check(target, name) means."""
    candidates = [i for i in items() if name in (i.name, i.key)]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        known = ", ".join(sorted({i.name for i in items()}))
        raise LookupError(f"no exercise item is named {name!r}; known: {known}")
    keys = ", ".join(i.key for i in candidates)
    raise LookupError(f"several exercises have an item named {name!r} ({keys}): say which, "
                      f"e.g. check({getattr(target, '__name__', 'obj')}, {candidates[-1].key!r})")


def check(target, name=None):
    """Check from a notebook, printing what pytest would say (never a traceback).

        check("ex01_attention")               # every item of exercises/ex01_attention.py
        check(my_attention, "scaled_dot_product_attention")   # something you wrote here
        check(Encoder, "ex05_encoder.Encoder")                # when two exercises share a name

    """
    if isinstance(target, str):
        exercise = target.removesuffix(".py")
        path = exercises_dir() / f"{exercise}.py"
        todo = items(exercise)
        if not todo:
            print(f"✗ no exercise is named {exercise!r}; known: "
                  f"{', '.join(sorted({i.exercise for i in items()}))}")
            return
        try:
            module = load_exercise(path)
        except CheckFailure as failure:
            print(f"✗ {path.name}: {failure}")
            return
        for item_ in todo:
            _report(item_.name, lambda item_=item_: item_.check(_learner_item(module, item_, path.name)))
        return
    label = name or getattr(target, "__name__", repr(target))
    try:
        item_ = _resolve(label, target)
    except LookupError as error:
        print(f"✗ {error}")
        return
    if item_.is_class != isinstance(target, type):
        kind = "a class" if item_.is_class else "a function"
        print(f"✗ {item_.name}: Wrong type: {item_.name} should be {kind}, got {_kind(target)}")
        return
    _report(item_.name, lambda: item_.check(target))


def _report(name, run):
    try:
        run()
        print(f"✓ {name}: every check passes.")
    except CheckFailure as failure:
        print(f"✗ {name}: {failure}")
    except Exception as error:  # noqa: BLE001  (never a traceback for the learner)
        print(f"✗ {name}: {_checker_bug(error)}")
