"""Checks for exercise 05: embeddings, the encoder layer and the encoder stack, and their
catalogue of mistakes.

The exercise gives each class's __init__ complete, so a check can copy the reference's
weights into the learner's module and compare outputs value by value. The reference's
parameters are randomized first (LayerNorm gains and biases included): with the default
init the two norms of a layer are the same function and some mistakes would be invisible.
"""

import math

import torch

from .. import encoder as reference
from ..masks import padding_mask
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

# The exercise's EncoderLayer names its norms like torch.nn.TransformerEncoderLayer.
_LAYER_NAMES = (("sublayers.0.norm.", "norm1."), ("sublayers.1.norm.", "norm2."))

IN_PLACE = Mistake(
    "Input modified in place",
    "your forward changed the caller's x. Use out-of-place operations (x = x + ..., not x += ...).",
)
RENAMED = Mistake(
    "Parameters renamed",
    "keep __init__ as the exercise gives it, so the check can copy the reference's weights "
    "into your module; write only forward.",
)


# ---------------------------------------------------------------------------------------
# Embeddings


def _embed(scale):
    return lambda e, tokens: e.embedding(tokens) * scale(e, tokens)


def _sqrt_d_model(e, tokens):
    return math.sqrt(e.embedding.embedding_dim)


EMBEDDING_MISTAKES = (
    Mistake(
        "Embeddings not scaled",
        "multiply the looked-up vectors by sqrt(d_model) (paper, section 3.4), so that the "
        "positional encoding added next does not drown the tokens' identity.",
        (_embed(lambda e, t: 1.0),),
    ),
    Mistake(
        "Embeddings scaled by d_model instead of sqrt(d_model)",
        "the scale is math.sqrt(d_model), the square root of the width; d_model itself makes "
        "the tokens drown the positional encoding instead.",
        (_embed(lambda e, t: e.embedding.embedding_dim),),
    ),
    Mistake(
        "Embeddings divided by sqrt(d_model) instead of multiplied",
        "the embeddings should get larger, not smaller.",
        (_embed(lambda e, t: 1 / _sqrt_d_model(e, t)),),
    ),
    Mistake(
        "Embeddings scaled by the square root of the wrong size",
        "d_model is the width of each vector (self.embedding.embedding_dim), not the sequence "
        "length, the batch size or the vocabulary size.",
        tuple(
            _embed(lambda e, t, size=size: math.sqrt(size(e, t)))
            for size in (
                lambda e, t: t.size(-1),
                lambda e, t: t.size(0),
                lambda e, t: e.embedding.num_embeddings,
            )
        ),
    ),
)
TABLE_CHANGED = Mistake(
    "Embedding table changed in place",
    "forward scaled self.embedding.weight itself, so every call makes it larger. Scale the "
    "looked-up vectors, not the table.",
)


def _tokens(seed, batch, seq, vocab):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(vocab, (batch, seq), generator=g)


# (vocab_size, d_model, tokens): seq, batch, vocab and d_model all differ.
EMBEDDING_CASES = [
    (11, 16, _tokens(0, 2, 5, 11)),
    (7, 9, _tokens(1, 3, 4, 7)),
]


