"""Exercise 09: the language model's shifted loss, BERT's masked-LM corruption, the mean
pooling of a classifier and the decoder-only model's forward pass; their cases and their
catalogue of mistakes.

DecoderLM's check copies the reference's weights, every parameter randomized (the
LayerNorms' gains and biases too, so that a norm used in the wrong place shows), into the
learner's model, as the chapter 05 and 06 checks do; it runs in eval mode, then in training
mode with dropout, and compares the logits at the real tokens (padding's never reach a loss).

mask_tokens is random, and a learner's draws need not be the reference's: its check compares
what the rule does, not the values. Each result is summed up as a few facts, in order
(where the targets are, which tokens may be chosen, how many per text, what becomes of the
chosen ones, where random replacements come from), measured on a batch of about 10,000
tokens; a fact after the first wrong one is not looked at. A learner's result is right when
its facts are the reference's, and is a catalogued mistake when they are that mistake's
(the mistake's own computation, with its own draws, summed up the same way). The shares of
[MASK] / random / kept are told apart by at least 5 standard deviations.
"""

import math
from dataclasses import astuple, dataclass
from itertools import product

import torch
import torch.nn.functional as F
from torch import nn

from ..losses import lm_loss
from ..variants import DecoderLM, DecoderLMConfig
from ..variants import mask_tokens as reference_masking
from ..variants import mean_pool as reference_pool
from ..vocab import PAD
from .ch07_training import _same_gradient, _same_loss
from .comparison import clone, close, describe, same
from .mistakes import Mistake, laddered, member
from .pipeline import NO_GRADIENT_MORE, Case, Item, fail_on_error
from .sandbox import call

EXERCISE = "ex09_variants"


# ------------------------------------------------------------------------------------ lm_loss


def _lm(logits, tokens, pad_id, pair=(slice(None, -1), slice(1, None)), axis=1, flat=False,
        count_pad=False, ignore=None, reduce="mean", log="log_softmax", eps=0.0, last=None,
        count=None, padding_of="targets"):
    """The next-token loss with the variations mistakes make: `pair` the slices of logits
    and of tokens along `axis` (or of the flattened batch, `flat`); last: every logit kept,
    the last one given the target last(tokens) (batch, 1); count: the summed loss divided by
    count(tokens) instead of the number of real targets; padding_of: "inputs", padding told
    by the tokens the logits have read (sliced like the logits), not by the targets."""
    logits = logits.double()
    if last is not None:
        x, y = logits, torch.cat((tokens[:, 1:], last(tokens)), 1)
        pair, logits, tokens = (slice(None), slice(None)), x, y
    if flat:
        logits, tokens = logits.flatten(0, 1), tokens.flatten()
        axis = 0
    index = [slice(None)] * tokens.dim()
    index[axis] = pair[0]
    x = logits[tuple(index)]
    read = tokens[tuple(index)]
    index[axis] = pair[1]
    y = tokens[tuple(index)]
    log_p = {"log_softmax": lambda: F.log_softmax(x, -1), "logits": lambda: x,
             "softmax": lambda: x.softmax(-1), "axis": lambda: F.log_softmax(x, 1)}[log]()
    nll = -log_p.gather(-1, y.unsqueeze(-1)).squeeze(-1)  # (..., positions)
    nll = (1 - eps) * nll - eps * log_p.mean(-1)
    keep = ((read if padding_of == "inputs" else y) != (pad_id if ignore is None else ignore)).double()
    if count_pad:
        keep = torch.ones_like(keep)
    per = nll * keep
    if count is not None:
        return per.sum() / count(tokens)
    if reduce == "sum":
        return per.sum()
    if reduce == "sequence":  # the mean of each sequence's mean
        return (per.sum(-1) / keep.sum(-1)).mean()
    if reduce == "all":  # padding left out of the sum, but counted in the divisor
        return per.sum() / keep.numel()
    return per.sum() / keep.sum()


def _lm_with(**bug):
    return lambda logits, tokens, pad_id=PAD: _lm(logits, tokens, pad_id, **bug)


def _pair(a, b):
    return slice(*a), slice(*b)


def _lm_log_of_softmax(logits, tokens, pad_id=PAD, exp=False):
    """The next-token loss on log(softmax(logits)), in the logits' dtype (`exp`: on
    z - log(sum(exp(z))), no maximum subtracted)."""
    z = logits[:, :-1]
    log_p = z - z.exp().sum(-1, keepdim=True).log() if exp else z.softmax(-1).log()  # (batch, seq - 1, V)
    y = tokens[:, 1:]
    nll = -log_p.gather(-1, y[..., None])[..., 0]
    return nll[y != pad_id].mean()


# A made-up target for the last logit, which has no next token.
_LAST_TARGETS = {"the last token again": lambda t: t[:, -1:],
                 "the first token (torch.roll)": lambda t: t[:, :1],
                 "token 0": lambda t: torch.zeros_like(t[:, :1])}
# What the summed loss is divided by, where the number of real targets is meant.
_COUNTS = {"the batch size": lambda t, pad_id: t.size(0),
           "the sequence length": lambda t, pad_id: t.size(1),
           "the sequence length - 1": lambda t, pad_id: t.size(1) - 1,
           "batch * seq, every position": lambda t, pad_id: t.numel(),
           "the real tokens, the first of each text included": lambda t, pad_id: (t != pad_id).sum()}


def _divided_by(count):
    return lambda logits, tokens, pad_id=PAD: _lm(logits, tokens, pad_id,
                                                  count=lambda y: count(tokens, pad_id))


LM_MISTAKES = (
    Mistake(
        "not_shifted", "Predicting the current token instead of the next",
        "logits[:, t] has already read tokens[:, t]: copying it is no prediction. Pair "
        "logits[:, t] with tokens[:, t + 1] (the last logit has no next token, the first "
        "token is never predicted).",
        tuple(_lm_with(pair=_pair(a, b)) for a, b in (((None,), (None,)), ((None, -1), (None, -1)),
                                                       ((1, None), (1, None)))),
    ),
    Mistake(
        "shifted_backwards", "Shifted the wrong way",
        "you pair logits[:, t + 1] with tokens[:, t], the token BEFORE: the model would learn to "
        "predict the past, which it has already read. Drop the last logit and the first token.",
        (_lm_with(pair=_pair((1, None), (None, -1))),),
    ),
    Mistake(
        "shifted_twice", "Shifted by two",
        "the target of logits[:, t] is tokens[:, t + 1], one step ahead: shift once (either the "
        "batch is already shifted, or the logits, not both).",
        (_lm_with(pair=_pair((None, -2), (2, None))),),
    ),
    Mistake(
        "shifted_across_rows", "Shifted across the rows of the batch",
        "flattening before the shift makes the last logit of each text predict the first token "
        "of the next text. Shift within each row (logits[:, :-1], tokens[:, 1:]), then flatten.",
        (_lm_with(flat=True),),
    ),
    Mistake(
        "shifted_along_batch", "Shifted along the batch axis",
        "time is axis 1 of (batch, seq): logits[:, :-1] and tokens[:, 1:]; logits[:-1] and "
        "tokens[1:] pair each text with the NEXT text.",
        (_lm_with(axis=0),),
    ),
    Mistake(
        "padding_of_inputs", "Padding told by the inputs, not by the targets",
        "the loss leaves out the positions whose TARGET is padding, tokens[:, 1:] != pad_id; "
        "you test the tokens the logits have read, tokens[:, :-1], one position earlier: a "
        "padded text's first padding (the target after its last token) then counts.",
        (_lm_with(padding_of="inputs"),),
    ),
    Mistake(
        "pad_id_ignored", "pad_id ignored",
        "use the pad_id argument (ignore_index=pad_id) to find the padding, not the number 0.",
        (_lm_with(ignore=0),),
    ),
    Mistake(
        "counts_padding", "Loss counts padding",
        "a target that is padding is no text to predict: leave it out of the loss "
        "(ignore_index=pad_id), and average over the real targets only.",
        (_lm_with(count_pad=True), _lm_with(reduce="all")),
    ),
    Mistake(
        "per_sequence", "Averaged per sequence, then over the batch",
        "average over every real target of the batch: a mean of the texts' means weighs the "
        "characters of short texts more.",
        (_lm_with(reduce="sequence"),),
    ),
    Mistake(
        "summed", "Loss summed instead of averaged",
        "divide by the number of real (non-padding) targets, so that the loss is in nats per "
        "token and does not grow with the batch.",
        (_lm_with(reduce="sum"),),
    ),
    Mistake(
        "wrong_count", "Summed loss divided by {count}, not by the number of real targets",
        "the mean is over the predictions whose target is not padding: divide the summed "
        "loss by how many targets are not pad_id (F.cross_entropy's default reduction with "
        "ignore_index=pad_id counts them for you).",
        tuple(member(_divided_by(count), count=name) for name, count in _COUNTS.items()),
    ),
    Mistake(
        "last_target_made_up", "The last position given a made-up target ({target})",
        "the last logit has read the whole text: it has no next token to predict. Drop it "
        "(logits[:, :-1]) instead of giving it a target of your own: pair logits[:, :-1] with "
        "tokens[:, 1:].",
        tuple(member(_lm_with(last=last), target=name) for name, last in _LAST_TARGETS.items()),
    ),
    Mistake(
        "label_smoothing", "Label smoothing in the language model's loss",
        "this loss is -log p(next token), the model's held-out measure (nats per token): no "
        "label_smoothing.",
        tuple(_lm_with(eps=eps) for eps in (0.1, 0.05, 0.2)),
    ),
    Mistake(
        "no_log_softmax", "Logits used as log-probabilities",
        "take log_softmax(logits, dim=-1) first (F.cross_entropy does): the logits are "
        "unnormalized scores.",
        (_lm_with(log="logits"),),
    ),
    Mistake(
        "probabilities", "Probabilities used instead of log-probabilities",
        "the loss is -log p(target): log_softmax, not softmax.",
        (_lm_with(log="softmax"),),
    ),
    Mistake(
        "view_of_slice", ".view() of a slice",
        "logits[:, :-1] skips the last position of every row, so its memory is not one block and "
        ".view(-1, V) cannot reshape it: use .reshape(-1, V) (or .flatten(0, 1)).",
        (lambda logits, tokens, pad_id=PAD: logits[:, :-1].view(-1, logits.size(-1)),
         lambda logits, tokens, pad_id=PAD: F.cross_entropy(
             logits[:, :-1].reshape(-1, logits.size(-1)), tokens[:, 1:].view(-1))),
    ),
    Mistake(
        "softmax_axis", "log_softmax over the wrong axis",
        "normalize over the vocabulary, the last axis: F.log_softmax(logits, dim=-1).",
        (_lm_with(log="axis"),),
    ),
    Mistake(
        "log_of_softmax", "Log-probabilities made through exp, not by log_softmax",
        "softmax of large logits underflows to 0 for the unlikely tokens (log(0) = -inf), and "
        "exp of large logits without the maximum subtracted overflows to inf (past 88 in "
        "float32, 11 in float16): take F.log_softmax(logits, dim=-1) (or F.cross_entropy), "
        "which computes logits - logsumexp(logits) stably, never forming the probabilities.",
        (_lm_log_of_softmax, lambda logits, tokens, pad_id=PAD: _lm_log_of_softmax(
            logits, tokens, pad_id, exp=True)),
    ),
)

