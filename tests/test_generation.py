"""Chapter 13: text through the tokenizer. Streaming that holds back the bytes of a cut
character (tokens.TextStream, against Hugging Face tokenizers' DecodeStream), the end-of-text
token, --max-new in characters for every tokenizer, token healing (inference.heal) and the
difference it makes on a real prompt with a model trained here, `tfcourse sample` for a BPE
Llama-style checkpoint."""

import os
import random
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers.decoders import DecodeStream
from torch import nn

from tfcourse.checkpoint import load_checkpoint, save_checkpoint
from tfcourse.cli import CHECKPOINTS, main
from tfcourse.corpora import stdlib_corpus
from tfcourse.decoding import lm_generate, sampler
from tfcourse.inference import _first_within, complete, heal
from tfcourse.modern import LlamaConfig, LlamaLM
from tfcourse.tokens import BYTE_ORDER, TextStream, train_bpe
from tfcourse.training import TrainConfig
from tfcourse.vocab import BOS, EOS, PAD, UNK, Vocab

MULTI_BYTE = "x = 'déjà vu 日本語のテキスト 😀🎉' # naïve café, Ünïcödé straße\n"


@pytest.fixture(scope="module")
def multi_byte_bpe():
    """A BPE whose tokens cut characters: the bytes of a character it never saw alone (😀),
    and merges across characters (b' \\xe6\\x97\\xa5\\xe6\\x9c\\xac\\xe8': ' 日本' and a third
    of '語')."""
    text = MULTI_BYTE.replace("😀", "") * 20 + "def f(x):\n    return x\n" * 20
    return train_bpe(text, 330)


def _printable(data: bytes) -> str:
    """Bytes in GPT-2's printable stand-ins (Hugging Face's ByteLevel alphabet)."""
    stand_in = {b: chr(b) if i < 188 else chr(256 + i - 188) for i, b in enumerate(BYTE_ORDER)}
    return "".join(stand_in[b] for b in data)


def _hugging_face(bpe):
    """Hugging Face tokenizers' byte-level BPE with the same ids and merges."""
    vocab = {_printable(b): bpe.offset + r for r, b in enumerate(bpe.token_bytes)}
    merges = [(_printable(bpe.token_bytes[a]), _printable(bpe.token_bytes[b]))
              for a, b in bpe.merges]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def test_stream_holds_back_cut_characters_no_later_than_hugging_face(multi_byte_bpe):
    bpe, hf = multi_byte_bpe, _hugging_face(multi_byte_bpe)
    ids = bpe.encode(MULTI_BYTE * 3)
    assert hf.encode(MULTI_BYTE * 3).ids == ids
    cut = [i for i in ids if bpe.token(i).decode("utf-8", "replace") != bpe.token(i).decode(
        "utf-8", "ignore")]
    assert len(set(cut)) >= 5  # tokens that hold part of a character
    ours, theirs = TextStream(bpe), DecodeStream(skip_special_tokens=False)
    pieces = [ours.push(i) for i in ids]
    hf_pieces = [theirs.step(hf, i) or "" for i in ids]
    assert "".join(pieces) + ours.end() == MULTI_BYTE * 3 == "".join(hf_pieces)
    assert not any("\ufffd" in piece for piece in pieces)
    assert "" in pieces  # a step whose token only began a character: nothing shown yet
    for k in range(len(ids)):  # each character shown as soon as it is whole: never later
        assert "".join(pieces[:k]).startswith("".join(hf_pieces[:k]))
    # The mistake it avoids: each token decoded on its own shows a U+FFFD per cut part.
    assert "\ufffd" in "".join(bpe.decode([i]) for i in ids)


def test_stream_equals_decode_for_any_ids(multi_byte_bpe):
    """Random ids, bytes that no character starts or continues included: the pieces joined
    are decode()'s text (PAD and BOS skipped, nothing after EOS, a cut end as U+FFFD)."""
    bpe = multi_byte_bpe
    rng = random.Random(0)
    for _ in range(300):
        ids = [rng.randrange(len(bpe)) for _ in range(rng.randrange(1, 12))]
        stream = TextStream(bpe)
        assert "".join(map(stream.push, ids)) + stream.end() == bpe.decode(ids)
    vocab = Vocab("abé日")
    ids = [vocab.stoi["a"], BOS, PAD, UNK, vocab.stoi["日"], EOS, vocab.stoi["b"]]
    stream = TextStream(vocab)
    assert "".join(map(stream.push, ids)) + stream.end() == vocab.decode(ids) == "a?日"


def test_shown_bytes_are_not_shown_again(multi_byte_bpe):
    bpe = multi_byte_bpe
    ids = bpe.encode(" 日本語")
    stream = TextStream(bpe, shown=" 日".encode())  # healing backed up ' 日', a cut token
    assert "".join(map(stream.push, ids)) + stream.end() == "本語"


