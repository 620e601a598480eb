r"""Exercise 11: byte-level BPE written as functions on ranks (a byte b is rank b, merge i
makes rank 256 + i): counting pairs, merging one pair, learning the merges, encoding by rank,
decoding; their cases and their catalogues of mistakes.

The exercise's learn_merges recounts every step (the package's updates the counts); ties go
to the smallest pair (a, b), bytes compared by value: tfcourse.tokens.learn_merges with its
default byte_order. Each mistake's computation is a copy of the reference with one knob
turned, written to give exactly what learner code with that mistake gives.

Why the cases are what they are: the properties of inputs that real byte-level BPE code gets
wrong (issue threads and pull requests of tiktoken, tokenizers, minbpe, sentencepiece,
transformers, llama.cpp, mlx-lm and course repositories), each reached by at least one case:
- count_pairs: runs of one byte (overlapping pairs), frequencies above 1, a pair twice in a
  word, merged ranks above 255, a word of one token, no word; more words than a few chunks
  and more than 10 distinct pairs (a loop over part of the words, a most_common trim).
- merge: runs of one rank (odd and even lengths, merged ranks too), the pair at the end and
  reversed around it, ranks whose digits meet as text (11, 2), one token, none; the pair's
  first token followed by another and its second after another (half a pair compared); a
  list given where a tuple is expected, the pair absent (the input returned as it is).
- learn_merges: ties; letters of 2 bytes; whitespace at the start and end, runs of it,
  newlines and tabs (GPT-2's \s+(?!\S)); upper-case contractions (GPT-2's are lower-case
  only); long digit runs (GPT-4 cuts them in 3s); punctuation after a space; several special
  tokens, one the start of another (longest first), more than one in a text, their letters in
  the text too; upper case outside ASCII, a ligature, a decomposed letter, an emoji (any
  normalization shows); no pair left before n_merges; the same text again with other
  arguments (a cache keyed on part of the inputs).
- encode: merges whose order of application matters (lowest rank, not leftmost, longest or
  most frequent); the same text with other merges; whitespace at the start and end, runs,
  newlines, tabs, whitespace only; upper-case contractions with merges of each case; long
  digits; punctuation after a space; letters of 2 and 4 bytes, a decomposed letter, a
  ligature; the empty text; \r\n line endings; a pre-token longer than 16 bytes; every
  GPT-2 contraction ('s 't 're 've 'm 'll 'd), each a merge; merges given out of rank order
  (a dict read in another order).
- decode: a character cut between tokens, ids ending inside a 2-byte and a 4-byte character,
  ids starting inside one, a cut character followed by a whole one, no ids; a text that
  starts with U+FEFF, a \r\n line ending, e + U+0301; the bytes 0x00-0x03 (no special
  tokens here), two invalid bytes in a row.
Every function item runs its cases again in reverse order once all passed (`again`): state
kept between calls shows there. Where no catalogued mistake matches, sequences.py says where
the learner's sequence first differs, and for encode and decode which usual change of the text
(a strip, a normalization, a part of each pre-token, characters left out) the result shows.
"""

import math
import re
import unicodedata
from collections import Counter

import regex

from ..tokens import (
    BYTE_ORDER,
    GPT2_PATTERN,
    count_pairs,
    decode,
    encode,
    learn_merges,
    merge,
    pre_tokenize,
)
from . import sequences
from .mistakes import Mistake, laddered, member
from .pipeline import Case, Item

EXERCISE = "ex11_tokens"
NOTEBOOK = "11_tokens"


def _sections(*headings):
    return tuple((NOTEBOOK, h) for h in headings)


COUNTING, MERGING, TRAINING, ENCODING, DECODING, SPECIALS = _sections(
    "3. Counting pairs", "4. One merge", "5. Training: merge the most frequent pair, again and again",
    "6. Encoding by rank", "7. Decoding: bytes first, text at the end", "8. Special tokens")


def _same_counts(actual, expected):
    """Counts as a dict (a Counter, a defaultdict), pairs with 0 left out."""
    return (isinstance(actual, dict) and {k: v for k, v in actual.items() if v} == dict(expected))


def _same_ids(actual, expected):
    """A list or tuple of the same ints."""
    return isinstance(actual, (list, tuple)) and list(actual) == list(expected)


def _same_merges(actual, expected):
    """A list or tuple of the same pairs (each a tuple or a list)."""
    return (isinstance(actual, (list, tuple)) and len(actual) == len(expected)
            and all(isinstance(a, (list, tuple)) and tuple(a) == e for a, e in zip(actual, expected)))


# ---------------------------------------------------------------------------- count_pairs


def _count(words, *, overlap=True, freq=True, once=False, skip=None, assign=False, shortest=2):
    """count_pairs with the variations mistakes make: `overlap` False counts a run a, a, a
    as one (a, a), as bytes.count does; `freq` False counts each distinct word once; `once`
    counts a pair once per word that holds it (times its frequency), "jump": the position
    after a counted (a, a) skipped, whatever pair starts there; `skip` "last" or "first":
    each word's last (or first) pair left out, a range off by one; `assign`: counts[pair] =
    freq, the last word's frequency kept, not added; `shortest`: the fewest tokens a word needs
    to be counted (3: `if len(word) < 3: continue`, words of 2 tokens skipped)."""
    counts = Counter()
    for word, f in words.items():
        if len(word) < shortest:
            continue
        seen, last = set(), None  # last: where the previous (a, a) counted started
        pairs = list(zip(word, word[1:]))
        pairs = {None: pairs, "last": pairs[:-1], "first": pairs[1:]}[skip]
        for i, pair in enumerate(pairs, start=1 if skip == "first" else 0):
            if overlap == "jump" and last == i - 1:
                continue
            if not overlap and pair[0] == pair[1] and last == i - 1:
                continue
            if once and pair in seen:
                continue
            if pair[0] == pair[1]:
                last = i
            seen.add(pair)
            counts[pair] = (0 if assign else counts[pair]) + (f if freq else 1)
    return counts


def _strided(words, start):
    """count_pairs over the positions start, start + 2, ... of each word."""
    counts = Counter()
    for word, f in words.items():
        for i in range(start, len(word) - 1, 2):
            counts[word[i], word[i + 1]] += f
    return counts


def _apart(words, k):
    """count_pairs of the tokens k positions apart, (word[i], word[i + k])."""
    counts = Counter()
    for word, f in words.items():
        for pair in zip(word, word[k:]):
            counts[pair] += f
    return counts


def _count_with(**bug):
    return lambda words: _count(words, **bug)


COUNT_MISTAKES = (
    Mistake(
        "non_overlapping", "A run of one byte counted without its overlapping pairs",
        "every adjacent position counts: the word a, a, a holds the pair (a, a) twice, at "
        "positions 0 and 1, though one merge can take only one of them. Searching the pair as "
        "a substring (bytes.count, str.count, re.findall) skips the overlapping ones.",
        (_count_with(overlap=False), _count_with(overlap="jump")),
    ),
    Mistake(
        "no_frequency", "Pairs counted once per distinct word, without its frequency",
        "a word that occurs 5 times in the text holds its pairs 5 times: add the word's "
        "frequency (the dict's value), not 1.",
        (_count_with(freq=False),),
    ),
    Mistake(
        "pair_range_off_by_one", "Each word's {which} pair not counted",
        "a word of n tokens holds n - 1 adjacent pairs, at i = 0 ... n - 2: range(len(word) - "
        "1), or zip(word, word[1:]). {why}",
        (member(_count_with(skip="last"), which="last",
                why="range(len(word) - 2) stops one pair early."),
         member(_count_with(skip="first"), which="first",
                why="range(1, len(word) - 1) starts one pair late.")),
    ),
    Mistake(
        "rare_pruned", "Pairs that occur once left out",
        "count every pair, however rare: a pair seen once is still a pair (subword-nmt prunes "
        "rare pairs to save time; its counts are then not the counts).",
        (lambda words: Counter({p: c for p, c in _count(words).items() if c > 1}),),
    ),
    Mistake(
        "once_per_word", "A pair counted once per word, however often the word holds it",
        "count every position of the word, not the set of its pairs: (a, b, a, b) holds "
        "(a, b) twice.",
        (_count_with(once=True), _count_with(once=True, freq=False)),
    ),
    Mistake(
        "assigned", "A pair's count assigned, not added: the last word's frequency kept",
        "counts[pair] = freq replaces what the earlier words (and the earlier positions of this "
        "one) counted: add to it, counts[pair] = counts.get(pair, 0) + freq.",
        (_count_with(assign=True), _count_with(assign=True, freq=False)),
    ),
    Mistake(
        "reversed_pair", "Pairs stored the other way round: (b, a) for a followed by b",
        "a pair is (word[i], word[i + 1]), the left token first: (1, 2, 3) holds (1, 2) and (2, "
        "3). A key written (b, a), or read from the end of the word, names pairs that do not "
        "occur, and merge would then look for them.",
        (lambda words: Counter({(b, a): c for (a, b), c in _count(words).items()}),),
    ),
    Mistake(
        "short_words_skipped", "Words of two tokens skipped: their one pair not counted",
        "a word of 2 tokens holds one pair, (word[0], word[1]): only a word of one token holds "
        "none (len(word) < 2, not < 3).",
        (_count_with(shortest=3),),
    ),
    Mistake(
        "read_past_the_end", "Pairs read past the word's end: word[i + 1] after the last token",
        "range(len(word)) reaches i = len(word) - 1, where word[i + 1] does not exist (IndexError): "
        "a word of n tokens holds n - 1 pairs, range(len(word) - 1), or zip(word, word[1:]).",
        (lambda words: Counter((w[i], w[i + 1]) for w in words for i in range(len(w))),),
    ),
    Mistake(
        "word_left_out", "The {which} word never counted: a loop over the words one short",
        "every word of the dict counts: for word, freq in words.items(). {why}",
        (member(lambda words: _count(dict(list(words.items())[:-1])), which="last",
                why="range(len(items) - 1), or items[:-1], stops one word early."),
         member(lambda words: _count(dict(list(words.items())[1:])), which="first",
                why="range(1, len(items)), or items[1:], starts one word late.")),
    ),    Mistake(
        "stride_two", "Positions scanned in steps of two: pairs that start at {which} positions "
        "never counted",
        "every position i = 0 ... len(word) - 2 starts a pair: range(len(word) - 1), step 1. A "
        "merge moves on by two after a match; counting does not (range(0, len(word) - 1, 2), or "
        "zip(word[::2], word[1::2]), skips every other pair).",
        (member(lambda words: _strided(words, 0), which="odd"),
         member(lambda words: _strided(words, 1), which="even")),
    ),
    Mistake(
        "pairs_apart", "Pairs of tokens {k} apart: (word[i], word[i + {k}]), not adjacent ones",
        "a pair is two ADJACENT tokens, word[i] and word[i + 1]: zip(word, word[1:]), not "
        "zip(word, word[{k}:]).",
        tuple(member(lambda words, k=k: _apart(words, k), k=k) for k in (2, 3)),
    ),
    Mistake(
        "frequency_as_index", "Each word's position in the dict taken as its frequency",
        "`for freq, word in enumerate(words)` gives each word its index ({first}, {second}, ...), "
        "not the number of times it occurs: for word, freq in words.items().",
        (member(lambda words: +_count({w: i for i, w in enumerate(words)}), first=0, second=1),
         member(lambda words: +_count({w: i for i, w in enumerate(words, 1)}), first=1, second=2)),
    ),
)
_COUNT_LADDER = {
    "word_left_out": (None, "print count_pairs({{(1, 2): 1, (3, 4): 1}}): both pairs, once each."),
    "short_words_skipped": (None, "print count_pairs({(1, 2): 1}): {(1, 2): 1}."),
    "read_past_the_end": (None, "print the i your loop reaches for the word (1, 2, 3): 0 and 1."),
    "reversed_pair": (None, "print count_pairs({(1, 2): 1}): {(1, 2): 1}, the left token first."),
    "assigned": (None, "print count_pairs({(1, 2): 1, (1, 2, 3): 2}): (1, 2) counted 3 times."),
    "non_overlapping": (None, "print your counts for {(97, 97, 97): 1}: the pair (97, 97) "
                        "starts at positions 0 and 1."),
    "no_frequency": (None, "print your counts for {(1, 2): 5}: the word occurs 5 times."),
    "rare_pruned": (None, "print your counts for {(1, 2): 1}: {(1, 2): 1}."),
    "once_per_word": (None, "print your counts for {(1, 2, 1, 2): 1}: (1, 2) starts at "
                      "positions 0 and 2."),
    "pair_range_off_by_one": (None, "print your counts for {{(1, 2, 3): 1}}: (1, 2) and (2, 3), "
                              "once each."),
    "stride_two": (None, "print your counts for {{(1, 2, 3): 1}}: (1, 2) and (2, 3), once each."),
    "pairs_apart": (None, "print your counts for {{(1, 2, 3): 1}}: (1, 2) and (2, 3), once each."),
    "frequency_as_index": (None, "print your counts for {{(1, 2): 5}}: {{(1, 2): 5}}."),
}