# The second hint (check(..., hint=2)) and the section that teaches the step, by mistake.
_SHIFT = ("09_variants", "5. Shifted targets and the loss")
_LM_LADDER = {
    "padding_of_inputs": (None, "for a padded text 'ab' + PAD, list the (logit, target) pairs "
                          "and which of them count: the pair that reads b and predicts PAD must "
                          "not."),
    "not_shifted": (_SHIFT, "write down, for t = 0, 1, 2, which token logits[:, t] has read "
                    "and which one it should predict."),
    "shifted_backwards": (_SHIFT, "for a text 'abc': which logit has read only 'a', and which "
                          "token should it predict?"),
    "shifted_twice": (_SHIFT, "print logits.shape and tokens.shape at each step of your code: "
                      "the pairs you compare should be seq - 1 long, not seq - 2."),
    "shifted_across_rows": (_SHIFT, "print the pairs (logit position, target token) around the "
                            "end of the first text: none should reach into the second."),
    "shifted_along_batch": (_SHIFT, "print the shapes of the two tensors you pair: their "
                            "first axis should still hold every text of the batch."),
    "counts_padding": (("09_variants", "Padding must not count"),
                       "count the targets your mean divides by, and the real (non-pad_id) "
                       "targets of the case: they should be the same number."),
    "summed": (_SHIFT, "double the batch (the same texts twice): your loss doubles; the "
               "expected one stays the same."),
    "wrong_count": (_SHIFT, "print the number you divide by, next to (tokens[:, 1:] != "
                    "pad_id).sum()."),
    "last_target_made_up": (_SHIFT, "print the shapes of the logits and the targets you pair: "
                            "seq - 1 positions each, not seq."),
    "label_smoothing": (_SHIFT, "print your loss on logits that put all mass on each target: "
                        "it should be 0."),
    "log_of_softmax": (_SHIFT, "print torch.softmax(torch.tensor([0.0, -200.0]), -1).log() next "
                       "to torch.log_softmax(torch.tensor([0.0, -200.0]), -1)."),
    "pad_id_ignored": (_SHIFT, "call your loss with pad_id=7 on texts padded with 7: the "
                       "padding must not count."),
    "per_sequence": (_SHIFT, "give one text 1 real target and another 9: does each TARGET "
                     "count the same in your mean?"),
    "no_log_softmax": (_SHIFT, "add 5 to every logit: the loss must not change."),
    "probabilities": (_SHIFT, "your loss must grow without bound as p(target) goes to 0: "
                      "does it?"),
    "view_of_slice": (_SHIFT, "print logits[:, :-1].is_contiguous()."),
    "softmax_axis": (_SHIFT, "print log_softmax(...).exp().sum(-1): all ones."),
}
LM_MISTAKES = laddered(LM_MISTAKES, _LM_LADDER)


def _lm_case(seed, batch, seq, vocab, lengths=None, pad_id=PAD, dtype=torch.float32, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(batch, seq, vocab, generator=g) * scale).to(dtype)
    tokens = torch.randint(0, vocab - 1, (batch, seq), generator=g)
    tokens[tokens >= pad_id] += 1  # every id but pad_id (0 too, when pad_id is not 0)
    if lengths is not None:  # rows padded after their length
        tokens[torch.arange(seq) >= torch.tensor(lengths)[:, None]] = pad_id
    kwargs = {} if pad_id == PAD else {"pad_id": pad_id}
    large = f" (logits as large as {float(logits.abs().max()):.0f})" if scale > 2 else ""
    return Case((logits, tokens), kwargs, names=("logits", "tokens"), seed=seed,
                label=describe(logits=logits, tokens=tokens) + (f", pad_id={pad_id}" if kwargs else "")
                + large)


def _logits_gradient(fn, args, case):
    logits, *rest = args
    logits.requires_grad_()
    fn(logits, *rest, **case.kwargs).backward()
    return logits.grad


def _detached(how):
    def compute(logits, tokens, pad_id=PAD):
        return _logits_gradient(lambda *a: how(lm_loss(*a)), (logits, tokens, pad_id), Case())

    return compute


_LM_GRADIENT = _lm_case(3, 3, 6, 9, lengths=[6, 3, 5], dtype=torch.float64)
LM_CASES = [
    _lm_case(0, 3, 6, 7),  # no padding
    _lm_case(1, 3, 7, 11, lengths=[7, 4, 2]),
    _lm_case(2, 2, 6, 9, lengths=[6, 3], pad_id=5, dtype=torch.float64),  # id 0 is a real token
    _lm_case(4, 1, 8, 6, lengths=[5]),  # a single text
    _lm_case(5, 2, 6, 9, scale=100.0),  # softmax underflows in float32; no padding (0 * inf)
    Case(_LM_GRADIENT.args, names=_LM_GRADIENT.names, seed=3, run=_logits_gradient,
         label=_LM_GRADIENT.label + ", backward from the loss", what="gradient of the logits",
         same=_same_gradient,
         mistakes=(Mistake("no_gradient", "No gradient flows back to the logits",
                           "training needs it: stay in torch (no .item(), .detach(), .numpy() or "
                           "tensors rebuilt from values).",
                           (_detached(lambda t: t.detach()), _detached(lambda t: t.item())),
                           more=NO_GRADIENT_MORE),)),
]
LM_LOSS = Item(
    EXERCISE, "lm_loss", lm_loss, LM_CASES, LM_MISTAKES, same=_same_loss, what="loss",
    formula="Pair logits[:, :-1] with tokens[:, 1:] and average -log_softmax(logits)[target] "
            "over the targets that are not pad_id.",
    twins=(_lm_with(),),
    section=("09_variants", "5. Shifted targets and the loss"),
)


# -------------------------------------------------------------------------------- mask_tokens


