"""Exercise 07: a teacher-forcing batch, the label-smoothing loss, the paper's learning-rate
schedule and one training step; their cases and their catalogue of mistakes.

No check trains for long: train_step takes two steps of plain SGD on a small random
Transformer, so that every update is the gradient times the learning rate and each
mistake (gradients kept from the last step, accumulation not averaged, no clipping)
moves the weights somewhere it can be recognised.
"""

import dataclasses
import functools
import math
from itertools import product

import torch
import torch.nn.functional as F

from ..batches import Batch, pad_sequences
from ..batches import make_batch as reference_batch
from ..losses import label_smoothing_loss as reference_loss
from ..masks import causal_mask, padding_mask, target_mask
from ..model import Transformer, TransformerConfig
from ..schedules import noam_lr as reference_noam
from ..training import train_step as reference_step
from ..vocab import BOS, EOS, PAD, Vocab
from .comparison import describe
from .mistakes import Mistake, laddered, member
from .pipeline import NO_GRADIENT_MORE, Case, Item, fail_if_stopped
from .sandbox import call

EXERCISE = "ex07_training"
VOCAB = Vocab("abcdefg")

# ----------------------------------------------------------------------------- make_batch

_FORMS = {"bos+y": lambda y: [BOS, *y], "y+eos": lambda y: [*y, EOS], "y": lambda y: y,
          "bos+y+eos": lambda y: [BOS, *y, EOS], "y+pad": lambda y: [*y, PAD],
          "y+eos+pad": lambda y: [*y, EOS, PAD], "bos+y-last": lambda y: [BOS, *y][:-1],
          "eos+y": lambda y: [EOS, *y], "pad+y": lambda y: [PAD, *y]}


def _batch(pairs, vocab, tgt_in="bos+y", tgt_out="y+eos", tgt_mask="target", src_mask="pad",
           source="x", swapped=False):
    """make_batch with the variations mistakes make."""
    if swapped:
        pairs = [(t, s) for s, t in pairs]
    xs = [vocab.encode(s) for s, _ in pairs]
    src = pad_sequences([{"x": x, "x+eos": [*x, EOS], "bos+x+eos": [BOS, *x, EOS]}[source]
                         for x in xs])
    ys = [vocab.encode(t) for _, t in pairs]
    tgt_in_ids = pad_sequences([_FORMS[tgt_in](y) for y in ys])
    tgt_out_ids = pad_sequences([_FORMS[tgt_out](y) for y in ys])
    masks = {
        "target": lambda: target_mask(tgt_in_ids, PAD),
        "padding": lambda: padding_mask(tgt_in_ids, PAD),
        "causal": lambda: causal_mask(tgt_in_ids.size(1))[None, None],
    }
    src_masks = {"pad": padding_mask(src, PAD), "all": torch.ones_like(padding_mask(src, PAD)),
                 "inverted": ~padding_mask(src, PAD), "2d": src != PAD, "3d": (src != PAD)[:, None],
                 "from_target": padding_mask(tgt_in_ids, PAD), "hf": (src != PAD).long(),
                 "int": padding_mask(src, PAD).long(), "int32": padding_mask(src, PAD).int()}
    masks["from_source"] = lambda: target_mask(src, PAD)
    return Batch(src, tgt_in_ids, tgt_out_ids, src_masks[src_mask], masks[tgt_mask]())


def _batch_with(**bug):
    return lambda pairs, vocab: _batch(pairs, vocab, **bug)


def _sliced_from_padded(pairs, vocab, first=BOS):
    """`first` y EOS padded into one batch, then tgt_in = [:, :-1], tgt_out = [:, 1:] (the
    Annotated Transformer's Batch; with first = PAD, Hugging Face's shift_tokens_right of
    T5's padded labels): a short row keeps its EOS in tgt_in."""
    right = _batch(pairs, vocab)
    full = pad_sequences([[first, *vocab.encode(t), EOS] for _, t in pairs])
    tgt_in, tgt_out = full[:, :-1], full[:, 1:]
    return Batch(right.src, tgt_in, tgt_out, right.src_mask, target_mask(tgt_in, PAD))


BATCH_MISTAKES = (
    Mistake(
        "sliced_from_padded", "Decoder input sliced from a padded batch{first}: short targets keep "
        "their EOS",
        "full[:, :-1] cuts the last COLUMN of the padded batch: in the longest target that is "
        "its EOS, but in a shorter one it is padding, so that row's EOS stays in tgt_in (and "
        "the decoder reads it). Build tgt_in and tgt_out from each target's ids before padding "
        "(BOS + y, y + EOS), or slice before you pad.",
        (member(_sliced_from_padded, first=""),
         member(functools.partial(_sliced_from_padded, first=PAD),
                first=", and started with padding (T5's shift_tokens_right), not BOS")),
    ),
    Mistake(
        "eos_first", "Decoder input starts with {token} ({whose}), not BOS",
        "{why}; this course starts it with BOS: tgt_in = BOS y_1 ... y_n, and EOS is only ever "
        "predicted, at the end of tgt_out.",
        (member(_batch_with(tgt_in="eos+y"), token="EOS", whose="fairseq's prev_output_tokens",
                why="fairseq starts the decoder input with EOS (its prev_output_tokens are the "
                    "target rolled right, EOS first)"),
         member(_batch_with(tgt_in="pad+y"), token="padding", whose="T5's decoder_start_token_id",
                why="T5 starts the decoder input with its pad id (decoder_start_token_id)")),
    ),
    Mistake(
        "not_shifted", "Decoder targets not shifted",
        "at every position the decoder would be asked for the token it was just given: it learns "
        "to copy its input and never to predict. Feed BOS + y, and ask for y + EOS (one step "
        "ahead).",
        tuple(_batch_with(tgt_in=i, tgt_out=o)
              for i, o in (("bos+y", "bos+y"), ("y+eos", "y+eos"), ("y", "y"), ("y", "y+eos"),
                           ("bos+y+eos", "bos+y+eos"), ("bos+y", "bos+y+eos"))),
    ),
    Mistake(
        "in_out_swapped", "Decoder input and target swapped",
        "the decoder READS tgt_in = BOS y_1 ... y_n and must PREDICT tgt_out = y_1 ... y_n EOS.",
        (_batch_with(tgt_in="y+eos", tgt_out="bos+y"),),
    ),
    Mistake(
        "no_eos", "EOS missing from the targets",
        "the model must learn where to stop: the target is y followed by EOS (and the decoder "
        "input BOS followed by y, one token longer than y).",
        (_batch_with(tgt_out="y"), _batch_with(tgt_out="y+pad"),
         _batch_with(tgt_in="bos+y-last", tgt_out="y")),
    ),
    Mistake(
        "eos_in_input", "EOS in the decoder input",
        "the decoder reads BOS y_1 ... y_n and must predict y_1 ... y_n EOS: EOS is only ever "
        "predicted, never read, so tgt_in has no EOS.",
        (_batch_with(tgt_in="bos+y+eos", tgt_out="y+eos+pad"),
         _batch_with(tgt_in="bos+y+eos", tgt_out="y+eos")),
    ),
    Mistake(
        "swapped", "Source and target swapped",
        "each pair is (source, target): the source goes to the encoder (src), the target to the "
        "decoder (tgt_in, tgt_out).",
        (_batch_with(swapped=True),),
    ),
    Mistake(
        "source_wrapped", "BOS or EOS added to the source",
        "the source is its characters' ids alone, padded: BOS and EOS belong to the target.",
        (_batch_with(source="x+eos"), _batch_with(source="bos+x+eos")),
    ),
    Mistake(
        "tgt_mask_not_causal", "Target mask not causal",
        "the decoder must not see the tokens it is about to predict: combine the padding mask "
        "with the causal mask (tfcourse.masks.target_mask does both).",
        (_batch_with(tgt_mask="padding"),),
    ),
    Mistake(
        "tgt_mask_from_source", "Target mask built from the source",
        "tgt_mask is target_mask(tgt_in, PAD): the decoder's self-attention runs over the "
        "decoder input, (batch, 1, tgt_len, tgt_len), not over the source.",
        (_batch_with(tgt_mask="from_source"),),
    ),
    Mistake(
        "tgt_mask_no_padding", "Target mask without padding",
        "the causal mask alone lets the decoder attend to its padding: combine it with the "
        "padding mask of the decoder input (tfcourse.masks.target_mask does both).",
        (_batch_with(tgt_mask="causal"),),
    ),
    Mistake(
        "src_padding", "Source padding not masked",
        "src_mask must be False at the source's padding (padding_mask(src, PAD)), so that "
        "attention gives it no weight.",
        (_batch_with(src_mask="all"),),
    ),
    Mistake(
        "hf_mask", "Source mask as Hugging Face's attention_mask: integers, not bool",
        "Hugging Face's attention_mask is (batch, src_len) int64, 1 at real tokens; here "
        "src_mask is bool, True at real tokens, and (batch, 1, 1, src_len), so that it "
        "broadcasts over heads and queries: padding_mask(src, PAD) makes it.",
        (_batch_with(src_mask="hf"), _batch_with(src_mask="int"), _batch_with(src_mask="int32")),
    ),
    Mistake(
        "src_mask_shape", "Source mask without its head and query axes",
        "src_mask must broadcast to the attention scores (batch, heads, q_len, src_len): shape "
        "(batch, 1, 1, src_len), as padding_mask(src, PAD) makes it.",
        (_batch_with(src_mask="2d"), _batch_with(src_mask="3d")),
    ),
    Mistake(
        "src_mask_from_target", "Source mask built from the target",
        "src_mask marks the real tokens of the SOURCE: padding_mask(src, PAD).",
        (_batch_with(src_mask="from_target"),),
    ),
    Mistake(
        "polarity", "Mask polarity inverted",
        "True means 'may attend': the mask is True at real tokens, False at padding.",
        (_batch_with(src_mask="inverted"),),
    ),
)
FIELDS = ("src", "tgt_in", "tgt_out", "src_mask", "tgt_mask")