def _count_case(words, note=""):
    return Case((words,), names=("words",), label=f"words={words!r}{note}")


COUNT = Item(
    EXERCISE, "count_pairs", count_pairs,
    [_count_case({(1, 2, 3): 1, (2, 3): 1}),
     _count_case({(1, 2, 3): 2, (2, 3, 4): 5, (7,): 3}, " (frequencies above 1)"),
     _count_case({(1, 2, 1, 2, 1): 1, (2, 1): 4}),
     _count_case({(97, 97, 97): 3, (97, 97, 97, 97, 98): 1}, " (runs of one byte)"),
     _count_case({}, " (no word)"),
     _count_case({(256, 97, 256, 97): 2, (97,): 1, (300, 300, 300): 1, (98, 256): 3},
                 " (merged ranks above 255, a word of one token)"),
     _count_case({(5, 6): 1, (6, 5, 6): 1}, " (the first case's sizes, other words)"),
     _count_case({(1, 2, 3, 4): 1, (5, 6, 7): 2, (8, 9): 5, (10, 11, 12): 3, (13, 14): 5,
                  (15, 16, 17): 4, (18, 19): 2}, " (7 words, 12 distinct pairs)")],
    laddered(COUNT_MISTAKES, _COUNT_LADDER), same=_same_counts, what="counts", prep="for",
    formula="count(a, b) = sum over words of freq(word) x the positions i with word[i] = a, "
            "word[i + 1] = b.",
    twins=(_count_with(),), section=COUNTING, again=True,
    explain=lambda case, got, want: sequences.explain_counts(case.args[0], got, want, case.label),
)


# ---------------------------------------------------------------------------------- merge


def _merge(word, pair, new_id, *, direction="left", step=2, last=True, first_only=False,
           same=lambda a, b: a == b, either=False, half=None, runs=False, bound=True, tail=False,
           miss=1, reach=1, chunk=False):
    """merge with the variations mistakes make: `direction` "right" scans from the end;
    `step` 1 keeps the pair's second token after the new one; `last` False loses the
    word's last token when it is not merged (a loop up to len - 1); `first_only` replaces
    the first occurrence alone; `either`: the pair matched in either order; `half` 0 or 1:
    only that token of the pair compared; `runs`: after a match, one step only when the
    next position matches too (a run a, a, a merged twice, the middle a in both); `bound`
    False: word[i + 1] read without checking i + 1 < len(word) (IndexError at the end when the
    last token is the pair's first; "always": at any last position reached); `tail`:
    the loop stops before the last token, which is appended after it whatever happened;
    `miss` 2: a pair's first token not followed by its second skips the next position too;
    `reach` 2: a match tested only where i + 2 < len(word) (the pair at the end never merged);
    `chunk`: after a miss, two tokens copied and two positions skipped."""
    word = tuple(word)
    if direction == "right":
        return tuple(reversed(_merge(word[::-1], pair[::-1], new_id)))
    out, i, done = [], 0, False
    while i < len(word) - (0 if last and not tail else 1):
        if bound == "always" and i + 1 == len(word):
            word[i + 1]  # (word[i], word[i + 1]) == pair read at the last position: IndexError
        if (i + reach < len(word) or not bound) and not done and (
                (half == 1 or same(word[i], pair[0])) and (half == 0 or same(word[i + 1], pair[1]))
                or either and same(word[i], pair[1]) and same(word[i + 1], pair[0])):
            out.append(new_id)
            i += 1 if runs and word[i + 1:i + 3] == tuple(pair) else step
            done = first_only
        elif chunk:
            out += word[i:i + 2]
            i += 2
        else:
            out.append(word[i])
            i += miss if same(word[i], pair[0]) else 1
    return tuple(out + list(word[-1:]) if tail else out)


def _extended_by_int(word, pair, new_id):
    """merge with out += new_id: a list extends by an iterable, so the first match raises."""
    out = []
    for i in range(len(word) - 1):
        if (word[i], word[i + 1]) == tuple(pair):
            out += new_id
    return tuple(word)


def _merge_with(**bug):
    return lambda word, pair, new_id: _merge(word, pair, new_id, **bug)


def _as_text(word, pair, new_id):
    """merge on the ranks joined by spaces, with str.replace: '1 2' found inside '11 2'."""
    text = " ".join(map(str, word)).replace(f"{pair[0]} {pair[1]}", str(new_id))
    return tuple(int(t) for t in text.split())


def _as_padded_text(word, pair, new_id):
    """merge with str.replace on ' a b ' in the ranks written with a space on each side: the
    space between two touching occurrences is taken by the first, so the second is missed."""
    text = f" {' '.join(map(str, word))} ".replace(f" {pair[0]} {pair[1]} ", f" {new_id} ")
    return tuple(int(t) for t in text.split())


