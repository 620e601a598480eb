import math
from dataclasses import asdict

import pytest
import torch
from torch import nn

from tfcourse.masks import causal_mask, padding_mask
from tfcourse.parity import load_torch_weights, run_torch
from tfcourse.variants import (
    DecoderLM,
    DecoderLMConfig,
    DecoderOnlyLayer,
    EncoderClassifier,
    EncoderClassifierConfig,
    mask_tokens,
    mean_pool,
)

PAD, CLS, MASK = 0, 4, 5
VOCAB, CLASSES = 23, 3
SPECIALS = (0, 1, 2, 3, CLS, MASK)
VARIANTS = [(False, "relu"), (True, "gelu")]


def classifier(**overrides):
    torch.manual_seed(0)
    overrides = {"d_model": 16, "n_heads": 4, "d_ff": 32, **overrides}
    return EncoderClassifier(EncoderClassifierConfig.tiny(VOCAB, CLASSES, **overrides)).eval()


def lm(**overrides):
    torch.manual_seed(0)
    overrides = {"d_model": 16, "n_heads": 4, "d_ff": 32, **overrides}
    return DecoderLM(DecoderLMConfig.tiny(VOCAB, **overrides)).eval()


def texts(lengths, seq=None):
    """[CLS] + random ordinary ids, right-padded: (batch, seq)."""
    torch.manual_seed(1)
    seq = seq or max(lengths)
    t = torch.randint(MASK + 1, VOCAB, (len(lengths), seq))
    t[:, 0] = CLS
    return t.masked_fill(torch.arange(seq) >= torch.tensor(lengths)[:, None], PAD)


def n_params(model):
    return sum(p.numel() for p in model.parameters())  # a tied tensor comes once


# ------------------------------------------------------------------ parity with torch.nn


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # torch's, for pre-norm
@pytest.mark.parametrize(("norm_first", "activation"), VARIANTS)
@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_classifier_body_equals_torch_encoder(norm_first, activation, positional):
    model = classifier(norm_first=norm_first, activation=activation, positional=positional,
                       n_layers=3)
    c = model.config
    layer = nn.TransformerEncoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, activation,
                                       batch_first=True, norm_first=norm_first)
    theirs = nn.TransformerEncoder(layer, 3, nn.LayerNorm(c.d_model) if norm_first else None).eval()
    load_torch_weights(model.encoder, theirs)
    tokens = texts([7, 5, 2])
    with torch.no_grad():
        x = model.positional(model.embed(tokens))
        want = run_torch(theirs, x, src_key_padding_mask=tokens == PAD)
        got = model.encode(tokens, padding_mask(tokens, PAD))
    real = tokens != PAD  # torch leaves padded positions as they come; they are never used
    torch.testing.assert_close(got[real], want[real])


@pytest.mark.parametrize(("norm_first", "activation"), VARIANTS)
def test_decoder_only_layer_is_torch_encoder_layer_with_a_causal_mask(norm_first, activation):
    torch.manual_seed(0)
    kw = dict(dropout=0.1, activation=activation, norm_first=norm_first)
    theirs = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, **kw).eval()
    ours = DecoderOnlyLayer(16, 4, 32, **kw).eval()
    load_torch_weights(ours, theirs)
    x = torch.randn(3, 6, 16)
    with torch.no_grad():
        want = run_torch(theirs, x, src_mask=~causal_mask(6), is_causal=True)
        torch.testing.assert_close(ours(x, causal_mask(6)), want)
        assert not torch.allclose(ours(x), want, atol=1e-3)  # without the mask: not the same


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize(("norm_first", "activation"), VARIANTS)
def test_lm_stack_equals_torch_encoder_with_a_causal_mask(norm_first, activation):
    model = lm(norm_first=norm_first, activation=activation, n_layers=3, tie_output=False)
    c = model.config
    layer = nn.TransformerEncoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, activation,
                                       batch_first=True, norm_first=norm_first)
    theirs = nn.TransformerEncoder(layer, 3, nn.LayerNorm(c.d_model) if norm_first else None).eval()
    stack = nn.Module()  # our stack's parameters under torch.nn.TransformerEncoder's names
    stack.layers, stack.norm = model.layers, model.norm
    load_torch_weights(stack, theirs)
    tokens = torch.randint(1, VOCAB, (2, 9))
    with torch.no_grad():
        x = model.positional(model.embed(tokens))
        h = run_torch(theirs, x, mask=~causal_mask(9), is_causal=True)
        torch.testing.assert_close(model(tokens), model.generator(h))