def _masking(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None, pad_id=PAD, *,
             eligible="ordinary", count="round", choose="rank", split="80/10/10",
             random_from="ordinary", targets="chosen", fill=None):
    """mask_tokens with the variations mistakes make (its draws from the global generator)."""
    special = sorted({*special_ids, pad_id, mask_id})
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[special] = False
    may = {"ordinary": ordinary[tokens], "not_pad": tokens != pad_id,
           "not_special": ~torch.isin(tokens, torch.tensor([*special_ids, mask_id])),
           "any": ordinary[tokens]}[eligible]  # any: counted right, chosen anywhere
    n = may.sum(1)  # (batch,)
    may = torch.ones_like(may) if eligible == "any" else may
    k = {"round": lambda: (rate * n).round().long().clamp(min=1),
         "no_min": lambda: (rate * n).round().long(),
         "floor": lambda: (rate * n).long().clamp(min=1),
         "half_up": lambda: (rate * n + 0.5).floor().long().clamp(min=1),
         "length": lambda: (rate * torch.full_like(n, tokens.size(1))).round().long().clamp(min=1),
         "not_pad": lambda: (rate * (tokens != pad_id).sum(1)).round().long().clamp(min=1),
         "fixed": lambda: (0.15 * n).round().long().clamp(min=1),
         "plus_one": lambda: (rate * n).round().long().clamp(min=1) + 1}[count]().minimum(n)
    scores = torch.rand(tokens.shape).masked_fill(~may, 2.0)
    if choose == "rank":
        chosen = scores.argsort(1).argsort(1) < k[:, None]
    elif choose == "batch":  # round(rate * N) of the batch's N tokens, wherever they are
        total = int((rate * n.sum()).round())
        chosen = (scores.flatten().argsort().argsort() < total).view(tokens.shape)
    elif choose == "replacement":  # k positions drawn with replacement: a duplicate is lost
        chosen = torch.zeros_like(may)
        for b in range(tokens.size(0)):
            where = may[b].nonzero()[:, 0]
            if len(where):
                chosen[b, where[torch.randint(len(where), (int(k[b]),))]] = True
    else:  # "independent": each token with probability rate
        chosen = may & (torch.rand(tokens.shape) < rate)
    draw = torch.rand(tokens.shape)
    ids = ordinary.nonzero()[:, 0] if random_from == "ordinary" else torch.arange(vocab_size)
    random_ids = ids[torch.randint(len(ids), tokens.shape)]
    masked, replaced = {
        "80/10/10": lambda: (draw < 0.8, (draw >= 0.8) & (draw < 0.9)),
        "all": lambda: (draw < 2, draw > 2),
        "90/0/10": lambda: (draw < 0.9, draw > 2),
        "80/20/0": lambda: (draw < 0.8, draw >= 0.8),
        "70/10/20": lambda: ((draw >= 0.1) & (draw < 0.8), draw < 0.1),  # overwritten
        "80/2/18": lambda: (draw < 0.8, (draw >= 0.8) & (torch.rand(tokens.shape) < 0.1)),
        "10/10/80": lambda: (draw < 0.1, (draw >= 0.1) & (draw < 0.2)),
    }[split]()
    inputs = torch.where(chosen & masked, mask_id, tokens)
    inputs = torch.where(chosen & replaced, random_ids, inputs)
    target_at = {"chosen": chosen, "all": torch.ones_like(chosen), "masked": chosen & masked,
                 "inputs": chosen}[targets]
    source = inputs if targets == "inputs" else tokens
    return inputs, torch.where(target_at, source, pad_id if fill is None else fill)


def _masking_with(**bug):
    return lambda *args, **kwargs: _masking(*args, **kwargs, **bug)


@dataclass(frozen=True)
class Masking:
    """What a masking does, fact by fact; a fact after the first wrong one is "-"."""

    targets: str
    chosen_from: str
    counts: str
    split: str
    random_ids: str


_RIGHT = Masking("the original token at the chosen positions, pad_id elsewhere",
                 "the ordinary tokens only", "round(rate * n), at least 1, in each text",
                 "80% [MASK], 10% random, 10% kept", "ordinary ids")
SPLIT_SAMPLE = 1000  # the shares are judged on cases with at least this many chosen tokens


def _facts(tokens, mask_id, special_ids, vocab_size, rate, pad_id, result):
    """The facts of `result` (inputs, targets) for `tokens`, one after the other; None when
    `result` is not two long tensors of tokens' shape."""
    if not (isinstance(result, (tuple, list)) and len(result) == 2 and all(
            isinstance(t, torch.Tensor) and t.shape == tokens.shape and t.dtype == torch.long
            for t in result)):
        return None
    inputs, targets = result
    special = sorted({*special_ids, pad_id, mask_id})
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[special] = False
    pad = tokens == pad_id
    may = ordinary[tokens]
    changed = inputs != tokens
    targeted = (targets == tokens) & ~pad  # the chosen positions, if the targets are right
    facts = []

    def found(value):
        facts.append(value)
        return value == astuple(_RIGHT)[len(facts) - 1]

    rest = targets[~targeted & ~pad]
    if bool(targeted[~pad].all()):
        where = "the original token at every position"
    elif bool(changed.any()) and bool((targets[changed] == inputs[changed]).all()):
        where = "the model's inputs (after the corruption)"
    elif bool((rest == pad_id).all()):
        untargeted = changed & ~targeted & ~pad  # changed, and nothing to predict there
        if not untargeted.any():
            where = _RIGHT.targets
        elif not (untargeted & (inputs == mask_id)).any():
            where = "the original token where [MASK] was put only"
        else:
            where = "none at some changed positions"
    elif bool((rest == -100).all()):
        where = "the original token at the chosen positions, -100 elsewhere"
    else:
        where = "other"
    if found(where):
        touched = (targeted | changed) & ~may
        kinds = [name for name, at in (("padding", pad), ("special tokens", ~pad)) if (touched & at).any()]
        if found(f"{' and '.join(kinds)} too" if kinds else _RIGHT.chosen_from):
            found(_counts(targeted, may, rate, tokens, pad_id))
    if facts[-1] == _RIGHT.counts:
        chosen = targeted
        total = int(chosen.sum())
        if total >= SPLIT_SAMPLE and found(_split(inputs[chosen], tokens[chosen], mask_id, total)):
            random = chosen & changed & (inputs != mask_id)
            found("ordinary ids" if bool(ordinary[inputs[random]].all()) else "some special ids")
    return Masking(*facts, *["-"] * (5 - len(facts)))


def _counts(chosen, may, rate, tokens, pad_id):
    """Which rule the number of chosen tokens of each text follows."""
    k, n = chosen.sum(1), may.sum(1)
    rules = {
        _RIGHT.counts: (rate * n).round().long().clamp(min=1).minimum(n),
        "round(rate * n), none in a short text": (rate * n).round().long(),
        "int(rate * n): rounded down": (rate * n).long().clamp(min=1).minimum(n),
        "(rate * n + 0.5).floor(): rounded half up":
            (rate * n + 0.5).floor().long().clamp(min=1).minimum(n),
        "rate * the row's length (padding and special tokens counted)":
            (rate * torch.full_like(n, tokens.size(1))).round().long().clamp(min=1).minimum(n),
        "rate * the text's tokens (special tokens counted)":
            (rate * (tokens != pad_id).sum(1)).round().long().clamp(min=1).minimum(n),
        "0.15 * n, whatever rate is": (0.15 * n).round().long().clamp(min=1).minimum(n),
        "round(rate * n) + 1: one too many": (rate * n).round().long().clamp(min=1).add(1).minimum(n),
    }
    for rule, want in rules.items():
        if torch.equal(k, want):
            return rule
    right = rules[_RIGHT.counts]
    if bool((k <= right).all()) and bool((k[n > 0] >= 1).all()):
        return "at most round(rate * n) in each text, fewer in some: a position drawn twice"
    mean, sd = rate * n.sum().item(), math.sqrt(n.sum().item() * rate * (1 - rate))
    if int(k.sum()) == round(rate * n.sum().item()):
        return "round(rate * N) of the whole batch's N tokens"
    if abs(k.sum().item() - mean) <= 5 * sd:
        return "a random number in each text, rate * n on average"
    return "other"


def _split(inputs, tokens, mask_id, total):
    """The shares of [MASK], random and kept among the chosen tokens, as a rule."""
    n_masked, n_kept = int((inputs == mask_id).sum()), int((inputs == tokens).sum())
    masked, kept = n_masked / total, n_kept / total
    random = 1 - masked - kept
    if n_masked == total:
        return "every chosen token [MASK]"
    if n_masked + n_kept == total and abs(masked - 0.9) < 0.04:
        return "90% [MASK], 10% kept, none random"
    if abs(masked - 0.8) < 0.04 and abs(random - 0.1) < 0.04 and abs(kept - 0.1) < 0.04:
        return _RIGHT.split
    return "other shares"


def _masking_case(seed, lengths, seq, vocab_size=40, special_ids=(1, 2, 3, 4), mask_id=5,
                  pad_id=PAD, rate=0.15, unk=None):
    """[CLS] (special_ids[-1]) and then ordinary tokens, a share `unk` of them special_ids[0].
    The tokens come from another random stream than the one seeded for the draws (`seed`)."""
    g = torch.Generator().manual_seed(1000 + seed)
    special = sorted({*special_ids, pad_id, mask_id})
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in special])
    tokens = ordinary[torch.randint(len(ordinary), (len(lengths), seq), generator=g)]
    if unk:
        tokens[torch.rand(tokens.shape, generator=g) < unk] = special_ids[0]
    tokens[:, 0] = special_ids[-1]
    tokens[torch.arange(seq) >= torch.tensor(lengths)[:, None]] = pad_id
    args = (tokens, mask_id, tuple(special_ids), vocab_size, rate)
    kwargs = {} if pad_id == PAD else {"pad_id": pad_id}

    def same(actual, expected):
        facts = _facts(*args, pad_id, actual)
        return facts is not None and facts == _facts(*args, pad_id, expected)

    config = f"mask_id={mask_id}, special_ids={tuple(special_ids)}, vocab_size={vocab_size}, rate={rate}"
    config += f", pad_id={pad_id}" if kwargs else ""
    return Case(args, kwargs, names=("tokens",), seed=seed, same=same,
                label=f"tokens {tuple(tokens.shape)} ({len(lengths)} texts of {min(lengths)} to "
                      f"{max(lengths)} tokens, [CLS] first, padded), {config}")


def _run_masking(obj, args, case, generator_seed=None):
    """obj(*args, generator=g): g seeded apart from torch's global generator (which the sandbox
    seeds with case.seed), so that draws taken from the wrong one never coincide."""
    seed = case.seed if generator_seed is None else generator_seed
    g = torch.Generator().manual_seed(10_000 + seed)
    return obj(*args, generator=g, **case.kwargs)


