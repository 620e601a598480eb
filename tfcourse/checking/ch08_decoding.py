"""Exercise 08: greedy decoding, one step of beam search, and a decoding step with the
key/value cache; their cases and their catalogue of mistakes.

No check trains anything. greedy_decode runs on a scripted stand-in for a trained model
(it says the source back, then EOS, then would ramble on) so that every row stops at a
known step, and then on a small random Transformer; beam_search_step needs no model;
decode_step runs on a small random Transformer, seeded.
"""

import dataclasses
import math

import torch
from torch import nn

from ..decoding import beam_search_step as reference_beam_step
from ..decoding import decode_step as reference_step
from ..decoding import greedy_decode as reference_greedy
from ..decoding import length_penalty
from ..masks import causal_mask, padding_mask
from ..model import Transformer, TransformerConfig
from .comparison import close, describe
from .mistakes import Mistake, laddered, member
from .pipeline import Case, Item

EXERCISE = "ex08_decoding"
PAD, BOS, EOS = 0, 1, 2
VOCAB = 12  # 3 specials, then symbols 3..11


# ---------------------------------------------------------------------------- models


class ScriptedModel(nn.Module):
    """A stand-in for a trained model, with the interface of tfcourse.model.Transformer
    (encode, decode, generator, init_cache, config, and decode's parts tgt_embed, positional,
    decoder). Whatever tokens it is fed, at position t it predicts script[:, t], sure of
    itself: the source's symbols, EOS, then the source again (a model that would ramble on if
    nobody stopped it at EOS). The positions travel in the decoder's input, as in the real
    model: tgt_embed gives zeros, positional adds each position's index."""

    def __init__(self, pad_id=PAD):
        super().__init__()
        self.config = TransformerConfig(VOCAB, VOCAB, d_model=VOCAB, n_heads=1, pad_id=pad_id)
        self.tgt_embed = _ScriptedEmbedding()
        self.positional = _ScriptedPositions()
        self.decoder = _ScriptedDecoder()
        self.generator = nn.Identity()

    def encode(self, src, src_mask):
        rows = []
        for row in src.tolist():
            said = [t for t in row if t != self.config.pad_id] + [EOS]
            rows.append((said * 64)[:64])
        return 8.0 * nn.functional.one_hot(torch.tensor(rows), VOCAB).float()  # (batch, 64, V)

    def decode(self, tgt, memory, src_mask, tgt_mask, cache=None):
        start = len(cache) if cache is not None else 0
        return self.decoder(self.positional(self.tgt_embed(tgt), start=start), memory, src_mask,
                            tgt_mask, cache=cache)

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.generator(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))

    def init_cache(self):
        return _Positions()


class _ScriptedEmbedding(nn.Module):
    def forward(self, tgt):
        return torch.zeros(*tgt.shape, VOCAB)  # (batch, tgt_len, V)


class _ScriptedPositions(nn.Module):
    def forward(self, x, start=0):
        return x + torch.arange(start, start + x.size(1), dtype=x.dtype)[:, None]


class _ScriptedDecoder(nn.Module):
    layers = ()

    def forward(self, x, memory, src_mask, tgt_mask, cache=None):
        if cache is not None:
            cache.length += x.size(1)
        positions = x[..., 0].round().long().clamp(0, memory.size(1) - 1)  # (batch, tgt_len)
        return memory.gather(1, positions[..., None].expand(-1, -1, memory.size(-1)))  # "logits"


class _Positions:
    def __init__(self):
        self.length = 0

    def __len__(self):
        return self.length

    def reorder(self, index):
        pass


def small_transformer(seed=0):
    """A random Transformer, 2 + 2 layers, eval mode (no dropout): the same on every call (the
    caller's random state left alone). Embeddings and output layer N(0, 1), larger than a new
    model's N(0, 1/d_model): its tokens then differ from step to step and from position to
    position, so that a mistake (a missing causal mask) changes what it decodes."""
    config = TransformerConfig.tiny(VOCAB, d_model=16, n_heads=2, d_ff=32, dropout=0.0,
                                    share_embeddings=False, tie_output=False, max_len=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Transformer(config).eval()
        for weight in (model.src_embed.embedding.weight, model.tgt_embed.embedding.weight,
                       model.generator.weight):
            nn.init.normal_(weight, std=1.0)
    return model


def _source(lengths, seed, pad=PAD):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, VOCAB if pad == PAD else pad, (len(lengths), max(lengths)), generator=g)
    src = src.masked_fill(torch.arange(src.size(1)) >= torch.tensor(lengths)[:, None], pad)
    return src, padding_mask(src, pad)


# ------------------------------------------------------------------------ greedy_decode