def _randomize(module, seed):
    """Random parameters: norms' gains around 1, everything else around 0."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.5 * noise if name.endswith("norm.weight") else 0.5 * noise)
    return module


def _build(cls, name, args, reference_module, renames=()):
    """The learner's module, built and given the reference's weights."""
    outcome = call(cls, *args)
    fail_on_error(outcome, f"{name}.__init__", f"{name}{args}")
    module = outcome.value
    state = reference_module.state_dict()
    if set(state) != set(module.state_dict()):  # the exercise's names, e.g. norm1 not sublayers.0.norm
        for old, new in renames:
            state = {key.replace(old, new): tensor for key, tensor in state.items()}
    loaded = call(module.load_state_dict, state)
    if loaded.error is not None:
        message = str(loaded.error).strip().splitlines()
        RENAMED.fail(f"  load_state_dict said: {' '.join(message[:3])[:300]}")
    return module


def _compare(name, result, expected, inputs):
    problem = tensor_problem(result, expected, "the output")
    if problem:
        raise CheckFailure(f"Wrong output of {name}: {problem} on {inputs}")


@checks("Embeddings")
def check_embeddings(cls):
    for vocab_size, d_model, tokens in EMBEDDING_CASES:
        inputs = describe(vocab_size=vocab_size, d_model=d_model, tokens=tokens)
        ref = _randomize(reference.Embeddings(vocab_size, d_model), vocab_size)
        module = _build(cls, "Embeddings", (vocab_size, d_model), ref)
        with torch.no_grad():
            expected = ref(tokens)
        outcome = call(module, tokens.clone())
        fail_on_error(outcome, "Embeddings.forward", inputs)
        if not torch.equal(module.embedding.weight, ref.embedding.weight):
            TABLE_CHANGED.fail(f"  on {inputs}")
        result = outcome.value
        _compare("Embeddings", result, expected, inputs)
        if close(result, expected):
            continue
        mistake = first_match(EMBEDDING_MISTAKES, result, ref, tokens, same=close)
        if mistake is not None:
            mistake.fail(f"  on {inputs}")
        raise CheckFailure(
            f"Wrong embeddings on {inputs}, and no common mistake matches: "
            f"{difference(result, expected)}. Look up the vectors, then scale by sqrt(d_model)."
        )


# ---------------------------------------------------------------------------------------
# EncoderLayer


def _layer(
    layer,
    x,
    mask,
    seed,
    *,
    mask_t=False,
    norm_first=None,
    norms=(0, 1),
    residual="x",
    dropout="sublayer",
):
    """The reference layer's computation, with the variations that mistakes make.

    residual: "x" (right), "normalized" (x replaced by norm(x) before the sum) or None.
    dropout: "sublayer" (right: on the sublayer's output), None, "input" (on the
    sublayer's input), "sum" (on the residual sum) or "end" (on the sublayer block's result).
    """
    if seed is not None:
        torch.manual_seed(seed)
    if mask_t and mask is not None:
        mask = mask.transpose(-2, -1)
    if norm_first is None:
        norm_first = layer.sublayers[0].norm_first
    drop = layer.sublayers[0].dropout
    functions = (lambda h: layer.self_attn(h, h, h, mask)[0], layer.feed_forward)
    for function, i in zip(functions, norms, strict=True):
        norm = layer.sublayers[i].norm
        h = norm(x) if norm_first or residual == "normalized" else x
        out = function(drop(h) if dropout == "input" else h)
        if dropout == "sublayer":
            out = drop(out)
        base = {"x": x, "normalized": h, None: 0}[residual]
        x = base + out
        if not norm_first and residual != "normalized":
            x = norm(drop(x) if dropout == "sum" else x)
        elif dropout == "sum":
            x = drop(x)
        if dropout == "end":
            x = drop(x)
    return x


def _layer_with(**bug):
    return lambda layer, x, mask, seed: _layer(layer, x, mask, seed, **bug)


QUERY_AXIS = Mistake(
    "Padding mask applied on the query axis instead of the key axis",
    "a padding mask says which KEYS are real: (batch, 1, 1, seq) blocks columns of the "
    "(q_len, k_len) scores. Transposed, it blocks the padded queries instead, and real "
    "positions still attend to the padding. Pass the mask to self-attention as it is.",
    (_layer_with(mask_t=True),),
)
LAYER_MISTAKES = (
    QUERY_AXIS,
    Mistake(
        "Padding mask ignored",
        "pass `mask` to self-attention, so that no position attends to padding.",
        (lambda layer, x, mask, seed: _layer(layer, x, None, seed),),
    ),
    Mistake(
        "Pre-norm and post-norm mixed up",
        "norm_first=False (the paper): x = LayerNorm(x + Dropout(Sublayer(x))). "
        "norm_first=True: x = x + Dropout(Sublayer(LayerNorm(x))). Check which one you do for each.",
        (lambda layer, x, mask, seed: _layer(
            layer, x, mask, seed, norm_first=not layer.sublayers[0].norm_first),),
    ),
    Mistake(
        "Residual taken from the normalized input",
        "the residual path carries x itself, untouched: x + Sublayer(LayerNorm(x)), not "
        "LayerNorm(x) + Sublayer(LayerNorm(x)). Keep x and the normalized copy in two variables.",
        (_layer_with(residual="normalized"),),
    ),
    Mistake(
        "Residual connection missing",
        "each sublayer's output is ADDED to its input (x + ...), before or after the norm.",
        (_layer_with(residual=None),),
    ),
    Mistake(
        "One LayerNorm used for both sublayers",
        "each sublayer has its own norm with its own gain and bias: norm1 around self-attention, "
        "norm2 around the feed-forward network.",
        (_layer_with(norms=(0, 0)), _layer_with(norms=(1, 1))),
    ),
    Mistake(
        "Sublayer dropout missing",
        "in training, dropout goes on each sublayer's output before it is added to the "
        "residual: x + Dropout(Sublayer(x)) (paper, section 5.4).",
        (_layer_with(dropout=None),),
    ),
    Mistake(
        "Dropout in the wrong place",
        "dropout goes on each sublayer's output, before the residual sum: "
        "x + Dropout(Sublayer(...)), not on the sublayer's input or on the sum.",
        tuple(_layer_with(dropout=d) for d in ("input", "sum", "end")),
    ),
)


def _inputs(seed, batch, seq, d_model, lengths=None):
    """x (batch, seq, d_model) and, if lengths, a padding mask (batch, 1, 1, seq)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, seq, d_model, generator=g)
    if lengths is None:
        return x, None
    tokens = (torch.arange(seq) < torch.tensor(lengths)[:, None]).long()  # 1 real, 0 pad
    return x, padding_mask(tokens, pad_id=0)


