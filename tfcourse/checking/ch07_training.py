"""Checks for exercise 07: a teacher-forcing batch, the label-smoothing loss, the paper's
learning-rate schedule and one training step; and their catalogue of mistakes.

No check trains for long: train_step takes two steps of plain SGD on a small random
Transformer, so that every update is the gradient times the learning rate and each
mistake (gradients kept from the last step, accumulation not averaged, no clipping)
moves the weights somewhere it can be recognised.
"""

import math

import torch
import torch.nn.functional as F

from ..data import BOS, EOS, PAD, Batch, Vocab, pad_sequences
from ..data import make_batch as reference_batch
from ..masks import causal_mask, padding_mask, target_mask
from ..model import Transformer, TransformerConfig
from ..training import label_smoothing_loss as reference_loss
from ..training import noam_lr as reference_noam
from ..training import train_step as reference_step
from .core import (
    CheckFailure,
    Mistake,
    call,
    checks,
    close,
    describe,
    difference,
    fail_on_error,
    first_match,
    tensor_problem,
)

VOCAB = Vocab("abcdefg")

# ----------------------------------------------------------------------------- make_batch


def _batch(pairs, vocab, tgt_in="bos+y", tgt_out="y+eos", tgt_mask="target", src_mask="pad"):
    """make_batch with the variations mistakes make."""
    src = pad_sequences([vocab.encode(s) for s, _ in pairs])
    ys = [vocab.encode(t) for _, t in pairs]
    forms = {"bos+y": lambda y: [BOS, *y], "y+eos": lambda y: [*y, EOS], "y": lambda y: y,
             "bos+y+eos": lambda y: [BOS, *y, EOS], "y+pad": lambda y: [*y, PAD]}
    tgt_in_ids = pad_sequences([forms[tgt_in](y) for y in ys])
    tgt_out_ids = pad_sequences([forms[tgt_out](y) for y in ys])
    masks = {
        "target": lambda: target_mask(tgt_in_ids, PAD),
        "padding": lambda: padding_mask(tgt_in_ids, PAD),
        "causal": lambda: causal_mask(tgt_in_ids.size(1))[None, None],
    }
    source = {"pad": padding_mask(src, PAD), "all": torch.ones_like(padding_mask(src, PAD)),
              "inverted": ~padding_mask(src, PAD)}[src_mask]
    return Batch(src, tgt_in_ids, tgt_out_ids, source, masks[tgt_mask]())


BATCH = "make_batch"
NOT_SHIFTED = Mistake(
    "Decoder targets not shifted",
    "at every position the decoder would be asked for the token it was just given: it learns "
    "to copy its input and never to predict. Feed BOS + y, and ask for y + EOS (one step "
    "ahead).",
    tuple(
        (lambda p, v, i=i, o=o: _batch(p, v, tgt_in=i, tgt_out=o))
        for i, o in (("bos+y", "bos+y"), ("y+eos", "y+eos"), ("y", "y"), ("y", "y+eos"),
                     ("bos+y+eos", "bos+y+eos"))
    ),
)
BATCH_MISTAKES = (
    NOT_SHIFTED,
    Mistake(
        "EOS missing from the targets",
        "the model must learn where to stop: the target is y followed by EOS (and the decoder "
        "input BOS followed by y, one token longer than y).",
        (lambda p, v: _batch(p, v, tgt_out="y"), lambda p, v: _batch(p, v, tgt_out="y+pad")),
    ),
    Mistake(
        "Target mask not causal",
        "the decoder must not see the tokens it is about to predict: combine the padding mask "
        "with the causal mask (tfcourse.masks.target_mask does both).",
        (lambda p, v: _batch(p, v, tgt_mask="padding"),),
    ),
    Mistake(
        "Target mask without padding",
        "the causal mask alone lets the decoder attend to its padding: combine it with the "
        "padding mask of the decoder input (tfcourse.masks.target_mask does both).",
        (lambda p, v: _batch(p, v, tgt_mask="causal"),),
    ),
    Mistake(
        "Source padding not masked",
        "src_mask must be False at the source's padding (padding_mask(src, PAD)), so that "
        "attention gives it no weight.",
        (lambda p, v: _batch(p, v, src_mask="all"),),
    ),
    Mistake(
        "Mask polarity inverted",
        "True means 'may attend': the mask is True at real tokens, False at padding.",
        (lambda p, v: _batch(p, v, src_mask="inverted"),),
    ),
)
FIELDS = ("src", "tgt_in", "tgt_out", "src_mask", "tgt_mask")