def _mask_equal(actual, expected):
    """Equal masks of one dtype, in any form that broadcasts the same (e.g. (batch, 1, L, L) and
    (1, 1, L, L) for a causal mask that is the same for every sentence)."""
    if not isinstance(actual, torch.Tensor) or actual.dtype != expected.dtype or actual.dim() > 4:
        return False
    try:
        shape = torch.broadcast_shapes(actual.shape, expected.shape)
    except RuntimeError:
        return False
    return torch.equal(actual.expand(shape), expected.expand(shape))


def _same_batch(actual, expected):
    try:
        values = [getattr(actual, f) for f in FIELDS]
    except AttributeError:
        return False
    ids = all(isinstance(a, torch.Tensor) and a.shape == e.shape and not a.is_floating_point()
              and torch.equal(a.long(), e)
              for a, e in zip(values[:3], (expected.src, expected.tgt_in, expected.tgt_out)))
    return ids and _mask_equal(values[3], expected.src_mask) and \
        _mask_equal(values[4], expected.tgt_mask)


def _shown(case, result, expected):
    """The first row of tgt_in and tgt_out, when either differs from the reference."""
    values = [getattr(result, f, None) for f in ("tgt_in", "tgt_out")]
    wanted = (expected.tgt_in, expected.tgt_out)
    if not all(isinstance(v, torch.Tensor) for v in values) or all(
            v.shape == w.shape and torch.equal(v.long(), w) for v, w in zip(values, wanted)):
        return ""
    lines = [f"\n  {field}: got {value[0].tolist()}, expected {want[0].tolist()} (first row; "
             f"PAD={PAD}, BOS={BOS}, EOS={EOS})"
             for field, value, want in zip(("tgt_in", "tgt_out"), values, wanted) if value.dim() == 2]
    return "".join(lines)


BATCH_CASES = [  # sources and targets of different lengths, the longest source not with the longest target
    [("abc", "abc"), ("gfedcba", "abcdefg"), ("a", "a")],
    [("ab", "bacd"), ("cdefg", "c"), ("gg", "ggg"), ("fedcb", "bc")],
    [("abcdefgabc", "abcdefgabc")],
]
# The second hints (check(..., hint=2)), by mistake, for each item (sections: the item's,
# unless given).
_SHIFT = ("07_training", "What if the targets are not shifted?")
_BATCH_LADDER = {
    "sliced_from_padded": (None, "print tgt_in for the shortest target of the case: does EOS "
                           "appear in it?"),
    "eos_first": (_SHIFT, "print tgt_in[0]: its first id must be BOS (1), the start symbol; "
                  "EOS (2) comes only at the end of tgt_out."),
    "hf_mask": (None, "print src_mask.dtype and src_mask.shape: torch.bool and (batch, 1, 1, "
                "src_len)."),
    "not_shifted": (_SHIFT, "print tgt_in[0] and tgt_out[0] one above the other: at every "
                    "column, the token below must be the one that follows the token above."),
    "in_out_swapped": (_SHIFT, "print tgt_in[0]: it must start with BOS."),
    "no_eos": (None, "print tgt_out[0]: after the target's last character comes EOS."),
    "eos_in_input": (None, "print tgt_in[0]: EOS never appears in it."),
    "swapped": (None, "print src[0] and the first pair's source: the same characters."),
    "source_wrapped": (None, "print src[0]: the source's ids, then padding, nothing else."),
    "tgt_mask_not_causal": (None, "print tgt_mask[0, 0]: row i must be False after column i."),
    "tgt_mask_from_source": (None, "print tgt_mask.shape: (batch, 1, tgt_len, tgt_len)."),
    "tgt_mask_no_padding": (None, "print tgt_mask for the shortest target: its padding "
                            "columns must be False."),
    "src_padding": (None, "print src_mask for the shortest source: its padding must be "
                    "False."),
    "src_mask_shape": (None, "print src_mask.shape: (batch, 1, 1, src_len)."),
    "src_mask_from_target": (None, "print src_mask.shape[-1] next to src.size(1)."),
    "polarity": (None, "print src_mask[0] next to src[0]: True under the real tokens."),
}
_LOSS_LADDER = {
    "builtin": (None, "build q yourself, then -(q * log p).sum(-1), with torch operations."),
    "counts_padding": (None, "print the number you divide by next to (target != pad_id).sum()."),
    "onto_true_class": (None, "print q.sum(-1) and q at the true class for one position: 1, "
                        "and 1 - eps + eps / V."),
    "onto_padding": (None, "print q for one real position: every class gets at least eps / V, "
                     "the padding class no more."),
    "other_classes_only": (None, "print q at the true class for one position, next to "
                           "1 - eps + eps / V."),
    "true_share_overwritten": (None, "print q at the true class for one position, next to "
                               "1 - eps + eps / V."),
    "mass_not_taken": (None, "print q.sum(-1) for one position: it must be 1."),
    "mass_dropped": (None, "print q.sum(-1) for one position: it must be 1."),
    "eps_not_divided": (None, "print q.sum(-1) for one position: it must be 1."),
    "one_hot_width": (None, "print F.one_hot(target).shape[-1] next to logits.size(-1)."),
    "probabilities": (None, "your loss should grow without bound as p(true) goes to 0: does "
                      "it?"),
    "summed": (None, "double the batch (torch.cat([logits, logits])): the loss must stay the "
               "same."),
    "per_sentence": (None, "give one sentence 1 real token and another 9: does each TOKEN "
                     "count the same in your mean?"),
    "kl_divergence": (None, "with eps = 0.1 print your loss and F.cross_entropy(..., "
                      "label_smoothing=0.1): a KL divergence with the right q is below it by "
                      "the same amount, q's entropy, on every input.{mass_more}"),
    "divided_by_sentences": (None, "print the number you divide by next to (target != "
                             "pad_id).sum()."),
    "pad_logit_blocked": (None, "print log_softmax(logits)[..., pad_id]: it must be finite."),
    "over_vocabulary": (None, "with eps = 0 your loss must equal the mean of -log p(true): "
                        "print both."),
    "sign": (None, "print your loss: a cross entropy is never negative."),
    "no_log_softmax": (None, "add 5 to every logit: the loss must not change."),
    "log_softmax_axis": (None, "print log_softmax(...).exp().sum(-1): all ones."),
    "pad_id_ignored": (None, "call your loss with pad_id=3 on targets padded with 3."),
    "wrong_count": (None, "print the number you divide by next to (target != pad_id).sum()."),
    "masses_off": (None, "for V = 4, eps = 0.2 print q for one position, next to [0.85, "
                   "0.05, 0.05, 0.05] (true class first), and q.sum()."),
    "log_of_softmax": (None, "print torch.softmax(torch.tensor([0.0, -200.0]), -1).log() next "
                       "to torch.log_softmax(torch.tensor([0.0, -200.0]), -1)."),
    "low_precision_loss": (None, "print your loss's dtype for bfloat16 logits: float32."),
    "probabilities_clipped": (None, "print your loss and F.cross_entropy's for logits "
                              "torch.tensor([[0.0, -200.0]]) and target 1 (with eps = 0)."),
}
_NOAM_LADDER = {
    "warmup_exponent": (None, "print your rate at step = warmup for both branches: they must "
                        "be equal."),
    "warmup_parentheses": (None, "print your warmup branch at step 1 next to warmup ** -1.5."),
    "warmup_swapped": (None, "print your rate at steps 1, 2 and 4: during warmup it doubles "
                       "when the step doubles."),
    "decay_exponent": (None, "print your rate at steps 4 * warmup and 16 * warmup: the second "
                       "is half the first."),
    "precedence_half": (None, "print 4 ** {power} and 4 ** {value} in Python."),
    "max": (None, "print your rate at step 1: it should be tiny."),
    "d_model_factor": (None, "print your rate for d_model = 512 and 2048 at the same step: the "
                       "second is half the first."),
    "scaled_by_warmup": (None, "print your rate for d_model = 512 and 2048 at the same step: "
                         "the second is half the first."),
    "d_model_one_branch": (None, "print the two branches at step = warmup: equal, both "
                           "scaled by d_model^-0.5."),
    "step_shifted": (None, "print your rate at step = warmup next to (d_model * warmup) ** "
                     "-0.5."),
    "not_a_float": (None, "print type(noam_lr(1, 512, 4000)): float."),
    "step_zero": (None, "call noam_lr(0, 512, 4000): it must raise ValueError."),
    "step_one_refused": (None, "call noam_lr(1, 512, 4000): the first rate, 512^-0.5 * "
                         "4000^-1.5."),
}
_STEP_LADDER = {
    "not_zeroed": (None, "call train_step twice on the same batch with plain SGD: the second "
                   "step must move the weights as much as the first."),
    "zeroed_at_end": (None, "print a parameter's .grad right after your optimizer.step(): the "
                      "step needs it filled."),
    "zeroed_each": (None, "with two micro-batches, print a parameter's .grad after the loop "
                    "next to what the first micro-batch alone gives."),
    "stepped_each": (None, "count your optimizer.step() calls for two micro-batches: one."),
    "stepped_each_unclipped": (None, "count your optimizer.step() and clip_grad_norm_ calls for "
                               "two micro-batches and clip=1: one each."),
    "token_weighted": (None, "with two micro-batches of different lengths, does each count "
                       "the same in the gradient?"),
    "not_divided": (None, "run one batch, then the same batch twice as two micro-batches: the "
                    "step must be the same."),
    "clip_zero": (None, "call train_step with clip=0: the gradients must keep their size."),
    "clipped_each": (None, "count your clip_grad_norm_ calls for two micro-batches: one."),
    "clipped_by_value": (None, "after clipping, print the norm of all the gradients together, "
                         "torch.cat([p.grad.flatten() for p in model.parameters()]).norm(): "
                         "at most clip."),
    "not_clipped": (None, "with clip=1e-3 the step must be tiny: print the change of one "
                    "weight."),
    "counts_padding": (None, "print the loss with and without the padded positions of "
                       "tgt_out: equal."),
    "not_flattened": (None, "print logits.shape and the shape F.cross_entropy wants, (N, V)."),
    "no_smoothing": (None, "call train_step with label_smoothing=0 and 0.5: the losses must "
                     "differ."),
    "wrong_target": (None, "print batch.tgt_in[0] and batch.tgt_out[0]: which one does the "
                     "model predict?"),
    "no_step": (None, "print a parameter before and after train_step: it must change."),
    "loss_tensor": (None, "print type(train_step(...)): float."),
    "divided_twice": (None, "with two micro-batches, print each one's loss, what you "
                      "backpropagate and what you return: how many times is each divided by 2?"),
    "wrong_loss": (None, "print each micro-batch's loss and the value you return: their "
                   "mean."),
}


