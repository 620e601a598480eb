"""State kept between calls: what the learner's module holds that one call can change for the
next (its variables: caches, tables, counters; its functions' default arguments; functools
caches; class attributes), taken before the first case (`snapshot`) so that a wrong result
can be tried again with that state put back (`Snapshot.restore`). A function right on its
first call and wrong on a later one is then named as such, not as the mistake its later
results happen to resemble."""

from __future__ import annotations

import copy
import dataclasses
import sys
import types

import torch

from .comparison import clone, safely
from .mistakes import STATE_CHANGES, STATE_KEPT
from .sandbox import call

_KEPT = (dict, list, set, bytearray, torch.Tensor)  # containers a call can fill (and subclasses)
_NOT_STATE = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType)


def _object(value) -> bool:
    """Whether `value` is an object with attributes a call can change (an incremental decoder,
    an instance of the learner's class), not a function, class or module."""
    return not isinstance(value, _NOT_STATE) and hasattr(value, "__dict__") and not isinstance(
        value, _KEPT)


def _copy(value):
    try:
        return copy.deepcopy(value)
    except Exception:  # something that cannot be copied: not ours to put back
        return value


def _same(a, b) -> bool:
    try:
        if _object(a) or _object(b):
            return type(a) is type(b) and _same(vars(a), vars(b))
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                    and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b))
        return type(a) is type(b) and bool(a == b)
    except Exception:  # a comparison that cannot be made
        return False


class Snapshot:
    """The state of the module that defines `target` (a function or a class), as it was."""

    def __init__(self, target):
        name = getattr(target, "__module__", None)
        module = sys.modules.get(name) if name else None
        self.names = vars(module) if module is not None else getattr(target, "__globals__", {})
        self.values, self.defaults, self.cached, self.attributes = {}, {}, [], {}
        self.keys = set(self.names)  # a variable a call adds (global counter = ...) is state too
        for key, value in list(self.names.items()):
            if key.startswith("__") or isinstance(value, types.ModuleType):
                continue
            if isinstance(value, _KEPT) or value is None or isinstance(value, (int, float, str)) \
                    or _object(value):
                self.values[key] = _copy(value)
            own = getattr(value, "__module__", None) == self.names.get("__name__")
            if hasattr(value, "cache_clear") and own:
                self.cached.append((key, value))
            function = getattr(value, "__wrapped__", value)
            if isinstance(function, types.FunctionType) and own:
                self.defaults[key] = (function, _copy(function.__defaults__),
                                      _copy(function.__kwdefaults__), _copy(function.__dict__))
            if isinstance(value, type) and own:
                self.attributes[key] = (value, {k: _copy(v) for k, v in vars(value).items()
                                                if isinstance(v, _KEPT)})

    def _added(self) -> list[str]:
        """The module's variables that calls created (a counter made with `global`)."""
        return [k for k, v in list(self.names.items()) if k not in self.keys
                and not k.startswith("__") and not isinstance(v, _NOT_STATE)]

    def changed(self) -> list[str]:
        """What differs from the snapshot, in the learner's words."""
        found = [f"the module's `{k}`" for k, v in self.values.items()
                 if k in self.names and not _same(self.names[k], v)]
        found += [f"the module's `{k}` (made by a call)" for k in self._added()]
        for key, (function, defaults, kwdefaults, attributes) in self.defaults.items():
            if not _same(function.__defaults__, defaults) or not _same(function.__kwdefaults__, kwdefaults):
                found.append(f"the default arguments of `{key}`")
            elif not _same(function.__dict__, attributes):
                found.append(f"the attributes of `{key}`")
        found += [f"the functools cache of `{k}`" for k, f in self.cached
                  if getattr(f, "cache_info", None) and f.cache_info().currsize]
        found += [f"the class attribute `{k}.{a}`" for k, (cls, saved) in self.attributes.items()
                  for a, v in saved.items() if not _same(vars(cls).get(a), v)]
        return found

    def restore(self) -> None:
        """Put the state back as it was (fresh copies: it can be put back again)."""
        for key, value in self.values.items():
            self.names[key] = _copy(value)
        for key in self._added():
            del self.names[key]
        for function, defaults, kwdefaults, attributes in self.defaults.values():
            function.__defaults__, function.__kwdefaults__ = _copy(defaults), _copy(kwdefaults)
            for added in set(function.__dict__) - set(attributes):  # a cache made by a call
                del function.__dict__[added]
            function.__dict__.update(_copy(attributes))
        for _, f in self.cached:
            f.cache_clear()
        for cls, saved in self.attributes.values():
            for a, v in saved.items():
                setattr(cls, a, _copy(v))


def fail_if_unrepeatable(item, obj, case, result, name) -> None:
    """STATE_CHANGES when the learner's function, wrong on `case`, gives another result when
    called again on the same inputs (seeded alike): it keeps state from call to call."""
    snapshot = getattr(item, "_snapshot", None)
    compare = case.same or item.same
    if snapshot is None or item.is_module or result is None or not safely(compare, result, result):
        return
    again = call(item._run, obj, clone(case.args), case, seed=case.seed)
    kept = snapshot.changed()
    if kept and again.error is None and safely(compare, again.value, result):
        # the state may have been put back since `result` (a counter counting again): once more
        again = call(item._run, obj, clone(case.args), case, seed=case.seed)
    if kept and again.error is None and not safely(compare, again.value, result):
        STATE_CHANGES.fail(item._details(case), name=name, label=case.label, kept=" and ".join(kept))


def vary_each_argument(item, target, passed) -> None:
    """STATE_KEPT when a function right on each case gets one of them wrong with one argument
    changed (taken from another case) right after the case itself: a cache keyed on some of
    its arguments only (a word and a pair, not the new id)."""
    for case in passed:
        for j, value in enumerate(case.args):
            other = next((c.args[j] for c in passed if len(c.args) == len(case.args)
                          and not _same(c.args[j], value)), None)
            if other is None:
                continue
            varied = dataclasses.replace(case, args=(*case.args[:j], other, *case.args[j + 1:]),
                                         label=f"{case.label}, with {case.names[j] or f'argument {j + 1}'}"
                                               f" = {other!r}"[:300])
            try:
                expected = item._expected(item._reference_object(varied), varied)
            except Exception:  # the reference refuses the mixed inputs
                continue
            item._snapshot.restore()
            call(item._run, target, clone(case.args), case, seed=case.seed)
            outcome = call(item._run, target, clone(varied.args), varied, seed=varied.seed)
            if outcome.error is None and safely(varied.same or item.same, outcome.value, expected):
                continue
            kept = " and ".join(item._snapshot.changed())
            item._snapshot.restore()
            alone = call(item._run, target, clone(varied.args), varied, seed=varied.seed)
            if kept and alone.error is None and safely(varied.same or item.same, alone.value, expected):
                STATE_KEPT.fail(item._details(varied), name=item.name, first="when called first",
                                later="right after the same call with its other arguments as they were",
                                kept=kept, label=varied.label)