# Sources and targets of different lengths, the longest source not with the longest target.
BATCH_CASES = [
    [("abc", "abc"), ("gfedcba", "abcdefg"), ("a", "a")],
    [("ab", "bacd"), ("cdefg", "c"), ("gg", "ggg"), ("fedcb", "bc")],
    [("abcdefgabc", "abcdefgabc")],
]


def _mask_equal(actual, expected):
    if not isinstance(actual, torch.Tensor) or actual.dtype != torch.bool:
        return False
    try:
        return torch.equal(actual.expand(expected.shape), expected)  # any broadcastable form
    except RuntimeError:
        return False


def _same_batch(actual, expected):
    try:
        values = [getattr(actual, f) for f in FIELDS]
    except AttributeError:
        return False
    ids = all(isinstance(a, torch.Tensor) and a.shape == e.shape and torch.equal(a.long(), e)
              for a, e in zip(values[:3], (expected.src, expected.tgt_in, expected.tgt_out)))
    return ids and _mask_equal(values[3], expected.src_mask) and \
        _mask_equal(values[4], expected.tgt_mask)


@checks(BATCH)
def check_make_batch(fn):
    """Compare `fn` with the reference on BATCH_CASES; name the mistake when one matches."""
    for pairs in BATCH_CASES:
        inputs = f"pairs={pairs}"
        outcome = call(fn, list(pairs), VOCAB)
        fail_on_error(outcome, BATCH, inputs)
        expected, result = reference_batch(pairs, VOCAB), outcome.value
        if _same_batch(result, expected):
            continue
        mistake = first_match(BATCH_MISTAKES, result, pairs, VOCAB, same=_same_batch)
        if mistake is not None:
            mistake.fail(f"  on {inputs}" + _shown(result, expected))
        if not all(hasattr(result, f) for f in FIELDS):
            kind = type(result).__name__ if result is not None else "None"
            raise CheckFailure(f"{BATCH} should return a Batch(src, tgt_in, tgt_out, src_mask, "
                               f"tgt_mask), got {kind} on {inputs}")
        for field in FIELDS:
            value, want = getattr(result, field), getattr(expected, field)
            if field.endswith("mask"):
                if not _mask_equal(value, want):
                    problem = tensor_problem(value, want, field)
                    raise CheckFailure(f"Wrong {field} on {inputs}, and no common mistake "
                                       f"matches: {problem or 'its True/False differ'}; it "
                                       f"should be {_mask_rule(field)}.")
            elif not (isinstance(value, torch.Tensor) and value.shape == want.shape
                      and torch.equal(value.long(), want)):
                problem = tensor_problem(value, want, field) or "its ids differ"
                raise CheckFailure(f"Wrong {field} on {inputs}, and no common mistake matches: "
                                   f"{problem}." + _shown(result, expected))


def _mask_rule(field):
    return ("padding_mask(src, PAD), (batch, 1, 1, src_len)" if field == "src_mask" else
            "target_mask(tgt_in, PAD), (batch, 1, tgt_len, tgt_len)")


def _shown(result, expected):
    """The first row of tgt_in and tgt_out, when either differs from the reference."""
    values = [getattr(result, f, None) for f in ("tgt_in", "tgt_out")]
    wanted = (expected.tgt_in, expected.tgt_out)
    if not all(isinstance(v, torch.Tensor) for v in values) or all(
            v.shape == w.shape and torch.equal(v.long(), w) for v, w in zip(values, wanted)):
        return ""
    lines = []
    for field, value in zip(("tgt_in", "tgt_out"), values):
        if value.dim() == 2:
            lines.append(f"  {field}: got {value[0].tolist()}, expected "
                         f"{getattr(expected, field)[0].tolist()} (first row; "
                         f"PAD={PAD}, BOS={BOS}, EOS={EOS})")
    return "\n" + "\n".join(lines) if lines else ""


# --------------------------------------------------------------------- label_smoothing_loss