BATCH = Item(
    EXERCISE, "make_batch", reference_batch,
    [Case((pairs, VOCAB), names=("pairs", "vocab"), label=f"pairs={pairs}", seed=0)
     for pairs in BATCH_CASES],
    laddered(BATCH_MISTAKES, _BATCH_LADDER), same=_same_batch, what="batch", show=_shown,
    formula="src: the sources' ids; tgt_in: BOS y; tgt_out: y EOS; src_mask = padding_mask(src, "
            "PAD); tgt_mask = target_mask(tgt_in, PAD).",
    twins=(_batch_with(),),
    section=("07_training", "2. Batches for teacher forcing"),
)


# --------------------------------------------------------------------- label_smoothing_loss


def _loss(logits, target, eps, pad_id, count_pad=False, mean_over_all=False, smooth="uniform",
          smooth_pad_positions=False, reduce="mean", log=None, dim=-1):
    """Label-smoothed cross entropy with the variations mistakes make."""
    log_p = F.log_softmax(logits.double(), dim=dim) if log is None else log(logits.double())
    n_classes = logits.size(-1)
    nll = -log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    spread = {  # what the eps part of q costs at each position
        "uniform": lambda: -log_p.mean(-1),  # eps / V onto every class
        "others": lambda: -(log_p.sum(-1) + nll) / (n_classes - 1),  # eps / (V - 1), not the true
        "overwritten": lambda: -(log_p.sum(-1) + nll) / n_classes,  # eps / V, the true's lost
        "others_not_pad": lambda: -(log_p.sum(-1) + nll - log_p[..., pad_id]) / (n_classes - 2),
        "pad": lambda: -log_p[..., pad_id],  # all of eps onto the padding class
        "true": lambda: nll,  # eps put back onto the true class: no smoothing
        "dropped": lambda: 0 * nll,  # q = (1 - eps) one_hot: eps lost
        "undivided": lambda: -log_p.sum(-1),  # eps onto every class, not eps / V
    }[smooth.replace("+", "")]()
    true_part = (1 if smooth.startswith("+") else 1 - eps) * nll  # "+": q = one_hot + eps / V
    keep = (target != pad_id).double()
    if count_pad:
        keep = torch.ones_like(keep)
    per_position = true_part * keep + eps * spread * (1 if smooth_pad_positions else keep)
    if callable(reduce):  # the summed loss divided by reduce(target)
        return per_position.sum() / reduce(target)
    if reduce == "sum":
        return per_position.sum()
    if reduce == "vocab":  # also divided by V: a mean over every (position, class)
        return per_position.sum() / (keep.sum() * n_classes)
    if reduce == "sentence":  # the mean of each sentence's mean
        return (per_position.sum(-1) / keep.sum(-1)).mean()
    if reduce == "sentences":  # divided by the number of sentences
        return per_position.sum() / (target.size(0) if target.dim() > 1 else 1)
    if reduce == "negated":
        return -per_position.sum() / keep.sum()
    return per_position.sum() / (keep.numel() if mean_over_all else keep.sum())


def _loss_with(**bug):
    return lambda x, y, e, p: _loss(x, y, e, p, **bug)


def _pad_logit_blocked(logits, target, eps, pad_id):
    """The padding logit set to -inf: log p(PAD) = -inf, and q puts eps / V there."""
    log_p = F.log_softmax(logits.index_fill(-1, torch.tensor([pad_id]), float("-inf")), dim=-1)
    q = (1 - eps) * F.one_hot(target, logits.size(-1)).to(log_p.dtype) + eps / logits.size(-1)
    return -(q * log_p).sum(-1)[target != pad_id].mean()


def _kl(reduce):
    """KL(q || p) per real position (F.kl_div's), reduced by `reduce(loss, keep)`."""

    def compute(logits, target, eps, pad_id):
        log_p = F.log_softmax(logits.double(), dim=-1)
        q = (1 - eps) * F.one_hot(target, logits.size(-1)).double() + eps / logits.size(-1)
        keep = (target != pad_id).double()
        loss = F.kl_div(log_p, q, reduction="none").sum(-1) * keep
        return reduce(loss, keep)

    return compute


