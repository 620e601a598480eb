"""Exercise 09: what turns the Transformer's halves into BERT and GPT. The language model's
shifted targets and loss (GPT), the masked-language-model corruption (BERT), the mean
over the positions that are not padding (a classifier's pooling), and the decoder-only
model itself (GPT's forward pass, from the parts of chapters 03-06).

Fill in the three functions and DecoderLM.forward below, then check them from the
repository's root:

    pytest exercises/test_ex09_variants.py

or from a notebook:

    from tfcourse.checking import check
    check("ex09_variants")

mask_tokens is random: the checks do not ask for the reference's exact draws, only for what
the rule says (which tokens may be chosen, how many, what becomes of them), measured on a
large batch.
"""

import math  # noqa: F401  (you will likely need these)

import torch  # noqa: F401
import torch.nn.functional as F  # noqa: F401
from torch import nn

from tfcourse import encoder, normalization, positional, variants
from tfcourse.data import PAD


def lm_loss(logits, tokens, pad_id=PAD):
    """The language model's loss: at every position t, the model has read tokens[:, :t+1]
    (the causal mask hides the rest) and must predict the NEXT token, tokens[:, t+1].

        loss = mean over the predictions whose target is not padding of  -log p(target)

    Args:
        logits: (batch, seq, V) floats, the model's output for `tokens`: logits[:, t] is
            computed from tokens[:, 0], ..., tokens[:, t] only
        tokens: (batch, seq) ids, right-padded with pad_id
        pad_id: the id of padding; a target that is padding does not count

    Returns:
        a 0-d float tensor, in logits' dtype or in float32 (computing the loss in float32
        from bfloat16 or float16 logits is good practice); keep it in torch: training
        backpropagates through it.

    Hints:
        1. Which logits have a next token to predict, and which tokens are ever predicted?
           Write the pairs (logits position, target position) for seq = 4.
        2. F.cross_entropy wants (N, V) logits and (N,) targets, and has ignore_index; or
           use F.log_softmax and gather.
        3. What do you divide by?
    """
    raise NotImplementedError


def mask_tokens(tokens, mask_id, special_ids, vocab_size, rate=0.15, generator=None, pad_id=PAD):
    """BERT's masked-LM corruption (Devlin et al. 2019, section 3.1 and appendix A.1).

    In each sequence (row), choose round(rate * n) of its n ordinary tokens, at least one
    when n > 0, at random positions. round is torch.round (or Python's round): a half
    rounds to the even neighbour, so 0.15 * 30 = 4.5 gives 4 and 0.15 * 70 = 10.5 gives 10
    (not int(x + 0.5), which rounds every half up). Ordinary means: not in special_ids,
    not mask_id, not pad_id ([CLS], [MASK] and padding are never chosen). Of the chosen tokens
        80% become mask_id,
        10% become a random ordinary token (drawn uniformly from the ordinary ids),
        10% stay as they are,
    each chosen token independently. The model cannot tell which tokens were changed, so
    it has to model every position.

    Args:
        tokens: (batch, seq) ids in [0, vocab_size)
        mask_id, pad_id: the ids of [MASK] and of padding
        special_ids: other ids never to choose (e.g. [CLS], BOS, EOS, UNK)
        vocab_size: the number of ids
        rate: the share of each row's ordinary tokens to choose
        generator: a torch.Generator for every random draw (torch.rand(..., generator=g),
            torch.randint(..., generator=g)), so that a seeded generator repeats the result

    Returns:
        (inputs, targets), both (batch, seq) long:
        inputs   what the model reads: tokens, with the chosen ones changed as above
        targets  the original token at the chosen positions, pad_id everywhere else (the
                 loss ignores pad_id, so only the chosen positions are predicted)

    Hints:
        1. A bool tensor `ordinary` of size vocab_size, indexed by tokens, says which
           positions may be chosen; n = ordinary[tokens].sum(1).
        2. One way to choose k random positions per row: random scores, +inf (or 2.0)
           where not ordinary, then the rank of each score in its row (argsort twice)
           is < k.
        3. One uniform draw per position decides mask / random / keep.
        4. Do not change `tokens` in place.
    """
    raise NotImplementedError


