"""Chapter 11's byte-level BPE: equal to tiktoken (encodings) and to Hugging Face tokenizers
(merges), offline, with both built here; the incremental counts equal to a recount; the
rules the module's docstring states; its file and its bad input."""

import json
from collections import Counter

import pytest
import tiktoken
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from tfcourse.corpora import language_id_task, mlm_task, stdlib_corpus
from tfcourse.tokens import (
    BPE,
    BYTE_ORDER,
    GPT2_PATTERN,
    _encode_piece,
    count_pairs,
    decode,
    encode,
    learn_merges,
    merge,
    pre_tokenize,
    train_bpe,
)
from tfcourse.vocab import BOS, EOS, PAD, SPECIALS, Vocab

CORPUS = stdlib_corpus()
CLASSIFY, MLM = language_id_task(), mlm_task()
EXTRA = ["<|endoftext|>"]


@pytest.fixture(scope="module")
def python_bpe():
    return train_bpe(CORPUS.train, 1024, special_tokens=EXTRA)


def _held_out():
    """name -> a held-out text of each kind the course ships, and the hard cases."""
    return {
        "python source (test files)": CORPUS.test,
        "classify languages (test texts)": "\n".join(t for t, _ in CLASSIFY.test),
        "mlm languages (test texts)": "\n".join(t for t, _ in MLM.test),
        "numbers": "0 7 42 1234567 3.14159 -2e-10 2026-11-26 1,000,000 0x1F 10**100",
        "emoji": "ok 👍🏽 👨‍👩‍👧 🇫🇷 ❤️ 🙂🙂🙂",
        "other scripts": "Ελληνικά русский 中文字符 日本語のテキスト العربية עברית हिन्दी",
        "spaces and newlines": "a  b   c\n\n\n    d\t\te \r\n" + " " * 17 + "\n" * 5 + "x   ",
        "special tokens": "end<|endoftext|>start <eos> and <pad><|endoftext|>",
        "a character a merge splits": "é" * 3 + "ééé" + "€" + "\U0001f600",
    }


HELD_OUT = _held_out()


