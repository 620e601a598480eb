"""Byte-level BPE (chapter 11): text <-> ids through UTF-8 bytes and learned merges, with
the interface of the character Vocab (encode, decode, len, the specials' ids), so that
batches, tasks, checkpoints and the CLI take either.

    bpe = train_bpe(text, vocab_size=1024)     # GPT-2's pattern, 764 merges
    ids = bpe.encode("def f(x):\\n    return x")
    bpe.decode(ids)                            # the text again

The functions work on ranks, as minbpe and tiktoken's _educational.py do: byte b is rank b,
merge i makes rank 256 + i (GPT-2's released vocabulary orders the bytes by their printable
stand-ins instead: "!" is 0, a space 220). A BPE tokenizer's ids put its special tokens
first: 0..3 are PAD, BOS, EOS, UNK (those of vocab.py), then any others; rank r is id n_specials + r.

Training (Sennrich et al. 2016, byte-level as GPT-2): the text is cut into pre-tokens by
a regular expression (GPT-2's by default: letters, digits, other symbols, spaces, each
with at most one leading space), so that no merge crosses a word's boundary; each distinct
pre-token is a word, a sequence of ids, with its frequency. A pair's count is

    count(a, b) = sum over words w of freq(w) * #{i : w[i] = a, w[i + 1] = b}

(every adjacent position: "aaa" holds the pair (a, a) twice, though one merge can take only
one of them, as in Sennrich et al.'s subword-nmt, Hugging Face tokenizers, minbpe). Each
step merges the pair of the largest count into a new id, in every word, left to right
("aaa" -> "Aa"), and updates the counts of the words that held it only (pair -> words
index), instead of recounting.
Ties: the pair whose first token comes first, then whose second does, in an order of the
bytes (``byte_order``: by value for learn_merges) followed by the merged tokens by age.
train_bpe takes Hugging Face tokenizers' order: the bytes in the order of their printable
stand-ins (GPT-2's byte-to-unicode table: the printable bytes 33-126, 161-172, 174-255,
then the others), so that its merges are those of tokenizers' BpeTrainer.

Encoding merges by rank, as GPT-2 and tiktoken do: within a pre-token, repeatedly merge
the adjacent pair learned earliest, until no adjacent pair is a merge: with a min-heap of
pairs by rank over a linked list of tokens (O(n log n) in a pre-token's length), so that
encoding time grows with the text, not with its length times the merges that apply. Decoding joins the
bytes and decodes them as UTF-8, a character cut between tokens shown as U+FFFD.
Special tokens are cut out of the training text before anything else: never merged, never
split. Encoding reads their spellings as ordinary text unless told otherwise (allowed_special,
as tiktoken): a user who types ``<eos>`` means the five characters, not the end of the text.
"""

from __future__ import annotations

import codecs
import hashlib
import heapq
import json
import numbers
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence

import regex
import torch

from tfcourse.vocab import BOS, EOS, PAD, SPECIALS, UNK

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
FORMAT, VERSION = "tfcourse-bpe", 1

# GPT-2's printable stand-ins for bytes: the bytes that are printable Latin-1 characters
# keep their place, the others follow. Hugging Face tokenizers orders the bytes this way.
_PRINTABLE = [*range(33, 127), *range(161, 173), *range(174, 256)]
BYTE_ORDER = _PRINTABLE + [b for b in range(256) if b not in _PRINTABLE]


def pre_tokenize(text: str, pattern: str = GPT2_PATTERN) -> list[str]:
    """The pre-tokens of ``text``: the matches of ``pattern`` (GPT-2's cover every text) and,
    for a pattern that leaves some text uncovered (``\\w+`` skips spaces), each stretch of
    it too, so that the pre-tokens always join to the text: nothing is dropped."""
    compiled = regex.compile(pattern)
    if not compiled.groups:  # findall gives the whole matches: they cover the text if their
        pieces = compiled.findall(text)  # lengths add up (they are disjoint and in order)
        if sum(map(len, pieces)) == len(text):
            return pieces
    pieces, end = [], 0
    for match in compiled.finditer(text):
        if match.start() > end:
            pieces.append(text[end:match.start()])
        if match.end() > match.start():
            pieces.append(match.group())
        end = match.end()
    return pieces + [text[end:]] if end < len(text) else pieces