def _loss(logits, target, eps, pad_id, count_pad=False, mean_over_all=False, smooth="uniform",
          smooth_pad_positions=False, reduce="mean"):
    """Label-smoothed cross entropy with the variations mistakes make."""
    log_p = F.log_softmax(logits.double(), dim=-1)
    n_classes = logits.size(-1)
    nll = -log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    if smooth == "uniform":  # eps / V onto every class
        spread = -log_p.mean(-1)
    elif smooth == "others":  # eps / (V - 1) onto the other classes
        spread = -(log_p.sum(-1) - (-nll)) / (n_classes - 1)
    elif smooth == "others_not_pad":  # eps / (V - 2): not the true class, not padding
        spread = -(log_p.sum(-1) + nll - log_p[..., pad_id]) / (n_classes - 2)
    elif smooth == "pad":  # all of eps onto the padding class
        spread = -log_p[..., pad_id]
    else:  # "true": eps put back onto the true class: no smoothing
        spread = nll
    keep = (target != pad_id).double()
    if count_pad:
        keep = torch.ones_like(keep)
    per_position = (1 - eps) * nll * keep + eps * spread * (1 if smooth_pad_positions else keep)
    if reduce == "sum":
        return per_position.sum()
    return per_position.sum() / (keep.numel() if mean_over_all else keep.sum())


LOSS = "label_smoothing_loss"
LOSS_BUILTIN = Mistake(
    "Built-in loss called",
    "you called F.cross_entropy; the exercise is to build the smoothed targets q and the "
    "cross entropy -sum(q * log p) yourself (check it equals F.cross_entropy afterwards).",
)
COUNTS_PADDING = Mistake(
    "Loss counts padding",
    "positions whose target is padding are not part of the output: leave them out of the "
    "loss, and average over the real target tokens only.",
    (lambda x, y, e, p: _loss(x, y, e, p, count_pad=True),
     lambda x, y, e, p: _loss(x, y, e, p, mean_over_all=True)),
)
LOSS_MISTAKES = (
    COUNTS_PADDING,
    Mistake(
        "Smoothing mass put onto the true class",
        "the eps taken from the true class must be spread over the vocabulary (eps / V onto "
        "every class); your targets are still one-hot, as if eps were 0.",
        (lambda x, y, e, p: _loss(x, y, e, p, smooth="true"),),
    ),
    Mistake(
        "Smoothing mass put onto padding",
        "spread eps / V over every class at the real target positions; do not give the eps "
        "to the padding class, and give padding positions no target at all.",
        (lambda x, y, e, p: _loss(x, y, e, p, smooth="pad"),
         lambda x, y, e, p: _loss(x, y, e, p, smooth_pad_positions=True)),
    ),
    Mistake(
        "Smoothing spread over the other classes only",
        "this course follows PyTorch: eps / V onto every class, the true one included "
        "(q_true = 1 - eps + eps / V), so the loss equals F.cross_entropy(..., "
        "label_smoothing=eps). The Annotated Transformer spreads eps / (V - 2) instead.",
        (lambda x, y, e, p: _loss(x, y, e, p, smooth="others"),
         lambda x, y, e, p: _loss(x, y, e, p, smooth="others_not_pad")),
    ),
    Mistake(
        "Loss summed instead of averaged",
        "divide by the number of real (non-padding) target tokens, so the loss does not grow "
        "with the batch and the learning rate means the same for every batch.",
        (lambda x, y, e, p: _loss(x, y, e, p, reduce="sum"),),
    ),
    Mistake(
        "pad_id ignored",
        "use the pad_id argument to find the padding, not the number 0.",
        (lambda x, y, e, p: _loss(x, y, e, 0),),
    ),
)


def _loss_case(seed, shape, vocab, eps, pad_id=PAD, lengths=None):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(*shape, vocab, generator=g) * 2
    target = torch.randint(0, vocab, shape, generator=g)
    target[target == pad_id] = (pad_id + 1) % vocab
    if lengths is not None:  # rows padded after their length
        target[torch.arange(shape[-1]) >= torch.tensor(lengths)[..., None]] = pad_id
    return logits, target, eps, pad_id


LOSS_CASES = [
    _loss_case(0, (3, 6), 9, 0.1, lengths=[6, 2, 4]),
    _loss_case(1, (2, 5), 7, 0.3, lengths=[3, 5]),
    _loss_case(2, (4, 3), 11, 0.2, lengths=[3, 1, 2, 3], pad_id=5),
    _loss_case(3, (8,), 6, 0.1),  # (N, V) logits, no padding
    _loss_case(4, (2, 2, 4), 5, 0.0, lengths=[[4, 1], [2, 3]]),
]


