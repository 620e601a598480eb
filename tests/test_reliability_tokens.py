"""Nothing wrong is silent in the tools of chapters 11 and 12 (issue 35): every probe that
../shared/reviews/newcomer_probes_ch11_12.md marked SILENT-WRONG or UNCLEAR, named here by its
id, gives the right result or one clear line: special tokens never come from a user's text
unless asked, a checkpoint's digest covers all that a load uses, and the tokenizer API
refuses what it cannot honour. (B01, --max-new in characters, and B31, a prompt that is not
UTF-8, are generation's: tests/test_generation.py.)"""

import json
import warnings

import pytest
import torch

import tfcourse.cli as cli
from tfcourse.checkpoint import (
    PARTS,
    checkpoint_digest,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
    seal,
)
from tfcourse.cli import CLASSIFY_CHECKPOINT, DATES_CHECKPOINT, LM_CHECKPOINT, MLM_CHECKPOINT
from tfcourse.corpora import lm_task
from tfcourse.tokens import BPE, pre_tokenize, train_bpe
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
    first = seen[0][0].tolist()  # the prompt's ids (token healing may back up the last one)
    assert first and first == task.vocab.encode(prompt)[:len(first)]


def test_decode_of_encode_is_the_text_special_spellings_included(bpe_lm):  # D03
    bpe = bpe_lm[1].vocab
    for text in ['x = "<eos>" + y', "a<pad>b<unk>c<bos>d", "<eos>"]:
        assert bpe.decode(bpe.encode(text)) == text
    assert bpe.encode("a<eos>", allowed_special={"<eos>"})[-1] == bpe.eos_id  # asked for: its id
    assert bpe.encode("<eos>") != [bpe.eos_id]
    assert isinstance(bpe, BPE)


# ------------------------------------------------------------------ a checkpoint checked whole


def _edited(src, dst, edit, reseal=False):
    """A copy of the checkpoint ``src`` at ``dst``, edited by edit(state) (not sealed again:
    as a hand or a flipped bit leaves it), -> str(dst)."""
    state = torch.load(src, weights_only=True)
    edit(state)
    torch.save(seal(state) if reseal else state, dst)
    return str(dst)


@pytest.fixture(scope="module")
def llama_ckpt(tmp_path_factory):
    """A tiny untrained LlamaLM on the character lm task, saved."""
    from tfcourse.modern import LlamaConfig, LlamaLM

    task = lm_task(block_size=16)
    torch.manual_seed(0)
    model = LlamaLM(LlamaConfig.tiny(len(task.vocab), max_len=16))
    path = tmp_path_factory.mktemp("llama") / "lm-llama.pt"
    save_checkpoint(str(path), model, task, TrainConfig(), step=0)
    return str(path)


def _swap(merges, i, j):
    merges[i], merges[j] = merges[j], merges[i]


TOKENIZER_EDITS = {  # K04: the tokenizer stored in a lm-bpe checkpoint, edited
    "merges 3 and 4 swapped": lambda t: _swap(t["merges"], 3, 4),
    "merges 10 and 30 swapped": lambda t: _swap(t["merges"], 10, 30),
    "one bit of merge 0": lambda t: t["merges"][0].__setitem__(0, t["merges"][0][0] ^ 1),
    "the pattern set to \\w+": lambda t: t.__setitem__("pattern", r"\w+"),
    "a special token added": lambda t: t["special_tokens"].append("<sep>"),
}


@pytest.mark.parametrize("edit", TOKENIZER_EDITS)
def test_a_checkpoint_whose_tokenizer_was_edited_is_damaged(bpe_lm, edit, tmp_path):  # K04
    path = _edited(bpe_lm[0], tmp_path / "t.pt", lambda s: TOKENIZER_EDITS[edit](s["tokenizer"]))
    with pytest.raises(ValueError, match="is damaged: its tokenizer is not what it was saved "
                                         "with") as error:
        load_checkpoint(path)
    assert path in str(error.value)


