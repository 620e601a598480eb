"""Byte-level BPE (chapter 11): text <-> ids through UTF-8 bytes and learned merges, with
the interface of the character Vocab (encode, decode, len, the specials' ids), so that
batches, tasks, checkpoints and the CLI take either.

    bpe = train_bpe(text, vocab_size=1024)     # GPT-2's pattern, 764 merges
    ids = bpe.encode("def f(x):\\n    return x")
    bpe.decode(ids)                            # the text again

Ids: 0..3 are PAD, BOS, EOS, UNK (those of vocab.py), then any other special tokens, then
the 256 bytes (byte b is id n_specials + b), then one id per merge, in the order learned.

Training (Sennrich et al. 2016, byte-level as GPT-2): the text is cut into pre-tokens by
a regular expression (GPT-2's by default: letters, digits, other symbols, spaces, each
with at most one leading space), so that no merge crosses a word's boundary; each distinct
pre-token is a word, a sequence of ids, with its frequency. A pair's count is

    count(a, b) = sum over words w of freq(w) * #{i : w[i] = a, w[i + 1] = b}

(every adjacent position: "aaa" holds the pair (a, a) twice, though one merge can take only
one of them, as in GPT-2, Hugging Face tokenizers, minbpe). Each step merges the pair of
the largest count into a new id, in every word, left to right ("aaa" -> "Aa"), and updates
the counts of the words that held it only (pair -> words index), instead of recounting.
Ties: the pair whose first token comes first, then whose second does, in Hugging Face
tokenizers' order: the bytes in the order of their printable stand-ins (GPT-2's
byte-to-unicode table: the printable bytes 33-126, 161-172, 174-255, then the others),
then merged tokens by age. So the merges are those of tokenizers' BpeTrainer.

Encoding merges by rank, as GPT-2 and tiktoken do: within a pre-token, repeatedly merge
the adjacent pair learned earliest, until no adjacent pair is a merge. Decoding joins the
bytes and decodes them as UTF-8, a character cut between tokens shown as U+FFFD.
Special tokens are cut out of the text before anything else: never merged, never split.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

import regex
import torch

from tfcourse.vocab import BOS, EOS, PAD, SPECIALS

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
FORMAT, VERSION = "tfcourse-bpe", 1

# GPT-2's printable stand-ins for bytes: the bytes that are printable Latin-1 characters
# keep their place, the others follow. Hugging Face tokenizers orders the bytes this way.
_PRINTABLE = [*range(33, 127), *range(161, 173), *range(174, 256)]
BYTE_ORDER = _PRINTABLE + [b for b in range(256) if b not in _PRINTABLE]


def pre_tokenize(text: str, pattern: str = GPT2_PATTERN) -> list[str]:
    """The pre-tokens of ``text``: the matches of ``pattern``, which cover the text."""
    return regex.findall(pattern, text)


def count_pairs(words: dict[tuple[int, ...], int]) -> Counter:
    """(a, b) -> its count over every adjacent position of every word, times the word's
    frequency. words: word (a tuple of ids) -> frequency."""
    counts = Counter()
    for word, freq in words.items():
        for pair in zip(word, word[1:]):
            counts[pair] += freq
    return counts


def merge(word: Sequence[int], pair: tuple[int, int], new_id: int) -> tuple[int, ...]:
    """``word`` with every occurrence of ``pair`` replaced by ``new_id``, left to right
    (a, a, a -> new, a)."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