def _kl_masses(true, other, not_pad=False):
    """KL(q || p) with q = true(eps, V) at the true class and other(eps, V) at every other
    class (not_pad: but padding's, 0 there, as the Annotated Transformer's), averaged over the
    real target tokens: the cross entropy with that q less q's entropy."""

    def compute(logits, target, eps, pad_id):
        log_p = F.log_softmax(logits.double(), dim=-1)
        n_classes = logits.size(-1)
        t = torch.tensor(float(true(eps, n_classes)), dtype=torch.float64)
        o = torch.tensor(float(other(eps, n_classes)), dtype=torch.float64)
        log_true = log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        others = log_p.sum(-1) - log_true - (log_p[..., pad_id] if not_pad else 0)
        n_others = n_classes - (2 if not_pad else 1)
        per_position = (torch.xlogy(t, t) + n_others * torch.xlogy(o, o)
                        - t * log_true - o * others)
        keep = (target != pad_id).double()
        return (per_position * keep).sum() / keep.sum()

    return compute


def _kl_family():
    """KL divergence with the right q (reduced three ways), and with q's masses off by a term
    (any member of masses_off's family, and the Annotated Transformer's eps / (V - 2) with the
    padding class left out): the mass named when it differs."""
    right = tuple(member(c, mass="", mass_hint="", mass_more="") for c in (
        _kl(lambda loss, keep: loss.sum() / keep.sum()), _kl(lambda loss, keep: loss.sum()),
        _kl(lambda loss, keep: loss.sum() / loss.size(0))))
    off = [(t_name, t, o_name, o, False) for o_name, o, t_name, t in _mass_members()
           if (t_name, o_name) != ("1", "0")]  # q one-hot: no entropy, KL is the cross entropy
    off.append(("1 - eps", _TRUE_SHARES["1 - eps"], "eps / (V - 2)", _SPREADS["eps / (V - 2)"], True))
    return right + tuple(
        member(_kl_masses(t, o, not_pad),
               mass=f", and q's masses off (yours: {t_name} at the true class, {o_name} at "
                    f"every other class{' but padding, 0 there' if not_pad else ''})",
               mass_hint=" Your q is off too: the true class gets 1 - eps + eps / V, every other "
                         "class eps / V, padding's included, and q sums to 1.",
               mass_more=" Then print q for one position next to 1 - eps + eps / V (the true "
                         "class) and eps / V (every other).")
        for t_name, t, o_name, o, not_pad in off)


def _narrow_one_hot(logits, target, eps, pad_id):
    """q built with F.one_hot(target): too narrow when the largest target id is below V - 1."""
    log_p = F.log_softmax(logits, dim=-1)
    q = (1 - eps) * F.one_hot(target).to(log_p.dtype) + eps / logits.size(-1)
    return -(q * log_p).sum(-1)[target != pad_id].mean()


COUNTS_PADDING = Mistake(
    "counts_padding", "Loss counts padding",
    "positions whose target is padding are not part of the output: leave them out of the "
    "loss, and average over the real target tokens only.",
    (_loss_with(count_pad=True), _loss_with(mean_over_all=True)),
)
NO_GRADIENT = Mistake(
    "no_gradient", "No gradient flows back to the logits",
    "training needs it; stay in torch (no .item(), .detach(), .numpy() or tensors rebuilt "
    "from values).",
    more=NO_GRADIENT_MORE,
)
def _masses(true, other):
    """The loss of smoothed targets with q = true(eps, V) at the true class and other(eps, V)
    at every other class, averaged over the real target tokens."""

    def compute(logits, target, eps, pad_id):
        log_p = F.log_softmax(logits.double(), dim=-1)
        n_classes = logits.size(-1)
        t, o = true(eps, n_classes), other(eps, n_classes)
        log_true = log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        per_position = -(t * log_true + o * (log_p.sum(-1) - log_true))
        keep = (target != pad_id).double()
        return (per_position * keep).sum() / keep.sum()

    return compute


# A mass off by a term: eps spread with the wrong constant, the true class's share written
# with the wrong term (each written over q's fill, or added to it).
_SPREADS = {"eps / V": lambda e, v: e / v, "eps / (V - 1)": lambda e, v: e / (v - 1),
            "eps / (V - 2)": lambda e, v: e / (v - 2), "1 / V": lambda e, v: 1 / v,
            "1 / (V - 1)": lambda e, v: 1 / (v - 1), "eps": lambda e, v: e, "0": lambda e, v: 0.0}
_TRUE_SHARES = {"1 - eps": lambda e, v: 1 - e, "1": lambda e, v: 1.0,
                "1 - eps / V": lambda e, v: 1 - e / v, "1 - eps / (V - 1)": lambda e, v: 1 - e / (v - 1),
                "1 - 1 / V": lambda e, v: 1 - 1 / v, "eps": lambda e, v: e}


def _mass_members():
    """(other's name, other, true's name, true) of every mass off by a term."""
    members = []
    for (o_name, o), (t_name, t) in product(_SPREADS.items(), _TRUE_SHARES.items()):
        for added in (False, True):
            if added and o_name == "0":
                continue
            true = (lambda e, v, t=t, o=o: t(e, v) + o(e, v)) if added else t
            true_name = f"{t_name} + {o_name}" if added else t_name
            if (o_name, true_name) == ("eps / V", "1 - eps + eps / V"):
                continue  # the right masses
            members.append((o_name, o, true_name, true))
    return members


def _mass_family():
    return tuple(member(_masses(true, o), true=true_name, other=o_name)
                 for o_name, o, true_name, true in _mass_members())


def _log_of_softmax_loss(logits, target, eps, pad_id, kept=lambda p: p, log="softmax"):
    """The smoothed loss computed in the logits' own dtype from log p made as `log` says:
    "softmax": log(kept(softmax(logits))), `kept` what is done to the probabilities before the
    log (clipped, an epsilon added); "exp": logits - log(sum(exp(logits))), no maximum
    subtracted; "log_softmax": F.log_softmax, right but for the dtype."""
    log_p = {"softmax": lambda: kept(logits.softmax(-1)).log(),
             "exp": lambda: logits - logits.exp().sum(-1, keepdim=True).log(),
             "log_softmax": lambda: F.log_softmax(logits, dim=-1)}[log]()
    n_classes = logits.size(-1)
    q = torch.full_like(log_p, eps / n_classes).scatter(-1, target[..., None],
                                                         1 - eps + eps / n_classes)
    loss = -(q * log_p).sum(-1)  # (...)
    return loss[target != pad_id].mean()


