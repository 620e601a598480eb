"""Wrong ways to write the encoder's forward methods, and the diagnosis each must get; then
RIGHT: a right EncoderLayer written otherwise than the reference.

Each solution subclasses the exercise's own class (its __init__ as given to learners) and
writes only `forward`, as a learner does. Most EncoderLayer solutions write the residuals out
by hand from the parts of self.sublayers (each a SublayerConnection: .norm, .dropout,
.norm_first), where mistakes are easiest to make; _ByHand names those parts.
"""

import math
import time

import torch
import torch.nn.functional as F

from tfcourse.checking.entry import exercises_dir, load_exercise

from . import wrong

given = load_exercise(exercises_dir() / "ex05_encoder.py")


# ---------------------------------------------------------------------------------------
# Embeddings


@wrong("Embeddings.not_scaled")
class not_scaled(given.Embeddings):
    def forward(self, tokens):
        return self.embedding(tokens)


@wrong("Embeddings.not_scaled")
class not_scaled_functional(given.Embeddings):
    def forward(self, tokens):
        return F.embedding(tokens, self.embedding.weight)


@wrong("Embeddings.scaled_by_d_model")
class scaled_by_d_model(given.Embeddings):
    def forward(self, tokens):
        return self.embedding(tokens) * self.embedding.embedding_dim


@wrong("Embeddings.divided")
class divided_by_sqrt_d_model(given.Embeddings):
    def forward(self, tokens):
        x = self.embedding(tokens)
        return x / math.sqrt(x.size(-1))


@wrong("Embeddings.precedence_half")
class scaled_by_d_model_to_the_one_half(given.Embeddings):
    def forward(self, tokens):
        return self.embedding(tokens) * self.embedding.embedding_dim ** 1 / 2


@wrong("Embeddings.wrong_size")
class scaled_by_sqrt_seq_len(given.Embeddings):
    def forward(self, tokens):
        return self.embedding(tokens) * math.sqrt(tokens.size(-1))


@wrong("Embeddings.wrong_size")
class scaled_by_sqrt_vocab(given.Embeddings):
    def forward(self, tokens):
        return self.embedding(tokens) * self.embedding.num_embeddings**0.5


@wrong("Embeddings.scale_rounded")
class scaled_by_int_sqrt(given.Embeddings):
    def forward(self, tokens):
        return self.embedding(tokens) * int(math.sqrt(self.embedding.embedding_dim))


@wrong("Embeddings.padding_row_zeroed")
class padding_idx_zero(given.Embeddings):
    def forward(self, tokens):
        x = F.embedding(tokens, self.embedding.weight, padding_idx=0)  # forward is the same lookup
        return x * (tokens != 0).unsqueeze(-1) * math.sqrt(x.size(-1))


@wrong("Embeddings.parameters_changed")
class table_scaled_in_place(given.Embeddings):
    def forward(self, tokens):
        with torch.no_grad():
            self.embedding.weight *= math.sqrt(self.embedding.embedding_dim)
        return self.embedding(tokens)


@wrong("Embeddings.renamed")
class renamed_table(given.Embeddings):
    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        self.table = self.embedding
        del self.embedding

    def forward(self, tokens):
        return self.table(tokens) * math.sqrt(self.table.embedding_dim)


@wrong("Embeddings.raised")
class embedding_of_float(given.Embeddings):
    def forward(self, tokens):
        return self.embedding(tokens.float()) * math.sqrt(self.embedding.embedding_dim)


# ---------------------------------------------------------------------------------------
# EncoderLayer


class _ByHand(given.EncoderLayer):
    """A learner who writes the residuals out by hand, from the sublayers' parts."""

    norm1 = property(lambda self: self.sublayers[0].norm)  # around self-attention
    norm2 = property(lambda self: self.sublayers[1].norm)  # around the feed-forward network
    dropout = property(lambda self: self.sublayers[0].dropout)  # the same p in both
    norm_first = property(lambda self: self.sublayers[0].norm_first)


