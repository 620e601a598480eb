"""Chapter 08: decoding. Turning a trained model's next-token distributions into outputs.

    greedy:  y_t = argmax_y log p(y | y_<t, x)
    beam:    keep the k prefixes of best score(Y) = log P(Y | x) / lp(Y), where
             log P(Y | x) = sum_t log p(y_t | y_<t, x) and
             lp(Y) = ((5 + |Y|) / 6)^alpha                (GNMT length penalty, Wu et al. 2016)
    sample:  y_t ~ softmax(logits / temperature), restricted to the top-k / top-p tokens

Each step needs the decoder's output at the newest position only. Without a cache the
decoder recomputes all t positions at step t (O(t^2) work over a sequence); with the
key/value cache (Transformer.init_cache) it projects the one new token, appends its keys
and values to those of the earlier steps, and reuses the memory's keys and values.
Every output holds the generated tokens y_1 ... y_n (not BOS): EOS included where a
sequence stopped, then padding; decoding stops when every sequence has stopped.

Greedy decoding and sampling are one loop, generate(step, tokens, ...), given a step
function (the next token's log-probabilities) and a rule to choose (argmax, or a draw):
a decoder-only language model generates with the same loop from its prompt.
"""

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from tfcourse.masks import causal_mask
from tfcourse.multi_head import Cache

Choose = Callable[[torch.Tensor], torch.Tensor]  # (batch, vocab) log-probabilities -> (batch,) ids
# The temperatures sampler() takes: below, log_probs / temperature overflows float32 (use
# greedy, its limit); above, every token is about equally likely. Seeds: a torch.Generator's.
TEMPERATURES = (1e-3, 1e3)
SEEDS = 2**63


def decode_step(model: nn.Module, tokens: torch.Tensor, memory: torch.Tensor,
                src_mask: torch.Tensor | None, cache: Cache | None = None) -> torch.Tensor:
    """log p(next token | tokens, source): (batch, tgt_vocab) from the prefix tokens (batch, t).

    Without a cache, the decoder runs on the whole prefix under a causal mask. With one
    (model.init_cache(), holding t - 1 positions), only the newest token goes through the
    decoder, at position t - 1; the cache grows by one.
    """
    if cache is None:
        h = model.decode(tokens, memory, src_mask, causal_mask(tokens.size(1), tokens.device))
    else:
        if len(cache) != tokens.size(1) - 1:
            raise ValueError(
                f"the cache holds {len(cache)} positions, so tokens must hold {len(cache) + 1} "
                f"(the cached prefix and one new token), got tokens {tuple(tokens.shape)}"
            )
        h = model.decode(tokens[:, -1:], memory, src_mask, None, cache=cache)
    return F.log_softmax(model.generator(h[:, -1]).float(), dim=-1)  # (batch, tgt_vocab)


@torch.no_grad()
def generate(step: Callable[[torch.Tensor], torch.Tensor], tokens: torch.Tensor, max_len: int,
             eos_id: int, pad_id: int, choose: Choose,
             emit: Callable[[torch.Tensor], None] | None = None,
             stop: Callable[[], torch.Tensor] | None = None) -> torch.Tensor:
    """Add up to max_len tokens to ``tokens`` (batch, t), one at a time: the loop of greedy
    decoding, sampling, and a language model's generation.

    step(tokens) -> (batch, vocab) log-probabilities of the next token after all of tokens
                    (a model with a key/value cache feeds it only the newest one)
    choose(log_probs) -> (batch,) the next tokens: greedy (argmax) or sampler(...)
    A sequence that has said eos_id only gets pad_id afterwards; the loop ends when every
    sequence has stopped. emit(next_tokens (batch,)), when given, sees each step's tokens as
    they come (e.g. to print a text while it grows); stop() -> (batch,) bool, when given,
    ends the sequences it marks after each step as eos_id would (e.g. those that hold
    enough text). Returns (batch, t + n), n <= max_len: the given tokens, then the new ones.
    """
    done = torch.zeros(tokens.size(0), dtype=torch.bool, device=tokens.device)
    for _ in range(max_len):
        next_token = choose(step(tokens)).masked_fill(done, pad_id)  # (batch,)
        tokens = torch.cat((tokens, next_token[:, None]), dim=1)
        if emit is not None:
            emit(next_token)
        done |= next_token == eos_id
        if stop is not None:
            done |= stop()
        if done.all():
            break
    return tokens


def greedy(log_probs: torch.Tensor) -> torch.Tensor:
    """The most probable token: (batch, vocab) -> (batch,)."""
    return log_probs.argmax(-1)


def sampler(temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
            generator: torch.Generator | None = None) -> Choose:
    """A rule for generate(): draw each token from softmax(log_probs / temperature),
    restricted to the top_k tokens and/or the top_p nucleus (filter_logits). A fixed
    torch.Generator repeats the draws; top_k=1 is greedy."""
    low, high = TEMPERATURES
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
            low <= temperature <= high):
        raise ValueError(f"temperature must be a number in [{low}, {high:g}] (below: greedy, "
                         f"its limit; above: every token about equally likely), got "
                         f"{temperature!r}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be None or an integer >= 1, got {top_k!r}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be None or in (0, 1], got {top_p}")

    def choose(log_probs):
        logits = filter_logits(log_probs / temperature, top_k, top_p)
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0]

    return choose