def check_pattern(pattern: str) -> str:
    """``pattern`` if it is a regular expression, else ValueError (TypeError) in one line."""
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a regular expression (a str), got {type(pattern).__name__}")
    try:
        regex.compile(pattern)
    except regex.error as error:
        raise ValueError(f"pattern must be a regular expression, got {pattern!r} ({error})") from None
    return pattern


def check_specials(special_tokens: Iterable[str]) -> list[str]:
    """``special_tokens`` as a list: distinct non-empty strings, not vocab.py's four, given as
    a sequence (one string would be one token per character); else TypeError / ValueError."""
    if isinstance(special_tokens, (str, bytes)):
        raise TypeError(f"special_tokens must be a sequence of strings, got the string "
                        f"{special_tokens!r} (for one token: [{special_tokens!r}])")
    try:
        extra = list(special_tokens)
    except TypeError:
        raise TypeError(f"special_tokens must be a sequence of strings, got "
                        f"{type(special_tokens).__name__}") from None
    odd = [t for t in extra if not isinstance(t, str)]
    if odd:
        raise TypeError(f"special_tokens must be a sequence of strings, got {odd[0]!r} "
                        f"({type(odd[0]).__name__}) in {extra!r}")
    if len(set(extra)) != len(extra) or set(extra) & set(SPECIALS) or "" in extra:
        raise ValueError(f"special_tokens must be distinct, non-empty and not {SPECIALS}, "
                         f"got {extra}")
    return extra


def check_text(text: str, name: str = "text") -> str:
    """``text`` if it is a str that UTF-8 can encode, else TypeError / ValueError in one line
    naming ``name`` (bytes: decode them first; a lone surrogate: its position)."""
    if not isinstance(text, str):
        hint = " (decode it first, e.g. data.decode('utf-8'))" if isinstance(text, (bytes, bytearray)) else ""
        raise TypeError(f"{name} must be a str, got {type(text).__name__}{hint}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{name} holds a lone surrogate {text[error.start]!r} at position "
                         f"{error.start}, which is no character: UTF-8 cannot encode it") from None
    return text


def canonical(data: dict) -> dict:
    """What a tokenizer file's digest covers: its format, version, pattern, special tokens
    and merges (not its `tokens`, which are read from the merges, nor the digest itself)."""
    return {key: data.get(key) for key in ("format", "version", "pattern", "special_tokens",
                                           "merges")}


