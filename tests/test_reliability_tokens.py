"""Nothing wrong is silent in the tools of chapters 11 and 12 (issue 35): every probe that
../shared/reviews/newcomer_probes_ch11_12.md marked SILENT-WRONG or UNCLEAR, named here by its
id, gives the right result or one clear line: special tokens never come from a user's text
unless asked, a checkpoint's digest covers all that a load uses, and the tokenizer API
refuses what it cannot honour."""

import pytest
import torch

import tfcourse.cli as cli
from tfcourse.checkpoint import save_checkpoint
from tfcourse.corpora import lm_task
from tfcourse.tokens import BPE
from tfcourse.training import TrainConfig
from tfcourse.variants import DecoderLM, DecoderLMConfig
from tfcourse.vocab import SPECIALS


def one_line_error(capsys):
    err = capsys.readouterr().err
    assert err.strip() and "\n" not in err.strip(), err  # one line, no traceback
    return err


@pytest.fixture(scope="module")
def bpe_lm(tmp_path_factory):
    """A tiny untrained DecoderLM on the lm task in BPE tokens (300 ids), saved: (path, task)."""
    task = lm_task(block_size=16, bpe_vocab=300)
    torch.manual_seed(0)
    model = DecoderLM(DecoderLMConfig.tiny(len(task.vocab), max_len=16))
    path = tmp_path_factory.mktemp("bpe") / "lm-bpe.pt"
    save_checkpoint(str(path), model, task, TrainConfig(), step=0)
    return str(path), task


# ------------------------------------------------------------------ special tokens


@pytest.mark.parametrize("prompt", ['x = "<eos>"', "<pad>"])  # B28
def test_a_prompt_that_spells_a_special_token_is_read_as_text(bpe_lm, prompt, capsys, monkeypatch):
    path, task = bpe_lm
    seen = []
    forward = DecoderLM.forward

    def watched(self, tokens, *args, **kwargs):
        seen.append(tokens)
        return forward(self, tokens, *args, **kwargs)

    monkeypatch.setattr(DecoderLM, "forward", watched)
    assert cli.main(["sample", "--checkpoint", path, "--prompt", prompt, "--max-new", "3",
                     "--greedy", "--threads", "1"]) == 0
    assert capsys.readouterr().out.startswith(prompt)
    fed = torch.cat([t.flatten() for t in seen])
    assert seen and not (fed < len(SPECIALS)).any(), fed  # no control id came from the text
    assert seen[0][0, :3].tolist() == task.vocab.encode(prompt)[:3]


def test_decode_of_encode_is_the_text_special_spellings_included(bpe_lm):  # D03
    bpe = bpe_lm[1].vocab
    for text in ['x = "<eos>" + y', "a<pad>b<unk>c<bos>d", "<eos>"]:
        assert bpe.decode(bpe.encode(text)) == text
    assert bpe.encode("a<eos>", allowed_special={"<eos>"})[-1] == bpe.eos_id  # asked for: its id
    assert bpe.encode("<eos>") != [bpe.eos_id]
    assert isinstance(bpe, BPE)