# ------------------------------------------------------------------- the encoder classifier


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_padding_never_changes_the_pooled_vector(pooling):
    model = classifier(pooling=pooling)
    tokens = texts([7, 4, 1])
    logits = model(tokens)
    assert logits.shape == (3, CLASSES)
    more_padding = torch.cat((tokens, torch.full((3, 5), PAD)), dim=1)
    torch.testing.assert_close(model(more_padding), logits)
    for b, length in enumerate((7, 4, 1)):  # each text alone, without any padding
        torch.testing.assert_close(model(tokens[b:b + 1, :length])[0], logits[b])
    # whatever the padded positions hold, when the mask says they are padding
    mask = padding_mask(tokens, PAD)
    garbage = tokens.masked_fill(tokens == PAD, 7)
    torch.testing.assert_close(model(garbage, mask), logits)
    assert not torch.allclose(model(garbage), logits)  # the mask made from tokens: real text


def test_pooling_reads_cls_or_averages_the_text():
    tokens = texts([6, 3])
    mask = padding_mask(tokens, PAD)
    cls = classifier(pooling="cls")
    h = cls.encode(tokens)
    torch.testing.assert_close(cls.pool(h, mask), h[:, 0])
    mean = classifier(pooling="mean")
    h = mean.encode(tokens)
    torch.testing.assert_close(mean.pool(h, mask)[1], h[1, :3].mean(0))
    torch.testing.assert_close(mean(tokens), mean.classifier(mean.pool(h, mask)))


def test_mean_pool_ignores_masked_positions_and_empty_rows():
    h = torch.arange(24.0).view(2, 3, 4)
    keep = torch.tensor([[True, True, False], [False, False, False]])
    pooled = mean_pool(h, keep)
    torch.testing.assert_close(pooled[0], h[0, :2].mean(0))
    torch.testing.assert_close(pooled[1], torch.zeros(4))  # nothing to average: zeros, no NaN


def test_mlm_head_is_tied_to_the_input_embeddings():
    model = classifier()
    assert model.mlm_head.weight is model.embed.embedding.weight
    tokens = texts([5, 3])
    logits = model(tokens, mlm=True)
    assert logits.shape == (2, 5, VOCAB)
    h = model.encode(tokens)
    torch.testing.assert_close(logits, h @ model.embed.embedding.weight.T + model.mlm_head.bias)


def test_classifier_every_parameter_learns_from_its_two_objectives():
    model = classifier().train()
    tokens = texts([6, 4])
    inputs, targets = mask_tokens(tokens, MASK, SPECIALS, VOCAB,
                                  generator=torch.Generator().manual_seed(0))
    loss = nn.functional.cross_entropy(model(tokens), torch.tensor([0, 2]))
    mlm = model(inputs, mlm=True)
    loss = loss + nn.functional.cross_entropy(mlm.flatten(0, 1), targets.flatten(), ignore_index=PAD)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_classifier_errors():
    model = classifier()
    tokens = texts([4, 2])
    with pytest.raises(ValueError, match=r"tokens must be ids of shape \(batch, seq\).*got \(4,\)"):
        model(tokens[0])
    with pytest.raises(ValueError, match=r"mask must be a bool tensor of shape \(batch, 1, 1, seq\) "
                                         r"= \(2, 1, 1, 4\).*got torch.bool \(2, 4\)"):
        model(tokens, tokens != PAD)
    with pytest.raises(ValueError, match=r"got torch.int64 \(2, 1, 1, 4\)"):
        model(tokens, (tokens != PAD).long()[:, None, None])
    with pytest.raises(ValueError, match=r"ids in \[0, vocab_size=23\), got values from 0 to 23"):
        model(tokens.masked_fill(tokens == CLS, VOCAB))
    with pytest.raises(ValueError, match=r"start=0 \+ seq=130 = 130 positions do not fit in max_len=128"):
        model(torch.full((1, 130), 7))
    with pytest.raises(ValueError, match="pooling must be one of 'cls', 'mean', got 'max'"):
        EncoderClassifierConfig.tiny(VOCAB, 2, pooling="max")
    with pytest.raises(ValueError, match="n_classes must be an integer >= 2, got 1"):
        EncoderClassifierConfig.tiny(VOCAB, 1)
    with pytest.raises(ValueError, match="positional must be one of 'learned', 'sinusoidal', got 'rotary'"):
        EncoderClassifierConfig.tiny(VOCAB, 2, positional="rotary")


# ----------------------------------------------------------------------------- masked LM