class BPE:
    """A byte-level BPE tokenizer: its special tokens, its merges (in the order learned)
    and the pre-tokenizer's pattern. Made by train_bpe or BPE.load."""

    def __init__(self, merges: Iterable[tuple[int, int]], pattern: str = GPT2_PATTERN,
                 special_tokens: Iterable[str] = ()):
        extra = list(special_tokens)
        if len(set(extra)) != len(extra) or set(extra) & set(SPECIALS) or "" in extra:
            raise ValueError(f"special_tokens must be distinct, non-empty and not {SPECIALS}, "
                             f"got {extra}")
        self.specials = [*SPECIALS, *extra]
        self.pattern = pattern
        self.offset = len(self.specials)  # the id of byte 0
        self.token_bytes = [b""] * self.offset + [bytes([b]) for b in range(256)]
        self.merges: dict[tuple[int, int], int] = {}  # pair -> its new id (= its rank)
        for a, b in merges:
            if not (self.offset <= a < len(self.token_bytes) and self.offset <= b < len(self.token_bytes)):
                raise ValueError(f"merge {len(self.merges)} ({a}, {b}) names an id that is no byte "
                                 f"or earlier merge (ids {self.offset}..{len(self.token_bytes) - 1})")
            self.merges[(a, b)] = len(self.token_bytes)
            self.token_bytes.append(self.token_bytes[a] + self.token_bytes[b])
        self._special_re = regex.compile("|".join(map(regex.escape, sorted(self.specials, key=len,
                                                                           reverse=True))))
        self._words = regex.compile(pattern)
        self._cache: dict[str, list[int]] = {}

    # -- the Vocab interface -------------------------------------------------------------

    pad_id, bos_id, eos_id = PAD, BOS, EOS

    def __len__(self) -> int:
        return len(self.token_bytes)

    def __eq__(self, other):
        return (isinstance(other, BPE) and self.specials == other.specials
                and self.pattern == other.pattern and self.merges == other.merges)

    @property
    def symbols(self) -> list[str]:
        """Every token but the four specials, as text (a cut character as U+FFFD)."""
        return [*self.specials[len(SPECIALS):],
                *(b.decode("utf-8", "replace") for b in self.token_bytes[self.offset:])]

    def encode(self, text: str) -> list[int]:
        """Text -> ids: special tokens' texts as their ids, each pre-token merged by rank."""
        ids, start = [], 0
        for found in self._special_re.finditer(text):
            ids += self._encode_ordinary(text[start:found.start()])
            ids.append(self.specials.index(found.group()))
            start = found.end()
        return ids + self._encode_ordinary(text[start:])

    def _encode_ordinary(self, text: str) -> list[int]:
        ids = []
        for piece in self._words.findall(text):
            if piece not in self._cache:
                self._cache[piece] = self._encode_piece(piece)
            ids += self._cache[piece]
        return ids

    def _encode_piece(self, piece: str) -> list[int]:
        word = tuple(self.offset + b for b in piece.encode("utf-8"))
        while len(word) > 1:
            pair = min(zip(word, word[1:]), key=lambda p: self.merges.get(p, len(self)))
            if pair not in self.merges:
                break
            word = merge(word, pair, self.merges[pair])
        return list(word)

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Ids -> text: stops at the first EOS, skips PAD and BOS (as Vocab.decode), other
        specials as their text; the bytes decoded together, a cut character as U+FFFD."""
        out = bytearray()
        for i in ids.tolist() if isinstance(ids, torch.Tensor) else ids:
            if i == EOS:
                break
            if i not in (PAD, BOS):
                out += self.token_bytes[i] if i >= self.offset else self.specials[i].encode()
        return out.decode("utf-8", errors="replace")

    # -- a plain, readable file ----------------------------------------------------------

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "pattern": self.pattern,
                "special_tokens": self.specials[len(SPECIALS):],
                "merges": [[a, b] for a, b in self.merges],
                "tokens": [b.decode("utf-8", "backslashreplace") for b in
                           self.token_bytes[self.offset + 256:]]}  # to read, not read back

    @classmethod
    def from_dict(cls, data: dict, where: str = "tokenizer") -> BPE:
        """The tokenizer of to_dict(); ValueError in one line for anything else."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{where} is not a tfcourse BPE tokenizer (no format {FORMAT!r})")
        if data.get("version") != VERSION:
            raise ValueError(f"{where} is a BPE tokenizer of version {data.get('version')!r}; "
                             f"this tfcourse reads version {VERSION}")
        try:
            merges = [(int(a), int(b)) for a, b in data["merges"]]
            return cls(merges, str(data["pattern"]), data["special_tokens"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{where} is a corrupt BPE tokenizer ({error})") from None

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, ensure_ascii=False, indent=0)

    @classmethod
    def load(cls, path: str) -> BPE:
        """The tokenizer saved at ``path``; ValueError in one line for a corrupt file or
        another version."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{path} is not a tfcourse BPE tokenizer (not JSON: {error})") from None
        return cls.from_dict(data, path)

    def tiktoken_parts(self) -> dict:
        """The keyword arguments of tiktoken.Encoding for the same tokenizer: pat_str,
        mergeable_ranks (bytes -> id: the merges' ids are their ranks) and special_tokens."""
        return {"pat_str": self.pattern,
                "mergeable_ranks": {b: i for i, b in enumerate(self.token_bytes) if i >= self.offset},
                "special_tokens": {s: i for i, s in enumerate(self.specials)}}


def _tie_key(token: int, offset: int) -> int:
    """Where a token comes in the tie rule's order: a byte by BYTE_ORDER, a merge by age."""
    return _BYTE_RANK[token - offset] if token < offset + 256 else token


_BYTE_RANK = [BYTE_ORDER.index(b) for b in range(256)]


def train_bpe(text: str | Iterable[str], vocab_size: int, pattern: str = GPT2_PATTERN,
              special_tokens: Iterable[str] = ()) -> BPE:
    """Learn vocab_size - 256 - (4 + len(special_tokens)) merges from ``text`` (one text or
    several): fewer if no pair is left. Each step merges the pair of the largest count
    (ties as the module says) and updates the counts of the words that held it."""
    bpe = BPE((), pattern, special_tokens)
    if not isinstance(vocab_size, int) or vocab_size < len(bpe):
        raise ValueError(f"vocab_size must be an int of at least {len(bpe)} (the specials and "
                         f"256 bytes), got {vocab_size!r}")
    texts = [text] if isinstance(text, str) else list(text)
    freqs = Counter()
    for t in texts:
        for part in bpe._special_re.split(t):  # no merge reaches into a special token
            freqs.update(pre_tokenize(part, pattern))
    words = [tuple(bpe.offset + b for b in w.encode("utf-8")) for w in freqs]
    counts = list(freqs.values())
    pairs, where = Counter(), defaultdict(set)  # pair -> count, pair -> the words holding it
    for w, word in enumerate(words):
        for pair in zip(word, word[1:]):
            pairs[pair] += counts[w]
            where[pair].add(w)

    def entry(pair):  # heap order: largest count, then the tie rule
        return (-pairs[pair], _tie_key(pair[0], bpe.offset), _tie_key(pair[1], bpe.offset), pair)

    heap = [entry(p) for p in pairs]
    heapq.heapify(heap)
    merges = []
    while len(bpe) + len(merges) < vocab_size and heap:
        count, *_, pair = heapq.heappop(heap)
        if -count != pairs[pair]:  # stale: counts only fall, so push the current one back
            if pairs[pair] > 0:
                heapq.heappush(heap, entry(pair))
            continue
        new_id = len(bpe) + len(merges)
        merges.append(pair)
        changed = set()
        for w in where.pop(pair):
            old = words[w]
            new = merge(old, pair, new_id)
            if new == old:
                continue
            for p in zip(old, old[1:]):
                pairs[p] -= counts[w]
            for p in zip(new, new[1:]):
                pairs[p] += counts[w]
                where[p].add(w)
                if new_id in p:
                    changed.add(p)
            words[w] = new
        del pairs[pair]
        for p in changed:
            heapq.heappush(heap, entry(p))
    return BPE(merges, pattern, special_tokens)
