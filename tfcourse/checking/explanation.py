"""What a wrong result or an error tells, in the learner's terms: what torch's common errors
mean (`explain_error`), what a wrong shape tells (`shape_story`), the first way a result is
not the expected kind (`structure_problem`), where it is not finite, and how its values
differ (`difference`)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re

import torch

from .comparison import close, kind_of, safely
from .errors import sizes_of
from .mistakes import WRONG_DTYPE, WRONG_ORDER, WRONG_SHAPE, WRONG_TYPE, Mistake


def _axis(i, ndim):
    return "the first axis" if i == 0 else "the last axis" if i == ndim - 1 else f"axis {i}"


def _named(names, axes) -> str:
    """'the batch and seq axes' for indices `axes` of the expected shape's `names`."""
    said = [names[i] for i in axes]
    return f"the {', '.join(said[:-1])} and {said[-1]} axes"


def _merged(got, want, names) -> str:
    """': the seq and d_model axes merged into one ...' when each axis of `got` is a run of
    consecutive expected axes multiplied together (or each expected axis a run of yours: split),
    with the expected axes named by `names`; '' when not."""
    def runs(short, long):  # the consecutive axes of `long` that make each axis of `short`
        found, i = [], 0
        for size in short:
            j, product = i, 1
            while j < len(long) and (product < size or j == i):
                product *= long[j]
                j += 1
            if product != size:
                return None
            found.append(range(i, j))
            i = j
        return found if i == len(long) else None

    if len(got) < len(want):
        groups = runs(got, want)
        merged = [g for g in groups or () if len(g) > 1]
        if merged:
            told = "; ".join(f"{_named(names, g)} merged into one" for g in merged)
            return (f": {told} (a flatten or view that starts at the wrong axis: merge only the "
                    "axes that belong together, after moving them side by side)")
    else:
        groups = runs(want, got)
        split = [(i, g) for i, g in enumerate(groups or ()) if len(g) > 1]
        if split:
            told = "; ".join(f"the {names[i]} axis split into {len(g)}" for i, g in split)
            return f": {told} (a view or unflatten too many)"
    return ""


def shape_story(got, expected, inputs=(), axes=()) -> str:
    """What a wrong shape tells, in words: ': an extra axis of size 1 in front ...', or ''.
    `inputs`: (name, tensor) pairs, to say where a size comes from; `axes`: the names of the
    expected shape's axes ("batch", "seq", ...), to say which are swapped or merged."""
    got, want = tuple(got), tuple(expected)
    n, m = len(got), len(want)
    named = len(axes) == m
    if n == m + 1:
        for i in range(n):
            if got[:i] + got[i + 1:] == want:
                where = "in front" if i == 0 else "at the end" if i == n - 1 else f"at position {i}"
                if got[i] == 1:
                    return (f": an extra axis of size 1 {where}: an unsqueeze, a [None], a "
                            "keepdim=True or a batch axis too many")
                return (f": an extra axis of size {got[i]} {where}{sizes_of(got[i], inputs)}: "
                        "it should have been merged into another axis (or reduced)")
    if n == m - 1:
        for i in range(m):
            if want[:i] + want[i + 1:] == got:
                if want[i] == 1:
                    return (f": the axis of size 1 at position {i} is missing: a squeeze or an "
                            "index [0] too many, or keepdim=True forgotten")
                return (f": {_axis(i, m)}, of size {want[i]}, is missing: reduced away (summed, "
                        "averaged or indexed) where it should stay")
    if n < m and tuple(w for w in want if w != 1) == got:
        ones = [i for i, w in enumerate(want) if w == 1]
        return (f": the axes of size 1 at positions {', '.join(map(str, ones))} are missing: "
                f"expected {want}, a shape that broadcasts where it is used")
    if named and n != m and math.prod(got) == math.prod(want):
        told = _merged(got, want, axes)
        if told:
            return told
    if n > m and got[n - m:] == want and set(got[:n - m]) == {1}:
        return (f": {n - m} extra axes of size 1 in front: already shaped for broadcasting "
                f"(as (batch, heads, ...) masks are), where {want} is asked for")
    if n != m:
        return f": {n} axes where {m} are expected"
    diff = [i for i in range(n) if got[i] != want[i]]
    if sorted(got) == sorted(want):
        if named and len(set(want)) == m:
            order = tuple(axes[want.index(g)] for g in got)
            layout = _LAYOUT.get(frozenset(axes[i] for i in diff), "")
            return (f": {_named(axes, diff)} {'swapped' if len(diff) == 2 else 'permuted'}: yours "
                    f"are ({', '.join(order)}), expected ({', '.join(axes)}){layout}")
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
                    f"{sizes_of(k, inputs)} was reduced (summed or averaged) instead of "
                    "concatenated into this one")
        if w and g % w == 0:
            return (f": {where} has {g} = {g // w} x {w}: {g // w} times too many (concatenated "
                    "over an axis that should stay apart?)")
        return f": {where} has {g}{sizes_of(g, inputs)}, expected {w}"
    axes = ", ".join(f"{_axis(i, n)} has {got[i]}{sizes_of(got[i], inputs)} where {want[i]} is "
                     f"expected" for i in diff)
    if math.prod(got) == math.prod(want):
        return (f": the same number of entries, grouped otherwise ({axes}): axes merged or split "
                "in the wrong order? (a loop over a tensor walks its FIRST axis)")
    return f": {axes}"


