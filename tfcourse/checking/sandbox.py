"""Running learner code: each call has a time limit, its prints are captured, randomness is
seeded, an exception is located in the learner's file (not torch's, not tfcourse's), and
sys.exit / os._exit cannot end Python. `call` does all of it and returns an `Outcome`."""

from __future__ import annotations

import contextlib
import functools
import io
import linecache
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.fx.experimental.symbolic_shapes  # noqa: F401  (see below)
from torch.overrides import TorchFunctionMode

# Under a TorchFunctionMode, torch.broadcast_shapes (which learner code may call) imports sympy
# lazily (about 1 s). Imported here, so that the time limit can never interrupt that import
# halfway and break torch.

# Seconds one call of learner code may take before it is reported as an endless loop (read
# at each call: sandbox.TIME_LIMIT may be changed).
TIME_LIMIT = float(os.environ.get("TFCOURSE_CHECK_TIME_LIMIT", "10"))


class Timeout(BaseException):
    """Raised inside learner code by the alarm; BaseException so `except Exception` can't eat it."""


class Exited(BaseException):
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
        raise Timeout

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
    """os._exit raises Exited instead of ending Python (sys.exit raises SystemExit anyway)."""
    import posix

    def refuse(code=0):
        raise Exited(code)

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


class _HalfMade(TorchFunctionMode):
    """Notes whether a torch function returned a float16 or bfloat16 tensor."""

    def __init__(self):
        super().__init__()
        self.made = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        half = (torch.float16, torch.bfloat16)
        self.made = self.made or any(isinstance(t, torch.Tensor) and t.dtype in half
                                     for t in (out if isinstance(out, (tuple, list)) else (out,)))
        return out


def makes_half(run: Callable[[], object]) -> bool:
    """Whether run() (learner code, already run once: it returns) makes a 16-bit float."""
    with _HalfMade() as seen:
        try:
            run()
        except Exception:  # what it made before raising is what counts
            pass
    return seen.made


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


class Printed(io.StringIO):
    """What learner code prints (a StringIO: prints cost little, even many)."""


def seed_torch(seed: int) -> None:
    """torch.manual_seed for the CPU only (which is all the checks use): 100 times faster."""
    torch.default_generator.manual_seed(seed)


@dataclass
class Outcome:
    """What one call of learner code did."""

    value: object = None
    error: BaseException | None = None
    where: str = ""  # "line 12 of ex01_attention.py: `scores = ...`"
    qualname: str = ""  # the learner's function that raised, e.g. "LayerNorm.forward"
    raised_here: bool = False  # the `raise` itself is in the learner's code (a stub's is)
    printed: Printed = field(default_factory=Printed)
    torch_calls: frozenset = frozenset()
    reference_ran: bool = False


def call(fn: Callable, *args, seed: int | None = None, watch=(), printed: Printed | None = None,
         record: bool = False, **kwargs) -> Outcome:
    """Call learner code: time limit, prints captured, exceptions caught and located, no
    exit from Python; with `seed`, torch's randomness seeded (and the caller's left alone);
    `watch`: code objects whose running is noted (outcome.reference_ran); `printed`: a
    capture to add the prints to (one report for several calls); `record`: note the names
    of the torch functions called (outcome.torch_calls)."""
    outcome = Outcome(printed=printed if printed is not None else Printed())
    calls = _TorchCalls() if record else contextlib.nullcontext()
    rng = torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
    ran = []
    try:
        with contextlib.redirect_stdout(outcome.printed), contextlib.redirect_stderr(outcome.printed):
            with rng, _no_exit(), _watching(frozenset(watch)) as ran:
                if seed is not None:
                    seed_torch(seed)
                with _time_limit(TIME_LIMIT), calls:
                    outcome.value = fn(*args, **kwargs)
    except Timeout as error:
        outcome.error = error
    except (Exception, SystemExit, Exited) as error:  # anything the learner's code raises
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


def first_line(error: BaseException) -> str:
    """The first line of an exception's message ('' when it has none)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def exit_how(error: BaseException) -> str:
    """How learner code tried to end Python: 'sys.exit(0)', 'os._exit(3)'."""
    if isinstance(error, Exited):
        return f"os._exit({error.code})"
    code = error.code
    return "sys.exit()" if code is None else f"sys.exit({code!r})"