def _show_masking(case, result, expected):
    tokens, mask_id, special_ids, vocab_size, rate = case.args
    pad_id = case.kwargs.get("pad_id", PAD)
    got, want = (_facts(tokens, mask_id, special_ids, vocab_size, rate, pad_id, r)
                 for r in (result, expected))
    if got is None:
        return ""
    for field, g, w in zip(Masking.__dataclass_fields__, astuple(got), astuple(want)):
        if g != w:
            return f"\n  {field.replace('_', ' ')}: yours {g}; expected {w}"
    return ""


def _lengths(seed, batch, low, high):
    """Text lengths (with [CLS]) whose n = length - 1 never makes 0.15 n or 0.3 n end in .5."""
    g = torch.Generator().manual_seed(seed)
    out = []
    while len(out) < batch:
        length = int(torch.randint(low, high + 1, (1,), generator=g))
        if all(abs((r * (length - 1)) % 1 - 0.5) > 0.02 for r in (0.15, 0.3)):
            out.append(length)
    return out


GENERATOR = Mistake(
    "generator_ignored", "Draws not all taken from `generator`",
    "pass generator=generator to every torch.rand / torch.randint / torch.randperm / "
    "torch.bernoulli, so that a seeded generator repeats the masking (and the global random "
    "state is left alone).\n  {what}")


def _check_generator(item, target):
    """After every case: the same generator repeats the result whatever the global seed, and
    another generator changes it."""
    case = item.cases[0]
    results = {}
    for generator_seed, global_seed in ((0, 1), (0, 2), (1, 1)):
        outcome = call(_run_masking, target, clone(case.args), case, generator_seed, seed=global_seed)
        fail_on_error(outcome, "mask_tokens", case.label)
        results[generator_seed, global_seed] = outcome.value
    if not all(torch.equal(a, b) for a, b in zip(results[0, 1], results[0, 2])):
        GENERATOR.fail(what="the same generator gave another result when torch's global random "
                            "state changed.")
    if all(torch.equal(a, b) for a, b in zip(results[0, 1], results[1, 1])):
        GENERATOR.fail(what="another generator seed gave the same result: the generator is not "
                            "used.")