_SEQ_FIRST = (" (the (seq, batch, ...) layout of nn.MultiheadAttention's default batch_first="
              "False and of PyTorch's tutorials: this course puts the batch first)")
_LAYOUT = {frozenset(("batch", "seq")): _SEQ_FIRST,
           frozenset(("batch", "seq", "heads")): _SEQ_FIRST,
           frozenset(("heads", "seq")): " (a transpose(1, 2) missing, or one too many)"}


def _not_torch(value) -> str:
    """What a result that is not a tensor tells: ' (a NumPy array: ...)', or ''."""
    if type(value).__module__.split(".")[0] in ("numpy", "jax", "jaxlib", "tensorflow"):
        return (f" (a {type(value).__module__.split('.')[0]} array: NumPy's, JAX's and "
                "TensorFlow's operations leave torch, its gradients and its devices: write it "
                "with torch operations)")
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return (f" ({len(value)} tensors in a {type(value).__name__}: torch.stack or torch.cat "
                "them into one)")
    return ""


def structure_problem(value, expected, what: str, parts=(), inputs=(), axes=()) -> tuple[Mistake, str] | None:
    """The first way `value` cannot be `expected`'s kind of result: (mistake, text) with
    WRONG_TYPE, WRONG_SHAPE or WRONG_DTYPE, or None. A wrong shape says what it tells
    (shape_story), with `inputs` (name, tensor) to name where a size comes from."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(value, torch.Tensor):
            return WRONG_TYPE, f"{what} should be a torch.Tensor, got {kind_of(value)}{_not_torch(value)}"
        if value.shape != expected.shape:
            hf = (expected.dtype == torch.bool and value.dim() == 2 < expected.dim()
                  and value.shape[-1] == expected.shape[-1])
            return WRONG_SHAPE, (f"{what} has shape {tuple(value.shape)}, expected "
                                 f"{tuple(expected.shape)}"
                                 f"{shape_story(value.shape, expected.shape, inputs, axes)}"
                                 + (" (a (batch, src_len) mask, the shape of Hugging Face's "
                                    "attention_mask: here a mask broadcasts over heads and "
                                    "queries as it is: (batch, 1, 1, src_len))" if hf else ""))
        if value.dtype != expected.dtype:
            return WRONG_DTYPE, (f"{what} has dtype {value.dtype}, expected {expected.dtype}"
                                 f"{dtype_story(value, expected, inputs)}")
        return None
    if isinstance(expected, (tuple, list)):
        kind = "a tuple" if isinstance(expected, tuple) else "a list"
        names = parts if len(parts) == len(expected) else [f"{what}[{i}]" for i in range(len(expected))]
        shape = f" ({', '.join(names)})" if parts else f" of {len(expected)}"
        if not isinstance(value, (tuple, list)):
            return WRONG_TYPE, f"{what} should be {kind}{shape}, got {kind_of(value)}"
        if len(value) != len(expected):
            return WRONG_TYPE, f"{what} should be {kind}{shape}, got {len(value)} values"
        for i, (v, e, name) in enumerate(zip(value, expected, names)):
            problem = structure_problem(v, e, name, inputs=inputs, axes=axes if i == 0 else ())
            if problem:
                return problem
        return None
    if expected is None:
        return None if value is None else (WRONG_TYPE, f"{what} should be None, got {kind_of(value)}")
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return WRONG_TYPE, f"{what} should be a Python number, got {kind_of(value)}"
        return None
    if dataclasses.is_dataclass(expected):
        missing = [f.name for f in dataclasses.fields(expected) if not hasattr(value, f.name)]
        if missing:
            return WRONG_TYPE, (f"{what} should be a {type(expected).__name__} "
                                f"({', '.join(f.name for f in dataclasses.fields(expected))}), "
                                f"got {kind_of(value)}")
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


def not_finite(value, expected, what: str, parts) -> tuple[str, str, int, int] | None:
    """(name, "NaN" or "inf", count, total) for the first tensor of a result that is not
    finite where the expected one is, or None."""
    for v, e, name in _leaves(value, expected, what, parts):
        if v.is_floating_point() and v.shape == e.shape:
            bad = ~torch.isfinite(v) & torch.isfinite(e)
            if bad.any():
                kind = "NaN" if torch.isnan(v[bad]).any() else "inf"
                return name, kind, int(bad.sum()), v.numel()
    return None


def substitution(actual: torch.Tensor, expected: torch.Tensor) -> str:
    """'every difference is a 2 where 1 is expected, all at position 0 of the last axis' when
    two same-shape tensors of whole numbers differ at several entries, always by the same
    value in place of the same other (one id, or one convention, for another); else ''."""
    if actual.is_floating_point() or expected.is_floating_point() or actual.dim() < 1 \
            or torch.bool in (actual.dtype, expected.dtype):
        return ""
    wrong = actual != expected
    pairs = set(zip(actual[wrong].tolist(), expected[wrong].tolist()))
    if len(pairs) != 1 or int(wrong.sum()) < 2:
        return ""
    (got, want), = pairs
    columns = set(wrong.nonzero()[:, -1].tolist())
    where = f", all at position {columns.pop()} of the last axis" if len(columns) == 1 else ""
    told = f"every difference is a {got} where {want} is expected{where}"
    if got == -100:
        told += (": -100 is the ignore_index of F.cross_entropy and of Hugging Face's labels; "
                 "here padding is marked with pad_id")
    return told


def difference(actual: torch.Tensor, expected: torch.Tensor) -> str:
    """A short account of how two same-shape tensors differ."""
    if not actual.is_floating_point() or not expected.is_floating_point():
        wrong = actual != expected
        index = tuple(int(i) for i in wrong.nonzero()[0]) if wrong.any() else ()
        told = substitution(actual, expected)
        return (f"{int(wrong.sum())} of {actual.numel()} entries differ, first at index {index}: "
                f"got {actual[index].item()}, expected {expected[index].item()}"
                + (f" ({told})" if told else ""))
    diff = (actual.double() - expected.double()).abs().nan_to_num(float("inf"))
    index = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    return (
        f"largest difference {diff.max().item():.3g} at index {index}: "
        f"got {actual[index].item():.4g}, expected {expected[index].item():.4g}"
    )


def first_difference(value, expected, what: str, parts, axes=(), rounding=True) -> tuple[str, str, bool]:
    """The name of the first tensor of a result that differs from the expected one, how, and
    whether that tells what the result is (a resemblance: a factor, an order, ...);
    `rounding` False: never a 16-bit rounding (no 16-bit float was made)."""
    numbers = (int, float)
    if (isinstance(value, (list, tuple)) and isinstance(expected, (list, tuple))
            and len(value) == len(expected) > 1
            and all(isinstance(x, numbers) for x in (*value, *expected))):
        a, e = (torch.tensor(v, dtype=torch.float64) for v in (value, expected))
        told = resemblance(a, e, what) or grouped_factor(a, e, what, parts)
        return what, told or "its values differ", bool(told)
    for i, (v, e, name) in enumerate(_leaves(value, expected, what, parts)):
        if v.shape == e.shape and not safely(close, v, e):
            if not v.is_floating_point() and not e.is_floating_point() and v.dim() >= 1 \
                    and v.numel() >= 3:
                told = _shifted(v.double(), e.double(), name)
                if told:
                    return name, f"{told}; {difference(v, e)}", True
                if substitution(v, e):
                    return name, difference(v, e), True
                told = _rows_moved(v, e, name)
                if told:
                    return name, f"{told}; {difference(v, e)}", True
            if v.dtype == e.dtype == torch.bool and torch.equal(v, ~e):
                return name, (f"your {name} {_is(name)} the expected with True and False swapped "
                              "at every entry: the other polarity (True = masked out, as in "
                              "nn.MultiheadAttention's bool attn_mask and key_padding_mask; "
                              "here True = may attend)"), True
            try:
                told = resemblance(v, e, name, axes if i == 0 else (), rounding)
                return name, (f"{told}; " if told else "") + difference(v, e), bool(told)
            except Exception:  # a learner's tensor that cannot be described
                return name, "its values differ", False
    return what, "its values differ", False



_SETTING = re.compile(r"(\w+)=([^,\s)]+)")


def grouped_factor(actual: torch.Tensor, expected: torch.Tensor, what: str, parts) -> str:
    """'your rates are the expected times a factor that depends on d_model and warmup alone
    (the same at every step): ...' when each number of a result is told by its settings
    (`parts`, one per number, as "... step=1, d_model=512, warmup=4000") and the result is the
    expected times one constant over each group of numbers that share all settings but one
    (a factor of the other settings: a scale written wrong, not the formula's shape); ''
    when not."""
    settings = [dict(_SETTING.findall(p)) for p in parts or ()]
    if (len(settings) != actual.numel() or actual.dim() != 1 or not all(settings)
            or len({tuple(f) for f in settings}) != 1
            or not (torch.isfinite(actual).all() and torch.isfinite(expected).all())):
        return ""
    names = list(settings[0])
    for varying in names:
        others = [n for n in names if n != varying]
        groups = {}
        for i, f in enumerate(settings):
            groups.setdefault(tuple(f[n] for n in others), []).append(i)
        if not others or len(groups) < 2 or max(map(len, groups.values())) < 2:
            continue
        factors = {}
        for key, index in groups.items():
            a, e = actual[index], expected[index]
            if not (e.abs() > 0).all():
                break
            factor = float((a * e).sum() / (e * e).sum())
            if not _fits(a, factor * e):
                break
            factors[key] = factor
        else:
            if len({f"{f:.4g}" for f in factors.values()}) < 2:
                continue  # one constant for all: resemblance's to tell
            shown = "; ".join(f"{factor:.3g} for {', '.join(f'{n}={v}' for n, v in zip(others, key))}"
                              for key, factor in factors.items())
            return (f"your {what} {_is(what)} the expected times a factor that depends on "
                    f"{' and '.join(others)} alone, the same at every {varying} ({shown}): a "
                    f"scale written wrong, not the way {varying} enters")
    return ""


def fail_if_reordered(result, expected, what: str, parts, compare, label: str) -> None:
    """WRONG_ORDER when a tuple result is the expected one with its parts in another order:
    the same values (or, failing that, the same types, shapes and dtypes)."""
    if not (isinstance(expected, tuple) and isinstance(result, (tuple, list))
            and len(result) == len(expected) and 1 < len(expected) <= 4):
        return
    names = parts if len(parts) == len(expected) else [f"{what}[{i}]" for i in range(len(expected))]
    for how, fits in (("values", lambda r: safely(compare, r, expected)),
                      ("kinds of values", lambda r: structure_problem(r, expected, what, parts) is None)):
        for order in itertools.permutations(range(len(expected))):
            if list(order) != sorted(order) and fits(tuple(result[i] for i in order)):
                got = [names[order.index(i)] for i in range(len(expected))]
                WRONG_ORDER.fail(expected=", ".join(names), got=", ".join(got), how=how, label=label)


def _fits(actual: torch.Tensor, guess: torch.Tensor) -> bool:
    """Whether `guess` gives `actual`, up to a relative 1e-4 of the values' scale."""
    scale = float(actual.abs().max())
    return bool(guess.shape == actual.shape and torch.isfinite(guess).all()
                and torch.allclose(actual, guess, rtol=1e-4, atol=1e-5 * scale + 1e-12))


_ELEMENTWISE = (("exp", torch.exp), ("log", torch.log), ("square", torch.square),
                ("square root", torch.sqrt), ("absolute value", torch.abs),
                ("softmax over the last axis", lambda x: x.softmax(-1)),
                ("log_softmax over the last axis", lambda x: x.log_softmax(-1)))


def resemblance(actual, expected, what: str = "output", axes=(), rounding=True) -> str:
    """What a wrong result is, told by the expected one, when it is one of: a constant factor
    or offset of it (with the value), an elementwise function of it, its values in another
    order along one axis, two of its axes swapped (named by `axes`, the expected's axis
    names), its values shifted by one position along an axis, or a monotone function of it;
    '' when none."""
    if not (isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)
            and actual.shape == expected.shape and actual.numel() >= 2
            and actual.is_floating_point() and expected.is_floating_point()):
        return ""
    a, e = actual.detach().double(), expected.detach().double()
    if not (torch.isfinite(a).all() and torch.isfinite(e).all()) or not e.abs().max() > 0:
        return ""
    factor = float((a * e).sum() / (e * e).sum())
    if abs(factor - 1) > 1e-3 and _fits(a, factor * e):
        if abs(factor + 1) < 1e-3:
            return f"your {what} {_is(what)} the expected with its sign flipped, at every entry"
        return (f"your {what} {_is(what)} {factor:.3g} times the expected at every entry (a "
                "constant factor)")
    offset = float((a - e).mean())
    if abs(offset) > 1e-4 * float(e.abs().max()) and _fits(a, e + offset):
        return (f"your {what} {_is(what)} the expected {'plus' if offset > 0 else 'minus'} "
                f"{abs(offset):.3g} at every entry (a constant offset)")
    with torch.no_grad():
        for name, f in _ELEMENTWISE:
            if _fits(a, f(e)):
                return f"your {what} {_is(what)} the {name} of the expected, entry by entry"
            if _fits(e, f(a)):
                return f"the {name} of your {what} is the expected, entry by entry"
    told = _reordered(a, e, what) or _swapped(a, e, what, axes) or _shifted(a, e, what)
    if told:
        return told
    order = e.flatten().argsort()
    steps = a.flatten()[order].diff()
    distinct = e.flatten()[order].diff() > 1e-6 * float(e.abs().max())
    ties = steps[~distinct].abs() <= 1e-4 * float(a.abs().max())
    rising, falling = (steps[distinct] > 0).all(), (steps[distinct] < 0).all()
    everywhere = ((a - e).abs() > 1e-4 * float(e.abs().max())).double().mean() >= 0.5
    if int(distinct.sum()) >= 5 and ties.all() and (rising or falling) and everywhere:
        way = "increasing" if rising else "decreasing"
        return (f"your {what} {_is(what)} an {way} function of the expected, entry by entry (each "
                "entry's rank is right, its value is not): a step applied to every entry, or "
                "one missing")
    return _low_precision(a, e, what, actual.dtype) if rounding else ""