MERGE_MISTAKES = (
    Mistake(
        "touching_missed", "An occurrence that touches the previous one not merged",
        "in (a, b, a, b) the pair (a, b) occurs twice, back to back: both merge, giving (new, "
        "new). A text replace of ' a b ' with its spaces takes the space the next occurrence "
        "starts with; scan the ranks themselves, left to right.",
        (_as_padded_text,),
    ),
    Mistake(
        "either_order", "The pair matched in either order",
        "a merge is ordered: (a, b) merges a followed by b, never b followed by a (a set, or "
        "sorted tokens, lose the order): word[i] == pair[0] and word[i + 1] == pair[1].",
        (_merge_with(either=True),),
    ),
    Mistake(
        "second_kept", "The pair's second token kept after the new one",
        "a merge replaces BOTH tokens of the pair by the new id: after a match, skip two "
        "positions, not one.",
        (_merge_with(step=1),),
    ),
    Mistake(
        "last_dropped", "The word's last token dropped",
        "a loop `while i < len(word) - 1` looks at every pair but never copies the last "
        "token when it is no pair's second: copy it too.",
        (_merge_with(last=False), _merge_with(last=False, step=1)),
    ),
    Mistake(
        "as_text", "Merged on the ranks written as text: digits match across ranks",
        "' '.join(map(str, word)).replace('1 2', ...) also finds '1 2' inside '11 2' (rank 11 "
        "then 2): the text does not know where a rank starts. Compare the ranks themselves, "
        "word[i] == a and word[i + 1] == b, scanning left to right.",
        (_as_text,),
    ),
    Mistake(
        "as_bytes", "Merged as bytes: a rank of 256 or more is not a byte",
        "every merge's new id (and every token merged before) is 256 or more: bytes(word)"
        ".replace(...) cannot hold it (bytes([256]) raises; % 256 turns it into 0). Work on the "
        "tuple of ranks: scan it left to right.",
        (lambda word, pair, new_id: tuple(bytes(word).replace(bytes(pair), bytes([new_id % 256]))),
         lambda word, pair, new_id: tuple(bytes(word).replace(bytes(pair), bytes([new_id])))),
    ),
    Mistake(
        "compared_by_identity", "Ranks compared with `is`, not ==",
        "`is` asks whether two ints are the same object: Python shares the objects of small ints "
        "(up to 256) and of constants, but equal ranks made at run time (merges, int(...)) are "
        "other objects. Compare values: word[i] == pair[0].",
        (lambda word, pair, new_id: _merge(word, pair, new_id, same=lambda a, b: a is b),),
    ),
    Mistake(
        "first_only", "Only the first occurrence of the pair merged",
        "merge EVERY occurrence of the pair in the word, left to right (list.index or "
        "str.replace(..., 1) find the first one only).",
        (_merge_with(first_only=True),),
    ),
    Mistake(
        "right_to_left", "Merged from the right",
        "scan left to right: in a, a, a the pair (a, a) at positions 0-1 is merged, giving "
        "(new, a), not (a, new). Encoders and Hugging Face tokenizers go left to right, and "
        "the counts you learn from assume it.",
        (_merge_with(direction="right"),),
    ),
    Mistake(
        "half_compared", "Only the pair's {which} token compared",
        "a position matches when BOTH tokens match: word[i] == pair[0] and word[i + 1] == "
        "pair[1]. Comparing the {which} one alone merges {what} too.",
        (member(_merge_with(half=0), which="first", what="the first token followed by any other"),
         member(_merge_with(half=1), which="second", what="any token followed by the second")),
    ),
    Mistake(
        "overlaps_merged", "Overlapping occurrences in a run both merged: a token taken by two merges",
        "in a, a, a the pair (a, a) starts at positions 0 and 1, but the middle a can go to one "
        "merge only: after a match, skip both tokens (i += 2), so (a, a, a) gives (new, a).",
        (_merge_with(runs=True),),
    ),
    Mistake(
        "no_bound_check", "No bound check on i + 1: word[i + 1] read past the word's end",
        "at the last position, i = len(word) - 1, the loop reads word[i + 1], past the last "
        "token (IndexError): test i + 1 < len(word) (or i < len(word) - 1) "
        "before comparing word[i + 1].",
        (_merge_with(bound=False), _merge_with(bound="always")),
    ),
    Mistake(
        "last_appended", "The last token appended after the loop, even when the last pair was merged",
        "a loop `while i < len(word) - 1` followed by out.append(word[-1]) adds the last token "
        "back when it was already taken by the last merge (it comes twice): append it only when "
        "the loop did not reach it (if i == len(word) - 1), or loop while i < len(word).",
        (_merge_with(tail=True),),
    ),
    Mistake(
        "next_skipped", "The token after an unmatched first token skipped (lost)",
        "when word[i] is the pair's first token but word[i + 1] is not its second, only word[i] "
        "is copied and i moves on by ONE: word[i + 1] may start the pair itself (word.index(a, "
        "i) finds the first token; after a miss, go on from j + 1, not j + 2).",
        (_merge_with(miss=2),),
    ),
    Mistake(
        "pair_written", "The pair itself written in place of new_id (a nested tuple)",
        "a merge replaces the two tokens by ONE rank, new_id: out.append(new_id), not "
        "out.append(pair) (a tuple inside the word, which is no rank).",
        (lambda word, pair, new_id: _merge(word, pair, pair),),
    ),    Mistake(
        "end_pair_missed", "The pair at the word's end never merged: the bound check one short",
        "the last two tokens, at len(word) - 2 and len(word) - 1, are a pair too: test i + 1 < "
        "len(word) (i < len(word) - 1) before reading word[i + 1], not i < len(word) - 2.",
        (_merge_with(reach=2),),
    ),
    Mistake(
        "two_at_a_time", "The word read two tokens at a time: after a miss, the next position skipped",
        "after a position that is no match, copy word[i] alone and move on by ONE: copying "
        "word[i:i + 2] and moving on by two skips a pair that starts at word[i + 1] (an odd "
        "offset).",
        (_merge_with(chunk=True),),
    ),
    Mistake(
        "token_compared_twice", "The pair's {which} token compared twice: {wrong}",
        "a position matches when word[i] == pair[0] and word[i + 1] == pair[1]; comparing both "
        "with pair[{k}] finds ({which_token}, {which_token}) instead, wherever it is.",
        (member(lambda word, pair, new_id: _merge(word, (pair[0], pair[0]), new_id), which="first",
                wrong="word[i + 1] == pair[0], not pair[1]", k=0,
                which_token="a"),
         member(lambda word, pair, new_id: _merge(word, (pair[1], pair[1]), new_id), which="second",
                wrong="word[i] == pair[1], not pair[0]", k=1,
                which_token="b")),
    ),
    Mistake(
        "never_true", "Nothing merged: the pair test is never true, even where the word holds the pair",
        "the word holds the pair (a tuple given as pair too), yet comes back as it was: a test "
        "that never holds, such as `is` (a tuple made by (word[i], word[i + 1]) is a new object, "
        "never pair itself) or a token compared with the whole pair (word[i] == pair). Compare "
        "values: (word[i], word[i + 1]) == tuple(pair).",
        (lambda word, pair, new_id: tuple(word),),
    ),
    Mistake(
        "extended_by_int", "new_id added as an iterable (out += new_id, out.extend(new_id)): an int "
        "is not one",
        "a list's += and extend take the items of an iterable, and ask the int for its items "
        "(TypeError: 'int' object is not iterable): out.append(new_id), or out += [new_id].",
        (_extended_by_int,),
    ),
)
_MERGE_LADDER = {
    "half_compared": (None, "print merge((1, 3, 1, 2), (1, 2), 9): (1, 3, 9)."),
    "no_bound_check": (None, "print merge((2, 1), (1, 2), 9): (2, 1), no IndexError."),
    "last_appended": (None, "print merge((3, 1, 2), (1, 2), 9): (3, 9)."),
    "next_skipped": (None, "print merge((1, 3, 1, 2), (1, 2), 9): (1, 3, 9)."),
    "pair_written": (None, "print merge((1, 2), (1, 2), 9): (9,)."),
    "end_pair_missed": (None, "print merge((3, 1, 2), (1, 2), 9): (3, 9)."),
    "two_at_a_time": (None, "print merge((3, 1, 2), (1, 2), 9): (3, 9)."),
    "token_compared_twice": (None, "print merge((1, 2), (1, 2), 9) and merge((1, 1), (1, 2), 9)."),
    "never_true": (None, "print merge((1, 2), (1, 2), 9): (9,)."),
    "extended_by_int": (None, "print merge((1, 2), (1, 2), 9): (9,)."),
    "overlaps_merged": (None, "print merge((5, 5, 5), (5, 5), 9): (9, 5)."),
    "touching_missed": (None, "print merge((1, 2, 1, 2), (1, 2), 9): (9, 9)."),
    "either_order": (None, "print merge((2, 1), (1, 2), 9): (2, 1), unchanged."),
    "second_kept": (None, "print merge((1, 2, 3), (1, 2), 9): two tokens become one."),
    "last_dropped": (None, "print merge((1, 2, 3), (1, 2), 9): the 3 stays."),
    "first_only": (None, "print merge((1, 2, 1, 2), (1, 2), 9)."),
    "as_bytes": (None, "print bytes([256])."),
    "as_text": (None, "print ' '.join(map(str, (11, 2))) and look for '1 2' in it."),
    "right_to_left": (None, "print merge((5, 5, 5), (5, 5), 9): which two 5s go first?"),
    "compared_by_identity": (None, "print int('300') is int('300')."),
}


def _merge_case(word, pair, new_id, note=""):
    return Case((word, pair, new_id), names=("word", "pair", ""),
                label=f"word={word!r}, pair={pair!r}, new_id={new_id}{note}")


MERGE = Item(
    EXERCISE, "merge", merge,
    [_merge_case((1, 2, 3, 1, 2), (1, 2), 256),
     _merge_case((4, 1, 2, 3), (1, 2), 300),
     _merge_case((1, 2, 1, 2, 3), (1, 2), 256),
     _merge_case((5, 5, 5), (5, 5), 257, " (a run of one byte)"),
     _merge_case((5, 5, 5, 5, 5), (5, 5), 257, " (a run of one byte)"),
     _merge_case((7,), (7, 7), 256, " (one token)"),
     _merge_case((), (1, 2), 256, " (no token)"),
     _merge_case((11, 2, 1, 2), (1, 2), 256, " (ranks whose digits meet: 11, then 2)"),
     _merge_case((256, 256, 256, 256), (256, 256), 300, " (a run of a merged rank)"),
     _merge_case((2, 1, 2, 1, 2), (1, 2), 9, " (the pair reversed around it)"),
     _merge_case((3, 1, 2), (1, 2), 9, " (the pair at the end)"),
     _merge_case(tuple(int(r) for r in "300 301 300 301".split()), (int("300"), int("301")), 400,
                 " (ranks above 256 made at run time: equal, not the same objects)"),
     _merge_case((1, 3, 1, 2, 4, 2), (1, 2), 9,
                 " (the pair's first token before another, its second after another)"),
     _merge_case([1, 2, 3], (4, 5), 256, " (a list given, the pair absent)")],
    laddered(MERGE_MISTAKES, _MERGE_LADDER), same=_same_ids, what="word", prep="for",
    formula="Scan left to right: where word[i], word[i + 1] is the pair, write new_id and "
            "skip both; else copy word[i].",
    twins=(_merge_with(),), section=MERGING, again=True,
    explain=lambda case, got, want: sequences.explain_word(case.args[0], got, want, case.label),
)


# --------------------------------------------------------------------------- learn_merges


def _learn(text, n_merges, special_tokens=(), *, cut=True, split=True, freq=True, overlap=True,
           tie="smallest", first=256, extra=0, update=True, escape=True, prefix="", chars=False,
           min_count=1, stop=True, pattern=GPT2_PATTERN, normalize=None, longest=True, carry=None):
    """learn_merges, recounting every step, with the variations mistakes make: `cut` False
    trains through the special tokens (`escape` False: cut with the tokens read as
    patterns); `split` False takes the whole text as one word, "whitespace" splits it at
    spaces; `freq`, `overlap` as _count; `tie` "smallest", "largest" or "first" (the first pair
    counted: max(counts, key=counts.get)), "wordpiece" (count(ab) / (count(a) count(b)));
    `first` the first new id; `extra` merges more;
    `update` False never merges the words; `prefix` put before the text (HF's
    add_prefix_space); `chars` code points instead of UTF-8 bytes; `min_count` the smallest
    count a merge needs (HF's min_frequency); `stop` False: no early stop (max() of no pair
    raises); `pattern` the pre-tokenizer's; `normalize` applied to the text first; `longest`
    False: the special tokens tried in the order given, not the longest first; `cut` "" or " ":
    the special tokens replaced by it (re.sub), the text around them joined; `update` "first":
    only the first word that holds the pair merged, "once": only the pair's first occurrence
    in each word, "drop": the words that do not hold both tokens of the pair dropped
    ("drop_pair": the pair itself); `carry` "drop" or "keep": the counts made once, before the loop, and each
    step's counts added to them (the chosen pair deleted, or kept)."""
    text = prefix + (normalize or str)(text)
    found = "|".join(map(regex.escape if escape else str,
                         sorted(special_tokens, key=len, reverse=True) if longest else special_tokens))
    if isinstance(cut, str) and found:
        text, cut = regex.sub(found, cut, text), False
    parts = regex.split(found, text) if cut and found else [text]
    cut_up = {True: pattern if callable(pattern) else lambda part: pre_tokenize(part, pattern),
              False: lambda part: [part], "whitespace": str.split}[split]
    pieces = [p for part in parts for p in cut_up(part) if p]
    words = Counter(tuple(map(ord, p)) if chars is True else tuple(_STAND_IN[b] for b in p.encode())
                    if chars else tuple(p.encode("utf-8")) for p in pieces)
    merges, carried = [], Counter()
    for i in range(n_merges + extra):
        counts = _count(words, freq=freq, overlap=overlap)
        if carry:
            carried.update(counts)
            counts = carried
        if stop and (not counts or max(counts.values()) < min_count):
            break
        units = _unit_counts(words) if tie == "wordpiece" else None
        key = {"smallest": lambda p, c=counts: (c[p], -p[0], -p[1]),
               "second_first": lambda p, c=counts: (c[p], -p[1], -p[0]),
               "largest": lambda p, c=counts: (c[p], p), "first": counts.get,
               "first_element": lambda p, c=counts: (c[p], -p[0]),
               "wordpiece": lambda p, c=counts, u=units: (
                   c[p] / (u[p[0]] * u[p[1]]), -p[0], -p[1])}[tie]
        pair = max(counts, key=key)
        merges.append(pair)
        if carry == "drop":
            del carried[pair]
        if update:
            holder = next(w for w in words if pair in zip(w, w[1:]))
            merged = Counter()
            for w, f in words.items():
                if (update == "drop" and not set(pair) <= set(w)
                        or update == "drop_pair" and pair not in zip(w, w[1:])):
                    continue
                merged[w if update == "first" and w != holder else
                       _merge(w, pair, first + i, first_only=True) if update == "once" else
                       merge(w, pair, first + i)] += f
            words = merged
    return merges