MASKING_MISTAKES = (
    Mistake(
        "targets_everywhere", "Targets at every position: loss on unmasked tokens",
        "targets are pad_id (ignored by the loss) wherever no token was chosen: predicting a "
        "token the model can see teaches it to copy, and only the chosen positions are "
        "predicted.",
        (_masking_with(targets="all"),),
    ),
    Mistake(
        "targets_corrupted", "Targets are the corrupted inputs",
        "the model must predict the ORIGINAL token at each chosen position (the one before "
        "[MASK] or the random token replaced it), not what it reads there.",
        (_masking_with(targets="inputs"),),
    ),
    Mistake(
        "targets_only_masked", "Targets only where [MASK] was put",
        "the randomly replaced and the kept tokens are chosen too: each chosen position gets "
        "its original token as target, whatever became of it, so that the model cannot trust "
        "any token it reads.",
        (_masking_with(targets="masked"),),
    ),
    Mistake(
        "fill_minus_100", "Unchosen targets set to -100 instead of pad_id",
        "-100 is F.cross_entropy's default ignore_index (and Hugging Face's convention); this "
        "course's losses ignore pad_id: torch.where(chosen, tokens, pad_id).",
        (_masking_with(fill=-100),),
    ),
    Mistake(
        "padding_chosen", "Padding chosen for masking",
        "only ordinary tokens may be chosen: leave out pad_id (and mask_id, and special_ids), "
        "and count only the ordinary tokens in n.",
        (_masking_with(eligible="not_special"),),
    ),
    Mistake(
        "specials_chosen", "[CLS] or another special token chosen for masking",
        "[CLS], [MASK] and the other special_ids are never chosen, nor counted in n: only "
        "ordinary tokens, the text itself.",
        (_masking_with(eligible="not_pad"),),
    ),
    Mistake(
        "any_position_chosen", "Positions chosen among all tokens: padding and special tokens "
        "too",
        "the k positions are drawn from the whole row, so padding, [CLS] and the other "
        "special tokens can be chosen (and changed, or given a target): draw them among the "
        "ordinary positions only, the others never ranking among the first k.",
        (_masking_with(eligible="any"),),
    ),
    Mistake(
        "rate_over_all", "Rate taken over all tokens instead of the ordinary ones",
        "n is the number of the text's ORDINARY tokens (not its length with padding, nor with "
        "[CLS] and other special tokens): choose round(rate * n).",
        (_masking_with(count="length"), _masking_with(count="not_pad")),
    ),
    Mistake(
        "no_minimum", "No token chosen in a short text",
        "round(0.15 * n) is 0 for n <= 3: choose at least one token in every text that has one "
        "(a text with nothing to predict is wasted).",
        (_masking_with(count="no_min"),),
    ),
    Mistake(
        "rounded_down", "Number of chosen tokens rounded down",
        "int() and .long() round down: round(rate * n) (torch.round, or Python's round), at "
        "least 1.",
        (_masking_with(count="floor"),),
    ),
    Mistake(
        "rounded_half_up", "Number of chosen tokens rounded half up",
        "rounded half up: (rate * n + 0.5).floor() (the int(x + 0.5) habit) makes 2.5 into 3, "
        "where torch.round and Python's round() round half to even (2.5 -> 2, 3.5 -> 4): "
        "choose round(rate * n), at least 1.",
        (_masking_with(count="half_up"),),
    ),
    Mistake(
        "one_too_many", "One token too many chosen in each text",
        "ranks count from 0: the positions whose rank is < k are k positions; rank <= k (or a "
        "range up to k inclusive) chooses k + 1. Choose exactly round(rate * n), at least 1.",
        (_masking_with(count="plus_one"),),
    ),
    Mistake(
        "rate_ignored", "rate ignored",
        "choose round(rate * n) with the rate argument, not a fixed 0.15.",
        (_masking_with(count="fixed"),),
    ),
    Mistake(
        "per_batch", "rate applied to the whole batch instead of each text",
        "choose round(rate * n) tokens in EACH text (n its ordinary tokens), so that every text "
        "gets its share, short texts too.",
        (_masking_with(choose="batch"),),
    ),
    Mistake(
        "with_replacement", "Positions drawn with replacement: some texts get fewer than round(rate * n)",
        "torch.randint (or torch.multinomial(..., replacement=True)) can draw one position "
        "twice, and a position drawn twice is one chosen token: draw the k positions without "
        "replacement (torch.randperm, multinomial(..., replacement=False), or the ranks of "
        "random scores, scores.argsort(1).argsort(1) < k[:, None]).",
        (_masking_with(choose="replacement"),),
    ),
    Mistake(
        "independent", "Each token chosen independently: a random number per text",
        "BERT chooses exactly round(rate * n) tokens of each text (at least 1), at random "
        "positions: e.g. the ranks of random scores, scores.argsort(1).argsort(1) < k[:, None].",
        (_masking_with(choose="independent"),),
    ),
    Mistake(
        "all_mask", "Every chosen token replaced by [MASK]",
        "of the chosen tokens, 80% become [MASK], 10% a random ordinary token and 10% stay as "
        "they are: [MASK] never appears when the model is used, so it must not learn that only "
        "[MASK] positions matter.",
        (_masking_with(split="all"),),
    ),
    Mistake(
        "random_as_mask", "The random 10% replaced by [MASK] too",
        "10% of the chosen tokens become a RANDOM ordinary token (ids drawn uniformly from the "
        "ordinary ones), 80% [MASK], 10% stay.",
        (_masking_with(split="90/0/10"),),
    ),
    Mistake(
        "split_wrong", "The 80/10/10 split is wrong",
        "one uniform draw u per chosen token: u < 0.8 -> [MASK], 0.8 <= u < 0.9 -> random, else "
        "kept. Two draws that overlap, or 10% of the remaining 20%, give other shares.",
        tuple(_masking_with(split=s) for s in ("80/20/0", "70/10/20", "80/2/18", "10/10/80")),
    ),
    Mistake(
        "random_specials", "Random replacements include special ids",
        "draw the random token from the ordinary ids only (not [CLS], [MASK], padding...): "
        "ordinary.nonzero() lists them.",
        (_masking_with(random_from="vocab"),),
    ),
    GENERATOR,
)
MASKING_CASES = [
    _masking_case(0, _lengths(0, 128, 56, 100), 100, unk=0.03),
    _masking_case(1, [1, 2, 3, 4, 8, 14, 21], 24),  # n = 0, 1, 2, 3, 7, 13, 20 ordinary tokens
    _masking_case(2, _lengths(2, 64, 40, 80), 80, vocab_size=30, special_ids=(0, 1, 2),
                  mask_id=28, pad_id=29, rate=0.3, unk=0.02),
]
# The second hints of mask_tokens, mean_pool and DecoderLM (sections: the item's).
_ONE_ROW = "run it on one row of 20 ordinary tokens with rate=0.5 and print inputs and targets: "
_MASKING_LADDER = {
    "targets_everywhere": (None, _ONE_ROW + "how many targets are not pad_id?"),
    "targets_corrupted": (None, _ONE_ROW + "where a token became [MASK], what is its target?"),
    "targets_only_masked": (None, _ONE_ROW + "where a token was kept or replaced at random, is "
                            "there a target?"),
    "fill_minus_100": (None, _ONE_ROW + "what do the unchosen positions hold?"),
    "padding_chosen": (None, "run it on a row that is mostly padding and print the chosen "
                       "positions: none in the padding."),
    "specials_chosen": (None, "run it on a row that starts with [CLS] many times: is one "
                        "ever chosen?"),
    "any_position_chosen": (None, "run it many times on a row of [CLS], 5 ordinary "
                            "tokens and 10 padding, with rate=0.5: print the chosen positions, "
                            "always among the 5 ordinary ones."),
    "rate_over_all": (None, "on a row with 10 ordinary tokens and 10 padding, rate=0.5, "
                      "count the chosen: 5."),
    "no_minimum": (None, "on a row with 2 ordinary tokens, count the chosen: 1."),
    "rounded_down": (None, "on a row with 7 ordinary tokens and rate=0.5, count the chosen: "
                     "round(3.5) = 4."),
    "one_too_many": (None, "on a row of 20 ordinary tokens at rate=0.15, count the chosen "
                     "positions: 3, not 4."),
    "rounded_half_up": (None, "print torch.tensor([0.5, 1.5, 2.5, 3.5]).round() next to your "
                        "rounding of the same numbers: half to even gives 0, 2, 2, 4."),
    "rate_ignored": (None, "call it with rate=0.5 on 20 ordinary tokens: 10 chosen."),
    "per_batch": (None, "on a batch of a long and a short row, count the chosen in each row."),
    "with_replacement": (None, _ONE_ROW + "count the chosen positions, next to round(rate * "
                         "n)."),
    "independent": (None, "run it 5 times on the same row: the number chosen must be the "
                    "same every time."),
    "all_mask": (None, "on 1000 chosen tokens, count the [MASK]: about 800."),
    "random_as_mask": (None, "on 1000 chosen tokens, count those that are neither [MASK] nor "
                       "the original: about 100."),
    "split_wrong": (None, "on 1000 chosen tokens, count [MASK], random and kept: about 800, "
                    "100, 100."),
    "random_specials": (None, "collect the random replacements of a large batch: is [CLS], "
                        "[MASK] or padding among them?"),
    "generator_ignored": (None, "call it twice with torch.Generator().manual_seed(0), "
                          "changing torch.manual_seed between the calls: the results must be "
                          "equal."),
}
_POOL_LADDER = {
    "over_padding": (None, "add padding to a text: its pooled vector must not change."),
    "padded_length": (None, "add padding to a text: its pooled vector must not change."),
    "count_plus_one": (None, "pool a text of one token: the result is that token's vector."),
    "keep_inverted": (None, "print keep[0] next to the positions you average."),
    "summed": (None, "pool a text of two equal vectors: the result is that vector, not "
               "twice it."),
    "cls": (None, "change the second token of a text: its pooled vector must change."),
    "max": (None, "pool a text of two tokens: the result is their mean."),
    "prefix": (None, "make keep [False, True, True]: which positions do you average?"),
    "whole_batch": (None, "print your result's shape: (batch, d_model), one vector per text."),
    "empty_nan": (None, "pool a row whose keep is all False: zeros, not NaN."),
    "batch_count": (None, "pool a batch of two texts, then each text alone: the results "
                    "must be the same."),
    "floor_underflows": (None, "print torch.tensor({floor:g}, dtype=torch.float16)."),
    "no_feature_axis": (None, "print keep.shape and h.shape, aligned from the right."),
    "divisor_axis": (None, "print the sum's shape and the count's shape, aligned from the "
                     "right."),
    "promoted": (None, "pool h.to(torch.bfloat16) and print the result's dtype, and "
                 "keep.float().dtype: which one wins in the product?"),
}
_LM_MODEL_LADDER = {
    "no_causal_mask": (None, "change the last token of a text: the logits at earlier "
                       "positions must not move."),
    "mask_inverted": (None, "print your mask for seq=3: row 0 sees key 0 only."),
    "positions_offset": (None, "print the positions your code gives self.positional: the first "
                         "is 0."),
    "diagonal_masked": (None, "print your mask for seq=3: its diagonal must be True."),
    "sees_next": (None, "print your mask for seq=3: row 0 sees key 0 only."),
    "mask_not_bool": (None, "print your mask's dtype."),
    "mask_size": (None, "print your mask's shape next to (seq, seq)."),
    "cross_attention": (None, "print the modules of self.layers[0]: there is no encoder "
                        "to attend to."),
    "attention_twice": (None, "count the attention calls per layer: one."),
    "embedding_added_twice": (None, "print the output of self.embed and of self.positional: "
                              "the second already holds the first."),
    "scaled_twice": (None, "print self.embed(tokens).std(): already scaled by sqrt(d_model)."),
    "not_scaled": (None, "print the std of what you give self.positional, next to "
                   "self.embed(tokens).std()."),
    "no_positional": (None, "swap two tokens of a text: the logits must change beyond the "
                      "two positions."),
    "positions_skipped_single_token": (None, "run your forward on tokens of shape (1, 1) and "
                                       "(1, 2), and print whether self.positional is called "
                                       "each time."),
    "positional_twice": (None, "count the calls to self.positional: one."),
    "positional_dropout": (None, "in training mode, call self.positional: it applies its own "
                           "dropout; does your forward go through it?"),
    "extra_dropout": (None, "count the dropout calls in your forward: the modules do their "
                      "own."),
    "sublayer_dropout": (None, "layer(x, mask) applies the sublayers' dropout itself: do you "
                         "call the layer?"),
    "tuple": (None, "print type of what one step of your layer returns."),
    "no_residual": (None, "layer(x, mask) is the whole layer, residuals and norms included: "
                    "do you call it?"),
    "sublayer_reused": (None, "list which sublayer each step uses: each its own."),
    "no_feed_forward": (None, "count the steps of each layer: attention, then the "
                        "feed-forward network."),
    "one_layer": (None, "print the index of the layer each step of your loop calls."),
    "layer_skipped": (None, "count your layer calls: len(self.layers); is your `return` "
                      "indented inside the loop?"),
    "layer_order": (None, "print the index of the layer each step of your loop calls: 0 "
                    "first."),
    "not_chained": (None, "which tensor does each layer get: the previous layer's output?"),
    "no_final_norm": (None, "count the calls to self.norm: once, after the loop."),
    "final_norm_twice": (None, "count the calls to self.norm: once."),
    "norm_each_layer": (None, "is the self.norm line inside your loop, or after it?"),
    "norm_reused": (None, "which tensors go through self.norm: the last layer's output only."),
    "generator_ignored": (None, "build DecoderLMConfig(..., tie_output=False) and print "
                          "model.generator.weight is model.embed.embedding.weight: False; "
                          "which of the two do your logits read?"),
    "untied": (None, "print self.generator: it is made in __init__, with the weight the "
               "checks copy; use the module you were given."),
    "not_transposed": (None, "print the shape of the matrix you multiply by: (d_model, "
                       "vocab) is what x needs."),
    "softmax": (None, "print your output's .sum(-1): logits need not sum to 1."),
    "log_softmax": (None, "print your output's max: logits can be above 0."),
    "last_only": (None, "print your output's shape: (batch, seq, vocab)."),
    "last_dropped": (None, "print your output's shape: (batch, seq, vocab)."),
    "flattened": (None, "print your output's shape: (batch, seq, vocab)."),
    "sequence_first": (None, "print the shape of x before your first layer: (batch, seq, "
                       "d_model)."),
}
GENERATOR = laddered((GENERATOR,), _MASKING_LADDER)[0]  # reported by `after`


MASKING = Item(
    EXERCISE, "mask_tokens", reference_masking, MASKING_CASES,
    laddered(MASKING_MISTAKES, _MASKING_LADDER),
    what="result", parts=("inputs", "targets"), run=_run_masking, show=_show_masking,
    after=(_check_generator,),
    formula="(Your random draws may differ from the reference's: what counts is the rule, "
            "below.)",
    twins=(_masking_with(),),
    section=("09_variants", "3. BERT's pre-training: the masked language model"),
)


# --------------------------------------------------------------------------------- mean_pool


def _pool(h, keep, over="keep", divide="count", empty="zero", floor=1.0):
    """mean_pool with the variations mistakes make; floor: the count's lower bound, in h's
    dtype (1e-9 is 0 in float16)."""
    k = {"keep": keep, "all": torch.ones_like(keep), "inverted": ~keep}[over].to(h.dtype)[:, :, None]
    total = (h * k).sum(1)  # (batch, d_model)
    if divide == "sum":
        return total
    count = {"count": k.sum(1), "length": torch.full_like(k.sum(1), h.size(1)),
             "count+1": k.sum(1) + 1, "batch": k.sum().expand(h.size(0), 1)}[divide]
    return total / (count if empty == "nan" else count.clamp(min=floor))


def _pool_with(**bug):
    return lambda h, keep: _pool(h, keep, **bug)


def _prefix(h, keep):
    """The first n positions averaged, n = the number of True: right padding assumed."""
    n = keep.sum(1)
    return torch.stack([h[b, :n[b]].mean(0) if n[b] else h.new_zeros(h.size(-1))
                        for b in range(h.size(0))])


def _masked_max(h, keep):
    out = h.masked_fill(~keep[:, :, None], float("-inf")).max(1).values
    return out.masked_fill(~keep.any(1, keepdim=True), 0.0)


