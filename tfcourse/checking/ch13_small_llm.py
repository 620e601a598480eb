"""Exercise 13: today's training recipe: one AdamW update, the cosine schedule with warm-up
and a floor, clipping by the global norm, and the parameter groups; and TextStream, which
turns ids into text as they come. Their cases and their catalogues of mistakes.

The cases reach the regimes where these break: step 1 (m and v still 0: the bias correction
is everything there), a late step, gradients so small that eps decides, a zero gradient,
float64 and bfloat16 parameters; a schedule at its first step, at the end of its warm-up, at
its last step and past it, with a warm-up of 0, of 1 and as long as the run, a floor above
the warm-up's first steps; a gradient norm below, above and exactly at the threshold (and
below a threshold other than 1), all gradients 0, and parameters without a gradient; models
with tied and untied output layers, biases and LayerNorms, and one with a convolution, bare
nn.Parameters, a norm of its own class and an embedding and a Linear under other names (a
rule by layer type or by name sorts them wrong); characters of 2, 3 and 4 bytes cut between
2, 3 and 4 tokens, a token with the end of one character and the start of the next, bytes
that are no character, ids that end inside one, the special ids, a healed prompt, streams
used in turn and at once, hundreds of tokens, a healed prompt with a character of 2 bytes
(bytes, not characters), UNK after a held lead byte (TextStream's own sources are listed above its section).

Several mistakes are libraries' own, from their bug reports: the decay applied to the
updated weight (transformers issue 14539), the decay not multiplied by lr (tensorflow/addons
issue 2282), a warm-up whose first step has lr 0 (torchtune issue 2010, google-research/bert
issue 1293, NVIDIA NeMo issue 10582), a division by zero when warmup equals the run
(lightly PR 1842) or is 0 (ConvNeXt PR 91), a cosine not clamped after its end
(transformers' cosine schedules climb back), eps added before v's bias correction (Keras'
form of Adam).
"""

import codecs
import math
import random

import torch
from torch import nn

from ..modern import LlamaConfig, LlamaLM
from ..optim import adamw_step as reference_adamw
from ..optim import clip_grad_norm as reference_clip
from ..optim import param_groups as reference_groups
from ..schedules import cosine_lr as reference_cosine
from ..tokens import BPE, TextStream
from ..variants import DecoderLM, DecoderLMConfig
from ..vocab import BOS, EOS, PAD, UNK, Vocab
from .comparison import describe, same
from .mistakes import SEQUENCE_DIFFERS, Mistake, laddered, member
from .pipeline import Case, Item

EXERCISE = "ex13_small_llm"
_NB = "13_small_llm"
_ADAMW_SECTION = (_NB, "2. AdamW, one update by hand")
_SCHEDULE_SECTION = (_NB, "3. The schedule: warm-up, cosine, floor")
_CLIP_SECTION = (_NB, "4. Clipping by the global norm")
_GROUPS_SECTION = (_NB, "5. Which weights decay: the parameter groups")
_TOKENIZER_SECTION = (_NB, "10. Text through the tokenizer")
_HEALING_SECTION = (_NB, 'The prompt\'s boundary: `" return"` is one token')
_STREAM_SECTION = (_NB, "Streaming: hold back the bytes of a cut character")


# ---------------------------------------------------------------------------------------
# adamw_step


def _adamw(p, g, m, v, step, lr, betas=(0.9, 0.999), eps=1e-8, wd=1e-2, *, decay="before",
           decay_scale=None, l2=False, correct=("m", "v"), shift=0, eps_at="outside",
           power=0.5, beta_swap=False, ema="right", square="square", old=False, grad_step=False,
           sign=-1, python_step=False, amsgrad=False, stored="raw", ema_beta=(0, 1),
           bc_beta=(0, 1), bc_outside=False, bc_power=1.0, times_step="", coef=None):
    """adamw_step with the variations mistakes make. decay "before" (torch's: the weight
    before this update), "after" (the updated one) or None; decay_scale: what multiplies
    weight_decay instead of lr (lr -> number); l2: wd * p added to the gradient; correct: the
    moments whose bias is corrected; shift: added to the step in the corrections; eps_at:
    "outside", "inside" the root or "uncorrected" (added to sqrt(v) before the correction,
    Adam's paper's second form, Keras'); power: of v_hat; ema "plain" (no 1 - beta on the
    gradient) or "swapped" (the weights swapped); square: how g enters v ("abs"); old: the
    update uses the moments from before this step; grad_step: the gradient instead of m;
    sign: of the update; python_step: lr / (1 - beta1^t) computed as a Python float first
    (a ZeroDivisionError where the correction is 0); amsgrad: v the max of the old and the new
    (torch's amsgrad=True); eps_at "after": lr * m_hat / sqrt(v_hat) + eps (the division first);
    stored "corrected": m_hat and v_hat returned as the state, "swapped": (param, v, m); l2
    "both": the L2 term and the decoupled decay ("decayed": the L2 term of the decayed weight);
    decay "constant": lr * wd subtracted, not lr * wd * param ("grad", "moment": lr * wd * g or
    * m subtracted); ema "swapped_m", "swapped_v": one moment's weights swapped; square "plain":
    v averages g itself; ema_beta, bc_beta: which of
    (beta1, beta2) m's and v's averages, and their corrections, use; bc_outside: v's correction
    divides sqrt(v), not v; bc_power: the power of m's correction ((1 - beta1^t)^bc_power);
    times_step: the moments ("m", "v", "mv") whose correction is 1 - beta * step (with a "("
    first: (1 - beta) ** step); square "xor":
    g ^ 2 (Python's bitwise XOR: it raises on float tensors), "double": 2 g; coef (slot,
    name): one coefficient written as another (_COEFS' slots and names)."""
    beta1, beta2 = (betas[1], betas[0]) if beta_swap else betas
    pair = (beta1, beta2)
    if l2 == "decayed":
        p = p * (1 - lr * wd)
        g = g + wd * p
    elif l2:
        g = g + wd * p
    if ema == "plain":
        m_new, v_new = beta1 * m + g, beta2 * v + g * g
    elif ema == "swapped":
        m_new, v_new = (1 - beta1) * m + beta1 * g, (1 - beta2) * v + beta2 * g * g
    elif ema in ("swapped_m", "swapped_v"):
        m_new = (1 - beta1) * m + beta1 * g if ema == "swapped_m" else m.lerp(g, 1 - beta1)
        v_new = (1 - beta2) * v + beta2 * g * g if ema == "swapped_v" else beta2 * v + (1 - beta2) * g * g
    else:
        g2 = g ^ 2 if square == "xor" else {"abs": g.abs(), "plain": g, "double": 2 * g}.get(
            square, g * g)
        b_m, b_v = pair[ema_beta[0]], pair[ema_beta[1]]
        m_new, v_new = m.lerp(g, 1 - b_m), v.mul(b_v).add(g2, alpha=1 - b_v)
    named = {"beta1": beta1, "beta2": beta2, "1 - beta1": 1 - beta1, "1 - beta2": 1 - beta2}
    if coef is not None:  # one coefficient of the four averages or two corrections mistyped
        w = dict(zip(_COEF_SLOTS, _COEF_RIGHT))
        w[coef[0]] = coef[1]
        x = [named[w[k]] for k in _COEF_SLOTS]
        m_new, v_new = x[0] * m + x[1] * g, x[2] * v + x[3] * (g * g)
    if amsgrad:
        v_new = torch.maximum(v, v_new)
    mm, vv = (m, v) if old else (m_new, v_new)
    t = step + shift
    bc1 = (1 - pair[bc_beta[0]]**t) ** bc_power if "m" in correct else 1.0
    bc2 = 1 - pair[bc_beta[1]]**t if "v" in correct else 1.0
    if coef is not None:
        bc1, bc2 = 1 - x[4]**t, 1 - x[5]**t
    if times_step:  # beta * step typed for beta ** step, or (1 - beta) ** step
        paren = times_step.startswith("(")
        bc1 = ((1 - beta1) ** t if paren else 1 - beta1 * t) if "m" in times_step else bc1
        bc2 = ((1 - beta2) ** t if paren else 1 - beta2 * t) if "v" in times_step else bc2
    if bc_outside:
        denom = vv**power / bc2 + eps
    elif eps_at == "inside":
        denom = (vv / bc2 + eps) ** power
    elif eps_at == "uncorrected":
        denom = (vv**power + eps) / bc2**power
    else:
        denom = (vv / bc2) ** power + eps
    if eps_at == "after":
        update = lr * (mm / bc1) / (vv / bc2) ** power + eps
    elif grad_step:
        update = lr * g / denom
    else:
        update = (lr / bc1) * mm / denom if python_step else lr * (mm / bc1) / denom
    scale = lr if decay_scale is None else decay_scale(lr, bc1)
    if decay == "before" and l2 in (False, "both"):
        p = p * (1 - scale * wd)
    if decay == "constant":
        p = p - scale * wd
    if decay in ("grad", "moment"):  # the decay term of another tensor than the weight
        p = p - scale * wd * (g if decay == "grad" else m_new)
    p = p + sign * update
    if decay == "after" and not l2:
        p = p * (1 - scale * wd)
    if stored == "corrected":
        return p, m_new / bc1, v_new / bc2
    if stored == "swapped":
        return p, v_new, m_new
    if stored == "old":
        return p, m, v
    return p, m_new, v_new


_COEF_SLOTS = ("m's old term", "m's new term", "v's old term", "v's new term", "m's correction",
               "v's correction")
_COEF_FORMS = ("m = {0} m + {1} g", "m = {0} m + {1} g", "v = {2} v + {3} g^2",
               "v = {2} v + {3} g^2", "m / (1 - {4}^t)", "v / (1 - {5}^t)")
_COEF_RIGHT = ("beta1", "1 - beta1", "beta2", "1 - beta2", "beta1", "beta2")


def _coef_members():
    """Every single-coefficient substitution: each of the four weights of the averages and the
    two corrections' betas written as another of beta1, beta2, 1 - beta1, 1 - beta2."""
    out = []
    for i, (slot, right) in enumerate(zip(_COEF_SLOTS, _COEF_RIGHT)):
        for name in ("beta1", "beta2", "1 - beta1", "1 - beta2"):
            if name != right:
                used = [f"({n})" if " " in n else n for n in _COEF_RIGHT[:i] + (name,)
                        + _COEF_RIGHT[i + 1:]]
                out.append(member(_adamw_with(coef=(slot, name)), slot=slot, name=name,
                                  right=right, form=_COEF_FORMS[i].format(*used)))
    return tuple(out)


def _adamw_with(**bug):
    return lambda *args, **kwargs: _adamw(*args, **{**kwargs, **bug})


def _float32_out(upcast=False, parts=(0, 1, 2)):
    """adamw_step whose results `parts` come back in float32: computed in the inputs' dtype
    then cast, or (upcast) computed from the inputs cast to float32 and never cast back."""
    def compute(*args, **kwargs):
        tensors = tuple(t.float() if upcast else t for t in args[:4])
        out = _adamw(*tensors, *args[4:], **kwargs)
        return tuple(t.float() if i in parts else t.to(args[0].dtype) for i, t in enumerate(out))
    return compute


def _state(seed, shape, scale=1.0, moments=True, dtype=torch.float32):
    """(param, grad, exp_avg, exp_avg_sq) drawn from `seed`: moments as after a few steps
    (v positive and about grad^2), or zeros (the first step)."""
    gen = torch.Generator().manual_seed(seed)
    p = torch.randn(shape, generator=gen)
    g = scale * torch.randn(shape, generator=gen)
    if moments:
        m = 0.5 * scale * torch.randn(shape, generator=gen)
        v = (scale * torch.randn(shape, generator=gen)) ** 2 + (0.1 * scale) ** 2
    else:
        m, v = torch.zeros(shape), torch.zeros(shape)
    return tuple(x.to(dtype) for x in (p, g, m, v))


def _adamw_case(seed, shape, step, lr, betas, eps, wd, *, scale=1.0, moments=True,
                dtype=torch.float32, zero_grad=False, note=""):
    p, g, m, v = _state(seed, shape, scale, moments, dtype)
    if zero_grad:
        g = torch.zeros_like(g)
    label = (describe(param=p) + f" {str(dtype).removeprefix('torch.')}, step={step}, lr={lr}, "
             f"betas={betas}, eps={eps}, weight_decay={wd}{note}")
    return Case((p, g, m, v, step, lr, betas, eps, wd), label=label,
                names=("param", "grad", "exp_avg", "exp_avg_sq"), seed=seed,
                parts=("param", "exp_avg", "exp_avg_sq"))


