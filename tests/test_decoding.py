import pytest
import torch

from tfcourse.decoding import (
    beam_search_decode,
    beam_search_step,
    decode_step,
    filter_logits,
    greedy_decode,
    length_penalty,
    sample_decode,
)
from tfcourse.masks import padding_mask, target_mask
from tfcourse.model import Transformer, TransformerConfig

PAD, BOS, EOS = 0, 1, 3


def model(norm_first=False, seed=14):
    """A random model whose greedy outputs vary (untied output layer, a sharp generator, and a
    seed where they do: test_cached_and_uncached_decoding_give_the_same_tokens checks it)."""
    torch.manual_seed(seed)
    config = TransformerConfig.tiny(13, d_model=16, n_heads=2, d_ff=32, dropout=0.0,
                                    share_embeddings=False, tie_output=False,
                                    norm_first=norm_first)
    m = Transformer(config).eval()
    torch.nn.init.normal_(m.generator.weight, std=1.0)
    return m


def source():
    torch.manual_seed(0)
    src = torch.randint(4, 13, (5, 7))
    src[1, 5:] = PAD
    src[3, 3:] = PAD
    return src, padding_mask(src, PAD)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_step_equals_full_decoder(norm_first):
    m = model(norm_first)
    src, src_mask = source()
    memory = m.encode(src, src_mask)
    tgt = torch.randint(4, 13, (5, 9))
    full = m.generator(m.decode(tgt, memory, src_mask, target_mask(tgt, PAD))).log_softmax(-1)
    cache = m.init_cache()
    for t in range(1, 10):
        got = decode_step(m, tgt[:, :t], memory, src_mask, cache)
        assert len(cache) == t
        torch.testing.assert_close(got, full[:, t - 1])
        torch.testing.assert_close(got, decode_step(m, tgt[:, :t], memory, src_mask))


def test_cache_must_match_the_prefix():
    m = model()
    src, src_mask = source()
    memory = m.encode(src, src_mask)
    with pytest.raises(ValueError, match=r"the cache holds 0 positions, so tokens must hold 1"):
        decode_step(m, torch.ones(5, 3, dtype=torch.long), memory, src_mask, m.init_cache())


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_and_uncached_decoding_give_the_same_tokens(norm_first):
    m = model(norm_first)
    src, src_mask = source()
    for eos in (EOS, 12):
        greedy = greedy_decode(m, src, src_mask, 12, BOS, eos)
        torch.testing.assert_close(greedy, greedy_decode(m, src, src_mask, 12, BOS, eos, use_cache=False))
        for k in (2, 4):
            beam = beam_search_decode(m, src, src_mask, 12, BOS, eos, beam_size=k)
            uncached = beam_search_decode(m, src, src_mask, 12, BOS, eos, beam_size=k, use_cache=False)
            torch.testing.assert_close(beam, uncached)
    assert len(set(map(tuple, greedy.tolist()))) > 2  # the model does not say one thing only


def test_greedy_takes_the_argmax_and_stops_at_eos():
    m = model()
    src, src_mask = source()
    out = greedy_decode(m, src, src_mask, 12, BOS, EOS)
    ends = []
    for row, s, sm in zip(out, src, src_mask):
        prefix = torch.tensor([[BOS]])
        memory = m.encode(s[None], sm[None])
        for token in row.tolist():
            if prefix[0, -1].item() == EOS:
                assert token == PAD  # a finished sequence only pads
                continue
            step = decode_step(m, prefix, memory, sm[None])
            assert token == step.argmax(-1).item()
            prefix = torch.cat((prefix, torch.tensor([[token]])), 1)
        ends.append(EOS in row.tolist())
    assert any(ends) and not all(ends)  # some stopped, some ran to max_len
    # Every row stopped: decoding stops at once.
    stopped = torch.tensor(ends)
    short = greedy_decode(m, src[stopped], src_mask[stopped], 12, BOS, EOS)
    assert (short == EOS).any(1).all() and short.size(1) < 12
    assert short.size(1) == 1 + max(r.tolist().index(EOS) for r in short)


def test_beam_width_one_is_greedy():
    m = model()
    src, src_mask = source()
    for eos in (EOS, 5, 12):
        torch.testing.assert_close(
            beam_search_decode(m, src, src_mask, 12, BOS, eos, beam_size=1),
            greedy_decode(m, src, src_mask, 12, BOS, eos),
        )


def _sequence_log_prob(m, src, src_mask, ys):
    memory = m.encode(src[None], src_mask[None])
    prefix, total = torch.tensor([[BOS]]), 0.0
    for y in ys:
        total += decode_step(m, prefix, memory, src_mask[None])[0, y].item()
        prefix = torch.cat((prefix, torch.tensor([[y]])), 1)
    return total


def test_beam_search_finds_a_better_scored_output_than_greedy():
    m = model()
    src, src_mask = source()
    alpha = 0.6
    greedy = greedy_decode(m, src, src_mask, 6, BOS, EOS)
    beam = beam_search_decode(m, src, src_mask, 6, BOS, EOS, beam_size=4, length_penalty=alpha)

    def score(row, i):
        ys = row.tolist()
        ys = ys[: ys.index(EOS) + 1] if EOS in ys else ys
        return _sequence_log_prob(m, src[i], src_mask[i], ys) / length_penalty(len(ys), alpha)

    better = 0
    for i in range(len(src)):
        assert score(beam[i], i) >= score(greedy[i], i) - 1e-5
        better += score(beam[i], i) > score(greedy[i], i) + 1e-5
    assert better >= 1