POOL_MISTAKES = (
    Mistake(
        "over_padding", "Pooled over the padding too",
        "h.mean(1) averages every position: padding adds to the sum and counts in the divisor. "
        "Keep only the positions where keep is True.",
        (_pool_with(over="all"),),
    ),
    Mistake(
        "padded_length", "Divided by the padded length",
        "the padding is out of the sum, but the divisor still counts it: divide by the number "
        "of True in each row of keep, keep.sum(1).",
        (_pool_with(divide="length"),),
    ),
    Mistake(
        "count_plus_one", "Divided by one position too many (count + 1)",
        "a guard against 0 / 0 must not change the other rows: count + 1 divides every text by "
        "one position more than it has. Clamp the count instead, count.clamp(min=1): it "
        "changes only the empty rows.",
        (_pool_with(divide="count+1"),),
    ),
    Mistake(
        "keep_inverted", "keep used the wrong way round",
        "keep is True at the text's tokens: average those, not the padding.",
        (_pool_with(over="inverted"),),
    ),
    Mistake(
        "summed", "Summed instead of averaged",
        "divide the sum by the number of kept positions, so that long and short texts give "
        "vectors of the same size.",
        (_pool_with(divide="sum"),),
    ),
    Mistake(
        "cls", "The first position taken instead of the mean",
        "h[:, 0] is [CLS] pooling, the model's other choice; mean_pool averages every kept "
        "position.",
        (lambda h, keep: h[:, 0],),
    ),
    Mistake(
        "max", "Max pooling instead of the mean",
        "the mean over the kept positions: their sum divided by their number.",
        (_masked_max,),
    ),
    Mistake(
        "prefix", "Only the first n positions averaged",
        "keep need not be a prefix (padding on the left, or a text with a gap): use keep itself, "
        "not the number of True in it.",
        (_prefix,),
    ),
    Mistake(
        "whole_batch", "One mean over the whole batch",
        "h[keep] gathers the kept positions of EVERY text into one (n, d_model) tensor: its mean "
        "mixes the texts. Average each row (text) over its own kept positions: (batch, d_model).",
        (lambda h, keep: h[keep].mean(0), lambda h, keep: h[keep].mean(0).expand(h.size(0), -1)),
    ),
    Mistake(
        "batch_count", "Every text divided by the kept positions of the whole batch",
        "keep.sum() counts the kept positions of every text together: divide each text's sum "
        "by its own count, keep.sum(1) (one number per row).",
        (_pool_with(divide="batch"),),
    ),
    Mistake(
        "floor_underflows", "An empty text gives NaN in {dtype}: the count's floor {floor:g} is 0 there",
        "clamp(min={floor:g}) in h's dtype: {dtype} cannot hold {floor:g} (its smallest number is "
        "6e-8), so an empty text still divides 0 by 0. Clamp the count to at least 1: counts are "
        "whole numbers, and 1 is exact in every dtype.",
        tuple(member(_pool_with(floor=floor), floor=floor, dtype="float16")
              for floor in (1e-9, 1e-8, 1e-10, 1e-12, 1e-13, 1e-15)),
    ),
    Mistake(
        "empty_nan", "An empty text gives NaN",
        "a row of keep with no True divides 0 by 0: clamp the count to at least 1 "
        "(count.clamp(min=1)), so that the pooled vector is zeros.",
        (_pool_with(empty="nan"),),
    ),
    Mistake(
        "no_feature_axis", "keep not given a feature axis",
        "keep is (batch, seq) and h (batch, seq, d_model): keep[:, :, None] (or "
        ".unsqueeze(-1)) lines keep up with h's positions.",
        (lambda h, keep: (h * keep).sum(1), lambda h, keep: (h * keep[:, None]).sum(1),
         lambda h, keep: h.masked_fill(~keep, 0.0)),
    ),
    Mistake(
        "promoted", "Pooled vectors promoted to {dtype}: they must keep h's dtype",
        "the pooled vectors keep h's dtype: a float keep (keep.float(), .to(torch.float32), "
        ".double()) promotes a low-precision h in the product. Convert keep to h's own dtype: "
        "keep.to(h.dtype).",
        tuple(member(lambda h, keep, to=to: reference_pool(
            h.to(torch.promote_types(h.dtype, to)), keep), dtype=str(to).replace("torch.", ""))
              for to in (torch.float32, torch.float64)),
    ),
    Mistake(
        "divisor_axis", "Divisor without its feature axis",
        "the sum is (batch, d_model) and keep.sum(1) is (batch,): divide by keep.sum(1, "
        "keepdim=True), (batch, 1), or by the count of a (batch, seq, 1) keep.",
        (lambda h, keep: (h * keep[:, :, None]).sum(1) / keep.sum(1),),
    ),
)


def _at_precision(dtype):
    """Same shape and dtype, values equal to within `dtype`'s precision: a result promoted
    to float32 matches the promoted mistake, computed in h's dtype first or not."""

    def compare(actual, expected):
        return (isinstance(actual, torch.Tensor) and actual.shape == expected.shape
                and actual.dtype == expected.dtype and close(actual.to(dtype), expected.to(dtype)))

    return compare


def _pool_case(seed, lengths, seq, d_model, dtype=torch.float32, keep=None):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(len(lengths), seq, d_model, generator=g).to(dtype)
    if keep is None:
        keep = torch.arange(seq) < torch.tensor(lengths)[:, None]
    low = dtype in (torch.float16, torch.bfloat16)
    return Case((h, keep), names=("h", "keep"), seed=seed, same=_at_precision(dtype) if low else None,
                label=describe(h=h, keep=keep) + f", texts of {lengths} tokens")


POOL_CASES = [
    _pool_case(0, [5, 3, 1], 5, 4),
    _pool_case(1, [4, 6], 6, 3, torch.float64),
    _pool_case(2, [3, 2, 4], 4, 6, keep=torch.tensor([[False, True, True, True],  # left padding
                                                      [True, False, False, True],
                                                      [True, True, True, True]])),
    _pool_case(3, [2, 0, 3], 4, 5),  # an empty text
    _pool_case(4, [3, 5], 5, 4, torch.bfloat16),  # the result stays in bfloat16
    _pool_case(5, [2, 0, 4], 4, 4, torch.float16),  # an empty text in float16
]
MEAN_POOL = Item(
    EXERCISE, "mean_pool", reference_pool, POOL_CASES, laddered(POOL_MISTAKES, _POOL_LADDER),
    what="pooled vectors",
    formula="pooled[b] = sum_t keep[b, t] h[b, t] / sum_t keep[b, t] (zeros for an empty row).",
    twins=(_pool_with(),),
    section=("09_variants", "Padding must not count"),
)


# -------------------------------------------------------------------------------- DecoderLM
# DecoderLM(config).forward(tokens) -> logits: the decoder-only model, from its given parts.


def _positions(positional, seq):
    """The positional encoding's vectors for positions 0 ... seq - 1, without its dropout."""
    if hasattr(positional, "pe"):
        return positional.pe[:seq]
    return positional.embedding(torch.arange(seq))


def _masks(tokens, size, pad_id):
    ones = torch.ones(size, size, dtype=torch.bool)
    return {"causal": lambda: ones.tril(), None: lambda: None,
            "padding": lambda: (tokens != pad_id)[:, None, None, :],
            "padding_3d": lambda: (tokens != pad_id)[:, None, :],
            "inverted": lambda: ~ones.tril(), "transposed": lambda: ones.triu(),
            "diagonal": lambda: ones.tril(-1), "next": lambda: ones.tril(1),
            "float": lambda: nn.Transformer.generate_square_subsequent_mask(size),
            **{dtype: lambda dtype=dtype: ones.tril().to(dtype) for dtype in _NOT_BOOL}}


_NOT_BOOL = (torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8)


def _block(layer, x, mask, how, memory):
    """One decoder-only layer, as `how` says: "module" layer(x, mask); "tuple" the attention's
    (output, weights) given to the sublayer; "bare" no sublayers (no residual, norm or
    dropout); "attention_twice" two self-attention steps; "by_hand" the two sublayers written
    as x + f(norm(x)) (or norm(x + f(x))) without their dropout; ("subs", i, j) self-attention
    in sublayers[i], the feed-forward network in sublayers[j] (None: left out); ("cross",
    sublayer, memory mask) chapter 06's layer with a cross-attention step (the self_attn
    module, keys and values from `memory`) between self-attention and the feed-forward."""
    if how == "module":
        return layer(x, mask)
    if how == "tuple":  # the attention's (output, weights) handed on as it is
        x = layer.sublayers[0](x, lambda y: layer.self_attn(y, y, y, mask))
        return layer.sublayers[1](x, layer.feed_forward)
    if how == "bare":  # no residual, no norm, no dropout
        return layer.feed_forward(layer.self_attn(x, x, x, mask)[0])
    if how == "attention_twice":  # chapter 06's middle sublayer made a second self-attention
        for _ in range(2):
            x = layer.sublayers[0](x, lambda y: layer.self_attn(y, y, y, mask)[0])
        return layer.sublayers[1](x, layer.feed_forward)
    if how == "by_hand":
        steps = (lambda y: layer.self_attn(y, y, y, mask)[0], layer.feed_forward)
        for sublayer, step in zip(layer.sublayers, steps):
            x = x + step(sublayer.norm(x)) if sublayer.norm_first else sublayer.norm(x + step(x))
        return x
    if how[0] == "subs":
        x = layer.sublayers[how[1]](x, lambda y: layer.self_attn(y, y, y, mask)[0])
        return x if how[2] is None else layer.sublayers[how[2]](x, layer.feed_forward)
    _, sub, cross_mask = how
    x = layer.sublayers[0](x, lambda y: layer.self_attn(y, y, y, mask)[0])
    x = layer.sublayers[sub](x, lambda y: layer.self_attn(y, memory, memory, cross_mask)[0])
    return layer.sublayers[1](x, layer.feed_forward)