ADAMW_MISTAKES = (
    Mistake(
        "l2_decay", "Weight decay added to the gradient (Adam's L2), not decoupled",
        "grad + weight_decay * param is L2 regularization, torch.optim.Adam(weight_decay=...): "
        "the decay then goes through m / sqrt(v), which normalizes it away for weights with "
        "large gradients. AdamW shrinks the weight itself, outside the adaptive step: "
        "param * (1 - lr * weight_decay).",
        (_adamw_with(l2=True),),
    ),
    Mistake(
        "l2_and_decoupled", "Weight decay applied twice: added to the gradient AND decoupled",
        "AdamW's decay is the decoupled one only, param * (1 - lr * weight_decay); adding "
        "weight_decay * param to the gradient as well (Adam's L2, torch.optim.Adam(weight_decay="
        "...)) decays a second time, through m / sqrt(v).",
        (_adamw_with(l2="both"), _adamw_with(l2="decayed")),
    ),
    Mistake(
        "decay_constant", "Weight decay subtracted as a constant, lr * weight_decay, not "
        "lr * weight_decay * param",
        "the decay shrinks each weight in proportion to itself: param - lr * weight_decay * "
        "param = param * (1 - lr * weight_decay); a constant lr * weight_decay moves every "
        "weight down by the same amount, the positive and the negative ones alike.",
        (_adamw_with(decay="constant"),),
    ),
    Mistake(
        "decay_of_other_tensor", "Weight decay applied to {which}, not to the weight",
        "the decoupled decay shrinks the WEIGHT: param * (1 - lr * weight_decay), i.e. param - "
        "lr * weight_decay * param; lr * weight_decay * {what} only adds to the gradient step.",
        (member(_adamw_with(decay="grad"), which="the gradient: lr * weight_decay * grad "
                "subtracted", what="grad"),
         member(_adamw_with(decay="moment"), which="m: lr * weight_decay * exp_avg subtracted",
                what="exp_avg")),
    ),
    Mistake(
        "decay_scale", "Weight decay scaled by {which}, not by lr",
        "the decoupled decay takes lr * weight_decay of the weight at each step: param * (1 - "
        "lr * weight_decay), lr once, no bias correction.",
        tuple(member(_adamw_with(decay_scale=f), which=w) for f, w in (
            (lambda lr, bc1: 1.0, "nothing (lr missing)"),
            (lambda lr, bc1: lr * lr, "lr twice"),
            (lambda lr, bc1: lr / bc1, "lr / (1 - beta1^step), the bias-corrected step size"))),
    ),
    Mistake(
        "decay_after_update", "Weight decay applied to the updated weight",
        "decay the weight as it was before this update (Loshchilov & Hutter's algorithm 2, "
        "torch.optim.AdamW): param * (1 - lr * weight_decay) first, then the Adam step; or "
        "both from the same old param.",
        (_adamw_with(decay="after"),),
    ),
    Mistake(
        "no_bias_correction", "{which}",
        "m and v start at 0, so early on they are too small by the factors 1 - beta1^step and "
        "1 - beta2^step: divide m by the first and v by the second (m_hat, v_hat) before the "
        "step.",
        tuple(member(_adamw_with(correct=c), which=w) for c, w in (
            ((), "No bias correction"), (("m",), "v's bias not corrected"),
            (("v",), "m's bias not corrected"))),
    ),
    Mistake(
        "correction_step", "Bias correction counted from step {how}",
        "step is this update's number, counting from 1: the corrections are 1 - beta1^step and "
        "1 - beta2^step with step as given (at step 1: 1 - beta1 and 1 - beta2, never 0).",
        tuple(member(_adamw_with(shift=s, python_step=py), how=h) for s, py, h in (
            (-1, False, "0 (step - 1)"), (-1, True, "0 (step - 1)"), (1, False, "2 (step + 1)"))),
    ),
    Mistake(
        "correction_times_step", "Bias correction{which} 1 - beta * step, not 1 - beta ** step",
        "the corrections are powers: 1 - beta1 ** step and 1 - beta2 ** step (0.1 and 0.001 at "
        "step 1, near 1 later). beta * step is a product: it is right at step 1 only, and goes "
        "negative once step > 1 / beta.",
        tuple(member(_adamw_with(times_step=t), which=w) for t, w in (
            ("mv", "s"), ("m", " of m"), ("v", " of v"))),
    ),
    Mistake(
        "correction_parenthesized", "Bias correction{which} (1 - beta) ** step, not 1 - beta ** "
        "step",
        "the power binds to beta alone: 1 - beta1 ** step (0.1 at step 1, near 1 later); "
        "(1 - beta1) ** step shrinks towards 0 instead, so the corrected moments blow up.",
        tuple(member(_adamw_with(times_step="(" + t), which=w) for t, w in (
            ("mv", "s"), ("m", " of m"), ("v", " of v"))),
    ),
    Mistake(
        "xor_for_power", "^ written for a power: in Python ^ is bitwise XOR",
        "grad ^ 2 is a bitwise XOR, which torch refuses for float tensors (and Python for "
        "floats): the square is grad ** 2, grad * grad or grad.square(); the powers of the "
        "betas are beta1 ** step.",
        (_adamw_with(square="xor"),),
    ),
    Mistake(
        "correction_misplaced", "Bias corrections {how}",
        "m_hat = m / (1 - beta1^step) and v_hat = v / (1 - beta2^step), each moment by the "
        "correction of its own beta, and the step is m_hat / (sqrt(v_hat) + eps): v's "
        "correction under the root, as in torch.optim.AdamW ((sqrt(v) / sqrt(1 - beta2^step)) "
        "+ eps).",
        tuple(member(_adamw_with(**bug), how=how) for bug, how in (
            ({"bc_outside": True}, "misplaced: v's divides sqrt(v), not v: sqrt(v) / "
                                   "(1 - beta2^step)"),
            ({"bc_beta": (1, 0)}, "swapped: m divided by 1 - beta2^step and v by 1 - beta1^step"),
            ({"bc_beta": (0, 0)}, "both made with beta1: v divided by 1 - beta1^step"),
            ({"bc_beta": (1, 1)}, "both made with beta2: m divided by 1 - beta2^step"),
            ({"bc_power": 0.5}, "misplaced: m's under a square root, m / sqrt(1 - beta1^step)"),
            ({"bc_power": -1.0}, "multiplied, not divided: m * (1 - beta1^step)"))),
    ),
    Mistake(
        "moment_betas", "{which}",
        "m = beta1 * m + (1 - beta1) * grad averages the gradients with beta1 (0.9), v = beta2 * "
        "v + (1 - beta2) * grad^2 their squares with beta2 (0.999): each line its own beta (a "
        "copied line keeps the other's).",
        tuple(member(_adamw_with(ema_beta=b), which=w) for b, w in (
            ((0, 0), "v averaged with beta1, not beta2"),
            ((1, 1), "m averaged with beta2, not beta1"),
            ((1, 0), "m averaged with beta2 and v with beta1"))),
    ),
    Mistake(
        "eps_inside", "eps inside the square root",
        "eps goes after the root: sqrt(v_hat) + eps, as in torch.optim.AdamW. Inside, "
        "sqrt(v_hat + eps) is at least sqrt(eps) = 1e-4 for eps = 1e-8: small gradients get "
        "steps far smaller than lr.",
        (_adamw_with(eps_at="inside"),),
    ),
    Mistake(
        "eps_after_division", "eps added after the division: lr * m_hat / sqrt(v_hat) + eps",
        "eps belongs in the denominator, with the root: lr * m_hat / (sqrt(v_hat) + eps), "
        "parentheses around sqrt(v_hat) + eps. Added after the division, it shifts every "
        "weight by eps and leaves a zero v_hat to divide by.",
        (_adamw_with(eps_at="after"),),
    ),
    Mistake(
        "amsgrad", "v kept as the running maximum (AMSGrad)",
        "exp_avg_sq is the moving average beta2 * v + (1 - beta2) * grad^2 itself; torch.max(old, "
        "new) is AMSGrad (torch.optim.AdamW(amsgrad=True), which keeps the maximum in a third "
        "buffer, max_exp_avg_sq), not this step.",
        (_adamw_with(amsgrad=True),),
    ),
    Mistake(
        "moments_swapped", "The moments returned in the other order: (param, exp_avg_sq, exp_avg)",
        "adamw_step returns (param, exp_avg, exp_avg_sq), in the order of its arguments: the "
        "first moment (the average gradient) before the second (the average squared gradient).",
        (_adamw_with(stored="swapped"),),
    ),
    Mistake(
        "state_not_updated", "The moments returned as they came: exp_avg and exp_avg_sq not "
        "updated",
        "adamw_step returns the NEW state with the new param: m = beta1 * m + (1 - beta1) * grad "
        "and v = beta2 * v + (1 - beta2) * grad^2, the ones the step used; the arguments as "
        "given lose this step's gradient (a local name rebound, m = ..., is not the caller's "
        "tensor).",
        (_adamw_with(stored="old"),),
    ),
    Mistake(
        "state_corrected", "The bias-corrected moments returned as the state",
        "exp_avg and exp_avg_sq are stored WITHOUT the correction: m_hat = m / (1 - beta1^step) "
        "and v_hat are this step's only; stored, the next step would correct them again.",
        (_adamw_with(stored="corrected"),),
    ),
    Mistake(
        "eps_uncorrected", "eps added before v's bias correction",
        "add eps to sqrt(v_hat) = sqrt(v / (1 - beta2^step)), not to sqrt(v) before dividing by "
        "sqrt(1 - beta2^step) (Adam paper's second form, Keras'): torch.optim.AdamW's is "
        "(sqrt(v) / sqrt(1 - beta2^step)) + eps.",
        (_adamw_with(eps_at="uncorrected"),),
    ),
    Mistake(
        "no_sqrt", "Divided by v_hat, not its square root",
        "Adam divides by the root of the second moment, sqrt(v_hat) + eps: a step of about lr "
        "whatever the gradient's scale.",
        (_adamw_with(power=1.0),),
    ),
    Mistake(
        "betas_swapped", "beta1 and beta2 swapped",
        "betas = (beta1, beta2): beta1 (0.9) averages the gradients (m), beta2 (0.999) their "
        "squares (v).",
        (_adamw_with(beta_swap=True),),
    ),
    Mistake(
        "moment_weights", "Moments averaged with the wrong weights: {which}",
        "m = beta1 * m + (1 - beta1) * grad and v = beta2 * v + (1 - beta2) * grad^2: the old "
        "average keeps beta, the new gradient gets 1 - beta.",
        (member(_adamw_with(ema="plain"), which="1 - beta missing on the gradient"),
         member(_adamw_with(ema="swapped"), which="beta and 1 - beta swapped"),
         member(_adamw_with(ema="swapped_m"), which="m's beta1 and 1 - beta1 swapped (torch.lerp's "
                "weight is the new value's: m.lerp(grad, 1 - beta1))"),
         member(_adamw_with(ema="swapped_v"), which="v's beta2 and 1 - beta2 swapped")),
    ),
    Mistake(
        "grad_not_squared", "v averages {which}, not grad^2",
        "the second moment is the average of the SQUARED gradient: (1 - beta2) * grad * grad.{why}",
        (member(_adamw_with(square="abs"), which="|grad|", why=""),
         member(_adamw_with(square="plain"), which="grad itself (the square lost)",
                why=" Averaging grad itself, v goes negative wherever the gradient does, and "
                    "its square root is NaN there."),
         member(_adamw_with(square="double"), which="2 grad (grad * 2 typed for grad ** 2)",
                why=" 2 grad goes negative wherever the gradient does, and v's square root is "
                    "NaN there.")),
    ),
    Mistake(
        "coefficient_typo", "{slot}: {name} written for {right}: {form}",
        "m = beta1 * m + (1 - beta1) * grad and v = beta2 * v + (1 - beta2) * grad^2, each line "
        "with its own beta (beta1 = 0.9 for m, beta2 = 0.999 for v) twice, and the corrections "
        "1 - beta1^step for m and 1 - beta2^step for v: one coefficient copied from the other "
        "line (or its 1 - beta) changes the average's weights (torch.optim.AdamW, Loshchilov & "
        "Hutter's algorithm 2).",
        _coef_members(),
    ),
    Mistake(
        "old_moments", "The step uses last step's moments",
        "update exp_avg and exp_avg_sq with this gradient first, then step with the new ones.",
        (_adamw_with(old=True),),
    ),
    Mistake(
        "no_momentum", "The step uses the gradient, not m",
        "the numerator is the bias-corrected first moment, m_hat = m / (1 - beta1^step): the "
        "average of the gradients, not this step's gradient alone (that is RMSprop).",
        (_adamw_with(grad_step=True),),
    ),
    Mistake(
        "float32_out", "{which} returned in float32, not in param's dtype: {how}",
        "adamw_step returns param, exp_avg and exp_avg_sq in the dtype they came in (torch.optim "
        "keeps each state in its parameter's dtype). A .float() or .to(torch.float32) on the "
        "results, a float32 buffer filled in place (torch.zeros(shape) or torch.empty without "
        "dtype=: the default dtype is float32), or a float32 copy of the inputs never cast back "
        "makes them float32; a mixed-precision optimizer may keep float32 master weights and "
        "state, but the param it hands back is .to(param.dtype).",
        (member(_float32_out(), which="The results", how="cast to float32 at the end"),
         member(_float32_out(upcast=True), which="The results", how="computed in float32 and "
                "not cast back"),
         member(_float32_out(parts=(1, 2)), which="The moments (the state)", how="cast to float32"),
         member(_float32_out(upcast=True, parts=(1, 2)), which="The moments (the state)",
                how="computed in float32 and kept so")),
    ),
    Mistake(
        "ascent", "Step taken uphill",
        "subtract the step: param - lr * m_hat / (sqrt(v_hat) + eps) goes down the gradient.",
        (_adamw_with(sign=1),),
    ),
)
_ADAMW_LADDER = {
    "l2_decay": (None, "with grad = 0 and exp_avg = exp_avg_sq = 0, step 1: your param must "
                 "be param * (1 - lr * weight_decay) exactly."),
    "correction_times_step": (None, "print 1 - beta1 ** step at step 7 next to yours: 0.52."),
    "correction_parenthesized": (None, "print 1 - beta1 ** step at step 7 next to yours: "
                                 "0.52."),
    "xor_for_power": (None, "print 3 ** 2 and 3 ^ 2 in Python: 9 and 1."),
    "decay_of_other_tensor": (None, "with grad = 0 and both moments 0, your param must still "
                              "shrink by 1 - lr * weight_decay."),
    "decay_scale": (None, "with grad = 0 and both moments 0, print your param / param "
                    "next to 1 - lr * weight_decay."),
    "decay_after_update": (None, "write the decay with the param you were given, before you "
                           "change it: print both results for lr = 0.5, weight_decay = 0.5."),
    "no_bias_correction": (None, "at step 1 with zero moments, print m_hat and grad: equal."),
    "correction_step": (None, "print 1 - beta1 ** step at step 1: 0.1 for beta1 = 0.9."),
    "eps_inside": (None, "with grad = 1e-6 at step 1, your step must be about lr."),
    "eps_uncorrected": (None, "print the denominator you use next to "
                        "exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** step) + eps."),
    "no_sqrt": (None, "multiply grad by 100 at step 1: the step must barely change."),
    "betas_swapped": (None, "print which beta multiplies exp_avg: betas[0]."),
    "moment_weights": (None, "with grad = 1 and both moments 1, the new exp_avg must be 1."),
    "grad_not_squared": (None, "with grad = -2 at step 1, exp_avg_sq must be (1 - beta2) * 4."),
    "old_moments": (None, "at step 1 with zero moments the step must not be 0."),
    "no_momentum": (None, "with grad = 0 but exp_avg = 1, the weight must still move."),
    "ascent": (None, "with weight_decay = 0 and grad > 0, param must go down."),
    "eps_after_division": (None, "write your update with its parentheses: eps is in the "
                           "denominator."),
    "amsgrad": (None, "with grad = 0 and exp_avg_sq = 1, the new exp_avg_sq must be beta2."),
    "l2_and_decoupled": (None, "print the gradient you put into m: grad as given."),
    "state_not_updated": (None, "print exp_avg before and after your call at step 1 with zero "
                          "moments: (1 - beta1) * grad after."),
    "moments_swapped": (None, "print the order of the tensors you return."),
    "state_corrected": (None, "at step 1 with zero moments, exp_avg must be (1 - beta1) * grad."),
    "float32_out": (None, "print the dtype of each result for a float64 param: float64."),
    "decay_constant": (None, "with grad = 0, both moments 0 and a param of -1: your param must "
                       "move towards 0, up."),
    "correction_misplaced": (None, "at step 1 with zero moments and weight_decay = 0, each "
                             "entry's step must be lr * sign(grad), about."),
    "moment_betas": (None, "print the beta each of your two moment lines multiplies by."),
    "coefficient_typo": (None, "print the four weights of your two moment lines and the two "
                         "betas your corrections raise to step: 0.9, 0.1, 0.999, 0.001, 0.9, "
                         "0.999."),
}
ADAMW = Item(
    EXERCISE, "adamw_step", reference_adamw,
    [
        _adamw_case(0, (5, 3), 1, 0.1, (0.9, 0.999), 1e-8, 0.1, moments=False,
                    note=" (zero moments: the first step)"),
        _adamw_case(1, (4, 7), 7, 0.05, (0.9, 0.95), 1e-8, 0.5),
        _adamw_case(2, (3, 5), 1000, 0.01, (0.9, 0.999), 1e-8, 0.1),
        _adamw_case(3, (5,), 1, 0.1, (0.9, 0.999), 1e-8, 0.0, scale=1e-6, moments=False,
                    note=" (gradients of 1e-6: eps decides)"),
        _adamw_case(4, (3, 3), 5, 0.5, (0.8, 0.99), 1e-3, 0.5, zero_grad=True,
                    note=" (a zero gradient)"),
        _adamw_case(5, (2, 5), 3, 0.1, (0.9, 0.999), 1e-8, 0.1, dtype=torch.float64),
        _adamw_case(6, (3, 4), 2, 0.1, (0.9, 0.999), 1e-8, 0.1, dtype=torch.bfloat16),
    ],
    laddered(ADAMW_MISTAKES, _ADAMW_LADDER),
    formula="Compare each line with param * (1 - lr wd), m = lerp(m, g, 1 - beta1), v = beta2 v "
            "+ (1 - beta2) g^2, param - lr (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps).",
    twins=(_adamw_with(),),
    section=_ADAMW_SECTION,
)