class Scripted(nn.Module):
    """A "language model" that says ``script`` (ids) after any prompt: the logits of
    script[k] are 1 at its k-th new token, all others 0."""

    kind = "lm"

    def __init__(self, vocab_size, script):
        super().__init__()
        self.config = SimpleNamespace(vocab_size=vocab_size, pad_id=PAD, max_len=1000)
        self.anchor = nn.Parameter(torch.zeros(1))  # a device to run on
        self.script, self.prompt_len = script, None

    def init_cache(self):
        return []  # one entry per position read

    def forward(self, tokens, cache=None):
        self.prompt_len = self.prompt_len or tokens.size(1)
        cache.extend(range(tokens.size(1)))
        logits = torch.zeros(tokens.size(0), tokens.size(1), self.config.vocab_size)
        logits[:, -1, self.script[len(cache) - self.prompt_len]] = 1.0
        return logits


def test_complete_streams_every_character_whole_and_stops_at_end_of_text(multi_byte_bpe):
    bpe = multi_byte_bpe
    script = bpe.encode(MULTI_BYTE) + [EOS] + bpe.encode("never said")
    steps = []
    text, = complete(Scripted(len(bpe), script), bpe, "#", 1000, emit=steps.append,
                     healing=False)
    assert text == MULTI_BYTE  # stopped at the end-of-text token
    pieces = [piece for piece, in steps]
    assert "".join(pieces) == text and not any("\ufffd" in p for p in pieces)
    assert len(pieces) == len(bpe.encode(MULTI_BYTE)) + 1  # then EOS: nothing more asked
    assert "" in pieces  # held back
    # Characters, not tokens: cut where the characters run out, in the middle of a token.
    for n in (1, 9, 13, 14, 15, 30):
        text, = complete(Scripted(len(bpe), script), bpe, "#", n, healing=False)
        assert text == MULTI_BYTE[:n]
    # A character model of running text never stops at EOS (it never saw one): banned.
    vocab = Vocab("ab")
    text, = complete(Scripted(len(vocab), [5, EOS, 5, 5]), vocab, "a", 3)
    assert text == "bab"  # in EOS's place the next best ("a", first of the ties)


def test_max_new_chars_are_validated(multi_byte_bpe):
    model = Scripted(len(multi_byte_bpe), [10] * 10)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="max_new_chars must be an integer >= 1"):
            complete(model, multi_byte_bpe, "#", bad)


# ------------------------------------------------------------ token healing, a model trained