LOSS_MISTAKES = (
    Mistake(
        "builtin", "Built-in loss called",
        "you called F.cross_entropy; the exercise is to build the smoothed targets q and the "
        "cross entropy -sum(q * log p) yourself (check it equals F.cross_entropy afterwards).",
        uses=("cross_entropy",),
    ),
    COUNTS_PADDING,
    Mistake(
        "onto_true_class", "Smoothing mass put onto the true class",
        "the eps taken from the true class must be spread over the vocabulary (eps / V onto "
        "every class); your targets are still one-hot, as if eps were 0.",
        (_loss_with(smooth="true"),),
    ),
    Mistake(
        "onto_padding", "Smoothing mass put onto padding",
        "spread eps / V over every class at the real target positions; do not give the eps "
        "to the padding class, and give padding positions no target at all.",
        (_loss_with(smooth="pad"), _loss_with(smooth_pad_positions=True)),
    ),
    Mistake(
        "other_classes_only", "Smoothing spread over the other classes only{also}",
        "this course follows PyTorch: eps / V onto every class, the true one included "
        "(q_true = 1 - eps + eps / V), so the loss equals F.cross_entropy(..., "
        "label_smoothing=eps). The Annotated Transformer spreads eps / (V - 2) instead.{more}",
        tuple(member(_loss_with(smooth=smooth, **reduce), also=also, more=more)
              for reduce, also, more in (
                  ({}, "", ""),
                  ({"reduce": "sum"}, ", and the loss summed instead of averaged",
                   " Then divide the summed loss by the number of real (non-padding) target "
                   "tokens, so that it does not grow with the batch."))
              for smooth in ("others", "others_not_pad")),
    ),
    Mistake(
        "true_share_overwritten", "True class's eps / V share overwritten",
        "q_true = 1 - eps + eps / V: the true class keeps its share of the smoothing too. "
        "Filling q with eps / V and then writing 1 - eps at the true class (scatter_, or "
        "q[..., y] = 1 - eps) drops that share, so q sums to less than 1: add 1 - eps there "
        "(scatter_add_, or (1 - eps) * one_hot + eps / V).",
        (_loss_with(smooth="overwritten"),),
    ),
    Mistake(
        "mass_not_taken", "Smoothing mass added without taking it from the true class",
        "q = (1 - eps) one_hot(y) + eps / V: the true class gives up eps, so that q still sums "
        "to 1. one_hot(y) + eps / V sums to 1 + eps.",
        (_loss_with(smooth="+uniform"),),
    ),
    Mistake(
        "mass_dropped", "Smoothing mass dropped",
        "q = (1 - eps) one_hot(y) + eps / V: the eps taken from the true class goes to every "
        "class, eps / V each; (1 - eps) one_hot(y) alone sums to 1 - eps.",
        (_loss_with(smooth="dropped"),),
    ),
    Mistake(
        "eps_not_divided", "eps not divided by V",
        "each class gets eps / V (V = logits.size(-1)), so that the smoothed targets sum to 1: "
        "q = (1 - eps) one_hot(y) + eps / V.",
        (_loss_with(smooth="undivided"),),
    ),
    Mistake(
        "one_hot_width", "one_hot without num_classes",
        "F.one_hot(target) is as wide as the largest id in target + 1, not the vocabulary: "
        "F.one_hot(target, num_classes=logits.size(-1)).",
        (_narrow_one_hot,),
    ),
    Mistake(
        "probabilities", "Probabilities used instead of log-probabilities",
        "cross entropy is -sum_v q_v log p_v: multiply q by log_softmax(logits), not by "
        "softmax(logits).",
        (_loss_with(log=lambda x: x.softmax(-1)),),
    ),
    Mistake(
        "summed", "Loss summed instead of averaged",
        "divide by the number of real (non-padding) target tokens, so the loss does not grow "
        "with the batch and the learning rate means the same for every batch.",
        (_loss_with(reduce="sum"),),
    ),
    Mistake(
        "per_sentence", "Averaged per sentence, then over the batch",
        "average over the real target TOKENS of the whole batch: sum the losses of every "
        "non-padding position, divide by their number. A mean of sentence means weighs the "
        "tokens of short sentences more.",
        (_loss_with(reduce="sentence"),),
    ),
    Mistake(
        "kl_divergence", "KL divergence instead of cross entropy (the entropy of q left "
        "out){mass}",
        "this loss is the cross entropy H(q, p) = -sum q log p, as F.cross_entropy(..., "
        "label_smoothing=eps) computes it; KL(q || p) (nn.KLDivLoss, F.kl_div, as in the "
        "Annotated Transformer) is smaller by the entropy of q, -sum q log q.{mass_hint}",
        _kl_family(),
    ),
    Mistake(
        "divided_by_sentences", "Divided by the number of sentences",
        "divide the summed loss by the number of real target TOKENS (target != pad_id), not "
        "by the number of sentences.",
        (_loss_with(reduce="sentences"),),
    ),
    Mistake(
        "pad_logit_blocked", "Padding class given log-probability -inf",
        "q gives eps / V to every class, padding included, so -inf at the padding logit makes "
        "the loss infinite: leave the logits as they are (padding positions are left out of "
        "the mean instead).",
        (_pad_logit_blocked,),
    ),
    Mistake(
        "over_vocabulary", "Averaged over the vocabulary too",
        "the cross entropy of one position is a SUM over the vocabulary, -sum_v q_v log p_v; "
        "only the positions are averaged (.sum(-1), then the mean over real tokens).",
        (_loss_with(reduce="vocab"),),
    ),
    Mistake(
        "sign", "Sign flipped",
        "cross entropy is -sum q log p: log p is negative, so the loss is positive and "
        "training makes it smaller.",
        (_loss_with(reduce="negated"),),
    ),
    Mistake(
        "no_log_softmax", "Logits used as log-probabilities",
        "take log_softmax(logits, dim=-1) first: the logits are unnormalized scores, not "
        "log-probabilities.",
        (_loss_with(log=lambda x: x), _loss_with(log=lambda x: torch.log(x.clamp_min(1e-30)))),
    ),
    Mistake(
        "log_softmax_axis", "log_softmax over the wrong axis",
        "normalize over the vocabulary, the last axis: F.log_softmax(logits, dim=-1).",
        tuple(_loss_with(dim=d) for d in (0, 1, -2)),
    ),
    Mistake(
        "pad_id_ignored", "pad_id ignored",
        "use the pad_id argument to find the padding, not the number 0.",
        (lambda x, y, e, p: _loss(x, y, e, 0),),
    ),
    Mistake(
        "log_of_softmax", "Log-probabilities made through exp, not by log_softmax",
        "softmax of large logits underflows to 0 for the unlikely classes (log(0) = -inf), and "
        "exp of large logits without the maximum subtracted overflows to inf: take "
        "F.log_softmax(logits, dim=-1), which computes logits - logsumexp(logits) stably, never "
        "forming the probabilities.",
        (_log_of_softmax_loss, functools.partial(_log_of_softmax_loss, log="exp")),
    ),
    Mistake(
        "low_precision_loss", "Loss computed in the logits' low precision: compute it in float32",
        "a loss in bfloat16 or float16 keeps 2 or 3 digits: its sum over thousands of tokens "
        "loses the small terms, and mixed precision's rule is to compute losses in float32: "
        "logits.to(torch.promote_types(logits.dtype, torch.float32)) before log_softmax.",
        (functools.partial(_log_of_softmax_loss, log="log_softmax"),),
    ),
    Mistake(
        "probabilities_clipped", "Probabilities {how} before the log",
        "a log of probabilities {how} (Keras's categorical_crossentropy clips to [1e-7, "
        "1 - 1e-7]) is not the loss: each term is capped near -log({c:g}), so a confident wrong "
        "answer costs too little. Take F.log_softmax(logits, dim=-1), exact whatever the logits.",
        tuple(member(lambda lg, t, e, pad, kept=kept: _log_of_softmax_loss(lg, t, e, pad, kept),
                     how=how.format(c=c), c=c)
              for c in (1e-7, 1e-8, 1e-6, 1e-9, 1e-10, 1e-12, 1e-5)
              for how, kept in (("clipped to [{c:g}, 1 - {c:g}]", lambda p, c=c: p.clamp(c, 1 - c)),
                                ("clipped at {c:g}", lambda p, c=c: p.clamp(min=c)),
                                ("plus {c:g}", lambda p, c=c: p + c))),
    ),
    Mistake(
        "wrong_count", "Summed loss divided by {count}, not by the number of real target tokens",
        "the loss is a mean over the real target tokens: divide the summed loss by how many "
        "targets are not pad_id, whatever the length of the sequences.",
        tuple(member(_loss_with(reduce=count), count=name) for name, count in (
            ("the sequence length", lambda t: t.size(-1)),
            ("the sequence length - 1", lambda t: t.size(-1) - 1))),
    ),
    Mistake(
        "masses_off", "Smoothed target masses off by a term (yours: q = {true} at the true "
        "class, {other} at every other class)",
        "the smoothed targets are q = (1 - eps) one_hot(y) + eps / V: the true class gets "
        "1 - eps + eps / V, every other class eps / V, and q sums to 1 at every position.",
        _mass_family(),
    ),
)


def _loss_case(seed, shape, vocab, eps, pad_id=PAD, lengths=None, top=None, scale=2.0,
               dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(*shape, vocab, generator=g) * scale).to(dtype)
    target = torch.randint(0, top or vocab, shape, generator=g)
    target[target == pad_id] = (pad_id + 1) % vocab
    if lengths is not None:  # rows padded after their length
        target[torch.arange(shape[-1]) >= torch.tensor(lengths)[..., None]] = pad_id
    label = describe(logits=logits, target=target, eps=eps, pad_id=pad_id)
    label += f", logits in {str(dtype).removeprefix('torch.')}" if dtype != torch.float32 else ""
    if scale > 2:
        label += f" (logits as large as {float(logits.abs().max()):.0f})"
    return Case((logits, target, eps, pad_id), names=("logits", "target", None, None), seed=seed,
                label=label)