def test_no_single_bit_flip_in_the_merges_loads_another_tokenizer(bpe_lm, tmp_path):  # K04
    """As the review: 40 random bit flips in the bytes of the stored merge list."""
    data = open(bpe_lm[0], "rb").read()
    start = data.index(b"merges")
    end = data.index(b"sha256", start)
    rng = torch.Generator().manual_seed(0)
    outcomes = {"refused": 0, "the same": 0}
    for k in range(40):
        flipped = bytearray(data)
        at = start + 6 + int(torch.randint(end - start - 6, (1,), generator=rng))
        flipped[at] ^= 1 << int(torch.randint(8, (1,), generator=rng))
        path = tmp_path / f"flip{k}.pt"
        path.write_bytes(bytes(flipped))
        try:
            _, vocab, _ = load_checkpoint(str(path))
        except ValueError as error:
            assert str(path) in str(error) and "\n" not in str(error)
            outcomes["refused"] += 1
        else:
            assert vocab == bpe_lm[1].vocab  # a flip that changed nothing read back
            outcomes["the same"] += 1
    assert outcomes["refused"] >= 30, outcomes


def test_sample_refuses_a_checkpoint_whose_tokenizer_has_one_bit_changed(bpe_lm, tmp_path,
                                                                        capsys):  # B41
    path = _edited(bpe_lm[0], tmp_path / "bit.pt",
                   lambda s: s["tokenizer"]["merges"][0].__setitem__(0, s["tokenizer"]["merges"][0][0] ^ 1))
    assert cli.main(["sample", "--checkpoint", path, "--max-new", "5", "--threads", "1"]) == 1
    err = one_line_error(capsys)
    assert f"{path} is damaged" in err and capsys.readouterr().out == ""


@pytest.mark.parametrize("field, value", [("rope_base", 500_000.0), ("positions", "sinusoidal"),
                                          ("max_len", 10**9), ("n_kv_heads", 4)])
def test_a_checkpoint_whose_model_settings_were_edited_is_damaged(llama_ckpt, field, value,
                                                                  tmp_path):  # K14
    path = _edited(llama_ckpt, tmp_path / "s.pt", lambda s: s["model_config"].__setitem__(field, value))
    with pytest.raises(ValueError, match=f"{path} is damaged: its model settings are not what it "
                                         "was saved with"):
        load_checkpoint(path)
    load_checkpoint(llama_ckpt)  # the intact file loads


def test_a_character_vocabulary_with_two_symbols_swapped_is_damaged(tmp_path, capsys):  # K27
    def swap(state):
        e, t = state["vocab"].index("e"), state["vocab"].index("t")
        state["vocab"][e], state["vocab"][t] = "t", "e"

    path = _edited(LM_CHECKPOINT, tmp_path / "et.pt", swap)
    with pytest.raises(ValueError, match=f"{path} is damaged: its vocabulary is not what it was "
                                         "saved with"):
        load_checkpoint(path)
    assert cli.main(["sample", "--checkpoint", path, "--threads", "1"]) == 1
    assert "is damaged" in one_line_error(capsys)


def test_every_kind_is_sealed_and_the_shipped_ones_check_whole():
    for path in (DATES_CHECKPOINT, CLASSIFY_CHECKPOINT, MLM_CHECKPOINT, LM_CHECKPOINT):
        state = read_checkpoint(path)  # no warning: they carry both digests
        assert state["sha256"] == checkpoint_digest(state), path
        assert sorted(state["sha256"]) == sorted(PARTS) and len(state["sha256"]["tokenizer"]) == 64


@pytest.mark.parametrize("path", [DATES_CHECKPOINT, CLASSIFY_CHECKPOINT])
def test_an_edited_setting_of_every_kind_is_damaged(path, tmp_path):
    edited = _edited(path, tmp_path / "k.pt", lambda s: s["model_config"].__setitem__("max_len", 7))
    with pytest.raises(ValueError, match="is damaged: its model settings are not what"):
        load_checkpoint(edited)


