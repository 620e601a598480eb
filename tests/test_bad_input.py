"""The Python API with bad input (issue 8): a clear error naming the argument, raised before
any deep torch error or silent NaN; and the public names of `import tfcourse`."""

import subprocess
import sys

import pytest
import torch

import tfcourse
from tfcourse.attention import scaled_dot_product_attention
from tfcourse.decoder import Decoder, DecoderLayer
from tfcourse.encoder import Embeddings, Encoder, EncoderLayer
from tfcourse.feed_forward import PositionWiseFeedForward
from tfcourse.multi_head import MultiHeadAttention, split_heads
from tfcourse.normalization import LayerNorm, SublayerConnection
from tfcourse.positional import LearnedPositionalEncoding, PositionalEncoding


@pytest.mark.parametrize(("build", "message"), [
    (lambda: MultiHeadAttention(64, 0), "n_heads must be an integer >= 1, got 0"),
    (lambda: MultiHeadAttention(64, -4), "n_heads must be an integer >= 1, got -4"),
    (lambda: MultiHeadAttention(64, 4.0), "n_heads must be an integer >= 1, got 4.0"),
    (lambda: MultiHeadAttention(64, True), "n_heads must be an integer >= 1, got True"),
    (lambda: MultiHeadAttention(0, 1), "d_model must be an integer >= 1, got 0"),
    (lambda: MultiHeadAttention(64, 4, dropout=float("nan")), "dropout must be a probability"),
    (lambda: split_heads(torch.zeros(1, 2, 8), 0), "n_heads must be an integer >= 1, got 0"),
    (lambda: PositionWiseFeedForward(8, 0), "d_ff must be an integer >= 1, got 0"),
    (lambda: LayerNorm(-1), "d_model must be an integer >= 1, got -1"),
    (lambda: LayerNorm(8, eps=0), "eps must be a finite number > 0, got 0"),
    (lambda: SublayerConnection(8, dropout=2.0), "dropout must be a probability in \\[0, 1\\]"),
    (lambda: PositionalEncoding(8, max_len=0), "max_len must be an integer >= 1, got 0"),
    (lambda: LearnedPositionalEncoding(8, max_len=-5), "max_len must be an integer >= 1"),
    (lambda: Embeddings(0, 8), "vocab_size must be an integer >= 1, got 0"),
    (lambda: EncoderLayer(8, 3, 16), "d_model=8 is not divisible by n_heads=3"),
    (lambda: Encoder(8, 2, 16, n_layers=-1), "n_layers must be an integer >= 1, got -1"),
    (lambda: Decoder(8, 2, 16, n_layers=0), "n_layers must be an integer >= 1, got 0"),
    (lambda: DecoderLayer(8, 2, 16, dropout=-0.1), "dropout must be a probability"),
])
def test_constructors_name_the_bad_argument(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_d_k_of_zero_is_an_error_not_nan():
    q = torch.randn(2, 3, 0)
    with pytest.raises(ValueError, match=r"d_k must be at least 1 .* got query \(2, 3, 0\)"):
        scaled_dot_product_attention(q, q, torch.randn(2, 3, 4))


def test_mixed_dtypes_are_named():
    q = torch.randn(2, 3, 8)
    with pytest.raises(TypeError, match="one dtype, got torch.float64, torch.float32"):
        scaled_dot_product_attention(q.double(), q, q)
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(TypeError, match=r"query is torch.float64 but the module's weights are "
                                        r"torch.float32: .*module.to\(torch.float64\)"):
        mha(q.double(), q.double(), q.double())
    with pytest.raises(TypeError, match="key is torch.float16"):
        mha(q, q.half(), q)
    with pytest.raises(TypeError, match="x is torch.float64"):
        PositionWiseFeedForward(8, 16)(q.double())
    layer = EncoderLayer(8, 2, 16).double()  # one dtype throughout: fine
    assert layer(q.double()).dtype == torch.float64


def test_autocast_mixes_dtypes_on_purpose():
    layer = EncoderLayer(8, 2, 16)
    with torch.autocast("cpu", torch.bfloat16):
        out = layer(torch.randn(2, 3, 8))  # linear layers output bfloat16 inside
    assert out.isfinite().all()


def test_public_names():
    assert tfcourse.Transformer is tfcourse.model.Transformer
    for name in tfcourse.__all__:
        assert getattr(tfcourse, name) is not None, name
    assert {"Transformer", "train", "greedy_decode", "MultiHeadAttention"} <= set(dir(tfcourse))
    import tfcourse.variants as variants

    assert tfcourse.DecoderLM is variants.DecoderLM and tfcourse.EncoderClassifier is \
        variants.EncoderClassifier
    assert {"DecoderLMConfig", "EncoderClassifierConfig", "BlockConfig", "register"} <= set(dir(tfcourse))
    with pytest.raises(AttributeError, match="has no attribute 'Transfomer'"):
        tfcourse.Transfomer  # noqa: B018


def test_a_chapter_module_loads_alone():
    code = ("import sys, tfcourse.attention; "
            "assert 'tfcourse.training' not in sys.modules and 'babel' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
