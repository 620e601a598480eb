"""The benchmark compares like with like: its torch.nn.Transformer wrapper computes what
tfcourse's Transformer computes, given the same weights, and decodes through the same code."""

import importlib.util
import math
import time
from pathlib import Path

import pytest
import torch

from tfcourse.decoding import greedy_decode
from tfcourse.masks import padding_mask, target_mask
from tfcourse.model import TransformerConfig
from tfcourse.parity import load_torch_weights, run_torch

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
    assert cells == ("fake row (median of 3 pairs)", "3.0", "2.0", 0.75, "<= 1.0")
    assert (marked, n) == (1, 4)
    printed = capsys.readouterr().out
    assert "DISTURBED" in printed and "no result for this seed" in printed


def test_others_busy_subtracts_this_process(monkeypatch):
    ticks = iter([(100.0, 0.0), (100.5, 0.0)])  # 0.5 s of CPU used machine-wide meanwhile
    monkeypatch.setattr(run, "_cpu_ticks", lambda: next(ticks))
    result, busy = run.others_busy(time.sleep, 0.25)  # sleeping uses no CPU of ours
    assert result is None and 1.5 < busy < 2.05