def test_a_file_saved_before_the_whole_digest_loads_with_one_warning(llama_ckpt, tmp_path):
    path = _edited(llama_ckpt, tmp_path / "old.pt", lambda s: s.pop("sha256"))
    with pytest.warns(UserWarning, match="saved before tfcourse checked a checkpoint whole: its "
                                         "model settings, vocabulary and tokenizer are unchecked"):
        load_checkpoint(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_checkpoint(path)  # said once


# ------------------------------------------------------------------ a tokenizer file


def _tokenizer_file(tmp_path, bpe, edit, keep_digest=True):
    data = bpe.to_dict()
    edit(data)
    if not keep_digest:  # as written before the digest: the tokens still tell
        data.pop("sha256")
    path = tmp_path / "bpe.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


FILE_EDITS = {  # F10, and the rest of K04's edits in a file of its own
    "merges as floats": (lambda d: d["merges"].__setitem__(10, [d["merges"][10][0] + 0.7,
                                                                 d["merges"][10][1] + 0.2]),
                         r"merge 10 \[.*\] is not a pair of integers"),
    "two merges swapped": (lambda d: _swap(d["merges"], 3, 4),
                           r"its merges and its tokens disagree \(merge 3 makes"),
    "merge 0 appended again": (lambda d: d["merges"].append(d["merges"][0]),
                               r"merge 40 \(.*\) repeats merge 0"),
    "a token edited": (lambda d: d["tokens"].__setitem__(5, "xyz"),
                       "its merges and its tokens disagree"),
}


@pytest.mark.parametrize("edit", FILE_EDITS)
def test_a_tokenizer_file_edited_is_refused(bpe_lm, edit, tmp_path):  # F10
    bpe = bpe_lm[1].vocab
    change, without_digest = FILE_EDITS[edit]
    path = _tokenizer_file(tmp_path, bpe, change)
    if edit != "a token edited":  # the tokens are read from the merges: not in the digest
        with pytest.raises(ValueError, match=f"{path} is damaged: its merges, pattern or special "
                                             "tokens are not those it was saved with"):
            BPE.load(path)
    with pytest.raises(ValueError, match=without_digest):
        BPE.load(_tokenizer_file(tmp_path, bpe, change, keep_digest=False))
    assert BPE.load(_tokenizer_file(tmp_path, bpe, lambda d: None)) == bpe


# ------------------------------------------------------------------ the tokenizer API


SMALL = "def f(x):\n    return x + 1  # ab ab ab\n" * 20


@pytest.mark.parametrize("pattern", [r"\w+", "", r"(\w)+"])  # C23 (a group: findall's pitfall)
def test_a_pattern_that_leaves_text_uncovered_keeps_it(pattern, tmp_path):
    bpe = train_bpe(SMALL, 300, pattern=pattern)
    for text in ["a b", "  x = [1, 2]\n", SMALL]:
        assert bpe.decode(bpe.encode(text)) == text
        assert "".join(pre_tokenize(text, pattern)) == text
    bpe.save(tmp_path / "w.json")  # in a file: the same
    assert BPE.load(tmp_path / "w.json").decode(BPE.load(tmp_path / "w.json").encode("a b")) == "a b"
    assert pre_tokenize("a b", r"\w+") == ["a", " ", "b"]


def test_the_tokenizer_api_refuses_what_it_cannot_honour(bpe_lm):
    bpe = bpe_lm[1].vocab
    n = len(bpe)
    cases = [  # probe id, call, error, what the one line says
        ("C16", lambda: train_bpe(SMALL, 300, special_tokens="<sep>"), TypeError,
         r"special_tokens must be a sequence of strings, got the string '<sep>' \(for one "
         r"token: \['<sep>'\]\)"),
        ("C16 in a file", lambda: BPE.from_dict({**bpe.to_dict(), "special_tokens": "<sep>"}),
         ValueError, "is damaged"),
        ("C16 BPE()", lambda: BPE([], special_tokens="<sep>"), TypeError,
         "special_tokens must be a sequence of strings, got the string '<sep>'"),
        ("C12", lambda: train_bpe(SMALL, 300, special_tokens=[""]), ValueError,
         "special_tokens must be distinct, non-empty"),
        ("C17", lambda: train_bpe(SMALL, 300, special_tokens=[5]), TypeError,
         r"special_tokens must be a sequence of strings, got 5 \(int\) in \[5\]"),
        ("C19", lambda: train_bpe(b"bytes text", 300), TypeError,
         r"text must be a str, got bytes \(decode it first"),
        ("C19 encode bytes", lambda: bpe.encode(b"abc"), TypeError,
         r"text must be a str, got bytes \(decode it first"),
        ("C19 encode None", lambda: bpe.encode(None), TypeError, "text must be a str, got NoneType"),
        ("C19 several", lambda: train_bpe(["abc", None], 300), TypeError,
         r"text\[1\] must be a str, got NoneType"),
        ("C20", lambda: train_bpe("x\ud800y", 300), ValueError,
         "text holds a lone surrogate '\\\\ud800' at position 1"),
        ("C20 encode", lambda: bpe.encode("a\ud800b"), ValueError,
         "text holds a lone surrogate '\\\\ud800' at position 1"),
        ("C22", lambda: train_bpe("abc", 300, pattern="("), ValueError,
         r"pattern must be a regular expression, got '\(' \(missing \) at position 1\)"),
        ("C22 not a str", lambda: train_bpe("abc", 300, pattern=None), TypeError,
         r"pattern must be a regular expression \(a str\), got NoneType"),
        ("D05", lambda: bpe.decode([n]), ValueError, rf"ids must be ids in \[0, {n}\), got {n}"),
        ("D05 far below", lambda: bpe.decode([-2000]), ValueError, "got -2000"),
        ("D05 token", lambda: bpe.token(n), ValueError, rf"i must be ids in \[0, {n}\), got {n}"),
        ("D06", lambda: bpe.decode([-1]), ValueError, rf"ids must be ids in \[0, {n}\), got -1"),
        ("D06 token", lambda: bpe.token(-1), ValueError, "got -1"),
        ("D08", lambda: bpe.decode([104.0]), TypeError,
         r"ids must be an integer id, got 104.0 \(float\)"),
        ("D08 tensor", lambda: bpe.decode(torch.tensor([104.5])), TypeError,
         "ids must be a 1-D integer tensor or a sequence of ints, got a 1-D torch.float32"),
        ("D10", lambda: bpe.decode(torch.tensor([[104, 105]])), TypeError,
         r"got a 2-D torch.int64 tensor of shape \(1, 2\)"),
        ("D10 nested", lambda: bpe.decode([[104, 105]]), TypeError,
         r"ids must be an integer id, got \[104, 105\] \(list\)"),
        ("D10 str", lambda: bpe.decode("abc"), TypeError, "ids must be a sequence of ints, got str"),
    ]
    for probe, call, error, message in cases:
        with pytest.raises(error, match=message) as raised:
            call()
            pytest.fail(f"{probe}: no error")
        assert "\n" not in str(raised.value), probe


def test_ids_of_every_integer_kind_still_decode(bpe_lm):
    import numpy as np

    bpe = bpe_lm[1].vocab
    ids = bpe.encode("def f(x):")
    for form in (ids, tuple(ids), torch.tensor(ids), torch.tensor(ids, dtype=torch.int32),
                 np.array(ids), [np.int64(i) for i in ids]):
        assert bpe.decode(form) == "def f(x):"
    assert bpe.decode([]) == "" and bpe.encode("") == []


# ------------------------------------------------------------------ the command line


def test_train_lm_bpe_prints_bits_per_byte_beside_nats_per_token(tmp_path, capsys):  # A41
    import math
    import re

    out = tmp_path / "lm-bpe.pt"
    assert cli.main(["train", "--task", "lm-bpe", "--steps", "2", "--eval-every", "2", "--d-model",
                     "32", "--n-layers", "1", "--d-ff", "64", "--n-heads", "2", "--out", str(out),
                     "--no-progress", "--threads", "1", "--examples", "0"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    found = re.search(r"test loss \(nats/token\) ([\d.]+) = ([\d.]+) bits per byte", line)
    assert found, line
    nats, bits = map(float, found.groups())
    _, vocab, _ = load_checkpoint(str(out))
    task = lm_task(block_size=64, corpus=None, bpe_vocab=1024)
    targets = torch.cat([w[1:] for w in task.test])
    targets = targets[targets != vocab.pad_id].tolist()
    n_bytes = sum(len(vocab.token(i)) for i in targets)
    assert bits == pytest.approx(nats * len(targets) / math.log(2) / n_bytes, abs=2e-4)


@pytest.mark.parametrize("task, option, message", [  # A20
    ("lm-llama", ["--positional", "learned"], "--positional is not a setting of the lm-llama model "
     "(LlamaConfig), but of --task classify, mlm, lm, lm-bpe; lm-llama takes --positions"),
    ("lm", ["--positions", "rotary"], "but of --task lm-llama, llm; lm takes --positional"),
    ("lm-bpe", ["--n-kv-heads", "2"], "--n-kv-heads is not a setting of the lm-bpe model "
     "(DecoderLMConfig), but of --task lm-llama, llm"),
])
def test_a_model_setting_of_another_task_names_the_tasks_that_take_it(task, option, message,
                                                                      tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "train", lambda *a, **k: pytest.fail("trained anyway"))
    assert cli.main(["train", "--task", task, *option, "--out", str(tmp_path / "x.pt")]) == 1
    assert message in one_line_error(capsys)


def test_train_help_says_which_task_takes_which_model_setting(capsys):  # A20
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # unwrapped
    for option, tasks in [("--positional", "classify, mlm, lm, lm-bpe"), ("--positions", "lm-llama, llm"),
                          ("--n-kv-heads", "lm-llama, llm"), ("--rope-base", "lm-llama, llm"),
                          ("--norm-eps", "lm-llama, llm"), ("--pooling", "classify, mlm")]:
        after = text[text.index(f"{option} ", text.index("model (defaults")):]
        assert f"[--task {tasks} only]" in after[:400].replace("lm- llama", "lm-llama"), option
    assert "--d-model D_MODEL width of the model (the residual stream) --n-heads" in text


def test_a_checkpoint_without_its_tokenizer_says_so(bpe_lm, tmp_path, capsys):  # K03
    path = _edited(bpe_lm[0], tmp_path / "notok.pt", lambda s: s.pop("tokenizer"))
    assert cli.main(["sample", "--checkpoint", path, "--threads", "1"]) == 1
    assert f"{path} is damaged: its tokenizer is missing" in one_line_error(capsys)
    both = _edited(bpe_lm[0], tmp_path / "two.pt", lambda s: (s.pop("tokenizer"), s.pop("vocab")))
    with pytest.raises(ValueError, match="its vocabulary and tokenizer are missing"):
        load_checkpoint(both)
    weights = _edited(bpe_lm[0], tmp_path / "w.pt", lambda s: (
        s["model"]["embed.embedding.weight"].mul_(2), s.pop("weights_sha256")))
    with pytest.raises(ValueError, match="its weights are not what it was saved with"):
        load_checkpoint(weights)
    given = _edited(LM_CHECKPOINT, tmp_path / "k08.pt",  # K08: a character model given a tokenizer
                    lambda s: s.__setitem__("tokenizer", bpe_lm[1].vocab.to_dict()))
    with pytest.raises(ValueError, match="its tokenizer is not what it was saved with"):
        load_checkpoint(given)


def test_init_with_another_bpe_tokenizer_says_how_they_differ(bpe_lm, tmp_path, capsys,
                                                               monkeypatch):  # A09
    from dataclasses import replace

    from tfcourse.recipes import RECIPES

    task = bpe_lm[1]  # 300 ids, not the recipe's 1,024: quicker
    monkeypatch.setitem(RECIPES, "lm-bpe", replace(RECIPES["lm-bpe"], make_task=lambda seed=0: task))
    monkeypatch.setattr(cli, "train", lambda *a, **k: pytest.fail("trained anyway"))
    tiny = ["--d-model", "32", "--n-heads", "2", "--n-layers", "1", "--d-ff", "64",
            "--max-len", "16", "--out", str(tmp_path / "x.pt")]
    merges = [list(m) for m in task.vocab.merges]
    merges[0][0] ^= 1
    flipped = _edited(bpe_lm[0], tmp_path / "f.pt", lambda s: s.__setitem__(
        "tokenizer", BPE(merges).to_dict()), reseal=True)  # saved so: another tokenizer
    assert cli.main(["train", "--task", "lm-bpe", "--init", flipped, *tiny]) == 1
    merge0 = task.vocab.token_bytes[256]
    other = bytes([merge0[0] ^ 1]) + merge0[1:]
    assert (f"has another vocabulary than --task lm-bpe's (a BPE tokenizer of 300 ids vs a BPE "
            f"tokenizer of 300 ids; from merge 0 on: {other!r} vs {merge0!r})") in one_line_error(capsys)
    assert cli.main(["train", "--task", "lm-bpe", "--init", LM_CHECKPOINT, *tiny]) == 1
    assert "(102 characters vs a BPE tokenizer of 300 ids)" in one_line_error(capsys)