class _Layer(_ByHand):
    """A right forward, written out, with the hooks that the buggy layers below change."""

    def attend(self, h, mask):
        return self.self_attn(h, h, h, mask)[0]

    def sublayer(self, x, function, norm):
        if self.norm_first:
            return x + self.dropout(function(norm(x)))
        return norm(x + self.dropout(function(x)))

    def forward(self, x, mask=None):
        x = self.sublayer(x, lambda h: self.attend(h, mask), self.norm1)
        return self.sublayer(x, self.feed_forward, self.norm2)


@wrong("EncoderLayer.mask_on_queries")
class mask_transposed(_Layer):
    def attend(self, h, mask):
        return self.self_attn(h, h, h, None if mask is None else mask.transpose(-2, -1))[0]


@wrong("EncoderLayer.mask_on_queries")
class mask_on_query_axis_by_view(_Layer):
    def attend(self, h, mask):
        if mask is not None:
            mask = mask.reshape(mask.size(0), 1, -1, 1)  # (batch, 1, seq, 1): rows, not columns
        return self.self_attn(h, h, h, mask)[0]


@wrong("EncoderLayer.mask_ignored")
class mask_ignored(_Layer):
    def attend(self, h, mask):
        return self.self_attn(h, h, h)[0]


@wrong("EncoderLayer.pre_post_mixed")
class always_post_norm(_Layer):
    def sublayer(self, x, function, norm):
        return norm(x + self.dropout(function(x)))


@wrong("EncoderLayer.pre_post_mixed")
class branches_swapped(_Layer):
    def sublayer(self, x, function, norm):
        if not self.norm_first:
            return x + self.dropout(function(norm(x)))
        return norm(x + self.dropout(function(x)))


@wrong("EncoderLayer.norm_on_branch")
class post_norm_inside_the_residual(_ByHand):
    """Post-norm written x + LayerNorm(Sublayer(x)): the norm on the sublayer's branch."""

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, mask)[0])
            return x + self.dropout(self.feed_forward(self.norm2(x)))
        x = x + self.norm1(self.dropout(self.self_attn(x, x, x, mask)[0]))
        return x + self.norm2(self.dropout(self.feed_forward(x)))


@wrong("EncoderLayer.norm_on_branch")
class sublayer_output_normalized(_Layer):  # in both modes, before the dropout
    def sublayer(self, x, function, norm):
        return x + self.dropout(norm(function(x)))


@wrong("EncoderLayer.residual_normalized")
class residual_from_normalized(_Layer):
    def sublayer(self, x, function, norm):
        if self.norm_first:
            x = norm(x)
            return x + self.dropout(function(x))
        return norm(x + self.dropout(function(x)))


@wrong("EncoderLayer.residual_normalized")
class normalized_first_in_both_modes(_ByHand):
    def forward(self, x, mask=None):
        x = self.norm1(x)
        x = x + self.dropout(self.self_attn(x, x, x, mask)[0])
        x = self.norm2(x)
        return x + self.dropout(self.feed_forward(x))


@wrong("EncoderLayer.no_residual")
class attention_without_residual(_ByHand):
    def forward(self, x, mask=None):
        steps = [(self.norm1, lambda h: self.self_attn(h, h, h, mask)[0], False),
                 (self.norm2, self.feed_forward, True)]
        for norm, step, keep in steps:
            if self.norm_first:
                x = x * keep + self.dropout(step(norm(x)))
            else:
                x = norm(x * keep + self.dropout(step(x)))
        return x


@wrong("EncoderLayer.sublayer_skipped")
class attention_sublayer_skipped(_ByHand):
    def forward(self, x, mask=None):
        h = self.norm2(x) if self.norm_first else x
        y = x + self.dropout(self.feed_forward(h))
        return y if self.norm_first else self.norm2(y)


@wrong("EncoderLayer.sublayer_skipped")
class feed_forward_sublayer_skipped(_ByHand):
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            return x + self.dropout(self.self_attn(h, h, h, mask)[0])
        return self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)[0]))