def _low_precision(a: torch.Tensor, e: torch.Tensor, what: str, dtype: torch.dtype) -> str:
    """'your output is the expected up to a rounding noise of about 2e-03 ...' when the two differ
    by noise of the size of float16's or bfloat16's rounding, at many entries and uncorrelated
    with the values (a rounding, not a formula), in a result of a wider dtype; else ''."""
    if dtype not in (torch.float32, torch.float64) or a.numel() < 8:
        return ""
    scale = float(e.abs().max())
    error = a - e
    largest = float(error.abs().max()) / scale
    spread = float((error.abs() > 4 * torch.finfo(dtype).eps * scale).double().mean())
    if not largest or spread < 0.25 or abs(float(torch.corrcoef(torch.stack(
            (error.flatten(), e.flatten())))[0, 1])) > 0.5:
        return ""
    if largest > 8 * 2.0 ** -8:
        return ""
    kept = 24 if dtype == torch.float32 else 53
    return (f"your {what} {_is(what)} the expected up to a rounding noise of about {largest:.0e} "
            f"of its scale, at most entries: the rounding of a 16-bit float (float16 keeps 11 "
            f"significant bits, bfloat16 8, {str(dtype).removeprefix('torch.')} {kept}): an "
            "intermediate computed in float16 or bfloat16 (a .half() or .to(...), an autocast, "
            "a constant made in it)")


