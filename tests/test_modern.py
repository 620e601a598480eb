"""Chapter 12: RMSNorm equals torch.nn.RMSNorm, SwiGLU is its formula at Llama's width, rotary
positions make scores depend on offsets only (both pair conventions, equal once W^Q and W^K
are permuted), and the Llama-style model equals transformers' LlamaForCausalLM with the same
weights (grouped-query attention, the cache, a padded batch), is a kind of its own that
checkpoints and `tfcourse train` / `sample` know."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from tfcourse import checkpoint, cli
from tfcourse.config import BlockConfig
from tfcourse.feed_forward import SwiGLU, swiglu_width
from tfcourse.grouped_query import GroupedQueryAttention
from tfcourse.masks import causal_mask
from tfcourse.modern import LlamaConfig, LlamaLM
from tfcourse.normalization import RMSNorm
from tfcourse.parity import llama_from_transformers
from tfcourse.positional import (
    RotaryEmbedding,
    apply_rotary,
    halves_from_adjacent,
    rotary_cos_sin,
)
from tfcourse.recipes import build

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rms_norm_is_torchs(dtype):
    torch.manual_seed(0)
    ours, theirs = RMSNorm(12, eps=1e-3).to(dtype), torch.nn.RMSNorm(12, eps=1e-3, dtype=dtype)
    with torch.no_grad():
        ours.weight.normal_()
    theirs.load_state_dict(ours.state_dict())
    x = 0.03 * torch.randn(2, 5, 12, dtype=dtype)  # mean(x^2) ~ eps: eps in the root matters
    torch.testing.assert_close(ours(x), theirs(x))
    torch.testing.assert_close(ours(x), x * (x.square().mean(-1, keepdim=True) + 1e-3).rsqrt()
                               * ours.weight)


def test_rms_norm_of_bfloat16_is_computed_in_float32_as_transformers_does():
    x = (torch.randn(4, 64) * 30).bfloat16()
    want = (x.float() * x.float().square().mean(-1, keepdim=True).add(1e-6).rsqrt()).bfloat16()
    assert torch.equal(RMSNorm(64).bfloat16()(x), want)


def test_swiglu_width_is_llamas_and_keeps_the_ffns_parameters():
    assert swiglu_width(4096) == 11008  # Llama 2 7B
    assert swiglu_width(64, 16) == 176 == LlamaConfig.tiny(10).d_ff
    d = 4096
    assert abs(3 * d * swiglu_width(d) / (2 * d * 4 * d) - 1) < 0.01


@pytest.mark.parametrize("activation, act", [("silu", F.silu), ("gelu", F.gelu)])
def test_swiglu_gates_up_with_the_activation_of_gate(activation, act):
    torch.manual_seed(1)
    ffn = SwiGLU(8, 24, activation=activation)
    x = torch.randn(3, 5, 8)
    want = (act(x @ ffn.gate.weight.T) * (x @ ffn.up.weight.T)) @ ffn.down.weight.T
    torch.testing.assert_close(ffn(x), want)
    assert sum(p.numel() for p in ffn.parameters()) == 3 * 8 * 24  # no biases


@pytest.mark.parametrize("pairs", ["halves", "adjacent"])
def test_rotary_scores_depend_on_the_offset_only(pairs):
    torch.manual_seed(2)
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)

    def score(m, n):
        rope = RotaryEmbedding(16, pairs=pairs)
        q_m = rope(q.expand(1, 1, m + 1, 16).clone(), 0)[0, 0, m]
        k_n = rope(k.expand(1, 1, n + 1, 16).clone(), 0)[0, 0, n]
        return q_m @ k_n

    for m, n in [(5, 2), (40, 10), (3, 3)]:
        for shift in (1, 17, 1000):
            assert score(m + shift, n + shift).item() == pytest.approx(score(m, n).item(), abs=1e-9)
    assert score(5, 2).item() != pytest.approx(score(5, 4).item(), abs=1e-3)
    x = torch.randn(1, 2, 7, 16, dtype=torch.float64)
    torch.testing.assert_close(RotaryEmbedding(16, pairs=pairs)(x, 3).norm(dim=-1), x.norm(dim=-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_halves_rotate_each_pair_as_the_formula_bit_for_bit(dtype):
    """apply_rotary computes x cos + (-b, a) sin (whole heads, faster): the pairs' rotation
    (a cos - b sin, a sin + b cos), written out here, to the last bit."""
    torch.manual_seed(5)
    x = torch.randn(2, 7, 3, 16).transpose(1, 2).to(dtype)  # (batch, heads, seq, d_head), as split_heads
    cos, sin = rotary_cos_sin(torch.arange(4, 11), 16, dtype=dtype)
    a, b = x[..., :8], x[..., 8:]
    assert torch.equal(apply_rotary(x, cos, sin), torch.cat((a * cos - b * sin, a * sin + b * cos), -1))


def test_rotary_tables_are_kept_grown_and_made_again_where_they_cannot_serve():
    rope = RotaryEmbedding(8, base=500.0)
    x = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    for start in (0, 3, 40, 2):  # the tables grow at 40
        cos, sin = rotary_cos_sin(torch.arange(start, start + 5), 8, 500.0, torch.float64)
        torch.testing.assert_close(rope(x, start), apply_rotary(x, cos, sin), rtol=0, atol=1e-15)
    assert rope.tables[0].shape == (45, 4) and rope.tables[0].dtype == torch.float64
    assert rope(x.float(), 1).dtype == torch.float32 == rope.tables[0].dtype
    with torch.inference_mode():
        rope(x, 0)
    y = x.clone().requires_grad_()
    rope(y, 0).sum().backward()  # inference-mode tables are not kept for autograd
    assert y.grad is not None and not rope.tables[0].is_inference()


def test_the_two_pair_conventions_compute_the_same_scores_once_the_weights_are_permuted():
    torch.manual_seed(3)
    n_heads, d_head, d_model = 2, 8, 16
    w_q, w_k = torch.randn(n_heads * d_head, d_model), torch.randn(n_heads * d_head, d_model)
    x = torch.randn(1, 6, d_model)
    cos, sin = rotary_cos_sin(torch.arange(6), d_head)

    def scores(w_q, w_k, pairs):
        q = apply_rotary((x @ w_q.T).view(1, 6, n_heads, d_head).transpose(1, 2), cos, sin, pairs)
        k = apply_rotary((x @ w_k.T).view(1, 6, n_heads, d_head).transpose(1, 2), cos, sin, pairs)
        return q @ k.transpose(-2, -1)  # (1, heads, 6, 6)

    adjacent = scores(w_q, w_k, "adjacent")
    torch.testing.assert_close(scores(halves_from_adjacent(w_q, n_heads),
                                      halves_from_adjacent(w_k, n_heads), "halves"), adjacent)
    assert (scores(w_q, w_k, "halves") - adjacent).abs().max() > 1.0  # not without permuting


def test_cos_and_sin_are_computed_in_float64_before_the_cast():
    cos, _ = rotary_cos_sin(torch.tensor([5000]), 64, dtype=torch.bfloat16)
    angle = torch.tensor(5000.0, dtype=torch.float64)
    assert cos[0, 0].item() == pytest.approx(angle.cos().item(), abs=0.01)
    low = torch.tensor(5000.0, dtype=torch.bfloat16) * torch.tensor(1.0, dtype=torch.bfloat16)
    assert abs(low.float().cos().item() - angle.cos().item()) > 0.1  # bfloat16's angle is off


def test_grouped_query_attention_with_rotary_and_a_cache_equals_the_whole_sequence():
    torch.manual_seed(4)
    gqa = GroupedQueryAttention(32, 4, 2, bias=False, rotary=RotaryEmbedding(8))
    fused = GroupedQueryAttention(32, 4, 2, bias=False, rotary=RotaryEmbedding(8),
                                  attn_impl="sdpa")
    fused.load_state_dict(gqa.state_dict())
    x = torch.randn(2, 6, 32)
    whole = gqa(x, x, x, causal_mask(6))
    torch.testing.assert_close(fused(x, x, x, causal_mask(6)), whole)
    from tfcourse.multi_head import KVCache
    cache = KVCache()
    steps = torch.cat([gqa(x[:, [t]], x[:, [t]], x[:, [t]], cache=cache) for t in range(6)], 1)
    torch.testing.assert_close(steps, whole)


# ------------------------------------------------------------------ the model, and Llama's


def _theirs(tie=False, seed=0, n_kv_heads=2):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=50, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=n_kv_heads, max_position_embeddings=64,
        rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=tie,
        attn_implementation="eager")
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # gains other than 1, so that a norm applied wrong shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


# The largest differences seen (float32, torch 2.13 CPU, transformers 5.24): 1.5e-7 whole and
# padded, 2.4e-7 with the cache, 1.8e-7 with sdpa; the tolerance is assert_close's float32
# default (1.3e-6 relative, 1e-5 absolute).
@pytest.mark.parametrize("tie, n_kv_heads", [(False, 2), (True, 2), (False, 8), (False, 1)])
def test_logits_equal_transformers_llama(tie, n_kv_heads):
    theirs = _theirs(tie, n_kv_heads=n_kv_heads)
    ours = llama_from_transformers(theirs)
    assert ours.config.n_kv_heads == n_kv_heads and ours.config.tie_output == tie
    tokens = torch.randint(0, 50, (3, 20))
    with torch.no_grad():
        want = theirs(tokens).logits
        torch.testing.assert_close(ours(tokens), want)
        fused = llama_from_transformers(theirs, attn_impl="sdpa")
        torch.testing.assert_close(fused(tokens), want)


def test_one_token_at_a_time_with_the_cache_equals_the_whole_sequence_and_transformers():
    theirs = _theirs()
    ours = llama_from_transformers(theirs)
    tokens = torch.randint(0, 50, (2, 15))
    with torch.no_grad():
        want = theirs(tokens).logits
        cache = ours.init_cache()
        steps = [ours(tokens[:, :5], cache=cache)]  # a prompt, then one token at a time
        steps += [ours(tokens[:, [t]], cache=cache) for t in range(5, 15)]
        assert len(cache) == 15
        torch.testing.assert_close(torch.cat(steps, 1), want)
        past, their_steps = transformers.DynamicCache(config=theirs.config), []
        for t in range(15):
            their_steps.append(theirs(tokens[:, [t]], cache=past, use_cache=True).logits)
        torch.testing.assert_close(torch.cat(their_steps, 1), want)


@pytest.mark.parametrize("side", ["left", "right"])
def test_a_padded_batch_as_transformers_handles_it(side):
    theirs = _theirs()
    ours = llama_from_transformers(theirs)
    lengths = [12, 7, 3]
    attention = torch.zeros(3, 12, dtype=torch.long)
    for row, n in enumerate(lengths):
        attention[row, 12 - n:] = 1 if side == "left" else 0
        attention[row, :n] = 1 if side == "right" else attention[row, :n]
    tokens = torch.randint(1, 50, (3, 12)).masked_fill(attention == 0, 0)
    with torch.no_grad():
        want = theirs(tokens, attention_mask=attention).logits
        got = ours(tokens, mask=attention.bool()[:, None, None, :])
        real = attention.bool()
        torch.testing.assert_close(got[real], want[real])
        # RoPE sees offsets only: a left-padded text (positions 5, 6, ...) gets the logits
        # it gets alone (positions 0, 1, ...), to rounding
        alone = ours(tokens[1:2, real[1]])
        torch.testing.assert_close(got[1][real[1]], alone[0])


def test_config_is_a_block_config_with_llamas_settings_checked():
    config = LlamaConfig.llama3_8b()
    assert isinstance(config, BlockConfig)
    assert (config.n_kv_heads, config.d_ff, config.rope_base, config.activation) == (
        8, 14336, 500000.0, "silu")
    with pytest.raises(ValueError, match="n_heads=4 is not divisible by n_kv_heads=3"):
        LlamaConfig.tiny(10, n_kv_heads=3)
    with pytest.raises(ValueError, match="norm_first must be True"):
        LlamaConfig.tiny(10, norm_first=False)
    with pytest.raises(ValueError, match="must be even"):
        LlamaConfig.tiny(10, d_model=36, n_heads=4)
    with pytest.raises(ValueError, match="rope_base must be a number > 1"):
        LlamaConfig.tiny(10, rope_base=1.0)
    llama = dataclasses.replace(LlamaConfig.tiny(10), positions="learned")
    assert LlamaLM(llama).positional is not None and LlamaLM(LlamaConfig.tiny(10)).positional is None


def test_head_dim_is_d_model_over_heads_unless_given():
    config = LlamaConfig.tiny(10)
    assert config.head_dim == 16 and LlamaConfig.tiny(10, head_dim=16) == config
    # a checkpoint saved before the field records no head_dim: it means what it meant
    saved = {k: v for k, v in dataclasses.asdict(config).items() if k != "head_dim"}
    assert LlamaConfig(**saved) == config
    torch.manual_seed(0)
    wide = LlamaLM(LlamaConfig.tiny(10, head_dim=24)).eval()  # 4 heads of 24 in 64
    attn = wide.layers[0].self_attn
    assert (attn.w_q.weight.shape, attn.w_k.weight.shape, attn.w_o.weight.shape) == (
        (96, 64), (48, 64), (64, 96))
    assert attn.rotary.d_head == 24
    tokens = torch.randint(0, 10, (2, 9))
    with torch.no_grad():
        cache = wide.init_cache()
        steps = torch.cat([wide(tokens[:, [t]], cache=cache) for t in range(9)], 1)
        torch.testing.assert_close(steps, wide(tokens))
    with pytest.raises(ValueError, match="head_dim = 9 must be even"):
        LlamaConfig.tiny(10, head_dim=9)


def test_the_llama_kind_checkpoints_and_the_cli_trains_and_samples_it(tmp_path, capsys):
    assert checkpoint.model_class("llama") is LlamaLM
    task, model, config = build("lm-llama", model=dict(d_model=32, n_heads=4, d_ff=64,
                                                       n_layers=1))
    checkpoint.save_checkpoint(str(tmp_path / "l.pt"), model, task, config, step=0)
    loaded, vocab, state = checkpoint.load_checkpoint(str(tmp_path / "l.pt"))
    assert type(loaded) is LlamaLM and state["kind"] == "llama" and loaded.config == model.config
    batch = task.make_batch(task.val[:2])
    torch.testing.assert_close(batch.loss_inputs(loaded)[0], batch.loss_inputs(model.eval())[0])
    out = str(tmp_path / "cli.pt")
    assert cli.main(["train", "--task", "lm-llama", "--steps", "2", "--eval-every", "2",
                     "--d-model", "32", "--n-layers", "1", "--d-ff", "64", "--n-kv-heads", "1",
                     "--out", out, "--threads", "1"]) == 0
    saved = checkpoint.read_checkpoint(out)
    assert (saved["model_config"]["n_kv_heads"], saved["task"]) == (1, "lm-llama")  # --resume's
    # a checkpoint saved before head_dim was a field starts a run (--init) of the same model
    del saved["model_config"]["head_dim"]
    torch.save(checkpoint.seal(saved), str(tmp_path / "old.pt"))
    assert cli.main(["train", "--task", "lm-llama", "--steps", "1", "--eval-every", "1",
                     "--d-model", "32", "--n-layers", "1", "--d-ff", "64", "--n-kv-heads", "1",
                     "--init", str(tmp_path / "old.pt"), "--out", str(tmp_path / "from_old.pt"),
                     "--threads", "1"]) == 0
    capsys.readouterr()
    assert cli.main(["sample", "--checkpoint", out, "--prompt", "def ", "--max-new", "5",
                     "--threads", "1"]) == 0
    assert capsys.readouterr().out.startswith("def ")
