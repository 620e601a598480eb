"""Wrong ways to write greedy decoding, a beam-search step and a cached decoding step, and
the diagnosis each must get."""

import time

import torch
import torch.nn.functional as F

from tfcourse.decoding import decode_step as right_step
from tfcourse.decoding import length_penalty
from tfcourse.masks import causal_mask, target_mask

from . import diagnosis

# --------------------------------------------------------------------------- greedy


def _next(model, ys, memory, src_mask):
    return model.generator(model.decode(ys, memory, src_mask, causal_mask(ys.size(1)))[:, -1])


@diagnosis("Greedy decoding does not stop at EOS")
def never_stops(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat((ys, _next(model, ys, memory, src_mask).argmax(-1, keepdim=True)), 1)
    return ys[:, 1:]


@diagnosis("Greedy decoding does not stop at EOS")
def stops_but_does_not_pad(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        ys = torch.cat((ys, _next(model, ys, memory, src_mask).argmax(-1, keepdim=True)), 1)
        if (ys == eos_id).any(1).all():
            break
    return ys[:, 1:]


@diagnosis("Greedy decoding does not stop at EOS")
def pads_but_runs_to_max_len(model, src, src_mask, max_len, bos_id, eos_id):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        token = torch.where(done, model.config.pad_id, _next(model, ys, memory, src_mask).argmax(-1))
        done = done | (token == eos_id)
        ys = torch.cat((ys, token[:, None]), 1)
    return ys[:, 1:]


@diagnosis("Greedy decoding does not stop at EOS")
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


@diagnosis("Stops when the first sequence ends")
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


@diagnosis("BOS included in the output")
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


@diagnosis("Finished sequences filled with EOS, not padding")
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


@diagnosis("Wrong output: the output has shape (4, 9), expected (4, 6)")
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


@diagnosis("Wrong output: the output is None")
def forgot_return(model, src, src_mask, max_len, bos_id, eos_id):
    model.encode(src, src_mask)


@diagnosis("Too slow")
def endless_loop(model, src, src_mask, max_len, bos_id, eos_id):
    while True:
        time.sleep(0.01)


# ------------------------------------------------------------------ beam_search_step


def _top(ranking, kept, beam):
    vocab = ranking.size(-1)
    best = ranking.flatten(1).topk(beam, dim=-1).indices
    return kept.flatten(1).gather(1, best), best // vocab, best % vocab


@diagnosis("Beam scores multiplied as probabilities instead of added as log-probabilities")
def probabilities_multiplied(scores, log_probs, lengths, alpha=0.6):
    candidates = scores[:, :, None].exp() * log_probs.exp()  # P(prefix) * p(token)
    return _top(candidates / length_penalty(lengths, alpha)[:, :, None], candidates, scores.size(1))


@diagnosis("Beam scores multiplied as probabilities instead of added as log-probabilities")
def log_probs_multiplied(scores, log_probs, lengths, alpha=0.6):
    candidates = scores.unsqueeze(-1) * log_probs
    return _top(candidates / ((5 + lengths) / 6).pow(alpha).unsqueeze(-1), candidates, scores.size(1))


@diagnosis("Beam scores multiplied as probabilities instead of added as log-probabilities")
def scores_times_probabilities_no_penalty(scores, log_probs, lengths, alpha=0.6):
    candidates = torch.einsum("bk,bkv->bkv", scores, torch.softmax(log_probs, -1))
    return _top(candidates, candidates, scores.size(1))


@diagnosis("No length normalization")
def raw_sums(scores, log_probs, lengths, alpha=0.6):
    candidates = scores[:, :, None] + log_probs
    return _top(candidates, candidates, scores.size(1))


@diagnosis("No length normalization")
def raw_sums_sorted(scores, log_probs, lengths, alpha=0.6):
    batch, beam, vocab = log_probs.shape
    flat = (scores.unsqueeze(2) + log_probs).view(batch, -1)
    values, index = flat.sort(dim=1, descending=True)
    return values[:, :beam], index[:, :beam] // vocab, index[:, :beam] % vocab


@diagnosis("Normalized scores returned")
def returns_normalized(scores, log_probs, lengths, alpha=0.6):
    ranking = (scores[:, :, None] + log_probs) / length_penalty(lengths, alpha)[:, :, None]
    return _top(ranking, ranking, scores.size(1))


@diagnosis("Wrong choice of candidates")
def index_split_wrongly(scores, log_probs, lengths, alpha=0.6):
    batch, beam, vocab = log_probs.shape
    candidates = scores[:, :, None] + log_probs
    ranking = candidates / length_penalty(lengths, alpha)[:, :, None]
    best = ranking.flatten(1).topk(beam, dim=-1).indices
    return candidates.flatten(1).gather(1, best), best % beam, best // beam


@diagnosis("Input modified in place")
def adds_in_place(scores, log_probs, lengths, alpha=0.6):
    log_probs += scores[:, :, None]
    return _top(log_probs / length_penalty(lengths, alpha)[:, :, None], log_probs, scores.size(1))


@diagnosis("beam_search_step should return a tuple (scores, beam, token), got Tensor")
def returns_scores_only(scores, log_probs, lengths, alpha=0.6):
    candidates = scores[:, :, None] + log_probs
    return _top(candidates / length_penalty(lengths, alpha)[:, :, None], candidates, scores.size(1))[0]


# -------------------------------------------------------------------------- decode_step


def _cached(model, tokens, memory, src_mask, cache, start):
    x = model.positional(model.tgt_embed(tokens[:, -1:]), start=start)
    h = model.decoder(x, memory, src_mask, None, cache=cache)
    return F.log_softmax(model.generator(h[:, -1]), dim=-1)


@diagnosis("KV-cache positions not advanced")
def position_stays_zero(model, tokens, memory, src_mask, cache=None):
    if cache is None:
        return right_step(model, tokens, memory, src_mask)
    return _cached(model, tokens, memory, src_mask, cache, start=0)


@diagnosis("KV-cache positions not advanced")
def model_positional_default(model, tokens, memory, src_mask, cache=None):
    if cache is None:
        return right_step(model, tokens, memory, src_mask)
    x = model.positional(model.tgt_embed(tokens[:, -1:]))  # start left at its default, 0
    return model.generator(model.decoder(x, memory, src_mask, None, cache)).log_softmax(-1)[:, -1]


@diagnosis("KV-cache position off by one")
def position_is_length(model, tokens, memory, src_mask, cache=None):
    if cache is None:
        return right_step(model, tokens, memory, src_mask)
    return _cached(model, tokens, memory, src_mask, cache, start=tokens.size(1))


@diagnosis("No causal mask without the cache")
def no_causal_mask(model, tokens, memory, src_mask, cache=None):
    if cache is not None:
        return right_step(model, tokens, memory, src_mask, cache)
    return model.generator(model.decode(tokens, memory, src_mask, None))[:, -1].log_softmax(-1)


@diagnosis("Source padding mask not passed on")
def no_src_mask(model, tokens, memory, src_mask, cache=None):
    return right_step(model, tokens, memory, None, cache)


@diagnosis("Logits returned instead of log-probabilities")
def returns_logits(model, tokens, memory, src_mask, cache=None):
    if cache is None:
        h = model.decode(tokens, memory, src_mask, causal_mask(tokens.size(1)))
    else:
        h = model.decode(tokens[:, -1:], memory, src_mask, None, cache=cache)
    return model.generator(h[:, -1])


@diagnosis("The cache holds 0 positions after step 1, expected 1: it was not used")
def ignores_cache(model, tokens, memory, src_mask, cache=None):
    return right_step(model, tokens, memory, src_mask)


@diagnosis("The cache holds 3 positions after step 2, expected 2")
def whole_prefix_into_cache(model, tokens, memory, src_mask, cache=None):
    if cache is None:
        return right_step(model, tokens, memory, src_mask)
    x = model.positional(model.tgt_embed(tokens), start=0)
    return model.generator(model.decoder(x, memory, src_mask, None, cache))[:, -1].log_softmax(-1)


@diagnosis("Wrong output: the output has shape (3, 1, 12)")
def keeps_time_axis(model, tokens, memory, src_mask, cache=None):
    h = model.decode(tokens, memory, src_mask, causal_mask(tokens.size(1)))
    return model.generator(h[:, -1:]).log_softmax(-1)
