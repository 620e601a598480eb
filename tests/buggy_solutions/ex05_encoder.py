"""Wrong ways to write the encoder's forward methods, and the diagnosis each must get.

Each solution subclasses the exercise's own class (its __init__ as given to learners) and
writes only `forward`, as a learner does.
"""

import math
import time

import torch
import torch.nn.functional as F

from tfcourse.checking.core import exercises_dir, load_exercise

from . import diagnosis

given = load_exercise(exercises_dir() / "ex05_encoder.py")


# ---------------------------------------------------------------------------------------
# Embeddings


@diagnosis("Embeddings not scaled")
class not_scaled(given.Embeddings):
    def forward(self, tokens):
        return self.embedding(tokens)


@diagnosis("Embeddings not scaled")
class not_scaled_functional(given.Embeddings):
    def forward(self, tokens):
        return F.embedding(tokens, self.embedding.weight)


@diagnosis("Embeddings scaled by d_model instead of sqrt(d_model)")
class scaled_by_d_model(given.Embeddings):
    def forward(self, tokens):
        return self.embedding(tokens) * self.embedding.embedding_dim


@diagnosis("Embeddings divided by sqrt(d_model) instead of multiplied")
class divided_by_sqrt_d_model(given.Embeddings):
    def forward(self, tokens):
        x = self.embedding(tokens)
        return x / math.sqrt(x.size(-1))


@diagnosis("Embeddings scaled by the square root of the wrong size")
class scaled_by_sqrt_seq_len(given.Embeddings):
    def forward(self, tokens):
        return self.embedding(tokens) * math.sqrt(tokens.size(-1))


@diagnosis("Embeddings scaled by the square root of the wrong size")
class scaled_by_sqrt_vocab(given.Embeddings):
    def forward(self, tokens):
        return self.embedding(tokens) * self.embedding.num_embeddings**0.5


@diagnosis("Embedding table changed in place")
class table_scaled_in_place(given.Embeddings):
    def forward(self, tokens):
        with torch.no_grad():
            self.embedding.weight *= math.sqrt(self.embedding.embedding_dim)
        return self.embedding(tokens)


@diagnosis("Parameters renamed")
class renamed_table(given.Embeddings):
    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        self.table = self.embedding
        del self.embedding

    def forward(self, tokens):
        return self.table(tokens) * math.sqrt(self.table.embedding_dim)


@diagnosis("Raised RuntimeError")
class embedding_of_float(given.Embeddings):
    def forward(self, tokens):
        return self.embedding(tokens.float()) * math.sqrt(self.embedding.embedding_dim)


# ---------------------------------------------------------------------------------------
# EncoderLayer


class _Layer(given.EncoderLayer):
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


@diagnosis("Padding mask applied on the query axis instead of the key axis")
class mask_transposed(_Layer):
    def attend(self, h, mask):
        return self.self_attn(h, h, h, None if mask is None else mask.transpose(-2, -1))[0]


@diagnosis("Padding mask applied on the query axis instead of the key axis")
class mask_on_query_axis_by_view(_Layer):
    def attend(self, h, mask):
        if mask is not None:
            mask = mask.reshape(mask.size(0), 1, -1, 1)  # (batch, 1, seq, 1): rows, not columns
        return self.self_attn(h, h, h, mask)[0]


@diagnosis("Padding mask ignored")
class mask_ignored(_Layer):
    def attend(self, h, mask):
        return self.self_attn(h, h, h)[0]


@diagnosis("Pre-norm and post-norm mixed up")
class always_post_norm(_Layer):
    def sublayer(self, x, function, norm):
        return norm(x + self.dropout(function(x)))


@diagnosis("Pre-norm and post-norm mixed up")
class branches_swapped(_Layer):
    def sublayer(self, x, function, norm):
        if not self.norm_first:
            return x + self.dropout(function(norm(x)))
        return norm(x + self.dropout(function(x)))


@diagnosis("Residual taken from the normalized input")
class residual_from_normalized(_Layer):
    def sublayer(self, x, function, norm):
        if self.norm_first:
            x = norm(x)
            return x + self.dropout(function(x))
        return norm(x + self.dropout(function(x)))


@diagnosis("Residual taken from the normalized input")
class normalized_first_in_both_modes(given.EncoderLayer):
    def forward(self, x, mask=None):
        x = self.norm1(x)
        x = x + self.dropout(self.self_attn(x, x, x, mask)[0])
        x = self.norm2(x)
        return x + self.dropout(self.feed_forward(x))