# ---------------------------------------------------------------------------------------
# cosine_lr


# Warm-up curves other than the linear step / warmup (x = step / warmup).
_WARM_SHAPES = {"quadratic": lambda x: x * x, "square root": math.sqrt,
                "half-cosine": lambda x: (1 - math.cos(math.pi * x)) / 2,
                "exponential": lambda x: 1e-3 ** (1 - x)}


def _cosine(step, warmup, total, r=0.0, *, warm_shift=0, warm_extra=0, floor="scaled",
            clamp="min", start="warmup", span="rest", cycles=0.5, warm="linear",
            divide_first=False, unguarded=False, decay_shift=0, shape="cosine", floordiv=False,
            span_extra=0, endless_warmup=False):
    """cosine_lr with the variations mistakes make: warm_shift (step + shift) / warmup;
    warm_extra: warmup + extra in the denominator; floor "scaled" (r + (1 - r) c), "none"
    (to 0), "added" (r + c), "clamped" (max(r, c)), "unshifted" ((1 - r) c, r never added),
    "times" (r c); clamp "min" (progress at most 1), "none" or "zero" (0 past the end); start:
    where the cosine's progress counts from ("warmup" or "zero"); span: its length ("rest":
    total - warmup, "total"); cycles: of the cosine (0.5: half); warm "linear", "none" (the
    peak during warm-up), "floor" (from r up to 1) or "floordiv" (step // warmup);
    divide_first: step / warmup computed on every step (ZeroDivisionError at warmup 0);
    unguarded: (step - warmup) / (total - warmup) without max(1, ...) (ZeroDivisionError when
    warmup = total); decay_shift: added to the decay's step count (-1: one step late); shape:
    of the decay ("cosine", "linear": 1 - progress, "quarter": cos(pi progress / 2), "no_one",
    "minus", "no_pi": a term of (1 + cos(pi progress)) / 2 left out or flipped);
    floordiv: the progress by //; span_extra: added to the decay's length; warm "floored":
    max(r, step / warmup), or a key of _WARM_SHAPES (another curve of step / warmup);
    endless_warmup: warmup = total_steps kept in the warm-up branch; floor "swapped": (1 - r) +
    r c; shape "no_half": 1 + cos(pi progress), "no_half_clipped": min(1, 1 + cos(...))."""
    if endless_warmup and warmup == total:
        return step / warmup
    if divide_first:
        ratio = step / warmup
        if step <= warmup:
            return ratio
    if step <= warmup:
        if warm == "none":
            return 1.0
        if warm == "floor":  # from the floor r up to 1
            return r + (1 - r) * step / warmup
        if warm == "floordiv":
            return float(step // warmup)
        if warm == "floored":
            return max(r, step / warmup)
        if warm in _WARM_SHAPES:
            return _WARM_SHAPES[warm](step / warmup)
        return min(1.0, (step + warm_shift) / (warmup + warm_extra))
    begin = warmup if start == "warmup" else 0
    length = (total - warmup if unguarded else max(1, total - warmup)) if span == "rest" \
        else total
    length = max(1, length + span_extra) if span_extra else length
    progress = (step - begin) // length if floordiv else (step - begin + decay_shift) / length
    if clamp == "min":
        progress = min(1.0, progress)
    elif clamp == "zero" and step > total:
        return 0.0
    c = {"cosine": 0.5 * (1.0 + math.cos(math.pi * 2 * cycles * progress)), "linear": 1 - progress,
         "quarter": math.cos(math.pi / 2 * progress),
         "no_half": 1.0 + math.cos(math.pi * progress),
         "no_half_clipped": min(1.0, 1.0 + math.cos(math.pi * progress)),
         "no_one": 0.5 * math.cos(math.pi * progress),
         "minus": 0.5 * (1.0 - math.cos(math.pi * progress)),
         "no_pi": 0.5 * (1.0 + math.cos(progress))}[shape]
    return {"scaled": r + (1 - r) * c, "none": c, "added": r + c, "clamped": max(r, c),
            "unshifted": (1 - r) * c, "times": r * c, "swapped": (1 - r) + r * c}[floor]


def _all_cosine(**bug):
    return lambda rows: [_cosine(*row, **bug) for row in rows]


def _rates(fn, args, case):
    """The learner's factor at every (step, warmup, total_steps, min_ratio), as floats where
    they are numbers (a tensor stays one: the checks name it)."""
    rates = []
    for step, warmup, total, r in args[0]:
        value = fn(step, warmup, total, r)
        rates.append(float(value) if isinstance(value, (int, float)) and
                     not isinstance(value, bool) else value)
    return rates


def _same_rates(actual, predicted):
    return isinstance(actual, list) and len(actual) == len(predicted) and all(
        isinstance(a, float) and math.isclose(a, p, rel_tol=1e-6, abs_tol=1e-9)
        for a, p in zip(actual, predicted))


def _first_wrong_rate(case, result, expected):
    for (step, warmup, total, r), got, want in zip(case.args[0], result, expected):
        if not (isinstance(got, float) and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9)):
            shown = f"{got:.6g}" if isinstance(got, float) else repr(got)
            return (f"\n  step={step}, warmup={warmup}, total_steps={total}, min_ratio={r}: "
                    f"got {shown}, expected {want:.6g}")
    return ""


def _cosine_case(rows, label):
    return Case((rows,), label=label, run=_rates, seed=0,
                parts=tuple(f"the factor at step={s}, warmup={w}, total_steps={t}, "
                            f"min_ratio={r}" for s, w, t, r in rows))


COSINE_MISTAKES = (
    Mistake(
        "warmup_off_by_one", "Warm-up off by one: {how}",
        "steps count from 1 and the warm-up reaches the peak AT step warmup: the factor is "
        "step / warmup, 1 / warmup at the first step (not 0: that update would be wasted, "
        "transformers' step 0) and 1 at step = warmup.",
        tuple(member(_all_cosine(warm_shift=s, warm_extra=e), how=h) for s, e, h in (
            (-1, 0, "(step - 1) / warmup, 0 at the first step"),
            (0, 1, "step / (warmup + 1), below the peak at step = warmup"),
            (1, 0, "(step + 1) / warmup"),
            (1, 1, "(step + 1) / (warmup + 1), nanoGPT's form for steps counted from 0"))),
    ),
    Mistake(
        "floor_ignored", "Decays to 0, not to the floor",
        "the cosine ends at min_ratio (Llama 2: 10% of the peak), not at 0: r + (1 - r) * (1 + "
        "cos(pi * progress)) / 2.",
        (_all_cosine(floor="none"),),
    ),
    Mistake(
        "floor_misplaced", "Floor {how}",
        "the cosine is squeezed between 1 and the floor: r + (1 - r) * (1 + cos(pi * "
        "progress)) / 2 starts at 1 and ends at r.",
        (member(_all_cosine(floor="added"), how="added to the cosine (it starts at 1 + r)"),
         member(_all_cosine(floor="clamped"), how="as a clamp: max(r, cosine) stays flat at the "
                "end instead of curving down to it"),
         member(_all_cosine(floor="unshifted"), how="not added: (1 - r) * cosine ends at 0"),
         member(_all_cosine(floor="times"), how="multiplied in: r * cosine starts at r, not 1"),
         member(_all_cosine(floor="swapped"), how="and range swapped: (1 - r) + r * cosine "
                "ends at 1 - r (and never decays for r = 0)")),
    ),
    Mistake(
        "not_clamped", "Schedule not clamped after its last step: {how}",
        "past total_steps the factor stays at the floor: progress = min(1, (step - warmup) / "
        "(total_steps - warmup)). Unclamped, cos(pi * progress) turns back up (transformers' "
        "cosine schedules do that).",
        (member(_all_cosine(clamp="none"), how="the cosine climbs back up"),
         member(_all_cosine(clamp="zero"), how="0 after the end, not the floor")),
    ),
    Mistake(
        "cosine_span", "Cosine over the wrong steps: {how}",
        "the cosine starts at the end of the warm-up, at the peak, and ends at total_steps: "
        "progress = (step - warmup) / (total_steps - warmup), 0 then 1.",
        (member(_all_cosine(start="zero", span="total"), how="from step 0 over total_steps"),
         member(_all_cosine(span="total"), how="from the warm-up over total_steps steps"),
         member(_all_cosine(start="zero"), how="progress counted from step 0")),
    ),
    Mistake(
        "decay_off_by_one", "Decay off by one step: {how}",
        "the decay starts right after the warm-up: progress = (step - warmup) / (total_steps - "
        "warmup), 1 / (total_steps - warmup) at step warmup + 1 and 1 at total_steps.",
        (member(_all_cosine(decay_shift=-1), how="one step late, progress counted from warmup + 1 "
                "(the peak held two steps)"),
         member(_all_cosine(decay_shift=1), how="one step early, progress counted from warmup - 1"),
         member(_all_cosine(span_extra=1), how="progress divided by total_steps - warmup + 1 "
                "(both ends counted): the floor never reached"),
         member(_all_cosine(span_extra=-1), how="progress divided by total_steps - warmup - 1: "
                "the floor reached one step early")),
    ),
    Mistake(
        "warmup_floored", "The floor applied during the warm-up too: max(min_ratio, step / warmup)",
        "min_ratio is the floor of the DECAY: the warm-up climbs from step / warmup (1 / warmup "
        "at step 1), whatever min_ratio is; a max(min_ratio, ...) around the whole schedule "
        "lifts the first warm-up steps to the floor.",
        (_all_cosine(warm="floored"),),
    ),
    Mistake(
        "endless_warmup", "warmup = total_steps kept in the warm-up: past the end the factor "
        "climbs above 1",
        "with no decay (warmup = total_steps) the warm-up still ends at warmup: after it the "
        "factor is the floor (progress clamped to 1), never step / warmup > 1. Guard the "
        "division instead: max(1, total_steps - warmup).",
        (_all_cosine(endless_warmup=True),),
    ),
    Mistake(
        "integer_division", "Integer division: {how}",
        "// rounds down to a whole number: step // warmup is 0 until the warm-up ends, and "
        "(step - warmup) // (total_steps - warmup) is 0 until the last step: use /, a true "
        "division, for the fractions of the warm-up and of the decay.",
        (member(_all_cosine(warm="floordiv"), how="step // warmup, 0 through the warm-up"),
         member(_all_cosine(floordiv=True), how="the progress by //, the peak held to the end")),
    ),
    Mistake(
        "decay_shape", "{how}, not half a cosine",
        "the decay follows (1 + cos(pi * progress)) / 2: 1 at progress 0, 0.5 half way, 0 at "
        "progress 1 (then squeezed above the floor): flat at both ends, steepest in the middle.",
        (member(_all_cosine(shape="linear"), how="A linear decay, 1 - progress"),
         member(_all_cosine(shape="quarter"), how="A quarter cosine, cos(pi * progress / 2)"),
         member(_all_cosine(shape="no_half"), how="1 + cos(pi * progress), the / 2 left out: it "
                "starts at 2"),
         member(_all_cosine(shape="no_half_clipped"), how="min(1, 1 + cos(pi * progress)), the "
                "/ 2 left out and clipped at 1: flat for the first half of the decay"),
         member(_all_cosine(shape="no_one"), how="cos(pi * progress) / 2, the 1 + left out: it "
                "starts at 0.5 and ends at -0.5"),
         member(_all_cosine(shape="minus"), how="(1 - cos(pi * progress)) / 2, the sign "
                "flipped: it climbs from 0 to 1"),
         member(_all_cosine(shape="no_pi"), how="(1 + cos(progress)) / 2, pi left out: it "
                "barely decays (to 0.77)")),
    ),
    Mistake(
        "full_cosine", "A whole cosine period: it climbs back to the peak",
        "half a period goes from 1 down to the floor: cos(pi * progress) for progress in [0, 1], "
        "not cos(2 pi progress).",
        (_all_cosine(cycles=1.0),),
    ),
    Mistake(
        "warmup_curve", "A {how} warm-up, not a linear one",
        "the warm-up is a straight line from 0 to the peak: step / warmup, half the peak half "
        "way (warmup / 2), 1 at step = warmup.",
        tuple(member(_all_cosine(warm=w), how=w) for w in _WARM_SHAPES),
    ),
    Mistake(
        "no_warmup", "No warm-up: the peak from the first step",
        "for step <= warmup the factor grows linearly, step / warmup: Adam's first steps, with "
        "its moments still noisy, need a small rate.",
        (_all_cosine(warm="none"),),
    ),
    Mistake(
        "warmup_from_floor", "Warm-up from the floor, not from 0: {how}",
        "the warm-up climbs from 0 to the peak, step / warmup (1 / warmup at step 1); min_ratio "
        "is where the cosine ENDS, not where the warm-up starts (timm's warmup_lr_init is a "
        "start of its own, 0 by default).",
        (member(_all_cosine(warm="floor"), how="r + (1 - r) * step / warmup"),),
    ),
    Mistake(
        "zero_division", "Division by zero when {how}",
        "warmup may be 0 (no warm-up) and may equal total_steps (no decay): divide by warmup "
        "only inside the warm-up branch, and by max(1, total_steps - warmup).",
        (member(_all_cosine(divide_first=True), how="warmup is 0"),
         member(_all_cosine(unguarded=True), how="warmup equals total_steps")),
    ),
)
_COSINE_LADDER = {
    "warmup_curve": (None, "print the factor at step = warmup / 2: 0.5."),
    "warmup_off_by_one": (None, "print your factor at steps 1 and warmup: 1 / warmup and 1."),
    "floor_ignored": (None, "print your factor at step total_steps with min_ratio=0.1: 0.1."),
    "floor_misplaced": (None, "print your factor at the end of the warm-up and at total_steps: "
                        "1 and min_ratio."),
    "not_clamped": (None, "print your factor at total_steps, total_steps + 1 and 2 * "
                    "total_steps: all min_ratio."),
    "cosine_span": (None, "print your factor at step warmup + 1: just below 1."),
    "decay_off_by_one": (None, "print your factor at steps warmup, warmup + 1 and total_steps: 1, "
                         "just below 1, min_ratio."),
    "integer_division": (None, "print 3 // 10 and 3 / 10."),
    "decay_shape": (None, "print your factor half way through the decay: (1 + min_ratio) / 2."),
    "full_cosine": (None, "print your factor half way through the decay: (1 + min_ratio) / 2."),
    "no_warmup": (None, "print your factor at step 1 with warmup=10: 0.1."),
    "zero_division": (None, "call cosine_lr(1, 0, 10) and cosine_lr(6, 5, 5)."),
    "warmup_floored": (None, "print your factor at step 1 with warmup=10, min_ratio=0.5: 0.1."),
    "endless_warmup": (None, "print your factor at step 6 with warmup = total_steps = 5: the "
                       "floor, min_ratio."),
    "warmup_from_floor": (None, "print your factor at step 1 with warmup=10, min_ratio=0.1: "
                          "0.1, the same as with min_ratio=0."),
}
COSINE = Item(
    EXERCISE, "cosine_lr", reference_cosine,
    [
        _cosine_case([(s, 10, 100, 0.1) for s in (1, 2, 5, 9, 10, 11, 30, 55, 80, 99, 100)],
                     "warmup=10, total_steps=100, min_ratio=0.1, steps 1 to 100"),
        _cosine_case([(s, 10, 100, 0.1) for s in (101, 150, 250)],
                     "warmup=10, total_steps=100, min_ratio=0.1, past the end: steps 101, 150, 250"),
        _cosine_case([(s, 4, 12, 0.0) for s in (1, 4, 8, 12, 13)],
                     "warmup=4, total_steps=12, min_ratio=0 (chapter 07's cosine)"),
        _cosine_case([(1, 1, 20, 0.1), (2, 1, 20, 0.1), (20, 1, 20, 0.1), (1, 0, 20, 0.5),
                      (10, 0, 20, 0.5), (21, 0, 20, 0.5)],
                     "warmup 1 and warmup 0"),
        _cosine_case([(1, 5, 5, 0.1), (5, 5, 5, 0.1), (6, 5, 5, 0.1)],
                     "warmup = total_steps = 5 (no decay), steps 1, 5, 6"),
        _cosine_case([(s, 10, 30, 0.5) for s in (1, 2, 4, 10, 20, 30)],
                     "warmup=10, total_steps=30, min_ratio=0.5 (the floor above the warm-up's "
                     "first steps)"),
    ],
    laddered(COSINE_MISTAKES, _COSINE_LADDER), same=_same_rates, what="factors",
    show=_first_wrong_rate,
    formula="Compute step / warmup during the warm-up, then r + (1 - r) (1 + cos(pi "
            "min(1, progress))) / 2.",
    twins=(_all_cosine(),),
    section=_SCHEDULE_SECTION,
)


