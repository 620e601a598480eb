"""Wrong ways to write exercise 09 (the LM loss, BERT's masking, mean pooling, the decoder-only
model's forward pass), and the diagnosis each must get; then RIGHT: correct solutions in
other styles than the reference's, which every check must pass (tests/test_ex09_checks.py)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from tfcourse.checking.entry import exercises_dir, load_exercise
from tfcourse.data import PAD
from tfcourse.masks import causal_mask, target_mask

from . import wrong

given = load_exercise(exercises_dir() / "ex09_variants.py")

# ------------------------------------------------------------------------------------ lm_loss


def _ce(logits, targets, pad_id, **kw):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
                           ignore_index=pad_id, **kw)


@wrong("lm_loss.not_shifted")
def lm_current_token(logits, tokens, pad_id=PAD):
    return _ce(logits, tokens, pad_id)


@wrong("lm_loss.not_shifted")
def lm_last_dropped_from_both(logits, tokens, pad_id=PAD):
    return _ce(logits[:, :-1], tokens[:, :-1], pad_id)


@wrong("lm_loss.batch_axis_dropped")
def lm_squeezed(logits, tokens, pad_id=PAD):
    log_p = F.log_softmax(logits[:, :-1], dim=-1)
    target = tokens[:, 1:]
    nll = -log_p.gather(-1, target.unsqueeze(-1)).squeeze()  # (batch, seq - 1), or (seq - 1,)
    return nll[target != pad_id].mean()  # IndexError for a batch of one


@wrong("lm_loss.shifted_backwards")
def lm_backwards(logits, tokens, pad_id=PAD):
    return _ce(logits[:, 1:], tokens[:, :-1], pad_id)


@wrong("lm_loss.shifted_backwards")
def lm_rolled_backwards(logits, tokens, pad_id=PAD):
    targets = torch.roll(tokens, 1, dims=1)  # meant "the next token"
    return _ce(logits[:, 1:], targets[:, 1:], pad_id)


@wrong("lm_loss.shifted_twice")
def lm_twice(logits, tokens, pad_id=PAD):
    targets = tokens[:, 1:]  # the batch's shift ...
    return _ce(logits[:, :-2], targets[:, 1:], pad_id)  # ... and the loss's again


@wrong("lm_loss.shifted_across_rows")
def lm_flat(logits, tokens, pad_id=PAD):
    flat_logits, flat_tokens = logits.flatten(0, 1), tokens.flatten()
    return F.cross_entropy(flat_logits[:-1], flat_tokens[1:], ignore_index=pad_id)


@wrong("lm_loss.shifted_along_batch")
def lm_batch_axis(logits, tokens, pad_id=PAD):
    return _ce(logits[:-1], tokens[1:], pad_id)


@wrong("lm_loss.pad_id_ignored")
def lm_pad_zero(logits, tokens, pad_id=PAD):
    return _ce(logits[:, :-1], tokens[:, 1:], 0)


@wrong("lm_loss.counts_padding")
def lm_no_ignore(logits, tokens, pad_id=PAD):
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:])


@wrong("lm_loss.counts_padding")
def lm_masked_mean_over_all(logits, tokens, pad_id=PAD):
    log_p = logits[:, :-1].log_softmax(-1)
    targets = tokens[:, 1:]
    nll = -log_p.gather(-1, targets[..., None])[..., 0]
    return (nll * (targets != pad_id)).mean()


@wrong("lm_loss.per_sequence")
def lm_per_sequence(logits, tokens, pad_id=PAD):
    targets = tokens[:, 1:]
    nll = F.cross_entropy(logits[:, :-1].transpose(1, 2), targets, reduction="none")
    keep = targets != pad_id
    return ((nll * keep).sum(1) / keep.sum(1)).mean()


@wrong("lm_loss.summed")
def lm_summed(logits, tokens, pad_id=PAD):
    return _ce(logits[:, :-1], tokens[:, 1:], pad_id, reduction="sum")


@wrong("lm_loss.wrong_count")
def lm_sum_per_text_then_mean(logits, tokens, pad_id=PAD):
    log_p = logits[:, :-1].log_softmax(-1)
    target = tokens[:, 1:]
    nll = -log_p.gather(2, target.unsqueeze(2)).squeeze(2) * (target != pad_id)
    return nll.sum(dim=1).mean()  # the mean over texts of each text's summed loss


@wrong("lm_loss.wrong_count")
def lm_divided_by_seq(logits, tokens, pad_id=PAD):
    total = _ce(logits[:, :-1], tokens[:, 1:], pad_id, reduction="sum")
    return total / tokens.shape[-1]


@wrong("lm_loss.last_target_made_up")
def lm_rolled_targets(logits, tokens, pad_id=PAD):
    targets = torch.roll(tokens, shifts=-1, dims=1)
    return _ce(logits, targets, pad_id)


@wrong("lm_loss.last_target_made_up")
def lm_targets_padded_with_zero(logits, tokens, pad_id=PAD):
    targets = F.pad(tokens[:, 1:], (0, 1))  # the same length as the logits
    return _ce(logits, targets, pad_id)


@wrong("lm_loss.label_smoothing")
def lm_smoothed(logits, tokens, pad_id=PAD):
    return _ce(logits[:, :-1], tokens[:, 1:], pad_id, label_smoothing=0.1)


@wrong("lm_loss.no_log_softmax")
def lm_nll_of_logits(logits, tokens, pad_id=PAD):
    x, y = logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten()
    return F.nll_loss(x, y, ignore_index=pad_id)


@wrong("lm_loss.probabilities")
def lm_softmax(logits, tokens, pad_id=PAD):
    p = logits[:, :-1].softmax(-1)
    y = tokens[:, 1:]
    picked = -p.gather(2, y.unsqueeze(2)).squeeze(2)
    return picked[y != pad_id].mean()


@wrong("lm_loss.softmax_axis")
def lm_axis(logits, tokens, pad_id=PAD):
    log_p = F.log_softmax(logits[:, :-1], dim=1)
    y = tokens[:, 1:]
    return -log_p.gather(-1, y[..., None]).squeeze(-1)[y != pad_id].mean()


@wrong("lm_loss.view_of_slice")
def lm_view(logits, tokens, pad_id=PAD):
    V = logits.size(-1)
    return F.cross_entropy(logits[:, :-1].view(-1, V), tokens[:, 1:].reshape(-1), ignore_index=pad_id)


@wrong("lm_loss.log_of_softmax")
def lm_loss_log_of_softmax(logits, tokens, pad_id=PAD):
    probs = F.softmax(logits[:, :-1], dim=-1)
    return F.nll_loss(torch.log(probs).flatten(0, 1), tokens[:, 1:].flatten(), ignore_index=pad_id)


@wrong("lm_loss.no_gradient")
def lm_item(logits, tokens, pad_id=PAD):
    return torch.tensor(_ce(logits[:, :-1], tokens[:, 1:], pad_id).item(), dtype=logits.dtype)


# -------------------------------------------------------------------------------- mask_tokens


def _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id, *, may=None,
            k=None, split=(0.8, 0.9), ids=None, targets="chosen", fill=None, choose=None):
    """A right masking in a learner's style (topk of random scores), with one step swapped."""
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[list(special_ids)] = False
    ordinary[[pad_id, mask_id]] = False
    may = ordinary[tokens] if may is None else may
    n = may.sum(1)
    k = (n * rate).round().long().clamp(min=1).minimum(n) if k is None else k
    scores = torch.rand(tokens.shape, generator=generator).masked_fill(~may, -1.0)
    if choose is None:
        chosen = torch.zeros_like(may)
        for row in range(tokens.size(0)):
            chosen[row, scores[row].topk(int(k[row])).indices] = True
    else:
        chosen = choose(scores, may, generator)
    u = torch.rand(tokens.shape, generator=generator)
    ids = ordinary.nonzero().squeeze(1) if ids is None else ids
    random = ids[torch.randint(len(ids), tokens.shape, generator=generator)]
    inputs = tokens.clone()
    inputs[chosen & (u < split[0])] = mask_id
    swap = chosen & (u >= split[0]) & (u < split[1])
    inputs[swap] = random[swap]
    where = {"chosen": chosen, "all": tokens != pad_id, "masked": chosen & (u < split[0])}[targets]
    out = torch.full_like(tokens, pad_id if fill is None else fill)
    out[where] = tokens[where]
    return inputs, out