@torch.no_grad()
def _greedy(model, src, src_mask, max_len, bos_id, eos_id, stop=True, fill="pad", first=False,
            keep_bos=False, position=-1, feed="all", steps=0, use_src_mask=True,
            causal=True, keep_eos=True, accumulate=True, done_first=False, one_row=False,
            bounded=True, generator=True, pick="argmax", start="bos"):
    """Greedy decoding with the variations mistakes make. fill: what a finished sequence
    gets ("pad": model.config.pad_id, right; None: nothing, it goes on; or a token id).
    pick: "argmax" (right), or "sample" / "sample_replace": torch.multinomial on the softmax
    (without or with replacement, as torch.distributions.Categorical draws), or
    "batch_softmax": the argmax of a softmax over the batch axis. use_src_mask:
    True (right), False (not given to decode), "encode" (not given to encode) or "neither".
    start: the token every sequence starts from, "bos" (right), "eos" (fairseq's) or "pad"
    (T5's decoder_start_token_id)."""
    memory = model.encode(src, None if use_src_mask in ("encode", "neither") else src_mask)
    first_id = {"bos": bos_id, "eos": eos_id, "pad": model.config.pad_id}[start]
    ys = torch.full((src.size(0), 1), first_id, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    fill = model.config.pad_id if fill == "pad" else fill
    for _ in range(max_len + steps if bounded else 64):
        fed = ys if feed == "all" else ys[:, -1:]
        mask = causal_mask(fed.size(1)) if causal else None
        h = model.decode(fed, memory, src_mask if use_src_mask in (True, "encode") else None, mask)
        logits = model.generator(h[:, position]) if generator else h[:, position]
        if pick == "argmax":
            token = logits.argmax(-1)
        elif pick == "batch_softmax":  # normalized over the batch, then the argmax
            token = logits.softmax(0).argmax(-1)
        else:
            token = torch.multinomial(logits.softmax(-1), 1, pick == "sample_replace")[:, 0]
        if one_row:  # the first sentence's token for every sentence
            token = token[:1].expand_as(token)
        finished = (done if accumulate else False) | (token == eos_id)
        if fill is not None:
            token = token.masked_fill(finished if done_first else done, fill)
        if not keep_eos and stop and finished.all():
            break
        ys = torch.cat((ys, token[:, None]), 1)
        done = finished
        if stop and (done.any() if first else done.all()):
            break
    return ys if keep_bos else ys[:, 1:]


def _greedy_with(**bug):
    return lambda m, s, sm, n, b, e: _greedy(m, s, sm, n, b, e, **bug)


def _one_sentence(case, error):
    """The case's first sentence alone: what code that works only for a batch of one gets
    right (it raised asking for the truth value of a tensor of the batch's tokens)."""
    model, src, src_mask, *rest = case.args
    if src.size(0) == 1 or "ambiguous" not in str(error):
        return None
    return dataclasses.replace(case, args=(model, src[:1], src_mask[:1], *rest))


GREEDY_MISTAKES = (
    Mistake(
        "eos_start", "Decoding started from {token} ({whose} convention), not BOS",
        "{why}; this course's model was trained on BOS y_1 ... y_n: start every sequence "
        "from bos_id.",
        tuple(member(_greedy_with(start=start, keep_bos=keep), token=token, whose=whose, why=why)
              for start, token, whose, why in (
                  ("eos", "EOS", "fairseq's",
                   "fairseq's decoders start from EOS (its prev_output_tokens begin with it)"),
                  ("pad", "padding", "T5's",
                   "T5's decoder starts from its pad id (decoder_start_token_id)"))
              for keep in (False, True)),
    ),
    Mistake(
        "no_stop", "Greedy decoding does not stop at EOS",
        "once a sequence has produced EOS it is finished: from then on give it padding "
        "(model.config.pad_id), and stop the loop as soon as every sequence is finished.",
        (_greedy_with(stop=False, fill=None), _greedy_with(fill=None), _greedy_with(stop=False),
         _greedy_with(stop=False, fill=EOS)),
    ),
    Mistake(
        "stops_at_first", "Stops when the first sequence ends",
        "the batch is finished only when EVERY sequence has produced EOS (done.all(), not "
        "done.any()); the others still have tokens to say.",
        (_greedy_with(first=True), _greedy_with(first=True, fill=None)),
    ),
    Mistake(
        "keeps_bos", "BOS included in the output{also}",
        "return the generated tokens y_1 ... y_n only: drop the BOS column you started "
        "with.{more}",
        (member(_greedy_with(keep_bos=True), also="", more=""),
         *(member(_greedy_with(keep_bos=True, steps=steps, **no_stop),
                  also=", and decoding does not stop at EOS",
                  more=" And once a sequence has produced EOS it is finished: from then on "
                  "give it padding (model.config.pad_id), and stop the loop as soon as every "
                  "sequence is finished.")
           for steps in (0, -1)  # -1: BOS counted in max_len, as in the Annotated Transformer
           for no_stop in ({"stop": False, "fill": None}, {"fill": None}, {"stop": False},
                           {"stop": False, "fill": EOS}))),
    ),
    Mistake(
        "batch_of_one", "Works only for a batch of one",
        "`if next_word == eos_id:` asks Python for one True or False, but next_word holds one "
        "token per sentence, (batch,): with more than one sentence that is ambiguous. Keep a "
        "(batch,) tensor of finished flags and ask whether ALL of them are set.",
        probe=_one_sentence,
    ),
    Mistake(
        "eos_filled", "Finished sequences filled with EOS, not padding",
        "after its EOS a sequence gets padding (model.config.pad_id), so that every output "
        "has exactly one EOS.",
        (_greedy_with(fill=EOS),),
    ),
    Mistake(
        "pad_hardcoded", "Padding id hard-coded",
        "a finished sequence gets the model's padding, model.config.pad_id, which need not be 0.",
        (_greedy_with(fill=0),),
    ),
    Mistake(
        "eos_replaced", "EOS replaced by padding",
        "a sequence keeps the EOS it produced; only the tokens AFTER it are padding: pad with "
        "the flags of the steps before, then mark the sequences that just produced EOS.",
        (_greedy_with(done_first=True),),
    ),
    Mistake(
        "done_not_kept", "Finished sequences start again",
        "once a sequence has produced EOS it stays finished: accumulate the flags "
        "(done = done | (token == eos_id)) instead of replacing them at each step.",
        (_greedy_with(accumulate=False),),
    ),
    Mistake(
        "one_sentence", "First sentence's token given to every sentence",
        "decode the whole batch at once: each sentence takes the argmax of its own logits, "
        "(batch,) tokens, not the first sentence's (next_word[0]).",
        (_greedy_with(one_row=True), _greedy_with(one_row=True, fill=None)),
    ),
    Mistake(
        "max_len_ignored", "max_len ignored",
        "stop after max_len tokens even if a sequence never produces EOS: a model that never "
        "says it would loop forever.",
        (_greedy_with(bounded=False),),
    ),
    Mistake(
        "eos_dropped", "Last EOS left out",
        "a sequence keeps its EOS: append the token, then stop when every sequence has "
        "produced EOS.",
        (_greedy_with(keep_eos=False),),
    ),
    Mistake(
        "sampled", "Next token sampled instead of the most likely one",
        "greedy decoding takes the argmax of the last position's logits at each step "
        "(logits.argmax(-1)); sampling (torch.multinomial, Categorical(...).sample()) is another "
        "decoding method, and gives other tokens on every run.",
        (_greedy_with(pick="sample"), _greedy_with(pick="sample_replace")),
    ),
    Mistake(
        "batch_normalized", "Next token's probabilities normalized over the batch axis",
        "a softmax over dim=0 mixes the sentences: each sentence's choice then depends on the "
        "others in the batch (with one sentence every probability is 1 and the argmax is token "
        "0). Each sentence's distribution is over the vocabulary, the last axis; the argmax "
        "of the logits themselves needs no softmax at all.",
        (_greedy_with(pick="batch_softmax"),),
    ),
    Mistake(
        "wrong_position", "Next token not taken from the last position of the whole prefix",
        "without a cache the decoder must see the whole prefix, BOS y_1 ... y_t, at every step "
        "(it has no memory of the earlier steps), and the next token comes from its LAST "
        "position: h[:, -1].",
        (_greedy_with(position=0), _greedy_with(feed="last")),
    ),
    Mistake(
        "no_generator", "Generator not applied",
        "model.decode returns vectors of d_model features: model.generator turns them into "
        "logits over the vocabulary, whose argmax is the next token.",
        (_greedy_with(generator=False),),
    ),
    Mistake(
        "max_len_off_by_one", "One token too many or too few",
        "generate at most max_len tokens (the BOS you start from does not count): "
        "for _ in range(max_len).",
        (_greedy_with(steps=-1), _greedy_with(steps=1)),
    ),
    Mistake(
        "no_src_mask", "Source mask dropped",
        "neither the encoder's self-attention nor the decoder's cross-attention may read the "
        "source's padding: model.encode(src, src_mask), then model.decode(ys, memory, src_mask, "
        "tgt_mask) at every step.",
        tuple(_greedy_with(use_src_mask=u) for u in (False, "encode", "neither")),
    ),
    Mistake(
        "no_causal_mask", "No causal mask",
        "decode with tgt_mask = causal_mask(ys.size(1)): the model was trained with it, and "
        "without it the earlier positions see the later ones.",
        (_greedy_with(causal=False),),
    ),
)


def _same_ids(actual, predicted):
    return (isinstance(actual, torch.Tensor) and actual.shape == predicted.shape
            and not actual.is_floating_point() and torch.equal(actual.long(), predicted))


def _got_expected(case, result, expected):
    return f"\n  got      {result.tolist()}\n  expected {expected.tolist()}"


def _greedy_case(make, lengths, max_len, seed, pad=PAD):
    src, src_mask = _source(lengths, seed, pad)
    model = make()
    kind = "a random Transformer" if make is small_transformer else "a scripted model"
    label = (f"{kind}{f' whose pad_id is {pad}' if pad != PAD else ''}, "
             + describe(src=src, max_len=max_len, bos_id=BOS, eos_id=EOS))
    return Case((model, src, src_mask, max_len, BOS, EOS),
                names=("model", "src", "src_mask", None, None, None), label=label, seed=seed)


# (model, lengths of the source rows, max_len): every row stops before max_len in the
# first cases, one row runs to max_len in the next; then a real (random) Transformer.
# The second hints (check(..., hint=2)), by mistake, for each item (sections: the item's).
_GREEDY_LADDER = {
    "eos_start": (None, "print the first column of the ids you feed the decoder at the first "
                  "step: bos_id, the symbol the model was trained to start from."),
    "no_stop": (None, "print ys after each step for a batch of 2 where one sentence ends "
                "first: what does the finished one get next?"),
    "batch_of_one": (None, "decode a batch of two sentences: print next_word == eos_id, "
                     "and what `if` would have to make of it."),
    "stops_at_first": (None, "print the finished flags at each step: when may the loop end?"),
    "keeps_bos": (None, "print your output's first column: it must be a generated token, "
                  "not BOS."),
    "eos_filled": (None, "count the EOS in each output row: exactly one where the sentence "
                   "ended."),
    "pad_hardcoded": (None, "print model.config.pad_id next to the id you pad with."),
    "eos_replaced": (None, "print the flags you pad with: computed before or after the "
                     "newest token was checked for EOS?"),
    "done_not_kept": (None, "print the finished flags at each step: once True, always True."),
    "one_sentence": (None, "print the shape of your next tokens: (batch,), one per sentence."),
    "max_len_ignored": (None, "with a model that never says EOS, count your steps: max_len."),
    "eos_dropped": (None, "print the last token of a finished sentence's row before the "
                    "padding: EOS."),
    "sampled": (None, "run your function twice: greedy decoding gives the same tokens."),
    "batch_normalized": (None, "decode a batch of one sentence, then the same sentence in "
                         "a batch of three: its tokens must be the same."),
    "wrong_position": (None, "print the shape of the logits you take the argmax of: (batch, "
                       "vocab), from the last position of the whole prefix."),
    "no_generator": (None, "print the size of the last axis you take the argmax over: the "
                     "vocabulary's."),
    "max_len_off_by_one": (None, "with a model that never says EOS, print your output's "
                           "length next to max_len."),
    "no_src_mask": (None, "change a padding token of the source: your tokens must not "
                    "change."),
    "no_causal_mask": (None, "print the tgt_mask you pass: (len, len), lower triangle."),
}
_BEAM_LADDER = {
    "multiplied": (None, "print a candidate's score next to scores + log_probs for it."),
    "own_score_missing": (None, "give two beams very different scores: their candidates "
                          "must keep that difference."),
    "no_normalization": (None, "with alpha = 1, print each candidate's ranking value next "
                         "to its log P / lp."),
    "penalty_multiplied": (None, "print lp and what you rank by for one candidate: log P "
                           "divided by lp."),
    "penalty_formula": (None, "print your lp for lengths 1, 2 and 7 with alpha = 0.5: "
                        "about 1.0, 1.08 and 1.41."),
    "alpha_ignored": (None, "with alpha = 0, lp must be 1 for every length: print yours."),
    "partly_normalized": (None, "write your ranking value as a formula: is the beam's score "
                          "inside the division?"),
    "ranked_by_token": (None, "give one beam a much better score: its candidates must rank "
                        "first."),
    "batch_flattened": (None, "print the shape you take topk over: (batch, beam * vocab)."),
    "normalized_returned": (None, "print a returned score next to scores[b, beam] + "
                            "log_probs[b, beam, token] for the same choice."),
    "index_split": (None, "for vocab = 7 and flat index 9, print your beam and token: 1 "
                    "and 2."),
    "smallest": (None, "print your first returned score and the largest candidate score."),
    "per_beam": (None, "make every best candidate come from beam 0: are they all kept?"),
    "ranked_as_probabilities": (None, "print torch.tensor(-120.0).exp() and the values you "
                                "rank for beams whose scores are about -120."),
}
_DECODE_LADDER = {
    "logits": (None, "print your output's .exp().sum(-1): all ones."),
    "probabilities": (None, "print your output's max: log-probabilities are never above 0."),
    "log_softmax_axis": (None, "print your output's .exp().sum(-1): all ones."),
    "newest_only_uncached": (None, "without a cache print the shape you give the decoder: "
                             "the whole prefix."),
    "first_position": (None, "print the index of the position you take the logits from: the "
                       "last."),
    "no_causal_mask": (None, "without a cache print the tgt_mask you pass: (t, t), lower "
                       "triangle."),
    "no_src_mask": (None, "print the arguments you give the decoder: src_mask among them."),
    "cache_unused": (None, "print len(cache) after your call: it must grow by one."),
    "whole_prefix_cached": (None, "with a cache print the shape you feed: (batch, 1)."),
    "causal_mask_cached": (None, "with a cache print the tgt_mask you pass: one query, "
                           "every cached key visible."),
    "position_not_advanced": (None, "print the start you give model.positional at each "
                              "step: 0, 1, 2, ..."),
    "position_off_by_one": (None, "print the start you give model.positional next to "
                            "len(cache) before the call."),
    "rescaled": (None, "print model.tgt_embed(tokens).std(): already scaled by "
                 "sqrt(d_model)."),
    "no_positional": (None, "list the modules your decode_step calls: model.positional "
                      "among them."),
}


GREEDY = Item(
    EXERCISE, "greedy_decode", reference_greedy,
    [
        _greedy_case(ScriptedModel, [3, 5, 1, 4], 9, 0),
        _greedy_case(ScriptedModel, [2, 8, 4], 6, 1),
        _greedy_case(ScriptedModel, [3], 7, 2),
        _greedy_case(small_transformer, [7, 1], 8, 4),  # src_mask and the causal mask matter
        _greedy_case(lambda: ScriptedModel(pad_id=VOCAB - 1), [2, 4, 1], 7, 5, pad=VOCAB - 1),
    ],
    laddered(GREEDY_MISTAKES, _GREEDY_LADDER), same=_same_ids, what="tokens", show=_got_expected,
    formula="At each step take the argmax of the last position's logits and append it.",
    twins=(_greedy_with(),),
    section=("08_decoding", "1. Decoding is a search"),
    shifts=((3, "max_len", "count"),),
)


# --------------------------------------------------------------------- beam_search_step


def _beam_step(scores, log_probs, lengths, alpha=0.6, combine="add", normalize="divide",
               return_ranking=False, split=None, largest=True, penalty=None, per_beam=False,
               rank_by="candidates", flat=False, vocab_major=False):
    """One beam-search step with the variations mistakes make; vocab_major: the candidates
    flattened as (vocab, beam), the index still split as if (beam, vocab)."""
    batch, beam, vocab = log_probs.shape
    if flat:  # the whole batch flattened: the sentences compete for one set of beams
        candidates = scores[:, :, None] + log_probs
        ranked = (candidates / length_penalty(lengths, alpha)[:, :, None]).flatten()
        best = ranked.topk(beam).indices
        return candidates.flatten()[best], (best // vocab) % beam, best % vocab
    candidates = {
        "add": lambda: scores[:, :, None] + log_probs,
        "times_probs": lambda: scores[:, :, None] * log_probs.exp(),  # P(prefix) * p(token)
        "times_log_probs": lambda: scores[:, :, None] * log_probs,
        "probabilities": lambda: scores.exp()[:, :, None] * log_probs.exp(),
        "token_only": lambda: log_probs + 0 * scores[:, :, None],
    }[combine]()
    lp = (penalty or length_penalty)(lengths, alpha)[:, :, None]
    ranked = {"candidates": candidates, "token": log_probs}[rank_by]
    ranking = {"divide": ranked / lp, "multiply": ranked * lp, None: ranked,
               "token": scores[:, :, None] + log_probs / lp, "exp": (ranked / lp).exp(),
               "exp_divided": ranked.exp() / lp}[normalize]
    kept = ranking if return_ranking else candidates
    if vocab_major:
        ranking, kept = ranking.transpose(1, 2), kept.transpose(1, 2)
    if per_beam:  # each beam extended by its own best token
        token = ranking.argmax(-1)  # (batch, beam)
        value = kept.gather(2, token[:, :, None])[..., 0]
        beams = torch.arange(beam).expand(batch, beam)
        if per_beam == "sorted":  # the beams ordered by their best candidate
            best = candidates.gather(2, token[:, :, None])[..., 0] / lp[..., 0]
            beams = best.argsort(-1, descending=True)
            value, token = value.gather(1, beams), token.gather(1, beams)
        return value, beams, token
    best = ranking.flatten(1).topk(beam, dim=-1, largest=largest).indices
    beams, tokens = (best // vocab, best % vocab) if split is None else split(best, beam, vocab)
    return kept.flatten(1).gather(1, best), beams, tokens


def _beam_with(**bug):
    return lambda s, lp, n, a: _beam_step(s, lp, n, a, **bug)


BEAM_MISTAKES = (
    Mistake(
        "multiplied", "Beam scores multiplied as probabilities instead of added as log-probabilities",
        "scores are log-probabilities: log P(prefix + token) = log P(prefix) + log p(token). "
        "Multiplying probabilities underflows to 0 after a few dozen tokens.",
        tuple(_beam_with(combine=c, normalize=z)
              for c in ("times_probs", "times_log_probs", "probabilities") for z in ("divide", None)),
    ),
    Mistake(
        "own_score_missing", "Beam's score not added",
        "a candidate's score is its whole sequence's: log P(prefix) + log p(token), the beam's "
        "score plus the token's log-probability, not the token's alone.",
        (_beam_with(combine="token_only"), _beam_with(combine="token_only", normalize=None)),
    ),
    Mistake(
        "no_normalization", "No length normalization",
        "rank the candidates by log P / lp(length), lp = ((5 + length) / 6)^alpha, each with its "
        "OWN length: raw sums of log-probabilities only fall as a sequence grows, so short outputs "
        "always win, and dividing every candidate by one lp changes nothing in their order.",
        (_beam_with(normalize=None),),
    ),
    Mistake(
        "penalty_multiplied", "Length penalty multiplied instead of divided",
        "rank by log P / lp(length): log P is negative, and dividing it by lp > 1 is what "
        "favours longer candidates.",
        (_beam_with(normalize="multiply"),),
    ),
    Mistake(
        "penalty_formula", "Length penalty formula wrong: {which}",
        "lp = ((5 + length) / 6) ** alpha{why}",
        tuple(member(_beam_with(penalty=p), which=which, why=why) for p, which, why in (
            (lambda n, a: (5 + n) / 6 * a, "alpha multiplies the fraction",
             ": the whole fraction is raised to the power alpha."),
            (lambda n, a: ((6 + n) / 6) ** a, "a length one too long",
             ", with `lengths` as given: it already counts each candidate's new token (and "
             "not the start symbol), so nothing is added to it."),
            (lambda n, a: ((4 + n) / 6) ** a, "a length one too short",
             ", with `lengths` as given: it already counts each candidate's new token, so "
             "nothing is taken from it."),
            (lambda n, a: ((5 + n) / 6) ** -a, "the exponent's sign flipped",
             ": a longer candidate gets a larger lp (alpha > 0), and dividing its negative log P "
             "by it favours longer sentences."),
            (lambda n, a: ((5 + n) // 6) ** a, "the fraction rounded down (floor division)",
             ": `//` rounds (5 + length) / 6 down to a whole number, so that every length from "
             "1 to 6 gets the same lp, 1, and 7 to 12 the same 2 ** alpha: the penalty is a "
             "fraction, `/`."),
            (lambda n, a: n ** a, "the length alone raised to alpha",
             ": GNMT's (5 + length) / 6 (1 at length 1) keeps short sentences from being "
             "penalized too much."),
        )),
    ),
    Mistake(
        "alpha_ignored", "`alpha` ignored",
        "use the alpha argument in lp = ((5 + length) / 6) ** alpha (alpha = 0: no "
        "normalization), not a number of your own.",
        tuple(_beam_with(penalty=lambda n, a, fixed=fixed: length_penalty(n, fixed))
              for fixed in (0.6, 1.0, 0.7, 0.0)),
    ),
    Mistake(
        "partly_normalized", "Only the new token's log-probability normalized",
        "rank by the whole candidate's log-probability divided by lp: (scores + log_probs) / lp, "
        "not scores + log_probs / lp.",
        (_beam_with(normalize="token"),),
    ),
    Mistake(
        "ranked_by_token", "Candidates ranked by the new token alone",
        "rank each candidate by its whole log P(prefix + token) / lp: the beam's score plus the "
        "token's log-probability, not the token's alone.",
        (_beam_with(rank_by="token"), _beam_with(rank_by="token", normalize=None)),
    ),
    Mistake(
        "batch_flattened", "Sentences of the batch ranked together",
        "each sentence keeps its own beams: flatten only (beam, vocab), .flatten(1), and take the "
        "top beam-many per sentence (topk(beam, dim=-1)).",
        (_beam_with(flat=True),),
    ),
    Mistake(
        "normalized_returned", "Normalized scores returned",
        "rank by log P / lp(length), but return log P itself: the next step adds to it, and "
        "lp changes with the length.",
        (_beam_with(return_ranking=True),),
    ),
    Mistake(
        "index_split", "Flat index split wrongly into beam and token",
        "an index i of the flattened (beam * vocab) axis is beam i // vocab and token i % vocab "
        "(the vocabulary is the inner axis).",
        tuple(_beam_with(split=f) for f in (lambda i, k, v: (i % k, i // k),
                                             lambda i, k, v: (i // k, i % k),
                                             lambda i, k, v: (i % v, i // v),
                                             lambda i, k, v: (i // k, i % v)))
        + (_beam_with(vocab_major=True),),
    ),
    Mistake(
        "smallest", "Worst candidates kept",
        "the best candidates have the LARGEST scores (log-probabilities near 0): topk takes "
        "the largest by default; keep it so (largest=True), best first.",
        (_beam_with(largest=False),),
    ),
    Mistake(
        "ranked_as_probabilities", "Candidates ranked by their probabilities: exp underflows",
        "e^(log P) is 0 in float32 once log P is below about -104 (-745 in float64), so long or "
        "unlikely hypotheses all rank as 0 and tie, and top-k picks among them at random. Rank "
        "by the log-probabilities (over the length penalty) themselves: log is monotone, so the "
        "order is the same, with no underflow.",
        (_beam_with(normalize="exp"), _beam_with(normalize="exp_divided")),
    ),
    Mistake(
        "per_beam", "Each beam extended by its own best token only",
        "the beam-many best candidates come from all beams together: flatten (beam, vocab) "
        "into one axis per sentence and take the top beam-many there (one beam may give "
        "several).",
        (_beam_with(per_beam=True), _beam_with(per_beam="sorted")),
    ),
)


def _beam_case(seed, batch, beam, vocab, lengths, alpha=0.6, first=False, finished=(), low=0.5):
    """low: how far below 0 the beams' log P starts (120: unlikely, e^(log P) is 0 in float32)."""
    g = torch.Generator().manual_seed(seed)
    scores = -torch.rand(batch, beam, generator=g) * 4 - low  # log P of each beam so far
    log_probs = torch.log_softmax(torch.randn(batch, beam, vocab, generator=g) * 2, dim=-1)
    if first:  # the first step: one real beam, the others -inf
        scores[:, 1:] = -math.inf
    for b, k in finished:  # a finished beam: one continuation (padding) at no cost
        log_probs[b, k] = -math.inf
        log_probs[b, k, PAD] = 0.0
    lengths = torch.tensor(lengths, dtype=torch.float).expand(batch, beam).clone()
    return Case((scores, log_probs, lengths, alpha), names=("scores", "log_probs", "lengths", None),
                seed=seed)


def _same_step(actual, predicted):
    return (
        isinstance(actual, (tuple, list))
        and len(actual) == 3
        and close(actual[0], predicted[0])
        and all(_same_ids(a, p) for a, p in zip(actual[1:], predicted[1:]))
    )


def _choices(case, result, expected):
    try:
        return (f"\n  got beam {result[1].tolist()} token {result[2].tolist()}"
                f"\n  expected beam {expected[1].tolist()} token {expected[2].tolist()}")
    except Exception:  # not tensors: the first line says so
        return ""


BEAM = Item(
    EXERCISE, "beam_search_step", reference_beam_step,
    [
        _beam_case(0, 2, 3, 7, [4, 4, 4]),
        _beam_case(1, 3, 4, 6, [2, 5, 9, 3], alpha=1.0, finished=((0, 0), (1, 2), (2, 3))),
        _beam_case(2, 2, 3, 5, [1, 1, 1], first=True),
        _beam_case(3, 2, 4, 9, [3, 3, 12, 6], alpha=0.6, finished=((0, 0), (1, 0))),
        _beam_case(4, 1, 2, 4, [7, 2], alpha=0.0),
        _beam_case(5, 2, 3, 6, [40, 40, 40], alpha=0.0, low=120.0),
    ],
    laddered(BEAM_MISTAKES, _BEAM_LADDER), same=_same_step, what="result", parts=("scores", "beam", "token"),
    show=_choices,
    formula="Flatten (beam, vocab) into one axis per sentence, rank by (scores + log_probs) / lp, "
            "take the top beam-many, and split each index into beam = index // vocab, "
            "token = index % vocab.",
    twins=(_beam_with(),),
    shifts=((2, "lengths", "length"),),
    section=("08_decoding", "5. Outputs of different lengths: the length penalty and top-$p$ at work"),
)


# -------------------------------------------------------------------------- decode_step


def _step(model, tokens, memory, src_mask, cache=None, start=None, mask=True, log="log",
          use_src_mask=True, fed="new", positional=True, rescale=False, last_only=False,
          position=-1, causal_cached=False):
    """decode_step with the variations mistakes make; `start` is the position of the first
    token fed (with a cache: only the newest token is fed, unless fed="all"). position: the
    position whose logits are returned; causal_cached: causal_mask(t) passed with the cache."""
    src_mask = src_mask if use_src_mask else None
    if (cache is None and not last_only) or fed == "all":
        x = tokens
        tgt_mask = causal_mask(tokens.size(1)) if mask and (cache is None or causal_cached) else None
    else:
        x, tgt_mask = tokens[:, -1:], causal_mask(tokens.size(1)) if causal_cached else None
    pos = (len(cache) if cache is not None and fed == "new" else 0) if start is None else start(tokens, cache)
    y = model.tgt_embed(x) * (math.sqrt(model.config.d_model) if rescale else 1)
    y = model.positional(y, start=pos) if positional else y
    every = model.generator(model.decoder(y, memory, src_mask, tgt_mask, cache=cache))
    logits = every[:, position]
    return {"log": lambda: logits.log_softmax(-1), "logits": lambda: logits,
            "probabilities": lambda: logits.softmax(-1),
            "wrong_axis": lambda: logits.log_softmax(0),
            "positions": lambda: every.log_softmax(1)[:, -1]}[log]()


def _prefixes(step, cached):
    """Every prefix of `tokens` through `step`, one step each (with a fresh cache when
    cached): the outputs, and with a cache the cache's length after each step."""

    def run(model, tokens, memory, src_mask):
        cache = model.init_cache() if cached else None
        outputs, lengths = [], []
        for t in range(1, tokens.size(1) + 1):
            outputs.append(step(model, tokens[:, :t].clone(), memory, src_mask.clone(), cache))
            lengths.append(len(cache) if cached else 0)
        return (outputs, lengths) if cached else outputs

    return run


def _steps(cached, **kw):
    return _prefixes(lambda *a: _step(*a, **kw), cached)


def _run_uncached(fn, args, case):
    return _prefixes(fn, False)(*args)


def _run_cached(fn, args, case):
    return _prefixes(fn, True)(*args)


def _cache_unused(model, tokens, memory, src_mask):
    """The right log-probabilities, and a cache that never grows (left unused)."""
    outputs = _steps(False)(model, tokens, memory, src_mask)
    return outputs, [0] * len(outputs)


LOGITS = Mistake(
    "logits", "Logits returned instead of log-probabilities",
    "apply log_softmax over the vocabulary to the generator's output: beam search adds "
    "log-probabilities.",
)
NOT_LOG = Mistake(
    "probabilities", "Probabilities returned instead of log-probabilities",
    "return log_softmax(logits, dim=-1): beam search adds log-probabilities, it does not "
    "multiply probabilities.",
)
LOG_AXIS = Mistake(
    "log_softmax_axis", "log_softmax over the wrong axis",
    "normalize over the vocabulary, the last axis: log_softmax(logits, dim=-1).",
)
NO_SRC_MASK = Mistake(
    "no_src_mask", "Source padding mask not passed on",
    "the decoder's cross-attention must not look at the source's padding: pass src_mask.",
    (_steps(False, use_src_mask=False), _steps(True, use_src_mask=False)),
)


def _both(mistake, **kw):
    return mistake.computing(_steps(False, **kw), _steps(True, **kw))


OUTPUT_MISTAKES = (_both(LOGITS, log="logits"), _both(NOT_LOG, log="probabilities"),
                   LOG_AXIS.computing(_steps(False, log="wrong_axis"), _steps(True, log="wrong_axis"),
                                      _steps(False, log="positions"), _steps(True, log="positions")))
UNCACHED_MISTAKES = (
    *OUTPUT_MISTAKES,
    Mistake(
        "newest_only_uncached", "Only the newest token decoded without the cache",
        "without a cache the decoder keeps nothing between calls: run it on the whole prefix, "
        "tokens (batch, t), with causal_mask(t), and take the last position.",
        (_steps(False, last_only=True),),
    ),
    Mistake(
        "first_position", "Log-probabilities taken from the first position",
        "the decoder's output has one row per position fed; the next token is predicted by the "
        "LAST one, h[:, -1] (position 0 only predicts the token after BOS).",
        (_steps(False, position=0),),
    ),
    Mistake(
        "no_causal_mask", "No causal mask without the cache",
        "when the whole prefix goes through the decoder, position i must not see positions "
        "after i (tgt_mask = causal_mask(t)): the model was trained that way.",
        (_steps(False, mask=False),),
    ),
    NO_SRC_MASK,
)
CACHED_MISTAKES = (
    *OUTPUT_MISTAKES,
    Mistake(
        "cache_unused", "Cache not used",
        "pass cache=cache to model.decoder, so that each layer keeps its keys and values "
        "(the cache holds 0 positions after every step), and feed it only the newest token.",
        (_cache_unused,),
    ),
    Mistake(
        "whole_prefix_cached", "Whole prefix fed with the cache",
        "with a cache feed only the newest token, tokens[:, -1:]: the cache already holds the "
        "keys and values of the earlier ones (fed again, they would be stored twice).",
        (_steps(True, fed="all"), _steps(True, fed="all", mask=False),
         _steps(True, fed="all", causal_cached=True),
         _steps(True, fed="all", start=lambda t, c: len(c))),  # at len(cache) on: duplicates
    ),
    Mistake(
        "causal_mask_cached", "Causal mask passed with the cache",
        "with a cache one new query attends to every cached key: nothing to hide, so pass "
        "tgt_mask=None. causal_mask(t) is (t, t), for t queries: it does not fit one query.",
        (_steps(True, causal_cached=True),),
    ),
    Mistake(
        "position_not_advanced", "KV-cache positions not advanced",
        "with a cache only the newest token goes in, but it is not at position 0: it is at "
        "position len(cache) (the number of tokens already cached). Pass that as "
        "model.positional(x, start=...).",
        (_steps(True, start=lambda t, c: 0),),
    ),
    Mistake(
        "position_off_by_one", "KV-cache position off by one",
        "the newest of t tokens is at position t - 1 (positions count from 0), which is "
        "len(cache) before the step.",
        (_steps(True, start=lambda t, c: t.size(1)), _steps(True, start=lambda t, c: len(c) + 1)),
    ),
    Mistake(
        "rescaled", "Embeddings scaled twice",
        "model.tgt_embed already multiplies by sqrt(d_model) (chapter 05's Embeddings): add the "
        "positional encoding to its output as it is.",
        (_steps(True, rescale=True),),
    ),
    Mistake(
        "no_positional", "Positional encoding left out",
        "the embeddings go through model.positional(x, start=...) before the decoder: without "
        "it the model cannot tell the positions apart.",
        (_steps(True, positional=False),),
    ),
    NO_SRC_MASK,
)


def _cache_lengths(case, result, expected):
    try:
        if case.run is _run_cached and list(result[1]) != list(expected[1]):
            return (f"\n  the cache's length after each step: got {list(result[1])}, "
                    f"expected {list(expected[1])}")
    except Exception:  # not the expected structure: the first line says so
        pass
    return ""


# The two cases' catalogues share mistakes: each gets its second hint once, in one copy.
_SHARED_COPIES = {id(m): laddered((m,), _DECODE_LADDER)[0]
                  for m in (*UNCACHED_MISTAKES, *CACHED_MISTAKES)}
UNCACHED_MISTAKES = tuple(_SHARED_COPIES[id(m)] for m in UNCACHED_MISTAKES)
CACHED_MISTAKES = tuple(_SHARED_COPIES[id(m)] for m in CACHED_MISTAKES)


def _decode_case(cached, lengths=(7, 4, 2)):
    """lengths: the sources' (one per sentence of the batch)."""
    model = small_transformer()
    src, src_mask = _source(list(lengths), 10)
    tokens = torch.randint(3, VOCAB, (len(lengths), 6), generator=torch.Generator().manual_seed(11))
    tokens[:, 0] = BOS
    with torch.no_grad():
        memory = model.encode(src, src_mask)
    label = (f"a random Transformer, every prefix of tokens {tuple(tokens.shape)}, memory "
             f"{tuple(memory.shape)}, " + ("a cache that grows by one each step" if cached
                                            else "no cache"))
    return Case((model, tokens, memory, src_mask), label=label,
                names=("model", "tokens", "memory", "src_mask"),
                run=_run_cached if cached else _run_uncached, seed=10,
                mistakes=CACHED_MISTAKES if cached else UNCACHED_MISTAKES,
                parts=("log-probabilities", "cache lengths") if cached else ())


DECODE = Item(
    EXERCISE, "decode_step", reference_step,
    [_decode_case(False), _decode_case(True), _decode_case(True, lengths=(5,))],  # a batch of one
    what="log-probabilities", show=_cache_lengths,
    formula="Embed the new tokens, add the positional encoding at their positions, run the "
            "decoder (with the cache, only the newest token) and return log_softmax of the "
            "last position's logits.",
    twins=(_steps(False), _steps(True)),
    section=("08_decoding", "7. The key/value cache"),
)

ITEMS = (GREEDY, BEAM, DECODE)
