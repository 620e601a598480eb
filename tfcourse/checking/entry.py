"""The entry points: `run_check` (one pytest test), `check` (a notebook), and what they
stand on: the items every chapter exports (`items`, `item`) and the learner's exercise
file imported as learner code (`load_exercise`)."""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import os
import re
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from pkgutil import iter_modules
from types import ModuleType

from . import sandbox
from .comparison import ABSENT, kind_of
from .diagnosis import CheckFailure, Diagnosis, for_notebook
from .mistakes import (
    IMPORT_EXITED,
    IMPORT_FAILED,
    IMPORT_TOO_SLOW,
    MISSING,
    NOT_CLASS,
    REFERENCE_IMPORTED,
    SYNTAX_ERROR,
)
from .pipeline import Item
from .sandbox import Exited, Outcome, Timeout, call, exit_how, first_line


def collect(exported) -> dict[str, Item]:
    """key -> Item for the items of `exported` (each chapter's ITEMS); a key twice is an error."""
    found = {}
    for item_ in exported:
        if item_.key in found:
            raise ValueError(f"duplicate exercise item {item_.key!r}")
        found[item_.key] = item_
    return found


_ITEMS: dict[str, Item] = {}  # every chapter's items, collected once


def items(exercise: str | None = None) -> list[Item]:
    """Every exercise item (each chapter module chNN_*.py exports its ITEMS), or those of
    one exercise."""
    if not _ITEMS:
        chapters = sorted(m.name for m in iter_modules([str(Path(__file__).parent)])
                          if re.match(r"ch\d+_", m.name))
        _ITEMS.update(collect(i for name in chapters
                              for i in import_module(f"{__package__}.{name}").ITEMS))
    return [i for i in _ITEMS.values() if exercise is None or i.exercise == exercise]


def item(key: str) -> Item:
    """The item of key "ex01_attention.scaled_dot_product_attention"."""
    items()
    return _ITEMS[key]


def exercises_dir() -> Path:
    """The course's exercises/ folder."""
    return Path(__file__).resolve().parents[2] / "exercises"


_BROKEN = {}  # (path, digest of the file) -> the CheckFailure its import gave


def load_exercise(path: str | Path) -> ModuleType:
    """Import an exercise file afresh (so edits are seen), as learner code: time limit,
    prints captured, no exit from Python. A file that cannot be imported fails with one
    line (and, unchanged, fails again at once, without running a second time)."""
    path = Path(path)
    try:
        source = path.read_bytes()
    except OSError as error:
        raise CheckFailure(Diagnosis(MISSING.key, MISSING.title, f"cannot read {path}: "
                                     f"{error.strerror}")) from None
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


def _import_failure(file: str, outcome: Outcome):
    error = outcome.error
    where = f"\n  at {outcome.where}" if outcome.where else ""
    if isinstance(error, SyntaxError):
        text = (error.text or "").rstrip("\n")
        shown = ""
        if text.strip():
            caret = " " * max((error.offset or 1) - 1 - (len(text) - len(text.lstrip())), 0) + "^"
            shown = f"\n    {text.strip()}\n    {caret}"
        SYNTAX_ERROR.fail(file=file, line=error.lineno, msg=error.msg, text=shown)
    if isinstance(error, Timeout):
        IMPORT_TOO_SLOW.fail(file=file, limit=sandbox.TIME_LIMIT)
    if isinstance(error, (SystemExit, Exited)):
        IMPORT_EXITED.fail(how=exit_how(error), file=file,
                           where=f" ({outcome.where})" if outcome.where else "")
    if isinstance(error, NotImplementedError):
        where += "\n  (a call at the top level of the file runs the stub when the check imports it)"
    IMPORT_FAILED.fail(file=file, error=f"{type(error).__name__}: {first_line(error)}", where=where)