def _same_loss(actual, predicted):
    if isinstance(actual, (int, float)):
        actual = torch.tensor(float(actual))
    if not isinstance(actual, torch.Tensor) or actual.numel() != 1:
        return False
    return math.isclose(actual.item(), predicted.item(), rel_tol=1e-4, abs_tol=1e-6)


@checks(LOSS)
def check_label_smoothing_loss(fn):
    """Compare `fn` with the reference on LOSS_CASES; name the mistake when one matches."""
    for logits, target, eps, pad_id in LOSS_CASES:
        inputs = describe(logits=logits, target=target, eps=eps, pad_id=pad_id)
        given = (logits.clone(), target.clone())
        outcome = call(fn, *given, eps, pad_id)
        if "cross_entropy" in outcome.torch_calls:
            LOSS_BUILTIN.fail()
        fail_on_error(outcome, LOSS, inputs)
        if not (torch.equal(given[0], logits) and torch.equal(given[1], target)):
            raise CheckFailure("Input modified in place: your function changed the caller's "
                               "logits or target. Use out-of-place operations.")
        expected, result = reference_loss(logits, target, eps, pad_id), outcome.value
        if _same_loss(result, expected):
            continue
        mistake = first_match(LOSS_MISTAKES, result, logits, target, eps, pad_id,
                              same=_same_loss)
        if mistake is not None:
            mistake.fail(f"  on {inputs}")
        if not isinstance(result, torch.Tensor) or result.numel() != 1:
            problem = tensor_problem(result, expected, "the loss")
            raise CheckFailure(f"Wrong loss: {problem}; a single number (a 0-d tensor) is "
                               f"expected, on {inputs}")
        raise CheckFailure(
            f"Wrong loss on {inputs}, and no common mistake matches: got {result.item():.6g}, "
            f"expected {expected.item():.6g}. Build q = (1 - eps) one_hot(y) + eps / V and "
            "average -sum(q * log_softmax(logits)) over the real target tokens."
        )
    _check_loss_gradient(fn)


def _check_loss_gradient(fn):
    logits, target, eps, pad_id = LOSS_CASES[0]
    mine = logits.clone().requires_grad_()
    outcome = call(lambda: fn(mine, target.clone(), eps, pad_id).backward())
    ref = logits.clone().requires_grad_()
    reference_loss(ref, target, eps, pad_id).backward()
    if outcome.error is not None or mine.grad is None or not close(mine.grad, ref.grad):
        raise CheckFailure(
            "No gradient flows back to the logits: training needs it; stay in torch (no "
            ".item(), .detach(), .numpy() or tensors rebuilt from values)."
        )


# ----------------------------------------------------------------------------------- noam_lr

NOAM = "noam_lr"


def _noam(step, d_model, warmup, warm=-1.5, decay=-0.5, d=-0.5, pick=min):
    return d_model**d * pick(step**decay, step * warmup**warm)


def _all(**variant):
    return lambda cases: [_noam(*case, **variant) for case in cases]


NOAM_MISTAKES = (
    Mistake(
        "Warmup exponent wrong",
        "during warmup the rate grows linearly: step * warmup^-1.5, so that at step = warmup "
        "both branches meet at warmup^-0.5.",
        tuple(_all(warm=w) for w in (-0.5, -1.0, 1.5, -2.0, 0.5)),
    ),
    Mistake(
        "Decay exponent wrong",
        "after warmup the rate falls as the inverse square root of the step: step^-0.5.",
        tuple(_all(decay=e) for e in (-1.0, 0.5, -1.5, -2.0)),
    ),
    Mistake(
        "max instead of min",
        "the rate is the SMALLER of the two branches: the warmup line first, then the decay.",
        (_all(pick=max),),
    ),
    Mistake(
        "d_model factor wrong",
        "the whole schedule is scaled by d_model^-0.5: wider models take smaller steps.",
        tuple(_all(d=e) for e in (0.0, 0.5, -1.0)),
    ),
)
STEP_ZERO = Mistake(
    "Step 0 not handled",
    "the paper counts steps from 1: at step 0, step^-0.5 divides by zero. Raise a ValueError "
    "for step < 1 (a scheduler that counts from 0 must pass step + 1).",
)
# (step, d_model, warmup): the paper's settings on both sides of the warmup, and small ones.
NOAM_CASES = [(1, 512, 4000), (100, 512, 4000), (3999, 512, 4000), (4000, 512, 4000),
              (4001, 512, 4000), (100_000, 512, 4000), (10, 64, 100), (400, 64, 100),
              (1, 16, 1)]