def _number(value):
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _same_loss(actual, predicted):
    """The same single number (a 0-d tensor, or a float from a mistake's computation)."""
    if not isinstance(actual, torch.Tensor) or actual.numel() != 1:
        return False
    return math.isclose(actual.item(), _number(predicted), rel_tol=1e-4, abs_tol=1e-6)


def _logits_gradient(fn, args, case):
    logits, *rest = args
    logits.requires_grad_()
    fn(logits, *rest).backward()
    return logits.grad


def _detached(how):
    def compute(logits, target, eps, pad_id):
        return _logits_gradient(lambda *a: how(reference_loss(*a)), (logits, target, eps, pad_id), None)

    return compute


def _same_gradient(actual, expected):
    return isinstance(actual, torch.Tensor) and actual.shape == expected.shape and torch.allclose(
        actual, expected, rtol=1e-3, atol=1e-6)


_GRADIENT_CASE = _loss_case(0, (3, 6), 9, 0.1, lengths=[6, 2, 4])
LOSS_CASES = [
    _loss_case(0, (3, 6), 9, 0.1, lengths=[6, 2, 4]),
    _loss_case(1, (2, 5), 7, 0.3, lengths=[3, 5]),
    _loss_case(2, (4, 3), 11, 0.2, lengths=[3, 1, 2, 3], pad_id=5),
    _loss_case(3, (8,), 6, 0.1),  # (N, V) logits, no padding
    _loss_case(4, (2, 2, 4), 5, 0.0, lengths=[[4, 1], [2, 3]]),
    _loss_case(5, (2, 4), 8, 0.1, lengths=[4, 2], top=5),  # ids below 5 of 8
    # large logits: softmax underflows to 0 in float32, and log(0) = -inf
    _loss_case(6, (2, 5), 9, 0.1, scale=100.0),  # no padding: 0 * inf would be NaN
    Case(_GRADIENT_CASE.args, names=_GRADIENT_CASE.names, seed=0, run=_logits_gradient,
         label=_GRADIENT_CASE.label + ", backward from the loss", what="gradient of the logits",
         same=_same_gradient,
         mistakes=(NO_GRADIENT.computing(_detached(lambda t: t.detach()),
                                         _detached(lambda t: t.item())),)),
    _loss_case(7, (2, 5), 9, 0.1, lengths=[5, 3], dtype=torch.float64),  # float64 logits
    _loss_case(8, (2, 5), 9, 0.1, lengths=[5, 3], dtype=torch.bfloat16),  # a float32 loss
]
LOSS = Item(
    EXERCISE, "label_smoothing_loss", reference_loss, LOSS_CASES, laddered(LOSS_MISTAKES, _LOSS_LADDER),
    same=_same_loss, what="loss",
    formula="Build q = (1 - eps) one_hot(y) + eps / V and average -sum(q * log_softmax(logits)) "
            "over the real target tokens.",
    twins=(_loss_with(),),
    section=("07_training", "3. The loss: padding ignored, labels smoothed"),
)


# ----------------------------------------------------------------------------------- noam_lr


def _noam(step, d_model, warmup, warm=-1.5, decay=-0.5, d=-0.5, pick=min, shift=0, factor="all",
          grouped=False, swapped=False, halved=(), width=None, floor=None, branch=None):
    """halved: the powers written x ** -1/2, which is (x ** -1) / 2 ("d", "decay"), or
    warmup ** -3/2, which is (warmup ** -3) / 2 ("warm"); width:
    what stands for d_model in the scale ("warmup"); floor: the shifted step kept at least
    this (step - 1, but 1 at step 1); branch: the one branch ("warm" or "decay") whose step is
    shifted (default: both)."""
    given = step
    step = step + shift if floor is None else max(step + shift, floor)
    d_model = {None: d_model, "warmup": warmup}[width]
    scale = d_model**-1 / 2 if "d" in halved else d_model**d
    fall_step, warm_step = {None: (step, step), "warm": (given, step), "decay": (step, given)}[branch]
    fall = fall_step**-1 / 2 if "decay" in halved else fall_step**decay
    warmup_branch = (warm_step * warmup) ** warm if grouped else warm_step * warmup**warm
    if "warm" in halved:
        warmup_branch = step * warmup**-3 / 2
    if swapped:  # warmup * step^-1.5
        warmup_branch = warmup * step**warm
    if factor == "all":
        return scale * pick(fall, warmup_branch)
    if factor == "decay":
        return pick(scale * fall, warmup_branch)
    return pick(fall, scale * warmup_branch)


def _without_step_one(case):
    """The rates' case without its steps 1 (what code that refuses step 1 gets right)."""
    kept = [i for i, (step, _, _) in enumerate(case.args[0]) if step != 1]
    return dataclasses.replace(case, args=([case.args[0][i] for i in kept],),
                               parts=tuple(case.parts[i] for i in kept))


def _all(**variant):
    return lambda cases: [_noam(*case, **variant) for case in cases]


NOAM_MISTAKES = (
    Mistake(
        "warmup_exponent", "Warmup exponent wrong",
        "during warmup the rate grows linearly: step * warmup^-1.5, so that at step = warmup "
        "both branches meet at warmup^-0.5.",
        tuple(_all(warm=w) for w in (-0.5, -1.0, 1.5, -2.0, 0.5)),
    ),
    Mistake(
        "warmup_parentheses", "Warmup branch parenthesized as (step * warmup)^-1.5",
        "the warmup branch is step * warmup^-1.5: only warmup is raised to the power -1.5, "
        "then multiplied by step.",
        (_all(grouped=True),),
    ),
    Mistake(
        "warmup_swapped", "step and warmup swapped in the warmup branch",
        "the warmup branch grows with the step: step * warmup^-1.5, not warmup * step^-1.5.",
        (_all(swapped=True),),
    ),
    Mistake(
        "decay_exponent", "Decay exponent wrong",
        "after warmup the rate falls as the inverse square root of the step: step^-0.5.",
        tuple(_all(decay=e) for e in (-1.0, 0.5, -1.5, -2.0)),
    ),
    Mistake(
        "precedence_half", "{written} computes {computed}",
        "** binds tighter than /: {example} Write the power as a decimal ({decimal}) or in "
        "parentheses.",
        tuple(member(_all(halved=h), written=w, computed=c, example=e, decimal=d, power=pw,
                     value=v)
              for h, w, c, e, d, pw, v in (
                  *(((h, "x ** -1/2", "(x ** -1) / 2",
                      "step ** -1/2 is 1 / (2 * step), not 1 / sqrt(step).",
                      "step ** -0.5, d_model ** -0.5", "-1/2", "-0.5"))
                    for h in (("d", "decay"), ("decay",), ("d",))),
                  *(((h, "warmup ** -3/2", "(warmup ** -3) / 2",
                      "warmup ** -3/2 is 1 / (2 * warmup^3), not warmup^-1.5.",
                      "warmup ** -1.5", "-3/2", "-1.5"))
                    for h in (("warm",), ("d", "decay", "warm"))),
              )),
    ),
    Mistake(
        "max", "max instead of min",
        "the rate is the SMALLER of the two branches: the warmup line first, then the decay.",
        (_all(pick=max),),
    ),
    Mistake(
        "d_model_factor", "d_model factor wrong: {which}",
        "the whole schedule is scaled by d_model^-0.5: wider models take smaller steps.{why}",
        tuple(member(_all(**variant), which=which, why=why) for variant, which, why in (
            ({"d": 0.0}, "missing", ""),
            ({"d": 0.5}, "d_model^0.5, the exponent's sign flipped", ""),
            ({"d": -1.0}, "d_model^-1, the exponent -1 instead of -0.5", ""),
            ({"d": -1.5}, "d_model^-1.5, the exponent -1.5 instead of -0.5", ""),
            ({"d": 0.5, "width": "warmup"}, "replaced by warmup^0.5",
             " warmup^0.5 makes the peak rate 1 whatever the model (ESPnet's WarmupLR, which "
             "multiplies by a learning rate of its own); the paper's peak is "
             "(d_model * warmup)^-0.5."),
        )),
    ),
    Mistake(
        "scaled_by_warmup", "Schedule scaled by warmup^-0.5 instead of d_model^-0.5",
        "the factor in front of the min is the model's width, d_model^-0.5: warmup appears only "
        "inside, in step * warmup^-1.5.",
        (_all(width="warmup"),),
    ),
    Mistake(
        "d_model_one_branch", "d_model factor on one branch only",
        "d_model^-0.5 multiplies the min of both branches: lrate = d_model^-0.5 * "
        "min(step^-0.5, step * warmup^-1.5).",
        (_all(factor="decay"), _all(factor="warmup")),
    ),
    Mistake(
        "step_one_refused", "Step 1 refused: the check of the step excludes it",
        "the paper counts steps from 1: step 1 is the first rate, and only a step below 1 is an "
        "error: raise for step < 1, not step <= 1.",
        probe=lambda case, error: _without_step_one(case),
    ),
    Mistake(
        "step_shifted", "Step shifted by one",
        "the formula takes the step as it is given, counting from 1: no step + 1 or step - 1 "
        "inside, in either branch, not even one kept at 1 for the first step (a scheduler "
        "counting from 0 passes step + 1 itself).",
        tuple(_all(shift=shift, branch=branch) for branch in (None, "warm", "decay")
              for shift in (1, -1)) + (_all(shift=-1, floor=1),),
    ),
)
NOT_A_FLOAT = Mistake(
    "not_a_float", "Rate returned as a tensor, not a float",
    "noam_lr returns the learning rate as a Python float (optimizers and LambdaLR take "
    "numbers): compute it with Python's ** and min (or math.sqrt), or return float(rate).",
)
STEP_ZERO = Mistake(
    "step_zero", "Step 0 not handled",
    "the paper counts steps from 1: at step 0, step^-0.5 divides by zero. Raise a ValueError "
    "for step < 1 (a scheduler that counts from 0 must pass step + 1).",
)
# (step, d_model, warmup): the paper's settings on both sides of the warmup, and small ones.
NOAM_CASES = [(1, 512, 4000), (100, 512, 4000), (3999, 512, 4000), (4000, 512, 4000),
              (4001, 512, 4000), (100_000, 512, 4000), (10, 64, 100), (400, 64, 100),
              (1, 16, 1)]