@wrong("mask_tokens.targets_everywhere")
def mask_targets_everywhere(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                            pad_id=PAD):
    inputs, _ = _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id)
    return inputs, tokens.clone()  # "the model predicts the text"


@wrong("mask_tokens.targets_corrupted")
def mask_targets_corrupted(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                           pad_id=PAD):
    inputs, targets = _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id)
    return inputs, torch.where(targets != pad_id, inputs, pad_id)


@wrong("mask_tokens.targets_only_masked")
def mask_targets_at_mask(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                         pad_id=PAD):
    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id,
                   targets="masked")


@wrong("mask_tokens.fill_minus_100")
def mask_minus_100(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None, pad_id=PAD):
    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id, fill=-100)


@wrong("mask_tokens.padding_chosen")
def mask_padding(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None, pad_id=PAD):
    may = ~torch.isin(tokens, torch.tensor([*special_ids, mask_id]))  # pad_id forgotten
    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id, may=may)


@wrong("mask_tokens.specials_chosen")
def mask_cls(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None, pad_id=PAD):
    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id,
                   may=tokens != pad_id)


@wrong("mask_tokens.any_position_chosen")
def mask_any_position(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                      pad_id=PAD):
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[sorted({*special_ids, mask_id, pad_id})] = False
    n = ordinary[tokens].sum(1)
    k = (rate * n).round().long().clamp(min=1).minimum(n)
    scores = torch.rand(tokens.shape, generator=generator)  # ordinary or not
    chosen = scores.argsort(1).argsort(1) < k[:, None]
    draw = torch.rand(tokens.shape, generator=generator)
    ordinary_ids = ordinary.nonzero()[:, 0]
    rand_ids = ordinary_ids[torch.randint(len(ordinary_ids), tokens.shape, generator=generator)]
    inputs = torch.where(chosen & (draw < 0.8), mask_id, tokens)
    inputs = torch.where(chosen & (draw >= 0.8) & (draw < 0.9), rand_ids, inputs)
    return inputs, torch.where(chosen, tokens, pad_id)