# ---------------------------------------------------------------------------------------
# clip_grad_norm


def _as_float(value):
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else value


def _clipping(fn, args, case):
    """Parameters made from the case (weights and gradients, None for no gradient), clipped
    by `fn`: (the norm it returned, a 0-d tensor as it is, else as a float; the gradients after;
    the weights after)."""
    weights, grads, max_norm = args
    params = [nn.Parameter(w.clone()) for w in weights]
    for p, g in zip(params, grads):
        p.grad = None if g is None else g.clone()
    norm = fn(params, max_norm)
    norm = norm if isinstance(norm, torch.Tensor) and norm.dim() == 0 else _as_float(norm)
    return (norm, [p.grad for p in params], [p.detach() for p in params])


def _clip(weights, grads, max_norm, *, norm="global", power=0.5, coef="right", returned="before",
          target="grads", by_value=False):
    """clip_grad_norm with the variations mistakes make, as (norm returned, gradients after,
    weights after). norm "global", "each" (each tensor by its own), "sum" (the sum of the
    tensors' norms), "largest" (the largest tensor's norm), "l1" (sum of |g|), "inf" (the
    largest |g|), "weights" (the weights' norm), "root_of_norms" (sqrt of the sum of the
    tensors' norms), "mean_squares" (the squared norms averaged over the tensors), "rms" (over
    the entries), "sum_squared" (each tensor's sum squared); power: of the sum of squares; coef "right",
    "inverted" (total / max_norm above the threshold), "always" (max_norm / total below it
    too), "unguarded" (max_norm / total, no 1e-6), "ratio_inverted" (min(1, total / max_norm)),
    "capped" (min(max_norm, max_norm / total)); returned "before", "after", "none" or
    "factor"; target: what is scaled ("grads", "weights", "first": the first gradient only, or
    "none": the clipped gradients never written back); by_value: each entry clamped to
    [-max_norm, max_norm]; norm "sum_of_means" (each tensor's mean square summed), "stack" or
    "cat" (torch.stack or torch.cat of the gradients: raising where torch's do)."""
    present = [g for g in grads if g is not None]
    source = weights if norm == "weights" else present
    squares = [float((x.double() ** 2).sum()) for x in source]
    total = {"sum": lambda: sum(math.sqrt(s) for s in squares),
             "root_of_norms": lambda: sum(math.sqrt(s) for s in squares) ** 0.5,
             "mean_squares": lambda: (sum(squares) / max(1, len(squares))) ** 0.5,
             "rms": lambda: (sum(squares) / max(1, sum(x.numel() for x in source))) ** 0.5,
             "sum_squared": lambda: sum(float(x.double().sum()) ** 2 for x in source) ** 0.5,
             "sum_of_means": lambda: sum(s / max(1, x.numel()) for s, x in zip(squares, source)) ** 0.5,
             "stack": lambda: float(torch.stack(source).double().norm()),
             "cat": lambda: float(torch.cat(source).double().norm()),
             "largest": lambda: max(map(math.sqrt, squares), default=0.0),
             "l1": lambda: sum(float(x.double().abs().sum()) for x in source),
             "inf": lambda: max((float(x.double().abs().max()) for x in source if x.numel()),
                                default=0.0)}.get(norm, lambda: sum(squares) ** power)()
    dtype = present[0].dtype if present else torch.float32

    def factor(n):
        if coef == "inverted":
            return n / max_norm if n > max_norm else 1.0
        if coef == "always":
            return max_norm / (n + 1e-6)
        if coef == "unguarded":  # a Python float: ZeroDivisionError on zero gradients
            return min(1.0, max_norm / n)
        if coef == "ratio_inverted":
            return min(1.0, n / (max_norm + 1e-6))
        if coef == "capped":
            return min(max_norm, max_norm / (n + 1e-6))
        if coef == "reversed":  # `if norm < max_norm:` typed for >
            return max_norm / (n + 1e-6) if n < max_norm else 1.0
        return min(1.0, max_norm / (n + 1e-6))

    new_grads, new_weights = [], [w.clone() for w in weights]
    for i, g in enumerate(grads):
        if g is not None and target == "first" and any(
                h is not None for h in grads[:i]):  # only the first gradient scaled
            new_grads.append(g.clone())
        elif g is None:
            new_grads.append(None)
        elif by_value:
            new_grads.append(g.clamp(-max_norm, max_norm))
        elif norm == "each":
            new_grads.append(g * factor(float(g.double().norm())))
        elif target in ("weights", "none"):
            new_grads.append(g.clone())
        else:
            new_grads.append(g * torch.tensor(factor(total), dtype=dtype))
    if target == "weights":
        new_weights = [w * torch.tensor(factor(total), dtype=w.dtype) for w in weights]
    after = math.sqrt(sum(float((g.double() ** 2).sum()) for g in new_grads if g is not None))
    value = {"before": total, "after": after, "none": None, "squared": total ** 2,
             "factor": min(1.0, max_norm / (total + 1e-6))}[returned]
    return (value, new_grads, new_weights)


def _clip_with(**bug):
    return lambda weights, grads, max_norm: _clip(weights, grads, max_norm, **bug)


def _clip_case(seed, shapes, scale, max_norm, *, none=(), zero=False, exact=None,
               dtype=torch.float32, note=""):
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(s, generator=gen).to(dtype) for s in shapes]
    grads = [(scale * torch.randn(s, generator=gen)).to(dtype) for s in shapes]
    if zero:
        grads = [torch.zeros_like(g) for g in grads]
    if exact is not None:  # gradients whose global norm is exactly `exact`
        grads = [torch.tensor([3.0, 4.0], dtype=dtype) * exact / 5, torch.zeros(3, dtype=dtype)]
        weights = [torch.ones(2, dtype=dtype), torch.ones(3, dtype=dtype)]
    grads = [None if i in none else g for i, g in enumerate(grads)]
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads if g is not None))
    shown = ", ".join(str(tuple(w.shape)) + ("" if g is not None else " without .grad")
                      for w, g in zip(weights, grads))
    label = (f"{len(weights)} {str(dtype).removeprefix('torch.')} parameters {shown}, gradient "
             f"norm {norm:.4g}, max_norm={max_norm}{note}")
    return Case((weights, grads, max_norm), label=label, names=("weights", "grads"), seed=seed,
                run=_clipping, parts=("returned norm", "gradients", "weights"))


def _zip_misaligned(weights, grads, max_norm):
    """clip_grad_norm writing the scaled gradients back by zip(parameters, gradients present):
    after a parameter without .grad each lands on the next parameter (torch raises where the
    sizes differ)."""
    params = [nn.Parameter(w.clone()) for w in weights]
    for p, g in zip(params, grads):
        p.grad = None if g is None else g.clone()
    present = [p.grad for p in params if p.grad is not None]
    total = math.sqrt(sum(float((g.double() ** 2).sum()) for g in present))
    for p, g in zip(params, present):
        p.grad = g * min(1.0, max_norm / (total + 1e-6))
    return (total, [p.grad for p in params], [p.detach() for p in params])


def _clip_same(actual, expected):
    """The returned norm (a float or a 0-d tensor) to 1e-5, the tensors by `same`."""
    if expected[0] is None:  # a mistake that returns nothing
        return isinstance(actual, tuple) and actual[0] is None and same(list(actual[1:]),
                                                                       list(expected[1:]))
    return (isinstance(actual, tuple) and len(actual) == 3 and (isinstance(actual[0], float) or (
        isinstance(actual[0], torch.Tensor) and actual[0].dim() == 0))
            and math.isclose(float(actual[0]), float(expected[0]), rel_tol=1e-5)
            and same(list(actual[1:]), list(expected[1:])))


def _without_none(case, error):
    """The case with its parameters without gradients left out."""
    weights, grads, max_norm = case.args
    kept = [i for i, g in enumerate(grads) if g is not None]
    if len(kept) == len(grads):
        return None
    return Case(([weights[i] for i in kept], [grads[i] for i in kept], max_norm),
                label=case.label + " (the ones without .grad left out)", names=case.names,
                seed=case.seed, run=_clipping, parts=case.parts)