def corrupt(tokens, seed=0, **kw):
    return mask_tokens(tokens, MASK, SPECIALS, VOCAB, generator=torch.Generator().manual_seed(seed),
                       **kw)


def test_mask_tokens_chooses_15_percent_of_the_ordinary_tokens_of_each_text():
    tokens = texts([40, 21, 7, 2, 1])  # 39, 20, 6, 1 and 0 ordinary tokens after [CLS]
    before = tokens.clone()
    inputs, targets = corrupt(tokens)
    assert torch.equal(tokens, before)  # not modified in place
    chosen = targets != PAD
    assert chosen.sum(1).tolist() == [6, 3, 1, 1, 0]  # round(0.15 n), at least one where n > 0
    assert torch.equal(targets[chosen], tokens[chosen])  # the original tokens, to predict
    ordinary = tokens >= MASK + 1
    assert not (chosen & ~ordinary).any()  # never [CLS], padding or another special
    assert torch.equal(inputs[~chosen], tokens[~chosen])  # the rest is left as it was
    assert torch.equal(corrupt(tokens)[0], inputs)  # a seeded generator repeats it
    assert not torch.equal(corrupt(tokens, seed=1)[1], targets)


def test_mask_tokens_80_percent_mask_10_random_10_kept():
    torch.manual_seed(0)
    tokens = torch.randint(MASK + 1, VOCAB, (2000, 100))
    inputs, targets = corrupt(tokens)
    chosen = targets != PAD
    n = chosen.sum().item()
    assert n == 2000 * 15
    masked = (inputs == MASK) & chosen
    kept = (inputs == tokens) & chosen
    replaced = chosen & ~masked & ~kept
    # A random replacement equals the original 1 time in 17 (17 ordinary ids): counted as kept.
    for got, want in ((masked, 0.8), (replaced, 0.1 * 16 / 17), (kept, 0.1 + 0.1 / 17)):
        assert abs(got.sum().item() / n - want) < 0.01, (got.sum().item() / n, want)
    assert (inputs[replaced] > MASK).all()  # random replacements are ordinary tokens
    assert len(inputs[replaced].unique()) == VOCAB - len(SPECIALS)  # ... all of them
    assert ((inputs == MASK) == masked).all()  # [MASK] only where chosen


def test_mask_tokens_errors():
    tokens = texts([4])
    with pytest.raises(ValueError, match=r"rate must be in \(0, 1\], got 0"):
        corrupt(tokens, rate=0)
    with pytest.raises(ValueError, match=r"special ids .* must be in \[0, vocab_size=23\), "
                                         r"got \[0, 1, 2, 3, 4, 5, 30\]"):
        mask_tokens(tokens, MASK, (*SPECIALS, 30), VOCAB)
    with pytest.raises(ValueError, match=r"ids in \[0, vocab_size=10\)"):
        mask_tokens(tokens, MASK, SPECIALS, 10)
    with pytest.raises(ValueError, match=r"tokens must be ids of shape \(batch, seq\)"):
        mask_tokens(tokens[0], MASK, SPECIALS, VOCAB)


# ---------------------------------------------------------------------- the decoder-only LM


@pytest.mark.parametrize("norm_first", [False, True])
def test_future_tokens_never_change_earlier_logits(norm_first):
    model = lm(norm_first=norm_first)
    tokens = torch.randint(1, VOCAB, (2, 8))
    changed = tokens.clone()
    changed[:, 5:] = torch.randint(1, VOCAB, (2, 3))
    out, out_changed = model(tokens), model(changed)
    assert out.shape == (2, 8, VOCAB)
    torch.testing.assert_close(out_changed[:, :5], out[:, :5])
    assert not torch.allclose(out_changed[:, 5:], out[:, 5:])
    # right padding needs no mask: no earlier position looks at it
    padded = tokens.masked_fill(torch.arange(8) >= 5, PAD)
    torch.testing.assert_close(model(padded)[:, :5], out[:, :5])


