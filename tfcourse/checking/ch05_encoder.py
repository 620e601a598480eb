"""Exercise 05: embeddings, the encoder layer and the encoder stack, their cases and their
catalogue of mistakes.

The exercise gives each class's __init__ complete, so a check copies the reference's
(randomized) weights into the learner's module and compares outputs value by value, in
eval mode and in training mode (dropout on, the same seeded randomness for both).
"""

import math

import torch
from torch.nn import functional as F

from .. import encoder as reference
from ..masks import causal_mask, padding_mask
from .comparison import describe
from .mistakes import Mistake, laddered, member
from .pipeline import Case, Item

EXERCISE = "ex05_encoder"

# ---------------------------------------------------------------------------------------
# Embeddings


def _embed(scale):
    return lambda e, tokens: e.embedding(tokens) * scale(e, tokens)


def _sqrt_d_model(e, tokens):
    return math.sqrt(e.embedding.embedding_dim)


EMBEDDING_MISTAKES = (
    Mistake(
        "not_scaled", "Embeddings not scaled",
        "multiply the looked-up vectors by sqrt(d_model) (paper, section 3.4), so that the "
        "positional encoding added next does not drown the tokens' identity.",
        (_embed(lambda e, t: 1.0),),
    ),
    Mistake(
        "scaled_by_d_model", "Embeddings scaled by d_model instead of sqrt(d_model)",
        "the scale is math.sqrt(d_model), the square root of the width; d_model itself makes "
        "the tokens drown the positional encoding instead.",
        (_embed(lambda e, t: e.embedding.embedding_dim),),
    ),
    Mistake(
        "divided", "Embeddings divided by sqrt(d_model) instead of multiplied",
        "the embeddings should get larger, not smaller.",
        (_embed(lambda e, t: 1 / _sqrt_d_model(e, t)),),
    ),
    Mistake(
        "scale_added", "sqrt(d_model) added instead of multiplied",
        "scale the embeddings: embedding(tokens) * sqrt(d_model), a product, not a sum.",
        (lambda e, tokens: e.embedding(tokens) + _sqrt_d_model(e, tokens),),
    ),
    Mistake(
        "precedence_half", "Embeddings scaled by d_model / 2, not sqrt(d_model)",
        "in Python d_model ** 1/2 is (d_model ** 1) / 2: ** binds tighter than /. Write "
        "d_model ** 0.5 or math.sqrt(d_model).",
        (_embed(lambda e, t: e.embedding.embedding_dim / 2),),
    ),
    Mistake(
        "wrong_size", "Embeddings scaled by the square root of the wrong size",
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


def _padding_row_zeroed(e, tokens):
    """nn.Embedding(padding_idx=0)'s habit: the vectors of id 0 are zero."""
    return (e.embedding(tokens) * _sqrt_d_model(e, tokens)).masked_fill((tokens == 0)[..., None], 0.0)


EMBEDDING_MISTAKES += (
    Mistake(
        "scale_rounded", "sqrt(d_model) rounded to an integer",
        "the scale is math.sqrt(d_model) as a float: int() or round() of it is exact only when "
        "d_model is a square (64, 256), and 5 instead of 5.66 for d_model = 32.",
        tuple(_embed(lambda e, t, f=f: f(_sqrt_d_model(e, t))) for f in (int, round, math.ceil)),
    ),
    Mistake(
        "padding_row_zeroed", "Vectors of token 0 set to zero",
        "every id has its own learned vector, id 0 too: this table has no padding_idx (as "
        "nn.Embedding(padding_idx=0) or a Hugging Face pad_token_id would give), and padding is "
        "handled by the attention mask. Look every token up and scale it.",
        (_padding_row_zeroed,),
    ),
)


def _tokens(seed, batch, seq, vocab):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(vocab, (batch, seq), generator=g)


def _embedding_case(vocab_size, d_model, tokens, seed):
    return Case((tokens,), names=("tokens",), init=(vocab_size, d_model), seed=seed,
                label=describe(vocab_size=vocab_size, d_model=d_model, tokens=tokens))


# vocab_size, d_model, tokens: seq, batch, vocab and d_model all differ.
# The second hints (check(..., hint=2)), by mistake, for each item (sections: the item's,
# unless given).
_EVAL = "call module.eval() and run it twice on the same x: the outputs must be equal."
_PADDING = ("05_encoder", "6. The padding mask in action")
_EMBEDDING_LADDER = {
    "not_scaled": (None, "print self.embedding(tokens).std() and your output's std: their "
                   "ratio should be sqrt(d_model)."),
    "scaled_by_d_model": (None, "print your output's std over the lookup's std, next to "
                          "math.sqrt(d_model)."),
    "divided": (None, "print your output's std over the lookup's std: above 1, or below?"),
    "scale_added": (None, "print your output minus the lookup: a constant means a sum, not a "
                    "product."),
    "precedence_half": (None, "print 16 ** 1/2 in Python."),
    "wrong_size": (None, "print the number you take the square root of, next to "
                   "self.embedding.embedding_dim."),
    "scale_rounded": (None, "print your scale for d_model = 12: 3.4641..., not 3."),
    "padding_row_zeroed": (None, "print your output for tokens = torch.tensor([[0, 1]]): "
                           "token 0 has a vector like any other."),
}
_LAYER_LADDER = {
    "mask_on_queries": (_PADDING, "print mask.shape and the scores' (batch, heads, q_len, "
                        "k_len): which axis of the scores does the mask's last axis meet?"),
    "mask_ignored": (_PADDING, "change a padding token of the input: the outputs at the real "
                     "positions must not move."),
    "norm_on_branch": (None, "in post-norm, print the mean and std of one output row: 0 and "
                       "1 (before the norm's gain and bias) only if the norm is the last "
                       "thing applied."),
    "pre_post_mixed": (None, "write the two branches as formulas and mark where each norm is "
                       "applied: before the sublayer, or after the sum?"),
    "residual_normalized": (None, "keep two names: x, the input, and h = the norm of x. Which "
                            "one does the residual sum add?"),
    "no_residual": (None, "print the output for x and for x + 1 with attention and FFN "
                    "outputs of zero: a residual lets x through."),
    "connection_skipped": (None, "print what your forward calls: self.sublayers[0] and "
                           "self.sublayers[1], each given its function."),
    "sublayer_skipped": (None, "list the modules your forward calls, in order: self.self_attn "
                         "and self.feed_forward, each once, each with its norm."),
    "one_norm": (None, "list the modules your forward calls, in order: self.sublayers[0] and "
                 "self.sublayers[1] (or their norms) each once."),
    "norms_swapped": (None, "list the modules your forward calls, in order: which sublayer "
                      "(which norm) sits with self.self_attn?"),
    "order": (None, "list the modules your forward calls, in order: attention before the "
              "feed-forward network."),
    "argument_ignored": (None, "in pre-norm, print which tensor your attention lambda "
                         "passes to self.self_attn: its argument, or the outer x?"),
    "kv_unnormalized": (None, "in pre-norm, print which tensor you give self.self_attn as "
                        "query, as key and as value: one and the same."),
    "not_chained": (None, "after the first sublayer, which tensor does the second residual "
                    "sum add: the layer's input, or the first sublayer's output?"),
    "ffn_reads_input": (None, "which tensor goes into self.feed_forward: the layer's input, or "
                        "the first sublayer's output?"),
    "parallel_block": (None, "which tensor goes into self.feed_forward: the layer's input, or "
                       "the first sublayer's output? Count the residual sums: two, one per "
                       "sublayer."),
    "causal": (_PADDING, "print your attention weights for mask=None: position 0 should "
               "attend to later positions too."),
    "pre_norm_also_post": (None, "with norm_first=True count the norm calls on each path: one "
                           "per sublayer, before it."),
    "mask_inverted": (_PADDING, "print the attention weights for a padded sequence: the "
                      "padding keys must get 0."),
    "mask_to_feed_forward": (None, "print the arguments you give self.feed_forward."),
    "tuple": (None, "print type(self.self_attn(x, x, x, mask)): a tuple of two."),
    "dropout_missing": (None, "in training mode with dropout=0.5 run twice: the outputs "
                        "should differ."),
    "dropout_misplaced": (None, "write each sublayer as one expression: which tensor does "
                          "the dropout wrap?"),
    "dropout_on_residual": (None, "in training mode, which of the two terms of each residual "
                            "sum goes through the dropout?"),
    "dropout_in_eval": (None, _EVAL),
    "padded_positions": (_PADDING, "compare your outputs at the padded positions with the "
                         "reference's: the mask goes to attention as it is, nothing more."),
}
_ENCODER_LADDER = {
    "mask_not_passed": (_PADDING, "print the arguments each layer gets in your loop."),
    "not_chained": (None, "print id() of the tensor each layer gets: they must all differ."),
    "one_layer": (None, "print the index of the layer each step of your loop calls."),
    "layer_skipped": (None, "count the layer calls your forward makes: len(self.layers); "
                      "is your `return` indented inside the loop?"),
    "layers_reversed": (None, "print the index of the layer each step of your loop calls: "
                        "0 first."),
    "extra_residual": (None, "each layer returns its full output: print layer(x, mask) - x "
                       "and your step's result - x."),
    "final_norm_twice": (None, "count the calls to self.norm in your forward: once."),
    "no_final_norm": (None, "count the calls to self.norm in your forward: once, whatever "
                      "norm_first is (post-norm's is an identity)."),
    "final_norm_each": (None, "is the self.norm line inside your loop, or after it?"),
    "norm_first_read": (None, "print self.norm for a post-norm Encoder: an nn.Identity."),
    "final_norm_first": (None, "is the self.norm line before your loop, or after it?"),
}


EMBEDDINGS = Item(
    EXERCISE, "Embeddings", reference.Embeddings,
    [_embedding_case(11, 16, _tokens(0, 2, 5, 11), 11), _embedding_case(7, 9, _tokens(1, 3, 4, 7), 7),
     _embedding_case(13, 12, _tokens(2, 2, 6, 13), 13)],  # d_model not a square
    laddered(EMBEDDING_MISTAKES, _EMBEDDING_LADDER),
    formula="Look up the vectors, then scale by sqrt(d_model).",
    section=("05_encoder", "2. Token embeddings, scaled by $\\sqrt{d_\\text{model}}$"),
)


# ---------------------------------------------------------------------------------------
# EncoderLayer


def _layer(layer, x, mask, *, mask_t=False, norm_first=None, norms=(0, 1), residual="x",
           dropout="sublayer", order=(0, 1), kv="same", chained=True, unpacked=True,
           ffn_reads_input=False, post_too=False, bare=(), skip=(), norm_at=None, raw=()):
    """The reference layer's computation, with the variations that mistakes make.

    residual: "x" (right), "normalized" (pre-norm's residual from norm(x)), "normalized_always"
    (x normalized first, and the residual from it, in both modes) or None (no residual).
    dropout: "sublayer" (right: on the sublayer's output), None, "input" (on the sublayer's
    input), "sum" (on the residual sum), "end" (on the sublayer block's result) or "eval"
    (on the sublayer's output, in eval mode too), "residual" or "residual_after" (on the
    sublayer's output and on the residual x too, drawn before or after the sublayer's).
    order: the sublayers' order; norms[i]: the norm that sublayer i uses. kv: "raw" gives
    self-attention the unnormalized x as keys and values ("raw_query": as queries; "raw_all":
    as all three, the sublayer's normalized argument ignored). ffn_reads_input: the feed-forward
    sublayer reads the layer's input (the two sublayers in parallel). post_too: pre-norm
    that also normalizes each residual sum. bare: the sublayers (0: attention, 1: feed-forward)
    without a residual; skip: the sublayers not run at all; raw: the sublayers called as plain
    functions, outside their connection (no norm, dropout or residual). norm_at: post-norm's norm on the
    sublayer's branch instead of the sum, "branch" (x + norm(dropout(sublayer(x)))) or
    "output" (x + dropout(norm(sublayer(x)))).
    """
    if mask_t and mask is not None:
        mask = mask.transpose(-2, -1)
    if norm_first is None:
        norm_first = layer.sublayers[0].norm_first
    drop = layer.sublayers[0].dropout
    if dropout == "eval":
        p = drop.p
        drop = lambda t: F.dropout(t, p, training=True)  # noqa: E731
        dropout = "sublayer"
    first = x
    for i in (i for i in order if i not in skip):
        if i in raw:
            x = layer.self_attn(x, x, x, mask)[0] if i == 0 else layer.feed_forward(x)
            continue
        norm = layer.sublayers[norms[i]].norm
        pre = norm_first or residual == "normalized_always"
        read = first if ffn_reads_input and i == 1 else x
        h = norm(read) if pre else read
        given = drop(h) if dropout == "input" else h
        kept = drop(x) if dropout == "residual" else x  # drawn before the sublayer's dropout
        if i == 0:
            source = x if kv in ("raw", "raw_all") else given
            query = x if kv in ("raw_query", "raw_all") else given
            out = layer.self_attn(query, source, source, mask)
            out = out[0] if unpacked else out
        else:
            out = layer.feed_forward(given)
        branch = norm_at is not None and not pre
        if branch and norm_at == "output":
            out = norm(out)
        if dropout in ("sublayer", "residual", "residual_after"):
            out = drop(out)
        if branch and norm_at == "branch":
            out = norm(out)
        if dropout == "residual_after":
            kept = drop(x)
        residual_x = kept if chained or i == order[0] else first
        kind = None if i in bare else residual
        y = {"x": residual_x, "normalized": h, "normalized_always": h, None: 0}[kind] + out
        if dropout == "sum":
            y = drop(y)
        if (not pre and not branch) or post_too:
            y = norm(y)
        x = drop(y) if dropout == "end" else y
    return x


def _layer_with(**bug):
    return lambda layer, x, mask=None: _layer(layer, x, mask, **bug)


def _parallel(layer, x, mask=None, *, shared_norm=False, joined=False):
    """GPT-J's and PaLM's parallel block: both sublayers read the same x and join one
    residual sum, x + Attention(x') + FFN(x'), each x' normalized (pre-norm; one norm if
    `shared_norm`) or the whole sum normalized (post-norm); `joined`: each sublayer applied
    to x whole (its residual, dropout and norm), x counted once: sub1(x) + sub2(x) - x."""
    if joined:
        attended = layer.sublayers[0](x, lambda h: layer.self_attn(h, h, h, mask)[0])
        return attended + layer.sublayers[1](x, layer.feed_forward) - x
    first, second = layer.sublayers
    pre = first.norm_first
    h_attn = first.norm(x) if pre else x
    h_ffn = (first.norm if shared_norm else second.norm)(x) if pre else x
    y = (x + first.dropout(layer.self_attn(h_attn, h_attn, h_attn, mask)[0])
         + second.dropout(layer.feed_forward(h_ffn)))
    return y if pre else (first.norm if shared_norm else second.norm)(y)


def _causal_encoder(always):
    """Self-attention given a causal mask: when no mask is given (or always, with it)."""

    def compute(layer, x, mask=None):
        causal = causal_mask(x.size(1), device=x.device)  # (seq, seq)
        if mask is None:
            return _layer(layer, x, causal)
        return _layer(layer, x, mask & causal if always else mask)

    return compute


QUERY_AXIS = Mistake(
    "mask_on_queries", "Padding mask applied on the query axis instead of the key axis",
    "a padding mask says which KEYS are real: (batch, 1, 1, seq) blocks columns of the "
    "(q_len, k_len) scores. Transposed, it blocks the padded queries instead, and real "
    "positions still attend to the padding. Pass the mask to self-attention as it is.",
    (_layer_with(mask_t=True),),
)
LAYER_MISTAKES = (
    QUERY_AXIS,
    Mistake(
        "mask_ignored", "Padding mask ignored",
        "pass `mask` to self-attention, so that no position attends to padding.",
        (lambda layer, x, mask=None: _layer(layer, x, None),),
    ),
    Mistake(
        "pre_post_mixed", "Pre-norm and post-norm mixed up",
        "norm_first=False (the paper): x = LayerNorm(x + Dropout(Sublayer(x))). "
        "norm_first=True: x = x + Dropout(Sublayer(LayerNorm(x))). Check which one you do for each.",
        (lambda layer, x, mask=None: _layer(layer, x, mask,
                                            norm_first=not layer.sublayers[0].norm_first),
         _layer_with(norm_first=True), _layer_with(norm_first=False)),
    ),
    Mistake(
        "norm_on_branch", "Norm on the sublayer's branch instead of the residual sum",
        "post-norm (norm_first=False, the paper) normalizes the whole sum, x and the sublayer's "
        "output together: x = LayerNorm(x + Dropout(Sublayer(x))). Normalizing the sublayer's "
        "output alone leaves the residual stream itself unnormalized.",
        tuple(_layer_with(norm_at=at, **mode) for mode in ({}, {"norm_first": False})
              for at in ("branch", "output")),
    ),
    Mistake(
        "residual_normalized", "Residual taken from the normalized input",
        "the residual path carries x itself, untouched: x + Sublayer(LayerNorm(x)), not "
        "LayerNorm(x) + Sublayer(LayerNorm(x)). Keep x and the normalized copy in two variables.",
        (_layer_with(residual="normalized"), _layer_with(residual="normalized_always")),
    ),
    Mistake(
        "no_residual", "Residual connection missing",
        "each sublayer's output is ADDED to its input (x + ...), before or after the norm: "
        "around self-attention AND around the feed-forward network, both.",
        (_layer_with(residual=None), _layer_with(bare=(0,)), _layer_with(bare=(1,))),
    ),
    Mistake(
        "connection_skipped", "The {which} called outside its sublayer connection: no residual, "
        "dropout or norm around it",
        "each sublayer runs inside its own connection, self.sublayers[i](x, f): the norm, the "
        "dropout and the residual x + ... around it. Calling {call} directly and passing its "
        "output on skips all three for that sublayer: wrap it, x = self.sublayers[{i}](x, f).",
        (member(_layer_with(raw=(0,)), which="self-attention", i=0,
                call="self.self_attn(x, x, x, mask)[0]"),
         member(_layer_with(raw=(1,)), which="feed-forward network", i=1, call="self.feed_forward(x)")),
    ),
    Mistake(
        "sublayer_skipped", "A sublayer skipped",
        "an encoder layer runs both of its sublayers, one after the other: self-attention, then "
        "the feed-forward network, each inside its residual, dropout and norm.",
        (_layer_with(skip=(0,)), _layer_with(skip=(1,))),
    ),
    Mistake(
        "one_norm", "One LayerNorm used for both sublayers",
        "each sublayer has its own norm with its own gain and bias: self.sublayers[0].norm "
        "around self-attention, self.sublayers[1].norm around the feed-forward network.",
        (_layer_with(norms=(0, 0)), _layer_with(norms=(1, 1))),
    ),
    Mistake(
        "norms_swapped", "The two LayerNorms swapped",
        "self.sublayers[0] (and its norm) belongs to self-attention, self.sublayers[1] to the "
        "feed-forward network.",
        (_layer_with(norms=(1, 0)),),
    ),
    Mistake(
        "order", "Sublayers in the wrong order",
        "self-attention first, then the feed-forward network (paper, figure 1).",
        (_layer_with(order=(1, 0)), _layer_with(order=(1, 0), norms=(1, 0))),
    ),
    Mistake(
        "argument_ignored", "Sublayer function ignores its argument",
        "self.sublayers[0](x, f) calls f with the LayerNorm of x in pre-norm: write f as "
        "lambda y: self.self_attn(y, y, y, mask)[0] and use y inside it, not the x outside.",
        (_layer_with(kv="raw_all"),),
    ),
    Mistake(
        "kv_unnormalized", "Self-attention given the unnormalized input",
        "in pre-norm, self-attention's query, key and value are all the same normalized "
        "tensor, the normalized x: self.self_attn(h, h, h, mask) with one h.",
        (_layer_with(kv="raw"), _layer_with(kv="raw_query")),
    ),
    Mistake(
        "not_chained", "Second sublayer's residual taken from the layer's input",
        "the feed-forward sublayer works on the attention sublayer's output: x = sublayer1(x), "
        "then x = sublayer2(x), each residual adding its own sublayer's input.",
        (_layer_with(chained=False),),
    ),
    Mistake(
        "ffn_reads_input", "Feed-forward sublayer given the layer's input",
        "the sublayers run one after the other, not side by side: the feed-forward sublayer "
        "reads the attention sublayer's output: x = sublayer1(x), then x = sublayer2(x) on that "
        "new x (its residual too).",
        (_layer_with(ffn_reads_input=True),),
    ),
    Mistake(
        "parallel_block", "Sublayers side by side: GPT-J's parallel block",
        "x + Attention(x) + FFN(x), both reading the same x (GPT-J, PaLM), is another "
        "architecture: in this layer the sublayers run one after the other, each with its own "
        "residual sum: x = sublayer1(x), then x = sublayer2(x) on that new x.",
        (_parallel, lambda layer, x, mask=None: _parallel(layer, x, mask, shared_norm=True),
         lambda layer, x, mask=None: _parallel(layer, x, mask, joined=True)),
    ),
    Mistake(
        "causal", "Encoder self-attention made causal",
        "an encoder position attends to every position, earlier and later (paper, section 3.2.3): "
        "with mask=None attend to all keys. A causal mask belongs to the decoder's (and a GPT's) "
        "self-attention, not to the encoder's.",
        (_causal_encoder(always=False), _causal_encoder(always=True)),
    ),
    Mistake(
        "pre_norm_also_post", "Pre-norm also normalizes after the residual sum",
        "with norm_first=True the norm comes only BEFORE each sublayer: x = x + Dropout("
        "Sublayer(LayerNorm(x))); the sum itself is not normalized (that is post-norm's place).",
        (_layer_with(post_too=True),),
    ),
    Mistake(
        "mask_inverted", "Mask polarity inverted",
        "True means 'may attend' here (torch.nn's key_padding_mask is the opposite): pass the "
        "mask on as it is.",
        (lambda layer, x, mask=None: _layer(layer, x, None if mask is None else ~mask),),
    ),
    Mistake(
        "mask_to_feed_forward", "Mask given to the feed-forward network",
        "the feed-forward network takes x alone: self.feed_forward(x); the mask belongs to "
        "self-attention.",
        (lambda layer, x, mask=None: layer.feed_forward(x, mask),),
    ),
    Mistake(
        "tuple", "Attention's (output, weights) used as a tensor",
        "self.self_attn(...) returns a tuple (output, weights): take the output, [0].",
        (_layer_with(unpacked=False), _layer_with(unpacked=False, dropout=None)),
    ),
    Mistake(
        "dropout_missing", "Sublayer dropout missing",
        "in training, dropout goes on each sublayer's output before it is added to the "
        "residual: x + Dropout(Sublayer(x)) (paper, section 5.4).",
        (_layer_with(dropout=None),),
    ),
    Mistake(
        "dropout_misplaced", "Dropout in the wrong place",
        "dropout goes on each sublayer's output, before the residual sum: "
        "x + Dropout(Sublayer(...)), not on the sublayer's input or on the sum.",
        tuple(_layer_with(dropout=d) for d in ("input", "sum", "end")),
    ),
    Mistake(
        "dropout_on_residual", "Dropout applied to the residual too",
        "dropout goes on each sublayer's output only, x + Dropout(Sublayer(...)): the residual "
        "path carries x unchanged from layer to layer.",
        (_layer_with(dropout="residual"), _layer_with(dropout="residual_after")),
    ),
    Mistake(
        "dropout_in_eval", "Dropout applied in eval mode",
        "F.dropout(x, p) drops in every mode (its `training` is True by default): use the "
        "sublayers (or their module .dropout), which drop only in training mode (model.train()), "
        "not in eval mode.",
        (_layer_with(dropout="eval"),),
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


def _config(names, args):
    return ", ".join(f"{n}={a!r}" for n, a in zip(names, args, strict=True))


def _layer_case(seed, args, x, mask, training=False):
    names = ("d_model", "n_heads", "d_ff", "dropout", "norm_first", "activation")
    mode = "training (dropout on)" if training else "eval"
    label = f"EncoderLayer({_config(names, args)}) in {mode} mode, {describe(x=x, mask=mask)}"
    return Case((x, mask), names=("x", "mask"), label=label, init=args, train=training, seed=seed)


def _padded_free(layer, x, mask=None):
    """The reference's output with the padded positions' rows left free (NaN: anything)."""
    out = _layer(layer, x, mask)
    return out if mask is None else out.masked_fill(~mask[:, 0, 0, :, None], float("nan"))


def _wild(actual, predicted):
    """close(), where NaN in `predicted` stands for any value."""
    if not isinstance(actual, torch.Tensor) or actual.shape != predicted.shape:
        return False
    free = torch.isnan(predicted)
    return actual.dtype == predicted.dtype and torch.allclose(
        actual[~free], predicted[~free], rtol=1e-3, atol=1e-5)


PADDED_POSITIONS = Mistake(
    "padded_positions", "Wrong outputs at padded positions",
    "real positions are right. Compute every position the same way and pass the mask to "
    "self-attention unchanged; the padded positions' outputs are ignored later, not zeroed here.",
    (_padded_free,),
)


LAYER = Item(
    EXERCISE, "EncoderLayer", reference.EncoderLayer,
    [
        _layer_case(0, (16, 4, 24, 0.1, False, "relu"), *_inputs(0, 2, 5, 16)),
        _layer_case(1, (16, 4, 24, 0.1, False, "relu"), *_inputs(1, 3, 6, 16, [6, 4, 1])),
        _layer_case(2, (16, 2, 24, 0.1, True, "gelu"), *_inputs(2, 3, 6, 16, [6, 3, 2])),
        _layer_case(3, (12, 3, 20, 0.2, False, "gelu"), *_inputs(3, 2, 5, 12, [5, 3]), True),
        _layer_case(4, (12, 3, 20, 0.2, True, "relu"), *_inputs(4, 2, 5, 12, [5, 3]), True),
    ],
    laddered(LAYER_MISTAKES + (PADDED_POSITIONS,), _LAYER_LADDER), match=_wild,
    formula="Compare each step with LayerNorm(x + Dropout(Sublayer(x))) (post-norm) or "
            "x + Dropout(Sublayer(LayerNorm(x))) (pre-norm).",
    twins=(_layer_with(),),
    section=("05_encoder", "3. One encoder layer"),
)


# ---------------------------------------------------------------------------------------
# Encoder


def _stack(encoder, x, mask, *, masks="all", chained=True, layers=None, final="end",
           residual=False):
    """The reference stack's computation, with the variations that mistakes make."""
    layers = list(encoder.layers) if layers is None else layers(encoder)
    h = encoder.norm(x) if final == "start" else x
    for i, layer in enumerate(layers):
        use = mask if masks == "all" or (masks == "first" and i == 0) else None
        h = layer(h if chained else x, use) + (h if residual else 0)
        if final == "each":
            h = encoder.norm(h)
    if final == "twice":
        return encoder.norm(encoder.norm(h))
    return encoder.norm(h) if final == "end" else h


def _stack_with(**bug):
    return lambda encoder, x, mask=None: _stack(encoder, x, mask, **bug)


def _reads_norm_first(encoder, x, mask=None):
    """The final norm applied `if self.norm_first`: Encoder has no such attribute."""
    return _stack(encoder, x, mask, final="end" if encoder.norm_first else None)


ENCODER_MISTAKES = (
    Mistake(
        "mask_not_passed", "Padding mask not passed to every layer",
        "every layer's self-attention must ignore the padding: call each layer with `mask`.",
        (_stack_with(masks=None), _stack_with(masks="first")),
    ),
    Mistake(
        "not_chained", "Layers not chained",
        "each layer takes the previous layer's output: x = layer(x, mask), not layer(input, mask).",
        (_stack_with(chained=False),),
    ),
    Mistake(
        "one_layer", "One layer applied N times",
        "the N layers have their own weights: loop over self.layers, not self.layers[0].",
        (_stack_with(layers=lambda e: [e.layers[0]] * len(e.layers)),
         _stack_with(layers=lambda e: [e.layers[-1]] * len(e.layers))),
    ),
    Mistake(
        "layer_skipped", "Not every layer applied",
        "apply all N layers, in order: for layer in self.layers (no range(n - 1), no slice), "
        "and return after the loop, not from inside it (a `return` in the loop's body ends "
        "it after the first layer).",
        (_stack_with(layers=lambda e: list(e.layers)[:-1]),
         _stack_with(layers=lambda e: list(e.layers)[1:]),
         _stack_with(layers=lambda e: list(e.layers)[:1]),
         _stack_with(layers=lambda e: list(e.layers)[:1], final=None)),
    ),
    Mistake(
        "layers_reversed", "Layers applied in reverse order",
        "the input goes through self.layers[0] first, then [1], and so on.",
        (_stack_with(layers=lambda e: list(e.layers)[::-1]),),
    ),
    Mistake(
        "extra_residual", "Extra residual around each layer",
        "each layer already adds its residuals inside (x + Sublayer(...)): the stack only "
        "chains them, x = layer(x, mask), not x = x + layer(x, mask).",
        (_stack_with(residual=True),),
    ),
    Mistake(
        "final_norm_twice", "Final LayerNorm applied twice",
        "apply self.norm once, after the last layer.",
        (_stack_with(final="twice"),),
    ),
    Mistake(
        "no_final_norm", "Final LayerNorm missing",
        "with pre-norm (norm_first=True) the last layer's output is never normalized: apply "
        "self.norm once, after the last layer (it is an identity for post-norm).",
        (_stack_with(final=None),),
    ),
    Mistake(
        "final_norm_each", "Final LayerNorm applied after every layer",
        "self.norm belongs after the last layer only, once.",
        (_stack_with(final="each"),),
    ),
    Mistake(
        "norm_first_read", "self.norm_first read in Encoder",
        "Encoder keeps no norm_first: self.norm is a LayerNorm for pre-norm and an identity "
        "for post-norm, so apply it after the loop whatever the kind.",
        (_reads_norm_first,),
    ),
    Mistake(
        "final_norm_first", "Final LayerNorm applied before the layers",
        "self.norm normalizes the last layer's output: apply it once, after the loop.",
        (_stack_with(final="start"),),
    ),
)


def _encoder_case(seed, args, x, mask):
    names = ("d_model", "n_heads", "d_ff", "n_layers", "dropout", "norm_first", "activation")
    label = f"Encoder({_config(names, args)}) in eval mode, {describe(x=x, mask=mask)}"
    return Case((x, mask), names=("x", "mask"), label=label, init=args, seed=seed)


ENCODER = Item(
    EXERCISE, "Encoder", reference.Encoder,
    [
        _encoder_case(0, (16, 4, 24, 3, 0.1, False, "relu"), *_inputs(5, 2, 5, 16)),
        _encoder_case(1, (16, 4, 24, 3, 0.1, False, "relu"), *_inputs(6, 3, 6, 16, [6, 4, 2])),
        _encoder_case(2, (12, 3, 20, 2, 0.1, True, "gelu"), *_inputs(7, 3, 5, 12, [5, 3, 1])),
    ],
    laddered(ENCODER_MISTAKES, _ENCODER_LADDER),
    formula="Each layer takes the previous one's output and the mask; self.norm comes once, "
            "at the end.",
    twins=(_stack_with(),),
    section=("05_encoder", "4. The stack, layer by layer"),
)

ITEMS = (EMBEDDINGS, LAYER, ENCODER)
