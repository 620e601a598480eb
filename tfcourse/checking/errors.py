"""What an error tells, in the learner's terms: whether two errors are the same
(`same_error`), a complaint about sizes (`shape_error`), what torch's common errors mean
(`explain_error`), and the failures of a call that did not return (`fail_if_stopped`,
`fail_on_error`), which checks of their own (an Item's `after`) use too."""

from __future__ import annotations

import re

import torch

from . import sandbox
from .mistakes import EXITED, NOT_IMPLEMENTED, RAISED, RECURSION, SEQ_FIRST, TOO_SLOW
from .sandbox import Exited, Outcome, Timeout, exit_how, first_line


def same_error(a: BaseException, b: BaseException) -> bool:
    """Same exception type and the same first line of message (whatever the class is called:
    "'MyEncoder' object has no attribute ..." is the same as "'Encoder' object ...", and
    "list index out of range" as "tuple index out of range")."""

    def text(error):
        text = re.sub(r"^'\w+' object", "object", first_line(error))
        return re.sub(r"^(list|tuple) index out of range$", "index out of range", text)

    return type(a) is type(b) and text(a) == text(b)


_SHAPE_WORDS = re.compile(r"size|shape|dimension|broadcast|expand|must match|out of range")


def shape_error(error: BaseException) -> bool:
    """Whether `error` is torch's (or the reference's) complaint about sizes or shapes."""
    return isinstance(error, (RuntimeError, ValueError, IndexError)) and bool(
        _SHAPE_WORDS.search(first_line(error)))


BROADCAST = re.compile(r"The size of tensor a \((\d+)\) must match the size of tensor b "
                        r"\((\d+)\) at non-singleton dimension (\d+)")
_MATMUL = re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)")
AXIS_NAMES = ("batch size", "sequence length")
_MASK_SHAPE = re.compile(r"mask of shape \(([\d, ]*)\) does not broadcast to the scores' shape "
                         r"\(\.\.\., q_len, k_len\) = \(([\d, ]*)\)")


def batch_and_seq(a: int, b: int, inputs) -> tuple[str, int, int] | None:
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


def explain_error(error: BaseException, inputs=()) -> str:
    """What a common torch error means in the learner's terms: ' (...)' or ''."""
    if type(error).__name__ == "BdbQuit":
        return (" (a breakpoint() or pdb.set_trace() left in your code: the check runs without a "
                "terminal, so the debugger quits at once: remove it, or print what you want to see)")
    text = first_line(error)
    found = BROADCAST.search(text)
    if found:
        a, b, dim = map(int, found.groups())
        if 0 in (a, b):
            return (f" (one of the two tensors is empty along axis {dim}: a slice whose end is "
                    "not after its start?)")
        said = [f"{size}{sizes_of(size, inputs).replace(f'{size} is ', '')}" for size in (a, b)]
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
    if re.search(r"tuple of ints,? ?but (got|found element of type) float|'float' object cannot be "
                 r"interpreted as an integer|slice indices must be integers|received an invalid "
                 r"combination of arguments.*float|only integers, slices", text):
        return (" (a float where a whole number is wanted, as a size, an index or a range: `/` "
                "always gives a float, even when it divides evenly, d_model / n_heads = 4.0: use "
                "`//`, or int(...))")
    found = _MASK_SHAPE.search(text)
    if found:
        mask, scores = (len([n for n in g.split(",") if n.strip()]) for g in found.groups())
        if mask > scores:
            return (f" (the mask has {mask} axes and the scores {scores}: an axis too many: the "
                    "mask given is already in the shape attention wants, its heads axis "
                    "included: an unsqueeze, or a [:, None], too many)")
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


def sizes_of(size, inputs):
    """' (3 is the size of x's axis 1)' when one to three input axes have that size, else ''."""
    hits = [f"{name}'s axis {i}" for name, t in inputs if isinstance(t, torch.Tensor)
            for i, s in enumerate(t.shape) if s == size]
    if not hits or len(hits) > 3:
        return ""
    return f" ({size} is the size of {' and '.join(hits)})"


def fail_if_stopped(outcome: Outcome, name: str, where: str, label: str) -> None:
    """Steps 2-4 of the pipeline: the stub (`where` names the stub's function if the
    traceback cannot), an exit, the time limit."""
    error = outcome.error
    if isinstance(error, NotImplementedError) and outcome.raised_here and "`raise" in outcome.where:
        # (a `raise` statement: torch's C operators raise NotImplementedError on the learner's
        # line too, '"bitwise_xor_cpu" not implemented for 'Float'')
        qualname = outcome.qualname
        NOT_IMPLEMENTED.fail(where=where if qualname in ("", "forward", "__init__") else qualname)
    if isinstance(error, (SystemExit, Exited)):
        EXITED.fail(at=outcome.where, how=exit_how(error), name=name, label=label)
    if isinstance(error, Timeout):
        TOO_SLOW.fail(limit=sandbox.TIME_LIMIT, name=name, label=label)


def fail_on_error(outcome: Outcome, name: str, label: str, inputs=(), news: str = "") -> None:
    """For checks of their own (an Item's `after`): fail if the call `outcome` did not
    return (the stub, an exit, the time limit, an exception). `inputs`: (name, tensor) of
    the call, to say what a size in torch's error is; `news`: what is new in this case
    (Item._news), said after the error."""
    fail_if_stopped(outcome, name, name, label)
    error = outcome.error
    if isinstance(error, RecursionError):
        RECURSION.fail(at=outcome.where, name=name, label=label)
    if error is None:
        return
    said = first_line(error)
    raised = type(error).__name__ + (f": {said}" if said else "")
    found = BROADCAST.search(said)
    axes = found and batch_and_seq(int(found[1]), int(found[2]), inputs)
    if axes:
        first, second = (AXIS_NAMES[i] for i in axes[1:])
        SEQ_FIRST.fail(at=outcome.where, name=name, label=label, a=found[1],
                       b=found[2], input=axes[0], first=first, second=second, error=raised)
    RAISED.fail(at=outcome.where, error=raised + explain_error(error, inputs) + news,
                name=name, label=label)
