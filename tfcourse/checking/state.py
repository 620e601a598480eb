"""State kept between calls: what the learner's module holds that one call can change for the
next (its variables: caches, tables, counters; its functions' default arguments; functools
caches; class attributes), taken before the first case (`snapshot`) so that a wrong result
can be tried again with that state put back (`Snapshot.restore`). A function right on its
first call and wrong on a later one is then named as such, not as the mistake its later
results happen to resemble."""

from __future__ import annotations

import copy
import sys
import types

import torch

_KEPT = (dict, list, set, bytearray, torch.Tensor)  # containers a call can fill (and subclasses)


def _copy(value):
    try:
        return copy.deepcopy(value)
    except Exception:  # something that cannot be copied: not ours to put back
        return value


def _same(a, b) -> bool:
    try:
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
        for key, value in list(self.names.items()):
            if key.startswith("__") or isinstance(value, types.ModuleType):
                continue
            if isinstance(value, _KEPT) or value is None or isinstance(value, (int, float, str)):
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

    def changed(self) -> list[str]:
        """What differs from the snapshot, in the learner's words."""
        found = [f"the module's `{k}`" for k, v in self.values.items()
                 if k in self.names and not _same(self.names[k], v)]
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
        for function, defaults, kwdefaults, attributes in self.defaults.values():
            function.__defaults__, function.__kwdefaults__ = _copy(defaults), _copy(kwdefaults)
            function.__dict__.update(_copy(attributes))
        for _, f in self.cached:
            f.cache_clear()
        for cls, saved in self.attributes.values():
            for a, v in saved.items():
                setattr(cls, a, _copy(v))
