"""Checks for exercise 08: greedy decoding, one step of beam search, and a decoding step
with the key/value cache; and their catalogue of mistakes.

No check trains anything. greedy_decode runs on a scripted stand-in for a trained model
(it says the source back, then EOS, then would ramble on) so that every row stops at a
known step, and then on a small random Transformer; beam_search_step needs no model;
decode_step runs on a small random Transformer, seeded.
"""

import math

import torch
from torch import nn

from ..decoding import beam_search_step as reference_beam_step
from ..decoding import decode_step as reference_step
from ..decoding import greedy_decode as reference_greedy
from ..decoding import length_penalty
from ..masks import causal_mask, padding_mask
from ..model import Transformer, TransformerConfig
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

PAD, BOS, EOS = 0, 1, 2
VOCAB = 12  # 3 specials, then symbols 3..11


# ---------------------------------------------------------------------------- models


class ScriptedModel(nn.Module):
    """A stand-in for a trained model, with the interface of tfcourse.model.Transformer
    (encode, decode, generator, init_cache, config). Whatever tokens it is fed, at position t
    it predicts script[:, t], sure of itself: the source's symbols, EOS, then the source again
    (a model that would ramble on if nobody stopped it at EOS)."""

    def __init__(self):
        super().__init__()
        self.config = TransformerConfig(VOCAB, VOCAB, d_model=VOCAB, n_heads=1, pad_id=PAD)
        self.generator = nn.Identity()

    def encode(self, src, src_mask):
        rows = []
        for row in src.tolist():
            said = [t for t in row if t != PAD] + [EOS]
            rows.append((said * 64)[:64])
        return 8.0 * nn.functional.one_hot(torch.tensor(rows), VOCAB).float()  # (batch, 64, V)

    def decode(self, tgt, memory, src_mask, tgt_mask, cache=None):
        start = len(cache) if cache is not None else 0
        if cache is not None:
            cache.length += tgt.size(1)
        return memory[:, start : start + tgt.size(1)]  # (batch, tgt_len, V): "logits"

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.generator(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))

    def init_cache(self):
        return _Positions()


class _Positions:
    def __init__(self):
        self.length = 0

    def __len__(self):
        return self.length

    def reorder(self, index):
        pass


def small_transformer(seed=0):
    """A random Transformer, 2 + 2 layers, eval mode (no dropout): the same on every call."""
    torch.manual_seed(seed)
    config = TransformerConfig.tiny(VOCAB, d_model=16, n_heads=2, d_ff=32, dropout=0.0,
                                    share_embeddings=False, tie_output=False, max_len=64)
    model = Transformer(config).eval()
    nn.init.normal_(model.generator.weight, std=1.0)
    return model


def _source(lengths, seed):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, VOCAB, (len(lengths), max(lengths)), generator=g)
    src = src.masked_fill(torch.arange(src.size(1)) >= torch.tensor(lengths)[:, None], PAD)
    return src, padding_mask(src, PAD)


# ------------------------------------------------------------------------ greedy_decode


@torch.no_grad()
def _greedy(model, src, src_mask, max_len, bos_id, eos_id, stop=True, fill=PAD, first=False,
            keep_bos=False):
    """Greedy decoding with the variations mistakes make."""
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        logits = model.generator(model.decode(ys, memory, src_mask, causal_mask(ys.size(1)))[:, -1])
        token = logits.argmax(-1)
        if fill is not None:
            token = token.masked_fill(done, fill)
        ys = torch.cat((ys, token[:, None]), 1)
        done |= token == eos_id
        if stop and (done.any() if first else done.all()):
            break
    return ys if keep_bos else ys[:, 1:]


GREEDY = "greedy_decode"
NO_STOP = Mistake(
    "Greedy decoding does not stop at EOS",
    "once a sequence has produced EOS it is finished: from then on give it padding "
    "(model.config.pad_id), and stop the loop as soon as every sequence is finished.",
    (
        lambda m, s, sm, n, b, e: _greedy(m, s, sm, n, b, e, stop=False, fill=None),
        lambda m, s, sm, n, b, e: _greedy(m, s, sm, n, b, e, fill=None),
        lambda m, s, sm, n, b, e: _greedy(m, s, sm, n, b, e, stop=False),
        lambda m, s, sm, n, b, e: _greedy(m, s, sm, n, b, e, stop=False, fill=e),
    ),
)
GREEDY_MISTAKES = (
    NO_STOP,
    Mistake(
        "Stops when the first sequence ends",
        "the batch is finished only when EVERY sequence has produced EOS (done.all(), not "
        "done.any()); the others still have tokens to say.",
        (lambda m, s, sm, n, b, e: _greedy(m, s, sm, n, b, e, first=True),
         lambda m, s, sm, n, b, e: _greedy(m, s, sm, n, b, e, first=True, fill=None)),
    ),
    Mistake(
        "BOS included in the output",
        "return the generated tokens y_1 ... y_n only: drop the BOS column you started with.",
        (lambda m, s, sm, n, b, e: _greedy(m, s, sm, n, b, e, keep_bos=True),),
    ),
    Mistake(
        "Finished sequences filled with EOS, not padding",
        "after its EOS a sequence gets padding (model.config.pad_id), so that every output "
        "has exactly one EOS.",
        (lambda m, s, sm, n, b, e: _greedy(m, s, sm, n, b, e, fill=e),),
    ),
)

