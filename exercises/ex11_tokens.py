"""Exercise 11: byte-level BPE, the tokenizer of GPT-2, GPT-4 and Llama 3 (Llama 1-2 use
SentencePiece over characters), written as functions on ranks: a byte b is rank b (0..255),
merge i makes rank 256 + i.

Fill in the functions below, then check them from the repository's root:

    pytest exercises/test_ex11_tokens.py              # all five
    pytest exercises/test_ex11_tokens.py -k merge     # one, by its name here

or from a notebook:

    from tfcourse.checking import check
    check("ex11_tokens")

The checks run your functions on small words and texts (runs of one byte, words that occur
several times, letters of two bytes, ties between pairs, a special token, a character cut
between two tokens) and compare with tfcourse.tokens.
"""

import re  # noqa: F401  (you will likely need these)
from collections import Counter  # noqa: F401

from tfcourse.tokens import pre_tokenize  # noqa: F401  (GPT-2's pattern: where merges stop)


def count_pairs(words):
    """How often each adjacent pair occurs.

    Args:
        words: dict word -> frequency; a word is a tuple of ranks, e.g. {(104, 105): 3}.

    Returns:
        dict (a, b) -> count(a, b) = sum over words of frequency x the number of positions i
        with word[i] == a and word[i + 1] == b. Every position counts: (97, 97, 97) holds
        (97, 97) twice.
    """
    raise NotImplementedError


def merge(word, pair, new_id):
    """``word`` (a tuple of ranks) with every occurrence of ``pair`` replaced by ``new_id``,
    scanning left to right: merge((5, 5, 5), (5, 5), 256) == (256, 5).

    Returns:
        a tuple of ranks (learn_merges uses words as dict keys: a list is unhashable).
    """
    raise NotImplementedError


def learn_merges(text, n_merges, special_tokens=()):
    """The first ``n_merges`` merges BPE learns from ``text``, as a list of pairs of ranks;
    merge i makes rank 256 + i.

    1. Cut the special tokens (strings) out of the text; pre_tokenize each remaining part;
       words = Counter of each pre-token's UTF-8 bytes (a tuple of ranks).
    2. n_merges times: count the pairs (count_pairs); take the pair of the largest count,
       ties to the smallest pair (a, b) (the smallest a, then the smallest b); merge it into
       256 + i in every word. Stop early when no pair is left.

    Recount every step, as written here (the notebook's tfcourse.tokens.learn_merges updates
    the counts instead: same merges, faster). Cut the special tokens longest first, so that
    one that contains another is cut whole (re.escape them: '|' is special in a pattern).

    Hint: one max() over the counts can apply the tie rule too, with a key that puts the
    count first (--hint=2 shows it).
    """
    raise NotImplementedError


def encode(text, merges):
    """Text -> ranks. merges: dict (a, b) -> its rank (256, 257, ...: the order learned).

    For each pre-token of pre_tokenize(text): start from its UTF-8 bytes; while some
    adjacent pair is in merges, merge the pair of the LOWEST rank (every occurrence). Join
    the pieces' ranks. (No special tokens here: tfcourse.tokens.BPE handles those.)
    """
    raise NotImplementedError


def decode(ids, vocab):
    """Ranks -> text. vocab: dict rank -> bytes, for every rank: the bytes 0..255 (97 ->
    b'a') and the merges (256 -> b'th', ...).

    A token may hold part of a character: the ids may also end inside one. Show what is not
    a whole character as U+FFFD ('\ufffd'), never raise.
    """
    raise NotImplementedError