@wrong("mask_tokens.any_position_chosen")
def mask_randperm_of_the_row(tokens, mask_id, special_ids, vocab_size, rate=0.15,
                             generator=None, pad_id=PAD):
    def choose(scores, may, generator):
        chosen = torch.zeros_like(may)
        for row in range(may.size(0)):
            k = max(1, round(rate * int(may[row].sum())))
            chosen[row, torch.randperm(may.size(1), generator=generator)[:k]] = True
        return chosen

    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id,
                   choose=choose)


@wrong("mask_tokens.rate_over_all")
def mask_rate_of_length(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                        pad_id=PAD):
    k = torch.full((tokens.size(0),), round(rate * tokens.size(1)))
    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id, k=k)


@wrong("mask_tokens.rate_over_all")
def mask_rate_of_text(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                      pad_id=PAD):
    k = ((tokens != pad_id).sum(1) * rate).round().long().clamp(min=1)
    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id, k=k)


@wrong("mask_tokens.no_minimum")
def mask_no_minimum(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                    pad_id=PAD):
    special = torch.tensor([*special_ids, mask_id, pad_id])
    k = (~torch.isin(tokens, special)).sum(1).mul(rate).round().long()
    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id, k=k)


@wrong("mask_tokens.rounded_down")
def mask_int(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None, pad_id=PAD):
    special = torch.tensor([*special_ids, mask_id, pad_id])
    n = (~torch.isin(tokens, special)).sum(1)
    k = torch.tensor([max(1, int(rate * m)) if m else 0 for m in n.tolist()])
    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id, k=k)


@wrong("mask_tokens.rate_ignored")
def mask_fixed_rate(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                    pad_id=PAD):
    return _masked(tokens, mask_id, special_ids, vocab_size, 0.15, generator, pad_id)


def _batch_choice(rate):
    def choose(scores, may, generator):
        total = round(rate * int(may.sum()))
        flat = torch.zeros(may.numel(), dtype=torch.bool)
        flat[scores.flatten().topk(total).indices] = True
        return flat.view(may.shape)

    return choose


@wrong("mask_tokens.per_batch")
def mask_per_batch(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                   pad_id=PAD):
    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id,
                   choose=_batch_choice(rate))


@wrong("mask_tokens.independent")
def mask_bernoulli(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                   pad_id=PAD):
    def choose(scores, may, g):
        return may & torch.bernoulli(torch.full(may.shape, rate), generator=g).bool()

    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id, choose=choose)


@wrong("mask_tokens.all_mask")
def mask_all_mask(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None, pad_id=PAD):
    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id, split=(1, 1))


@wrong("mask_tokens.random_as_mask")
def mask_random_as_mask(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                        pad_id=PAD):
    inputs, targets = _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id,
                              split=(0.8, 0.8))
    u = torch.rand(tokens.shape, generator=generator)
    inputs[(targets != pad_id) & (inputs != mask_id) & (u < 0.5)] = mask_id  # "the other 10%"
    return inputs, targets


@wrong("mask_tokens.split_wrong")
def mask_overlapping(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                     pad_id=PAD):
    inputs, targets = _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id,
                              split=(0, 0))
    chosen = targets != pad_id
    u = torch.rand(tokens.shape, generator=generator)
    inputs[chosen & (u < 0.8)] = mask_id
    r = torch.randint(mask_id + 1, vocab_size, tokens.shape, generator=generator)
    inputs[chosen & (u < 0.1)] = r[chosen & (u < 0.1)]  # overwrites 10% of the [MASK]s
    return inputs, targets


@wrong("mask_tokens.split_wrong")
def mask_ten_percent_of_rest(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                             pad_id=PAD):
    inputs, targets = _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id,
                              split=(0.8, 0.8))
    rest = (targets != pad_id) & (inputs != mask_id)
    swap = rest & (torch.rand(tokens.shape, generator=generator) < 0.1)
    inputs[swap] = torch.randint(mask_id + 1, vocab_size, tokens.shape, generator=generator)[swap]
    return inputs, targets


@wrong("mask_tokens.random_specials")
def mask_random_from_vocab(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                           pad_id=PAD):
    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id,
                   ids=torch.arange(vocab_size))


@wrong("mask_tokens.generator_ignored")
def mask_global_random(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                       pad_id=PAD):
    return _masked(tokens, mask_id, special_ids, vocab_size, rate, None, pad_id)


@wrong("mask_tokens.in_place")
def mask_in_place(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None, pad_id=PAD):
    inputs, targets = _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id)
    tokens[:] = inputs
    return tokens, targets


# --------------------------------------------------------------------------------- mean_pool