@torch.no_grad()
def lm_generate(model: nn.Module, prompt: torch.Tensor, max_new_tokens: int,
                choose: Choose = greedy, eos_id: int | None = None,
                use_cache: bool = True, never: Sequence[int] = (),
                emit: Callable[[torch.Tensor], None] | None = None,
                stop: Callable[[], torch.Tensor] | None = None) -> torch.Tensor:
    """A decoder-only language model continues ``prompt`` (batch, t) ids by up to
    max_new_tokens tokens, each picked by ``choose`` (greedy, or sampler(...)) from its
    next-token distribution. With the key/value cache (model.init_cache()) the prompt goes
    through the model once, then only the newest token at each step. eos_id: a token that
    ends a sequence (None: none does, e.g. a character model of running text). Returns
    (batch, t + n), n <= max_new_tokens: the prompt, then the new tokens.

    The model reads at most its model.config.max_len positions (the length it was trained
    on, for the course's recipe): a longer text is read through a sliding window, the last
    max_len tokens, recomputed at each step without the cache, so that no prediction ever
    comes from a position the model never trained. Padding (model.config.pad_id) and the ids
    in ``never`` (e.g. the special tokens of a character model of running text) are never
    picked: they are no text, and their logits never trained (no target is one). emit and
    stop: as generate()'s."""
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.size(1) == 0:
        got = tuple(prompt.shape) if isinstance(prompt, torch.Tensor) else type(prompt).__name__
        raise ValueError(f"prompt must be token ids of shape (batch, t) with t >= 1, got {got}")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    window = model.config.max_len
    cache = model.init_cache() if use_cache else None
    banned = [model.config.pad_id, *never]

    def step(tokens):
        if tokens.size(1) > window:  # (batch, window): the last positions only, no cache
            logits = model(tokens[:, -window:])[:, -1].float()
        else:
            new = tokens if cache is None else tokens[:, len(cache):]  # (batch, t) or (batch, 1)
            logits = model(new, cache=cache)[:, -1].float()  # (batch, vocab)
        logits[:, banned] = float("-inf")  # no text: never a next token
        return F.log_softmax(logits, dim=-1)

    eos_id = -1 if eos_id is None else eos_id  # -1: no token is ever -1
    return generate(step, prompt, max_new_tokens, eos_id, model.config.pad_id, choose, emit,
                    stop)


def _start(src, bos_id):
    return torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)


@torch.no_grad()
def greedy_decode(model: nn.Module, src: torch.Tensor, src_mask: torch.Tensor | None,
                  max_len: int, bos_id: int, eos_id: int, use_cache: bool = True) -> torch.Tensor:
    """The most probable next token at every step. src (batch, src_len) ids, src_mask
    e.g. padding_mask(src) -> (batch, n <= max_len) ids: y_1 ... EOS, then padding."""
    _check(model, src, src_mask, max_len, bos_id)
    memory = model.encode(src, src_mask)  # (batch, src_len, d_model), once
    cache = model.init_cache() if use_cache else None
    tokens = generate(lambda tokens: decode_step(model, tokens, memory, src_mask, cache),
                      _start(src, bos_id), max_len, eos_id, model.config.pad_id, greedy)
    return tokens[:, 1:]  # (batch, n): without BOS