@diagnosis("Residual connection missing")
class no_residual(_Layer):
    def sublayer(self, x, function, norm):
        if self.norm_first:
            return self.dropout(function(norm(x)))
        return norm(self.dropout(function(x)))


@diagnosis("One LayerNorm used for both sublayers")
class norm1_twice(_Layer):
    def forward(self, x, mask=None):
        x = self.sublayer(x, lambda h: self.attend(h, mask), self.norm1)
        return self.sublayer(x, self.feed_forward, self.norm1)


@diagnosis("One LayerNorm used for both sublayers")
class norm2_twice(_Layer):
    def forward(self, x, mask=None):
        x = self.sublayer(x, lambda h: self.attend(h, mask), self.norm2)
        return self.sublayer(x, self.feed_forward, self.norm2)


@diagnosis("Sublayer dropout missing")
class no_dropout(_Layer):
    def sublayer(self, x, function, norm):
        if self.norm_first:
            return x + function(norm(x))
        return norm(x + function(x))


@diagnosis("Dropout in the wrong place")
class dropout_on_the_sum(_Layer):
    def sublayer(self, x, function, norm):
        if self.norm_first:
            return self.dropout(x + function(norm(x)))
        return norm(self.dropout(x + function(x)))


@diagnosis("Dropout in the wrong place")
class dropout_after_the_norm(_Layer):
    def sublayer(self, x, function, norm):
        if self.norm_first:
            return self.dropout(x + function(norm(x)))
        return self.dropout(norm(x + function(x)))


@diagnosis("Dropout in the wrong place")
class dropout_on_the_input(_Layer):
    def sublayer(self, x, function, norm):
        if self.norm_first:
            return x + function(self.dropout(norm(x)))
        return norm(x + function(self.dropout(x)))


@diagnosis("Input modified in place")
class residual_added_in_place(_Layer):
    def sublayer(self, x, function, norm):
        if self.norm_first:
            x += self.dropout(function(norm(x)))
            return x
        return norm(x + self.dropout(function(x)))

    def forward(self, x, mask=None):
        self.norm_first = True  # take the in-place branch for every case
        return super().forward(x, mask)


@diagnosis("Wrong output of EncoderLayer: the output should be a torch.Tensor, got tuple")
class returns_weights_too(_Layer):
    def forward(self, x, mask=None):
        out, weights = self.self_attn(x, x, x, mask, need_weights=True)
        x = self.norm1(x + self.dropout(out))
        return self.norm2(x + self.dropout(self.feed_forward(x))), weights


@diagnosis("Raised TypeError")
class attention_tuple_not_unpacked(_Layer):
    def attend(self, h, mask):
        return self.self_attn(h, h, h, mask)


@diagnosis("Wrong outputs at padded positions")
class padded_positions_zeroed(_Layer):
    def forward(self, x, mask=None):
        out = super().forward(x, mask)
        return out if mask is None else out * mask[:, 0, 0, :, None]


@diagnosis("Too slow")
class endless_loop(_Layer):
    def forward(self, x, mask=None):
        while True:
            time.sleep(0.01)


# ---------------------------------------------------------------------------------------
# Encoder


@diagnosis("Padding mask not passed to every layer")
class mask_not_passed(given.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


@diagnosis("Padding mask not passed to every layer")
class mask_only_to_the_first_layer(given.Encoder):
    def forward(self, x, mask=None):
        x = self.layers[0](x, mask)
        for layer in self.layers[1:]:
            x = layer(x)
        return self.norm(x)


@diagnosis("Layers not chained")
class layers_not_chained(given.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            out = layer(x, mask)
        return self.norm(out)


@diagnosis("One layer applied N times")
class first_layer_repeated(given.Encoder):
    def forward(self, x, mask=None):
        for _ in range(len(self.layers)):
            x = self.layers[0](x, mask)
        return self.norm(x)


@diagnosis("Final LayerNorm missing")
class no_final_norm(given.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
        return x


@diagnosis("Final LayerNorm applied after every layer")
class final_norm_in_the_loop(given.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = self.norm(layer(x, mask))
        return x


@diagnosis("Wrong output of Encoder: the output is None")
class forgot_return(given.Encoder):
    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, mask)
