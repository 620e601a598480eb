"""The benchmark compares like with like: its torch.nn.Transformer wrapper computes what
tfcourse's Transformer computes, given the same weights, and decodes through the same code;
its torch.nn language model (TransformerEncoderLayer with a causal mask) computes what
tfcourse's DecoderLM computes."""

import importlib.util
import math
import time
from pathlib import Path

import pytest
import torch

from tfcourse.decoding import greedy_decode
from tfcourse.masks import padding_mask, target_mask
from tfcourse.model import TransformerConfig
from tfcourse.parity import copy_weights_to_torch, load_torch_weights, run_torch
from tfcourse.variants import DecoderLMConfig

PAD, BOS, EOS = 0, 1, 2
_spec = importlib.util.spec_from_file_location(
    "benchmarks_run", Path(__file__).parents[1] / "benchmarks" / "run.py"
)
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)


def test_torch_wrapper_computes_what_tfcourse_computes():
    config = TransformerConfig.tiny(13, dropout=0.0)
    ours, theirs = run.build("tfcourse", config, seed=0).eval(), run.build("torch.nn", config, seed=1).eval()
    load_torch_weights(ours.encoder, theirs.transformer.encoder)
    load_torch_weights(ours.decoder, theirs.transformer.decoder)
    ours.src_embed.load_state_dict(theirs.src_embed.state_dict())  # also tgt_embed, generator.weight
    ours.generator.bias.data.copy_(theirs.generator.bias)
    g = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(3, 13, (3, 7), generator=g), torch.randint(3, 13, (3, 6), generator=g)
    src[0, 5:], tgt[1, 4:] = PAD, PAD
    src_mask, tgt_mask = padding_mask(src, PAD), target_mask(tgt, PAD)
    with torch.no_grad():
        want = ours(src, tgt, src_mask, tgt_mask)
        torch.testing.assert_close(run_torch(theirs, src, tgt, src_mask, tgt_mask), want)
        decoded = [run_torch(greedy_decode, m, src, src_mask, 8, BOS, EOS) for m in (ours, theirs)]
    assert torch.equal(*decoded)


def test_both_models_start_from_the_same_initialization():
    config = TransformerConfig.tiny(13, share_embeddings=False, tie_output=False)
    ours, theirs = run.build("tfcourse", config, seed=0), run.build("torch.nn", config, seed=0)
    d = config.d_model
    for model in (ours, theirs):
        assert model.src_embed.embedding.weight.std().item() == pytest.approx(d**-0.5, rel=0.1)
    # [W^Q; W^K; W^V] is one Xavier matrix in both: the same bound, sqrt(6 / (4 d))
    bound = math.sqrt(6 / (4 * d))
    w_q = ours.encoder.layers[0].self_attn.w_q.weight
    in_proj = theirs.transformer.encoder.layers[0].self_attn.in_proj_weight
    for w in (w_q, in_proj):
        assert 0.9 * bound < w.abs().max() <= bound


def test_a_row_is_the_median_of_per_seed_ratios_and_names_busy_pairs(monkeypatch, capsys):
    pairs = {0: [1.0, 2.0], 1: [10.0, 2.0], 2: [3.0, 4.0], 3: [None, 1.0]}
    busy = {0: 0.0, 1: 0.1, 2: 1.5, 3: 0.0}  # cores other programs used during each pair
    bench = run.Benchmark("fake", "fake row", ("a", "b"), pairs.__getitem__, str,
                          lambda a, b: a / b, "<= 1.0")
    monkeypatch.setattr(run, "others_busy", lambda fn, seed: (fn(seed), busy[seed]))
    cells, marked, n = run.run_row(bench, 4, spare_cores=1)
    # ratios 0.5, 5.0, 0.75: the median, and the spread over seeds
    assert cells == ("fake row (median of 3 pairs)", "3.0", "2.0", 0.75, "<= 1.0", " (0.50 to 5.00)")
    assert (marked, n) == (1, 4)
    printed = capsys.readouterr().out
    assert "DISTURBED" in printed and "no result for this seed" in printed