def _as_float(value):
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    return float(value) if isinstance(value, (int, float)) else None


def _same_rates(actual, predicted):
    return len(actual) == len(predicted) and all(
        a is not None and math.isclose(a, p, rel_tol=1e-6) for a, p in zip(actual, predicted))


@checks(NOAM)
def check_noam_lr(fn):
    """Compare `fn` with the paper's formula on NOAM_CASES, then ask it for step 0."""
    rates = []
    for step, d_model, warmup in NOAM_CASES:
        outcome = call(fn, step, d_model, warmup)
        fail_on_error(outcome, NOAM, f"step={step}, d_model={d_model}, warmup={warmup}")
        rate = _as_float(outcome.value)
        if rate is None:
            raise CheckFailure(f"{NOAM} should return a number, got "
                               f"{type(outcome.value).__name__} for step={step}")
        rates.append(rate)
    expected = [reference_noam(*case) for case in NOAM_CASES]
    if not _same_rates(rates, expected):
        mistake = first_match(NOAM_MISTAKES, rates, NOAM_CASES, same=_same_rates)
        wrong = next(i for i, (a, e) in enumerate(zip(rates, expected))
                     if not math.isclose(a, e, rel_tol=1e-6))
        step, d_model, warmup = NOAM_CASES[wrong]
        details = (f"  step={step}, d_model={d_model}, warmup={warmup}: got {rates[wrong]:.6g}, "
                   f"expected {expected[wrong]:.6g}")
        if mistake is not None:
            mistake.fail(details)
        raise CheckFailure("Wrong learning rate, and no common mistake matches: compute "
                           "d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).\n" + details)
    outcome = call(fn, 0, 512, 4000)
    if isinstance(outcome.error, ValueError):
        return
    got = (f"it raised {type(outcome.error).__name__}" if outcome.error is not None
           else f"it returned {outcome.value!r}")
    STEP_ZERO.fail(f"  step=0, d_model=512, warmup=4000: {got}")


# -------------------------------------------------------------------------------- train_step

STEP = "train_step"
LR = 0.1  # plain SGD: every update is -LR * gradient


def _model():
    torch.manual_seed(0)
    config = TransformerConfig.tiny(len(VOCAB), d_model=16, n_heads=2, d_ff=32, n_layers=1,
                                    dropout=0.0)
    return Transformer(config)