def _decoder_lm(model, tokens, *, embed="scaled", positional="module", mask="causal",
                mask_size="x", dropout=None, block="module", memory="input", call=None,
                layers="each", chained=True, norm=1, norm_before=False, output="tied",
                returns="logits", seq_first=None):
    """DecoderLM.forward with the variations that mistakes make, step by step: the embeddings
    (`embed`, `positional`), the mask (`mask`, of the size `mask_size` says), an extra
    `dropout`, each layer (`block` with `memory`, or called as chapter 06's, `call`), which
    layers and how chained (`layers`, `chained`), the final norm (`norm` times, or "each"
    layer, and `norm_before` the layers), the output layer (`output`) and what is returned
    (`returns`); `seq_first` runs the layers on (seq, batch, d_model), "back" transposes the
    logits back."""
    c = model.config
    e = model.embed(tokens)  # (batch, seq, d_model), scaled by sqrt(d_model)
    e = {"scaled": e, "unscaled": model.embed.embedding(tokens),
         "twice": e * math.sqrt(c.d_model), "after": e}[embed]
    x = {"module": lambda: model.positional(e), "none": lambda: e,
         "twice": lambda: model.positional(model.positional(e)),
         "embed_twice": lambda: e + model.positional(e),
         "by_hand": lambda: e + _positions(model.positional, tokens.size(1)),
         "beyond_one": lambda: model.positional(e) if tokens.size(1) > 1 else e,
         "from_1": lambda: model.positional(e, start=1),  # RoBERTa's pad_id + 1 with pad_id 0
         "from_2": lambda: model.positional(e, start=2)}[positional]()  # ... with pad_id 1
    if embed == "after":  # the scale again, after the positions were added
        x = x * math.sqrt(c.d_model)
    if seq_first:
        x = x.transpose(0, 1)  # (seq, batch, d_model): the layers read it as batch-first
    if norm_before:
        x = model.norm(x)
    size = {"x": x.size(1), "tokens": tokens.size(1), "batch": tokens.size(0),
            "max_len": c.max_len, "rows": c.max_len}[mask_size]
    m = _masks(tokens, size, c.pad_id)[mask]()
    if mask_size == "rows":  # nanoGPT's buffer cut on one axis only
        m = m[:tokens.size(1)]
    if dropout:  # F.dropout's default is training=True
        x = F.dropout(x, c.dropout, training=model.training if dropout == "train" else True)
    first = x
    stack = {"reversed": model.layers[::-1], "but_last": model.layers[:-1],
             "first_only": model.layers[:1]}.get(layers, model.layers)
    for layer in stack:
        layer = {"first": model.layers[0], "last": model.layers[-1]}.get(layers, layer)
        given = x if chained else first
        if call == "memory":  # chapter 06's decoder: layer(x, memory, src_mask, tgt_mask)
            x = layer(given, given, None, m)
        elif call == "memory_mask":
            x = layer(given, given, m)
        else:
            x = _block(layer, given, m, block, {"input": given, "embeddings": first}[memory])
        if norm == "each":
            x = model.norm(x)
    for _ in range(norm if norm != "each" else 0):
        x = model.norm(x)
    if output == "tied":
        logits = model.generator(x)
    elif output == "not_transposed":
        logits = x @ model.embed.embedding.weight
    elif output == "embedding":  # tied whatever config.tie_output says
        logits = x @ model.embed.embedding.weight.T
    else:  # a fresh projection, made in forward (from the seeded random state)
        logits = nn.Linear(c.d_model, c.vocab_size, bias=output == "fresh_bias")(x)
    if seq_first == "back":
        logits = logits.transpose(0, 1)
    logits = {"logits": lambda: logits, "softmax": lambda: logits.softmax(-1),
              "log_softmax": lambda: logits.log_softmax(-1), "last": lambda: logits[:, -1],
              "all_but_last": lambda: logits[:, :-1], "flat": lambda: logits.flatten(0, 1),
              "classes_second": lambda: logits.transpose(1, 2)}[returns]()
    return logits


def _decoder_with(**bug):
    return lambda model, tokens: _decoder_lm(model, tokens, **bug)


def _variants(**choices):
    """One computation for each combination of the listed choices."""
    names = list(choices)
    return tuple(_decoder_with(**dict(zip(names, values)))
                 for values in product(*(choices[n] for n in names)))