def _hf_bpe(texts, vocab_size):
    """Hugging Face tokenizers' byte-level BPE trained on `texts`: GPT-2's pattern, no
    prefix space, every byte in the alphabet, our specials first."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[*SPECIALS, *EXTRA],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def _printable(data: bytes) -> str:
    """Bytes in GPT-2's printable stand-ins (Hugging Face's ByteLevel alphabet)."""
    stand_in = {b: chr(b) if i < 188 else chr(256 + i - 188) for i, b in enumerate(BYTE_ORDER)}
    return "".join(stand_in[b] for b in data)


@pytest.mark.parametrize("texts, vocab_size", [([CORPUS.train], 1024),
                                               ([t for t, _ in CLASSIFY.train], 700)],
                         ids=["python", "classify"])
def test_merges_equal_hugging_face_bpe_trainer(texts, vocab_size):
    ours = train_bpe(texts, vocab_size, special_tokens=EXTRA)
    hf = json.loads(_hf_bpe(texts, vocab_size).to_str())["model"]["merges"]
    hf = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in hf]
    mine = [(_printable(ours.token_bytes[a]), _printable(ours.token_bytes[b])) for a, b in ours.merges]
    assert len(mine) == vocab_size - 5 - 256
    assert mine == hf


@pytest.mark.parametrize("name", HELD_OUT)
def test_encoding_equals_tiktoken_built_from_the_learned_ranks(python_bpe, name):
    text = HELD_OUT[name]
    encoding = tiktoken.Encoding("tfcourse", **python_bpe.tiktoken_parts())
    ids = python_bpe.encode(text, allowed_special="all")
    assert ids == encoding.encode(text, allowed_special="all")
    assert python_bpe.decode(ids) == text.split("<eos>")[0].replace("<pad>", "")
    ordinary = python_bpe.encode(text)  # special spellings as text: tiktoken's encode_ordinary
    assert ordinary == encoding.encode_ordinary(text) and python_bpe.decode(ordinary) == text


def test_a_merge_can_split_a_character_and_decoding_shows_it_as_replacement(python_bpe):
    split = [t for t in python_bpe.encode(HELD_OUT["a character a merge splits"])
             if python_bpe.token(t).decode("utf-8", "replace") != python_bpe.token(t).decode(
                 "utf-8", "ignore")]
    assert split  # a token that holds part of a character
    ids = python_bpe.encode("é")
    assert len(python_bpe.encode("\U0001f600")) > 1
    assert python_bpe.decode(python_bpe.encode("\U0001f600")[:1]) == "\ufffd"
    assert python_bpe.decode(ids) == "é"


@pytest.mark.parametrize("byte_order", [range(256), BYTE_ORDER], ids=["by value", "hf"])
def test_incremental_training_equals_recounting_every_step(byte_order):
    text = CORPUS.train[:20_000]
    words = {tuple(w.encode()): f for w, f in Counter(pre_tokenize(text)).items()}
    key = {b: i for i, b in enumerate(byte_order)}
    merges = []
    for new_id in range(256, 400):
        counts = count_pairs(words)
        pair = max(counts, key=lambda p: (counts[p], -key.get(p[0], p[0]), -key.get(p[1], p[1])))
        merges.append(pair)
        words = {merge(w, pair, new_id): f for w, f in words.items()}
    assert learn_merges(text, 144, byte_order=byte_order) == merges


def test_pairs_overlap_and_merges_go_left_to_right():
    assert count_pairs({(1, 1, 1): 5, (1, 2): 2}) == {(1, 1): 10, (1, 2): 2}
    assert merge((1, 1, 1), (1, 1), 9) == (9, 1)
    assert merge((1, 1, 1, 1), (1, 1), 9) == (9, 9)
    assert pre_tokenize("def f(x):\n    return x1") == [
        "def", " f", "(", "x", "):", "\n   ", " return", " x", "1"]


def test_special_tokens_are_never_merged_nor_split():
    text = "ab<|endoftext|>ab<|endoftext|>" * 50
    bpe = train_bpe(text, 300, special_tokens=EXTRA)
    assert all(b"<|" not in t and b"|>" not in t for t in bpe.token_bytes)
    assert bpe.token(4) == b"<|endoftext|>" and bpe.token(5) == b"\x00"
    assert bpe.encode("ab<|endoftext|>", allowed_special="all") == [*bpe.encode("ab"), 4]
    assert bpe.encode("<eos>x", allowed_special={"<eos>"}) == [EOS, *bpe.encode("x")]


def test_special_spellings_are_text_unless_allowed(python_bpe):  # issue 35: B28, D03
    text = 'x = "<eos>" + y<pad>a<unk>b<bos>c<|endoftext|>'
    encoding = tiktoken.Encoding("tfcourse", **python_bpe.tiktoken_parts())
    ids = python_bpe.encode(text)
    assert ids == encoding.encode(text, disallowed_special=()) and set(ids).isdisjoint(range(5))
    assert python_bpe.decode(ids) == text
    only = python_bpe.encode(text, allowed_special={"<|endoftext|>", "<unk>"})
    assert only == encoding.encode(text, allowed_special={"<|endoftext|>", "<unk>"},
                                   disallowed_special=())
    assert [i for i in only if i < 5] == [3, 4]
    for allowed, error, said in [
        ("<eos>", ValueError, r"allowed_special must be 'all' or a set of special tokens, got the "
                              r"string '<eos>' \(for one: \{'<eos>'\}\)"),
        ({"<sep>"}, ValueError, r"allowed_special holds \['<sep>'\], not special tokens of this"),
        (5, TypeError, "allowed_special must be 'all' or a set of special tokens, got int"),
    ]:
        with pytest.raises(error, match=said):
            python_bpe.encode("a", allowed_special=allowed)


def test_it_has_the_character_vocabularys_interface(python_bpe):
    vocab = Vocab.from_texts([CORPUS.train])
    for tokenizer in (vocab, python_bpe):
        ids = tokenizer.encode("def f():")
        assert tokenizer.decode([BOS, *ids, EOS, 7, PAD]) == "def f():"
        assert len(tokenizer) > max(ids)
    assert len(python_bpe) == 1024 and python_bpe.symbols[0] == "<|endoftext|>"


def test_save_and_load_give_the_same_tokenizer(python_bpe, tmp_path):
    path = tmp_path / "bpe.json"
    python_bpe.save(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert (data["format"], data["version"], len(data["merges"])) == ("tfcourse-bpe", 1, 763)
    assert data["tokens"][0] == python_bpe.token_bytes[256].decode()  # readable
    loaded = BPE.load(path)
    assert loaded == python_bpe and loaded.encode(CORPUS.val) == python_bpe.encode(CORPUS.val)


@pytest.mark.parametrize("content, said", [
    ("{not json", "is not a tfcourse BPE tokenizer (not JSON"),
    ('{"format": "other"}', "is not a tfcourse BPE tokenizer (no format 'tfcourse-bpe')"),
    ('{"format": "tfcourse-bpe", "version": 2}', "is a BPE tokenizer of version 2; this tfcourse "
                                                 "reads version 1"),
    ('{"format": "tfcourse-bpe", "version": 1, "pattern": "x"}', "is a corrupt BPE tokenizer"),
    ('{"format": "tfcourse-bpe", "version": 1, "pattern": "x", "special_tokens": [], '
     '"merges": [[4, 999]]}', "is a corrupt BPE tokenizer (merge 0 (4, 999) names a rank"),
    ('{"format": "tfcourse-bpe", "version": 1, "pattern": "(", "special_tokens": [], "merges": []}',
     "is a corrupt BPE tokenizer (pattern must be a regular expression, got '('"),
])
def test_a_bad_file_gets_one_clear_line(tmp_path, content, said):
    path = tmp_path / "bpe.json"
    path.write_text(content)
    with pytest.raises(ValueError) as raised:
        BPE.load(path)
    assert said in str(raised.value) and "\n" not in str(raised.value)


def test_a_vocabulary_smaller_than_the_bytes_is_refused():
    with pytest.raises(ValueError, match=r"vocab_size must be an int of at least 260 \(the specials "
                                         r"and 256 bytes\), got 255"):
        train_bpe("abc", 255)
    assert len(train_bpe("abc", 260)) == 260 and len(train_bpe("abc", 1000)) == 262  # no pair left
    assert GPT2_PATTERN.startswith("'s|'t")


def test_the_functions_work_on_ranks_as_the_tokenizer_does(python_bpe):
    text = CORPUS.val[:3000]
    ranks = encode(text, python_bpe.merges)
    assert [python_bpe.offset + r for r in ranks] == python_bpe.encode(text)
    assert decode(ranks, python_bpe.token_bytes) == text
    assert decode([0xE2, 0x82], python_bpe.token_bytes) == "\ufffd"  # the first 2 bytes of "€"


# ---------------------------------------------------------------- in the tools: lm-bpe


@pytest.fixture(scope="module")
def bpe_checkpoint(tmp_path_factory):
    """A tiny DecoderLM on the lm task in BPE tokens (300 ids), saved untrained."""
    from tfcourse.checkpoint import save_checkpoint
    from tfcourse.corpora import lm_task
    from tfcourse.training import TrainConfig
    from tfcourse.variants import DecoderLM, DecoderLMConfig

    task = lm_task(block_size=16, bpe_vocab=300)
    model = DecoderLM(DecoderLMConfig.tiny(len(task.vocab), max_len=16))
    path = tmp_path_factory.mktemp("bpe") / "lm-bpe.pt"
    save_checkpoint(str(path), model, task, TrainConfig(), step=0)
    return path, task


def test_the_lm_task_takes_a_bpe_tokenizer_and_its_checkpoint_carries_it(bpe_checkpoint):
    from tfcourse.checkpoint import load_checkpoint
    from tfcourse.recipes import RECIPES

    path, task = bpe_checkpoint
    assert task.name == "lm-bpe" and isinstance(task.vocab, BPE) and len(task.vocab) == 300
    assert task.train.ids.tolist()[:20] == task.vocab.encode(CORPUS.train)[:20]
    model, vocab, state = load_checkpoint(str(path))
    assert vocab == task.vocab and state["tokenizer"]["merges"] == [list(m) for m in task.vocab.merges]
    assert 7 < task.bits_per_byte(model, task.val[:20]) < 12  # untrained: about log2(300) / bytes per token
    assert "lm-bpe" in RECIPES and RECIPES["lm-bpe"].model == RECIPES["lm"].model


def test_sample_reads_a_bpe_checkpoint(bpe_checkpoint, capsys):
    from tfcourse import cli

    path, _ = bpe_checkpoint
    assert cli.main(["sample", "--checkpoint", str(path), "--prompt", "déf ", "--max-new", "5",
                     "--greedy", "--threads", "1"]) == 0
    assert capsys.readouterr().out.startswith("déf ")


def test_a_checkpoint_with_a_corrupt_tokenizer_gets_one_line(bpe_checkpoint, tmp_path, capsys):
    import torch

    from tfcourse import cli
    from tfcourse.checkpoint import seal

    path, _ = bpe_checkpoint
    state = torch.load(path, weights_only=True)
    state["tokenizer"]["version"] = 7
    torch.save(seal(state), tmp_path / "bad.pt")  # written so: the file's digest is its own
    assert cli.main(["sample", "--checkpoint", str(tmp_path / "bad.pt"), "--threads", "1"]) != 0
    err = capsys.readouterr().err.strip()
    assert err.endswith("is not a readable tfcourse checkpoint (ValueError: its tokenizer is a BPE "
                        "tokenizer of version 7; this tfcourse reads version 1)") and "\n" not in err, err


def test_the_tie_rule_is_the_one_difference_that_had_to_be_matched():
    """Ties by byte value (the exercise's rule) give other merges than Hugging Face's order
    (BYTE_ORDER, train_bpe's rule) on the same text, from a pair of equal counts on."""
    text = CORPUS.train[:200_000]
    by_value, by_stand_in = learn_merges(text, 300), learn_merges(text, 300, byte_order=BYTE_ORDER)
    first = next(i for i, (a, b) in enumerate(zip(by_value, by_stand_in)) if a != b)
    assert first > 0 and by_value[:first] == by_stand_in[:first]
    words = Counter(tuple(w.encode()) for w in pre_tokenize(text))
    for i, pair in enumerate(by_value[:first]):
        words = Counter({merge(w, pair, 256 + i): f for w, f in words.items()})
    counts = count_pairs(words)
    assert counts[by_value[first]] == counts[by_stand_in[first]]  # a tie, broken two ways


def test_tfcourse_train_task_lm_bpe_saves_its_tokenizer(tmp_path, capsys):
    from tfcourse import cli
    from tfcourse.checkpoint import load_checkpoint

    out = tmp_path / "lm-bpe.pt"
    assert cli.main(["train", "--task", "lm-bpe", "--steps", "2", "--eval-every", "2", "--d-model", "32",
                     "--n-layers", "1", "--d-ff", "64", "--n-heads", "2", "--out", str(out),
                     "--no-progress", "--threads", "1", "--examples", "1"]) == 0
    assert "task lm-bpe: " in capsys.readouterr().out
    _, vocab, state = load_checkpoint(str(out))
    assert isinstance(vocab, BPE) and len(vocab) == 1024 and state["task"] == "lm-bpe"


@pytest.fixture(scope="module")
def hf_python():
    return _hf_bpe([CORPUS.train], 1024)


@pytest.mark.parametrize("name", HELD_OUT)
def test_hugging_face_cuts_held_out_text_into_the_same_tokens(python_bpe, hf_python, name):
    """The same tokens (as bytes; Hugging Face numbers the single bytes in another order)."""
    back = {c: bytes([b]) for b, c in ((b, _printable(bytes([b]))) for b in range(256))}
    theirs = [t.encode() if t in [*SPECIALS, *EXTRA] else b"".join(back[c] for c in t)
              for t in hf_python.encode(HELD_OUT[name]).tokens]
    ours = python_bpe.encode(HELD_OUT[name], allowed_special="all")  # tokenizers: always specials
    assert theirs == [python_bpe.token(i) for i in ours]


def _merge_pass_by_pass(word, merges):
    """The plain rule: the pair of the lowest rank, merged everywhere, pass after pass."""
    while len(word) > 1:
        pair = min(zip(word, word[1:]), key=lambda p: merges.get(p, float("inf")))
        if pair not in merges:
            break
        word = merge(word, pair, merges[pair])
    return list(word)


def test_the_heap_merges_what_the_passes_merge(python_bpe):
    """_encode_piece (a heap over a linked list) against the rule, pass after pass, on
    pieces that repeat and overlap (ties: left to right) and on pieces of the test files."""
    import random

    rng = random.Random(0)
    pieces = ["a" * n for n in range(1, 40)] + [" " * n for n in range(1, 70)]
    pieces += ["".join(rng.choice("ab ") for _ in range(rng.randrange(1, 200))) for _ in range(300)]
    pieces += [CORPUS.test[i:i + rng.randrange(1, 300)] for i in range(0, 40_000, 97)]
    for merges in (python_bpe.merges, {(97, 97): 256, (256, 97): 257, (256, 256): 258, (97, 256): 259}):
        for piece in pieces:
            assert _encode_piece(piece, merges) == _merge_pass_by_pass(tuple(piece.encode()), merges), piece


def test_a_long_word_encodes_as_tiktoken_does(python_bpe):  # issue 35, E4: in O(n log n)
    import random

    rng = random.Random(1)
    encoding = tiktoken.Encoding("tfcourse", **python_bpe.tiktoken_parts())
    for text in ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(20_000)),
                 "self" * 5_000, "def" + "_" * 3_000 + "x" * 3_000, "1234567890" * 1_000]:
        ids = python_bpe.encode(text)
        assert ids == encoding.encode(text) and python_bpe.decode(ids) == text
