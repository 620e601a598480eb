"""Using a trained model, each kind side by side: the encoder-decoder's outputs and their
confidence (predict, output_confidence, exact_match, auroc), the classifier's classes
(classify), the language model's continuations (complete). Each runs in eval mode, on the
model's device, in batches (eval_batches: the one preamble they share). Each refuses what
`tfcourse` refuses: a model of another kind, a vocabulary of another size than the model's,
texts that are not a list of strings (TypeError/ValueError naming the argument).
"""

import math
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn

from tfcourse._validate import integer
from tfcourse.batches import encode_sources, encode_texts, make_batch
from tfcourse.decoding import SEEDS, beam_search_decode, greedy, greedy_decode, lm_generate, sampler
from tfcourse.tokens import BPE, TextStream
from tfcourse.vocab import BOS, EOS, SPECIALS, Vocab, check_vocab_size

# What each use needs of a model, told by its config (so that a kind registered later is
# known by what it has, not by its name): the field that marks it, and how to say it.
USES = {"seq2seq": ("src_vocab_size", "an encoder-decoder (e.g. Transformer)"),
        "classifier": ("n_classes", "a classifier (e.g. EncoderClassifier)"),
        "lm": ("vocab_size", "a language model (e.g. DecoderLM)")}


def check_model(model: nn.Module, vocab: Vocab, use: str) -> None:
    """``model`` must be of the kind ``use`` (USES) and ``vocab`` its vocabulary: TypeError /
    ValueError naming the argument."""
    field, what = USES[use]
    config = getattr(model, "config", None)
    others = [USES[u][0] for u in USES if u != use]
    if not hasattr(config, field) or any(hasattr(config, f) for f in others if f != "vocab_size"):
        raise TypeError(f"model must be {what}, got {type(model).__name__}")
    try:
        check_vocab_size(vocab, config)
    except ValueError as error:
        raise ValueError(f"vocab does not match the model: {error}") from None


def check_texts(texts: Sequence[str], what: str) -> None:
    """``texts`` must be a list (or tuple) of non-empty strings: TypeError/ValueError naming
    the first that is not (``what``: "decode", "classify")."""
    if not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts must be a list of strings, got {type(texts).__name__}"
                        + (f" (for one text: [{texts!r}])" if isinstance(texts, str) else ""))
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a string, got {type(text).__name__}")
        if not text:
            raise ValueError(f"texts[{i}] is empty: nothing to {what}")


def eval_batches(model: nn.Module, items: Sequence, batch_size: int
                 ) -> Iterator[tuple[torch.device, Sequence]]:
    """The model in eval mode; ``items`` in chunks of ``batch_size``, each with the model's
    device to put it on."""
    model.eval()
    device = next(model.parameters()).device
    for i in range(0, len(items), batch_size):
        yield device, items[i: i + batch_size]


# ------------------------------------------------------------------- encoder-decoder


@torch.no_grad()
def predict(model: nn.Module, texts: Sequence[str], vocab: Vocab, max_len: int = 64,
            beam: int = 1, batch_size: int = 500) -> list[str]:
    """Source texts -> output texts of an encoder-decoder, decoded greedily (beam=1) or with
    beam search."""
    check_model(model, vocab, "seq2seq")
    check_texts(texts, "decode")
    outputs = []
    for device, chunk in eval_batches(model, texts, batch_size):
        src, src_mask = (t.to(device) for t in encode_sources(chunk, vocab))
        if beam == 1:
            ids = greedy_decode(model, src, src_mask, max_len, BOS, EOS)
        else:
            ids = beam_search_decode(model, src, src_mask, max_len, BOS, EOS, beam_size=beam)
        outputs += [vocab.decode(row) for row in ids]
    return outputs


# Below these, `tfcourse decode` (output_confidence) and `tfcourse classify` (the class's
# probability) say "not sure"; chosen on the shipped models, held-out and unfamiliar inputs
# (tests/test_shipped_checkpoint.py measures what they flag). The classifier's: the largest
# multiple of 0.05 that flags at most 10% of the shipped classifier's right answers on the
# validation texts (0.75: 8% of right, 66% of wrong ones).
NOT_SURE = {"seq2seq": 0.85, "classifier": 0.75}


