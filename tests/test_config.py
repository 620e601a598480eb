"""One frozen block config shared by the four model kinds, passed whole."""

import dataclasses

import pytest
import torch

from tfcourse.config import BlockConfig
from tfcourse.encoder import Encoder
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.modern import LlamaConfig, LlamaLM
from tfcourse.variants import DecoderLM, DecoderLMConfig, EncoderClassifier, EncoderClassifierConfig

CONFIGS = [
    lambda **o: TransformerConfig.tiny(13, **o),
    lambda **o: EncoderClassifierConfig.tiny(13, 3, **o),
    lambda **o: DecoderLMConfig.tiny(13, **o),
    lambda **o: LlamaConfig.tiny(13, **o),
]


@pytest.mark.parametrize("make", CONFIGS)
def test_every_kind_shares_the_block_and_its_checks(make):
    config = make()
    assert isinstance(config, BlockConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 32
    for overrides, message in [
        (dict(n_layers=0), "n_layers must be an integer >= 1, got 0"),
        (dict(n_layers=-1), "n_layers must be an integer >= 1, got -1"),
        (dict(dropout=1.0), r"dropout must be a number in \[0, 1\), got 1.0"),
        (dict(n_heads=5), "d_model=64 is not divisible by n_heads=5"),
        (dict(activation="tanh"), "activation must be one of 'relu', 'gelu', 'silu', got 'tanh'"),
        (dict(attn_impl="flash"), "attn_impl must be one of 'explicit', 'sdpa', got 'flash'"),
        (dict(pad_id=13), r"pad_id=13 is not an id of the vocabulary \(size 13\)"),
        (dict(pad_id=-1), "pad_id must be an integer >= 0, got -1"),
    ]:
        with pytest.raises(ValueError, match=message):
            make(**overrides)


@pytest.mark.parametrize("cls, make", [(Transformer, CONFIGS[0]), (EncoderClassifier, CONFIGS[1]),
                                       (DecoderLM, CONFIGS[2]), (LlamaLM, CONFIGS[3])])
def test_every_setting_reaches_every_layer(cls, make):
    """attn_impl, activation and norm_first reach each attention and feed-forward module
    (the classifier used to drop attn_impl)."""
    model = cls(make(attn_impl="sdpa", activation="relu", norm_first=True, n_layers=3))
    attentions = [m for m in model.modules() if hasattr(m, "attn_impl")]
    assert attentions and {m.attn_impl for m in attentions} == {"sdpa"}
    sublayers = [m for m in model.modules() if hasattr(m, "norm_first")]
    assert sublayers and all(m.norm_first for m in sublayers)
    assert len(getattr(model, "encoder", model).layers) == 3


def test_classifier_with_fused_attention_computes_the_same():
    torch.manual_seed(0)
    explicit = EncoderClassifier(EncoderClassifierConfig.tiny(13, 3, dropout=0.0)).eval()
    fused = EncoderClassifier(dataclasses.replace(explicit.config, attn_impl="sdpa")).eval()
    fused.load_state_dict(explicit.state_dict())
    tokens = torch.randint(4, 13, (2, 9))
    tokens[1, 6:] = 0  # padding
    torch.testing.assert_close(fused(tokens), explicit(tokens))


def test_a_stack_is_built_from_the_config_by_name():
    config = TransformerConfig.tiny(13, n_layers=3, d_ff=96)
    encoder = Encoder.from_config(config)
    assert len(encoder.layers) == 3 and encoder.layers[0].feed_forward.linear1.out_features == 96


def test_the_three_kinds_share_one_initialization():
    """Every linear map Xavier-uniform (W^Q, W^K, W^V with gain 1/sqrt(2)), embeddings
    N(0, 1/d_model): the same standard deviations in every kind."""
    torch.manual_seed(0)
    models = [Transformer(TransformerConfig.tiny(1000, d_model=256, n_heads=4)),
              EncoderClassifier(EncoderClassifierConfig.tiny(1000, 3, d_model=256)),
              DecoderLM(DecoderLMConfig.tiny(1000, d_model=256))]
    for model in models:
        for name, p in model.named_parameters():
            if name.endswith(("w_q.weight", "w_k.weight", "w_v.weight")):
                bound = 0.5**0.5 * (6 / (2 * 256)) ** 0.5
                assert p.abs().max() <= bound and p.abs().max() > 0.95 * bound, name
            elif name.endswith("embedding.weight") and "positional" not in name:
                assert abs(p.std().item() - 256**-0.5) < 0.1 * 256**-0.5, name


def test_lm_mask_errors_name_the_argument():
    model = DecoderLM(DecoderLMConfig.tiny(13, max_len=16))
    tokens = torch.randint(4, 13, (2, 5))
    with pytest.raises(TypeError, match="mask must be a bool tensor .*got torch.float32"):
        model(tokens, torch.ones(5, 5))
    with pytest.raises(ValueError, match=r"mask must be broadcastable to \(batch, heads, seq, total\) "
                                         r"= \(2, heads, 5, 5\), got \(3, 3\)"):
        model(tokens, torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"= \(2, heads, 5, 5\), got \(3, 1, 5, 5\)"):
        model(tokens, torch.ones(3, 1, 5, 5, dtype=torch.bool))
    keep = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    assert model(tokens, keep).shape == (2, 5, 13)  # a padding mask broadcasts