@wrong("mean_pool.promoted")
def mean_pool_count_in_float32(h, keep):
    total = h.masked_fill(~keep[..., None], 0).sum(1)
    count = keep.sum(1, keepdim=True).to(torch.float32).clamp(min=1)
    return total / count


@wrong("mean_pool.over_padding")
def pool_mean(h, keep):
    return h.mean(dim=1)


@wrong("mean_pool.padded_length")
def pool_padded_length(h, keep):
    return (h * keep.unsqueeze(-1)).sum(1) / h.shape[1]


@wrong("mean_pool.padded_length")
def pool_masked_mean(h, keep):
    return h.masked_fill(~keep[..., None], 0).mean(1)


@wrong("mean_pool.keep_inverted")
def pool_inverted(h, keep):
    pad = keep[:, :, None].to(h.dtype)  # "1 where padding"
    return (h * (1 - pad)).sum(1) / (1 - pad).sum(1).clamp(min=1)


@wrong("mean_pool.summed")
def pool_sum(h, keep):
    return (h * keep[:, :, None]).sum(1)


@wrong("mean_pool.cls")
def pool_cls(h, keep):
    return h[:, 0, :]


@wrong("mean_pool.max")
def pool_max(h, keep):
    out = h.masked_fill(~keep[:, :, None], float("-inf")).amax(1)
    return torch.where(keep.any(1, keepdim=True), out, torch.zeros_like(out))


@wrong("mean_pool.prefix")
def pool_prefix(h, keep):
    lengths = keep.sum(1)
    rows = []
    for b, n in enumerate(lengths.tolist()):
        rows.append(h[b, :n].mean(0) if n else torch.zeros_like(h[b, 0]))
    return torch.stack(rows)


@wrong("mean_pool.whole_batch")
def pool_whole_batch(h, keep):
    return h[keep].mean(dim=0)


@wrong("mean_pool.empty_nan")
def pool_nan(h, keep):
    k = keep.unsqueeze(-1).to(h.dtype)
    return (h * k).sum(1) / k.sum(1)


@wrong("mean_pool.no_feature_axis")
def pool_no_axis(h, keep):
    return (h * keep).sum(1) / keep.sum(1, keepdim=True).clamp(min=1)


@wrong("mean_pool.divisor_axis")
def pool_divisor(h, keep):
    return (h * keep[:, :, None]).sum(1) / keep.sum(1).clamp(min=1)


@wrong("mean_pool.in_place")
def pool_in_place(h, keep):
    h[~keep] = 0
    return h.sum(1) / keep.sum(1, keepdim=True).clamp(min=1)


# ---------------------------------------------------------------------------------- DecoderLM
# Each solution subclasses the exercise's own class (its __init__ as given) and writes only
# forward, or one step of _Steps' forward (a right forward in four steps).


class _Steps(given.DecoderLM):
    def inputs(self, tokens):
        return self.positional(self.embed(tokens))

    def mask(self, tokens):
        seq = tokens.size(1)
        return torch.ones(seq, seq, dtype=torch.bool).tril()

    def block(self, layer, x, mask):
        return layer(x, mask)

    def output(self, x):
        return self.generator(self.norm(x))

    def forward(self, tokens):
        x = self.inputs(tokens)
        mask = self.mask(tokens)
        for layer in self.layers:
            x = self.block(layer, x, mask)
        return self.output(x)


@wrong("DecoderLM.no_causal_mask")
class lm_no_mask(_Steps):
    def block(self, layer, x, mask):
        return layer(x)


@wrong("DecoderLM.no_causal_mask")
class lm_padding_mask_only(_Steps):
    def mask(self, tokens):
        return (tokens != self.config.pad_id)[:, None, None, :]


@wrong("DecoderLM.no_causal_mask")
class lm_padding_mask_3d(_Steps):
    def mask(self, tokens):
        return (tokens != self.config.pad_id).unsqueeze(1)  # (batch, 1, seq)


@wrong("DecoderLM.mask_inverted")
class lm_mask_upper(_Steps):
    def mask(self, tokens):
        seq = tokens.size(1)
        return torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)  # "the future is masked"


@wrong("DecoderLM.mask_inverted")
class lm_mask_transposed(_Steps):
    def mask(self, tokens):
        seq = tokens.size(1)
        return torch.ones(seq, seq, dtype=torch.bool).tril().T


@wrong("DecoderLM.diagonal_masked")
class lm_mask_strict(_Steps):
    def mask(self, tokens):
        i = torch.arange(tokens.size(1))
        return i[None, :] < i[:, None]  # keys strictly before the query


@wrong("DecoderLM.sees_next")
class lm_mask_next(_Steps):
    def mask(self, tokens):
        i = torch.arange(tokens.size(1))
        return i[None, :] <= i[:, None] + 1


@wrong("DecoderLM.mask_not_bool")
class lm_float_mask(_Steps):
    def mask(self, tokens):
        return nn.Transformer.generate_square_subsequent_mask(tokens.size(1))