def _unit_counts(words):
    """How often each token occurs in the words (times their frequency)."""
    units = Counter()
    for word, f in words.items():
        for t in word:
            units[t] += f
    return units


def _words_of(text, special_tokens=()):
    """The reference's words: the pre-tokens of the text's parts between special tokens."""
    found = "|".join(map(regex.escape, sorted(special_tokens, key=len, reverse=True)))
    parts = regex.split(found, text) if found else [text]
    return Counter(tuple(p.encode("utf-8")) for part in parts for p in pre_tokenize(part))


# Other tokenizers' pre-tokenizers and normalizations, as ports and assistants carry them over.
# GPT-2's printable stand-ins as numbers (its encoder.py's bytes_to_unicode, whose code points
# ports take for ranks): a printable byte stands for itself, the others for 256, 257, ...
_SHOWN_AS_THEMSELVES = BYTE_ORDER.index(0)  # BYTE_ORDER: the printable bytes, then the others from 0
_STAND_IN = {**{b: b for b in BYTE_ORDER[:_SHOWN_AS_THEMSELVES]},
             **{b: 256 + n for n, b in enumerate(BYTE_ORDER[_SHOWN_AS_THEMSELVES:])}}
GPT4_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++"""
                r"""[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+""")
# GPT-4's and GPT-2's patterns as ports to Python's re write them (re has no \p{L}): [a-zA-Z]
# for the letters, \d for the digits, \w in the classes; re.findall then drops every letter
# outside ASCII, which no alternative matches.
_GPT4_FOR_RE = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\w]?[a-zA-Z]+|\d{1,3}| ?[^\s\w]+[\r\n]*|\s*[\r\n]|"""
                r"""\s+(?!\S)|\s+""")
_GPT2_FOR_RE = r"""'s|'t|'re|'ve|'m|'ll|'d| ?[a-zA-Z]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+"""
_PATTERNS = (
    (GPT4_PATTERN, "GPT-4's pattern (cl100k_base)",
     "cl100k cuts digits into runs of 1 to 3, takes contractions in any case and keeps "
     "newlines apart"),
    (GPT2_PATTERN.replace(r"\s+(?!\S)|", ""), "GPT-2's pattern without its \\s+(?!\\S)",
     "without the lookahead a run of spaces before a word is one pre-token, and the word loses "
     "its leading space"),
    ("(?i)" + GPT2_PATTERN, "GPT-2's pattern read case-insensitively",
     "GPT-2's contractions are lower-case only: in DON'T, re.IGNORECASE makes 'T one pre-token"),
    (r"""'s|'t|'re|'ve|'m|'ll|'d| ?[a-zA-Z]+| ?[0-9]+| ?[^\sa-zA-Z0-9]+|\s+(?!\S)|\s+""",
     "ASCII letters and digits only", "\\p{L} and \\p{N} are the letters and digits of every "
     "script: with [a-zA-Z], 'é' is no letter and is cut off its word"),
    (GPT2_PATTERN.replace(r" ?\p{N}+", r"\p{N}{1,3}"), "digits in runs of at most 3 (Llama 3's rule)",
     "GPT-2 keeps a run of digits, and the space before it, as one pre-token"),
    (GPT2_PATTERN.replace(r" ?\p{N}+", r" ?\p{N}{1,3}"), "digits in runs of at most 3",
     "GPT-2 keeps a whole run of digits as one pre-token"),
    (lambda part: [p.strip() for p in pre_tokenize(part) if p.strip()],
     "GPT-2's pre-tokens stripped of their spaces", "' the' and 'the' are two words: a token keeps "
     "the space before its word"),
    (lambda part: [p for line in part.splitlines() for p in pre_tokenize(line)],
     "the text cut into lines first", "the newlines are part of the text: pre_tokenize the whole "
     "text, newlines included"),
    (lambda part: list(part), "single characters: BPE run on each character alone",
     "a pre-token is a word with its leading space (' cat'), and merges join the bytes of "
     "several characters within it"),
    (lambda part: re.findall(_GPT4_FOR_RE, part), "GPT-4's pattern ported to re ([a-zA-Z] for "
     "\\p{L}, \\d for \\p{N})", "GPT-4's cuts digits in 3s and takes contractions in any case, "
     "and re.findall drops the letters outside ASCII, which [a-zA-Z] does not match"),
    (lambda part: re.findall(_GPT2_FOR_RE, part), "GPT-2's pattern ported to re ([a-zA-Z] for "
     "\\p{L}, \\d for \\p{N})", "re.findall drops the letters outside ASCII, which [a-zA-Z] "
     "does not match (regex's \\p{L} is the letters of every script)"),
)
_NORMALIZED = (
    (str.strip, "stripped of the whitespace at its start and end"),
    (str.lower, "lower-cased"),
    (lambda t: unicodedata.normalize("NFKC", t), "normalized to NFKC"),
    (lambda t: unicodedata.normalize("NFC", t), "normalized to NFC"),
    (lambda t: " ".join(t.split()), "its runs of whitespace collapsed"),
    (lambda t: t.replace(" ", "\u2581"), "its spaces written as '\u2581' (sentencepiece's meta symbol)"),
)


def _other_pre_tokenizer(knobbed):
    return Mistake(
        "other_pre_tokenizer", "Pre-tokenized with {which}, not GPT-2's pattern",
        "cut the text with pre_tokenize (GPT-2's pattern) as given: {how}.",
        tuple(member(knobbed(pattern=p), which=which, how=how) for p, which, how in _PATTERNS))


def _text_changed(knobbed, doing, why):
    return Mistake(
        "text_changed", f"The text changed before {doing}: {{how}}",
        f"byte-level BPE takes the text exactly as it is: no normalization, no stripping; {why}.",
        tuple(member(knobbed(normalize=f), how=how) for f, how in _NORMALIZED))


def _in_re(knobbed):
    """GPT-2's (or GPT-4's) pattern compiled by Python's re, which has no \\p{L}: it raises."""
    return Mistake(
        "pattern_in_re", "{which} pattern compiled with Python's re, which has no \\p{{L}}",
        "re raises 'bad escape \\p': GPT-2's pattern needs the regex module (import regex; "
        "regex.findall(GPT2_PATTERN, text)), or pre_tokenize, which uses it.",
        tuple(member(knobbed(pattern=lambda part, p=p: re.findall(p, part)), which=which)
              for p, which in ((GPT2_PATTERN, "GPT-2's"), (GPT4_PATTERN, "GPT-4's"))))


def _stand_ins(knobbed, doing):
    return Mistake(
        "stand_ins_as_ranks", "GPT-2's printable stand-ins (Ġ for a space) used as ranks, not the bytes",
        "GPT-2's encoder.py shows each byte as a printable character (bytes_to_unicode: a space is "
        "'Ġ', code point 288); those code points are no ranks. A byte b is rank b: "
        f"list(piece.encode('utf-8')), {doing}.",
        (knobbed(chars="stand_ins"),))


def _learn_with(**bug):
    return lambda text, n_merges, special_tokens=(): _learn(text, n_merges, special_tokens, **bug)