def _learner_item(module: ModuleType, item_: Item, file: str):
    """The learner's object for `item_` in the imported exercise `module`, or CheckFailure."""
    obj = getattr(module, item_.name, ABSENT)
    if obj is ABSENT:
        names = [n for n in vars(module) if not n.startswith("_")]
        near = difflib.get_close_matches(item_.name, names, n=1)
        MISSING.fail(file=file, name=item_.name, close=f" It has `{near[0]}`." if near else "")
    if obj is item_.reference:
        ref = item_.reference
        REFERENCE_IMPORTED.fail(name=item_.name, file=file,
                                reference=f"{ref.__module__}.{ref.__qualname__}")
    if item_.is_class and not isinstance(obj, type):
        NOT_CLASS.fail(name=item_.name, got=kind_of(obj),
                       kind="a class (class ...(nn.Module))" if item_.is_module else "a class (class ...)")
    if not item_.is_class and (isinstance(obj, type) or not callable(obj)):
        NOT_CLASS.fail(name=item_.name, kind="a function (def ...)", got=kind_of(obj))
    return obj


def _checker_bug(error: Exception) -> Diagnosis:
    return Diagnosis("checker_bug", f"The check itself failed ({type(error).__name__}: "
                     f"{first_line(error)})", "a bug in tfcourse's checks, not necessarily in "
                     "your code. Please report it.")


def diagnose(run: Callable[[], None]) -> Diagnosis | None:
    """What run() (a check) found wrong, or None when it passed; never an exception."""
    try:
        run()
    except CheckFailure as failure:
        return failure.diagnosis
    except Exception as error:  # noqa: BLE001  (never a traceback for the learner)
        return _checker_bug(error)
    return None


def hint_level() -> int:
    """The hint level pytest's checks show: TFCOURSE_HINT (exercises/conftest.py sets it from
    `pytest --hint=2`), 1 by default."""
    try:
        return int(os.environ.get("TFCOURSE_HINT", "1"))
    except ValueError:
        return 1


def run_check(exercise_file: str | Path, name: str, hint: int | None = None) -> None:
    """One pytest test: check item `name` of `exercise_file`; a failure is one clean message
    (with `hint` 2, default hint_level(), the second hint and the notebook section)."""
    import pytest

    path = Path(exercise_file)

    def run():
        item_ = item(f"{path.stem}.{name}")
        item_.check(_learner_item(load_exercise(path), item_, path.name))

    found = diagnose(run)
    if found is not None:
        pytest.fail(found.text(hint_level() if hint is None else hint), pytrace=False)


def _resolve(name: str, target) -> Item:
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


def check(target: str | Callable, name: str | None = None, hint: int = 1) -> None:
    """Check from a notebook, printing what pytest would say (never a traceback).

        check("ex01_attention")               # every item of exercises/ex01_attention.py
        check(my_attention, "scaled_dot_product_attention")   # something you wrote here
        check(Encoder, "ex05_encoder.Encoder")                # when two exercises share a name
        check("ex01_attention", hint=2)       # stuck? a second hint, and where to read

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
            print(for_notebook(path.name, failure.diagnosis, hint))
            return
        for item_ in todo:
            _report(item_.name, lambda item_=item_: item_.check(_learner_item(module, item_, path.name)),
                    hint)
        return
    label = name or getattr(target, "__name__", repr(target))
    try:
        item_ = _resolve(label, target)
    except LookupError as error:
        print(f"✗ {error}")
        return
    if item_.is_class != isinstance(target, type):
        kind = "a class" if item_.is_class else "a function"
        print(for_notebook(item_.name, NOT_CLASS.diagnosis(name=item_.name, kind=kind,
                                                           got=kind_of(target))))
        return
    _report(item_.name, lambda: item_.check(target), hint)


def _report(name: str, run: Callable[[], None], hint: int = 1) -> None:
    found = diagnose(run)
    print(f"✓ {name}: every check passes." if found is None else for_notebook(name, found, hint))