CLIP_MISTAKES = (
    Mistake(
        "per_tensor", "Each gradient clipped by its own norm",
        "clip by the GLOBAL norm: one norm over all the gradients together, sqrt(sum of every "
        "|g|^2), and one factor for all of them, so that the update keeps its direction.",
        (_clip_with(norm="each"),),
    ),
    Mistake(
        "weights_clipped", "The weights used instead of the gradients",
        "the norm is the gradients' (p.grad), and clipping scales p.grad in place (p.grad.mul_"
        "(...)), before the optimizer's step; the weights p themselves are left alone.",
        (_clip_with(target="weights"), _clip_with(target="weights", norm="weights"),
         _clip_with(norm="weights")),
    ),
    Mistake(
        "coef_inverted", "Clip factor inverted: the gradients grow",
        "above the threshold multiply by max_norm / norm (less than 1), not norm / max_norm.",
        (_clip_with(coef="inverted"),),
    ),
    Mistake(
        "scaled_below", "Gradients scaled below the threshold too",
        "a norm already at most max_norm is left alone: the factor is min(1, max_norm / "
        "(norm + 1e-6)); scaling every time brings small gradients UP to max_norm.",
        (_clip_with(coef="always"),),
    ),
    Mistake(
        "norm_after", "{how}",
        "return the total norm measured BEFORE clipping, as torch.nn.utils.clip_grad_norm_ "
        "does (training logs it: a spike tells a bad batch).",
        (member(_clip_with(returned="after"), how="Returned the norm after clipping"),
         member(_clip_with(returned="none"), how="Norm not returned"),
         member(_clip_with(returned="factor"), how="Returned the clip factor, not the norm"),
         member(_clip_with(returned="squared"), how="Returned the squared norm (the sum of "
                "squares), not its square root")),
    ),
    Mistake(
        "not_written_back", "Gradients not changed above the threshold: the clipped copies "
        "thrown away, or a factor kept at 1",
        "clipping acts on p.grad itself, in place, as torch.nn.utils.clip_grad_norm_ does: "
        "p.grad.mul_(factor) (or p.grad = p.grad * factor); g = g * factor rebinds a local name "
        "and a list of new tensors is never read by the optimizer. And the factor is min(1, "
        "max_norm / (norm + 1e-6)), below 1 above the threshold: max(1, ...) (or clamp(min=1)) "
        "never clips.",
        (_clip_with(target="none"),),
    ),
    Mistake(
        "wrong_norm", "{which}, not the L2 norm",
        "the global norm is the 2-norm of all gradients as one vector: sqrt(sum of every |g|^2) "
        "(torch's norm_type=2.0, the default); {other}",
        (member(_clip_with(norm="l1"), which="The L1 norm, the sum of every |g|",
                other="the L1 norm is norm_type=1."),
         member(_clip_with(norm="inf"), which="The largest |g| (the inf-norm)",
                other="the largest entry is norm_type=inf."),
         member(_clip_with(norm="largest"), which="The largest tensor's norm",
                other="combine the tensors' norms as sqrt(sum of their squares), not max.")),
    ),
    Mistake(
        "norm_not_rooted", "Norm without the square root",
        "the norm is sqrt(sum of |g|^2): the square root of the sum of every gradient's "
        "squared entries.",
        (_clip_with(power=1.0),),
    ),
    Mistake(
        "sum_of_norms", "Norms of the tensors added, not combined as one vector",
        "the global norm treats all gradients as one long vector: sqrt(sum over tensors of "
        "|g|^2), which is sqrt of the sum of SQUARED per-tensor norms, not their sum.",
        (_clip_with(norm="sum"),),
    ),
    Mistake(
        "norm_combined", "{which}",
        "the global norm is sqrt(sum of every gradient's squared entries): square each entry, "
        "sum over every entry of every tensor, then one square root (torch.nn.utils."
        "clip_grad_norm_: the 2-norm of the tensors' 2-norms). {why}",
        tuple(member(_clip_with(norm=n), which=w, why=y) for n, w, y in (
            ("root_of_norms", "The tensors' norms summed without squaring them: sqrt(sum of "
             "norms)", "The per-tensor norms are squared before the sum: sqrt(sum of norm^2)."),
            ("mean_squares", "The squared norms averaged over the tensors, not summed",
             "Every tensor adds its squares: a sum, not a mean (the same parameters on every rank "
             "would be an all-reduce's sum too)."),
            ("rms", "The mean of the squared entries, not their sum (an RMS, not a norm)",
             "Dividing by the number of entries makes a norm that shrinks with the model's size."),
            ("sum_squared", "Each tensor's sum squared, not the sum of its squares",
             "(sum g)^2 lets positive and negative entries cancel: g.pow(2).sum(), not "
             "g.sum().pow(2)."),
            ("sum_of_means", "Each tensor's MEAN square summed, not its sum of squares",
             "g.pow(2).mean() divides by each tensor's size: a norm that shrinks with the "
             "tensors' sizes; sum every squared entry, g.pow(2).sum().")))
    ),
    Mistake(
        "ratio_inverted", "Clip ratio inverted: min(1, norm / max_norm), not min(1, max_norm / "
        "norm)",
        "the factor is min(1, max_norm / (norm + 1e-6)): below 1 when the norm is ABOVE "
        "max_norm. Inverted, large gradients are left alone and small ones shrunk.",
        (_clip_with(coef="ratio_inverted"),),
    ),
    Mistake(
        "factor_capped_at_max_norm", "The factor capped at max_norm, not at 1: min(max_norm, "
        "max_norm / norm)",
        "below the threshold the gradients are left as they are: min(1, max_norm / (norm + "
        "1e-6)). Capped at max_norm, a norm below the threshold multiplies every gradient by "
        "max_norm (right only when max_norm is 1).",
        (_clip_with(coef="capped"),),
    ),
    Mistake(
        "condition_reversed", "Gradients scaled UP below the threshold, unclipped above it: "
        "max(1, max_norm / norm) for min(1, ...), or the test reversed",
        "the factor is min(1, max_norm / (norm + 1e-6)): at most 1, below 1 only when the norm "
        "is above max_norm. A max for the min (or `if norm < max_norm:`) blows small gradients "
        "up to max_norm and lets large ones pass unclipped.",
        (_clip_with(coef="reversed"),),
    ),
    Mistake(
        "first_only", "Only the first gradient scaled: the loop left after one tensor (a "
        "return inside it)",
        "scale EVERY gradient by the one factor, then return the norm after the loop: a return "
        "(or break) indented into the loop stops after the first parameter.",
        (_clip_with(target="first"),),
    ),
    Mistake(
        "gradients_stacked", "The gradients {how} into one tensor: {why}",
        "the global norm combines tensors of any shapes: sqrt(sum(g.pow(2).sum() for g in "
        "grads)), or torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])) (torch's "
        "clip_grad_norm_ stacks the per-tensor NORMS, 0-d, never the gradients).",
        (member(_clip_with(norm="stack"), how="stacked", why="torch.stack needs equal shapes"),
         member(_clip_with(norm="cat"), how="concatenated", why="torch.cat needs the same number "
                "of axes (flatten each first)")),
    ),
    Mistake(
        "zip_misaligned", "Gradients written back by zip(parameters, gradients present): "
        "misaligned after a parameter without .grad",
        "after a parameter whose .grad is None, zip pairs each remaining gradient with the "
        "parameter before its own: scale each p.grad in place (p.grad.mul_(factor)) in a loop "
        "over the parameters, skipping the ones without a gradient.",
        (_zip_misaligned,),
    ),
    Mistake(
        "by_value", "Clipped by value, not by norm",
        "clamping each entry to [-max_norm, max_norm] (clip_grad_value_) changes the "
        "gradient's direction; clip by norm scales all of it by one factor.",
        (_clip_with(by_value=True),),
    ),
    Mistake(
        "no_epsilon", "Division by zero when every gradient is 0: max_norm / norm without the "
        "+ 1e-6",
        "a step whose gradients are all 0 (a frozen stage, a masked batch) has norm 0: torch's "
        "clip_grad_norm_ divides by norm + 1e-6, so the factor is min(1, max_norm / (norm + "
        "1e-6)) and zero gradients stay 0.",
        (_clip_with(coef="unguarded"),),
    ),
    Mistake(
        "no_grad_fails", "Parameters without a gradient not skipped",
        "a parameter that took no part in the loss has p.grad None (a frozen layer, an unused "
        "embedding): leave it out of the norm and the scaling.",
        probe=_without_none,
    ),
)
_CLIP_LADDER = {
    "ratio_inverted": (None, "print your factor for a norm of 10 and max_norm 1: 0.1."),
    "factor_capped_at_max_norm": (None, "print your factor for a norm of 1 and max_norm 4: 1."),
    "condition_reversed": (None, "print your factor for a norm of 10 and max_norm 1: 0.1."),
    "first_only": (None, "print every gradient's norm after your call: each scaled by the "
                   "same factor."),
    "gradients_stacked": (None, "call your function on two parameters of shapes (4, 3) and "
                          "(3,)."),
    "zip_misaligned": (None, "give three parameters, the middle one without .grad, and print "
                       "each p.grad.shape after your call."),
    "per_tensor": (None, "print the norm of all gradients together after your clipping: "
                   "max_norm (when it was above)."),
    "weights_clipped": (None, "print p.grad and p before and after your call: only p.grad may "
                        "change."),
    "coef_inverted": (None, "with a norm of 10 and max_norm 1, the gradients must get 10 times "
                      "smaller."),
    "scaled_below": (None, "with a norm of 0.5 and max_norm 1, the gradients must not change."),
    "norm_after": (None, "return the norm you computed before changing the gradients."),
    "not_written_back": (None, "print p.grad before and after your call, above the threshold."),
    "wrong_norm": (None, "for one gradient [3, 4] your norm must be 5."),
    "norm_not_rooted": (None, "for one gradient [3, 4] your norm must be 5."),
    "sum_of_norms": (None, "for gradients [3] and [4] your norm must be 5, not 7."),
    "by_value": (None, "with max_norm 1 and one gradient [3, 4], the result is [0.6, 0.8]."),
    "norm_combined": (None, "for gradients [3] and [-4] your norm must be 5: print it."),
    "no_grad_fails": (None, "give one parameter p.grad = None: skip it."),
    "no_epsilon": (None, "call your clip_grad_norm on parameters whose .grad are all zeros."),
}
CLIP = Item(
    EXERCISE, "clip_grad_norm", reference_clip,
    [
        _clip_case(0, [(4, 3), (3,), (2, 5)], 2.0, 1.0),
        _clip_case(1, [(3, 3), (5,)], 0.1, 1.0, note=" (below the threshold)"),
        _clip_case(2, [(2,), (3,)], 1.0, 5.0, exact=5.0, note=" (exactly at the threshold)"),
        _clip_case(3, [(3, 2), (4,), (2, 2)], 1.0, 1.0, zero=True, none=(1,),
                   note=" (all gradients 0)"),
        _clip_case(4, [(3, 3), (5,), (2, 3)], 3.0, 2.0, none=(1,), dtype=torch.float64),
        _clip_case(5, [(2, 3), (4,)], 0.3, 4.0, note=" (below a threshold other than 1)"),
    ],
    laddered(CLIP_MISTAKES, _CLIP_LADDER), same=_clip_same, what="result",
    formula="Compute n = sqrt(sum of every gradient's squared entries), multiply every gradient "
            "by min(1, max_norm / (n + 1e-6)) in place, return n.",
    twins=(_clip_with(),),
    section=_CLIP_SECTION,
)


# ---------------------------------------------------------------------------------------
# param_groups


def _names(model, groups):
    """((sorted names of a group's parameters, its weight_decay), ...) for the groups given:
    a name for each tensor listed (a tensor listed twice, twice; a str listed as "str: " + it)."""
    named = {}
    for name, p in model.named_parameters():
        named.setdefault(id(p), name)
    result = []
    for group in groups:
        params = list(group.get("params", ())) if isinstance(group, dict) else group
        names = sorted(named.get(id(p), "str: " + p if isinstance(p, str) else "?") for p in params)
        result.append((tuple(names), group.get("weight_decay") if isinstance(group, dict)
                       else "not a dict"))
    return result


def _grouping(fn, args, case):
    model, weight_decay = args
    groups = fn(model, weight_decay)
    if not isinstance(groups, (list, tuple)):
        return groups
    names = _names(model, list(groups))
    return tuple(names) if isinstance(groups, tuple) else names  # a tuple told as one


def _groups(model, wd, *, rule="linear", norms=False, biases=False, tied="once",
            swapped=False, both=False, frozen=False, reversed_=False, unset=(), kept=None):
    """param_groups with the variations mistakes make, as _names gives them. rule "linear"
    (nn.Linear weights, not embeddings), "2d" (every matrix: nanoGPT's), "all", "not_bias"
    (every tensor whose name does not end in bias), "linear_tied" (every nn.Linear weight, a
    tied output's, the embedding's table, too); norms: their gains decay; biases: theirs
    decay ("all", or "linear": the linear layers' only); tied "twice": a tied embedding
    listed in both groups; swapped: the decay on the other group; both: weight_decay on both
    groups; frozen: parameters with requires_grad=False listed too; reversed_: the undecayed
    group first (timm's param_groups_weight_decay order); unset: the indices of the groups
    given no "weight_decay" key; rule "in" and "in_reversed": nn.Linear weights found by `p in
    a list of tensors` (== elementwise: it raises as the learner's does), the two tests in
    either order; kept "grad": only the parameters with a .grad (p.grad is not None) listed."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    linears = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    linear_biases = {id(m.bias) for m in model.modules() if isinstance(m, nn.Linear)
                     and m.bias is not None}
    named = dict(model.named_parameters())
    decay, rest = [], []
    linear_list = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    embedding_list = [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]
    for name, p in named.items():
        if not (p.requires_grad or frozen) or (kept == "grad" and p.grad is None):
            continue
        if rule == "in":
            yes = p in linear_list and p not in embedding_list
        elif rule == "in_reversed":
            yes = p not in embedding_list and p in linear_list
        elif rule == "2d":
            yes = p.dim() >= 2
        elif rule == "all":
            yes = True
        elif rule == "not_bias":
            yes = not name.endswith("bias")
        elif rule == "linear_tied":  # every nn.Linear weight, a tied one (an embedding) too
            yes = id(p) in linears
        else:
            yes = id(p) in linears and id(p) not in embeddings
        yes = yes or (norms and "norm" in name and name.endswith("weight")) or (
            biases == "all" and name.endswith("bias")) or (biases == "linear" and id(p) in
                                                          linear_biases)
        (decay if yes else rest).append(p)
    if tied == "twice":
        for m in model.modules():
            if isinstance(m, nn.Linear) and id(m.weight) in embeddings:
                decay.append(m.weight)
    groups = [dict(params=decay, weight_decay=wd), dict(params=rest, weight_decay=wd if both else 0.0)]
    if swapped:
        groups = [dict(params=decay, weight_decay=0.0), dict(params=rest, weight_decay=wd)]
    for i in unset:
        del groups[i]["weight_decay"]
    return _names(model, groups[::-1] if reversed_ else groups)


def _groups_with(**bug):
    return lambda model, wd: _groups(model, wd, **bug)


class _OwnRMSNorm(nn.Module):
    """A norm of the model's own class (not nn.RMSNorm or nn.LayerNorm): a gain, 1-D."""

    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))


class _MixedModel(nn.Module):
    """What a rule written for Llama's layers may sort wrong: a convolution, bare nn.Parameters
    (a 1-D scale, a 2-D table of positions), a norm of the model's own class, an embedding
    named wte, a Linear named embed_proj (no embedding) and a head."""

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(11, 8)
        self.conv = nn.Conv1d(8, 8, 3, padding=1)
        self.scale = nn.Parameter(torch.ones(8))
        self.pos = nn.Parameter(torch.zeros(4, 8))
        self.ln = _OwnRMSNorm(8)
        self.embed_proj = nn.Linear(8, 8)
        self.head = nn.Linear(8, 11, bias=False)


def _model(kind, seed):
    torch.manual_seed(seed)
    if kind == "mixed":
        return _MixedModel()
    if kind == "frozen":  # every third tensor frozen: matrices, gains and the embedding among them
        model = _model("untied", seed)
        for p in list(model.parameters())[::3]:
            p.requires_grad_(False)
        return model
    if kind == "gpt":
        return DecoderLM(DecoderLMConfig.tiny(11, d_model=16, d_ff=24, n_heads=2, max_len=8))
    return LlamaLM(LlamaConfig.tiny(11, d_model=16, d_ff=24, n_heads=2, n_kv_heads=1,
                                   tie_output=kind == "tied"))


def _listed_twice(case, result, expected):
    """names_not_tensors for a result (names per group) that lists strings; tied_twice, for
    one that lists a tensor more than once."""
    mistakes = {m.key: m for m in GROUPS.mistakes}
    lists = [names for names, _ in result]
    if any(n.startswith("str: ") for names in lists for n in names):
        return mistakes["names_not_tensors"], {}
    if any(wd == "not a dict" for _, wd in result):
        return mistakes["not_dicts"], {}
    model = case.args[0]
    for name in dict.fromkeys(n for names in lists for n in names):
        counts = [names.count(name) for names in lists]
        if sum(counts) > 1:
            p = dict(model.named_parameters())[name]
            shared = sum(q is p for _, q in model.named_parameters(remove_duplicate=False)) > 1
            where = ("in both groups" if sum(c > 0 for c in counts) > 1 else
                     f"twice in the {('decayed', 'other')[counts.index(max(counts))]} group")
            what = f"The tied weight {name} (shared by two modules)" if shared else f"The tensor {name}"
            return mistakes["tied_twice"], {"what": what, "where": where}
    return _misplaced(case, result, expected)


def _kind_of(model, name):
    """What the parameter `name` is, in the words of the rule: (kind, its module's class)."""
    module_name, _, local = name.rpartition(".")
    owner = model.get_submodule(module_name)
    if isinstance(owner, nn.Embedding):
        return "Embedding tables", "nn.Embedding"
    embedded = any(isinstance(m, nn.Embedding) and m.weight is getattr(owner, local)
                   for m in model.modules())
    if isinstance(owner, nn.Linear) and local == "weight":
        return ("The tied output weight" if embedded else "nn.Linear weights"), "nn.Linear"
    if local == "bias":
        return "Biases", type(owner).__name__
    if isinstance(owner, nn.modules.conv._ConvNd):
        return "Convolution kernels", type(owner).__name__
    if "norm" in type(owner).__name__.lower():
        return "Norms' gains", type(owner).__name__
    if not module_name or not any(isinstance(owner, t) for t in (nn.Linear, nn.Embedding)):
        return "Bare nn.Parameters (of no standard layer)", type(owner).__name__
    return "Parameters", type(owner).__name__


def _misplaced(case, result, expected):
    """groups_differ: the parameters a result (names per group) puts in the other group, in no
    group, or lists where the reference does not, said by kind (a convolution's kernel, a
    norm's gain of the model's own class, a bare nn.Parameter, ...) and by name."""
    model = case.args[0]
    if len(result) != 2 or len(expected) != 2:
        return None
    mine, want = [set(names) for names, _ in result], [set(names) for names, _ in expected]
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    found = []
    for names, how in ((mine[0] & want[1], "decayed"), (mine[1] & want[0], "not decayed"),
                       ((want[0] | want[1]) - mine[0] - mine[1], "in no group"),
                       ((mine[0] | mine[1]) - want[0] - want[1] - {"?"}, "listed")):
        kinds = {}
        for name in sorted(names):
            kind, owner = (("Frozen parameters (requires_grad=False)", "frozen")
                           if name not in trained else _kind_of(model, name))
            kinds.setdefault(kind, []).append(f"{name} ({owner})")
        found += [f"{kind} {how}: {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}"
                  for kind, names in kinds.items()]
    if not found:
        return None
    mistakes = {m.key: m for m in GROUPS.mistakes}
    rule = _name_rule(model, trained, mine)
    return mistakes["groups_differ"], {"which": rule + "; ".join(found)}


