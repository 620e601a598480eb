"""Chapter 10: the fused attention path, tiled attention, the measuring tools, mixed
precision, gradient accumulation, activation checkpointing, and memory on paper."""

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from tfcourse.attention import scaled_dot_product_attention
from tfcourse.batches import make_batch
from tfcourse.checking.ch10_tiled_attention import ITEM
from tfcourse.data import copy_task
from tfcourse.decoding import greedy_decode
from tfcourse.efficiency import (
    ForwardMemory,
    PeakMemory,
    autocast_dtype,
    checkpoint_layers,
    count_flops,
    loglog_slope,
    memory_per_gpu,
    tiled_attention,
    training_memory,
)
from tfcourse.losses import label_smoothing_loss
from tfcourse.masks import causal_mask, padding_mask, target_mask
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.multi_head import MultiHeadAttention
from tfcourse.training import train_step

MIB = 2**20


def qkv(*lead, q_len=13, k_len=11, d_k=8, d_v=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*lead, n, d, generator=g, dtype=dtype)
                 for n, d in ((q_len, d_k), (k_len, d_k), (k_len, d_v)))


def masks(lead, q_len=13, k_len=11):
    """Masks that attention must get right, each broadcastable to (*lead, q_len, k_len)."""
    g = torch.Generator().manual_seed(1)
    random = torch.rand(*lead, q_len, k_len, generator=g) > 0.6
    random[..., 2, :] = False  # a query that may see no key at all
    late = torch.ones(q_len, k_len, dtype=torch.bool)
    late[:, :7] = False  # the first blocks of every query fully masked (e.g. left padding)
    return {
        "none": None,
        "random with an empty row": random,
        "causal": causal_mask(k_len)[-q_len:] if q_len <= k_len else causal_mask(q_len)[:, :k_len],
        "keys only (k_len,)": torch.arange(k_len) % 3 != 0,
        "first keys masked": late,
        "everything masked": torch.zeros(q_len, k_len, dtype=torch.bool),
    }


# ---------------------------------------------------------------------- the fused path


def pair(d_model=16, n_heads=4, dropout=0.0):
    """The same weights in an explicit and a fused MultiHeadAttention."""
    torch.manual_seed(0)
    explicit = MultiHeadAttention(d_model, n_heads, dropout)
    fused = MultiHeadAttention(d_model, n_heads, dropout, attn_impl="sdpa")
    fused.load_state_dict(explicit.state_dict())
    return explicit, fused


@pytest.mark.parametrize(("q_len", "k_len", "mask_kind"), [
    (6, 6, "none"), (6, 6, "padding"), (6, 6, "causal+padding"), (6, 6, "empty rows"),
    (3, 7, "none"), (3, 7, "padding"), (3, 7, "empty rows"),  # cross-attention
])
def test_fused_equals_explicit_outputs_and_gradients(q_len, k_len, mask_kind):
    explicit, fused = pair()
    g = torch.Generator().manual_seed(2)
    query = torch.randn(3, q_len, 16, generator=g, requires_grad=True)
    memory = query if q_len == k_len else torch.randn(3, k_len, 16, generator=g, requires_grad=True)
    tokens = torch.tensor([[5] * k_len, [5] * (k_len - 2) + [0] * 2, [5] * 2 + [0] * (k_len - 2)])
    mask = {"none": None, "padding": padding_mask(tokens, 0),
            "causal+padding": target_mask(tokens, 0),
            "empty rows": torch.rand(3, 1, q_len, k_len, generator=g) > 0.7}[mask_kind]
    if mask_kind == "empty rows":
        mask[0, 0, 1] = False
    outputs, grads = [], []
    for mha in (explicit, fused):
        out, weights = mha(query, memory, memory, mask)
        assert weights is None
        outputs.append(out)
        grads.append(torch.autograd.grad(out.square().sum(), [query, memory, *mha.parameters()]))
    torch.testing.assert_close(outputs[1], outputs[0])
    for g_fused, g_explicit in zip(grads[1], grads[0]):
        assert not g_fused.isnan().any()
        torch.testing.assert_close(g_fused, g_explicit)


