"""The machinery every exercise check shares.

A check calls the learner's code on inputs it chooses, compares the result with the
reference, and, when they differ, compares it with what each known mistake would
compute. The first line of a failure names the mistake with a hint (or, when no known
mistake matches, says plainly what differs). Learner code can do anything: raise, loop
forever, print a lot, return None or NaN. A check reports each of those in one message
and never crashes itself.
"""

import contextlib
import importlib.util
import io
import os
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.fx.experimental.symbolic_shapes  # noqa: F401  (see below)
from torch.overrides import TorchFunctionMode

# Under a TorchFunctionMode, torch.broadcast_shapes (which learner code may call) imports sympy
# lazily (about 1 s). Imported here, so that the time limit can never interrupt that import
# halfway and break torch.

# Seconds one call of learner code may take before it is reported as an endless loop.
TIME_LIMIT = float(os.environ.get("TFCOURSE_CHECK_TIME_LIMIT", "10"))


class CheckFailure(AssertionError):
    """A failed check. The first line of the message names the mistake."""


@dataclass(frozen=True)
class Mistake:
    """A known mistake: its name, a hint (never the answer), and what it computes.

    `computes` holds one or more functions with the reference's signature, each a way the
    mistake shows up, so a learner's result can be recognised whatever the code looked like.
    """

    title: str
    hint: str
    computes: tuple = ()

    def fail(self, details=""):
        raise CheckFailure(f"{self.title}: {self.hint}" + (f"\n{details}" if details else ""))


# ---------------------------------------------------------------------------------------
# Calling learner code


class _Timeout(BaseException):
    """Raised inside learner code by the alarm; BaseException so `except Exception` can't eat it."""


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


class _TorchCalls(TorchFunctionMode):
    """Records the name of every torch function called: how a check sees a built-in used."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.add(getattr(func, "__name__", repr(func)))
        return func(*args, **(kwargs or {}))


@dataclass
class Outcome:
    """What one call of learner code did."""

    value: object = None
    error: BaseException = None
    where: str = ""  # "line 12 of ex01_attention.py: `scores = ...`"
    printed: str = ""
    torch_calls: frozenset = frozenset()


def call(fn, *args, **kwargs):
    """Call learner code with a time limit, its prints captured and its exceptions caught."""
    printed = io.StringIO()
    calls = _TorchCalls()
    outcome = Outcome()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            with _time_limit(TIME_LIMIT), calls:
                outcome.value = fn(*args, **kwargs)
    except _Timeout as error:
        outcome.error = error
    except (Exception, SystemExit) as error:  # anything the learner's code raises
        outcome.error = error
        outcome.where = _learner_frame(error, fn)
    outcome.printed = printed.getvalue()
    outcome.torch_calls = frozenset(calls.names)
    return outcome


def _learner_frame(error, fn):
    """The deepest line of the traceback that is in the learner's file."""
    code = getattr(fn, "__code__", None) or getattr(getattr(fn, "forward", None), "__code__", None)
    if code is None:
        return ""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == code.co_filename]
    if not frames:
        return ""
    f = frames[-1]
    return f"line {f.lineno} of {Path(f.filename).name}: `{(f.line or '').strip()}`"


def fail_on_error(outcome, name, inputs):
    """Report a call that raised, timed out, or is still the stub."""
    if outcome.error is None:
        return
    error = outcome.error
    if isinstance(error, NotImplementedError):
        raise CheckFailure(
            f"Not implemented yet: replace `raise NotImplementedError` in {name} with your code."
        )
    if isinstance(error, _Timeout):
        raise CheckFailure(
            f"Too slow: {name} did not finish within {TIME_LIMIT:g} s on {inputs}. An endless loop?"
        )
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    raise CheckFailure(
        f"Raised {type(error).__name__}: {message}\n  {name} failed on {inputs}"
        + (f"\n  at {outcome.where}" if outcome.where else "")
        + _printed(outcome)
    )


def _printed(outcome, limit=5):
    lines = outcome.printed.splitlines()
    if not lines:
        return ""
    shown = "\n    ".join(line[:200] for line in lines[:limit])
    more = f"\n    ... ({len(lines) - limit} more lines)" if len(lines) > limit else ""
    return f"\n  it printed:\n    {shown}{more}"


# ---------------------------------------------------------------------------------------
# Comparing results


def describe(**tensors):
    """'query (2, 5, 8), mask (2, 1, 7)': how messages name the inputs of a case."""
    return ", ".join(
        f"{n} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else f"{n}={t!r}"
        for n, t in tensors.items()
        if t is not None
    )