def digest(data: dict) -> str:
    """The SHA-256 of canonical(data) as JSON (keys sorted, no spaces, ASCII)."""
    text = json.dumps(canonical(data), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _specials_re(special_tokens: Iterable[str]):
    """A pattern that finds the special tokens, the longest first (None when there are none)."""
    found = sorted(special_tokens, key=len, reverse=True)
    return regex.compile("|".join(map(regex.escape, found))) if found else None


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


def learn_merges(text: str | Iterable[str], n_merges: int, pattern: str = GPT2_PATTERN,
                 special_tokens: Iterable[str] = (), byte_order: Sequence[int] = range(256)
                 ) -> list[tuple[int, int]]:
    """The first ``n_merges`` merges of ``text`` (one text or several), as pairs of ranks:
    merge i makes rank 256 + i (fewer merges when no pair is left). Special tokens are cut
    out of the text first. Each step merges the pair of the largest count, ties to the pair
    first in (byte_order, then merges by age), and updates the counts of the words that
    held it (pair -> words index) instead of recounting."""
    found = _specials_re(special_tokens)
    freqs = Counter()
    for t in [text] if isinstance(text, str) else text:
        for part in found.split(t) if found else [t]:  # no merge reaches into a special
            freqs.update(pre_tokenize(part, pattern))
    words = [tuple(w.encode("utf-8")) for w in freqs]
    counts = list(freqs.values())
    pairs, where = Counter(), defaultdict(set)  # pair -> count, pair -> the words holding it
    for w, word in enumerate(words):
        for pair in zip(word, word[1:]):
            pairs[pair] += counts[w]
            where[pair].add(w)
    order = {b: i for i, b in enumerate(byte_order)}

    def entry(pair):  # the heap's order: the largest count, then the tie rule
        a, b = pair
        return -pairs[pair], order.get(a, a), order.get(b, b), pair

    heap = [entry(p) for p in pairs]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        count, _, _, pair = heapq.heappop(heap)
        if -count != pairs[pair]:  # stale: an old pair's count only falls; push it again
            if pairs[pair] > 0:
                heapq.heappush(heap, entry(pair))
            continue
        new_id = 256 + len(merges)
        merges.append(pair)
        born = set()  # the pairs with the new token: pushed once their counts are final
        for w in where.pop(pair):
            old = words[w]
            new = merge(old, pair, new_id)
            if new == old:  # the index is never pruned: this word lost the pair earlier
                continue
            for p in zip(old, old[1:]):
                pairs[p] -= counts[w]
            for p in zip(new, new[1:]):
                pairs[p] += counts[w]
                where[p].add(w)
                if new_id in p:
                    born.add(p)
            words[w] = new
        del pairs[pair]
        for p in born:
            heapq.heappush(heap, entry(p))
    return merges


def encode(text: str, merges: dict[tuple[int, int], int], pattern: str = GPT2_PATTERN) -> list[int]:
    """Text -> ranks: each pre-token's UTF-8 bytes, then, again and again, every occurrence of
    the adjacent pair of the lowest rank merged (merges: pair -> its rank), until no
    adjacent pair is a merge."""
    return [r for piece in pre_tokenize(text, pattern) for r in _encode_piece(piece, merges)]


def _encode_piece(piece: str, merges: dict[tuple[int, int], int]) -> list[int]:
    """One pre-token's ranks, the same as merging the pair of the lowest rank everywhere,
    pass after pass, but in O(n log n) whatever the number of merges that apply (a word
    without spaces, a blob): the tokens in a doubly linked list, the adjacent pairs that are
    merges in a min-heap of (rank, position). Pop the lowest; if its two tokens still form
    that pair (else a merge nearby made it stale), merge them into the left one and push
    the new token's pairs with its neighbours. Equal ranks pop left first (left to right,
    "aaa" -> "Aa"); a new token's pairs rank above the one just merged (it was learned after
    its parts), so no pair of a lower rank appears later: the order is the passes'. (Faster
    than the passes on short words too: measured from 4 bytes up.)"""
    word = piece.encode("utf-8")
    n = len(word)
    tokens = list(word)  # None: merged into its left neighbour
    after, before = list(range(1, n + 1)), list(range(-1, n - 1))  # n: the end; -1: the start
    heap = [(merges[pair], i) for i, pair in enumerate(zip(word, word[1:])) if pair in merges]
    heapq.heapify(heap)
    while heap:
        rank, i = heapq.heappop(heap)
        j = after[i]
        if j == n or tokens[i] is None or merges.get((tokens[i], tokens[j])) != rank:
            continue  # stale
        tokens[i], tokens[j] = rank, None
        k = after[i] = after[j]
        if k < n:
            before[k] = i
            if (rank, tokens[k]) in merges:
                heapq.heappush(heap, (merges[rank, tokens[k]], i))
        h = before[i]
        if h >= 0 and (tokens[h], rank) in merges:
            heapq.heappush(heap, (merges[tokens[h], rank], h))
    return [t for t in tokens if t is not None]


def decode(ranks: Iterable[int], token_bytes: Sequence[bytes] | dict[int, bytes]) -> str:
    """Ranks -> text: every token's bytes joined, then decoded as UTF-8 at once; bytes that
    are no whole character (a character cut between tokens) become U+FFFD."""
    return b"".join(token_bytes[r] for r in ranks).decode("utf-8", errors="replace")


class BPE:
    """A byte-level BPE tokenizer: its merges (pairs of ranks, in the order learned), the
    pre-tokenizer's pattern and its special tokens. Made by train_bpe or BPE.load."""

    def __init__(self, merges: Iterable[tuple[int, int]], pattern: str = GPT2_PATTERN,
                 special_tokens: Iterable[str] = ()):
        extra = check_specials(special_tokens)
        check_pattern(pattern)
        self.specials = [*SPECIALS, *extra]
        self.pattern = pattern
        self.offset = len(self.specials)  # the id of rank 0
        self.token_bytes = [bytes([b]) for b in range(256)]  # by rank
        self.merges: dict[tuple[int, int], int] = {}  # pair of ranks -> its rank
        for a, b in merges:
            if not (0 <= a < len(self.token_bytes) and 0 <= b < len(self.token_bytes)):
                raise ValueError(f"merge {len(self.merges)} ({a}, {b}) names a rank that is no "
                                 f"byte or earlier merge (0..{len(self.token_bytes) - 1})")
            if (a, b) in self.merges:
                raise ValueError(f"merge {len(self.merges)} ({a}, {b}) repeats merge "
                                 f"{self.merges[(a, b)] - 256}")
            self.merges[(a, b)] = len(self.token_bytes)
            self.token_bytes.append(self.token_bytes[a] + self.token_bytes[b])
        self._specials = _specials_re(self.specials)
        self._cache: dict[str, list[int]] = {}  # pre-token -> its ids

    # -- the Vocab interface -------------------------------------------------------------

    pad_id, bos_id, eos_id = PAD, BOS, EOS

    def __len__(self) -> int:
        return self.offset + len(self.token_bytes)

    def __eq__(self, other):
        return (isinstance(other, BPE) and self.specials == other.specials
                and self.pattern == other.pattern and self.merges == other.merges)

    @property
    def symbols(self) -> list[str]:
        """Every token but the four specials, as text (a cut character as U+FFFD)."""
        return [*self.specials[len(SPECIALS):], *(b.decode("utf-8", "replace") for b in self.token_bytes)]

    def token(self, i: int) -> bytes:
        """The bytes of id ``i`` (a special token's text in UTF-8)."""
        self._check_id(i, "i")
        return self.specials[i].encode() if i < self.offset else self.token_bytes[i - self.offset]

    def _check_id(self, i, name: str) -> None:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"{name} must be an integer id, got {i!r} ({type(i).__name__})")
        if not 0 <= i < len(self):
            raise ValueError(f"{name} must be ids in [0, {len(self)}), got {i}")

    def _ids(self, ids) -> list[int]:
        """``ids`` as a list of ints: a 1-D integer tensor or a sequence of integers, each an
        id of this tokenizer; else TypeError / ValueError naming ids."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1 or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
                raise TypeError(f"ids must be a 1-D integer tensor or a sequence of ints, got a "
                                f"{ids.dim()}-D {ids.dtype} tensor of shape {tuple(ids.shape)}")
            ids = ids.tolist()
        elif isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise TypeError(f"ids must be a sequence of ints, got {type(ids).__name__}")
        ids = list(ids)
        for i in ids:
            self._check_id(i, "ids")
        return ids

    def encode(self, text: str, allowed_special: Collection[str] | str = ()) -> list[int]:
        """Text -> ids, by rank. A special token's spelling in ``text`` (``<eos>`` typed in a
        prompt) is text like any other, so that decode(encode(text)) == text for every text;
        ``allowed_special`` (a set of special tokens, or "all") opts in, as tiktoken's
        allowed_special: those spellings become their one id (training data that marks its
        documents' ends, say)."""
        check_text(text)
        found = self._allowed(allowed_special)
        if found is None:
            return self._encode_ordinary(text)
        ids, start = [], 0
        for match in found.finditer(text):
            ids += self._encode_ordinary(text[start:match.start()])
            ids.append(self.specials.index(match.group()))
            start = match.end()
        return ids + self._encode_ordinary(text[start:])

    def _allowed(self, allowed_special):
        """The pattern that finds the allowed special tokens (None: none allowed)."""
        if isinstance(allowed_special, str):
            if allowed_special != "all":
                raise ValueError(f"allowed_special must be 'all' or a set of special tokens, got "
                                 f"the string {allowed_special!r} (for one: {{{allowed_special!r}}})")
            return self._specials
        try:
            allowed = set(allowed_special)
        except TypeError:
            raise TypeError("allowed_special must be 'all' or a set of special tokens, got "
                            f"{type(allowed_special).__name__}") from None
        unknown = sorted(allowed - set(self.specials), key=str)
        if unknown:
            raise ValueError(f"allowed_special holds {unknown}, not special tokens of this "
                             f"tokenizer ({', '.join(self.specials)})")
        return _specials_re(allowed)

    def _encode_ordinary(self, text: str) -> list[int]:
        ids = []
        for piece in pre_tokenize(text, self.pattern):
            if piece in self._cache:
                ids += self._cache[piece]
                continue
            piece_ids = [self.offset + r for r in _encode_piece(piece, self.merges)]
            if len(piece) <= 64:  # words repeat; a long blob seldom does: not kept
                self._cache[piece] = piece_ids
            ids += piece_ids
        return ids

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Ids -> text: stops at the first EOS, skips PAD and BOS (as Vocab.decode), other
        specials as their text; the bytes decoded together, a cut character as U+FFFD. The
        control ids come from allowed_special or a model, never from encode's text alone, so
        decode(encode(text)) == text."""
        kept = []
        for i in self._ids(ids):
            if i == EOS:
                break
            if i not in (PAD, BOS):
                kept.append(i)
        return b"".join(self.specials[i].encode() if i < self.offset else
                        self.token_bytes[i - self.offset] for i in kept).decode("utf-8", "replace")

    # -- a plain, readable file ----------------------------------------------------------

    def to_dict(self) -> dict:
        """The file's content: the merges as pairs of ranks; `tokens`, each merge's text (to
        read; from_dict refuses a file whose tokens are not its merges'); "sha256", the
        digest of its canonical form (canonical), which from_dict checks."""
        data = {"format": FORMAT, "version": VERSION, "pattern": self.pattern,
                "special_tokens": self.specials[len(SPECIALS):],
                "merges": [[a, b] for a, b in self.merges]}
        return {**data, "sha256": digest(data), "tokens": self._tokens()}

    def _tokens(self) -> list[str]:
        return [b.decode("utf-8", "backslashreplace") for b in self.token_bytes[256:]]

    @classmethod
    def from_dict(cls, data: dict, where: str = "tokenizer") -> BPE:
        """The tokenizer of to_dict(); ValueError in one line for anything else: another
        format or version, a digest that is not its content's (a damaged file), merges that
        are no pairs of integers or not those its `tokens` show. (A file without the digest,
        written before it, is checked against its tokens.)"""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{where} is not a tfcourse BPE tokenizer (no format {FORMAT!r})")
        if data.get("version") != VERSION:
            raise ValueError(f"{where} is a BPE tokenizer of version {data.get('version')!r}; "
                             f"this tfcourse reads version {VERSION}")
        if "sha256" in data and data["sha256"] != digest(data):
            raise ValueError(f"{where} is damaged: its merges, pattern or special tokens are not "
                             "those it was saved with (their SHA-256 differs from the one "
                             "recorded): use another copy")
        try:
            merges = [(a, b) for a, b in data["merges"]]
            bad = next((i for i, m in enumerate(merges) for r in m
                        if isinstance(r, bool) or not isinstance(r, int)), None)
            if bad is not None:
                raise ValueError(f"merge {bad} {list(merges[bad])} is not a pair of integers")
            bpe = cls(merges, data["pattern"], data["special_tokens"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{where} is a corrupt BPE tokenizer ({error})") from None
        shown, said = bpe._tokens(), data.get("tokens", bpe._tokens())
        if said != shown:
            said = said if isinstance(said, list) else [said]
            first = next((i for i, (a, b) in enumerate(zip(said, shown)) if a != b),
                         min(len(said), len(shown)))
            makes = shown[first] if first < len(shown) else None
            says = said[first] if first < len(said) else None
            raise ValueError(f"{where} is damaged: its merges and its tokens disagree (merge "
                             f"{first} makes {makes!r}, its tokens say {says!r})")
        return bpe

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
        """tiktoken.Encoding's keyword arguments for the same tokenizer: pat_str,
        mergeable_ranks (bytes -> id; a merge's id is its rank, shifted) and special_tokens."""
        return {"pat_str": self.pattern,
                "mergeable_ranks": {b: self.offset + r for r, b in enumerate(self.token_bytes)},
                "special_tokens": {s: i for i, s in enumerate(self.specials)}}


def train_bpe(text: str | Iterable[str], vocab_size: int, pattern: str = GPT2_PATTERN,
              special_tokens: Iterable[str] = ()) -> BPE:
    """A tokenizer of ``vocab_size`` ids (fewer if no pair is left): the specials (vocab.py's
    four, then ``special_tokens``), the 256 bytes and the merges learned from ``text``,
    ties broken as Hugging Face tokenizers does (BYTE_ORDER)."""
    special_tokens, pattern = check_specials(special_tokens), check_pattern(pattern)
    one = isinstance(text, (str, bytes, bytearray)) or not isinstance(text, Iterable)
    texts = [text] if one else list(text)
    for k, t in enumerate(texts):
        check_text(t, "text" if one else f"text[{k}]")
    smallest = len(SPECIALS) + len(special_tokens) + 256
    if not isinstance(vocab_size, int) or vocab_size < smallest:
        raise ValueError(f"vocab_size must be an int of at least {smallest} (the specials and "
                         f"256 bytes), got {vocab_size!r}")
    merges = learn_merges(texts, vocab_size - smallest, pattern, special_tokens, BYTE_ORDER)
    return BPE(merges, pattern, special_tokens)


class TextStream:
    """Ids -> text as they come, for streaming: push(i) returns the text that id ``i``
    completes, holding back the bytes of a character cut between tokens until the token
    that finishes it (an incremental UTF-8 decoder, codecs.getincrementaldecoder); end()
    returns what is left (the bytes of an unfinished character as U+FFFD). The pieces joined
    are tokenizer.decode(ids): PAD and BOS skipped, nothing after EOS, UNK as the tokenizer
    shows it, bytes that no character can start or continue as U+FFFD where they come.
    Decoding each token on its own instead would show a U+FFFD for each part of a character
    cut between tokens ("日" is 3 bytes, often 2 or 3 tokens). ``tokenizer``: a BPE or a
    vocab.Vocab (anything with token(i) -> bytes and decode). ``shown``: bytes the text
    already shows, which the first tokens repeat (token healing's backed-up token): not
    shown again."""

    def __init__(self, tokenizer, shown: bytes = b""):
        self.tokenizer, self.skip, self.ended = tokenizer, len(shown), False
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def push(self, i: int) -> str:
        if self.ended or i in (PAD, BOS):
            return ""
        if i == EOS:
            self.ended = True
            return ""
        data = self.tokenizer.decode([i]).encode() if i == UNK else self.tokenizer.token(i)
        data, self.skip = data[self.skip:], max(0, self.skip - len(data))
        return self._utf8.decode(data)

    def end(self) -> str:
        return self._utf8.decode(b"", final=True)