DECODER_MISTAKES = (
    Mistake(
        "no_causal_mask", "No causal mask: every position reads the future",
        "a language model predicts token t + 1 from tokens 0 ... t only: give every layer the "
        "causal mask, torch.ones(seq, seq, dtype=torch.bool).tril() (True = may attend). A "
        "padding mask alone does not hide the future.",
        _variants(mask=(None, "padding", "padding_3d"))
        + _variants(mask=(None,), block=("by_hand",)),
    ),
    Mistake(
        "mask_inverted", "Causal mask inverted: positions read the future, not the past",
        "True means 'may attend' here: query i (a row) may read keys j <= i, the lower "
        "triangle with its diagonal, tril().",
        _variants(mask=("inverted", "transposed")),
    ),
    Mistake(
        "diagonal_masked", "Causal mask hides the diagonal: a position cannot read its own token",
        "position t must see token t itself (and the ones before) to predict token t + 1: "
        "keep the diagonal, tril(), not tril(-1).",
        _variants(mask=("diagonal",)),
    ),
    Mistake(
        "sees_next", "Causal mask off by one: a position reads the next token",
        "the next token is the one position t must predict: tril(), not tril(1).",
        _variants(mask=("next",)),
    ),
    Mistake(
        "mask_not_bool", "Causal mask is not boolean",
        "this course's masks are bool, True = may attend; nn.Transformer's float mask (0 and "
        "-inf) is another convention: torch.ones(seq, seq, dtype=torch.bool).tril(). (And "
        "layer(x, mask) takes the mask second, where chapter 06's layer took memory.)",
        _variants(mask=("float", *_NOT_BOOL)),
    ),
    Mistake(
        "mask_size", "Causal mask of the wrong size",
        "the scores are (batch, heads, seq, seq) with seq = tokens.size(1): a mask made for "
        "max_len (as nanoGPT's buffer) must be cut to [:seq, :seq], and the batch size is no "
        "length.",
        _variants(mask_size=("batch", "max_len", "rows")),
    ),
    Mistake(
        "cross_attention", "Cross-attention left in",
        "a decoder-only model has no encoder, so no memory and no cross-attention: each layer is "
        "masked self-attention then the feed-forward network, layer(x, mask). Attending to its "
        "own input without the causal mask reads the future.",
        _variants(block=(("cross", 0, None), ("cross", 1, None), ("cross", 1, "causal")),
                  memory=("input", "embeddings"))
        + _variants(call=("memory", "memory_mask")),
    ),
    Mistake(
        "attention_twice", "Self-attention applied twice in each layer",
        "without an encoder, chapter 06's middle sublayer (cross-attention) goes away: it does "
        "not become a second self-attention. Each layer: self-attention, then the "
        "feed-forward network.",
        _variants(block=("attention_twice",)),
    ),
    Mistake(
        "embedding_added_twice", "Token embedding added twice",
        "self.positional(x) returns x + PE already: x = self.positional(self.embed(tokens)), "
        "not x + self.positional(x).",
        _variants(positional=("embed_twice",)),
    ),
    Mistake(
        "scaled_twice", "Embeddings scaled by sqrt(d_model) twice",
        "self.embed (chapter 05's Embeddings) multiplies by sqrt(d_model) already: do not "
        "scale its output again.",
        _variants(embed=("twice", "after")),
    ),
    Mistake(
        "not_scaled", "Embeddings not scaled by sqrt(d_model)",
        "self.embed.embedding(tokens) is the bare lookup: self.embed(tokens) scales it by "
        "sqrt(d_model), as the package's models do.",
        _variants(embed=("unscaled",)),
    ),
    Mistake(
        "no_positional", "Positional encoding missing",
        "self-attention does not know the order of its inputs: add the positions, "
        "x = self.positional(self.embed(tokens)).",
        _variants(positional=("none",)),
    ),
    Mistake(
        "positions_offset", "Positions start at {start}, not 0",
        "the first token is at position 0: self.positional(x), whose start is 0 by default. "
        "RoBERTa and fairseq start their learned positions after the padding index (pad_id + "
        "1); this model's table starts at row 0.",
        tuple(member(c, start=start) for start, c in ((1, _variants(positional=("from_1",))[0]),
                                                       (2, _variants(positional=("from_2",))[0]))),
    ),
    Mistake(
        "positions_skipped_single_token", "Positional encoding skipped for a one-token input",
        "a single token has a position too, position 0, and the model was trained with it: "
        "generation feeds short inputs (a one-token prompt, or one new token at a time). Add "
        "the positions to every input, whatever its length: no condition on tokens.size(1).",
        _variants(positional=("beyond_one",)),
    ),
    Mistake(
        "positional_twice", "Positional encoding added twice",
        "self.positional once, to the embeddings: the layers do not add positions again.",
        _variants(positional=("twice",)),
    ),
    Mistake(
        "positional_dropout", "Dropout of the positional encoding missing",
        "self.positional(x) adds the positions AND applies the dropout (in training): call it "
        "rather than adding its table by hand.",
        _variants(positional=("by_hand",)),
    ),
    Mistake(
        "extra_dropout", "Dropout applied again, outside the modules",
        "self.positional and the layers apply their own dropout, in training only; F.dropout(x, "
        "p) drops in eval mode too (its default is training=True), and a second one drops twice.",
        _variants(dropout=(True, "train")),
    ),
    Mistake(
        "sublayer_dropout", "Sublayer dropout missing",
        "each layer's sublayers apply dropout in training: call layer(x, mask), or "
        "layer.sublayers[i](x, f), rather than writing x + f(norm(x)) by hand.",
        _variants(block=("by_hand",)),
    ),
    Mistake(
        "tuple", "Attention's (output, weights) used as a tensor",
        "layer.self_attn(...) returns a tuple (output, weights): keep only the output ([0]) "
        "inside the sublayer (or call layer(x, mask), which does it).",
        _variants(block=("tuple",)),
    ),
    Mistake(
        "no_residual", "Residual connections and norms missing",
        "each step is wrapped in its sublayer, x = layer.sublayers[i](x, f): the residual "
        "x + ..., the LayerNorm and the dropout (or call layer(x, mask), which does it).",
        _variants(block=("bare",)),
    ),
    Mistake(
        "sublayer_reused", "One sublayer (and its LayerNorm) used for both steps",
        "layer.sublayers[0] wraps self-attention, layer.sublayers[1] the feed-forward network, "
        "each with its own LayerNorm (or call layer(x, mask), which does it).",
        _variants(block=(("subs", 0, 0), ("subs", 1, 1), ("subs", 1, 0))),
    ),
    Mistake(
        "no_feed_forward", "Feed-forward sublayer missing",
        "a decoder-only layer is masked self-attention THEN the feed-forward network: "
        "x = layer.sublayers[1](x, layer.feed_forward) (or call layer(x, mask)).",
        _variants(block=(("subs", 0, None),)),
    ),
    Mistake(
        "one_layer", "One layer used for every layer",
        "self.layers holds n_layers layers, each with its own weights: for layer in "
        "self.layers: x = layer(x, mask).",
        _variants(layers=("first", "last")),
    ),
    Mistake(
        "layer_skipped", "Not every layer used",
        "every layer of self.layers, in order: for layer in self.layers (no slice), and the "
        "rest after the loop, not inside it (a `return` in the loop's body ends it after the "
        "first layer).",
        _variants(layers=("but_last", "first_only")) + _variants(layers=("first_only",), norm=(0,)),
    ),
    Mistake(
        "layer_order", "Layers in the wrong order",
        "self.layers[0] first: the layers were trained in that order.",
        _variants(layers=("reversed",)),
    ),
    Mistake(
        "not_chained", "Layers not chained",
        "each layer takes the previous layer's output: x = layer(x, mask), not the embeddings "
        "every time.",
        _variants(chained=(False,)),
    ),
    Mistake(
        "no_final_norm", "Final LayerNorm missing",
        "pre-norm leaves the last layer's output unnormalized: self.norm(x) before the output "
        "layer (it is nn.Identity in post-norm, so calling it is always right).",
        _variants(norm=(0,)),
    ),
    Mistake(
        "final_norm_twice", "Final LayerNorm applied twice",
        "self.norm once, after the last layer.",
        _variants(norm=(2,)),
    ),
    Mistake(
        "norm_each_layer", "Final LayerNorm applied after every layer",
        "self.norm comes once, after the whole stack: each layer has its own norms inside.",
        _variants(norm=("each",)),
    ),
    Mistake(
        "norm_reused", "Final LayerNorm also applied to the embeddings",
        "self.norm belongs after the last layer only; each layer normalizes its own input "
        "(pre-norm) already.",
        _variants(norm_before=(True,), norm=(0, 1)),
    ),
    Mistake(
        "untied", "Output layer not tied to the embeddings: a new projection",
        "the output layer is self.generator, made in __init__ (tied to the input embedding "
        "table when config.tie_output): call self.generator(x); a new nn.Linear is untrained "
        "and untied.",
        _variants(output=("fresh", "fresh_bias")),
    ),
    Mistake(
        "generator_ignored", "Output layer tied although tie_output=False: self.generator "
        "ignored",
        "the logits are self.generator(x). Its weight is the embedding table only when "
        "config.tie_output is True; with tie_output=False it has its own weight, which "
        "x @ self.embed.embedding.weight.T (or F.linear with that table) never reads.",
        _variants(output=("embedding",)),
    ),
    Mistake(
        "not_transposed", "Embedding table used as the output layer without its transpose",
        "the table E is (vocab_size, d_model): the logits are x @ E.T (what self.generator(x) "
        "computes), (batch, seq, vocab_size).",
        _variants(output=("not_transposed",)),
    ),
    Mistake(
        "softmax", "Probabilities returned instead of logits",
        "forward returns the logits; the loss (F.cross_entropy) and the samplers apply the "
        "softmax themselves.",
        _variants(returns=("softmax",)),
    ),
    Mistake(
        "log_softmax", "Log-probabilities returned instead of logits",
        "forward returns the logits, unnormalized; the loss applies log_softmax itself.",
        _variants(returns=("log_softmax",)),
    ),
    Mistake(
        "last_only", "Logits for the last position only",
        "training predicts the next token at EVERY position: return (batch, seq, vocab_size); "
        "generation takes logits[:, -1] itself.",
        _variants(returns=("last",)),
    ),
    Mistake(
        "last_dropped", "Logits of the last position dropped",
        "forward gives logits at EVERY position, (batch, seq, vocab_size): the loss (lm_loss) "
        "pairs them with the next tokens and drops the last one itself. Do not shift here.",
        _variants(returns=("all_but_last",)),
    ),
    Mistake(
        "flattened", "Logits flattened or transposed for the loss",
        "return (batch, seq, vocab_size): the loss reshapes them for F.cross_entropy itself.",
        _variants(returns=("flat", "classes_second")),
    ),
    Mistake(
        "sequence_first", "Sequence-first layout: attention runs across the batch",
        "tfcourse's layers are batch-first, (batch, seq, d_model), unlike nn.Transformer's "
        "default: no transpose(0, 1).",
        _variants(seq_first=(True, "back"), mask_size=("x", "tokens")),
    ),
)


def _decoder_case(seed, lengths, seq, vocab_size, train=False, **config):
    """Token ids 1 ... vocab_size - 1, right-padded after each length; a DecoderLM of two
    layers, d_model 16. Logits are compared at the real tokens only: what a model computes at
    padding never reaches the loss (a padding mask added to the causal one is not wrong)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, vocab_size, (len(lengths), seq), generator=g)
    tokens[torch.arange(seq) >= torch.tensor(lengths)[:, None]] = PAD
    real = tokens != PAD
    c = DecoderLMConfig(vocab_size, d_model=16, n_heads=4, d_ff=32, n_layers=2, dropout=0.1,
                        max_len=16, **config)

    def same_at_real(actual, expected):
        if (isinstance(actual, torch.Tensor) and actual.shape == expected.shape
                and expected.shape[:2] == real.shape):
            return close(actual[real], expected[real])
        return same(actual, expected)

    label = (f"tokens {tuple(tokens.shape)}" + (f" (texts of {lengths} tokens, padded)"
                                                 if min(lengths) < seq else "")
             + f", vocab_size={vocab_size}, d_model=16, n_heads=4, n_layers=2, "
             + ("pre-norm" if c.norm_first else "post-norm") + f", {c.positional} positions"
             + (", in training mode (dropout=0.1)" if train else "")
             + ("" if c.tie_output else ", tie_output=False (the output layer has its own weight)"))
    return Case((tokens,), names=("tokens",), init=(c,), train=train, seed=seed, same=same_at_real,
                label=label)


DECODER_CASES = [
    _decoder_case(0, [6, 6], 6, 11),  # GPT-2's layout: pre-norm, learned positions
    _decoder_case(1, [5, 3, 4], 5, 13, norm_first=False, positional="sinusoidal"),
    _decoder_case(2, [7, 7], 7, 11, train=True),
    _decoder_case(3, [6, 4], 6, 11, tie_output=False),  # self.generator has its own weight
    # one token (a one-token prompt, a step of generation): it has position 0 too; in a batch
    # of 2, then a batch of 1 (code that squeezes the batch axis away). Last: code that skips
    # the positions of one token is right on every longer input
    _decoder_case(4, [1, 1], 1, 11),
    _decoder_case(5, [1], 1, 13, norm_first=False, positional="sinusoidal"),
]
DECODER_LM = Item(
    EXERCISE, "DecoderLM", DecoderLM, DECODER_CASES, laddered(DECODER_MISTAKES, _LM_MODEL_LADDER),
    what="logits",
    formula="Compare each step with the docstring: embeddings and positions, every layer "
            "under the causal mask, the final norm, the tied output layer.",
    twins=(_decoder_with(),),
    section=("09_variants", "4. Decoder-only: a language model of Python source"),
)

ITEMS = (LM_LOSS, MASKING, MEAN_POOL, DECODER_LM)