def test_fused_gradcheck_in_float64():
    _, fused = pair(4, 2)
    fused.double()
    q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    kv = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    mask = padding_mask(torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]]), pad_id=0)  # one empty
    assert torch.autograd.gradcheck(lambda q, kv: fused(q, kv, kv, mask)[0], (q, kv))


def test_fused_with_need_weights_computes_them_explicitly():
    explicit, fused = pair()
    x = torch.randn(2, 5, 16)
    mask = causal_mask(5)
    out, weights = fused(x, x, x, mask, need_weights=True)
    want, want_weights = explicit(x, x, x, mask, need_weights=True)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(weights, want_weights)


def test_fused_dropout_is_off_in_eval_and_on_in_training():
    explicit, fused = pair(dropout=0.5)
    x = torch.randn(2, 5, 16)
    explicit.eval(), fused.eval()
    torch.testing.assert_close(fused(x, x, x)[0], explicit(x, x, x)[0])
    fused.train()
    assert not torch.allclose(fused(x, x, x)[0], explicit(x, x, x)[0])


def test_fused_model_equals_explicit_model_and_decodes_the_same_with_its_cache():
    torch.manual_seed(0)
    config = TransformerConfig.tiny(13, d_model=16, n_heads=2, d_ff=32, dropout=0.0,
                                    share_embeddings=False, tie_output=False)
    explicit = Transformer(config).eval()
    torch.nn.init.normal_(explicit.generator.weight, std=1.0)  # varied greedy outputs
    fused = Transformer(TransformerConfig(**{**vars(config), "attn_impl": "sdpa"})).eval()
    fused.load_state_dict(explicit.state_dict())
    assert all(m.attn_impl == "sdpa" for m in fused.modules() if isinstance(m, MultiHeadAttention))
    src = torch.randint(4, 13, (4, 7), generator=torch.Generator().manual_seed(0))
    src[1, 5:] = 0
    tgt = src[:, :6]
    args = (src, tgt, padding_mask(src, 0), target_mask(tgt, 0))
    torch.testing.assert_close(fused(*args), explicit(*args))
    decoded = [greedy_decode(m, src, padding_mask(src, 0), 9, 1, 3) for m in (explicit, fused)]
    assert torch.equal(*decoded) and decoded[0].size(1) > 1


def test_unknown_attn_impl_is_an_error_naming_the_option():
    with pytest.raises(ValueError, match=r"attn_impl must be one of \('explicit', 'sdpa'\), got 'flash'"):
        MultiHeadAttention(16, 4, attn_impl="flash")
    with pytest.raises(ValueError, match=r"attn_impl must be one of .* got 'SDPA'"):
        Transformer(TransformerConfig.tiny(11, attn_impl="SDPA"))


def test_fused_path_checks_its_mask_as_the_explicit_one():
    _, fused = pair()
    x = torch.randn(2, 5, 16)
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        fused(x, x, x, torch.ones(5, 5))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 5\) does not broadcast"):
        fused(x, x, x, torch.ones(4, 5, dtype=torch.bool))


# ----------------------------------------------------------------------- tiled attention


@pytest.mark.parametrize("lead", [(2, 3), (2,), ()], ids=["4-D", "3-D", "2-D"])
@pytest.mark.parametrize("block_size", [1, 3, 4, 11, 64])
def test_tiled_equals_the_reference(lead, block_size):
    q, k, v = qkv(*lead)
    for name, mask in masks(lead).items():
        want = scaled_dot_product_attention(q, k, v, mask)[0]
        got = tiled_attention(q, k, v, mask, block_size=block_size)
        assert not got.isnan().any(), name
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=name)


def test_tiled_gives_zero_for_a_query_that_sees_no_key():
    q, k, v = qkv(2, dtype=torch.float32)
    mask = torch.ones(13, 11, dtype=torch.bool)
    mask[4] = False
    out = tiled_attention(q, k, v, mask, block_size=4)
    assert (out[:, 4] == 0).all() and not out.isnan().any()