def _is(what: str) -> str:
    return "are" if what.endswith("s") else "is"


def _rows_moved(a: torch.Tensor, e: torch.Tensor, what: str) -> str:
    """'each row of your src holds the expected's values moved to its end ...' when every row
    (last axis) is the expected's rolled right by its own amount, not the same for all (the
    padding put first: left padding); else ''."""
    if a.dim() != 2 or a.shape != e.shape:
        return ""
    shifts = []
    for mine, theirs in zip(a, e):
        found = [k for k in range(a.size(1)) if torch.equal(mine, theirs.roll(k))]
        if not found:
            return ""
        shifts.append(found[0])
    if len(set(shifts)) < 2:
        return ""
    return (f"each row of your {what} holds the expected's values moved right by its own amount "
            f"({', '.join(map(str, shifts))}): the padding put first (left padding, Hugging "
            "Face's padding_side='left'), where it goes after the tokens")


def _swapped(a: torch.Tensor, e: torch.Tensor, what: str, axes=()) -> str:
    """'your output is the expected with its batch and seq axes swapped ...' (two axes of the
    same size), or ''."""
    for i, j in itertools.combinations(range(a.dim()), 2):
        if a.size(i) == a.size(j) > 1 and _fits(a, e.transpose(i, j)):
            which = (_named(axes, (i, j)) if len(axes) == a.dim()
                     else f"axes {i} and {j}")
            layout = _LAYOUT.get(frozenset(axes[k] for k in (i, j)), "") if len(axes) == a.dim() else ""
            return (f"your {what} {_is(what)} the expected with {which} swapped (both of size "
                    f"{a.size(i)}){layout}")
    return ""