# The words no-decay lists test names for (minGPT's, timm's, Hugging Face's no_decay lists).
_NAME_KEYS = ("bias", "norm", "ln", "emb", "wte", "wpe", "pos", "scale", "gain", "gamma",
              "beta", "head", "rms", "token")


def _name_rule(model, trained, groups):
    """'Groups chosen by name ...: ' when the groups are exactly what a test of the names
    gives (no decay when a name holds one of a few _NAME_KEYS, or also for 1-D tensors), and
    an nn.Linear weight (no embedding) went undecayed for its name: a test of the owner's type
    would not put it there. '' otherwise."""
    decayed, rest = groups
    if decayed & rest:
        return ""
    dims = {n: p.dim() for n, p in model.named_parameters()}
    linear = {n for n in trained if _kind_of(model, n)[0] == "nn.Linear weights"}
    for one_d in (False, True):
        left = {n for n in rest if not (one_d and dims.get(n, 2) < 2)}
        if not left & linear or decayed & {n for n in trained if one_d and dims[n] < 2}:
            continue
        keys = [k for k in _NAME_KEYS if not any(k in n for n in decayed)]
        chosen = []
        while left:
            best = max(keys, key=lambda k: sum(k in n for n in left), default=None)
            if best is None or not any(best in n for n in left):
                break
            chosen.append(best)
            left = {n for n in left if best not in n}
        if not left and decayed | rest >= trained:
            words = " or ".join(f"'{k}'" for k in chosen)
            return (f"Groups chosen by the parameters' names, not by what owns them: yours are "
                    f"exactly a name test's (no decay when the name holds {words}"
                    f"{', or for 1-D tensors' if one_d else ''}), so these are misplaced: ")
    return ""


def _groups_case(kind, wd, note):
    return Case((_model(kind, 0), wd), label=f"{note}, weight_decay={wd}", names=("model",),
                seed=0, run=_grouping, parts=("the decayed group", "the other group"))


GROUPS_MISTAKES = (
    Mistake(
        "everything_decayed", "Every parameter decayed",
        "only the weight matrices of the linear layers decay: norms' gains, biases and "
        "embeddings go in the second group, with weight_decay 0.0.",
        (_groups_with(rule="all"), _groups_with(both=True)),
    ),
    Mistake(
        "embeddings_decayed", "Embeddings decayed: every matrix in the decayed group",
        "this course leaves embedding tables undecayed (OLMo 2's choice; nanoGPT decays every "
        "2-D tensor): a row learns only when its token is read but would shrink at every step. "
        "Decay the weights of nn.Linear layers, except one that IS an embedding (tied).",
        (_groups_with(rule="2d"),),
    ),
    Mistake(
        "norms_decayed", "Norms' gains decayed",
        "a norm's gain sets a scale and starts at 1: decay would pull it towards 0, which "
        "changes what the model computes. Only nn.Linear weights decay.",
        (_groups_with(rule="not_bias"), _groups_with(norms=True)),
    ),
    Mistake(
        "biases_decayed", "Biases decayed",
        "a bias is an offset, not a weight that multiplies: it goes in the group without "
        "decay. Take each nn.Linear's .weight, not all its parameters.",
        (_groups_with(biases="linear"), _groups_with(biases="all")),
    ),
    Mistake(
        "tied_twice", "{what} listed twice: {where}",
        "each tensor goes in one group, once (torch.optim refuses a tensor in two groups, and "
        "warns of one listed twice). With tie_output the output layer's weight IS the "
        "embedding's tensor: walking model.modules() and each module's parameters lists it once "
        "per module that holds it (and, recursing, every tensor once per enclosing module: "
        "minGPT's configure_optimizers says so); model.parameters() and model.named_parameters() "
        "list each tensor once (they deduplicate by identity), or keep a set of id(p) seen.",
        (member(_groups_with(tied="twice"), what="The tied output weight (the embedding's "
                "table)", where="in both groups"),),
    ),
    Mistake(
        "tied_decayed", "The tied output weight decayed: it is the embedding's table",
        "with tie_output the output layer's weight and the embedding's are ONE tensor: an "
        "nn.Linear's weight, but an embedding table too, and embeddings do not decay here. "
        "Test identity: a Linear weight that is an nn.Embedding's weight (id(p) among the "
        "embeddings') goes in the undecayed group.",
        (_groups_with(rule="linear_tied"),),
    ),
    Mistake(
        "decay_unset", "{which} without a \"weight_decay\" key: the optimizer's default applies",
        "a group that does not set weight_decay gets the optimizer's own (torch.optim.AdamW's "
        "is 0.01), so the undecayed group would decay: give each group its weight_decay, "
        "{{'params': ..., 'weight_decay': 0.0}} for the rest.",
        (member(_groups_with(unset=(1,)), which="The undecayed group"),
         member(_groups_with(unset=(0, 1)), which="The groups")),
    ),
    Mistake(
        "not_dicts", "Lists of parameters, not parameter groups",
        "torch.optim takes parameter groups, dicts that each hold their params and their own "
        "settings: dict(params=[...], weight_decay=weight_decay), then dict(params=[...], "
        "weight_decay=0.0). Bare lists carry no weight_decay: each would get the optimizer's.",
    ),
    Mistake(
        "names_not_tensors", "Parameter names listed, not the parameters",
        "an optimizer's groups hold the tensors themselves, params=[p, ...]; "
        "named_parameters() gives (name, p) pairs: choose by the name, then list p.",
    ),
    Mistake(
        "groups_swapped", "Weight decay on the wrong group",
        "the first group (the linear layers' weights) gets weight_decay, the second 0.0.",
        (_groups_with(swapped=True),),
    ),
    Mistake(
        "frozen_included", "Frozen parameters (requires_grad=False) put in the groups",
        "a parameter that requires no gradient is not trained: it goes in no group (a model "
        "partly frozen, for fine-tuning, gives the optimizer only what it trains). Skip "
        "p.requires_grad False.",
        (_groups_with(frozen=True),),
    ),
    Mistake(
        "groups_differ", "{which}",
        "each trained parameter goes in exactly one group: the weights of nn.Linear layers (not "
        "one that is an embedding's table) with weight_decay, EVERY other one with 0.0: norms' "
        "gains of any class, biases, embedding tables, convolution kernels, parameters of no "
        "standard layer. Walk model.named_parameters() (each tensor once, whatever module holds "
        "it) and test what owns it, not a list of layer types or the names' spelling.",
    ),
    Mistake(
        "tensor_membership", "Tensors tested with `in` on a list of tensors: `in` compares them "
        "with ==, entry by entry",
        "`p in [w1, w2, ...]` tries p is w1, then p == w1: a tensor of elementwise results, "
        "whose truth value raises (or whose shapes do not even broadcast): test identity, by "
        "`any(p is w for w in ...)` or a set of id(w) (`id(p) in ids`).",
        tuple(_groups_with(rule=r) for r in ("in", "in_reversed")),
    ),
    Mistake(
        "grad_filter", "Parameters filtered by p.grad, not by requires_grad: before the first "
        "backward every parameter is left out",
        "param_groups is called when the optimizer is built, before any backward: every p.grad "
        "is None then. Keep the parameters that will be trained, p.requires_grad (p.grad is "
        "None says only that no gradient has been computed yet).",
        (_groups_with(kept="grad"),),
    ),
    Mistake(
        "groups_reversed", "The groups in the other order: the undecayed group first",
        "the first group holds the decayed weights (weight_decay), the second the rest (0.0): "
        "code that reads groups[0] as the decayed one (a schedule, a log) depends on the order.",
        (_groups_with(reversed_=True),),
    ),
)
_GROUPS_LADDER = {
    "tensor_membership": (None, "print torch.ones(2) in [torch.zeros(3)]."),
    "grad_filter": (None, "build a fresh model and print how many of its parameters have a "
                    ".grad: none."),
    "everything_decayed": (None, "print the names in your second group: the norms, the "
                           "biases and the embeddings."),
    "embeddings_decayed": (None, "print isinstance(module, nn.Embedding) for the module that "
                           "owns each matrix you decay."),
    "norms_decayed": (None, "print the names in your first group: no 'norm' among them."),
    "biases_decayed": (None, "print the names in your first group: none ends in 'bias'."),
    "tied_twice": (None, "print len(set(map(id, all params))) next to the number you listed."),
    "tied_decayed": (None, "print model.output.weight is model.embed.weight (or your model's "
                     "names) and which group holds it."),
    "groups_swapped": (None, "print each group's weight_decay."),
    "decay_unset": (None, "print [g.get('weight_decay') for g in groups]."),
    "not_dicts": (None, "print type(groups[0]): a dict."),
    "names_not_tensors": (None, "print type(groups[0]['params'][0]): a Parameter."),
    "frozen_included": (None, "print [p.requires_grad for p in group['params']] for each group."),
    "groups_reversed": (None, "print [g['weight_decay'] for g in groups]: the first is weight_decay."),
    "groups_differ": (None, "for each name in model.named_parameters(), print the class of the "
                      "module that holds it and the group you put it in."),
}
GROUPS = Item(
    EXERCISE, "param_groups", reference_groups,
    [
        _groups_case("untied", 0.1, "a Llama-style LM with its own output layer"),
        _groups_case("gpt", 0.1, "chapter 09's LM (LayerNorm, biases, learned positions)"),
        _groups_case("tied", 0.05, "a Llama-style LM with its output tied to the embedding"),
        _groups_case("frozen", 0.1, "a Llama-style LM with every third parameter frozen"),
        _groups_case("mixed", 0.1, "a model with a Conv1d, bare nn.Parameters, a norm of its own "
                     "class, an embedding named wte and a Linear named embed_proj"),
    ],
    laddered(GROUPS_MISTAKES, _GROUPS_LADDER), what="groups", explain=_listed_twice,
    same=lambda actual, expected: type(actual) is type(expected) and same(actual, expected),
    formula="Put each nn.Linear's weight (not an embedding's) in a group with weight_decay, "
            "every other parameter once in a group with 0.0.",
    twins=(_groups_with(),),
    section=_GROUPS_SECTION,
)



# ---------------------------------------------------------------------------------------
# TextStream
#
# Real streams that went wrong this way, from their bug reports: tokens decoded one by one
# (text-generation-inference issues 131 and 333, LocalAI issue 677, LLamaSharp issue 265,
# transformers.js issue 853: a U+FFFD for each part of a cut character); cut bytes dropped
# (llama-cpp-python PR 118's errors="ignore", replicate/cog-llama-template PR 75's
# replace("�", "")); the whole text decoded again and its new characters cut off by count
# (ChatGLM-6B issue 478, tokenizers issue 1141: the U+FFFD is sent, the character never);
# a token held back whole while the text ends in U+FFFD (tokenizers' DecodeStream, PR 1677;
# oobabooga/textgen issue 1603's workaround): right in the end, but a character the token
# completed waits for the next one; a strict decode when generation stops inside a
# character (Camelid PR 288, Raku nqp issue 668). Token healing's shown bytes can span more
# than the first token (a healed 'sel', then 'se' and 'lf'): the case of a healed prompt over
# 2 tokens is appended after the others, then a healed 'café' (5 bytes, 4 characters) and
# UNK after the lead byte of 'é' (its text goes through the decoder like any token's).


def _bpe(tokens, specials=()):
    """A BPE with every byte and each of `tokens` (bytes) as tokens: each token is merged
    from its prefix and its last byte (so the prefixes are tokens too)."""
    merges, rank = [], {bytes([b]): b for b in range(256)}
    for token in tokens:
        for n in range(2, len(token) + 1):
            if token[:n] not in rank:
                merges.append((rank[token[:n - 1]], token[n - 1]))
                rank[token[:n]] = 255 + len(merges)
    return BPE(merges, special_tokens=specials)


# Tokens that cut characters in every way: é (2 bytes), € and 日 (3), 😀 and 👩‍💻's parts (4);
# b"\xa9\xe2" ends 'é' and starts '€', b"\xa5\xf0\x9f" ends '日' and starts '😀'.
_STREAM_BPE = _bpe([b"caf", b"\xa9\xe2", b"\x82\xac", b"\x97\xa5", b"\xa5\xf0\x9f", b"\x98\x80",
                    b"\xf0\x9f", b"\xa9\xe2\x80", b"\x8d\xf0\x9f\x92", b"self", b"()"],
                   specials=["<|user|>"])
_CHARACTERS = Vocab(["a", "b", "é", "日", " "])


def _ids(tokenizer, *tokens):
    """The ids of `tokens`: bytes (a token of _STREAM_BPE) or an int (an id as it is)."""
    if isinstance(tokenizer, Vocab):
        return [t if isinstance(t, int) else tokenizer.stoi[t.decode()] for t in tokens]
    found = {b: tokenizer.offset + r for r, b in enumerate(tokenizer.token_bytes)}
    return [t if isinstance(t, int) else found[t] for t in tokens]


def _shown_token(tokenizer, i):
    """How a label shows id i: a special by its name, a Vocab's symbol as text, a BPE token
    as its bytes."""
    if isinstance(tokenizer, Vocab):
        return tokenizer.itos[i] if i < 4 else repr(tokenizer.itos[i])
    return tokenizer.token(i).decode() if i < tokenizer.offset else repr(tokenizer.token(i))


def _streaming(cls, args, case):
    """The case's streams made from `cls` (cls(tokenizer), or cls(tokenizer, shown=...)), each
    when it is first used, and called in the case's order: each entry k of the order is stream
    k's next push(id), or its end() once its ids are pushed. [[what each call returned, end()'s
    last] for each stream]."""
    tokenizer, streams, order = args
    made, pieces = {}, [[] for _ in streams]
    for k in order:
        ids, shown = streams[k]
        if k not in made:
            made[k] = cls(tokenizer, shown=shown) if shown else cls(tokenizer)
        n = len(pieces[k])
        pieces[k].append(made[k].push(ids[n]) if n < len(ids) else made[k].end())
    return pieces


class _Bytes:
    """What a stream keeps of the bytes it was given: an incremental decoder, held bytes, or
    (for the text decoded again) every byte and how many characters were returned."""

    def __init__(self, errors):
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors)
        self.held, self.seen, self.told = bytearray(), bytearray(), 0


def _unfinished(held):
    """Where an unfinished last character of `held` starts (len(held) when there is none)."""
    for j in range(len(held) - 1, max(-1, len(held) - 4), -1):
        if held[j] >= 0xC0:
            need = 2 if held[j] < 0xE0 else 3 if held[j] < 0xF0 else 4 if held[j] < 0xF8 else 1
            return j if len(held) - j < need else len(held)
        if held[j] < 0x80:
            break
    return len(held)


