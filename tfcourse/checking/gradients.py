"""Cases that backpropagate (`gradient_case`) and the mistake of an output no gradient
flows back from (`no_gradient`)."""

from __future__ import annotations

import dataclasses

import torch

from .mistakes import Mistake


def _detached_backward(*args, **kwargs):
    """What backward() does on a result cut off from its inputs: raise."""
    torch.zeros(1).sum().backward()


NO_GRADIENT_MORE = ("print .requires_grad of what you return, for inputs made with "
                    "requires_grad=True: it must be True; then find the line after which it "
                    "turns False.")


def no_gradient(inputs: str) -> Mistake:
    """The mistake of an output that no gradient flows back from, to `inputs`."""
    return Mistake(
        "no_gradient", f"No gradient flows back to {inputs}",
        "training needs gradients through this code: stay in torch, in a graph (no "
        "torch.no_grad(), .detach(), .item(), .numpy() or new tensors built from values).",
        (_detached_backward, lambda *args, **kwargs: None), more=NO_GRADIENT_MORE)


def gradient_case(case, name: str):
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