@pytest.fixture(scope="module")
def trained():
    """(BPE, LlamaLM): a 330-id BPE of the `def` lines of the shipped corpus's training
    files (20,000 characters) and a small Llama-style model trained on them for 120 steps
    (a few seconds): it has learned that "self" follows "def __init__(" as one token."""
    lines = [line for line in stdlib_corpus().train.splitlines(keepends=True)
             if line.lstrip().startswith("def ")]
    text = "".join(lines)[:20_000]
    bpe = train_bpe(text, 330)
    ids = torch.tensor(bpe.encode(text))
    torch.manual_seed(0)
    model = LlamaLM(LlamaConfig.tiny(len(bpe), d_model=48, n_layers=1, d_ff=128, max_len=32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    for _ in range(120):
        starts = torch.randint(0, len(ids) - 33, (32,), generator=generator)
        batch = torch.stack([ids[s: s + 33] for s in starts])  # (32, 33)
        loss = nn.functional.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return bpe, model.eval()


def test_heal_backs_up_the_last_token(trained):
    bpe, _ = trained
    ids = bpe.encode("    def __init__(se")
    assert bpe.token(ids[-1]) == b"se" and bpe.encode("self") != [*bpe.encode("se"), *bpe.encode("lf")]
    kept, allowed, shown = heal(bpe, ids)
    assert kept == ids[:-1] and shown == b"se"
    assert sorted(allowed) == [i for i in range(4, len(bpe)) if bpe.token(i).startswith(b"se")]
    assert {bpe.token(i) for i in allowed} >= {b"se", b"self"}
    # Nothing to heal: one token (the model needs one to read), a special token, a token no
    # other extends, characters as tokens.
    assert heal(bpe, ids[-1:]) == (ids[-1:], None, b"")
    assert heal(bpe, [*ids, EOS]) == ([*ids, EOS], None, b"")
    alone = next(i for i in range(4, len(bpe)) if sum(
        bpe.token(j).startswith(bpe.token(i)) for j in range(4, len(bpe))) == 1)
    assert heal(bpe, [*ids, alone]) == ([*ids, alone], None, b"")
    vocab = Vocab("abcdefs")
    assert heal(vocab, vocab.encode("abc")) == (vocab.encode("abc"), None, b"")


def test_healing_draws_a_first_token_that_starts_with_the_backed_up_bytes(trained):
    bpe, model = trained
    for prompt in ("    def __init__(se", "def ", "    def get_"):
        kept, allowed, shown = heal(bpe, bpe.encode(prompt))
        ids = torch.tensor([kept] * 50)
        choose = _first_within(sampler(3.0, generator=torch.Generator().manual_seed(0)), allowed)
        first = lm_generate(model, ids, 2, choose)[:, len(kept)]  # (50,): hot draws
        assert all(bpe.token(i).startswith(shown) for i in first.tolist())
        if prompt == "def ":
            assert len(set(first.tolist())) > 10  # drawn among many: ' f', ' get', ...


def test_healing_continues_a_prompt_cut_inside_a_word_as_the_training_text(trained):
    """The prompt "    def __init__(se" ends in the token "se", which the training text
    never has before "lf" ("self" is one token): read as it is, the model goes on after "se"
    with a new word; healed, it picks "self"."""
    bpe, model = trained
    prompt = "    def __init__(se"
    plain, = complete(model, bpe, prompt, 12, healing=False)
    healed, = complete(model, bpe, prompt, 12)
    assert healed.startswith("lf") and not plain.startswith("lf")
    # Drawn, too: most healed samples say "self", almost none of the plain ones (the model
    # gives "l..." 0.1% after the token "se", "self" 94% where healing backed it up).
    options = dict(temperature=1.0, samples=20, seed=0)
    healed = complete(model, bpe, prompt, 4, **options)
    plain = complete(model, bpe, prompt, 4, healing=False, **options)
    assert sum(t.startswith("lf") for t in healed) >= 15
    assert sum(t.startswith("lf") for t in plain) <= 2


SHIPPED = os.path.join(CHECKPOINTS, "llm.pt")  # chapter 13's model, once it is shipped


@pytest.mark.skipif(not os.path.exists(SHIPPED), reason="chapter 13's llm.pt is not shipped")
def test_healing_on_the_shipped_chapter_13_model():
    model, bpe, _ = load_checkpoint(SHIPPED)
    tokens = [bpe.token(i) for i in bpe.encode("def f(x):\n    return x")]
    assert b" return" in tokens  # the word with its space: one token
    after_space = [bpe.token(i) for i in bpe.encode("def f(x):\n    ") + bpe.encode("return x")]
    assert b" return" not in after_space and b"return" not in tokens
    prompt = "    def __init__(se"
    assert complete(model, bpe, prompt, 8)[0].startswith("lf")
    assert not complete(model, bpe, prompt, 8, healing=False)[0].startswith("lf")


def test_max_new_counts_characters_for_a_bpe_model(trained):  # probe B01
    bpe, model = trained
    for n in (1, 5, 20, 47):
        texts = complete(model, bpe, "def ", n, temperature=1.0, samples=3, seed=1)
        assert [len(t) for t in texts] == [n] * 3
        assert len(complete(model, bpe, "def ", n, healing=False)[0]) == n


# ---------------------------------------------------------------------- tfcourse sample


@pytest.fixture(scope="module")
def bpe_llama_checkpoint(trained, tmp_path_factory):
    bpe, model = trained
    path = str(tmp_path_factory.mktemp("ch13") / "llama-bpe.pt")
    save_checkpoint(path, model, SimpleNamespace(name="lm-bpe", vocab=bpe), TrainConfig(), 120)
    return path


def test_sample_a_bpe_llama_checkpoint(bpe_llama_checkpoint, trained, capsys):
    bpe, model = trained
    capsys.readouterr()
    argv = ["sample", "--checkpoint", bpe_llama_checkpoint, "--threads", "1", "--greedy"]
    assert main([*argv, "--prompt", "    def __init__(se", "--max-new", "20"]) == 0
    out = capsys.readouterr().out
    assert out == "    def __init__(se" + complete(model, bpe, "    def __init__(se", 20)[0] + "\n"
    assert out.startswith("    def __init__(self") and len(out) == 19 + 20 + 1
    assert main([*argv, "--prompt", "    def __init__(se", "--max-new", "20", "--no-heal"]) == 0
    plain = capsys.readouterr().out
    assert plain == "    def __init__(se" + complete(model, bpe, "    def __init__(se", 20,
                                                    healing=False)[0] + "\n"
    assert not plain.startswith("    def __init__(self")
    assert main([*argv, "--prompt", "def ", "--samples", "2", "--max-new", "30"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "--- sample 1 of 2 ---" and lines[1].startswith("def ")


@pytest.mark.parametrize("prompt, message", [
    ("", "the prompt is empty"),
    ("def \udcff\udcfe", "the prompt is not UTF-8 text (character 5 is the byte 0xff)"),  # B31
    ("def \ud800", "the prompt is not UTF-8 text (character 5 is the lone surrogate 0xd800)"),
])
def test_sample_refuses_a_prompt_out_of_the_tokenizers_reach(bpe_llama_checkpoint, prompt,
                                                            message, capsys):
    capsys.readouterr()
    assert main(["sample", "--checkpoint", bpe_llama_checkpoint, "--prompt", prompt]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and not capsys.readouterr().out