@torch.no_grad()
def output_confidence(model: nn.Module, pairs: Sequence[tuple[str, str]], vocab: Vocab,
                      batch_size: int = 500) -> list[float]:
    """How sure an encoder-decoder is of the target of each (source, target) pair: the
    smallest probability it gives to one of the target's tokens (EOS included), read by
    teacher forcing, min_t p(y_t | y_<t, source).

    Not the product of the tokens' probabilities: a model trained with label smoothing
    (eps = 0.1) gives the right token about 0.9 at best, so the product over a date's 11
    tokens is about 0.3 for a right output, a number that cannot be read as "sure" (ranked,
    the product separates right from wrong outputs as well). The weakest token is on the
    scale of one character's probability: one digit it hesitated on is where a wrong date
    goes wrong. On the dates task it separates right from wrong outputs of held-out and
    unfamiliar inputs with an AUROC of about 0.99 (README, benchmarks/run.py confidence)."""
    check_model(model, vocab, "seq2seq")
    scores = []
    for device, chunk in eval_batches(model, pairs, batch_size):
        batch = make_batch(chunk, vocab).to(device)
        logits, targets = batch.loss_inputs(model)
        p = logits.float().softmax(-1).gather(-1, targets[..., None])[..., 0]  # (batch, seq)
        scores += p.masked_fill(targets == batch.pad_id, 1.0).amin(-1).tolist()
    return scores


def auroc(scores: Sequence[float], right: Sequence[bool]) -> float:
    """Area under the ROC curve of ``scores`` as a test of ``right``: the probability that a
    right answer, drawn at random, scores above a wrong one (ties count a half). 1 separates
    them perfectly, 0.5 is chance."""
    ranked = sorted(zip(scores, right, strict=True))
    n_right = sum(right)
    n_wrong = len(ranked) - n_right
    if not n_right or not n_wrong:
        raise ValueError("auroc needs both right and wrong answers")
    wins, i = 0.0, 0
    wrong_below = 0
    while i < len(ranked):  # each group of tied scores
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        group_right = sum(r for _, r in ranked[i:j])
        group_wrong = (j - i) - group_right
        wins += group_right * (wrong_below + 0.5 * group_wrong)
        wrong_below += group_wrong
        i = j
    return wins / (n_right * n_wrong)


def exact_match(model: nn.Module, pairs: Sequence[tuple[str, str]], vocab: Vocab,
                beam: int = 1) -> float:
    """Fraction of ``pairs`` whose whole output is right, EOS included (greedy decoding)."""
    # Room for every target, its EOS and one token more: a prediction that runs on past
    # the target's length never matches.
    max_len = max(len(t) for _, t in pairs) + 2
    outputs = predict(model, [s for s, _ in pairs], vocab, max_len, beam)
    return sum(o == t for o, (_, t) in zip(outputs, pairs, strict=True)) / len(pairs)


# ---------------------------------------------------------------- encoder classifier


@torch.no_grad()
def classify(model: nn.Module, texts: Sequence[str], vocab: Vocab, classes: Sequence[str],
             batch_size: int = 500) -> list[tuple[str, float]]:
    """Texts -> (the most probable class, its probability) for each, by a classifier
    (EncoderClassifier); ``classes`` names its outputs."""
    check_model(model, vocab, "classifier")
    check_texts(texts, "classify")
    if len(classes) != model.config.n_classes:
        raise ValueError(f"classes must name the model's {model.config.n_classes} outputs, "
                         f"got {len(classes)} names")
    guesses = []
    for device, chunk in eval_batches(model, texts, batch_size):
        tokens, mask = encode_texts(chunk, vocab)
        p, k = model(tokens.to(device), mask.to(device)).float().softmax(-1).max(-1)
        guesses += [(classes[j], q) for j, q in zip(k.tolist(), p.tolist(), strict=True)]
    return guesses


# ---------------------------------------------------------------- decoder-only model


def heal(vocab: Vocab | BPE, ids: Sequence[int]) -> tuple[list[int], list[int] | None, bytes]:
    """Token healing (Lundberg 2023, "The Art of Prompt Design: Prompt Boundaries and Token
    Healing", in Microsoft's guidance library). A prompt that ends inside a word or in a
    space ends in a token the training text seldom has there (" return" is one token: a
    prompt ending in " " makes " " a token of its own, before "return"). Back up the prompt's
    last token and let the first new token be any whose bytes start with its bytes B, so
    that the model picks the token the training text would have (" return", " x").
    Returns (the prompt's ids without it, the ids that start with B, B); the ids unchanged
    and None (nothing to heal) when the prompt is one token (the model needs one to read),
    ends in a special token, or no other token starts with B (with characters as tokens,
    never one)."""
    ids = list(ids)
    if len(ids) < 2 or ids[-1] < len(SPECIALS):
        return ids, None, b""
    removed = vocab.token(ids[-1])
    allowed = [i for i in range(len(SPECIALS), len(vocab)) if vocab.token(i).startswith(removed)]
    if len(allowed) < 2:
        return ids, None, b""
    return ids[:-1], allowed, removed