class _Stream:
    """TextStream with the variations mistakes make. hold: how push turns bytes into text,
    "incremental" (codecs' decoder), "per_token" (each token's bytes alone), "again" (every
    byte decoded again, the new characters cut off by count), "until_strict" (held until
    they decode without error), "until_no_fffd" (held while their text ends in U+FFFD),
    "lead_only" (only a lone lead byte at the end held), "after_lead" (only a lead byte with
    continuation bytes after it held), "until_ascii" (everything held while the last byte is
    not ASCII), "fresh" (a new incremental decoder for each token); errors: the decoding's
    ("replace", "ignore", "strict"); end: "flush", "none" (None), "drop" (''), "strict" (the
    held bytes decoded strictly), "per_byte" (a U+FFFD per held byte); specials: "skip",
    "as_text" (every id's bytes), "eos_text" (PAD and BOS skipped, EOS written and the end),
    "no_stop" (EOS skipped, not the end), "skip_all" (every special id skipped, the
    tokenizer's extra ones too); written: PAD or BOS written as text all the same; eos:
    "flush" (push(EOS) returns what end() would, and end() ''), "silent_end" (end() after EOS
    returns ''); unk: "decode" (tokenizer.decode([UNK])), "token", "skip", "around"
    (tokenizer.decode([UNK]) returned at once, the held bytes left held) or "fffd" (U+FFFD's
    bytes); skip: the shown bytes skipped (True), not (False), only within the first token
    ("first"), from every token ("every"), counted in characters ("chars"), or only when the
    first token starts with all of them ("startswith"); stops: ids other than EOS that end
    the text too ("specials": every special id but UNK); errors "strict_reset": a strict
    decoder reset, and '' returned, on an error; shared: the bytes kept in `box`, one for every
    stream of the case."""

    def __init__(self, tokenizer, shown=b"", *, box, hold="incremental", errors="replace",
                 end="flush", specials="skip", written=(), eos="end", unk="decode", skip=True,
                 shared=False, stops=()):
        self.tokenizer, self.skip, self.ended = tokenizer, len(shown) if skip else 0, False
        if skip == "chars":
            self.skip = len(shown.decode("utf-8", "replace"))
        self.hold, self.errors, self.end_how, self.specials, self.unk = hold, errors, end, specials, unk
        self.written, self.skip_how, self.eos, self.shown = written, skip, eos, shown
        self.stops = stops
        errors = "strict" if errors == "strict_reset" else errors
        self.bytes = box.setdefault("bytes", _Bytes(errors)) if shared else _Bytes(errors)

    def push(self, i):
        if self.ended:
            return ""
        if i in self.stops or self.stops == "specials" and i != UNK and i < getattr(
                self.tokenizer, "offset", UNK + 1):
            self.ended = True
            return ""
        if self.specials in ("skip", "eos_text", "no_stop") and i in (PAD, BOS) and i not in self.written:
            return ""
        if i == EOS and self.specials != "as_text":
            self.ended = self.specials != "no_stop"
            if self.eos == "flush":
                text = self.end()
                self.end_how = "drop"
                return text
            if self.specials != "eos_text":
                return ""
        if i == UNK and self.unk == "skip" or self.specials == "skip_all" and i != UNK and i < getattr(
                self.tokenizer, "offset", UNK + 1):
            return ""
        if i == UNK and self.unk == "around":
            return self.tokenizer.decode([UNK])
        use_decode = i == UNK and self.unk == "decode"
        data = self.tokenizer.decode([i]).encode() if use_decode else self.tokenizer.token(i)
        data = "\ufffd".encode() if i == UNK and self.unk == "fffd" else data
        if self.skip_how == "startswith":
            data, self.skip = data[self.skip:] if self.skip and data.startswith(self.shown) else data, 0
            return self._text(data)
        data, self.skip = data[self.skip:], {"first": 0, "every": self.skip}.get(
            self.skip_how, max(0, self.skip - len(data)))
        return self._text(data)

    def _text(self, data):
        state, errors = self.bytes, self.errors
        if self.hold == "incremental" and errors == "strict_reset":
            try:
                return state.decoder.decode(data)
            except UnicodeDecodeError:
                state.decoder.reset()
                return ""
        if self.hold == "incremental":
            return state.decoder.decode(data)
        if self.hold == "fresh":
            state.decoder = codecs.getincrementaldecoder("utf-8")(errors)
            return state.decoder.decode(data)
        if self.hold == "per_token":
            return data.decode("utf-8", errors)
        if self.hold == "again":
            state.seen += data
            full = bytes(state.seen).decode("utf-8", "replace")
            piece, state.told = full[state.told:], len(full)
            return piece
        held = state.held
        held += data
        if self.hold == "until_ascii":
            if held and held[-1] >= 0x80:
                return ""
            text = bytes(held).decode("utf-8", errors)
        elif self.hold == "until_strict":
            try:
                text = bytes(held).decode("utf-8")
            except UnicodeDecodeError:
                return ""
        elif self.hold == "until_no_fffd":
            text = bytes(held).decode("utf-8", errors)
            if text.endswith("\ufffd"):
                return ""
        else:
            last = held[-1] if held else 0
            if self.hold == "lead_only":
                cut = len(held) - 1 if last >= 0xC0 else len(held)
            else:  # after_lead
                cut = _unfinished(held) if 0x80 <= last < 0xC0 else len(held)
            text = bytes(held[:cut]).decode("utf-8", errors)
            del held[:cut]
            return text
        held.clear()
        return text

    def end(self):
        state = self.bytes
        if self.eos == "silent_end" and self.ended:
            return ""
        if self.hold in ("incremental", "fresh"):
            rest = state.decoder.getstate()[0]
            state.decoder.reset()
        elif self.hold == "again":  # every byte was decoded already, U+FFFD included
            state.seen, state.told = bytearray(), 0
            return ""
        else:
            rest = bytes(state.held)
            state.held.clear()
        if self.end_how == "none":
            return None
        if self.end_how == "drop":
            return ""
        if self.end_how == "per_byte":
            return "\ufffd" * len(rest)
        strict = self.end_how == "strict" or self.errors == "strict_reset"
        return rest.decode("utf-8", "strict" if strict else self.errors)


def _stream_with(**knobs):
    def compute(reference, tokenizer, streams, order):
        box = {}  # the bytes that `shared` keeps for all the case's streams
        return _streaming(lambda t, shown=b"": _Stream(t, shown, box=box, **knobs),
                          (tokenizer, streams, order), None)

    return compute


def _same_pieces(actual, expected):
    return (isinstance(actual, list) and len(actual) == len(expected)
            and all(isinstance(a, list) and len(a) == len(e) and all(
                type(x) is type(y) and x == y for x, y in zip(a, e)) for a, e in zip(actual, expected)))


def _first_wrong_piece(case, result, expected):
    """The first call whose return differs: which, its token, what it returned and what was
    expected, and the text so far on both sides."""
    tokenizer, streams, _ = case.args
    for k, (got, want) in enumerate(zip(result, expected)):
        ids = streams[k][0]
        for n, piece in enumerate(want):
            mine = got[n] if n < len(got) else "nothing"
            if type(mine) is str and mine == piece:
                continue
            call = (f"push({ids[n]}), token {_shown_token(tokenizer, ids[n])}" if n < len(ids)
                    else "end()")
            which = f"stream {k + 1}, " if len(streams) > 1 else ""
            text = "".join(p for p in got[:n + 1] if isinstance(p, str))
            return (f"{which}call {n + 1} of {len(want)}, {call}: returned {mine!r}, "
                    f"expected {piece!r}; the text so far {text!r}, expected "
                    f"{''.join(want[:n + 1])!r}")
    return ""


def _show_piece(case, result, expected):
    if result is None or expected is None:
        return ""
    return "\n  " + _first_wrong_piece(case, result, expected)


_NOT_TEXT = Mistake("wrong_type", "Wrong type", "{problem}")  # the case is on the next line
_LATE = Mistake(
    "held_too_long", "Finished characters held back: the right text in the end, but later",
    "{call}. Return each character as soon as its last byte comes and hold back only an "
    "unfinished last one: waiting for a space (a whole word, as transformers' TextStreamer "
    "does), for an ASCII byte or for more tokens delays text that is ready.")


def _explain_pieces(case, result, expected):
    """A wrong result no catalogued mistake computes: a call that returned something other
    than a str, or the first wrong call."""
    if not isinstance(result, list):
        return None
    tokenizer, streams, _ = case.args
    for k, stream in enumerate(result):
        for n, piece in enumerate(stream if isinstance(stream, list) else ()):
            if type(piece) is not str:
                ids = streams[k][0]
                call = (f"push({ids[n]}), token {_shown_token(tokenizer, ids[n])}" if n < len(ids)
                        else "end()")
                return _NOT_TEXT, {"problem": f"{call}, returned {type(piece).__name__}: push "
                                              "and end return a str, '' when there is nothing "
                                              "to show yet"}
    if len(result) == len(expected) and all(
            isinstance(g, list) and "".join(g) == "".join(w) for g, w in zip(result, expected)):
        late = [(k, n) for k, (g, w) in enumerate(zip(result, expected)) for n in range(len(w))
                if n < len(g) and g[n] != w[n]]
        k, n = late[0] if late else (0, 0)
        if late and result[k][n] == "" and expected[k][n]:
            return _LATE, {"call": _first_wrong_piece(case, result, expected)}
    story = _placeholder(case, result, expected) + _first_wrong_piece(case, result, expected)
    return SEQUENCE_DIFFERS, {"what": "pieces", "prep": "on", "story": story}


def _placeholder(case, result, expected):
    """'a cut character written as X ...: ' when the first wrong call returned, where the
    reference holds bytes back (''), a text that is nowhere in the stream's text nor in the
    text it already shows; else ''."""
    streams = case.args[1]
    for (_, shown), got, want in zip(streams, result, expected):
        wrong = [(g, w) for g, w in zip(got, want) if g != w]
        if wrong:
            g, w = wrong[0]
            if w == "" and isinstance(g, str) and g and g not in "".join(want) \
                    and g not in shown.decode("utf-8", errors="replace"):
                return (f"part of a character written as {g!r} (a placeholder for bytes that are no "
                        "whole text), not held back until its other bytes come: an incremental "
                        "decoder holds them (codecs.getincrementaldecoder('utf-8')('replace')): ")
            return ""
    return ""


def _stream_case(tokenizer, note, *tokens, shown=b"", more=(), order=None):
    """One stream of `tokens` (more: other streams' (tokens, shown)); order: which stream
    each call goes to (default: one stream after the other)."""
    streams = [(_ids(tokenizer, *tokens), shown), *((_ids(tokenizer, *t), s) for t, s in more)]
    if order is None:
        order = [k for k, (ids, _) in enumerate(streams) for _ in range(len(ids) + 1)]
    healed = f", shown={shown!r}" if shown else ""
    tokens = "" if len(streams[0][0]) > 12 else " (tokens " + "; ".join(
        ", ".join(_shown_token(tokenizer, i) for i in ids) for ids, _ in streams) + ")"
    return Case((tokenizer, streams, order), label=f"{note}{healed}{tokens}", seed=0,
                run=_streaming)


def _many_tokens(seed, n_chars):
    """A random text of accents, CJK, emoji and ASCII, cut into _STREAM_BPE's tokens at
    random (each step any token that the bytes there start with)."""
    rng = random.Random(seed)
    text = "".join(rng.choice(["a", "b", " ", "é", "€", "日", "本", "😀", "👩\u200d💻", "\n"])
                   for _ in range(n_chars))
    data, tokens = text.encode(), []
    candidates = sorted(_STREAM_BPE.token_bytes, key=len)
    while data:
        token = rng.choice([t for t in candidates if data.startswith(t)])
        tokens.append(token)
        data = data[len(token):]
    return _stream_case(_STREAM_BPE, f"{len(tokens)} tokens of a random {n_chars}-character "
                        "text (accents, CJK, emoji, ZWJ sequences), cut at random", *tokens)


_HANDLERS = (("backslashreplace", "the byte as text, '\\xff'"),
             ("surrogateescape", "a lone surrogate, which cannot be printed or sent as UTF-8"))
_ONE_BY_ONE = (("incremental", ""),
               ("per_token", ", and each token decoded on its own cuts every character split "
                "between tokens"))
