"""The benchmark compares like with like: its torch.nn.Transformer wrapper computes what
tfcourse's Transformer computes, given the same weights, and decodes through the same code."""

import importlib.util
from pathlib import Path

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