@wrong("DecoderLM.mask_not_bool")
class lm_ones_tril(_Steps):
    def mask(self, tokens):
        return torch.tril(torch.ones(tokens.size(1), tokens.size(1)))  # 1 = may attend


@wrong("DecoderLM.mask_size")
class lm_mask_not_cut(_Steps):
    def mask(self, tokens):  # nanoGPT's buffer, without its [:seq, :seq]
        return torch.ones(self.config.max_len, self.config.max_len, dtype=torch.bool).tril()


@wrong("DecoderLM.mask_size")
class lm_mask_cut_on_rows(_Steps):
    def mask(self, tokens):
        n = self.config.max_len
        return torch.ones(n, n, dtype=torch.bool).tril()[:tokens.size(1)]


@wrong("DecoderLM.mask_size")
class lm_mask_of_batch_size(_Steps):
    def mask(self, tokens):
        n = len(tokens)
        return torch.ones(n, n, dtype=torch.bool).tril()


@wrong("DecoderLM.tuple")
class lm_attention_tuple(_Steps):
    def block(self, layer, x, mask):
        x = layer.sublayers[0](x, lambda y: layer.self_attn(y, y, y, mask))
        return layer.sublayers[1](x, layer.feed_forward)


@wrong("DecoderLM.no_residual")
class lm_bare_layers(_Steps):
    def block(self, layer, x, mask):
        return layer.feed_forward(layer.self_attn(x, x, x, mask)[0])


@wrong("DecoderLM.sublayer_reused")
class lm_one_sublayer(_Steps):
    def block(self, layer, x, mask):
        x = layer.sublayers[0](x, lambda y: layer.self_attn(y, y, y, mask)[0])
        return layer.sublayers[0](x, layer.feed_forward)  # copied from the line above


@wrong("DecoderLM.no_feed_forward")
class lm_attention_only(_Steps):
    def block(self, layer, x, mask):  # "no cross-attention" taken one sublayer too far
        return layer.sublayers[0](x, lambda y: layer.self_attn(y, y, y, mask)[0])


@wrong("DecoderLM.cross_attention")
class lm_cross_attention_to_itself(_Steps):
    def block(self, layer, x, mask):  # chapter 06's three steps, memory = the layer's input
        memory = x
        x = layer.sublayers[0](x, lambda y: layer.self_attn(y, y, y, mask)[0])
        x = layer.sublayers[1](x, lambda y: layer.self_attn(y, memory, memory)[0])
        return layer.sublayers[1](x, layer.feed_forward)


@wrong("DecoderLM.cross_attention")
class lm_called_as_chapter_06(_Steps):
    def block(self, layer, x, mask):
        return layer(x, x, None, mask)  # layer(x, memory, src_mask, tgt_mask)


@wrong("DecoderLM.attention_twice")
class lm_second_self_attention(_Steps):
    def block(self, layer, x, mask):  # chapter 06's cross-attention made self-attention
        x = layer.sublayers[0](x, lambda y: layer.self_attn(y, y, y, mask)[0])
        x = layer.sublayers[0](x, lambda y: layer.self_attn(y, y, y, mask)[0])
        return layer.sublayers[1](x, layer.feed_forward)


@wrong("DecoderLM.embedding_added_twice")
class lm_embedding_twice(_Steps):
    def inputs(self, tokens):
        x = self.embed(tokens)
        return x + self.positional(x)


@wrong("DecoderLM.scaled_twice")
class lm_scaled_twice(_Steps):
    def inputs(self, tokens):
        return self.positional(self.embed(tokens) * math.sqrt(self.config.d_model))


@wrong("DecoderLM.scaled_twice")
class lm_scaled_after_positions(_Steps):
    def inputs(self, tokens):
        return self.positional(self.embed(tokens)) * self.config.d_model ** 0.5


@wrong("DecoderLM.not_scaled")
class lm_not_scaled(_Steps):
    def inputs(self, tokens):
        return self.positional(self.embed.embedding(tokens))


@wrong("DecoderLM.no_positional")
class lm_no_positions(_Steps):
    def inputs(self, tokens):
        return self.embed(tokens)


@wrong("DecoderLM.positions_offset")
class lm_positions_after_padding(_Steps):
    def inputs(self, tokens):
        return self.positional(self.embed(tokens), start=self.config.pad_id + 1)  # RoBERTa's


@wrong("DecoderLM.positions_skipped_single_token")
class lm_positions_only_beyond_one_token(given.DecoderLM):
    def forward(self, tokens):
        x = self.embed(tokens)
        if tokens.size(1) > 1:
            x = self.positional(x)
        seq = tokens.size(1)
        mask = torch.ones(seq, seq, dtype=torch.bool, device=tokens.device).tril()
        for layer in self.layers:
            x = layer(x, mask)
        return self.generator(self.norm(x))


@wrong("DecoderLM.positions_skipped_single_token")
class lm_positions_skipped_at_one_step(_Steps):
    """One token has no order to tell, so (wrongly) no position."""

    def inputs(self, tokens):
        x = self.embed(tokens)
        return x if x.shape[-2] == 1 else self.positional(x)


