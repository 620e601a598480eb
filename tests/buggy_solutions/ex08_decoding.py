"""Wrong ways to write greedy decoding, a beam-search step and a cached decoding step, and
the diagnosis each must get."""

import time

import torch
import torch.nn.functional as F

from tfcourse.decoding import decode_step as reference_step
from tfcourse.decoding import length_penalty
from tfcourse.masks import causal_mask, target_mask

from . import wrong

# --------------------------------------------------------------------------- greedy


def _next(model, ys, memory, src_mask):
    return model.generator(model.decode(ys, memory, src_mask, causal_mask(ys.size(1)))[:, -1])


@wrong("greedy_decode.no_stop")
def never_stops(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat((ys, _next(model, ys, memory, src_mask).argmax(-1, keepdim=True)), 1)
    return ys[:, 1:]


@wrong("greedy_decode.no_stop")
def stops_but_does_not_pad(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat((ys, _next(model, ys, memory, src_mask).argmax(-1, keepdim=True)), 1)
        if (ys == eos_id).any(1).all():
            break
    return ys[:, 1:]


@wrong("greedy_decode.no_stop")
def pads_but_runs_to_max_len(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        token = torch.where(done, model.config.pad_id, _next(model, ys, memory, src_mask).argmax(-1))
        done = done | (token == eos_id)
        ys = torch.cat((ys, token[:, None]), 1)
    return ys[:, 1:]


@wrong("greedy_decode.no_stop")
def one_sentence_at_a_time_no_stop(model, src, src_mask, max_len, bos_id, eos_id):
    rows = []
    for i in range(src.size(0)):
        memory = model.encode(src[i : i + 1], src_mask[i : i + 1])
        ys = [bos_id]
        for _ in range(max_len):
            tgt = torch.tensor([ys])
            logits = model.generator(model.decode(tgt, memory, src_mask[i : i + 1],
                                                  target_mask(tgt, 0)))
            ys.append(int(logits[0, -1].argmax()))
        rows.append(ys[1:])
    return torch.tensor(rows)


@wrong("greedy_decode.keeps_bos")
def annotated_keeps_bos_never_stops(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)  # a real wrong solution's: BOS counted in max_len
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len - 1):
        ys = torch.cat((ys, _next(model, ys, memory, src_mask).argmax(-1)[:, None]), 1)
    return ys


@wrong("greedy_decode.keeps_bos")
def keeps_bos_stops_without_padding(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat((ys, _next(model, ys, memory, src_mask).argmax(-1, keepdim=True)), 1)
        if (ys == eos_id).any(1).all():
            break
    return ys


@wrong("greedy_decode.batch_of_one")
def breaks_on_eos(model, src, src_mask, max_len, bos_id, eos_id):  # a real wrong solution's
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        next_word = _next(model, ys, memory, src_mask).argmax(-1)
        ys = torch.cat([ys, next_word[:, None]], dim=1)
        if next_word == eos_id:
            break
    return ys[:, 1:]


@wrong("greedy_decode.batch_of_one")
def stops_on_item(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        token = _next(model, ys, memory, src_mask).argmax(-1)
        ys = torch.cat([ys, token.unsqueeze(1)], dim=1)
        if bool(token == eos_id):
            break
    return ys[:, 1:]


@wrong("greedy_decode.stops_at_first")
def stops_at_first_eos(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        token = _next(model, ys, memory, src_mask).argmax(-1).masked_fill(done, model.config.pad_id)
        ys = torch.cat((ys, token[:, None]), 1)
        done |= token == eos_id
        if done.any():
            break
    return ys[:, 1:]


@wrong("greedy_decode.keeps_bos")
def keeps_bos(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        token = _next(model, ys, memory, src_mask).argmax(-1).masked_fill(done, model.config.pad_id)
        ys = torch.cat((ys, token[:, None]), 1)
        done |= token == eos_id
        if done.all():
            break
    return ys


@wrong("greedy_decode.eos_filled")
def fills_with_eos(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        token = _next(model, ys, memory, src_mask).argmax(-1).masked_fill(done, eos_id)
        ys = torch.cat((ys, token[:, None]), 1)
        done |= token == eos_id
        if done.all():
            break
    return ys[:, 1:]


@wrong("greedy_decode.wrong_position")
def first_position_logits(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        logits = model.generator(model.decode(ys, memory, src_mask, causal_mask(ys.size(1))))
        token = logits[:, 0].argmax(-1).masked_fill(done, model.config.pad_id)
        ys = torch.cat((ys, token[:, None]), 1)
        done |= token == eos_id
        if done.all():
            break
    return ys[:, 1:]


@wrong("greedy_decode.nothing_returned")
def forgot_return(model, src, src_mask, max_len, bos_id, eos_id):
    model.encode(src, src_mask)


@wrong("greedy_decode.too_slow")
def endless_loop(model, src, src_mask, max_len, bos_id, eos_id):
    while True:
        time.sleep(0.01)


# ------------------------------------------------------------------ beam_search_step


def _top(ranking, kept, beam):
    vocab = ranking.size(-1)
    best = ranking.flatten(1).topk(beam, dim=-1).indices
    return kept.flatten(1).gather(1, best), best // vocab, best % vocab


@wrong("beam_search_step.multiplied")
def probabilities_multiplied(scores, log_probs, lengths, alpha=0.6):
    candidates = scores[:, :, None].exp() * log_probs.exp()  # P(prefix) * p(token)
    return _top(candidates / length_penalty(lengths, alpha)[:, :, None], candidates, scores.size(1))


@wrong("beam_search_step.multiplied")
def log_probs_multiplied(scores, log_probs, lengths, alpha=0.6):
    candidates = scores.unsqueeze(-1) * log_probs
    return _top(candidates / ((5 + lengths) / 6).pow(alpha).unsqueeze(-1), candidates, scores.size(1))


@wrong("beam_search_step.multiplied")
def scores_times_probabilities_no_penalty(scores, log_probs, lengths, alpha=0.6):
    candidates = torch.einsum("bk,bkv->bkv", scores, torch.softmax(log_probs, -1))
    return _top(candidates, candidates, scores.size(1))


@wrong("beam_search_step.no_normalization")
def raw_sums(scores, log_probs, lengths, alpha=0.6):
    candidates = scores[:, :, None] + log_probs
    return _top(candidates, candidates, scores.size(1))


@wrong("beam_search_step.no_normalization")
def raw_sums_sorted(scores, log_probs, lengths, alpha=0.6):
    batch, beam, vocab = log_probs.shape
    flat = (scores.unsqueeze(2) + log_probs).view(batch, -1)
    values, index = flat.sort(dim=1, descending=True)
    return values[:, :beam], index[:, :beam] // vocab, index[:, :beam] % vocab


@wrong("beam_search_step.normalized_returned")
def returns_normalized(scores, log_probs, lengths, alpha=0.6):
    ranking = (scores[:, :, None] + log_probs) / length_penalty(lengths, alpha)[:, :, None]
    return _top(ranking, ranking, scores.size(1))


@wrong("beam_search_step.index_split")
def index_split_wrongly(scores, log_probs, lengths, alpha=0.6):
    batch, beam, vocab = log_probs.shape
    candidates = scores[:, :, None] + log_probs
    ranking = candidates / length_penalty(lengths, alpha)[:, :, None]
    best = ranking.flatten(1).topk(beam, dim=-1).indices
    return candidates.flatten(1).gather(1, best), best % beam, best // beam


@wrong("beam_search_step.in_place")
def adds_in_place(scores, log_probs, lengths, alpha=0.6):
    log_probs += scores[:, :, None]
    return _top(log_probs / length_penalty(lengths, alpha)[:, :, None], log_probs, scores.size(1))


@wrong("beam_search_step.wrong_type")
def returns_scores_only(scores, log_probs, lengths, alpha=0.6):
    candidates = scores[:, :, None] + log_probs
    return _top(candidates / length_penalty(lengths, alpha)[:, :, None], candidates, scores.size(1))[0]


# -------------------------------------------------------------------------- decode_step


def right_step(model, tokens, memory, src_mask, cache=None):
    """A right decode_step, written out, for solutions whose mistake is elsewhere."""
    if cache is None:
        h = model.decode(tokens, memory, src_mask, causal_mask(tokens.size(1)))
        return model.generator(h[:, -1]).log_softmax(-1)
    return _cached(model, tokens, memory, src_mask, cache, start=len(cache))


def _cached(model, tokens, memory, src_mask, cache, start):
    x = model.positional(model.tgt_embed(tokens[:, -1:]), start=start)
    h = model.decoder(x, memory, src_mask, None, cache=cache)
    return F.log_softmax(model.generator(h[:, -1]), dim=-1)


@wrong("decode_step.position_not_advanced")
def position_stays_zero(model, tokens, memory, src_mask, cache=None):
    if cache is None:
        return right_step(model, tokens, memory, src_mask)
    return _cached(model, tokens, memory, src_mask, cache, start=0)


@wrong("decode_step.position_not_advanced")
def model_positional_default(model, tokens, memory, src_mask, cache=None):
    if cache is None:
        return right_step(model, tokens, memory, src_mask)
    x = model.positional(model.tgt_embed(tokens[:, -1:]))  # start left at its default, 0
    return model.generator(model.decoder(x, memory, src_mask, None, cache)).log_softmax(-1)[:, -1]


@wrong("decode_step.batch_axis_dropped")
def squeezed_newest_position(model, tokens, memory, src_mask, cache=None):
    if cache is None:
        return right_step(model, tokens, memory, src_mask)
    x = model.positional(model.tgt_embed(tokens[:, -1:]), start=tokens.size(1) - 1)
    h = model.decoder(x, memory, src_mask, None, cache=cache).squeeze()  # (batch, d_model)...
    return F.log_softmax(model.generator(h), dim=-1)  # ...but (d_model,) for a batch of one


@wrong("decode_step.position_off_by_one")
def position_is_length(model, tokens, memory, src_mask, cache=None):
    if cache is None:
        return right_step(model, tokens, memory, src_mask)
    return _cached(model, tokens, memory, src_mask, cache, start=tokens.size(1))


@wrong("decode_step.no_causal_mask")
def no_causal_mask(model, tokens, memory, src_mask, cache=None):
    if cache is not None:
        return right_step(model, tokens, memory, src_mask, cache)
    return model.generator(model.decode(tokens, memory, src_mask, None))[:, -1].log_softmax(-1)


@wrong("decode_step.no_src_mask")
def no_src_mask(model, tokens, memory, src_mask, cache=None):
    return right_step(model, tokens, memory, None, cache)


@wrong("decode_step.logits")
def returns_logits(model, tokens, memory, src_mask, cache=None):
    if cache is None:
        h = model.decode(tokens, memory, src_mask, causal_mask(tokens.size(1)))
    else:
        h = model.decode(tokens[:, -1:], memory, src_mask, None, cache=cache)
    return model.generator(h[:, -1])


@wrong("decode_step.cache_unused")
def ignores_cache(model, tokens, memory, src_mask, cache=None):
    return right_step(model, tokens, memory, src_mask)


@wrong("decode_step.whole_prefix_cached")
def whole_prefix_into_cache(model, tokens, memory, src_mask, cache=None):
    if cache is None:
        return right_step(model, tokens, memory, src_mask)
    x = model.positional(model.tgt_embed(tokens), start=0)
    return model.generator(model.decoder(x, memory, src_mask, None, cache))[:, -1].log_softmax(-1)


@wrong("decode_step.whole_prefix_cached")
def whole_prefix_and_its_mask_into_cache(model, tokens, memory, src_mask, cache=None):
    t = tokens.size(1)
    below = torch.tril(torch.ones(t, t, dtype=torch.bool))
    start = 0 if cache is None else len(cache)
    x = model.positional(model.tgt_embed(tokens), start=start)
    h = model.decoder(x, memory, src_mask, below, cache=cache)
    return torch.log_softmax(model.generator(h)[:, -1], dim=-1)


@wrong("decode_step.whole_prefix_cached")
def whole_prefix_into_cache_from_its_length(model, tokens, memory, src_mask, cache=None):
    if cache is None:
        h = model.decode(tokens, memory, src_mask, causal_mask(tokens.size(1), tokens.device))
    else:
        x = model.positional(model.tgt_embed(tokens), start=len(cache))
        h = model.decoder(x, memory, src_mask, None, cache=cache)
    return F.log_softmax(model.generator(h[:, -1]), dim=-1)


@wrong("decode_step.whole_prefix_cached")
def whole_prefix_through_decode_with_the_cache(model, tokens, memory, src_mask, cache=None):
    mask = causal_mask(tokens.size(1)) if cache is None else None
    logits = model.generator(model.decode(tokens, memory, src_mask, mask, cache=cache))
    return logits[:, -1].log_softmax(dim=-1)


@wrong("decode_step.wrong_shape")
def keeps_time_axis(model, tokens, memory, src_mask, cache=None):
    h = model.decode(tokens, memory, src_mask, causal_mask(tokens.size(1)))
    return model.generator(h[:, -1:]).log_softmax(-1)


@wrong("decode_step.reference_used")
def calls_the_reference(model, tokens, memory, src_mask, cache=None):
    return reference_step(model, tokens, memory, src_mask, cache).clone()


# Mistakes found by thinking like a learner


def _loop(model, src, src_mask, max_len, bos_id, eos_id, steps=None, feed_last=False,
          src_mask_used=True, causal=True, stop_before_eos=False):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len if steps is None else steps):
        fed = ys[:, -1:] if feed_last else ys
        h = model.decode(fed, memory, src_mask if src_mask_used else None,
                         causal_mask(fed.size(1)) if causal else None)
        token = model.generator(h[:, -1]).argmax(-1).masked_fill(done, model.config.pad_id)
        if stop_before_eos and (done | (token == eos_id)).all():
            break
        ys = torch.cat((ys, token[:, None]), 1)
        done |= token == eos_id
        if done.all():
            break
    return ys[:, 1:]


@wrong("greedy_decode.eos_dropped")
def breaks_before_the_last_eos(model, src, src_mask, max_len, bos_id, eos_id):
    return _loop(model, src, src_mask, max_len, bos_id, eos_id, stop_before_eos=True)


@wrong("greedy_decode.wrong_position")
def feeds_the_last_token(model, src, src_mask, max_len, bos_id, eos_id):
    return _loop(model, src, src_mask, max_len, bos_id, eos_id, feed_last=True)


@wrong("greedy_decode.max_len_off_by_one")
def bos_counted_in_max_len(model, src, src_mask, max_len, bos_id, eos_id):
    return _loop(model, src, src_mask, max_len, bos_id, eos_id, steps=max_len - 1)


@wrong("greedy_decode.no_src_mask")
def decodes_without_the_source_mask(model, src, src_mask, max_len, bos_id, eos_id):
    return _loop(model, src, src_mask, max_len, bos_id, eos_id, src_mask_used=False)


@wrong("greedy_decode.no_src_mask")
def encodes_without_the_source_mask(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask=None)  # the mask forgotten here
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    while ys.size(1) <= max_len and not finished.all():
        logits = model.generator(model.decode(ys, memory, src_mask, causal_mask(ys.size(1)))[:, -1])
        nxt = logits.argmax(-1).masked_fill(finished, model.config.pad_id)
        finished = finished | (nxt == eos_id)
        ys = torch.cat([ys, nxt.unsqueeze(1)], dim=1)
    return ys[:, 1:]


@wrong("greedy_decode.no_src_mask")
def source_mask_never_used(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, None)
    rows = [[bos_id] for _ in range(src.size(0))]
    for _ in range(max_len):
        ys = torch.tensor(rows)
        nxt = model.generator(model.decode(ys, memory, None, causal_mask(ys.size(1)))[:, -1])
        for row, token in zip(rows, nxt.argmax(-1).tolist()):
            row.append(model.config.pad_id if eos_id in row[1:] else token)
        if all(eos_id in row[1:] for row in rows):
            break
    return torch.tensor(rows)[:, 1:]


@wrong("greedy_decode.no_causal_mask")
def decodes_without_the_causal_mask(model, src, src_mask, max_len, bos_id, eos_id):
    return _loop(model, src, src_mask, max_len, bos_id, eos_id, causal=False)


@wrong("beam_search_step.own_score_missing")
def token_log_probs_only(scores, log_probs, lengths, alpha=0.6):
    return _top(log_probs / length_penalty(lengths, alpha)[:, :, None], log_probs, scores.size(1))


@wrong("beam_search_step.penalty_multiplied")
def penalty_multiplied(scores, log_probs, lengths, alpha=0.6):
    candidates = scores[:, :, None] + log_probs
    return _top(candidates * length_penalty(lengths, alpha)[:, :, None], candidates, scores.size(1))


@wrong("beam_search_step.penalty_formula")
def penalty_of_the_length_alone(scores, log_probs, lengths, alpha=0.6):
    candidates = scores[:, :, None] + log_probs
    lp = lengths**alpha
    return _top(candidates / lp[:, :, None], candidates, scores.size(1))


@wrong("beam_search_step.penalty_formula")
def penalty_length_off_by_one(scores, log_probs, lengths, alpha=0.6):
    """lengths + 1, as if the start symbol counted."""
    batch, beam, vocab = log_probs.shape
    candidates = scores[:, :, None] + log_probs
    lp = ((5.0 + (lengths + 1)) / 6.0) ** alpha
    best = (candidates / lp[:, :, None]).flatten(1).topk(beam, dim=-1).indices
    return candidates.flatten(1).gather(1, best), best // vocab, best % vocab


@wrong("beam_search_step.penalty_formula")
def penalty_times_alpha(scores, log_probs, lengths, alpha=0.6):
    candidates = scores[:, :, None] + log_probs
    lp = (5 + lengths) / 6 * alpha
    return _top(candidates / lp[:, :, None], candidates, scores.size(1))


@wrong("beam_search_step.smallest")
def sorted_ascending(scores, log_probs, lengths, alpha=0.6):
    batch, beam, vocab = log_probs.shape
    candidates = scores[:, :, None] + log_probs
    ranking = (candidates / length_penalty(lengths, alpha)[:, :, None]).flatten(1)
    best = ranking.argsort(dim=1)[:, :beam]
    return candidates.flatten(1).gather(1, best), best // vocab, best % vocab


@wrong("beam_search_step.per_beam")
def best_token_of_each_beam(scores, log_probs, lengths, alpha=0.6):
    candidates = scores[:, :, None] + log_probs
    ranking = candidates / length_penalty(lengths, alpha)[:, :, None]
    token = ranking.argmax(-1)
    beam = torch.arange(scores.size(1)).expand_as(token)
    return candidates.gather(2, token[..., None]).squeeze(-1), beam, token


@wrong("decode_step.probabilities")
def returns_probabilities(model, tokens, memory, src_mask, cache=None):
    return right_step(model, tokens, memory, src_mask, cache).exp()


@wrong("decode_step.log_softmax_axis")
def log_softmax_over_the_batch(model, tokens, memory, src_mask, cache=None):
    h = model.decode(tokens, memory, src_mask, causal_mask(tokens.size(1)))
    return F.log_softmax(model.generator(h[:, -1]), dim=0)


@wrong("decode_step.no_positional")
def no_positional_encoding(model, tokens, memory, src_mask, cache=None):
    if cache is None:
        return right_step(model, tokens, memory, src_mask)
    h = model.decoder(model.tgt_embed(tokens[:, -1:]), memory, src_mask, None, cache=cache)
    return F.log_softmax(model.generator(h[:, -1]), dim=-1)


def _greedy_variant(model, src, src_mask, max_len, bos_id, eos_id, pad=None, done_first=False,
                    keep_done=True, first_row=False, bounded=True, generator=True):
    pad = model.config.pad_id if pad is None else pad
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    step = 0
    while (step < max_len) if bounded else not done.all():
        h = model.decode(ys, memory, src_mask, causal_mask(ys.size(1)))[:, -1]
        token = (model.generator(h) if generator else h).argmax(-1)
        if first_row:
            token = token[0].repeat(src.size(0))
        if done_first:
            done = done | (token == eos_id)
            token = token.masked_fill(done, pad)
        else:
            token = token.masked_fill(done, pad)
            done = (done if keep_done else torch.zeros_like(done)) | (token == eos_id)
        ys = torch.cat((ys, token[:, None]), 1)
        step += 1
        if done.all():
            break
    return ys[:, 1:]


@wrong("greedy_decode.pad_hardcoded")
def pads_with_zero(model, src, src_mask, max_len, bos_id, eos_id):
    return _greedy_variant(model, src, src_mask, max_len, bos_id, eos_id, pad=0)


@wrong("greedy_decode.eos_replaced")
def eos_replaced_by_padding(model, src, src_mask, max_len, bos_id, eos_id):
    return _greedy_variant(model, src, src_mask, max_len, bos_id, eos_id, done_first=True)


@wrong("greedy_decode.done_not_kept")
def done_overwritten(model, src, src_mask, max_len, bos_id, eos_id):
    return _greedy_variant(model, src, src_mask, max_len, bos_id, eos_id, keep_done=False)


@wrong("greedy_decode.one_sentence")
def first_sentence_only(model, src, src_mask, max_len, bos_id, eos_id):
    return _greedy_variant(model, src, src_mask, max_len, bos_id, eos_id, first_row=True)


@wrong("greedy_decode.max_len_ignored")
def until_every_eos(model, src, src_mask, max_len, bos_id, eos_id):
    return _greedy_variant(model, src, src_mask, max_len, bos_id, eos_id, bounded=False)


@wrong("greedy_decode.no_generator")
def no_generator(model, src, src_mask, max_len, bos_id, eos_id):
    return _greedy_variant(model, src, src_mask, max_len, bos_id, eos_id, generator=False)


@wrong("beam_search_step.alpha_ignored")
def alpha_hard_coded(scores, log_probs, lengths, alpha=0.6):
    candidates = scores[:, :, None] + log_probs
    return _top(candidates / length_penalty(lengths, 0.6)[:, :, None], candidates, scores.size(1))


@wrong("beam_search_step.partly_normalized")
def token_part_normalized(scores, log_probs, lengths, alpha=0.6):
    ranking = scores[:, :, None] + log_probs / length_penalty(lengths, alpha)[:, :, None]
    return _top(ranking, scores[:, :, None] + log_probs, scores.size(1))


@wrong("beam_search_step.ranked_by_token")
def ranked_by_the_token(scores, log_probs, lengths, alpha=0.6):
    ranking = log_probs / length_penalty(lengths, alpha)[:, :, None]
    return _top(ranking, scores[:, :, None] + log_probs, scores.size(1))


@wrong("beam_search_step.batch_flattened")
def whole_batch_flattened(scores, log_probs, lengths, alpha=0.6):
    beam, vocab = log_probs.shape[1:]
    candidates = scores[:, :, None] + log_probs
    best = (candidates / length_penalty(lengths, alpha)[:, :, None]).flatten().topk(beam).indices
    return candidates.flatten()[best], (best // vocab) % beam, best % vocab


@wrong("decode_step.newest_only_uncached")
def newest_token_only(model, tokens, memory, src_mask, cache=None):
    if cache is not None:
        return right_step(model, tokens, memory, src_mask, cache)
    return model.generator(model.decode(tokens[:, -1:], memory, src_mask, None)[:, -1]).log_softmax(-1)


@wrong("decode_step.rescaled")
def embedding_scaled_again(model, tokens, memory, src_mask, cache=None):
    if cache is None:
        return right_step(model, tokens, memory, src_mask)
    x = model.tgt_embed(tokens[:, -1:]) * model.config.d_model**0.5
    h = model.decoder(model.positional(x, start=len(cache)), memory, src_mask, None, cache=cache)
    return F.log_softmax(model.generator(h[:, -1]), dim=-1)


@wrong("greedy_decode.batch_normalized")
def softmax_over_the_batch(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    pad = model.config.pad_id
    for _ in range(max_len):
        logits = _next(model, ys, memory, src_mask)
        nxt = F.softmax(logits, dim=0).argmax(dim=-1).masked_fill(done, pad)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys[:, 1:]


@wrong("greedy_decode.batch_normalized")
def log_softmax_over_the_batch_of_every_position(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        h = model.decode(ys, memory, src_mask, causal_mask(ys.size(1)))
        log_probs = model.generator(h).log_softmax(0)  # (batch, t, vocab)
        token = torch.where(finished, model.config.pad_id, log_probs[:, -1].argmax(1))
        ys = torch.cat((ys, token.unsqueeze(1)), dim=1)
        finished = finished | (token == eos_id)
        if bool(finished.all()):
            break
    return ys[:, 1:]


@wrong("greedy_decode.sampled")
def samples_the_next_token(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        logits = model.generator(model.decode(ys, memory, src_mask, causal_mask(ys.size(1))))
        token = torch.distributions.Categorical(logits=logits[:, -1]).sample()
        token = token.masked_fill(done, model.config.pad_id)
        ys = torch.cat((ys, token[:, None]), 1)
        done |= token == eos_id
        if done.all():
            break
    return ys[:, 1:]


@wrong("decode_step.first_position")
def first_position(model, tokens, memory, src_mask, cache=None):
    if cache is not None:
        return right_step(model, tokens, memory, src_mask, cache)
    h = model.decode(tokens, memory, src_mask, causal_mask(tokens.size(1)))
    return model.generator(h[:, 0]).log_softmax(-1)


@wrong("decode_step.causal_mask_cached")
def causal_mask_with_the_cache(model, tokens, memory, src_mask, cache=None):
    t = tokens.size(1)
    if cache is None:
        return right_step(model, tokens, memory, src_mask)
    x = model.positional(model.tgt_embed(tokens[:, -1:]), start=t - 1)
    h = model.decoder(x, memory, src_mask, causal_mask(t), cache=cache)
    return model.generator(h[:, -1]).log_softmax(-1)


@wrong("beam_search_step.results_order")
def returns_indices_first(scores, log_probs, lengths, alpha=0.6):
    candidates = scores[:, :, None] + log_probs
    new, beam, token = _top(candidates / length_penalty(lengths, alpha)[:, :, None], candidates,
                            scores.size(1))
    return beam, token, new


# --------------------------------------------------------------------- right, other styles


@torch.no_grad()
def greedy_with_the_cache(model, src, src_mask, max_len, bos_id, eos_id):
    """Right: one new token a step through decode's parts (tgt_embed, positional, decoder)
    and the key/value cache, as the exercise's interface allows."""
    memory = model.encode(src, src_mask)
    cache = model.init_cache()
    last = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    out = []
    for t in range(max_len):
        h = model.decoder(model.positional(model.tgt_embed(last), start=t), memory, src_mask, None,
                          cache=cache)
        token = model.generator(h[:, -1]).argmax(-1).masked_fill(done, model.config.pad_id)
        out.append(token)
        done |= token == eos_id
        last = token[:, None]
        if done.all():
            break
    return torch.stack(out, 1)


RIGHT = {"greedy_decode": (greedy_with_the_cache,)}


@wrong("beam_search_step.penalty_formula")
def beam_penalty_floor_division(scores, log_probs, lengths, alpha=0.6):
    batch, beam, vocab = log_probs.shape
    total = (scores.unsqueeze(-1) + log_probs).view(batch, -1)
    lp = ((5 + lengths) // 6) ** alpha  # (batch, beam)
    ranked = total / lp.repeat_interleave(vocab, dim=1)
    best = ranked.topk(beam, dim=1).indices
    return total.gather(1, best), best // vocab, best % vocab



@wrong("greedy_decode.eos_start")
@torch.no_grad()
def greedy_from_eos_as_fairseq(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), eos_id, dtype=torch.long)  # prev_output_tokens start
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        h = model.decode(ys, memory, src_mask, causal_mask(ys.size(1))[None, None])
        token = model.generator(h[:, -1]).argmax(-1).masked_fill(done, model.config.pad_id)
        ys = torch.cat([ys, token[:, None]], dim=1)
        done |= token == eos_id
        if done.all():
            break
    return ys[:, 1:]


@wrong("beam_search_step.ranked_as_probabilities")
def ranked_by_probability(scores, log_probs, lengths, alpha=0.6):
    batch, beam, vocab = log_probs.shape
    candidates = scores.unsqueeze(-1) + log_probs
    penalty = ((5 + lengths) / 6) ** alpha
    probability = torch.exp(candidates / penalty.unsqueeze(-1)).view(batch, -1)  # "as probabilities"
    best = probability.topk(beam, dim=-1).indices
    return candidates.view(batch, -1).gather(1, best), best // vocab, best % vocab


@wrong("greedy_decode.eos_start")
def start_from_pad(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    pad = model.config.pad_id
    ys = torch.full((src.size(0), 1), pad, dtype=torch.long)  # T5's decoder_start_token_id
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        h = model.decode(ys, memory, src_mask, causal_mask(ys.size(1)))
        token = model.generator(h[:, -1]).argmax(-1).masked_fill(done, pad)
        ys = torch.cat([ys, token[:, None]], dim=1)
        done |= token == eos_id
        if done.all():
            break
    return ys[:, 1:]


@wrong("beam_search_step.index_split")
def flattened_vocab_major(scores, log_probs, lengths, alpha=0.6):
    batch, beam, vocab = log_probs.shape
    candidates = (scores[:, :, None] + log_probs).transpose(1, 2)  # (batch, vocab, beam)
    penalty = (((5 + lengths) / 6) ** alpha)[:, None, :]
    best = (candidates / penalty).reshape(batch, -1).topk(beam, dim=-1).indices
    return candidates.reshape(batch, -1).gather(1, best), best // vocab, best % vocab