def _shifted(a: torch.Tensor, e: torch.Tensor, what: str) -> str:
    """'your output at position i along the first axis is the expected's at i + 1 ...' (off by
    one: counting from 1, or a slice that starts one late), or ''."""
    for axis in range(a.dim()):
        n = a.size(axis)
        if n < 3:
            continue
        head, tail = e.narrow(axis, 0, n - 1), e.narrow(axis, 1, n - 1)
        if _fits(head, tail):  # the expected does not change along this axis
            continue
        for k, (mine, theirs) in ((1, (a.narrow(axis, 0, n - 1), tail)),
                                  (-1, (a.narrow(axis, 1, n - 1), head))):
            if _fits(mine, theirs):
                return (f"your {what} along {_axis(axis, a.dim())} is the expected shifted by one: "
                        f"position i holds the expected's i {'+' if k > 0 else '-'} 1 (off by one: "
                        "positions counted from 1 instead of 0, or a slice that starts one "
                        f"{'late' if k > 0 else 'early'})")
    return ""


def _reordered(a: torch.Tensor, e: torch.Tensor, what: str) -> str:
    """'your output holds the right values in another order along axis 1: ...', or ''."""
    for axis in range(a.dim()):
        n = a.size(axis)
        if n < 2:
            continue
        source = []
        for i in range(n):
            found = [j for j in range(n) if _fits(a.select(axis, i), e.select(axis, j))]
            if not found:
                break
            source.append(i if i in found else found[0])
        if len(source) < n or source == list(range(n)):
            continue
        where = _axis(axis, a.dim())
        shifts = {(j - i) % n for i, j in enumerate(source)}
        if len(shifts) == 1:
            k = shifts.pop()
            how = f"rolled by {k}: position i holds the expected's i + {k}" if k <= n // 2 else \
                f"rolled by {n - k}: position i holds the expected's i - {n - k}"
        elif source == list(range(n))[::-1]:
            how = "reversed"
        else:
            shown = ", ".join(f"{i} <- {j}" for i, j in enumerate(source) if i != j)
            how = f"permuted ({shown}, yours <- expected)"
        return f"your {what} holds the right values in another order along {where}: {how}"
    return ""