def test_others_busy_subtracts_this_process(monkeypatch):
    ticks = iter([(100.0, 0.0), (100.5, 0.0)])  # 0.5 s of CPU used machine-wide meanwhile
    monkeypatch.setattr(run, "_cpu_ticks", lambda: next(ticks))
    clock = iter([10.0, 10.25])  # 0.25 s of wall time, however busy this machine is
    monkeypatch.setattr(run.time, "perf_counter", lambda: next(clock))
    result, busy = run.others_busy(time.sleep, 0.1)  # sleeping uses no CPU of ours
    assert result is None and 1.9 < busy <= 2.0


@pytest.mark.parametrize("norm_first", [True, False])
def test_torch_lm_computes_what_the_decoder_only_lm_computes(norm_first):
    config = DecoderLMConfig.tiny(13, d_model=16, n_heads=4, d_ff=32, norm_first=norm_first)
    ours, theirs = run.build_lm("tfcourse", config, seed=0), run.build_lm("torch.nn", config, 1)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    copy_weights_to_torch(ours, theirs)  # the same names, through tfcourse.parity
    assert theirs.generator.weight is theirs.embed.embedding.weight  # still tied
    tokens = torch.randint(4, 13, (3, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(run_torch(theirs.eval(), tokens), ours.eval()(tokens))
        changed = tokens.clone()
        changed[:, 5] = 4
        # causal: a change at position 5 leaves the logits of positions 0-4 as they were
        torch.testing.assert_close(run_torch(theirs, changed)[:, :5], ours(tokens)[:, :5])


def test_both_lms_start_from_the_same_initialization():
    config = DecoderLMConfig.tiny(13)
    ours, theirs = run.build_lm("tfcourse", config, seed=0), run.build_lm("torch.nn", config, 0)
    d = config.d_model
    for model in (ours, theirs):
        assert model.embed.embedding.weight.std().item() == pytest.approx(d**-0.5, rel=0.1)
    bound = math.sqrt(6 / (4 * d))
    w_q = ours.layers[0].self_attn.w_q.weight
    for w in (w_q, theirs.layers[0].self_attn.in_proj_weight):
        assert 0.9 * bound < w.abs().max() <= bound


def test_lm_rows_train_by_time_or_steps():
    task, config, train_config = run._lm_setup(d_model=16, n_heads=2, d_ff=32, n_layers=1)
    model = run.build_lm("torch.nn", config)
    assert run._train_lm(model, task, train_config, seed=0, steps=3) == 3
    assert run._train_lm(model, task, train_config, seed=0, seconds=0.0) == 0
    assert {"lm", "lm_throughput", "tying"} <= {b.name for b in run.BENCHMARKS}


def test_chapter_12_rows_compare_models_of_equal_parameters_each_with_its_part_swapped():
    from tfcourse.feed_forward import PositionWiseFeedForward
    from tfcourse.normalization import LayerNorm

    def n(model):
        return sum(p.numel() for p in model.parameters())

    llama, gpt = run.modern._model("llama", 0), run.modern._model("lm", 0)
    assert (n(llama), n(gpt)) == (110_528, 110_720)
    variants = {change: run.modern._variant(change, 0) for change in run._CHANGES}
    assert all(abs(n(model) / n(llama) - 1) < 0.005 for model in variants.values())
    assert isinstance(variants["layernorm"].layers[1].sublayers[0].norm, LayerNorm)
    assert isinstance(variants["layernorm"].norm, LayerNorm)
    assert isinstance(variants["gelu"].layers[0].feed_forward, PositionWiseFeedForward)
    assert variants["learned"].positional is not None and llama.positional is None
    assert variants["mha"].config.n_kv_heads == 4 == 2 * llama.config.n_kv_heads