def close(actual, expected):
    """Same shape and values (NaN equal to NaN), with a tolerance for the dtype."""
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
        return False
    tol = 1e-10 if expected.dtype == torch.float64 else 1e-5
    return torch.allclose(actual.to(expected.dtype), expected, rtol=100 * tol, atol=tol, equal_nan=True)


def tensor_problem(value, expected, what, dtype_from=""):
    """Why `value` cannot be compared with `expected` (not a tensor, shape, dtype), or None.
    `dtype_from` says where the expected dtype comes from, e.g. "the inputs' dtype"."""
    if value is None:
        return f"{what} is None: did you forget a `return`?"
    if not isinstance(value, torch.Tensor):
        return f"{what} should be a torch.Tensor, got {type(value).__name__}"
    if value.shape != expected.shape:
        return f"{what} has shape {tuple(value.shape)}, expected {tuple(expected.shape)}"
    if value.dtype != expected.dtype:
        return f"{what} has dtype {value.dtype}, expected {expected.dtype}" + (
            f" ({dtype_from})" if dtype_from else ""
        )
    return None


def difference(actual, expected):
    """A short account of how two same-shape tensors differ."""
    diff = (actual - expected).abs()
    if torch.isnan(actual).any() and not torch.isnan(expected).any():
        return f"it contains NaN at {int(torch.isnan(actual).sum())} of {actual.numel()} entries"
    index = tuple(int(i) for i in torch.unravel_index(diff.nan_to_num(float("inf")).argmax(), diff.shape))
    return (
        f"largest difference {diff.nan_to_num(float('inf')).max().item():.3g} at index {index}: "
        f"got {actual[index].item():.4g}, expected {expected[index].item():.4g}"
    )


def first_match(mistakes, actual, *args, same):
    """The first mistake one of whose computations gives `actual` on `args`, or None."""
    for mistake in mistakes:
        for compute in mistake.computes:
            try:
                with torch.no_grad():
                    predicted = compute(*args)
            except Exception:  # the mistake cannot run on these inputs
                continue
            if same(actual, predicted):
                return mistake
    return None


# ---------------------------------------------------------------------------------------
# Running checks: from pytest (exercises/test_*.py) and from a notebook (check)

_CHECKS = {}  # name of the exercise function or class -> its check


def checks(name):
    """Register the decorated function as the check of exercise item `name`."""

    def register(check_fn):
        _CHECKS[name] = check_fn
        return check_fn

    return register


def _all_checks():
    """Import every chapter's checks (modules named chNN_*) so they register themselves."""
    from importlib import import_module
    from pkgutil import iter_modules

    package = Path(__file__).parent
    for module in iter_modules([str(package)]):
        if module.name.startswith("ch"):
            import_module(f"{__package__}.{module.name}")
    return _CHECKS


def load_exercise(path):
    """Import an exercise file afresh (so edits are seen), or fail with one clear line."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"_exercise_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            spec.loader.exec_module(module)
    except SyntaxError as error:
        raise CheckFailure(
            f"{path.name} has a syntax error on line {error.lineno}: {error.msg}"
        ) from None
    except Exception as error:
        raise CheckFailure(
            f"{path.name} could not be imported: {type(error).__name__}: {error}"
        ) from None
    return module


def run_check(exercise_file, name):
    """One pytest test: check `name` from `exercise_file`; a failure is one clean message."""
    import pytest

    try:
        module = load_exercise(exercise_file)
        if not hasattr(module, name):
            raise CheckFailure(f"{Path(exercise_file).name} has no `{name}`: was it renamed?")
        _all_checks()[name](getattr(module, name))
    except CheckFailure as failure:
        message = str(failure)
    else:
        return
    pytest.fail(message, pytrace=False)  # outside `except`: no chained traceback


def exercises_dir():
    return Path(__file__).resolve().parents[2] / "exercises"


def check(target, name=None):
    """Check from a notebook, printing what pytest would say.

        check("ex01_attention")               # every exercise in exercises/ex01_attention.py
        check(my_attention, "scaled_dot_product_attention")   # a function you wrote here

    """
    registry = _all_checks()
    if isinstance(target, str):
        module = load_exercise(exercises_dir() / f"{target.removesuffix('.py')}.py")
        # only what the exercise file defines, not what it imports from tfcourse
        items = [
            (n, getattr(module, n))
            for n in registry
            if getattr(getattr(module, n, None), "__module__", None) == module.__name__
        ]
    else:
        items = [(name or target.__name__, target)]
    for item_name, item in items:
        if item_name not in registry:
            print(f"✗ no check is named {item_name!r}; known: {', '.join(sorted(registry))}")
            continue
        try:
            registry[item_name](item)
            print(f"✓ {item_name}: every check passes.")
        except CheckFailure as failure:
            print(f"✗ {item_name}: {failure}")