def length_penalty(length: torch.Tensor | float, alpha: float) -> torch.Tensor | float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha; alpha = 0 means none (raw log-probabilities,
    which favour short outputs: every token adds a negative log p)."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search_step(scores: torch.Tensor, log_probs: torch.Tensor, lengths: torch.Tensor,
                     alpha: float = 0.6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Extend every beam by every token and keep the best beam-many candidates.

    scores    (batch, beam)         log P(prefix | x) of each beam, a sum of log-probabilities
    log_probs (batch, beam, vocab)  log p(token | prefix, x)
    lengths   (batch, beam)         the length |Y| each beam's candidates have after this step
    Candidates are ranked by (scores + log_probs) / lp(lengths), best first.

    Returns (new scores (batch, beam): the candidates' sums of log-probabilities, not divided
    by lp; the beam each came from (batch, beam); its token (batch, beam)).
    """
    batch, beam, vocab = log_probs.shape
    candidates = scores[:, :, None] + log_probs  # (batch, beam, vocab): log P, added
    ranking = candidates / length_penalty(lengths, alpha)[:, :, None]
    best = ranking.flatten(1).topk(beam, dim=-1).indices  # (batch, beam), best first
    return candidates.flatten(1).gather(1, best), best // vocab, best % vocab


@torch.no_grad()
def beam_search_decode(model: nn.Module, src: torch.Tensor, src_mask: torch.Tensor | None,
                       max_len: int, bos_id: int, eos_id: int, beam_size: int = 4,
                       length_penalty: float = 0.6, use_cache: bool = True) -> torch.Tensor:
    """Keep the beam_size best prefixes of every sentence (all sentences in one batch of
    batch * beam_size rows); a finished beam (EOS) keeps its score and stops growing. Returns
    the best one by log P(Y | x) / lp(Y), lp(Y) = ((5 + |Y|) / 6)^length_penalty:
    (batch, n <= max_len) ids, y_1 ... EOS then padding. beam_size=1 is greedy decoding."""
    _check(model, src, src_mask, max_len, bos_id)
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be an integer >= 1, got {beam_size!r}")
    if length_penalty < 0:
        raise ValueError(f"length_penalty (alpha) must be >= 0, got {length_penalty}")
    batch, k, pad, device = src.size(0), beam_size, model.config.pad_id, src.device
    memory = model.encode(src, src_mask).repeat_interleave(k, dim=0)  # (batch * k, src_len, d)
    src_mask = src_mask.repeat_interleave(k, dim=0)
    cache = model.init_cache() if use_cache else None
    tokens = torch.full((batch * k, 1), bos_id, dtype=torch.long, device=device)
    scores = torch.full((batch, k), -math.inf, device=device)
    scores[:, 0] = 0.0  # all beams start as the same prefix: keep one, or the k would be equal
    lengths = torch.zeros(batch, k, device=device)
    done = torch.zeros(batch, k, dtype=torch.bool, device=device)
    for _ in range(max_len):
        log_probs = decode_step(model, tokens, memory, src_mask, cache).view(batch, k, -1)
        # A finished beam has one continuation, padding, at no cost: it stays as it is.
        stopped = torch.full_like(log_probs[0, 0], -math.inf)
        stopped[pad] = 0.0
        log_probs = torch.where(done[:, :, None], stopped, log_probs)
        scores, beam, token = beam_search_step(scores, log_probs, lengths + ~done, length_penalty)
        rows = (beam + torch.arange(batch, device=device)[:, None] * k).flatten()  # (batch * k,)
        tokens = torch.cat((tokens[rows], token.flatten()[:, None]), dim=1)
        lengths = (lengths + ~done).gather(1, beam)
        done = done.gather(1, beam) | (token == eos_id)
        if cache is not None:
            cache.reorder(rows)
        if done.all():
            break
    # Beams are sorted best first by normalized score, finished or not: the first wins.
    return tokens.view(batch, k, -1)[:, 0, 1:]  # (batch, n)


def filter_logits(logits: torch.Tensor, top_k: int | None = None,
                  top_p: float | None = None) -> torch.Tensor:
    """Keep the top_k most probable tokens, and the fewest most probable tokens whose
    probabilities add up to at least top_p (nucleus sampling); the others get -inf."""
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if top_p is not None:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop = cumulative - sorted_logits.softmax(-1) >= top_p  # mass before it reached top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), -math.inf)
    return logits


@torch.no_grad()
def sample_decode(model: nn.Module, src: torch.Tensor, src_mask: torch.Tensor | None,
                  max_len: int, bos_id: int, eos_id: int, temperature: float = 1.0,
                  top_k: int | None = None, top_p: float | None = None,
                  generator: torch.Generator | None = None, use_cache: bool = True) -> torch.Tensor:
    """Draw each token from softmax(logits / temperature), restricted to the top_k tokens
    and/or the top_p nucleus. A fixed torch.Generator repeats the draws; top_k=1 is greedy.
    Returns (batch, n <= max_len) ids, y_1 ... EOS then padding."""
    _check(model, src, src_mask, max_len, bos_id)
    choose = sampler(temperature, top_k, top_p, generator)
    if generator is not None and generator.device != src.device:
        raise ValueError(f"generator is on {generator.device}, src on {src.device}: use one device")
    memory = model.encode(src, src_mask)
    cache = model.init_cache() if use_cache else None
    tokens = generate(lambda tokens: decode_step(model, tokens, memory, src_mask, cache),
                      _start(src, bos_id), max_len, eos_id, model.config.pad_id, choose)
    return tokens[:, 1:]


def _check(model, src, src_mask, max_len, bos_id):
    if not isinstance(src, torch.Tensor) or src.dim() != 2 or src.is_floating_point():
        got = tuple(src.shape) if isinstance(src, torch.Tensor) else type(src).__name__
        raise ValueError(f"src must be token ids of shape (batch, src_len), got {got}")
    if src_mask is not None and (
        not isinstance(src_mask, torch.Tensor) or src_mask.dtype != torch.bool
        or src_mask.shape != (src.size(0), 1, 1, src.size(1))
    ):
        got = tuple(src_mask.shape) if isinstance(src_mask, torch.Tensor) else type(src_mask).__name__
        raise ValueError(
            f"src_mask must be a bool tensor of shape (batch, 1, 1, src_len) = "
            f"{(src.size(0), 1, 1, src.size(1))} (e.g. padding_mask(src)), got {got}"
        )
    if not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be an integer >= 1, got {max_len!r}")
    if not 0 <= bos_id < model.config.tgt_vocab_size:
        raise ValueError(
            f"bos_id={bos_id} is not in the target vocabulary [0, {model.config.tgt_vocab_size})"
        )