@wrong("DecoderLM.positional_twice")
class lm_positions_twice(_Steps):
    def block(self, layer, x, mask):
        return layer(self.positional(x), mask) if layer is self.layers[0] else layer(x, mask)


@wrong("DecoderLM.positional_dropout")
class lm_positions_by_hand(_Steps):
    def inputs(self, tokens):
        pe = self.positional
        seq = tokens.size(1)
        table = pe.pe[:seq] if hasattr(pe, "pe") else pe.embedding.weight[:seq]
        return self.embed(tokens) + table


@wrong("DecoderLM.extra_dropout")
class lm_functional_dropout(_Steps):
    def inputs(self, tokens):
        return F.dropout(self.positional(self.embed(tokens)), self.config.dropout)


@wrong("DecoderLM.extra_dropout")
class lm_dropout_twice_in_training(_Steps):
    def inputs(self, tokens):
        x = self.positional(self.embed(tokens))
        return F.dropout(x, self.config.dropout, training=self.training)


@wrong("DecoderLM.sublayer_dropout")
class lm_sublayers_by_hand(_Steps):
    def block(self, layer, x, mask):
        attention, ffn = layer.sublayers
        if attention.norm_first:
            h = attention.norm(x)
            x = x + layer.self_attn(h, h, h, mask)[0]
            return x + layer.feed_forward(ffn.norm(x))
        x = attention.norm(x + layer.self_attn(x, x, x, mask)[0])
        return ffn.norm(x + layer.feed_forward(x))


@wrong("DecoderLM.one_layer")
class lm_first_layer_only(_Steps):
    def forward(self, tokens):
        x, mask = self.inputs(tokens), self.mask(tokens)
        for _ in range(self.config.n_layers):
            x = self.layers[0](x, mask)
        return self.output(x)


@wrong("DecoderLM.layer_skipped")
class lm_last_layer_skipped(_Steps):
    def forward(self, tokens):
        x, mask = self.inputs(tokens), self.mask(tokens)
        for i in range(len(self.layers) - 1):
            x = self.layers[i](x, mask)
        return self.output(x)


@wrong("DecoderLM.layer_skipped")
class lm_returns_inside_the_loop(_Steps):
    def forward(self, tokens):
        x, mask = self.inputs(tokens), self.mask(tokens)
        for layer in self.layers:
            x = layer(x, mask)
            return self.generator(self.norm(x))


@wrong("DecoderLM.layer_skipped")
class lm_returns_inside_the_loop_before_the_norm(_Steps):
    def forward(self, tokens):
        x, mask = self.inputs(tokens), self.mask(tokens)
        for layer in self.layers:
            return self.generator(layer(x, mask))
        return self.output(x)


@wrong("DecoderLM.layer_order")
class lm_layers_reversed(_Steps):
    def forward(self, tokens):
        x, mask = self.inputs(tokens), self.mask(tokens)
        for layer in reversed(self.layers):
            x = layer(x, mask)
        return self.output(x)


@wrong("DecoderLM.not_chained")
class lm_not_chained(_Steps):
    def forward(self, tokens):
        x, mask = self.inputs(tokens), self.mask(tokens)
        for layer in self.layers:
            h = layer(x, mask)
        return self.output(h)


@wrong("DecoderLM.no_final_norm")
class lm_no_norm(_Steps):
    def output(self, x):
        return self.generator(x)


@wrong("DecoderLM.final_norm_twice")
class lm_norm_twice(_Steps):
    def forward(self, tokens):
        x, mask = self.inputs(tokens), self.mask(tokens)
        for layer in self.layers:
            x = layer(x, mask)
        x = self.norm(x)  # after the stack, as the Encoder of chapter 05 ...
        return self.output(x)  # ... and again in the output step


@wrong("DecoderLM.norm_each_layer")
class lm_norm_in_the_loop(_Steps):
    def forward(self, tokens):
        x, mask = self.inputs(tokens), self.mask(tokens)
        for layer in self.layers:
            x = self.norm(layer(x, mask))
        return self.generator(x)


@wrong("DecoderLM.norm_reused")
class lm_norm_on_embeddings(_Steps):
    def inputs(self, tokens):
        return self.norm(self.positional(self.embed(tokens)))  # as BERT's embedding LayerNorm


@wrong("DecoderLM.untied")
class lm_new_output_layer(_Steps):
    def output(self, x):
        return nn.Linear(self.config.d_model, self.config.vocab_size)(self.norm(x))


@wrong("DecoderLM.untied")
class lm_new_output_layer_no_bias(_Steps):
    def output(self, x):
        head = nn.Linear(self.config.d_model, self.config.vocab_size, bias=False)
        return head(self.norm(x))


@wrong("DecoderLM.generator_ignored")
class lm_embedding_table_as_output(_Steps):
    def output(self, x):
        return F.linear(self.norm(x), self.embed.embedding.weight)


@wrong("DecoderLM.not_transposed")
class lm_embedding_not_transposed(_Steps):
    def output(self, x):
        return self.norm(x) @ self.embed.embedding.weight