# (d_model, n_heads, d_ff, dropout, norm_first, activation), x, mask, training
LAYER_CASES = [
    ((16, 4, 24, 0.1, False, "relu"), *_inputs(0, 2, 5, 16), False),
    ((16, 4, 24, 0.1, False, "relu"), *_inputs(1, 3, 6, 16, [6, 4, 1]), False),
    ((16, 2, 24, 0.1, True, "gelu"), *_inputs(2, 3, 6, 16, [6, 3, 2]), False),
    ((12, 3, 20, 0.2, False, "gelu"), *_inputs(3, 2, 5, 12, [5, 3]), True),
    ((12, 3, 20, 0.2, True, "relu"), *_inputs(4, 2, 5, 12, [5, 3]), True),
]


def _describe_layer(args, x, mask, training):
    names = ("d_model", "n_heads", "d_ff", "dropout", "norm_first", "activation")
    config = ", ".join(f"{n}={a!r}" for n, a in zip(names, args, strict=True))
    mode = "training (dropout on)" if training else "eval"
    return f"EncoderLayer({config}) in {mode} mode, {describe(x=x, mask=mask)}"


def _real_positions_match(result, expected, mask):
    """True when only the padded positions' outputs differ."""
    real = mask[:, 0, 0, :]  # (batch, seq)
    return close(result[real], expected[real])


@checks("EncoderLayer")
def check_encoder_layer(cls):
    for seed, (args, x, mask, training) in enumerate(LAYER_CASES):
        inputs = _describe_layer(args, x, mask, training)
        torch.manual_seed(seed)
        ref = _randomize(reference.EncoderLayer(*args), seed).train(training)
        layer = _build(cls, "EncoderLayer", args, ref, _LAYER_NAMES).train(training)
        with torch.no_grad():  # first, so torch's one-time warm-up does not count as slow
            expected = _layer(ref, x, mask, seed)
        given = x.clone()
        torch.manual_seed(seed)  # the same dropout masks, if dropout is in the same places
        outcome = call(layer, given, mask)
        fail_on_error(outcome, "EncoderLayer.forward", inputs)
        if not torch.equal(given, x):
            IN_PLACE.fail(f"  on {inputs}")
        result = outcome.value
        _compare("EncoderLayer", result, expected, inputs)
        if close(result, expected):
            continue
        mistake = first_match(LAYER_MISTAKES, result, ref, x, mask, seed, same=close)
        if mistake is not None:
            mistake.fail(f"  on {inputs}")
        if mask is not None and _real_positions_match(result, expected, mask):
            raise CheckFailure(
                f"Wrong outputs at padded positions on {inputs}: real positions are right. "
                "Compute every position the same way and pass the mask to self-attention "
                "unchanged; the padded positions' outputs are ignored later, not zeroed here."
            )
        raise CheckFailure(
            f"Wrong output on {inputs}, and no common mistake matches: "
            f"{difference(result, expected)}. Compare each step with "
            "LayerNorm(x + Dropout(Sublayer(x))) (post-norm) or x + Dropout(Sublayer(LayerNorm(x))) "
            "(pre-norm)."
        )