def test_a_mask_can_only_hide_more():
    model = lm()
    tokens = torch.randint(1, VOCAB, (2, 6))
    everything = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    torch.testing.assert_close(model(tokens, everything), model(tokens))  # still causal
    hide_first = everything.clone()
    hide_first[..., 0] = False
    hide_first[..., 0, 0] = True  # position 0 has to see something: itself
    out = model(tokens, hide_first)
    torch.testing.assert_close(out[:, 0], model(tokens)[:, 0])
    assert not torch.allclose(out[:, 1:], model(tokens)[:, 1:])


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_generation_equals_the_full_forward(positional, norm_first):
    model = lm(positional=positional, norm_first=norm_first)
    tokens = torch.randint(1, VOCAB, (3, 10))
    full = model(tokens)
    cache = model.init_cache()
    steps = [model(tokens[:, i:i + 1], cache=cache) for i in range(10)]
    assert len(cache) == 10
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    cache = model.init_cache()  # a prompt at once, then one token at a time
    chunks = [model(tokens[:, :6], cache=cache), model(tokens[:, 6:7], cache=cache),
              model(tokens[:, 7:], cache=cache)]
    torch.testing.assert_close(torch.cat(chunks, dim=1), full)
    cache.reorder(torch.tensor([2, 0]))
    torch.testing.assert_close(model(tokens[[2, 0], :1], cache=cache)[:, 0],
                               model(torch.cat((tokens[[2, 0]], tokens[[2, 0], :1]), 1))[:, -1])


@pytest.mark.parametrize("norm_first", [False, True])
def test_fused_attention_computes_what_the_explicit_one_does(norm_first):
    explicit = lm(norm_first=norm_first, dropout=0.0)
    fused = lm(norm_first=norm_first, dropout=0.0, attn_impl="sdpa")
    assert {m.attn_impl for m in fused.modules() if hasattr(m, "attn_impl")} == {"sdpa"}
    fused.load_state_dict(explicit.state_dict())  # the same parameters
    tokens = torch.randint(1, VOCAB, (3, 9), generator=torch.Generator().manual_seed(0))
    hide_first = torch.ones(3, 1, 9, 9, dtype=torch.bool)
    hide_first[..., 1:, 0] = False  # a mask on top of the causal one
    for mask in (None, hide_first):
        outs = [model.train()(tokens, mask) for model in (explicit, fused)]
        torch.testing.assert_close(outs[1], outs[0])
        for out in outs:
            out.logsumexp(-1).sum().backward()
        for (name, p), q in zip(explicit.named_parameters(), fused.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, msg=name)
            p.grad = q.grad = None
    cache = fused.eval().init_cache()  # generation with the key/value cache, token by token
    steps = [fused(tokens[:, i:i + 1], cache=cache) for i in range(9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), explicit.eval()(tokens))


def test_unknown_attention_implementation_is_an_error_naming_the_option():
    with pytest.raises(ValueError, match=r"attn_impl must be one of 'explicit', 'sdpa', "
                                         r"got 'flash'"):
        lm(attn_impl="flash")


def test_tied_and_untied_output():
    tied, untied = lm(), lm(tie_output=False)
    assert tied.generator.weight is tied.embed.embedding.weight
    assert untied.generator.weight is not untied.embed.embedding.weight
    assert tied.generator.bias is None  # as GPT-2
    assert n_params(untied) - n_params(tied) == VOCAB * 16
    tied.generator.weight.data.zero_()  # one tensor: the embedding follows
    assert (tied.embed.embedding.weight == 0).all()


def test_initial_logits_are_about_unit_size():
    """Token embeddings N(0, 1/d_model): h E^T starts at about unit size, the next-token loss
    near log(V), the loss of a uniform guess. Tied, an untrained model favours the current
    token (h still holds its embedding), which lifts the next-token loss a little."""
    model = DecoderLM(DecoderLMConfig.tiny(100, d_model=64))
    torch.manual_seed(0)
    tokens = torch.randint(1, 100, (8, 32))
    logits = model.eval()(tokens)
    assert 0.5 < logits.std() < 2.0

    def loss(logits, targets):
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()
    assert abs(loss(logits[:, :-1], tokens[:, 1:]) - math.log(100)) < 1.5
    assert loss(logits, tokens) < math.log(100) - 2.0


def test_lm_every_parameter_gets_a_gradient():
    model = lm(tie_output=False, positional="learned").train()
    logits = model(torch.randint(1, VOCAB, (2, 7)))
    logits.logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_dropout_only_in_training():
    model = lm(dropout=0.3).train()
    tokens = torch.randint(1, VOCAB, (2, 7))
    assert not torch.allclose(model(tokens), model(tokens))
    model.eval()
    torch.testing.assert_close(model(tokens), model(tokens), rtol=0, atol=0)