def _rates(fn, args, case):
    """The learner's rate for every (step, d_model, warmup), as floats where they are numbers."""
    rates = []
    for step, d_model, warmup in args[0]:
        value = fn(step, d_model, warmup)
        number = _number(value)
        rates.append(value if number is None else number)
    return rates


def _same_rates(actual, predicted):
    return isinstance(actual, list) and len(actual) == len(predicted) and all(
        isinstance(a, float) and math.isclose(a, p, rel_tol=1e-6) for a, p in zip(actual, predicted))


def _first_wrong_rate(case, result, expected):
    for (step, d_model, warmup), got, want in zip(case.args[0], result, expected):
        if not (isinstance(got, float) and math.isclose(got, want, rel_tol=1e-6)):
            shown = f"{got:.6g}" if isinstance(got, float) else repr(got)
            return f"\n  step={step}, d_model={d_model}, warmup={warmup}: got {shown}, expected {want:.6g}"
    return ""


def _check_float(item, target):
    """After the rates are right: each is a Python float, not a tensor."""
    outcome = call(target, 4000, 512, 4000)
    if outcome.error is None and not isinstance(outcome.value, (float, int)):
        NOT_A_FLOAT.fail(f"  step=4000, d_model=512, warmup=4000: it returned "
                         f"{type(outcome.value).__name__} {outcome.value!r}")


def _check_step_zero(item, target):
    """After the rates are right: step 0 must raise a ValueError."""
    outcome = call(target, 0, 512, 4000)
    if isinstance(outcome.error, ValueError):
        return
    fail_if_stopped(outcome, "noam_lr", "noam_lr", "step=0, d_model=512, warmup=4000")
    got = (f"it raised {type(outcome.error).__name__}" if outcome.error is not None
           else f"it returned {outcome.value!r}")
    STEP_ZERO.fail(f"  step=0, d_model=512, warmup=4000: {got}")


NOT_A_FLOAT, STEP_ZERO = laddered((NOT_A_FLOAT, STEP_ZERO), _NOAM_LADDER)  # reported by `after`
NOAM = Item(
    EXERCISE, "noam_lr", reference_noam,
    [Case((NOAM_CASES,), label=f"{len(NOAM_CASES)} (step, d_model, warmup), from (1, 512, 4000) "
          "to (100000, 512, 4000)", run=_rates, seed=0,
          parts=tuple(f"the rate at step={s}, d_model={d}, warmup={w}" for s, d, w in NOAM_CASES))],
    laddered(NOAM_MISTAKES, _NOAM_LADDER) + (NOT_A_FLOAT, STEP_ZERO), same=_same_rates,
    what="rates", show=_first_wrong_rate,
    formula="Compute d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).",
    after=(_check_float, _check_step_zero),
    twins=(_all(),),
    section=("07_training", "4. The learning-rate schedule"),
)


# -------------------------------------------------------------------------------- train_step

LR = 0.1  # plain SGD: every update is -LR * gradient