# ---------------------------------------------------------------------------------------
# Encoder


def _stack(encoder, x, mask, *, masks="all", chained=True, layers=None, final="end"):
    """The reference stack's computation, with the variations that mistakes make."""
    layers = list(encoder.layers) if layers is None else layers(encoder)
    h = x
    for i, layer in enumerate(layers):
        use = mask if masks == "all" or (masks == "first" and i == 0) else None
        h = layer(h if chained else x, use)
        if final == "each":
            h = encoder.norm(h)
    return encoder.norm(h) if final == "end" else h


def _stack_with(**bug):
    return lambda encoder, x, mask: _stack(encoder, x, mask, **bug)


ENCODER_MISTAKES = (
    Mistake(
        "Padding mask not passed to every layer",
        "every layer's self-attention must ignore the padding: call each layer with `mask`.",
        (_stack_with(masks=None), _stack_with(masks="first")),
    ),
    Mistake(
        "Layers not chained",
        "each layer takes the previous layer's output: x = layer(x, mask), not layer(input, mask).",
        (_stack_with(chained=False),),
    ),
    Mistake(
        "One layer applied N times",
        "the N layers have their own weights: loop over self.layers, not self.layers[0].",
        (_stack_with(layers=lambda e: [e.layers[0]] * len(e.layers)),),
    ),
    Mistake(
        "Final LayerNorm missing",
        "with pre-norm (norm_first=True) the last layer's output is never normalized: apply "
        "self.norm once, after the last layer (it is an identity for post-norm).",
        (_stack_with(final=None),),
    ),
    Mistake(
        "Final LayerNorm applied after every layer",
        "self.norm belongs after the last layer only, once.",
        (_stack_with(final="each"),),
    ),
)

# (d_model, n_heads, d_ff, n_layers, dropout, norm_first, activation), x, mask
ENCODER_CASES = [
    ((16, 4, 24, 3, 0.1, False, "relu"), *_inputs(5, 2, 5, 16)),
    ((16, 4, 24, 3, 0.1, False, "relu"), *_inputs(6, 3, 6, 16, [6, 4, 2])),
    ((12, 3, 20, 2, 0.1, True, "gelu"), *_inputs(7, 3, 5, 12, [5, 3, 1])),
]


def _describe_encoder(args, x, mask):
    names = ("d_model", "n_heads", "d_ff", "n_layers", "dropout", "norm_first", "activation")
    config = ", ".join(f"{n}={a!r}" for n, a in zip(names, args, strict=True))
    return f"Encoder({config}) in eval mode, {describe(x=x, mask=mask)}"


@checks("Encoder")
def check_encoder(cls):
    for seed, (args, x, mask) in enumerate(ENCODER_CASES):
        inputs = _describe_encoder(args, x, mask)
        torch.manual_seed(seed)
        ref = _randomize(reference.Encoder(*args), seed).eval()
        encoder = _build(cls, "Encoder", args, ref).eval()
        with torch.no_grad():
            expected = ref(x, mask)
        given = x.clone()
        outcome = call(encoder, given, mask)
        fail_on_error(outcome, "Encoder.forward", inputs)
        if not torch.equal(given, x):
            IN_PLACE.fail(f"  on {inputs}")
        result = outcome.value
        _compare("Encoder", result, expected, inputs)
        if close(result, expected):
            continue
        mistake = first_match(ENCODER_MISTAKES, result, ref, x, mask, same=close)
        if mistake is not None:
            mistake.fail(f"  on {inputs}")
        raise CheckFailure(
            f"Wrong output on {inputs}, and no common mistake matches: "
            f"{difference(result, expected)}. Each layer takes the previous one's output and "
            "the mask; self.norm comes once, at the end."
        )