@wrong("EncoderLayer.no_residual")
class no_residual(_Layer):
    def sublayer(self, x, function, norm):
        if self.norm_first:
            return self.dropout(function(norm(x)))
        return norm(self.dropout(function(x)))


@wrong("EncoderLayer.one_norm")
class norm1_twice(_Layer):
    def forward(self, x, mask=None):
        x = self.sublayer(x, lambda h: self.attend(h, mask), self.norm1)
        return self.sublayer(x, self.feed_forward, self.norm1)


@wrong("EncoderLayer.one_norm")
class norm2_twice(_Layer):
    def forward(self, x, mask=None):
        x = self.sublayer(x, lambda h: self.attend(h, mask), self.norm2)
        return self.sublayer(x, self.feed_forward, self.norm2)


@wrong("EncoderLayer.dropout_missing")
class no_dropout(_Layer):
    def sublayer(self, x, function, norm):
        if self.norm_first:
            return x + function(norm(x))
        return norm(x + function(x))


@wrong("EncoderLayer.dropout_misplaced")
class dropout_on_the_sum(_Layer):
    def sublayer(self, x, function, norm):
        if self.norm_first:
            return self.dropout(x + function(norm(x)))
        return norm(self.dropout(x + function(x)))


@wrong("EncoderLayer.dropout_misplaced")
class dropout_after_the_norm(_Layer):
    def sublayer(self, x, function, norm):
        if self.norm_first:
            return self.dropout(x + function(norm(x)))
        return self.dropout(norm(x + function(x)))


@wrong("EncoderLayer.dropout_misplaced")
class dropout_on_the_input(_Layer):
    def sublayer(self, x, function, norm):
        if self.norm_first:
            return x + function(self.dropout(norm(x)))
        return norm(x + function(self.dropout(x)))


@wrong("EncoderLayer.in_place")
class residual_added_in_place(_Layer):
    def sublayer(self, x, function, norm):
        x += self.dropout(function(norm(x)))  # pre-norm's sum, in place, whatever norm_first
        return x


@wrong("EncoderLayer.wrong_type")
class returns_weights_too(_Layer):
    def forward(self, x, mask=None):
        out, weights = self.self_attn(x, x, x, mask, need_weights=True)
        x = self.norm1(x + self.dropout(out))
        return self.norm2(x + self.dropout(self.feed_forward(x))), weights


@wrong("EncoderLayer.tuple")
class attention_tuple_not_unpacked(_Layer):
    def attend(self, h, mask):
        return self.self_attn(h, h, h, mask)


@wrong("EncoderLayer.padded_positions")
class padded_positions_zeroed(_Layer):
    def forward(self, x, mask=None):
        out = super().forward(x, mask)
        return out if mask is None else out * mask[:, 0, 0, :, None]


@wrong("EncoderLayer.too_slow")
class endless_loop(_Layer):
    def forward(self, x, mask=None):
        while True:
            time.sleep(0.01)


# ---------------------------------------------------------------------------------------
# Encoder