@wrong("DecoderLM.softmax")
class lm_probabilities(_Steps):
    def output(self, x):
        return torch.softmax(self.generator(self.norm(x)), dim=-1)


@wrong("DecoderLM.log_softmax")
class lm_log_probabilities(_Steps):
    def output(self, x):
        return F.log_softmax(self.generator(self.norm(x)), dim=-1)


@wrong("DecoderLM.last_only")
class lm_last_position(_Steps):
    def output(self, x):
        return self.generator(self.norm(x[:, -1]))  # the next token, as in generation


@wrong("DecoderLM.last_dropped")
class lm_inputs_shifted(_Steps):
    def forward(self, tokens):
        return super().forward(tokens[:, :-1])  # the last token has no next token


@wrong("DecoderLM.last_dropped")
class lm_last_logit_dropped(_Steps):
    def output(self, x):
        return self.generator(self.norm(x))[:, :-1]


@wrong("DecoderLM.flattened")
class lm_flat_logits(_Steps):
    def output(self, x):
        logits = self.generator(self.norm(x))
        return logits.view(-1, logits.size(-1))  # ready for F.cross_entropy


@wrong("DecoderLM.flattened")
class lm_classes_second(_Steps):
    def output(self, x):
        return self.generator(self.norm(x)).transpose(1, 2)  # (batch, vocab, seq), as F.cross_entropy


@wrong("DecoderLM.sequence_first")
class lm_seq_first(_Steps):
    def forward(self, tokens):
        x = self.inputs(tokens).transpose(0, 1)  # (seq, batch, d_model), as nn.Transformer
        mask = self.mask(tokens)
        for layer in self.layers:
            x = layer(x, mask)
        return self.output(x).transpose(0, 1)


@wrong("DecoderLM.sequence_first")
class lm_seq_first_mask_of_x(_Steps):
    def forward(self, tokens):
        x = self.inputs(tokens).transpose(0, 1)
        seq = x.size(1)
        mask = torch.ones(seq, seq, dtype=torch.bool).tril()
        for layer in self.layers:
            x = layer(x, mask)
        return self.output(x).transpose(0, 1)


# ------------------------------------------------------------------ right, in other styles


def lm_loss_log_softmax(logits, tokens, pad_id=PAD):
    log_p = F.log_softmax(logits, dim=-1)[:, :-1]  # (batch, seq - 1, V)
    targets = tokens[:, 1:]
    nll = -log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    keep = targets != pad_id
    return (nll * keep).sum() / keep.sum()


def lm_loss_padded_targets(logits, tokens, pad_id=PAD):
    """Every logit gets a target: the next token, and padding after the last one."""
    targets = torch.cat((tokens[:, 1:], torch.full_like(tokens[:, :1], pad_id)), dim=1)
    return F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=pad_id)


def mask_tokens_loop(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                     pad_id=PAD):
    """Row by row with randperm, two draws per chosen token (80%, then half of the rest)."""
    never = {*special_ids, mask_id, pad_id}
    ordinary_ids = torch.tensor([i for i in range(vocab_size) if i not in never])
    inputs, targets = tokens.clone(), torch.full_like(tokens, pad_id)
    for row in range(tokens.size(0)):
        positions = [t for t in range(tokens.size(1)) if int(tokens[row, t]) not in never]
        if not positions:
            continue
        k = max(1, round(rate * len(positions)))
        for i in torch.randperm(len(positions), generator=generator)[:k].tolist():
            t = positions[i]
            targets[row, t] = tokens[row, t]
            if torch.rand(1, generator=generator) < 0.8:
                inputs[row, t] = mask_id
            elif torch.rand(1, generator=generator) < 0.5:
                pick = torch.randint(len(ordinary_ids), (1,), generator=generator)
                inputs[row, t] = ordinary_ids[pick]
    return inputs, targets