def dtype_story(value: torch.Tensor, expected: torch.Tensor, inputs=()) -> str:
    """Why a result came out in another dtype, and where that dtype comes from: ' (...)'."""
    got, want = value.dtype, expected.dtype
    if want == torch.bool:
        try:
            values = set(value.unique().tolist()) if value.numel() else set()
        except Exception:
            return ""
        if not value.is_floating_point() and values <= {0, 1}:
            return (": a mask of 0/1 integers, Hugging Face's attention_mask convention (1 = "
                    "attend, int64): here a mask is bool; a comparison (tokens != pad_id) gives "
                    "one, .long() or .int() after it undoes that")
        if value.is_floating_point() and values <= {0.0, -math.inf, 1.0} or \
                value.is_floating_point() and bool((value <= 0).all()):
            return (": an additive float mask (0 where attention is allowed, -inf or a large "
                    "negative number where not), the convention of nn.MultiheadAttention's float "
                    "attn_mask and of Hugging Face's extended mask: here a mask is bool, True = "
                    "may attend")
        return ": a mask is bool (True = may attend): a comparison gives one"
    if value.is_floating_point() and not expected.is_floating_point():
        return float_for_integer(value)
    floats = {t.dtype for _, t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()}
    if got == torch.float64 and want != torch.float64 and torch.float64 not in floats:
        return (": float64, the dtype of NumPy arrays, of math on Python floats turned into "
                "tensors with dtype=torch.float64, and of anything computed from a float64 tensor "
                "(angles made with torch.arange(..., dtype=torch.float64) give a float64 table): "
                f"make the tensors you create {want} (or .to({want}) the result)")
    if not value.is_floating_point() and not expected.is_floating_point():
        if got == torch.int32 and want == torch.int64:
            return (": int32, the integer dtype of TensorFlow/Keras and JAX (and of some NumPy "
                    "builds): torch's ids and indices are int64 (.long())")
        return ""
    if expected.is_floating_point():
        low = got in (torch.float16, torch.bfloat16)
        return (" (the inputs' dtype" + (": a low-precision cast, or an autocast region, not "
                "undone" if low else "") + ")")
    return ""