def _flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _run(steps, eps, clip, zero="start", divide=True, clips=True, smoothing=True,
         ignore_pad=True, clip_zero=False):
    """Train _model() with SGD on `steps` (lists of batches) the way a mistake would: the
    weights after each step and the returned losses."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    weights, losses = [], []
    for batches in steps:
        if zero == "start":
            optimizer.zero_grad()
        total = 0.0
        for batch in batches:
            if zero == "each":
                optimizer.zero_grad()
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
            loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(),
                                   label_smoothing=eps if smoothing else 0.0,
                                   ignore_index=PAD if ignore_pad else -100)
            (loss / (len(batches) if divide else 1)).backward()
            total += loss.item()
        if clips and (clip > 0 or clip_zero):
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        weights.append(_flat(model))
        losses.append(total / len(batches))
    return weights, losses


def _variant(**kw):
    return lambda steps, eps, clip: _run(steps, eps, clip, **kw)[0]


STEP_MISTAKES = (
    Mistake(
        "Gradients not zeroed between steps",
        "backward() ADDS to .grad: without optimizer.zero_grad() at the start of each step, "
        "every step also applies the gradients of all the steps before it.",
        (_variant(zero="never"),),
    ),
    Mistake(
        "Gradients zeroed for every micro-batch",
        "zero the gradients once per optimizer step, before the micro-batches: zeroing before "
        "each one throws away all but the last, so accumulation does nothing.",
        (_variant(zero="each"), _variant(zero="each", divide=False)),
    ),
    Mistake(
        "Micro-batch losses not divided by their number",
        "the accumulated gradient must be the MEAN over the micro-batches: backpropagate "
        "loss / len(batches), or the step grows with the number of micro-batches.",
        (_variant(divide=False),),
    ),
    Mistake(
        "clip=0 clips every gradient to 0",
        "clip=0 means no clipping: call clip_grad_norm_ only when clip > 0.",
        (_variant(clip_zero=True),),
    ),
    Mistake(
        "Gradients not clipped",
        "between backward() and optimizer.step(), scale the gradients down to a total norm "
        "of at most `clip`: torch.nn.utils.clip_grad_norm_(model.parameters(), clip).",
        (_variant(clips=False),),
    ),
    COUNTS_PADDING,
    Mistake(
        "Label smoothing not used in the loss",
        "pass label_smoothing to the loss (your label_smoothing_loss, or F.cross_entropy(..., "
        "label_smoothing=label_smoothing, ignore_index=PAD)).",
        (_variant(smoothing=False),),
    ),
)
# Padding counted: the same mistake as in the loss, seen through the weights.
STEP_COMPUTES = {COUNTS_PADDING: (_variant(ignore_pad=False),)}


def _step_batches(seed, sizes):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for size in sizes:
        pairs = []
        for _ in range(size):
            n = int(torch.randint(1, 8, (1,), generator=g))
            text = "".join(VOCAB.symbols[int(i)] for i in torch.randint(0, 7, (n,), generator=g))
            pairs.append((text, text[::-1]))
        batches.append(reference_batch(pairs, VOCAB))
    return batches


# (the micro-batches of each step, label_smoothing, clip): two steps each, so that gradients
# left over from the first step show in the second.
# A weight that does not move is a missing optimizer.step() in the first case, clip=0 taken
# literally in the second.
STEP_CASES = [
    ([_step_batches(2, (4,)), _step_batches(3, (3,))], 0.2, 0.05),
    ([_step_batches(0, (3, 4)), _step_batches(1, (5, 2))], 0.1, 0.0),
]


def _same_weights(actual, predicted):
    return len(actual) == len(predicted) and all(close(a, p) for a, p in zip(actual, predicted))


def _first_step_match(weights, steps, eps, clip):
    for mistake in STEP_MISTAKES:
        for compute in STEP_COMPUTES.get(mistake, mistake.computes):
            if _same_weights(weights, compute(steps, eps, clip)):
                return mistake
    return None


@checks(STEP)
def check_train_step(fn):
    """Two steps of SGD with `fn` and with the reference; compare weights and losses."""
    for steps, eps, clip in STEP_CASES:
        sizes = [[b.src.size(0) for b in batches] for batches in steps]
        inputs = f"micro-batches of {sizes} examples, label_smoothing={eps}, clip={clip}"
        model = _model()
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        weights, losses = [], []
        for batches in steps:
            outcome = call(fn, model, list(batches), optimizer, eps, clip)
            fail_on_error(outcome, STEP, inputs)
            weights.append(_flat(model))
            losses.append(outcome.value)
        reference = _model()
        ref_optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
        expected, expected_losses = [], []
        for batches in steps:
            expected_losses.append(reference_step(reference, batches, ref_optimizer, eps, clip))
            expected.append(_flat(reference))
        if not _same_weights(weights, expected):
            mistake = _first_step_match(weights, steps, eps, clip)
            if mistake is not None:
                mistake.fail(f"  on {inputs}")
            if torch.equal(weights[0], _flat(_model())):
                raise CheckFailure("The weights did not change: call optimizer.step() after "
                                   f"the backward passes.\n  on {inputs}")
            which = next(i for i, (w, e) in enumerate(zip(weights, expected)) if not close(w, e))
            raise CheckFailure(
                f"Wrong weights after step {which + 1} on {inputs}, and no common mistake "
                f"matches: {difference(weights[which], expected[which])}. Zero the "
                "gradients, backpropagate each micro-batch's loss / len(batches), clip, step."
            )
        for got, want in zip(losses, expected_losses):
            if isinstance(got, torch.Tensor) or not isinstance(got, (int, float)):
                raise CheckFailure(
                    f"{STEP} should return the loss as a Python float (loss.item()), got "
                    f"{type(got).__name__}: a tensor would keep its whole graph in memory."
                )
            if not math.isclose(got, want, rel_tol=1e-4):
                raise CheckFailure(
                    f"Wrong loss returned on {inputs}: got {got:.6g}, expected {want:.6g}, "
                    "the mean of the micro-batches' losses (each before dividing it by "
                    "len(batches))."
                )