# (model, lengths of the source rows, max_len): every row stops before max_len in the
# first cases, one row runs to max_len in the next; then a real (random) Transformer.
GREEDY_CASES = [
    (ScriptedModel, [3, 5, 1, 4], 9),
    (ScriptedModel, [2, 8, 4], 6),
    (ScriptedModel, [3], 7),
    (small_transformer, [7, 3], 5),
]


@checks(GREEDY)
def check_greedy_decode(fn):
    """Run `fn` and the reference on the cases; name the mistake when one matches."""
    for seed, (make, lengths, max_len) in enumerate(GREEDY_CASES):
        model = make()
        src, src_mask = _source(lengths, seed)
        args = (model, src, src_mask, max_len, BOS, EOS)
        inputs = (f"{'a scripted model' if make is ScriptedModel else 'a random Transformer'}, "
                  + describe(src=src, max_len=max_len, bos_id=BOS, eos_id=EOS))
        outcome = call(fn, model, src.clone(), src_mask.clone(), max_len, BOS, EOS)
        fail_on_error(outcome, GREEDY, inputs)
        expected = reference_greedy(*args)
        result = outcome.value
        if isinstance(result, torch.Tensor) and result.shape == expected.shape \
                and torch.equal(result.long(), expected):
            continue
        if isinstance(result, torch.Tensor):
            mistake = first_match(GREEDY_MISTAKES, result, *args, same=_same_ids)
            if mistake is not None:
                mistake.fail(f"  on {inputs}\n  got      {result.tolist()}\n"
                             f"  expected {expected.tolist()}")
        if not isinstance(result, torch.Tensor) or result.shape != expected.shape:
            problem = tensor_problem(result, expected, "the output")
            shown = (f"\n  got      {result.tolist()}\n  expected {expected.tolist()}"
                     if isinstance(result, torch.Tensor) else "")
            raise CheckFailure(f"Wrong output: {problem} on {inputs}{shown}")
        if result.is_floating_point():
            raise CheckFailure(f"Wrong output: token ids must be integers (torch.long), got "
                               f"{result.dtype} on {inputs}")
        raise CheckFailure(
            f"Wrong tokens on {inputs}, and no common mistake matches: at each step take the "
            f"argmax of the last position's logits and append it.\n  got      {result.tolist()}"
            f"\n  expected {expected.tolist()}"
        )


def _same_ids(actual, predicted):
    return actual.shape == predicted.shape and torch.equal(actual.long(), predicted)


# --------------------------------------------------------------------- beam_search_step


def _beam_step(scores, log_probs, lengths, alpha=0.6, combine="add", normalize=True,
               return_ranking=False):
    """One beam-search step with the variations mistakes make."""
    batch, beam, vocab = log_probs.shape
    if combine == "add":
        candidates = scores[:, :, None] + log_probs
    elif combine == "times_probs":  # scores kept as probabilities: p(prefix) * p(token)
        candidates = scores[:, :, None] * log_probs.exp()
    elif combine == "times_log_probs":
        candidates = scores[:, :, None] * log_probs
    else:  # "probabilities": exp(scores) * p(token), returned as a probability
        candidates = scores.exp()[:, :, None] * log_probs.exp()
    ranking = candidates / length_penalty(lengths, alpha)[:, :, None] if normalize else candidates
    best = ranking.flatten(1).topk(beam, dim=-1).indices
    kept = (ranking if return_ranking else candidates).flatten(1).gather(1, best)
    return kept, best // vocab, best % vocab


BEAM = "beam_search_step"
MULTIPLIED = Mistake(
    "Beam scores multiplied as probabilities instead of added as log-probabilities",
    "scores are log-probabilities: log P(prefix + token) = log P(prefix) + log p(token). "
    "Multiplying probabilities underflows to 0 after a few dozen tokens.",
    tuple(
        (lambda s, lp, n, a, c=combine, z=normalize: _beam_step(s, lp, n, a, c, z))
        for combine in ("times_probs", "times_log_probs", "probabilities")
        for normalize in (True, False)
    ),
)
BEAM_MISTAKES = (
    MULTIPLIED,
    Mistake(
        "No length normalization",
        "rank the candidates by log P / lp(length), lp = ((5 + length) / 6)^alpha: raw sums "
        "of log-probabilities only fall as a sequence grows, so short outputs always win.",
        (lambda s, lp, n, a: _beam_step(s, lp, n, a, normalize=False),),
    ),
    Mistake(
        "Normalized scores returned",
        "rank by log P / lp(length), but return log P itself: the next step adds to it, and "
        "lp changes with the length.",
        (lambda s, lp, n, a: _beam_step(s, lp, n, a, return_ranking=True),),
    ),
)