def test_tiled_float32_and_bfloat16_within_their_precision():
    q, k, v = qkv(2, 3, q_len=40, k_len=70, dtype=torch.float32)
    mask = causal_mask(70)[-40:]
    torch.testing.assert_close(tiled_attention(q, k, v, mask, 16),
                               scaled_dot_product_attention(q, k, v, mask)[0])
    half = [t.bfloat16() for t in (q, k, v)]
    got = tiled_attention(*half, mask, 16)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), scaled_dot_product_attention(q, k, v, mask)[0],
                               rtol=0.05, atol=0.05)


def test_tiled_gradients_equal_the_reference():
    q, k, v = (t.requires_grad_() for t in qkv(2, q_len=6, k_len=9, d_k=4, d_v=3))
    mask = masks((2,), 6, 9)["random with an empty row"]
    assert torch.autograd.gradcheck(lambda q, k, v: tiled_attention(q, k, v, mask, 4), (q, k, v))
    grads = [torch.autograd.grad(f(q, k, v, mask).sum(), (q, k, v))
             for f in (lambda *a: tiled_attention(*a, block_size=2),
                       lambda *a: scaled_dot_product_attention(*a)[0])]
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("block_size", [0, -4, 2.5, None, True])
def test_tiled_block_size_must_be_a_positive_int(block_size):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=f"block_size must be a positive number of keys, got {block_size}"):
        tiled_attention(q, k, v, block_size=block_size)


def test_tiled_checks_its_inputs_as_the_reference():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="same last dimension d_k"):
        tiled_attention(q, k[..., :3], v)
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        tiled_attention(q, k, v, torch.ones(13, 11))


def test_tiled_memory_grows_as_n_where_the_reference_grows_as_n_squared():
    sizes, peaks = [512, 1024, 2048, 4096], {"reference": [], "tiled": []}
    for n in sizes:
        x = torch.randn(1, 1, n, 64)
        with torch.no_grad():
            for name, f in (("reference", lambda x=x: scaled_dot_product_attention(x, x, x)),
                            ("tiled", lambda x=x: tiled_attention(x, x, x, block_size=128))):
                with PeakMemory() as memory:
                    f()
                peaks[name].append(memory.peak)
    assert peaks["reference"][-1] >= 2 * 4096**2 * 4  # scores and weights, n x n each
    assert loglog_slope(sizes, peaks["reference"]) == pytest.approx(2, abs=0.05)
    assert loglog_slope(sizes, peaks["tiled"]) == pytest.approx(1, abs=0.05)
    assert peaks["tiled"][-1] <= 0.1 * peaks["reference"][-1]  # the benchmark's goal


# ------------------------------------------------ exercise 10's check, on right solutions


def normalised_as_it_goes(query, key, value, mask=None, block_size=128):
    """FlashAttention-2's bookkeeping turned around: o stays an average, re-weighted by l."""
    m = torch.full((*query.shape[:-1], 1), float("-inf"), dtype=query.dtype)
    l_old = torch.zeros_like(m)
    o = torch.zeros((*query.shape[:-1], value.size(-1)), dtype=query.dtype)
    mask = None if mask is None else mask.broadcast_to(*mask.shape[:-1], key.size(-2))
    for j in range(0, key.size(-2), block_size):
        s = torch.einsum("...qd,...kd->...qk", query, key[..., j:j + block_size, :])
        s = s / query.size(-1) ** 0.5
        if mask is not None:
            s = torch.where(mask[..., j:j + block_size], s, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = torch.where(m_new.isfinite(), m_new, 0.0)
        p = (s - safe).exp()
        l_new = (m - safe).exp() * l_old + p.sum(-1, keepdim=True)
        o = ((m - safe).exp() * l_old * o + p @ value[..., j:j + block_size, :]) / l_new.clamp_min(1e-30)
        m, l_old = m_new, l_new
    return o


def running_log_sum_exp(query, key, value, mask=None, block_size=128):
    """One running number per query, log l + m, instead of m and l."""
    lse = torch.full_like(query[..., :1], float("-inf"))
    out = 0
    chunks = zip(key.split(block_size, -2), value.split(block_size, -2),
                 [None] * key.size(-2) if mask is None
                 else mask.expand(*mask.shape[:-1], key.size(-2)).split(block_size, -1))
    for k, v, allowed in chunks:
        s = query @ k.mT / math.sqrt(query.size(-1))
        if allowed is not None:
            s = s.masked_fill(~allowed, float("-inf"))
        top = s.amax(-1, keepdim=True).nan_to_num(neginf=0.0)
        new = torch.logaddexp(lse, top + (s - top).exp().sum(-1, keepdim=True).log())
        safe = new.nan_to_num(neginf=0.0)
        out = (lse - safe).exp() * out + (s - safe).exp() @ v
        lse = new
    return out


def reference_read_as_a_learner(query, key, value, mask=None, block_size=128):
    """The notebook's loop, with a python int for the block count and -inf handled by nan_to_num."""
    n_blocks = -(-key.size(-2) // block_size)
    m = torch.full_like(query[..., :1], -math.inf)
    total = torch.zeros_like(m)
    o = torch.zeros_like(query[..., :1]).expand(*query.shape[:-1], value.size(-1))
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], key.size(-2))
    for b in range(n_blocks):
        keys = slice(b * block_size, (b + 1) * block_size)
        s = query @ key[..., keys, :].transpose(-2, -1) * query.size(-1) ** -0.5
        if mask is not None:
            s = s.masked_fill(~mask[..., keys], -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new).nan_to_num(0.0)
        r = torch.exp(m - m_new).nan_to_num(0.0)
        total = r * total + p.sum(-1, keepdim=True)
        o = r * o + p @ value[..., keys, :]
        m = m_new
    return torch.where(total > 0, o / total, 0.0)