def float_for_integer(value: torch.Tensor) -> str:
    """Why a float result was likely given where integers are expected: ' (...)'."""
    try:
        fractional = bool((value != value.floor()).any())
    except Exception:
        return ""
    if fractional:
        return (": values with a fractional part where whole numbers are expected: a true "
                "division `/` where `//` is meant (or torch.div(..., rounding_mode='floor'))?")
    return (": whole numbers stored as floats: a `/` (it always gives a float), or a tensor "
            "made as float (torch.zeros, torch.tensor(1.0), ...)? Use `//`, or .long()")


# What breaks numerically in each regime that a case's features name (case_features).
REGIMES = {
    "masked": "a row whose every score is -inf has a softmax of 0 / 0 = NaN",
    "magnitude": ("at such magnitudes e^x overflows (float32 holds e^88 at most: inf, then inf / "
                  "inf = NaN) and the rows far below a maximum taken over more than their own "
                  "row underflow to 0 (e^-104 is 0 in float32: then 0 / 0)"),
    "offset": ("E[x^2] - E[x]^2 subtracts two numbers of about mean^2 to find a small one: "
               "catastrophic cancellation, float32 keeps 7 digits and the variance loses them "
               "all (subtract the mean first, then square)"),
    "one": ("with one position a reduction over the sequence has a single term, an unbiased "
            "(n - 1) statistic divides by 0, a squeeze() removes the axis, and a slice [:-1] or "
            "[1:] is empty"),
    "batch1": ("with a batch of one a squeeze() removes the batch axis, and a loop or an index "
               "that assumes several sequences finds one"),
    "low": ("float16 keeps about 3 significant digits and overflows past 65504 (a -1e9 or "
            "float32's finfo.min fill becomes -inf), bfloat16 keeps about 2: sums lose their "
            "small terms, and a constant made in float32 changes the dtype"),
}