def mean_pool(h, keep):
    """One vector per text: the mean of h over the positions where keep is True.

        pooled[b] = sum_t keep[b, t] h[b, t] / sum_t keep[b, t]

    Args:
        h:    (batch, seq, d_model), the encoder's output
        keep: (batch, seq) bool, True at the text's tokens, False at padding

    Returns:
        (batch, d_model), in h's dtype. A row with no True (an empty text) gives zeros,
        not NaN.

    Hints:
        1. keep needs a feature axis to multiply h: (batch, seq, 1).
        2. Padding must neither add to the sum nor count in the divisor.
    """
    raise NotImplementedError


class DecoderLM(nn.Module):
    """A decoder-only (GPT-style) language model: logits for the next token at every position,
    each computed from the tokens up to it only.

        x = PE(Embed(tokens))                       chapter 05's Embeddings (scaled by
                                                    sqrt(d_model)) and chapter 03's positions
        x = layer(x, causal mask)  for each layer   chapter 06's decoder layer without its
                                                    cross-attention: self-attention + FFN
        logits = Norm(x) E^T                        the final LayerNorm (pre-norm only), and
                                                    the output layer, self.generator: tied to
                                                    the embeddings when config.tie_output (the
                                                    default), its own weight when not

    __init__ is given complete, as tfcourse.variants.DecoderLM builds it: keep it as it is
    (the checks copy the reference's weights into your model by name).

    This forward takes the tokens only, no mask and no key/value cache, so it cannot run
    under tfcourse.decoding.lm_generate as it is: lm_generate calls model(tokens,
    cache=...). To let yours write once it passes, give forward an argument cache=None
    that it ignores, load the shipped model's weights into it (the names are the same:
    model.load_state_dict(shipped.state_dict()), with shipped from
    tfcourse.checkpoint.load_checkpoint of tfcourse/checkpoints/lm.pt, as notebook 09 loads
    it) and call lm_generate(model, prompt, n, use_cache=False): each step then reads the
    whole text again, and the tokens are the shipped model's own.
    """

    def __init__(self, config):
        super().__init__()
        c = self.config = config  # a tfcourse.variants.DecoderLMConfig
        self.embed = encoder.Embeddings(c.vocab_size, c.d_model)  # lookup * sqrt(d_model)
        encoding = {"learned": positional.LearnedPositionalEncoding,
                    "sinusoidal": positional.PositionalEncoding}[c.positional]
        self.positional = encoding(c.d_model, c.max_len, c.dropout)  # x + PE, then dropout
        self.layers = nn.ModuleList(
            variants.DecoderOnlyLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, c.norm_first,
                                      c.activation)
            for _ in range(c.n_layers)
        )
        self.norm = normalization.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.generator = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_output:  # one matrix to read tokens and to write them
            self.generator.weight = self.embed.embedding.weight

    def forward(self, tokens):
        """tokens (batch, seq) ids, right-padded -> logits (batch, seq, vocab_size), where
        logits[:, t] is computed from tokens[:, :t + 1] only.

        Hints:
            1. self.embed and self.positional do the input side; read what each one returns.
            2. layer(x, mask) is one decoder-only layer (tfcourse.variants.DecoderOnlyLayer):
               masked self-attention and the feed-forward network, each in its sublayer.
               There is no encoder here: what does that leave of chapter 06's decoder layer?
            3. The mask: bool, True = may attend, (seq, seq). Which keys may query t read?
               Right padding needs no mask of its own: no earlier position ever reads it.
            4. self.norm once at the end, then the output layer: self.generator (whose weight
               IS self.embed.embedding.weight when config.tie_output). Return logits, not
               probabilities.
        """
        raise NotImplementedError