def float64_on_whole_copies(query, key, value, mask=None, block_size=128):
    """Running statistics in float64, on float64 copies of the whole key and value (each as
    large as the scores of all keys on the check's long sequence), cast back at the end."""
    q, k, v = query.double(), key.double(), value.double()
    k_len = k.size(-2)
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    run_max = torch.full((*lead, q.size(-2), 1), float("-inf"), dtype=torch.float64)
    run_sum = torch.zeros((*lead, q.size(-2), 1), dtype=torch.float64)
    acc = torch.zeros((*lead, q.size(-2), v.size(-1)), dtype=torch.float64)
    for start in range(0, k_len, block_size):
        stop = min(start + block_size, k_len)
        s = torch.einsum("...qd,...kd->...qk", q, k[..., start:stop, :]) / math.sqrt(q.size(-1))
        if mask is not None:
            allowed = mask.expand(*mask.shape[:-1], k_len)[..., start:stop]
            s = torch.where(allowed, s, torch.tensor(float("-inf"), dtype=s.dtype))
        new_max = torch.maximum(run_max, s.amax(dim=-1, keepdim=True))
        safe = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
        p = torch.exp(s - safe)
        corr = torch.exp(run_max - safe)
        run_sum = corr * run_sum + p.sum(-1, keepdim=True)
        acc = corr * acc + torch.einsum("...qk,...kd->...qd", p, v[..., start:stop, :])
        run_max = new_max
    kept = torch.where(run_sum > 0, run_sum, torch.ones_like(run_sum))
    return torch.where(run_sum > 0, acc / kept, torch.zeros_like(acc)).to(query.dtype)


@pytest.mark.parametrize("solution", [normalised_as_it_goes, running_log_sum_exp,
                                      reference_read_as_a_learner, float64_on_whole_copies])
def test_exercise_check_passes_right_solutions_in_other_styles(solution):
    ITEM.check(solution)


# -------------------------------------------------------------------- measuring tools


def test_peak_memory_counts_what_is_made_inside_and_frees_it():
    x = torch.ones(1000)  # before the block: not counted
    with PeakMemory() as memory:
        a = torch.zeros(1000, dtype=torch.float64)  # 8,000 bytes
        b = x * 2  # 4,000
        view = b[:10].view(2, 5)  # a view: no new memory  # noqa: F841
        b.add_(1)  # in place: no new memory
        del a
        c = torch.zeros(250)  # 1,000, after a was freed
    assert memory.peak == 12_000
    assert memory.current == 5_000
    del b, view, c
    assert memory.current == 0


def test_forward_memory_leaves_aside_what_it_is_told_to():
    x = torch.ones(1000)
    with ForwardMemory(ignore=lambda t: t.shape == x.shape) as memory:
        copy = x.double()  # 8,000 bytes, the shape of x: left aside  # noqa: F841
        other = torch.zeros(250)  # 1,000  # noqa: F841
    assert memory.peak == 1_000