LEARN_MISTAKES = (
    Mistake(
        "specials_merged", "Special tokens trained on as text",
        "cut the special tokens out of the text BEFORE pre-tokenizing (re.split on them): "
        "they are never merged, and no merge reaches into them.",
        (_learn_with(cut=False),),
    ),
    Mistake(
        "across_pre_tokens", "Merges across pre-token boundaries",
        "count pairs within each pre-token (pre_tokenize(text)), never across two: the "
        "whole text as one sequence lets a merge join a word to the space or the symbol after "
        "it.",
        (_learn_with(split=False),),
    ),
    Mistake(
        "specials_as_patterns", "Special tokens cut as regular expressions",
        "'<|endoftext|>' as a pattern means '<' OR 'endoftext' OR '>': the | of the token is "
        "alternation. Escape each token before joining them: '|'.join(map(re.escape, "
        "special_tokens)).",
        (_learn_with(escape=False),),
    ),
    Mistake(
        "split_on_whitespace", "Text split at whitespace instead of pre-tokenized",
        "str.split() drops the spaces and keeps punctuation on its word: GPT-2's pre-tokens "
        "(pre_tokenize) keep each word's leading space (' cat') and cut punctuation off.",
        (_learn_with(split="whitespace"),),
    ),
    _other_pre_tokenizer(_learn_with),
    _text_changed(_learn_with, "training", "the merges are learned on the bytes that encode will see"),
    Mistake(
        "specials_take_ids", "Merge ids numbered after the special tokens",
        "here the special tokens take no rank: merge i makes 256 + i whatever the special tokens "
        "(a tokenizer gives them ids of their own, apart from the ranks).",
        (lambda text, n_merges, special_tokens=(): _learn(text, n_merges, special_tokens,
                                                          first=256 + len(special_tokens)),),
    ),
    Mistake(
        "specials_in_budget", "Fewer merges: the special tokens counted in n_merges",
        "n_merges is the number of merges, not a vocabulary size that the special tokens share: "
        "learn n_merges merges whatever the special tokens.",
        (lambda text, n_merges, special_tokens=(): _learn(text, n_merges - len(special_tokens),
                                                          special_tokens),),
    ),
    Mistake(
        "specials_not_longest_first", "Special tokens tried in the order given, not the longest first",
        "when one special token starts another ('<|a|>' and '<|a|>bc'), the pattern '<|a|>|<|a|>bc' "
        "finds the shorter one and leaves the rest in the text: sort them longest first before "
        "joining them (sorted(special_tokens, key=len, reverse=True)).",
        (_learn_with(longest=False),),
    ),
    Mistake(
        "prefix_space", "A space added before the text",
        "learn from the text as it is: Hugging Face's ByteLevel(add_prefix_space=True) puts a "
        "space before it (so that the first word looks like the others); GPT-2 and this "
        "course do not.",
        (_learn_with(prefix=" "),),
    ),
    Mistake(
        "characters_not_bytes", "Characters' code points used instead of their UTF-8 bytes",
        "BPE here works on bytes: 'é' is the two ranks 195, 169 (piece.encode('utf-8')), not "
        "ord('é') = 233; ranks 256 and up are the merges.",
        (_learn_with(chars=True),),
    ),
    Mistake(
        "min_count", "Merges stopped once the best pair occurs only once",
        "learn n_merges merges, however rare the best pair: stop early only when no pair is "
        "left. (Hugging Face's BpeTrainer(min_frequency=2) stops at pairs seen once; this "
        "exercise has no such threshold.)",
        (_learn_with(min_count=2),),
    ),
    Mistake(
        "no_frequency", "Pairs counted once per distinct word, without its frequency",
        "words map each pre-token to how often it occurs: a word that occurs 5 times adds "
        "its pairs 5 times.",
        (_learn_with(freq=False), _learn_with(freq=False, overlap=False)),
    ),
    Mistake(
        "non_overlapping", "A run of one byte counted without its overlapping pairs",
        "every adjacent position counts: a, a, a holds (a, a) twice. Searching the pair as "
        "a substring skips the overlapping ones.",
        (_learn_with(overlap=False),),
    ),
    Mistake(
        "words_not_updated", "The words never merged: the same pair chosen again",
        "after choosing a pair, replace it in EVERY word (merge) before counting again; "
        "else the counts never change.",
        (_learn_with(update=False),),
    ),
    Mistake(
        "wordpiece_score", "The pair chosen by WordPiece's score, count(ab) / (count(a) count(b)), "
        "not by its count",
        "BPE merges the MOST FREQUENT pair: max(counts, key=counts.get), ties to the smallest "
        "pair. Dividing by the tokens' own counts (WordPiece's likelihood score) favours rare "
        "tokens that always come together: other merges.",
        (_learn_with(tie="wordpiece"),),
    ),
    Mistake(
        "words_dropped", "The words that do not hold the chosen pair dropped from the next step",
        "after a merge, EVERY word goes on to the next count: merge(word, ...) leaves a word "
        "without the pair as it is, but it still holds the pairs the next merges need. Keep "
        "them all (merged or not).",
        (_learn_with(update="drop"), _learn_with(update="drop_pair")),
    ),
    Mistake(
        "new_ids_off_by_one", "New ids off by one: the first merge makes {first}",
        "the bytes are ranks 0..255, so merge i (from 0) makes rank 256 + i: the first new id "
        "is 256, the length of the vocabulary so far.",
        tuple(member(_learn_with(first=f), first=f) for f in (255, 257)),
    ),
    Mistake(
        "n_merges_off_by_one", "{how} merges than n_merges",
        "learn exactly n_merges merges (for i in range(n_merges)), stopping earlier only "
        "when no pair is left.",
        (member(_learn_with(extra=1), how="One more"), member(_learn_with(extra=-1), how="One fewer")),
    ),
    Mistake(
        "tie_rule", "Ties broken by another rule ({rule})",
        "among the pairs of the largest count, take the smallest pair (a, b): the smallest "
        "a, then the smallest b.",
        (member(_learn_with(tie="first"), rule="the first pair counted"),
         member(_learn_with(tie="largest"), rule="the largest pair"),
         member(_learn_with(tie="first_element"),
                rule="the smallest a, then the first counted, not the smallest b"),
         member(_learn_with(tie="second_first"), rule="the smallest b first, then the smallest a"),
         member(lambda text, n_merges, special_tokens=(): learn_merges(
             text, n_merges, GPT2_PATTERN, special_tokens, BYTE_ORDER),
                rule="Hugging Face tokenizers': the bytes in GPT-2's printable order, not by "
                     "value")),
    ),
    _in_re(_learn_with),
    _stand_ins(_learn_with, "and merges make 256 + i"),
    Mistake(
        "vocab_size", "n_merges read as a vocabulary size: {n} merges",
        "n_merges is the number of merges to learn: range(n_merges), not a vocabulary size from "
        "which the 256 bytes{also} are taken (minbpe's train(text, vocab_size) counts them).",
        (member(lambda text, n_merges, special_tokens=(): _learn(
            text, max(0, n_merges - 256), special_tokens), n="n_merges - 256", also=""),
         member(lambda text, n_merges, special_tokens=(): _learn(
             text, max(0, n_merges - 256 - len(special_tokens)), special_tokens),
                n="n_merges - 256 - the special tokens", also=" and the special tokens")),
    ),
    Mistake(
        "counts_carried", "The counts carried over from step to step, not counted afresh",
        "the counts made before the loop and added to at each step keep the pairs that earlier "
        "merges took{how}: count the pairs of the words as they are NOW, in a new dict at each "
        "step (counts = count_pairs(words) inside the loop).",
        (member(_learn_with(carry="drop"), how=" and count the others again and again (deleting the "
                "chosen pair does not undo that)"),
         member(_learn_with(carry="keep"), how=", so the same pair can win twice")),
    ),
    Mistake(
        "words_partly_merged", "The chosen pair merged in {where} only",
        "after choosing a pair, replace EVERY occurrence of it in EVERY word (merge each word) "
        "before counting again: an occurrence left unmerged is counted again at the next step.",
        (member(_learn_with(update="first"), where="the first word that holds it"),
         member(_learn_with(update="once"), where="its first occurrence in each word")),
    ),
    Mistake(
        "specials_joined", "Special tokens deleted from the text: the text on their two sides joined",
        "cut the text AT the special tokens (re.split): the parts between them are pre-tokenized "
        "apart, so no pre-token and no merge spans a special token. Deleting them (re.sub with "
        "{by!r}) joins the word before one to the word after it.",
        tuple(member(_learn_with(cut=by), by=by) for by in ("", " ")),
    ),
    Mistake(
        "no_early_stop", "No early stop when no pair is left",
        "once every word is a single token there is no pair to count: max() of an empty "
        "count raises. Stop the loop when the counts are empty (fewer than n_merges merges "
        "then).",
        (_learn_with(stop=False),),
    ),
    Mistake(
        "one_part_trained", "Only the text {which} trained on: the words rebuilt for every part",
        "the parts between special tokens are all training text: make the word counts once, "
        "before the loop over the parts, and add every part's pre-tokens to them ({how} keeps "
        "the {last} part's words alone).",
        (member(lambda text, n_merges, special_tokens=(): _learn(
            _parts(text, special_tokens)[-1], n_merges), which="after the last special token",
            how="words = Counter() inside the loop", last="last"),
         member(lambda text, n_merges, special_tokens=(): _learn(
             _parts(text, special_tokens)[0], n_merges), which="before the first special token",
             how="a return or break inside the loop", last="first")),
    ),
)
_LEARN_LADDER = {
    "one_part_trained": (SPECIALS, "print the words you count for 'ab<|end|>cd' with "
                         "special_tokens=('<|end|>',): 'ab' and 'cd'."),
    "specials_merged": (SPECIALS, "print the pre-tokens of 'ab<|end|>ab' with "
                        "special_tokens=('<|end|>',): '<|end|>' must not be among them."),
    "across_pre_tokens": (None, "print the words you count pairs in, for 'ab. ab.': "
                          "'ab', '.', ' ab', '.'."),
    "no_frequency": (None, "print your words and their frequencies for 'ab ab ab'."),
    "non_overlapping": (COUNTING, "print your counts for the text 'aaa': (97, 97) counts 2."),
    "wordpiece_score": (None, "print the count of the pair you choose first, next to the largest "
                        "count."),
    "words_dropped": (None, "print your words before and after the first merge: as many words."),
    "words_not_updated": (None, "print the words after each step: the chosen pair must be gone."),
    "new_ids_off_by_one": (None, "print the id you give the first merge, and the largest byte."),
    "n_merges_off_by_one": (None, "print len(learn_merges('abcabc abc', 3))."),
    "specials_as_patterns": (SPECIALS, "print re.split('<|end|>', 'a<|end|>b') and "
                             "re.split(re.escape('<|end|>'), 'a<|end|>b')."),
    "split_on_whitespace": (None, "print pre_tokenize('the cat.') next to 'the cat.'.split()."),
    "prefix_space": (None, "print your first word for 'the cat': 'the', with no space."),
    "other_pre_tokenizer": (("11_tokens", "2. Pre-tokens: where merges stop"),
                            "print your pre-tokens of \"DON'T  stop 12345\" next to pre_tokenize's."),
    "text_changed": (None, "print the text your words come from next to the text given."),
    "specials_take_ids": (SPECIALS, "print your first merge's id for learn_merges('abab', 1, "
                          "('<|end|>',)): 256."),
    "specials_in_budget": (SPECIALS, "print len(learn_merges('abcdef', 3, ('<|end|>',))): 3."),
    "specials_not_longest_first": (SPECIALS, "print your pieces of 'x<|a|>bcy' with "
                                   "special_tokens=('<|a|>', '<|a|>bc'): 'x', 'y'."),
    "characters_not_bytes": (None, "print list('é'.encode('utf-8')) next to ord('é')."),
    "min_count": (None, "print len(learn_merges('abcd', 3)): 3."),
    "no_early_stop": (None, "call learn_merges('ab', 5): one merge, then no pair is left."),
    "pattern_in_re": (("11_tokens", "2. Pre-tokens: where merges stop"),
                      "print regex.findall(GPT2_PATTERN, 'the cat'), with import regex."),
    "stand_ins_as_ranks": (None, "print list(' the'.encode('utf-8')): the space is 32."),
    "counts_carried": (None, "print the counts at each step: made anew from the words of that step."),
    "vocab_size": (None, "print len(learn_merges('abcabc abc', 3)): 3."),
    "words_partly_merged": (None, "print the words after each step: the chosen pair must be gone "
                            "from every word."),
    "specials_joined": (SPECIALS, "print your pieces of 'ab<|end|>ab' with special_tokens="
                        "('<|end|>',): 'ab', 'ab'."),
    "tie_rule": (None, "print the counts before a step where two pairs share the largest count, "
                 "and the pair you take. max(counts, key=lambda p: (counts[p], -p[0], -p[1])) "
                 "applies the rule."),
}


def _learn_case(text, n_merges, special_tokens=None, note=""):
    kwargs = {} if special_tokens is None else {"special_tokens": special_tokens}
    shown = text if len(text) < 60 else text[:57] + "..."
    label = (f"text={shown!r} ({len(text)} characters), n_merges={n_merges}"
             + (f", special_tokens={special_tokens!r}" if kwargs else "") + note)
    return Case((text, n_merges), kwargs, label=label, names=("text", ""))


_PYTHON = ('def add(a, b):\n    """Add a and b."""\n    return a + b\n\n\n'
           'def main():\n    total = add(1, 2)\n    print(total)\n    return total\n')