def test_lm_errors():
    model = lm(max_len=8)
    with pytest.raises(ValueError, match=r"tokens must be ids of shape \(batch, seq\) with seq >= 1, "
                                         r"got \(2, 0\)"):
        model(torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(TypeError, match=r"tokens must be a torch.Tensor of ids \(batch, seq\), got list"):
        model([[1, 2]])
    with pytest.raises(TypeError, match="integer tensor of ids, got torch.float32"):
        model(torch.ones(1, 3))
    cache = model.init_cache()
    model(torch.ones(2, 6, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match=r"start=6 \+ seq=3 = 9 positions do not fit in max_len=8"):
        model(torch.ones(2, 3, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match=r"the cache holds a batch of 2 rows, got tokens \(3, 1\)"):
        model(torch.ones(3, 1, dtype=torch.long), cache=cache)


def test_generation_beyond_the_positions_slides_a_window():
    """Past max_len, each next token comes from the last max_len tokens (positions
    0 ... max_len - 1, the trained ones), cache or no cache."""
    from tfcourse.decoding import greedy, lm_generate
    model = lm(max_len=8)
    prompt = torch.randint(1, VOCAB, (2, 5))
    out = lm_generate(model, prompt, 12, greedy)
    assert out.shape == (2, 17)
    torch.testing.assert_close(out, lm_generate(model, prompt, 12, greedy, use_cache=False))
    with torch.no_grad():
        for t in range(5, 17):  # token t from the (at most 8) tokens before it
            logits = model(out[:, max(0, t - 8): t])[:, -1]
            logits[:, model.config.pad_id] = float("-inf")  # padding is never picked
            assert torch.equal(logits.argmax(-1), out[:, t])


def test_generation_never_picks_padding():
    """Padding is no text (its logit never trained: padding targets are ignored), so
    generation never picks it, even when the model scores it highest; nor the ids it is
    told are no text (`never`: complete() passes the special tokens)."""
    from tfcourse.decoding import greedy, lm_generate, sampler

    class PaddingFirst(nn.Module):  # the LM with the specials' logits (ids 0-3) raised
        def __init__(self, model):
            super().__init__()
            self.model, self.config = model, model.config

        def init_cache(self):
            return self.model.init_cache()

        def forward(self, tokens, cache=None):
            logits = self.model(tokens, cache=cache)
            logits[..., self.config.pad_id] += 10.0
            return logits + 100.0 * (torch.arange(logits.size(-1)) < 4)  # padding's the highest

    model = PaddingFirst(lm(max_len=8))
    prompt = torch.randint(1, VOCAB, (2, 5))
    for choose in (greedy, sampler(1.0, None, None, torch.Generator().manual_seed(0))):
        out = lm_generate(model, prompt, 12, choose)
        assert out.shape == (2, 17) and not (out[:, 5:] == model.config.pad_id).any()
        assert (out[:, 5:] < 4).all()  # the other specials, raised, win
        out = lm_generate(model, prompt, 12, choose, never=range(1, 4))
        assert not (out[:, 5:] < 4).any()  # nor the ids in `never`


# ------------------------------------------------------------------- kinds and their sizes


@pytest.mark.parametrize("model", [classifier(), lm()], ids=["classifier", "lm"])
def test_a_model_is_rebuilt_from_its_kind_and_config(model):
    registry = {cls.kind: cls for cls in (EncoderClassifier, DecoderLM)}
    cls = registry[model.kind]
    rebuilt = cls(cls.config_class(**asdict(model.config)))
    rebuilt.load_state_dict(model.state_dict())
    assert rebuilt.config == model.config
    tokens = texts([5, 3])
    torch.testing.assert_close(rebuilt.eval()(tokens), model(tokens))


def test_parameter_counts_of_gpt2_small_and_bert_base_on_the_meta_device():
    with torch.device("meta"):  # shapes only: nothing is allocated
        gpt2 = DecoderLM(DecoderLMConfig.gpt2_small())
        bert = EncoderClassifier(EncoderClassifierConfig.bert_base())
    assert all(p.is_meta for p in (*gpt2.parameters(), *bert.parameters()))
    # GPT-2 small (Hugging Face's GPT2LMHeadModel): 124,439,808, the same parts as ours.
    assert n_params(gpt2) == 124_439_808
    # BERT-base (BertModel): 109,482,240. It has what we leave out: segment embeddings (2 x 768),
    # a LayerNorm after the embeddings (2 x 768) and a pooler (768 x 768 + 768, tanh before
    # the classifier). We have a classifier (768 x 2 + 2) and the MLM head's bias (30,522).
    layer = 4 * (768 * 768 + 768) + 768 * 3072 + 3072 + 3072 * 768 + 768 + 2 * 2 * 768
    assert n_params(bert.encoder) == 12 * layer == 85_054_464
    bert_only = 2 * 768 + 2 * 768 + 768 * 768 + 768
    ours_only = 768 * 2 + 2 + 30_522
    assert n_params(bert) == 109_482_240 - bert_only + ours_only