STREAM_MISTAKES = (
    Mistake(
        "token_by_token", "Tokens decoded one by one: a character cut between tokens shows as U+FFFD",
        "a byte-level token may hold part of a character ('日' is 3 bytes, often 3 tokens): "
        "decoded alone, each part is U+FFFD, or raises, and the parts never become the "
        "character again. Keep the bytes of an unfinished character until the token that "
        "completes it.",
        (_stream_with(hold="per_token"), _stream_with(hold="per_token", errors="strict"),
         _stream_with(hold="fresh")),
    ),
    Mistake(
        "bytes_dropped", "Bytes dropped (errors='ignore'): {how}",
        "tokenizer.decode(ids) shows bytes that are no character as U+FFFD: the stream must "
        "show the same text. errors='ignore' hides them, and with them the sign that the ids "
        "are not text.",
        (member(_stream_with(hold="per_token", errors="ignore"),
                how="a character cut between tokens vanishes"),
         member(_stream_with(errors="ignore"),
                how="an invalid byte or an unfinished last character vanishes, not U+FFFD")),
    ),
    Mistake(
        "strict", "A byte that is no character raises (a strict decoder)",
        "a model can draw ids whose bytes are no text (a lone 0xff, a continuation byte with "
        "nothing before it): the stream shows them as U+FFFD, as tokenizer.decode(ids) does, "
        "and goes on. Decode with errors='replace'.",
        (_stream_with(errors="strict"),),
    ),
    Mistake(
        "decoded_again", "Whole text decoded again at each step, new characters cut off by count: "
                         "a U+FFFD that becomes a character is lost",
        "while a character is cut, the bytes so far decode to a text that ends in U+FFFD; when "
        "the next token completes it, the U+FFFD becomes the character and the count of "
        "characters stays the same, so the character is never returned (and the U+FFFD was). "
        "Return only whole characters.",
        (_stream_with(hold="again"),),
    ),
    Mistake(
        "whole_token_held", "Bytes held back {how}: a character completed by this token waits "
                            "with the next one's first bytes",
        "a token can hold the end of one character and the start of the next (b'\\xa9\\xe2': "
        "the end of 'é', the start of '€'): show 'é' now and hold back only the bytes of the "
        "character that is not finished. Waiting while the text ends in U+FFFD (Hugging Face "
        "tokenizers' DecodeStream), or until the bytes decode without error, holds 'é' too{also}.",
        (member(_stream_with(hold="until_no_fffd"), how="while their text ends in U+FFFD",
                also=", and a byte that is no text (0xff) until the next token"),
         member(_stream_with(hold="until_strict"), how="until they decode without error",
                also="")),
    ),
    Mistake(
        "not_held", "Unfinished character not held back when {how}",
        "a character of 2, 3 or 4 bytes can be cut after any of its bytes: after its lead "
        "byte (11xxxxxx) alone, or after the lead and some continuation bytes (10xxxxxx). "
        "Hold back every unfinished one.",
        (member(_stream_with(hold="lead_only"), how="it has 2 or 3 of its bytes (only a lead "
                "byte alone at the end is held)"),
         member(_stream_with(hold="after_lead"), how="the token ends in its lead byte (only a "
                "lead byte with continuation bytes after it is held)")),
    ),
    Mistake(
        "end_drops", "end() {how}",
        "end() returns the rest of the text: '' when nothing is held, and U+FFFD for the bytes "
        "of a character the ids never finish, as tokenizer.decode(ids) ends with it; the "
        "pieces joined are then tokenizer.decode(ids).",
        (member(_stream_with(end="none"), how="returns None: the held bytes are never flushed"),
         member(_stream_with(end="drop"), how="returns nothing for an unfinished last character "
                "(no U+FFFD)"),
         member(_stream_with(end="strict"), how="raises on an unfinished last "
                "character (a strict decode)"),
         member(_stream_with(end="per_byte"), how="gives one U+FFFD per held byte, not one for "
                "the unfinished character"),
         member(_stream_with(eos="silent_end"), how="returns nothing once EOS has come: the bytes "
                "held before it dropped, not U+FFFD")),
    ),
    Mistake(
        "specials_shown", "Special tokens shown as text: {how}",
        "PAD and BOS stand for no text: they give ''. EOS ends the text: it gives '' and every "
        "push after it too (tokenizer.decode(ids) stops there).",
        (member(_stream_with(specials="as_text"), how="'<bos>', '<pad>', '<eos>' written out"),
         member(_stream_with(specials="eos_text"), how="'<eos>' written out"),
         member(_stream_with(written=(PAD, BOS)), how="'<bos>' and '<pad>' written out (only EOS "
                "handled)"),
         member(_stream_with(written=(BOS,)), how="'<bos>' written out (only PAD skipped)"),
         member(_stream_with(written=(PAD,)), how="'<pad>' written out (only BOS skipped)")),
    ),
    Mistake(
        "eos_ignored", "Text after the end-of-text token shown",
        "EOS (id 2) ends the text: tokenizer.decode(ids) stops at it, and so does the stream: "
        "every push after it gives ''.",
        (_stream_with(specials="no_stop"),),
        section=_TOKENIZER_SECTION,
    ),
    Mistake(
        "unk_as_name", "UNK written as '<unk>', not as the tokenizer shows it",
        "UNK (id 3) stands for a character the vocabulary does not have: show it as "
        "tokenizer.decode([3]) does ('?' for a character Vocab), not by its name.",
        (_stream_with(unk="token"),),
        section=_TOKENIZER_SECTION,
    ),
    Mistake(
        "shown_repeated", "The bytes the text already shows (shown) written again",
        "token healing backs up the prompt's last token, and the first new token starts with "
        "its bytes, which are on the screen already: skip the first len(shown) bytes of the "
        "tokens' bytes.",
        (_stream_with(skip=False),),
        section=_HEALING_SECTION,
    ),
    Mistake(
        "held_while_not_ascii", "Bytes held back while the last one is not ASCII{how}",
        "a character is finished once its last byte comes, and that byte is never ASCII "
        "(10xxxxxx): holding until an ASCII byte comes keeps a finished 'é' back for as long as "
        "non-ASCII text goes on. Hold back only the bytes of an unfinished last character "
        "(a lead byte 11xxxxxx without all its continuation bytes), or use "
        "codecs.getincrementaldecoder('utf-8')('replace').",
        (member(_stream_with(hold="until_ascii"), how=": a finished character waits for the next "
                "ASCII byte"),
         member(_stream_with(hold="until_ascii", end="drop"), how=", and end() drops them: a "
                "finished character waits for an ASCII byte, or is never shown")),
    ),
    Mistake(
        "shown_skipped_otherwise", "The bytes the text already shows (shown) skipped {how}",
        "shown can be longer than the first token (a healed prompt 'sel', then the tokens 'se' "
        "and 'lf'): skip len(shown) bytes in all, carried from token to token (what is left "
        "to skip: max(0, skip - len(data))), and none after them.",
        (member(_stream_with(skip="first"), how="within the first token only: the rest of them "
                "written again"),
         member(_stream_with(skip="every"), how="from every token, not once"),
         member(_stream_with(skip="chars"), how="as a count of characters, len(shown.decode()), not "
                "of bytes: a shown 'é' is 2 bytes"),
         member(_stream_with(skip="startswith"), how="only when the first token starts with all of "
                "them: shown bytes spread over several tokens written again")),
        section=_HEALING_SECTION,
    ),
    Mistake(
        "other_handler", "Bytes that are no character written with errors={handler!r}, not as U+FFFD",
        "tokenizer.decode(ids) shows them as U+FFFD, one character every text can hold; "
        "{handler!r} writes {shown} instead{how}. Decode with errors='replace'.",
        tuple(member(_stream_with(hold=hold, errors=h), handler=h, shown=shown, how=how)
              for h, shown in _HANDLERS for hold, how in _ONE_BY_ONE),
    ),
    Mistake(
        "unk_skipped", "UNK skipped like PAD and BOS: the character it stands for lost",
        "UNK (id 3) stands for a character the vocabulary does not have: tokenizer.decode([3]) "
        "shows it ('?' for a character Vocab), and so does the stream. Only PAD and BOS give ''.",
        (_stream_with(unk="skip"),),
        section=_TOKENIZER_SECTION,
    ),
    Mistake(
        "extra_specials_skipped", "Every special token skipped, the tokenizer's extra ones too",
        "tokenizer.decode(ids) skips PAD and BOS only: an extra special token such as '<|user|>' "
        "(id 4) is text, written as its name, and UNK shows as the tokenizer shows it. Skip "
        "PAD and BOS, end at EOS, and write every other id's bytes.",
        (_stream_with(specials="skip_all"),),
        section=_TOKENIZER_SECTION,
    ),
    Mistake(
        "eos_flushes", "The held bytes flushed at EOS: push(EOS) returns what end() should",
        "EOS gives '' and ends the text; what is held (an unfinished character) comes from end(), "
        "called once the ids are over, as U+FFFD: a push returns only the text its own id "
        "completes.",
        (_stream_with(eos="flush"),),
    ),
    Mistake(
        "unk_around_decoder", "UNK's text returned around the decoder: the bytes held before it "
                              "joined to the bytes after it",
        "UNK's text goes through the same decoder as every token's bytes: an unfinished character "
        "before it ends there, as U+FFFD (tokenizer.decode(ids) decodes the bytes in order); "
        "returning tokenizer.decode([3]) at once leaves them held, and the next token's bytes "
        "complete a character the ids never had.",
        (_stream_with(unk="around"),),
        section=_TOKENIZER_SECTION,
    ),
    Mistake(
        "unk_as_fffd", "UNK shown as U+FFFD, not as the tokenizer shows it",
        "UNK (id 3) stands for a character the vocabulary does not have: show it as "
        "tokenizer.decode([3]) does ('?' for a character Vocab); U+FFFD stands for bytes that "
        "are no text.",
        (_stream_with(unk="fffd"),),
        section=_TOKENIZER_SECTION,
    ),
    Mistake(
        "strict_swallowed", "A strict decoder's errors swallowed (reset, ''): bytes that are no "
                            "character vanish, with the bytes held before them",
        "tokenizer.decode(ids) shows each byte that is no character as U+FFFD and goes on: "
        "decode with errors='replace'. A strict decoder raises there, and resetting it drops what "
        "it held.",
        (_stream_with(errors="strict_reset"),),
    ),
    Mistake(
        "shared_buffer", "One buffer of held bytes shared by every stream",
        "each TextStream keeps its own bytes, made in __init__ (self.…): a class attribute "
        "that is a list or a bytearray, or a module-level decoder, is one for every stream, "
        "and two streams used at once (two samples, two users) mix their bytes.",
        (_stream_with(shared=True),),
    ),
    Mistake(
        "ended_by_other", "{which} taken as the end of the text, like EOS",
        "only EOS (id 2) ends the text; PAD (id 0) and BOS (id 1) stand for no text: they give '' "
        "and the stream goes on (a batch's shorter rows are padded, and a generation loop that "
        "stops at the pad id stops too early); the tokenizer's other special ids are text.",
        (member(_stream_with(stops=(PAD,)), which="PAD"),
         member(_stream_with(stops=(BOS,)), which="BOS"),
         member(_stream_with(stops=(PAD, BOS)), which="PAD and BOS"),
         member(_stream_with(stops="specials"), which="Every special id (the extra ones too)")),
        section=_TOKENIZER_SECTION,
    ),
)
_STREAM_LADDER = {
    "token_by_token": (None, "push the ids of 'é' one at a time (b'\\xc3', then b'\\xa9'): the "
                       "first push must return '' and the second 'é'."),
    "bytes_dropped": (None, "push b'\\xc3', then b'\\xa9': 'é' must come out; a lone b'\\xff' "
                      "must give '\\ufffd', as bytes([0xff]).decode('utf-8', 'replace')."),
    "strict": (None, "print bytes([0xff]).decode('utf-8', 'replace'): one U+FFFD, no error."),
    "decoded_again": (None, "print the text of the bytes so far after each push of b'\\xc3', "
                      "b'\\xa9': 'caf\\ufffd', then 'café', both 4 characters."),
    "whole_token_held": (None, "push b'\\xc3', then the token b'\\xa9\\xe2': the second push "
                         "must return 'é'."),
    "not_held": (None, "print each byte of '日'.encode() in binary, f'{{b:08b}}': 11100110 "
                 "starts a character of 3 bytes; the two after it continue it."),
    "end_drops": (None, "push b'a', b'\\xe6' then call end(): 'a', '', then '\\ufffd', as "
                  "tokenizer.decode(ids) gives 'a\\ufffd'."),
    "specials_shown": (None, "print tokenizer.decode([1, 2]): ''."),
    "eos_ignored": (None, "push 2 (EOS), then any id: the second push must return ''."),
    "ended_by_other": (None, "push 0 (PAD), then the id of 'a': the second push must return "
                       "'a'."),
    "unk_as_name": (None, "print tokenizer.decode([3]) next to tokenizer.token(3)."),
    "shown_repeated": (None, "with shown=b'se' and the token b'self', push must return 'lf'."),
    "held_while_not_ascii": (None, "push b'\\xc3', then b'\\xa9': the second push must return "
                             "'é', though its last byte is not ASCII."),
    "shown_skipped_otherwise": (None, "with shown=b'sel' and the tokens b'se', b'l', b'f', push "
                                "must return '', '', 'f'."),
    "other_handler": (None, "print bytes([0xff]).decode('utf-8', 'replace'): '\\ufffd'."),
    "unk_skipped": (None, "print tokenizer.decode([3]): the stream must return it for push(3)."),
    "extra_specials_skipped": (None, "print tokenizer.decode([4]) for the BPE with '<|user|>': "
                               "'<|user|>'."),
    "eos_flushes": (None, "push b'\\xc3', then EOS, then call end(): '', '', then '\\ufffd'."),
    "unk_around_decoder": (None, "push b'\\xc3', then UNK, then b'\\xa9': '', "
                           "'\\ufffd<unk>', then '\\ufffd'."),
    "unk_as_fffd": (None, "print tokenizer.decode([3]) for the character Vocab: '?'."),
    "strict_swallowed": (None, "print bytes([0x61, 0xff]).decode('utf-8', 'replace'): "
                         "'a\\ufffd'."),
    "shared_buffer": (None, "make two streams, push b'\\xc3' to the first and b'a' to the "
                     "second: the second must return 'a'."),
}
STREAM = Item(
    EXERCISE, "TextStream", TextStream,
    [
        _stream_case(_STREAM_BPE, "'café', its é cut between 2 tokens", b"caf", b"\xc3", b"\xa9"),
        _stream_case(_STREAM_BPE, "'日本', cut between 2 tokens, then 3", b"\xe6", b"\x97\xa5",
                     b"\xe6", b"\x9c", b"\xac"),
        _stream_case(_STREAM_BPE, "'é€', a token with the end of é and the start of €",
                     b"\xc3", b"\xa9\xe2", b"\x82\xac"),
        _stream_case(_STREAM_BPE, "'😀 日😀': emoji of 4 bytes cut between 4 tokens, a token with "
                     "the end of 日 and the start of 😀", b"\xf0", b"\x9f", b"\x98", b"\x80", b" ",
                     b"\xe6", b"\x97", b"\xa5\xf0\x9f", b"\x98\x80"),
        _stream_case(_STREAM_BPE, "'👩\u200d💻', a ZWJ sequence of 3 characters cut between 4 tokens",
                     b"\xf0\x9f", b"\x91", b"\xa9\xe2\x80", b"\x8d\xf0\x9f\x92", b"\xbb"),
        _stream_case(_STREAM_BPE, "bytes that are no character: 0xff, a lone continuation byte, "
                     "a lead byte before 'A'", b"a", b"\xff", b"\x80", b"b", b"\xc3", b"A"),
        _stream_case(_STREAM_BPE, "ids that end inside '日' (after 2 of its 3 bytes)", b"a",
                     b"\xe6", b"\x97"),
        _stream_case(_STREAM_BPE, "special tokens: BOS, PAD, an extra special (4), EOS inside 'é', "
                     "ids after EOS", BOS, b"caf", PAD, 4, b"\xc3", EOS, b"\xa9", b"a"),
        _stream_case(_CHARACTERS, "a character Vocab ('a', 'b', 'é', '日', ' '), with UNK", BOS,
                     b"a", UNK, b" ", "日".encode(), EOS, b"b"),
        _stream_case(_STREAM_BPE, "a healed prompt: the text shows 'se' already", b"self", b"()",
                     b"\xc3", b"\xa9", shown=b"se"),
        _stream_case(_STREAM_BPE, "two streams used in turn, the first ends at EOS inside '日'",
                     b"a", b"\xe6", EOS, b"b", more=[((b"caf", b"\xc3", b"\xa9"), b"")]),
        _stream_case(_STREAM_BPE, "two streams at once, their pushes interleaved", b"\xc3",
                     b"\xa9", b"a", more=[((b"\xe6", b"\x97", b"\xa5"), b"")],
                     order=[0, 1, 0, 1, 1, 0, 0, 1]),
        _many_tokens(0, 300),
        _stream_case(_STREAM_BPE, "a healed prompt whose shown bytes span 2 tokens: the text shows "
                     "'sel' already", b"se", b"l", b"f", b"()", shown=b"sel"),
        _stream_case(_STREAM_BPE, "a healed prompt that shows 'café' already (5 bytes, 4 "
                     "characters)", b"caf", b"\xc3", b"\xa9", b"self", shown="café".encode()),
        _stream_case(_STREAM_BPE, "UNK after the lead byte of 'é'", b"\xc3", UNK, b"\xa9", b"a"),
    ],
    laddered(STREAM_MISTAKES, _STREAM_LADDER), same=_same_pieces, what="pieces",
    show=_show_piece, explain=_explain_pieces,
    formula="push(i): append the token's bytes to those held, return the whole characters and "
            "hold back an unfinished last one; end(): the rest, U+FFFD for an unfinished "
            "character; PAD and BOS give '', EOS ends the text.",
    twins=(_stream_with(),),
    section=_STREAM_SECTION,
)

ITEMS = (ADAMW, COSINE, CLIP, GROUPS, STREAM)