def case_features(args, train: bool = False) -> dict[str, str]:
    """What sets a case's inputs apart, each feature by name: 4-D inputs, a mask, a fully
    masked row, large magnitudes, positions whose mean is large against their spread, low
    precision, a sequence of one position, a batch of one, float64, training mode (what
    breaks with some of them: REGIMES)."""
    features = {}
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    rank = max((t.dim() for t in tensors if t.is_floating_point()), default=0)
    if rank >= 4:
        features["rank"] = f"{rank}-D inputs"
    if any(t.dtype == torch.bool and t.dim() >= 1 and t.numel() and not t.all() for t in tensors):
        features["mask"] = "a mask"
    if any(t.dtype == torch.bool and t.dim() >= 1 and t.numel() and (~t.any(-1)).any()
           for t in tensors):
        features["masked"] = "a fully masked row (a query with no key to see, or a masked block)"
    finite = [t for t in tensors if t.is_floating_point() and t.numel() and torch.isfinite(t).all()]
    magnitude = max((float(t.abs().max()) for t in finite), default=0.0)
    if magnitude >= 100:
        features["magnitude"] = f"inputs as large as {magnitude:.0e}"
    offset = max((float(t.double().mean(-1).abs().max() / t.double().std(-1, correction=0).min())
                  for t in finite if t.dim() >= 2 and t.size(-1) > 1 and t.std(-1).min() > 0),
                 default=0.0)
    if offset >= 1000:
        features["offset"] = ("positions whose mean is large against their spread (about "
                              f"{offset:.0e} times it)")
    low = sorted({str(t.dtype).removeprefix("torch.") for t in tensors
                  if t.dtype in (torch.float16, torch.bfloat16)})
    if low:
        features["low"] = f"{' and '.join(low)} inputs"
    if any(t.dim() >= 3 and t.is_floating_point() and t.size(-2) == 1
           or t.dim() == 2 and not t.is_floating_point() and t.dtype != torch.bool and t.size(1) == 1
           for t in tensors):
        features["one"] = "a sequence of one position"
    if any(t.dim() >= 2 and t.size(0) == 1 and t.dtype != torch.bool for t in tensors):
        features["batch1"] = "a batch of one"
    if any(t.dtype == torch.float64 for t in tensors):
        features["float64"] = "float64 inputs"
    if train:
        features["train"] = "training mode (dropout on)"
    return features


def news_of(case, passed) -> str:
    """' Your code is right on the 5 cases before this one, and this is the first with
    4-D inputs.' when the failing case is the first with something (or with two things,
    each seen before, together), or ''."""
    seen = {}
    for c in passed:
        seen.update(case_features(c.args, c.train))
    features = case_features(case.args, case.train)
    new = [text for name, text in features.items() if name not in seen]
    together = ""
    if not new and len(features) >= 2 and not any(
            set(features) <= set(case_features(c.args, c.train)) for c in passed):
        new, together = list(features.values()), " together"  # each seen, never all at once
    if not passed or not new:
        return ""
    cases = f"{len(passed)} case{'s' * (len(passed) > 1)}"
    regimes = "; ".join(REGIMES[name] for name in features if name in REGIMES
                        and features[name] in new)
    return (f" Your code is right on the {cases} before this one, and this is the first "
            f"with {' and '.join(new)}{together}: what does your code do with "
            f"{'them' if len(new) > 1 else 'it'}?" + (f" ({regimes})" if regimes else ""))