def _first_within(choose: Callable, allowed: Sequence[int]) -> Callable:
    """``choose``, the first token picked among ``allowed`` only (token healing): the
    log-probabilities of the others -inf, the rest renormalized."""
    steps = []

    def choose_first_within(log_probs):
        if not steps:
            outside = torch.full_like(log_probs, -math.inf)
            outside[:, allowed] = 0.0
            log_probs = (log_probs + outside).log_softmax(-1)
        steps.append(1)
        return choose(log_probs)

    return choose_first_within


@torch.no_grad()
def complete(model: nn.Module, vocab: Vocab | BPE, prompt: str, max_new_chars: int,
             temperature: float | None = None, top_k: int | None = None,
             top_p: float | None = None, samples: int = 1, seed: int = 0,
             emit: Callable[[list[str]], None] | None = None, healing: bool = True
             ) -> list[str]:
    """A language model (DecoderLM, LlamaLM) continues the text ``prompt``: ``samples``
    continuations of max_new_chars characters each (characters for every tokenizer: a BPE
    token may hold several, the last one's text is cut to fit), greedy (temperature, top_k
    and top_p None) or drawn from softmax(logits / temperature) (temperature None: 1) within
    the top_k / top_p tokens (decoding.sampler, seeded by ``seed``), by decoding.lm_generate
    with the key/value cache. With a BPE tokenizer, a continuation ends early at the
    end-of-text token (EOS); a character model (chapter 09's, of running text) never picks it.
    emit(texts), when given, gets each step's new text of every sample as it comes, the bytes
    of a character cut between tokens held back until it is whole (tokens.TextStream): the
    pieces joined are the continuations. healing: token healing (heal()) where it can change
    the text: the prompt's last token backed up, the first new one starting with its bytes.
    A prompt that is empty, not UTF-8 text, or has characters the model has never seen is a
    ValueError."""
    check_model(model, vocab, "lm")
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a string, got {type(prompt).__name__}")
    if not prompt:
        raise ValueError("the prompt is empty: the model continues a text, give it at least "
                         "one character")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as error:  # a lone surrogate: a command line's byte 0x80-0xff
        code = ord(prompt[error.start])  # Python reads such a byte b as U+DC00 + b
        what = f"the byte {code - 0xDC00:#x}" if code >= 0xDC80 else f"the lone surrogate {code:#x}"
        raise ValueError(f"the prompt is not UTF-8 text (character {error.start + 1} is {what}): "
                         "convert it first, e.g. with iconv -f latin1 -t utf-8") from None
    known = getattr(vocab, "stoi", None)  # a byte-level BPE tokenizer (chapter 11) knows every text
    unknown = sorted({c for c in prompt if known is not None and c not in known})
    if unknown:
        raise ValueError(f"the prompt has characters the model has never seen: "
                         f"{''.join(unknown[:10])!r}; it knows {len(vocab) - len(SPECIALS)} "
                         "characters")
    max_new_chars = integer("max_new_chars", max_new_chars)
    samples = integer("samples", samples)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEEDS:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    model.eval()
    device = next(model.parameters()).device
    prompt_ids, allowed, shown = heal(vocab, vocab.encode(prompt)) if healing else (
        vocab.encode(prompt), None, b"")
    ids = torch.tensor([prompt_ids] * samples, device=device)  # (samples, t)
    if temperature is None and top_k is None and top_p is None:
        choose = greedy
    else:
        generator = torch.Generator(device).manual_seed(seed)
        choose = sampler(1.0 if temperature is None else temperature, top_k, top_p, generator)
    if allowed is not None:
        choose = _first_within(choose, allowed)
    streams = [TextStream(vocab, shown) for _ in range(samples)]
    texts = [[] for _ in range(samples)]  # each sample's pieces of text
    counts = [0] * samples  # and their characters

    def add(pieces):
        pieces = [piece[: max_new_chars - n] for piece, n in zip(pieces, counts)]
        for text, piece in zip(texts, pieces):
            text.append(piece)
        counts[:] = [n + len(piece) for n, piece in zip(counts, pieces)]
        if emit is not None:
            emit(pieces)

    ends = isinstance(vocab, BPE)
    never = [i for i in range(len(SPECIALS)) if not (ends and i == EOS)]
    # A token adds a byte at least, a character is 4 bytes at most (3 held back), healing's
    # first token may add none: 4 tokens a character are always enough.
    lm_generate(model, ids, 4 * max_new_chars + 4, choose, EOS if ends else None, never=never,
                emit=lambda tokens: add([s.push(i) for s, i in zip(streams, tokens.tolist())]),
                stop=lambda: torch.tensor([n >= max_new_chars for n in counts], device=device))
    rest = [s.end() for s in streams]  # an unfinished character's bytes, as U+FFFD
    if any(rest):
        add(rest)
    return ["".join(text) for text in texts]