def test_peak_memory_sees_the_backward_pass():
    w = torch.randn(100, 100, requires_grad=True)
    x = torch.randn(64, 100)
    with PeakMemory() as memory:
        (x @ w).relu().sum().backward()
    assert memory.current == 100 * 100 * 4  # the gradient of w stays
    assert memory.peak >= 100 * 100 * 4 + 64 * 100 * 4


def test_flops_of_attention_follow_table_1():
    """QK^T and the weighted sum of V: 2 n^2 d multiply-adds, 4 n^2 d FLOPs."""
    def attention_flops(n, d):
        x = torch.randn(1, n, d)
        return count_flops(scaled_dot_product_attention, x, x, x)

    assert attention_flops(64, 32) == 4 * 64**2 * 32
    ns, ds = [64, 128, 256, 512], [16, 32, 64, 128]
    assert loglog_slope(ns, [attention_flops(n, 32) for n in ns]) == pytest.approx(2)
    assert loglog_slope(ds, [attention_flops(64, d) for d in ds]) == pytest.approx(1)


def test_loglog_slope():
    x = [1, 2, 4, 8]
    assert loglog_slope(x, [3 * v**1.5 for v in x]) == pytest.approx(1.5)


# ---------------------------------------------------------------------- mixed precision


def test_autocast_dtype_names_and_errors(monkeypatch):
    assert autocast_dtype("float32", "cpu") is None
    assert autocast_dtype("bfloat16", "cpu") is torch.bfloat16
    with pytest.raises(ValueError, match=r"precision must be one of .* got 'fp16'"):
        autocast_dtype("fp16", "cpu")
    with pytest.raises(ValueError, match="precision='float16' .* is for cuda devices, not cpu"):
        autocast_dtype("float16", "cpu")
    # A GPU without bfloat16 (e.g. a T4 or V100), faked:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    with pytest.raises(ValueError, match=r"precision='bfloat16' needs a GPU .*Tesla T4 has not"):
        autocast_dtype("bfloat16", "cuda")
    assert autocast_dtype("float16", "cuda") is torch.float16


def test_bfloat16_on_an_mps_device_without_it_is_an_error_naming_the_option(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_macos_or_newer", lambda major, minor: False)
    with pytest.raises(ValueError, match=r"precision='bfloat16' on mps needs macOS 14 or newer"):
        autocast_dtype("bfloat16", "mps")


def test_bfloat16_autocast_runs_the_matrix_products_in_bfloat16_and_keeps_float32_gradients():
    task = copy_task(seed=0, n_train=16, n_val=1, n_test=1)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.tiny(len(task.vocab), dropout=0.0))
    batch = make_batch(task.train, task.vocab)
    with torch.autocast("cpu", autocast_dtype("bfloat16", "cpu")):
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        assert model.generator(torch.zeros(1, 64)).dtype == torch.bfloat16
    assert logits.dtype == torch.bfloat16
    label_smoothing_loss(logits, batch.tgt_out).backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())


# ------------------------------------------------- accumulation and checkpointing


def copy_model_and_batches(dropout=0.0):
    task = copy_task(seed=0, n_train=32, n_val=1, n_test=1)  # every target has 11 tokens
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.tiny(len(task.vocab), dropout=dropout))
    return model, task


def test_gradient_accumulation_equals_one_large_batch():
    model, task = copy_model_and_batches()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the gradients are what we compare
    train_step(model, [make_batch(task.train, task.vocab)], optimizer, clip=0)
    large = [p.grad.clone() for p in model.parameters()]
    micro = [make_batch(task.train[i: i + 8], task.vocab) for i in range(0, 32, 8)]
    train_step(model, micro, optimizer, clip=0)
    for p, g in zip(model.parameters(), large):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-7)