def mask_tokens_multinomial(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                            pad_id=PAD):
    """Positions by torch.multinomial without replacement; the split by one categorical draw."""
    special = torch.tensor(sorted({*special_ids, mask_id, pad_id}))
    may = ~torch.isin(tokens, special)
    n = may.sum(1)
    chosen = torch.zeros_like(may)
    for row in range(tokens.size(0)):
        if n[row]:
            k = max(1, int(torch.round(rate * n[row])))
            picks = torch.multinomial(may[row].float(), k, replacement=False, generator=generator)
            chosen[row, picks] = True
    kind = torch.multinomial(torch.tensor([0.8, 0.1, 0.1]), tokens.numel(), replacement=True,
                             generator=generator).view(tokens.shape)
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[special] = False
    ids = ordinary.nonzero()[:, 0]
    random = ids[torch.randint(len(ids), tokens.shape, generator=generator)]
    inputs = torch.where(chosen & (kind == 0), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(chosen & (kind == 1), random, inputs)
    return inputs, torch.where(chosen, tokens, torch.full_like(tokens, pad_id))


def mean_pool_einsum(h, keep):
    weights = keep.to(h.dtype)
    weights = weights / weights.sum(1, keepdim=True).clamp(min=1)
    return torch.einsum("bs,bsd->bd", weights, h)


def mean_pool_loop(h, keep):
    return torch.stack([h[b][keep[b]].mean(0) if keep[b].any() else h.new_zeros(h.size(-1))
                        for b in range(h.size(0))])


class DecoderLMSublayers(given.DecoderLM):
    """The layers written out with their sublayers, chapter 06's masks (causal and padding:
    the logits at padding differ, and are not compared), the output layer's weight used
    directly."""

    def forward(self, tokens):
        x = self.positional(self.embed(tokens))
        mask = target_mask(tokens, self.config.pad_id)  # (batch, 1, seq, seq)
        for layer in self.layers:
            x = layer.sublayers[0](x, lambda y, layer=layer: layer.self_attn(y, y, y, mask)[0])
            x = layer.sublayers[1](x, layer.feed_forward)
        return F.linear(self.norm(x), self.generator.weight)


class DecoderLMCausalMask(given.DecoderLM):
    def forward(self, tokens):
        batch, seq = tokens.shape
        x = self.embed(tokens)
        x = self.positional(x)
        future = causal_mask(seq, tokens.device)[None, None].expand(batch, 1, seq, seq)
        for layer in self.layers:
            x = layer(x, mask=future)
        x = self.norm(x)
        return x @ self.generator.weight.transpose(0, 1)


RIGHT = {"lm_loss": (lm_loss_log_softmax, lm_loss_padded_targets),
         "mask_tokens": (mask_tokens_loop, mask_tokens_multinomial),
         "mean_pool": (mean_pool_einsum, mean_pool_loop),
         "DecoderLM": (DecoderLMSublayers, DecoderLMCausalMask)}



@wrong("mask_tokens.with_replacement")
def positions_with_replacement(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                               pad_id=PAD):
    """k = round(rate * n) positions drawn with torch.randint: a position can come twice."""
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[list(special_ids) + [pad_id, mask_id]] = False
    ids = ordinary.nonzero().squeeze(1)
    inputs, targets = tokens.clone(), torch.full_like(tokens, pad_id)
    for row in range(tokens.size(0)):
        where = ordinary[tokens[row]].nonzero().squeeze(1)
        if len(where) == 0:
            continue
        k = max(1, round(rate * len(where)))
        picked = where[torch.randint(len(where), (k,), generator=generator)]
        targets[row, picked] = tokens[row, picked]
        u = torch.rand(k, generator=generator)
        swap = ids[torch.randint(len(ids), (k,), generator=generator)]
        inputs[row, picked] = torch.where(u < 0.8, mask_id, torch.where(u < 0.9, swap, tokens[row, picked]))
    return inputs, targets


@wrong("mean_pool.count_plus_one")
def count_plus_one(h, keep):
    k = keep.unsqueeze(-1).to(h.dtype)
    return (h * k).sum(1) / (k.sum(1) + 1)


@wrong("lm_loss.padding_of_inputs")
def lm_loss_padding_of_inputs(logits, tokens, pad_id=PAD):
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    nll = F.cross_entropy(logits[:, :-1].transpose(1, 2), targets, reduction="none")
    real = inputs != pad_id  # skip the padded positions
    return nll[real].mean()


@wrong("mask_tokens.rounded_half_up")
def mask_tokens_rounded_half_up(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                                pad_id=PAD):
    special = torch.tensor(sorted({*special_ids, pad_id, mask_id}))
    n = (~torch.isin(tokens, special)).sum(1)
    k = (rate * n + 0.5).floor().long().clamp(min=1).minimum(n)  # round to nearest
    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id, k=k)


@wrong("mask_tokens.one_too_many")
def mask_tokens_rank_up_to_k(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None,
                             pad_id=PAD):
    special = torch.tensor(sorted({*special_ids, pad_id, mask_id}))
    n = (~torch.isin(tokens, special)).sum(1)
    k = (rate * n).round().long().clamp(min=1)
    return _masked(tokens, mask_id, special_ids, vocab_size, rate, generator, pad_id,
                   k=(k + 1).minimum(n))  # ranks from 0 compared with <= k: k + 1 of them


@wrong("mean_pool.batch_count")
def divided_by_batch_count(h, keep):
    w = keep.to(h.dtype).unsqueeze(-1)
    return (h * w).sum(1) / keep.sum().clamp(min=1).to(h.dtype)


@wrong("mean_pool.floor_underflows")
def clamped_at_1e9(h, keep):  # sentence-transformers' habit, in h's dtype
    w = keep.unsqueeze(-1).to(h.dtype)
    return (h * w).sum(1) / torch.clamp(w.sum(1), min=1e-9)


@wrong("lm_loss.log_of_softmax")
def lm_log_sum_exp_by_hand(logits, tokens, pad_id=PAD):
    z = logits[:, :-1]
    log_p = z - torch.log(torch.exp(z).sum(-1, keepdim=True))  # exp overflows: no max
    target = tokens[:, 1:]
    nll = -log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return nll[target != pad_id].mean()