LEARN = Item(
    EXERCISE, "learn_merges", learn_merges,
    [_learn_case("the cat sat on the mat. the cat ran.", 10),
     _learn_case(_PYTHON, 25),
     _learn_case("aaaa aaa aaa ab ab ab ab", 4, note=" (runs of one byte)"),
     _learn_case("abcd dcba bdca", 6, note=" (ties)"),
     _learn_case("café été naïve déjà vu", 8, note=" (letters of two bytes)"),
     _learn_case("hello<|endoftext|>hello<|endoftext|>hello", 6, ("<|endoftext|>",)),
     _learn_case("ab ab", 5, note=" (no pair left after 2 merges)"),
     _learn_case("the end, the bend<|end|>then the end<|end|>", 8, ("<|end|>",),
                 " (the special token's letters in the text too)"),
     # The regimes where ported tokenizers break (tiktoken, minbpe, HF tokenizers, course
     # ports): see _REGIMES.
     _learn_case("DON'T WON'T CAN'T ISN'T don't", 6, note=" (upper-case contractions)"),
     _learn_case("in 2024: 1234567 and 7654321, 1234567", 8, note=" (long digit runs)"),
     _learn_case("  hello   world  \n\n  hello\t\tworld   ", 8,
                 note=" (whitespace at the start and end, runs of it, newlines, tabs)"),
     _learn_case("a , b ; c ! d ? a , b ; a ,", 5, note=" (punctuation after a space)"),
     _learn_case("ab<|a|>bcd<|a|>bc x<|a|>bcbc<|b|>ab<|a|>", 6, ("<|a|>", "<|a|>bc", "<|b|>"),
                 " (several special tokens, one the start of another)"),
     _learn_case("ÉCOLE école ÉCOLE ﬁne ﬁne cafe\u0301 cafe\u0301 😀😀", 10,
                 note=" (upper case outside ASCII, a ligature, a decomposed é, an emoji)"),
     _learn_case("the cat sat on the mat. the cat ran.", 4, note=" (the first case's text again)"),
     _learn_case("hello<|endoftext|>hello<|endoftext|>hello", 6,
                 note=" (an earlier case's text and n_merges, no special token)")],
    laddered(LEARN_MISTAKES, _LEARN_LADDER), same=_same_merges,
    what="merges", prep="on",
    formula="Each step: count the pairs within the words (times their frequency), take the "
            "largest count (ties: the smallest pair), merge it into 256 + step in every word.",
    twins=(_learn_with(),), section=TRAINING, again=True,
    explain=lambda case, got, want: sequences.explain_merges(
        _words_of(case.args[0], case.kwargs.get("special_tokens", ())), got, want, case.label,
        count=count_pairs, merge=merge, whole=tuple(case.args[0].encode("utf-8"))),
)


# --------------------------------------------------------------------------------- encode


def _token_bytes(merges):
    """Rank -> bytes, for `merges` (pair -> rank, in rank order)."""
    vocab = {b: bytes([b]) for b in range(256)}
    for (a, b), r in merges.items():
        vocab[r] = vocab[a] + vocab[b]
    return vocab


def _parts(text, special_tokens):
    """The text between the special tokens (each cut out, the longest first)."""
    if not special_tokens:
        return [text]
    return regex.split("|".join(map(regex.escape, sorted(special_tokens, key=len, reverse=True))), text)


def _encode(text, merges, *, split=True, chars=False, pick="lowest", rounds=None, prefix="",
            shortest=1, pattern=GPT2_PATTERN, normalize=None, offset=0, emit=False):
    """encode with the variations mistakes make: `split` False encodes the whole text as one
    piece; `chars` takes ord(c) per character instead of UTF-8 bytes; `pick` the pair merged
    each round: "lowest" rank, "highest" rank, "leftmost" (the first adjacent pair that is a
    merge; "leftmost_one": only that occurrence of it), "count" (the pair most frequent in
    the piece, training's rule; ties to the first seen), "count_rank" (the same, ties to the
    lowest rank), "default_zero" (the lowest of merges.get(pair, 0) over every adjacent pair,
    stopping at a pair that is no merge), or "greedy" (no pairs: the longest known token at
    each position); `rounds`
    at most that many merges per piece; `prefix` put before the text; `shortest` the length at
    which a word stops merging (1: while len(word) > 1); `pattern` the pre-tokenizer's;
    `normalize` applied to the text first; `chars` "stand_ins": GPT-2's stand-ins' code points;
    `pick` "none_rank": min(pairs, key=merges.get), which raises where a pair is no merge;
    "sorted": every merge applied once, in the order of the pairs (sorted(merges)); "each_once":
    every merge applied once, in rank order, to its first occurrence only; "stop_at_absent":
    the merges in rank order, stopping at the first whose pair the word does not hold;
    "dict_order": every merge applied once, in the dict's order; "ranked_once": the pairs of
    the bytes ranked once, then merged in that order (no pair a merge makes); "reversed": each pair's rank
    looked up as (b, a) ("reversed_both": and (b, a)'s rank written); `offset` added to each
    rank written; `emit`: the word written out after every merge, inside the loop (and never
    when nothing is merged)."""
    text = (normalize or str)(text)
    cut = pattern if callable(pattern) else lambda t: pre_tokenize(t, pattern)
    pieces = cut(prefix + text) if split else [prefix + text]
    if pick == "greedy":
        known = {v: r for r, v in _token_bytes(merges).items()}
        out = []
        for piece in pieces:
            data, i = piece.encode("utf-8"), 0
            while i < len(data):
                j = max(j for j in range(i + 1, len(data) + 1) if data[i:j] in known)
                out.append(known[data[i:j]])
                i = j
        return out
    out = []
    for piece in pieces:
        word = (tuple(map(ord, piece)) if chars is True else tuple(_STAND_IN[b] for b in piece.encode())
                if chars else tuple(piece.encode("utf-8")))
        if pick in ("sorted", "each_once", "stop_at_absent", "dict_order", "ranked_once"):
            order = (sorted(merges) if pick == "sorted" else merges if pick != "ranked_once" else
                     sorted({p for p in zip(word, word[1:]) if p in merges}, key=merges.get))
            for pair in order:
                if pick == "stop_at_absent" and pair not in set(zip(word, word[1:])):
                    break
                word = _merge(word, pair, merges[pair], first_only=pick == "each_once")
            out += word
            continue
        done = 0
        while len(word) > shortest and (rounds is None or done < rounds):
            found = [p for p in zip(word, word[1:]) if p in merges]
            if not found:
                break
            if pick == "leftmost_one":  # that occurrence alone, then look again
                j = next(j for j, p in enumerate(zip(word, word[1:])) if p in merges)
                word = (*word[:j], merges[word[j], word[j + 1]], *word[j + 2:])
                done += 1
                continue
            if pick == "none_rank":  # None for a pair that is no merge: min raises
                pair = min(zip(word, word[1:]), key=merges.get)
                word, done = merge(word, pair, merges[pair]), done + 1
                continue
            if pick in ("reversed", "reversed_set", "reversed_both"):  # merges.get((b, a))
                pairs = set(zip(word, word[1:])) if pick == "reversed_set" else zip(word, word[1:])
                pair = min(pairs, key=lambda p: merges.get(p[::-1], math.inf))  # ties: the first
                key = pair[::-1] if pick == "reversed_both" else pair  # the rank written: (b, a)'s
                if key not in merges:
                    break
                word, done = merge(word, pair, merges[key]), done + 1
                continue
            if pick == "default_zero":  # merges.get(p, 0): a pair that is no merge wins the min
                pair = min(zip(word, word[1:]), key=lambda p: merges.get(p, 0))
                if pair not in merges:
                    break
                word, done = merge(word, pair, merges[pair]), done + 1
                continue
            counts = Counter(found)  # in order of first occurrence
            pair = {"lowest": min(found, key=merges.get), "highest": max(found, key=merges.get),
                    "leftmost": found[0], "count": max(counts, key=counts.get),
                    "count_rank": max(counts, key=lambda p: (counts[p], -merges[p]))}[pick]
            word = merge(word, pair, merges[pair] + offset)
            done += 1
            if emit:
                out += word
        out += () if emit else word
    return out


def _encode_with(**bug):
    return lambda text, merges: _encode(text, merges, **bug)