def test_checkpointing_gives_the_same_gradients_with_less_memory():
    results = {}
    for checkpointed in (False, True):
        model, task = copy_model_and_batches(dropout=0.1)  # dropout: the same masks again
        if checkpointed:
            checkpoint_layers(model)
        batch = make_batch(task.train, task.vocab)
        torch.manual_seed(1)
        with PeakMemory() as memory:
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
            label_smoothing_loss(logits, batch.tgt_out).backward()
        results[checkpointed] = (logits, [p.grad for p in model.parameters()], memory.peak)
    torch.testing.assert_close(results[True][0], results[False][0], rtol=0, atol=0)
    for got, want in zip(results[True][1], results[False][1]):
        torch.testing.assert_close(got, want)
    assert results[True][2] < 0.75 * results[False][2]


# ------------------------------------------------------------------- memory on paper


def test_training_memory_of_the_big_model():
    memory = training_memory(TransformerConfig.big(), batch=8, src_len=32, tgt_len=32)
    assert 213e6 <= memory["parameters"] <= 215e6  # the paper: 213M
    assert memory["weights"] == memory["gradients"] == memory["adam"] / 2 == 4 * memory["parameters"]
    assert 0 < memory["activations_split"] < memory["activations"]
    # the output layer (the shared 37,000 x 1024 embedding table, and a bias) is the largest unit
    assert memory["largest_unit"] == 4 * 37000 * (1024 + 1)
    double = training_memory(TransformerConfig.big(), batch=16, src_len=32, tgt_len=32)
    assert double["activations"] == pytest.approx(2 * memory["activations"], rel=1e-6)

    per_gpu = memory_per_gpu(memory, 8)
    assert per_gpu["ddp"]["adam"] == memory["adam"]
    assert per_gpu["fsdp"]["adam"] == per_gpu["tensor parallel"]["adam"] == memory["adam"] / 8
    assert per_gpu["fsdp"]["activations"] == per_gpu["ddp"]["activations"] == memory["activations"] / 8
    assert per_gpu["tensor parallel"]["activations"] > per_gpu["ddp"]["activations"]


def test_activations_counted_on_the_meta_device_are_what_a_real_forward_pass_keeps():
    config = TransformerConfig.tiny(11, dropout=0.1)
    counted = training_memory(config, batch=4, src_len=10, tgt_len=11)["activations"]
    torch.manual_seed(0)
    model = Transformer(config)
    src, tgt = torch.randint(4, 11, (4, 10)), torch.randint(4, 11, (4, 11))
    src_mask, tgt_mask = padding_mask(src, 0), target_mask(tgt, 0)
    with PeakMemory() as memory:
        logits = model(src, tgt, src_mask, tgt_mask)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten(),
                                                 label_smoothing=0.1)
    alive = memory.current - logits.numel() * 4 - loss.numel() * 4  # all but the outputs
    assert math.isclose(alive, counted, rel_tol=0.005), (alive, counted)


# ------------------------------------------------------------------------- benchmarks


def test_benchmark_functions_run_and_are_rows_of_benchmarks_run():
    """benchmarks/efficiency.py, on small sizes, and its rows in benchmarks/run.py."""
    folder = Path(__file__).parents[1] / "benchmarks"
    spec = importlib.util.spec_from_file_location("benchmarks_run", folder / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)  # puts benchmarks/ on sys.path and imports efficiency.py
    bench = run.efficiency
    rows = {b.name: b for b in run.BENCHMARKS}
    assert set(bench.ROWS) <= set(rows)
    tiled, reference = bench.tiled_memory_pair(0, n=512, block_size=64)
    assert reference >= 2 * 512**2 * 4 and rows["tiled"].ratio(tiled, reference) < 0.5
    ours, theirs = bench.fused_attention_pair(0, batch=2, seq=16, d_model=32, heads=4, repeats=1)
    assert min(ours, theirs) > 0 and math.isfinite(rows["fused"].ratio(ours, theirs))
    ours, theirs = run.throughput_pair(0, batch=4, seq=8, steps=1, attn_impl="sdpa")
    assert min(ours, theirs) > 0
    local, exact = bench.local_memory_pair(0, n=1024, window=16)
    assert exact >= 2 * 1024**2 * 4 and rows["local_memory"].ratio(local, exact) < 0.25
    local, fused = bench.local_time_pair(0, n=256, window=16, repeats=1)
    assert min(local, fused) > 0 and math.isfinite(rows["local_time"].ratio(local, fused))