@wrong("Encoder.mask_not_passed")
class mask_not_passed(given.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


@wrong("Encoder.mask_not_passed")
class mask_only_to_the_first_layer(given.Encoder):
    def forward(self, x, mask=None):
        x = self.layers[0](x, mask)
        for layer in self.layers[1:]:
            x = layer(x)
        return self.norm(x)


@wrong("Encoder.mask_read_inverted")
class mask_as_key_padding_mask(given.Encoder):  # nn.TransformerEncoder's src_key_padding_mask
    def forward(self, x, mask=None):
        padding = None if mask is None else ~mask  # True at the padding
        for layer in self.layers:
            x = layer(x, padding)
        return self.norm(x)


@wrong("Encoder.not_chained")
class layers_not_chained(given.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            out = layer(x, mask)
        return self.norm(out)


@wrong("Encoder.one_layer")
class first_layer_repeated(given.Encoder):
    def forward(self, x, mask=None):
        for _ in range(len(self.layers)):
            x = self.layers[0](x, mask)
        return self.norm(x)


@wrong("Encoder.no_final_norm")
class no_final_norm(given.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return x


@wrong("Encoder.final_norm_each")
class final_norm_in_the_loop(given.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = self.norm(layer(x, mask))
        return x


@wrong("Encoder.nothing_returned")
class forgot_return(given.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)


# ---------------------------------------------------------------------------------------
# Mistakes found by thinking like a learner


@wrong("EncoderLayer.norms_swapped")
class norms_swapped(_Layer):
    def forward(self, x, mask=None):
        x = self.sublayer(x, lambda h: self.attend(h, mask), self.norm2)
        return self.sublayer(x, self.feed_forward, self.norm1)


@wrong("EncoderLayer.norms_swapped")
class sublayers_swapped(given.EncoderLayer):  # the notebook's two lines, indices swapped
    def forward(self, x, mask=None):
        x = self.sublayers[1](x, lambda h: self.self_attn(h, h, h, mask)[0])
        return self.sublayers[0](x, self.feed_forward)


@wrong("EncoderLayer.order")
class feed_forward_first(_Layer):
    def forward(self, x, mask=None):
        x = self.sublayer(x, self.feed_forward, self.norm2)
        return self.sublayer(x, lambda h: self.attend(h, mask), self.norm1)


@wrong("EncoderLayer.kv_unnormalized")
class keys_from_raw_input(_ByHand):
    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.dropout(self.self_attn(self.norm1(x), x, x, mask)[0])
            return x + self.dropout(self.feed_forward(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)[0]))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


@wrong("EncoderLayer.dropout_in_eval")
class functional_dropout(_Layer):
    def sublayer(self, x, function, norm):
        if self.norm_first:
            return x + F.dropout(function(norm(x)), self.dropout.p)
        return norm(x + F.dropout(function(x), self.dropout.p))


@wrong("Encoder.final_norm_first")
class norm_before_the_layers(given.Encoder):
    def forward(self, x, mask=None):
        x = self.norm(x)
        for layer in self.layers:
            x = layer(x, mask)
        return x


@wrong("Encoder.layer_skipped")
class returns_from_the_while_loop(given.Encoder):
    def forward(self, x, mask=None):
        i = 0
        while i < len(self.layers):
            x = self.layers[i](x, mask)
            i += 1
            return x if isinstance(self.norm, torch.nn.Identity) else self.norm(x)
        return x


@wrong("Encoder.layer_skipped")
class returns_inside_the_loop_without_norm(given.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            out = layer(x, mask)
            return out


@wrong("Encoder.layer_skipped")
class last_layer_skipped(given.Encoder):
    def forward(self, x, mask=None):
        for i in range(len(self.layers) - 1):
            x = self.layers[i](x, mask)
        return self.norm(x)


@wrong("Encoder.layers_reversed")
class layers_reversed(given.Encoder):
    def forward(self, x, mask=None):
        for layer in reversed(self.layers):
            x = layer(x, mask)
        return self.norm(x)


@wrong("Embeddings.scale_added")
class scale_added(given.Embeddings):
    def forward(self, tokens):
        return self.embedding(tokens) + math.sqrt(self.embedding.embedding_dim)


@wrong("EncoderLayer.not_chained")
class residual_from_the_layer_input(_ByHand):
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            a = x + self.dropout(self.self_attn(h, h, h, mask)[0])
            return x + self.dropout(self.feed_forward(self.norm2(a)))
        a = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)[0]))
        return self.norm2(x + self.dropout(self.feed_forward(a)))


@wrong("EncoderLayer.mask_inverted")
class mask_inverted(_Layer):
    def attend(self, h, mask):
        return self.self_attn(h, h, h, None if mask is None else ~mask)[0]


@wrong("EncoderLayer.mask_to_feed_forward")
class mask_to_the_feed_forward(_Layer):
    def forward(self, x, mask=None):
        x = self.sublayer(x, lambda h: self.attend(h, mask), self.norm1)
        return self.sublayer(x, lambda h: self.feed_forward(h, mask), self.norm2)


@wrong("Encoder.norm_first_read")
class reads_norm_first(given.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x) if self.norm_first else x


@wrong("Encoder.extra_residual")
class residual_around_each_layer(given.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = x + layer(x, mask)
        return self.norm(x)


@wrong("Encoder.final_norm_twice")
class final_norm_twice(given.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        x = self.norm(x)
        return self.norm(x)


@wrong("EncoderLayer.ffn_reads_input")
class sublayers_in_parallel(_ByHand):
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            a = x + self.dropout(self.self_attn(h, h, h, mask)[0])
            return a + self.dropout(self.feed_forward(self.norm2(x)))
        a = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)[0]))
        return self.norm2(a + self.dropout(self.feed_forward(x)))


