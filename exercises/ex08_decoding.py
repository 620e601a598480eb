"""Exercise 08: decoding. Greedy decoding, one step of beam search, and a decoding step
that uses the key/value cache.

Fill in the three functions below, then check them from the repository's root:

    pytest exercises/test_ex08_decoding.py

or from a notebook:

    from tfcourse.checking import check
    check("ex08_decoding")

The model you get has the interface of tfcourse.model.Transformer:
    memory = model.encode(src, src_mask)                       (batch, src_len, d_model)
    h = model.decode(tgt, memory, src_mask, tgt_mask)          (batch, tgt_len, d_model)
    logits = model.generator(h)                                (batch, tgt_len, vocab)
    model.config.pad_id, model.init_cache(), model.tgt_embed, model.positional, model.decoder

The checks need no training: they use a small random Transformer, and for greedy decoding
also a scripted stand-in for a trained model that says the source back, then EOS.
"""

import math  # noqa: F401  (you will likely need these)

import torch  # noqa: F401
import torch.nn.functional as F  # noqa: F401

from tfcourse.masks import causal_mask  # noqa: F401


@torch.no_grad()
def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id):
    """y_t = argmax_y p(y | y_<t, x), one token at a time, for a whole batch at once.

    Args:
        src:      (batch, src_len) token ids; src_mask (batch, 1, 1, src_len), True = real token
        max_len:  the most tokens to generate
        bos_id, eos_id: the start and end symbols

    Returns:
        (batch, n) token ids, n <= max_len: the generated tokens y_1 ... y_n WITHOUT the
        BOS you started from. A sequence that produced EOS keeps it, and after it gets
        padding (model.config.pad_id). The loop stops as soon as every sequence has
        produced EOS (so n can be smaller than max_len), or after max_len tokens.

    Hints:
        1. Encode the source once. Start every sequence with BOS: ys = (batch, 1).
        2. Each step: run the decoder on ys (with causal_mask(ys.size(1))), take the logits
           of the LAST position, their argmax is the next token; append it to ys.
        3. Keep a (batch,) bool tensor of finished sequences. What should a finished
           sequence get next? When may the loop end?
    """
    raise NotImplementedError


def beam_search_step(scores, log_probs, lengths, alpha=0.6):
    """One step of beam search: extend every beam by every token, keep the best `beam`.

    Args:
        scores:    (batch, beam) log P(prefix | x) of each beam so far
        log_probs: (batch, beam, vocab) log p(token | prefix, x) of each next token
        lengths:   (batch, beam) the length |Y| each beam's candidates will have (float)
        alpha:     the length penalty's exponent (alpha = 0: no normalization)

    Returns:
        (new_scores, beam, token), each (batch, beam), best candidate first:
        new_scores: log P(prefix + token | x) of each kept candidate (NOT divided by lp),
        beam: the index of the beam it extends, token: the token it adds.

    Candidates are ranked by  log P(candidate | x) / lp(length),
    with GNMT's length penalty  lp = ((5 + length) / 6) ** alpha.

    Hints:
        1. How do you get log P(prefix + token) from log P(prefix) and log p(token)?
        2. Rank by the normalized score, but keep the raw one for the next step.
        3. Flatten (beam, vocab) into one axis per sentence and take .topk(beam); an index i
           of that axis is beam i // vocab, token i % vocab.
    """
    raise NotImplementedError


def decode_step(model, tokens, memory, src_mask, cache=None):
    """log p(next token | tokens, x): (batch, vocab) log-probabilities, from the prefix
    tokens (batch, t) (BOS y_1 ... y_{t-1}).

    Without a cache: run the whole prefix through the decoder and use the last position.
    model.decode(tokens, memory, src_mask, tgt_mask) may do it (tgt_mask: causal), or the
    two lines below with start=0.

    With a cache (from model.init_cache(); it holds the t - 1 earlier positions' keys and
    values, and len(cache) says how many): put only the newest token, tokens[:, -1:],
    through the decoder; every layer appends its keys and values to the cache. Here do not
    call model.decode: it would choose the new token's position for you (its start), which
    is what this branch asks of you. Write its two lines yourself:
        x = model.positional(model.tgt_embed(new_tokens), start=...)   # which position?
        h = model.decoder(x, memory, src_mask, tgt_mask, cache=cache)
    (with the cache, tgt_mask=None: the one new token may see every cached position).

    Hints:
        1. The positional encoding says where a token is in the sequence. Where is the
           newest of t tokens?
        2. Return log-probabilities (log_softmax over the vocabulary), not logits.
    """
    raise NotImplementedError