def test_beam_search_step_adds_log_probs_and_ranks_by_length_penalty():
    scores = torch.tensor([[-1.0, -2.0]])
    log_probs = torch.log(torch.tensor([[[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]]))
    # beam 0 has length 2 after this step, beam 1 length 9: its candidates are favoured
    new, beam, token = beam_search_step(scores, log_probs, torch.tensor([[2.0, 9.0]]), alpha=1.0)
    cand = scores[..., None] + log_probs
    ranked = cand / torch.tensor([[7 / 6], [14 / 6]]).T[..., None]
    order = ranked.flatten().argsort(descending=True)[:2]
    assert beam.tolist() == [(order // 3).tolist()] and token.tolist() == [(order % 3).tolist()]
    assert beam.tolist() == [[1, 0]]  # raw sums would pick beam 0's token 0 first
    torch.testing.assert_close(new, cand.flatten()[order][None])
    _, beam0, token0 = beam_search_step(scores, log_probs, torch.tensor([[2.0, 9.0]]), alpha=0.0)
    assert (beam0.tolist(), token0.tolist()) == ([[0, 0]], [[0, 1]])
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(7, 1.0) == pytest.approx(2.0)


def test_sampling_repeats_with_a_fixed_generator_and_top_k_1_is_greedy():
    m = model()
    src, src_mask = source()

    def sample(seed, **kw):
        return sample_decode(m, src, src_mask, 12, BOS, EOS,
                             generator=torch.Generator().manual_seed(seed), **kw)

    torch.testing.assert_close(sample(0, temperature=1.5), sample(0, temperature=1.5))
    assert not torch.equal(sample(0, temperature=5.0), sample(1, temperature=5.0))
    greedy = greedy_decode(m, src, src_mask, 12, BOS, EOS)
    torch.testing.assert_close(sample(3, top_k=1, temperature=10.0), greedy)
    torch.testing.assert_close(sample(3, top_p=1e-6, temperature=2.0), greedy)
    cached = sample(4, temperature=2.0, top_k=5, top_p=0.9)
    torch.testing.assert_close(cached, sample(4, temperature=2.0, top_k=5, top_p=0.9, use_cache=False))


def test_filter_logits():
    logits = torch.log(torch.tensor([[0.1, 0.4, 0.2, 0.3]]))
    keep = lambda **kw: torch.isfinite(filter_logits(logits, **kw))[0].tolist()  # noqa: E731
    assert keep(top_k=2) == [False, True, False, True]
    assert keep(top_p=0.4) == [False, True, False, False]
    assert keep(top_p=0.5) == [False, True, False, True]
    assert keep(top_p=0.75) == [False, True, True, True]
    assert keep(top_k=3, top_p=0.95) == [False, True, True, True]
    assert keep(top_p=1.0) == [True] * 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(max_len=0), r"max_len must be an integer >= 1, got 0"),
        (dict(bos_id=13), r"bos_id=13 is not in the target vocabulary \[0, 13\)"),
        (dict(src=torch.zeros(5, 7)), r"src must be token ids of shape \(batch, src_len\)"),
        (dict(src_mask=torch.ones(5, 7, dtype=torch.bool)),
         r"src_mask must be a bool tensor of shape \(batch, 1, 1, src_len\) = \(5, 1, 1, 7\)"),
    ],
)
@pytest.mark.parametrize("decode", [greedy_decode, beam_search_decode, sample_decode])
def test_bad_arguments(decode, kwargs, message):
    m = model()
    src, src_mask = source()
    args = dict(src=src, src_mask=src_mask, max_len=5, bos_id=BOS, eos_id=EOS) | kwargs
    with pytest.raises(ValueError, match=message):
        decode(m, **args)


@pytest.mark.parametrize(
    ("decode", "kwargs", "message"),
    [
        (beam_search_decode, dict(beam_size=0), r"beam_size must be an integer >= 1, got 0"),
        (beam_search_decode, dict(length_penalty=-1), r"length_penalty \(alpha\) must be >= 0"),
        (sample_decode, dict(temperature=0), r"temperature must be a number in \[0.001, 1000\].*got 0"),
        (sample_decode, dict(top_k=0), r"top_k must be None or an integer >= 1, got 0"),
        (sample_decode, dict(top_p=1.5), r"top_p must be None or in \(0, 1\], got 1.5"),
    ],
)
def test_bad_decoding_options(decode, kwargs, message):
    m = model()
    src, src_mask = source()
    with pytest.raises(ValueError, match=message):
        decode(m, src, src_mask, 5, BOS, EOS, **kwargs)


def test_memory_keys_and_values_are_projected_once():
    m = model()
    src, src_mask = source()
    calls = []
    layer = m.decoder.layers[0]
    hooks = [layer.cross_attn.w_k.register_forward_hook(lambda *a: calls.append("cross")),
             layer.self_attn.w_k.register_forward_hook(lambda mod, i, o: calls.append(o.size(1)))]
    greedy_decode(m, src, src_mask, 5, BOS, -1)  # eos_id -1 never comes: all 5 steps run
    for hook in hooks:
        hook.remove()
    assert calls.count("cross") == 1
    assert [c for c in calls if c != "cross"] == [1] * 5  # one new position per step