def _model():
    """The same small random Transformer on every call (the caller's random state left alone)."""
    config = TransformerConfig.tiny(len(VOCAB), d_model=16, n_heads=2, d_ff=32, n_layers=1,
                                    dropout=0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Transformer(config)


def _flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _leftover(model):
    """Gradients left in the model by whatever ran before (an evaluation's backward, say)."""
    g = torch.Generator().manual_seed(99)
    for p in model.parameters():
        p.grad = 0.1 * torch.randn(p.shape, generator=g)
    return model


def _steps_of(fn, args, case):
    """Two steps of `fn` on a fresh model with gradients left in it: (the weights after each
    step, the returned losses)."""
    steps, eps, clip = args
    model = _leftover(_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    weights, losses = [], []
    for batches in steps:
        losses.append(fn(model, list(batches), optimizer, eps, clip))
        weights.append(_flat(model))
    return weights, losses


def _run(steps, eps, clip, zero="start", divide=True, clips=True, smoothing=True,
         ignore_pad=True, clip_zero=False, clip_each=False, step_each=False, target="tgt_out",
         step=True, returns="mean", by_value=False, flat=True, per_token=False):
    """Train _model() with SGD on `steps` (lists of batches) the way a mistake would: the
    weights after each step and the returned losses. zero: "start" (right), "never", "each"
    (micro-batch) or "end" (after the step). per_token: each micro-batch's summed loss divided
    by the real tokens of all of them (a mean over tokens, not over micro-batches). divide:
    True (right), False, or "twice" (each loss backpropagated divided by len(batches)**2)."""
    model = _leftover(_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    weights, losses = [], []
    for batches in steps:
        if zero == "start":
            optimizer.zero_grad()
        total, kept = 0.0, []
        tokens = sum(int((b.tgt_out != PAD).sum()) for b in batches)
        for batch in batches:
            if zero == "each":
                optimizer.zero_grad()
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
            wanted = getattr(batch, target)
            loss = F.cross_entropy(logits.flatten(0, 1) if flat else logits,
                                   wanted.flatten() if flat else wanted,
                                   label_smoothing=eps if smoothing else 0.0,
                                   ignore_index=PAD if ignore_pad else -100,
                                   reduction="sum" if per_token else "mean")
            if per_token:
                loss = loss * len(batches) / tokens  # so that the mean below is sum / tokens
            (loss / {True: len(batches), False: 1, "twice": len(batches) ** 2}[divide]).backward()
            total += loss.item()
            kept.append(loss)
            if (clip_each or step_each) and clip > 0 and clips:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            if step_each:
                optimizer.step()
        if clips and not clip_each and not step_each and (clip > 0 or clip_zero):
            if by_value:
                torch.nn.utils.clip_grad_value_(model.parameters(), clip)
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        if step and not step_each:
            optimizer.step()
        if zero == "end":
            optimizer.zero_grad()
        weights.append(_flat(model))
        losses.append({"mean": total / len(batches), "last": kept[-1].item(),
                       "last_divided": kept[-1].item() / len(batches), "sum": total,
                       "divided_twice": total / len(batches) ** 2,
                       "tensor": sum(kept) / len(kept)}[returns])
    return weights, losses


def _variant(**kw):
    return lambda steps, eps, clip: _run(steps, eps, clip, **kw)


_START = _flat(_model())


def _same_update(w, e):
    """The same weights: their change from the start equal to 0.1% of its size (a weight
    changes by ~1e-4 in a step, so comparing the weights themselves would see nothing)."""
    if not isinstance(w, torch.Tensor) or w.shape != e.shape:
        return False
    change = e - _START
    return bool((w - e).norm() <= 1e-3 * change.norm() + 1e-9)


def _same_training(actual, expected):
    """The same weights after each step, and the same losses returned (Python floats)."""
    try:
        weights, losses = actual
    except (TypeError, ValueError):
        return False
    return (len(weights) == len(expected[0]) and all(map(_same_update, weights, expected[0]))
            and all(_same_value(got, want) for got, want in zip(losses, expected[1])))


def _same_value(got, want):
    if isinstance(want, torch.Tensor):
        return isinstance(got, torch.Tensor) and _same_loss(got, want)
    return (isinstance(got, float) and not isinstance(got, bool)
            and math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-7))


STEP_MISTAKES = (
    Mistake(
        "not_zeroed", "Gradients not zeroed between steps",
        "backward() ADDS to .grad: without optimizer.zero_grad() at the start of each step, "
        "every step also applies the gradients of all the steps before it.",
        (_variant(zero="never"),),
    ),
    Mistake(
        "zeroed_at_end", "Gradients zeroed after the step instead of before",
        "zero them at the start of train_step, before the backward passes: gradients that are "
        "already there on entry (left by an evaluation's backward, or anything before) would "
        "otherwise be added into this step.",
        (_variant(zero="end"),),
    ),
    Mistake(
        "zeroed_each", "Gradients zeroed for every micro-batch",
        "zero the gradients once per optimizer step, before the micro-batches: zeroing before "
        "each one throws away all but the last, so accumulation does nothing.",
        (_variant(zero="each"), _variant(zero="each", divide=False)),
    ),
    Mistake(
        "stepped_each", "Optimizer stepped for every micro-batch",
        "the micro-batches make ONE step together: backpropagate each of them, then clip and "
        "call optimizer.step() once, after the loop.",
        (_variant(step_each=True), _variant(step_each=True, divide=False),
         _variant(step_each=True, zero="each"), _variant(step_each=True, zero="each", divide=False)),
    ),
    Mistake(
        "token_weighted", "Micro-batches weighted by their number of tokens",
        "train_step averages the micro-batches' MEAN losses, each micro-batch counting the same: "
        "backpropagate loss / len(batches), loss being the mean over that micro-batch's tokens "
        "(summing every token's loss and dividing by all the tokens weights big micro-batches more).",
        (_variant(per_token=True),),
    ),
    Mistake(
        "not_divided", "Micro-batch losses not divided by their number",
        "the accumulated gradient must be the MEAN over the micro-batches: backpropagate "
        "loss / len(batches), or the step grows with the number of micro-batches.",
        (_variant(divide=False),),
    ),
    Mistake(
        "divided_twice", "Loss divided by the number of micro-batches twice",
        "divide by len(batches) once: each micro-batch's loss / len(batches) for the gradient "
        "(backward), and the mean of the undivided losses for the value returned. Dividing a "
        "loss that is already divided gives the mean / len(batches).",
        (_variant(returns="divided_twice"), _variant(divide="twice"),
         _variant(divide="twice", returns="divided_twice")),
    ),
    Mistake(
        "clip_zero", "clip=0 clips every gradient to 0",
        "clip=0 means no clipping: call clip_grad_norm_ only when clip > 0.",
        (_variant(clip_zero=True),),
    ),
    Mistake(
        "clipped_each", "Gradients clipped for every micro-batch",
        "clip the accumulated gradient once, after every micro-batch's backward pass and "
        "before optimizer.step().",
        (_variant(clip_each=True),),
    ),
    Mistake(
        "clipped_by_value", "Gradients clipped by value instead of by norm",
        "clip_grad_value_ clips every entry to [-clip, clip]; the exercise clips the total norm "
        "of all the gradients to `clip`: torch.nn.utils.clip_grad_norm_(model.parameters(), clip).",
        (_variant(by_value=True),),
    ),
    Mistake(
        "not_clipped", "Gradients not clipped",
        "between backward() and optimizer.step(), scale the gradients down to a total norm "
        "of at most `clip`: torch.nn.utils.clip_grad_norm_(model.parameters(), clip).",
        (_variant(clips=False),),
    ),
    COUNTS_PADDING.computing(_variant(ignore_pad=False)),
    Mistake(
        "not_flattened", "Logits given to cross_entropy unflattened",
        "F.cross_entropy takes classes on axis 1: flatten the logits to (batch * tgt_len, V) "
        "and the targets to (batch * tgt_len,) (or use your label_smoothing_loss).",
        (_variant(flat=False),),
    ),
    Mistake(
        "no_smoothing", "Label smoothing not used in the loss",
        "pass label_smoothing to the loss (your label_smoothing_loss, or F.cross_entropy(..., "
        "label_smoothing=label_smoothing, ignore_index=PAD)).",
        (_variant(smoothing=False),),
    ),
    Mistake(
        "wrong_target", "Loss computed against the decoder input",
        "the model predicts batch.tgt_out (y EOS), one step ahead of what it reads, "
        "batch.tgt_in (BOS y): the loss compares the logits with tgt_out.",
        (_variant(target="tgt_in"),),
    ),
    Mistake(
        "no_step", "The weights did not change",
        "no gradient reached them, or the optimizer made no step: backpropagate the losses "
        "themselves (a tensor rebuilt from .item() values has no graph), then call "
        "optimizer.step() after the backward passes and the clipping.",
        (_variant(step=False), _variant(step=False, divide=False)),
    ),
    Mistake(
        "loss_tensor", "Loss returned as a tensor",
        "return the loss as a Python float (loss.item()): a tensor keeps its whole graph in "
        "memory, and a training loop that keeps the losses runs out of it.",
        (_variant(returns="tensor"),),
    ),
    Mistake(
        "wrong_loss", "Wrong loss returned",
        "return the mean of the micro-batches' losses, each taken before dividing it by "
        "len(batches) (the weights are right).",
        (_variant(returns="last"), _variant(returns="last_divided"), _variant(returns="sum")),
    ),
    Mistake(
        "stepped_each_unclipped", "Optimizer stepped for every micro-batch, and the gradients "
        "never clipped",
        "two mistakes: the micro-batches make ONE step together (backpropagate each of them, "
        "then call optimizer.step() once, after the loop, with zero_grad() once before it), and "
        "between the backward passes and the step, clip the total norm to `clip`: "
        "torch.nn.utils.clip_grad_norm_(model.parameters(), clip) when clip > 0.",
        (_variant(step_each=True, clips=False), _variant(step_each=True, zero="each", clips=False),
         _variant(step_each=True, divide=False, clips=False),
         _variant(step_each=True, zero="each", divide=False, clips=False)),
    ),
)


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


def _step_case(steps, eps, clip):
    sizes = [[b.src.size(0) for b in batches] for batches in steps]
    return Case((steps, eps, clip), names=("batches", None, None), run=_steps_of, seed=0,
                label=f"micro-batches of {sizes} examples, label_smoothing={eps}, clip={clip}")


# (the micro-batches of each step, label_smoothing, clip): two steps each, so that gradients
# left over from the first step show in the second; clipping with two micro-batches in a
# step, and clip=0.
STEP = Item(
    EXERCISE, "train_step", reference_step,
    [_step_case([_step_batches(2, (4, 2)), _step_batches(3, (3,))], 0.2, 0.05),
     _step_case([_step_batches(0, (3, 4)), _step_batches(1, (5, 2))], 0.1, 0.0)],
    laddered(STEP_MISTAKES, _STEP_LADDER), same=_same_training, what="result", parts=("weights", "losses"),
    formula="Zero the gradients, backpropagate each micro-batch's loss / len(batches), clip, "
            "step, and return the mean of the losses as a float.",
    twins=(_variant(),),
    section=("07_training", "5. One training step, and the loop around it"),
)

ITEMS = (BATCH, LOSS, NOAM, STEP)