ENCODE_MISTAKES = (
    Mistake(
        "rank_default_zero", "Pairs that are no merge ranked 0: the lowest, so merging stops early",
        "in the min over the piece's pairs, a pair that is no merge must lose: merges.get(pair, "
        "float('inf')), not 0 (ranks start at 256, so 0 beats every real merge and the loop "
        "stops at the first pair that is no merge).",
        (_encode_with(pick="default_zero"),),
    ),
    Mistake(
        "rank_none", "Pairs that are no merge ranked None: min() cannot compare None with a rank",
        "merges.get(pair) is None for a pair that is no merge, and min(pairs, key=merges.get) "
        "raises as soon as a piece holds one: give those pairs a rank above every merge's, "
        "merges.get(pair, float('inf')), and stop when the min is not a merge.",
        (_encode_with(pick="none_rank"),),
    ),
    Mistake(
        "merges_in_pair_order", "Merges applied in the order of the pairs (sorted(merges)), not by rank",
        "sorted(merges) orders the pairs by their tokens, not by when they were learned: apply "
        "the merges by rank (the lowest first), or merge the lowest-rank pair again and again.",
        (_encode_with(pick="sorted"),),
    ),
    Mistake(
        "each_merge_once", "Each merge applied once, to its first occurrence only",
        "applying the merges one after another in rank order is right only if each replaces "
        "EVERY occurrence of its pair (a word can hold it twice: 'aaaa' holds (a, a) at 0 and 2); "
        "a break after the first match leaves the others unmerged.",
        (_encode_with(pick="each_once"),),
    ),
    Mistake(
        "stopped_at_absent_merge", "The merges applied in rank order, stopping at the first the "
        "piece does not hold (break for continue)",
        "walking the merges in rank order, a merge whose pair the piece does not hold is skipped, "
        "not the end: later merges may still apply (a piece 'the' holds no (a, t), but (t, h) "
        "and (th, e) come after it). continue, not break; or merge the lowest-rank pair the "
        "piece holds, again and again.",
        (_encode_with(pick="stop_at_absent"),),
    ),
    _in_re(_encode_with),
    _stand_ins(_encode_with, "and merges replace pairs of ranks"),
    Mistake(
        "characters_not_bytes", "Characters' code points used instead of their UTF-8 bytes",
        "ord(c) is a byte only for ASCII: 'é' is 233 but its UTF-8 bytes are 195, 169, and "
        "the merges were learned on bytes. Start from list(piece.encode('utf-8')).",
        (_encode_with(chars=True),),
    ),
    Mistake(
        "no_pre_tokens", "Text encoded as one piece, without pre-tokenizing",
        "the merges were learned within pre-tokens: encode each pre_tokenize(text) piece on "
        "its own, then join the ids. Across a boundary a merge can apply that training "
        "never made there.",
        (_encode_with(split=False),),
    ),
    _other_pre_tokenizer(_encode_with),
    _text_changed(_encode_with, "encoding", "decode(encode(text)) must give the text back"),
    Mistake(
        "greedy_longest", "Longest known token first (greedy match), not merges by rank",
        "BPE encodes by replaying its merges: start from the bytes and merge the adjacent "
        "pair of the LOWEST rank, again and again. The longest token that matches at each "
        "position (WordPiece's way) can cut a word otherwise.",
        (_encode_with(pick="greedy"),),
    ),
    Mistake(
        "leftmost_pair", "The leftmost mergeable pair merged first, not the lowest rank",
        "each round, among the adjacent pairs that are merges, take the one learned EARLIEST "
        "(the lowest rank: min(pairs, key=merges.get)), wherever it is in the word.",
        (_encode_with(pick="leftmost"), _encode_with(pick="leftmost_one")),
    ),
    Mistake(
        "by_count", "The pair most frequent in the piece merged first, not the lowest rank",
        "counting pairs is how training CHOOSES merges; encoding REPLAYS them: each round, "
        "merge the adjacent pair learned earliest (the lowest rank: min(pairs, "
        "key=merges.get)), however often it occurs in the piece.",
        (_encode_with(pick="count"), _encode_with(pick="count_rank")),
    ),
    Mistake(
        "latest_first", "The pair learned last merged first",
        "ranks are the order of training: the lowest rank was learned first and goes first; "
        "min, not max.",
        (_encode_with(pick="highest"),),
    ),
    Mistake(
        "prefix_space", "A space added before the text",
        "encode the text as it is: Hugging Face's ByteLevel(add_prefix_space=True) puts a "
        "space before it; then decode(encode(text)) is no longer text.",
        (_encode_with(prefix=" "),),
    ),
    Mistake(
        "nothing_merged", "Nothing merged: every rank is a byte of the text",
        "no merge ever applies: the lookup finds no pair (a rank looked up for one token, "
        "merges[word[i]], or a key of another kind), or the loop never runs. Look up each "
        "adjacent PAIR, merges.get((word[i], word[i + 1])), and merge the lowest-rank one until "
        "none is a merge.",
        (_encode_with(rounds=0),),
    ),
    Mistake(
        "last_pair_unmerged", "A piece of two tokens never merged: the loop stops one early",
        "merge while the piece has at least 2 tokens (while len(word) > 1, or >= 2): a pair "
        "is two tokens, and the last merge of a piece leaves one.",
        (_encode_with(shortest=2),),
    ),
    Mistake(
        "one_round", "Only one round of merges",
        "merging a pair makes new pairs that may be merges too: repeat until no adjacent pair "
        "is a merge (a while loop).",
        (_encode_with(rounds=1),),
    ),
    Mistake(
        "pair_reversed", "Each pair's rank looked up the other way round: merges[(b, a)] for a "
        "followed by b",
        "a merge (a, b) is the pair a then b, as learned: look up merges.get((word[i], word[i + "
        "1])); the pair reversed is no merge (or another one), so the lowest-rank pair is never "
        "found.",
        (_encode_with(pick="reversed"), _encode_with(pick="reversed_set"),
         _encode_with(pick="reversed_both")),
    ),
    Mistake(
        "merges_in_dict_order", "Every merge applied once, in the dict's order, not by rank",
        "a dict of merges need not be in rank order (one read from a file, or built by hand): "
        "merge the adjacent pair of the LOWEST rank, again and again; `for pair in merges` "
        "follows the order of insertion, right only when that is the order of the ranks.",
        (_encode_with(pick="dict_order"),),
    ),
    Mistake(
        "rank_offset", "A merged pair written as {what}, not as its rank: {why}",
        "merges[pair] is the new token's rank, 256 or more; write it as it is: merge(word, pair, "
        "merges[pair]).",
        (member(_encode_with(offset=-256), what="its merge index (rank - 256)",
                why="the new token reads as the byte of that number"),
         member(_encode_with(offset=256), what="rank + 256", why="a rank no merge has")),
    ),
    Mistake(
        "emitted_inside_loop", "The ranks written out inside the merge loop: every intermediate word "
        "emitted",
        "ids.extend(word) belongs after the loop that merges one pre-token, once it stops: inside "
        "it, each round's word is written (and a pre-token that no merge changes never).",
        (_encode_with(emit=True),),
    ),
    Mistake(
        "ranked_once", "Pairs ranked once, before any merge: the pairs a merge makes (with a merged "
        "token) never looked at",
        "after each merge the word holds new pairs ((th, e) once t h is th): rank the word's "
        "adjacent pairs AGAIN after every merge and merge the lowest-rank one, until none is a "
        "merge (minbpe's encode: while len(ids) >= 2, stats = get_stats(ids), pair = min(stats, "
        "key=lambda p: merges.get(p, float('inf')))). Pairs sorted once from the bytes stop at "
        "the first level.",
        (_encode_with(pick="ranked_once"),),
    ),
)
_ENCODE_LADDER = {
    "pair_reversed": (None, "print merges.get((116, 104)) and merges.get((104, 116)) for 'th'."),
    "merges_in_dict_order": (None, "encode 'abc' with merges {(98, 99): 257, (97, 98): 256}: "
                             "[256, 99]."),
    "rank_offset": (None, "print the id your merge writes for 'th' with merges {{(116, 104): 256}}: "
                    "256."),
    "emitted_inside_loop": (None, "print encode('a th', merges) with {(116, 104): 256}: [97, 32, "
                            "256]."),
    "nothing_merged": (None, "print encode('the', merges) with merges (t, h), (th, e): one token."),
    "ranked_once": (None, "print the pairs of encode's word after its first merge: are they "
                    "ranked again?"),
    "stopped_at_absent_merge": (None, "print encode('the', merges) with merges (a, t), (t, h), "
                                "(th, e): one token, 'the'."),
    "rank_default_zero": (None, "print the rank your min gives a pair that is no merge: it must "
                          "be above every merge's."),
    "characters_not_bytes": (("11_tokens", "1. Bytes and UTF-8"),
                             "print list('é'.encode('utf-8')) next to ord('é')."),
    "no_pre_tokens": (("11_tokens", "2. Pre-tokens: where merges stop"),
                      "print pre_tokenize(text) for the case, and encode each piece."),
    "by_count": (None, "encode 'cbbbbcbc' with the merges cb, bb, bc (256, 257, 258): bb "
                 "occurs most, yet cb was learned first and goes first."),
    "greedy_longest": (None, "print the ranks of the pairs at each round for one word of the "
                       "case: which is merged first?"),
    "leftmost_pair": (None, "print, each round, every adjacent pair with its rank."),
    "latest_first": (None, "print the rank of the pair you merge each round: it should grow."),
    "one_round": (None, "print the word after each round: stop only when no pair is a merge."),
    "prefix_space": (None, "print decode(encode('the cat')) with your encode."),
    "other_pre_tokenizer": (("11_tokens", "2. Pre-tokens: where merges stop"),
                            "print your pre-tokens of \"DON'T  stop 12345\" next to pre_tokenize's."),
    "text_changed": (None, "print repr(decode(encode(text))) next to repr(text)."),
    "last_pair_unmerged": (None, "encode 'th' with the merge (116, 104) -> 256: one token."),
    "rank_none": (None, "print min([(1, 2), (97, 98)], key={(97, 98): 256}.get)."),
    "each_merge_once": (None, "encode 'aaaa' with the merge (97, 97) -> 256: [256, 256]."),
    "merges_in_pair_order": (None, "print sorted(merges) next to the ranks: the order differs."),
    "pattern_in_re": (("11_tokens", "2. Pre-tokens: where merges stop"),
                      "print regex.findall(GPT2_PATTERN, 'the cat'), with import regex."),
    "stand_ins_as_ranks": (None, "print list(' the'.encode('utf-8')): the space is 32."),
}

_ENCODE_TRAIN = "the cat sat on the mat; the cattle ate; aaaa abab. café déjà été\n        ok\n    ok"
_MERGES = {p: 256 + i for i, p in enumerate(learn_merges(_ENCODE_TRAIN, 30))}
# Made-up merges where the orders of merging differ: ab then bc; ab, bc, then a + bc;
# he, th, her, then th + e; cd, bc, then b + cd.
_AB_BC = {(97, 98): 256, (98, 99): 257}
_A_BC = {(97, 98): 256, (98, 99): 257, (97, 257): 258}
_THE = {(104, 101): 256, (116, 104): 257, (256, 114): 258, (257, 101): 259}
_B_CD = {(99, 100): 256, (98, 99): 257, (98, 256): 258}
_ENCODE_TRAIN_2 = ("  hello world  hello   world\n\n  hello\tworld  DON'T don't WON'T it's IT'S "
                   "12345678 2024 x ,y ;z ,x naïve naïve café cafe\u0301 ﬁne ﬁne ÉCOLE école 😀😀  ")
_MERGES_2 = {p: 256 + i for i, p in enumerate(learn_merges(_ENCODE_TRAIN_2, 40))}
# 's 't 'r 're 'v 've 'm 'l 'll 'd: each of GPT-2's contractions one token.
_CONTRACTIONS = {p: 256 + i for i, p in enumerate(((39, 115), (39, 116), (39, 114), (258, 101), (39, 118),
                                                   (260, 101), (39, 109), (39, 108), (263, 108), (39, 100)))}


def _encode_case(text, merges, note=""):
    return Case((text, merges), names=("text", "merges"),
                label=f"text={text!r}, {len(merges)} merges{note}")


ENCODE = Item(
    EXERCISE, "encode", encode,
    [_encode_case("cbbbbcbc", {(99, 98): 256, (98, 98): 257, (98, 99): 258},
                  " (merges cb, bb, bc: bb occurs most, cb was learned first)"),
     _encode_case("the cat sat", _MERGES),
     _encode_case("the cattle; the mat", _MERGES),
     _encode_case("cafe café, déjà", _MERGES, " (letters of two bytes)"),
     _encode_case("aaaaaa abababab", _MERGES, " (runs)"),
     _encode_case("a  cat   sat", _MERGES, " (runs of spaces)"),
     _encode_case("abc", _AB_BC, " (merges ab, bc)"),
     _encode_case("abc", _A_BC, " (merges ab, bc, a+bc)"),
     _encode_case("there the", _THE, " (merges he, th, her, th+e)"),
     _encode_case("", _MERGES, " (empty)"),
     _encode_case("bcd", _B_CD, " (merges cd, bc, b+cd: the leftmost pair is not the first "
                                "learned, nor the longest token's)"),
     _encode_case("  hello world  ", _MERGES_2, " (whitespace at the start and end)"),
     _encode_case("DON'T stop, it's 12345678", _MERGES_2, " (upper-case contractions, long digits)"),
     _encode_case("hello   \n\n  world\t!", _MERGES_2, " (runs of whitespace, newlines, a tab)"),
     _encode_case("x ,y ;z ,x", _MERGES_2, " (punctuation after a space)"),
     _encode_case("naïve cafe\u0301 ﬁne ÉCOLE 😀", _MERGES_2,
                  " (a decomposed é, a ligature, upper case outside ASCII, an emoji)"),
     _encode_case("   ", _MERGES_2, " (whitespace only)"),
     _encode_case("DON'T don't", {(39, 84): 256, (39, 116): 257},
                  " (merges 'T and 't: only the lower-case one is a contraction)"),
     _encode_case("12345 2024", {(51, 52): 256, (50, 48): 257}, " (merges 34 and 20: long digits)"),
     _encode_case("the cat\r\nsat on the mat\r\n", _MERGES, " (\\r\\n line endings)"),
     _encode_case("the cat thecattlethecattle", _MERGES, " (a pre-token of 19 bytes)"),
     _encode_case("it's don't they're we've I'm we'll he'd", _CONTRACTIONS,
                  " (every GPT-2 contraction, each a merge)"),
     _encode_case("abc bcd", {(98, 99): 257, (97, 98): 256, (257, 100): 258},
                  " (merges given out of rank order: bc, ab, bc+d)")],
    laddered(ENCODE_MISTAKES, _ENCODE_LADDER), same=_same_ids, what="ranks", prep="for",
    formula="Per pre-token: its UTF-8 bytes, then merge the adjacent pair of the lowest rank "
            "until none is a merge.",
    twins=(_encode_with(),), section=ENCODING, again=True,
    explain=lambda case, got, want: sequences.explain_ids(
        case.args[0], pre_tokenize(case.args[0]), got, want, _token_bytes(case.args[1]), case.label),
)