@wrong("EncoderLayer.parallel_block")
class gptj_parallel(_ByHand):
    def forward(self, x, mask=None):
        h = self.norm1(x) if self.norm_first else x
        y = x + self.dropout(self.self_attn(h, h, h, mask)[0]) + self.dropout(self.feed_forward(h))
        return y if self.norm_first else self.norm1(y)


@wrong("EncoderLayer.parallel_block")
class parallel_sublayers_joined(given.EncoderLayer):
    def forward(self, x, mask=None):
        a = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, mask)[0])
        return a + self.sublayers[1](x, self.feed_forward) - x  # x counted once


@wrong("EncoderLayer.argument_ignored")
class attention_of_the_outer_x(given.EncoderLayer):
    def forward(self, x, mask=None):
        x = self.sublayers[0](x, lambda _: self.self_attn(x, x, x, mask)[0])
        return self.sublayers[1](x, self.feed_forward)


@wrong("EncoderLayer.causal")
class causal_by_default(_Layer):
    def attend(self, h, mask):
        if mask is None:  # a GPT's habit
            mask = torch.ones(h.size(1), h.size(1), dtype=torch.bool).tril()
        return self.self_attn(h, h, h, mask)[0]


@wrong("EncoderLayer.pre_norm_also_post")
class pre_norm_normalizes_the_sums_too(_ByHand):
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = self.norm1(x + self.dropout(self.self_attn(h, h, h, mask)[0]))
            return self.norm2(x + self.dropout(self.feed_forward(self.norm2(x))))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)[0]))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


@wrong("EncoderLayer.dropout_on_residual")
class residual_dropped_out(_ByHand):
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = self.dropout(x) + self.dropout(self.self_attn(h, h, h, mask)[0])
            return self.dropout(x) + self.dropout(self.feed_forward(self.norm2(x)))
        x = self.norm1(self.dropout(x) + self.dropout(self.self_attn(x, x, x, mask)[0]))
        return self.norm2(self.dropout(x) + self.dropout(self.feed_forward(x)))


# ---------------------------------------------------------------------------------------
# Right, written otherwise than the reference


class by_hand(given.EncoderLayer):
    """Both sublayers written out from the parts of self.sublayers, in either placement."""

    def forward(self, x, mask=None):
        for sublayer, function in ((self.sublayers[0], lambda h: self.self_attn(h, h, h, mask)[0]),
                                   (self.sublayers[1], self.feed_forward)):
            if sublayer.norm_first:
                x = x + sublayer.dropout(function(sublayer.norm(x)))
            else:
                x = sublayer.norm(x + sublayer.dropout(function(x)))
        return x


RIGHT = {"EncoderLayer": (by_hand,)}


@wrong("EncoderLayer.connection_skipped")
class attention_outside_its_connection(given.EncoderLayer):
    def forward(self, x, mask=None):
        a = self.self_attn(x, x, x, mask)[0]  # no residual, dropout or norm around it
        return self.sublayers[1](a, self.feed_forward)


@wrong("EncoderLayer.connection_skipped")
class feed_forward_outside_its_connection(given.EncoderLayer):
    def forward(self, x, mask=None):
        x = self.sublayers[0](x, lambda h: self.self_attn(h, h, h, mask)[0])
        return self.feed_forward(x)