def _beam_case(seed, batch, beam, vocab, lengths, alpha=0.6, first=False, finished=()):
    g = torch.Generator().manual_seed(seed)
    scores = -torch.rand(batch, beam, generator=g) * 4 - 0.5  # log P of each beam so far
    log_probs = torch.log_softmax(torch.randn(batch, beam, vocab, generator=g) * 2, dim=-1)
    if first:  # the first step: one real beam, the others -inf
        scores[:, 1:] = -math.inf
    for b, k in finished:  # a finished beam: one continuation (padding) at no cost
        log_probs[b, k] = -math.inf
        log_probs[b, k, PAD] = 0.0
    lengths = torch.tensor(lengths, dtype=torch.float).expand(batch, beam).clone()
    return scores, log_probs, lengths, alpha


BEAM_CASES = [
    _beam_case(0, 2, 3, 7, [4, 4, 4]),
    _beam_case(1, 3, 4, 6, [2, 5, 9, 3], alpha=1.0, finished=((0, 0), (1, 2), (2, 3))),
    _beam_case(2, 2, 3, 5, [1, 1, 1], first=True),
    _beam_case(3, 2, 4, 9, [3, 3, 12, 6], alpha=0.6, finished=((0, 0), (1, 0))),
    _beam_case(4, 1, 2, 4, [7, 2], alpha=0.0),
]


def _same_step(actual, predicted):
    return (
        isinstance(actual, (tuple, list))
        and len(actual) == 3
        and close(actual[0], predicted[0])
        and all(isinstance(a, torch.Tensor) and a.shape == p.shape and torch.equal(a.long(), p)
                for a, p in zip(actual[1:], predicted[1:]))
    )


@checks(BEAM)
def check_beam_search_step(fn):
    """Compare `fn` with the reference on BEAM_CASES; name the mistake when one matches."""
    for args in BEAM_CASES:
        scores, log_probs, lengths, alpha = args
        inputs = describe(scores=scores, log_probs=log_probs, lengths=lengths, alpha=alpha)
        given = [a.clone() for a in args[:3]]
        outcome = call(fn, *given, alpha)
        fail_on_error(outcome, BEAM, inputs)
        changed = [n for n, a, b in zip(("scores", "log_probs", "lengths"), given, args) if
                   not torch.equal(a, b)]
        if changed:
            raise CheckFailure(f"Input modified in place: your function changed the caller's "
                               f"{' and '.join(changed)}. Use out-of-place operations.")
        expected = reference_beam_step(*args)
        result = outcome.value
        if _same_step(result, expected):
            continue
        mistake = first_match(BEAM_MISTAKES, result, *args, same=_same_step)
        if mistake is not None:
            mistake.fail(f"  on {inputs}")
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            kind = type(result).__name__ if result is not None else "None"
            raise CheckFailure(f"{BEAM} should return a tuple (scores, beam, token), got {kind} "
                               f"on {inputs}")
        for value, want, what in zip(result, expected, ("scores", "beam", "token")):
            problem = tensor_problem(value, want, what)
            if problem and not (isinstance(value, torch.Tensor) and value.shape == want.shape):
                raise CheckFailure(f"Wrong {what}: {problem} on {inputs}")
        if not close(result[0], expected[0]) and all(map(torch.equal, result[1:], expected[1:])):
            raise CheckFailure(f"Wrong scores on {inputs}, and no common mistake matches: "
                               f"{difference(result[0].to(expected[0].dtype), expected[0])}")
        raise CheckFailure(
            f"Wrong choice of candidates on {inputs}, and no common mistake matches.\n"
            f"  got beam {result[1].tolist()} token {result[2].tolist()}\n"
            f"  expected beam {expected[1].tolist()} token {expected[2].tolist()}\n"
            "  Flatten (beam, vocab) into one axis per sentence, take the top beam-many, and "
            "split each index into beam = index // vocab, token = index % vocab."
        )


# -------------------------------------------------------------------------- decode_step


def _step(model, tokens, memory, src_mask, cache=None, start=None, mask=True, log=True,
          use_src_mask=True):
    """decode_step with the variations mistakes make; `start` is the position of the first
    token fed (with a cache: only the newest token is fed)."""
    src_mask = src_mask if use_src_mask else None
    if cache is None:
        x = tokens
        tgt_mask = causal_mask(tokens.size(1)) if mask else None
    else:
        x, tgt_mask = tokens[:, -1:], None
    pos = (len(cache) if cache is not None else 0) if start is None else start(tokens, cache)
    y = model.positional(model.tgt_embed(x), start=pos)
    logits = model.generator(model.decoder(y, memory, src_mask, tgt_mask, cache=cache)[:, -1])
    return logits.log_softmax(-1) if log else logits