# --------------------------------------------------------------------------------- decode


def _decode(ids, vocab, *, per_token=False, errors="replace", codec="utf-8"):
    """decode with the variations mistakes make: `per_token` decodes each token's bytes on
    its own; `errors` "strict" raises on a cut character, "ignore" drops it; `codec`
    "latin-1" turns each byte into a character."""
    if per_token:
        return "".join(vocab[i].decode(codec, errors=errors) for i in ids)
    return b"".join(vocab[i] for i in ids).decode(codec, errors=errors)


def _valid_prefix(ids, vocab):
    """decode of the bytes up to the first that is no UTF-8 (a strict decode retried shorter)."""
    data = b"".join(vocab[i] for i in ids)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        return data[:error.start].decode("utf-8")


def _clean_up(text):
    for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
                          (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"),
                          (" 're", "'re")):
        text = text.replace(before, after)
    return text


def _decode_with(**bug):
    return lambda ids, vocab: _decode(ids, vocab, **bug)


DECODE_MISTAKES = (
    Mistake(
        "ids_as_bytes", "The ids read as bytes, the vocabulary ignored",
        "bytes(ids) takes each id for one byte: a merged token (256 and above) is no byte "
        "(bytes() raises), and the ids below 256 only happen to be theirs. Look each id up: "
        "b''.join(vocab[i] for i in ids).",
        (lambda ids, vocab: bytes(ids).decode("utf-8", "replace"),
         lambda ids, vocab: bytes(ids).decode("utf-8"),
         lambda ids, vocab: bytearray(ids).decode("utf-8", "replace")),
    ),
    Mistake(
        "token_by_token", "Tokens decoded one by one: a character cut between tokens is lost",
        "a token may hold part of a character ('é' is 2 bytes, and a merge can take one "
        "of them): decoded alone, each part raises, or becomes U+FFFD, or vanishes. Join "
        "every token's bytes first, then decode the whole at once.",
        (_decode_with(per_token=True, errors="strict"), _decode_with(per_token=True),
         _decode_with(per_token=True, errors="ignore")),
    ),
    Mistake(
        "strict", "A cut character raises instead of becoming U+FFFD",
        "ids a model draws can end in the middle of a character: decode with "
        "errors='replace', which shows what is not a whole character as U+FFFD.",
        (_decode_with(errors="strict"),),
    ),
    Mistake(
        "ignored", "A cut character dropped instead of shown as U+FFFD",
        "errors='ignore' hides that the ids end in the middle of a character: use "
        "errors='replace'.",
        (_decode_with(errors="ignore"),),
    ),
    Mistake(
        "other_handler", "A cut character written with errors={handler!r}, not as U+FFFD",
        "decode with errors='replace': what is not a whole character shows as U+FFFD, one "
        "character that every text can hold ({handler!r} writes {shown} instead).",
        tuple(member(_decode_with(errors=h), handler=h, shown=shown) for h, shown in (
            ("backslashreplace", "the byte as text, '\\xc3'"),
            ("surrogateescape", "a lone surrogate, which cannot be printed or saved")))
        + (member(_decode_with(per_token=True, errors="backslashreplace"),
                  handler="backslashreplace", shown="the byte as text, '\\xc3'"),),
    ),
    Mistake(
        "cleaned_up", "Spaces before punctuation removed (transformers' clean_up_tokenization_spaces)",
        "decode gives back the text exactly: ' .' and \" n't\" stay as they are; cleaning them "
        "up (transformers' clean_up_tokenization_spaces) changes texts that had them.",
        (lambda ids, vocab: _clean_up(_decode(ids, vocab)),),
    ),
    Mistake(
        "leading_space_dropped", "The leading space dropped",
        "sentencepiece's decoder drops the space its encoder put before the text; byte-level BPE "
        "puts none, so a leading space is the text's own: keep it.",
        (lambda ids, vocab: _decode(ids, vocab).removeprefix(" "),
         lambda ids, vocab: _decode(ids, vocab).lstrip()),
    ),
    Mistake(
        "joined_with_spaces", "Tokens joined with spaces",
        "the spaces are in the tokens' bytes already (' cat'): join the bytes with nothing, "
        "b''.join(...), then decode (WordPiece's decoder joins with spaces; BPE's does not).",
        (lambda ids, vocab: " ".join(vocab[i].decode("utf-8", errors="replace") for i in ids),
         lambda ids, vocab: b" ".join(vocab[i] for i in ids).decode("utf-8", errors="replace")),
    ),
    Mistake(
        "bytes_of_tokens", "Token bytes joined with bytes(...), which takes ints, not bytes objects",
        "bytes(vocab[i] for i in ids) asks each item to be one byte value (0-255): a token's "
        "bytes b'th' is no int (TypeError). Join them: b''.join(vocab[i] for i in ids), then "
        ".decode('utf-8', errors='replace').",
        (lambda ids, vocab: bytes(vocab[i] for i in ids).decode("utf-8", errors="replace"),),
    ),
    Mistake(
        "latin1", "Bytes decoded as Latin-1, not UTF-8",
        "the text was encoded as UTF-8: decode('utf-8', errors='replace'); Latin-1 turns each "
        "byte of 'é' into a character of its own ('Ã©').",
        (_decode_with(codec="latin-1"),),
    ),
    Mistake(
        "id_left_out", "The {which} id never decoded: {how}",
        "every id is a token: join the bytes of all of them, b''.join(vocab[i] for i in ids).",
        (member(lambda ids, vocab: _decode(ids[:-1], vocab), which="last",
                how="range(len(ids) - 1), or ids[:-1], stops one short"),
         member(lambda ids, vocab: _decode(ids[1:], vocab), which="first",
                how="range(1, len(ids)), or ids[1:], starts one late")),
    ),
    Mistake(
        "cut_at_nul", "The text cut at the first NUL byte (0x00), as a C string ends",
        "0x00 is a byte like any other in UTF-8 (the character U+0000): nothing ends there. Keep "
        "every byte: b''.join(vocab[i] for i in ids).decode('utf-8', errors='replace').",
        (lambda ids, vocab: _decode(ids, vocab).split("\x00")[0],),
    ),
    Mistake(
        "cut_until_valid", "The bytes cut short until they decode strictly: everything from the "
        "first byte that is no text on lost",
        "a strict decode retried with the last byte cut off (or cut at the error's start) keeps "
        "only the text before the first bad byte: a cut character at the end, and all the text "
        "after a bad byte, vanish. decode('utf-8', errors='replace') keeps it all and shows each "
        "bad byte as U+FFFD.",
        (_valid_prefix,),
    ),
)
_DECODE_LADDER = {
    "id_left_out": (None, "print decode([104, 105]): 'hi'."),
    "cut_until_valid": (None, "print repr(decode([104, 255, 105])): 'h\\ufffdi'."),
    "cut_at_nul": (None, "print repr(decode([104, 0, 105])): 'h\\x00i'."),
    "ids_as_bytes": (None, "print vocab[256] next to what your decode makes of [256]."),
    "token_by_token": (None, "print vocab[i] for each id of the case: does one hold half a "
                       "character?"),
    "strict": (None, "print bytes([195]).decode('utf-8', errors='replace')."),
    "ignored": (None, "print bytes([195]).decode('utf-8', errors='replace')."),
    "latin1": (None, "print 'é'.encode('utf-8'), and the two ways to decode it."),
    "cleaned_up": (None, "print decode(ids) for the ids of 'hi . yes'."),
    "leading_space_dropped": (None, "print repr(decode([32, 104, 105])): ' hi'."),
    "joined_with_spaces": (None, "print decode([256, 101]) with 256: b'th': 'the'."),
    "bytes_of_tokens": (None, "print bytes([b'a', b'b']) and b''.join([b'a', b'b'])."),
    "other_handler": (None, "print bytes([195]).decode('utf-8', errors='replace')."),
}

_VOCAB = {**{b: bytes([b]) for b in range(256)}, 256: b"th", 257: b"e \xc3", 258: b"\xa9t"}


def _decode_case(ids, note=""):
    return Case((ids, _VOCAB), names=("ids", "vocab"),
                label=f"ids={ids!r}{note} (256: b'th', 257: b'e \\xc3', 258: b'\\xa9t')")


DECODE = Item(
    EXERCISE, "decode", decode,
    [_decode_case([256, 101, 32, 99, 97, 116]),
     _decode_case([99, 97, 102, 195, 169], " (a letter of two bytes)"),
     _decode_case([256, 257, 258], " ('é' cut between two tokens)"),
     _decode_case([99, 97, 102, 195], " (the ids end inside 'é')"),
     _decode_case([]),
     _decode_case([104, 105, 240, 159, 152], " (the ids end inside an emoji of 4 bytes)"),
     _decode_case([169, 116, 104], " (the ids start inside a character)"),
     _decode_case([195, 99, 195, 169, 32, 32], " (a cut character, then a whole one, then spaces)"),
     _decode_case([32, 256, 101, 32, 46, 32, 44, 32, 110, 39, 116],
                  " (a leading space, spaces before punctuation)"),
     Case(([256, 257, 258], {**_VOCAB, 256: b"ab", 257: b"cd", 258: b"e"}), names=("ids", "vocab"),
          label="ids=[256, 257, 258] (another vocabulary: 256: b'ab', 257: b'cd', 258: b'e')"),
     _decode_case([239, 187, 191, 104, 105, 13, 10, 101, 204, 129],
                  " (a text that starts with U+FEFF, a \\r\\n line ending, e + U+0301)"),
     _decode_case([104, 0, 1, 2, 3, 105, 255, 254, 97],
                  " (the bytes 0x00-0x03, two invalid bytes in a row)")],
    laddered(DECODE_MISTAKES, _DECODE_LADDER), what="text", prep="for",
    formula="Join every token's bytes, then .decode('utf-8', errors='replace').",
    twins=(_decode_with(),), section=DECODING, again=True,
    explain=lambda case, got, want: sequences.explain_text(got, want, case.label),
)

ITEMS = (COUNT, MERGE, LEARN, ENCODE, DECODE)