def _steps(step, cached, **kw):
    """All the prefixes of `tokens`, one step each (a fresh cache when cached): (batch, T, V)."""

    def run(model, tokens, memory, src_mask):
        cache = model.init_cache() if cached else None
        return torch.stack([step(model, tokens[:, :t], memory, src_mask, cache, **kw)
                            for t in range(1, tokens.size(1) + 1)], dim=1)

    return run


STEP = "decode_step"
LOGITS = Mistake(
    "Logits returned instead of log-probabilities",
    "apply log_softmax over the vocabulary to the generator's output: beam search adds "
    "log-probabilities.",
)
STEP_MISTAKES_UNCACHED = (
    Mistake(
        "No causal mask without the cache",
        "when the whole prefix goes through the decoder, position i must not see positions "
        "after i (tgt_mask = causal_mask(t)): the model was trained that way.",
        (_steps(_step, False, mask=False),),
    ),
    Mistake(
        "Source padding mask not passed on",
        "the decoder's cross-attention must not look at the source's padding: pass src_mask.",
        (_steps(_step, False, use_src_mask=False), _steps(_step, True, use_src_mask=False)),
    ),
)
STEP_MISTAKES_CACHED = (
    Mistake(
        "KV-cache positions not advanced",
        "with a cache only the newest token goes in, but it is not at position 0: it is at "
        "position len(cache) (the number of tokens already cached). Pass that as "
        "model.positional(x, start=...).",
        (_steps(_step, True, start=lambda t, c: 0),),
    ),
    Mistake(
        "KV-cache position off by one",
        "the newest of t tokens is at position t - 1 (positions count from 0), which is "
        "len(cache) before the step.",
        (_steps(_step, True, start=lambda t, c: t.size(1)),
         _steps(_step, True, start=lambda t, c: len(c) + 1)),
    ),
    *STEP_MISTAKES_UNCACHED[1:],
)


@checks(STEP)
def check_decode_step(fn):
    """Run every prefix through `fn`, without then with a cache; compare with the reference."""
    model = small_transformer()
    src, src_mask = _source([7, 4, 2], 10)
    tokens = torch.randint(3, VOCAB, (3, 6), generator=torch.Generator().manual_seed(11))
    tokens[:, 0] = BOS
    with torch.no_grad():
        memory = model.encode(src, src_mask)
    args = (model, tokens, memory, src_mask)
    for cached in (False, True):
        expected = _steps(reference_step, cached)(*args)
        cache = model.init_cache() if cached else None
        got = []
        for t in range(1, tokens.size(1) + 1):
            inputs = (f"a random Transformer, {describe(tokens=tokens[:, :t], memory=memory)}, "
                      f"{'a cache holding ' + str(t - 1) + ' positions' if cached else 'no cache'}")
            outcome = call(fn, model, tokens[:, :t].clone(), memory, src_mask.clone(), cache)
            fail_on_error(outcome, STEP, inputs)
            value = outcome.value
            problem = tensor_problem(value, expected[:, t - 1], "the output")
            if problem:
                raise CheckFailure(f"Wrong output: {problem} (log-probabilities of the next "
                                   f"token, (batch, vocab)) on {inputs}")
            if cached and len(cache) != t:
                raise CheckFailure(
                    f"The cache holds {len(cache)} positions after step {t}, expected {t}: "
                    + ("it was not used. Pass cache=cache to model.decoder so that each layer "
                       "keeps its keys and values." if len(cache) == 0 else
                       "feed only the newest token, tokens[:, -1:], when there is a cache.")
                    + f"\n  on {inputs}")
            got.append(value)
        result = torch.stack(got, dim=1)  # (batch, T, vocab)
        if close(result, expected):
            continue
        what = f"{'with' if cached else 'without'} a cache"
        if close(result.log_softmax(-1), expected):
            LOGITS.fail(f"  {what}")
        mistakes = STEP_MISTAKES_CACHED if cached else STEP_MISTAKES_UNCACHED
        mistake = first_match(mistakes, result, *args, same=close)
        if mistake is not None:
            mistake.fail(f"  {what}, on a random Transformer, tokens {tuple(tokens.shape)}")
        step = int((~torch.isclose(result, expected, atol=1e-5).all(-1).all(0)).nonzero()[0])
        raise CheckFailure(
            f"Wrong log-probabilities {what}, first at step {step + 1} (prefix of {step + 1} "
            f"tokens), and no common mistake matches: "
            f"{difference(result[:, step], expected[:, step])}"
        )
