"""Wrong ways to write exercise 11 (byte-level BPE: counting pairs, one merge, learning the
merges, encoding, decoding), and the diagnosis each must get; then RIGHT: correct solutions
in other styles than the reference's, which every check must pass
(tests/test_right_solutions.py)."""

import codecs
import re
import unicodedata
from collections import Counter, defaultdict

import regex

from tfcourse.tokens import GPT2_PATTERN, merge, pre_tokenize

from . import wrong

# ---------------------------------------------------------------------------- count_pairs


@wrong("count_pairs.non_overlapping")
def count_by_substring(words):
    counts = Counter()
    for word, freq in words.items():
        data = bytes(w % 256 for w in word) if all(w < 256 for w in word) else None
        for a, b in set(zip(word, word[1:])):
            if data is not None:
                counts[(a, b)] += data.count(bytes([a, b])) * freq
            else:
                counts[(a, b)] += sum(1 for p in zip(word, word[1:]) if p == (a, b)) * freq
    return counts


@wrong("count_pairs.non_overlapping")
def count_skipping_after_a_repeat(words):
    counts = {}
    for word, freq in words.items():
        i = 0
        while i < len(word) - 1:
            counts[word[i], word[i + 1]] = counts.get((word[i], word[i + 1]), 0) + freq
            i += 2 if word[i] == word[i + 1] else 1  # "what one merge can take"
    return counts


@wrong("count_pairs.no_frequency")
def count_without_frequency(words):
    counts = defaultdict(int)
    for word in words:
        for pair in zip(word, word[1:]):
            counts[pair] += 1
    return dict(counts)


@wrong("count_pairs.once_per_word")
def count_set_of_pairs(words):
    counts = Counter()
    for word, freq in words.items():
        for pair in set(zip(word, word[1:])):
            counts[pair] += freq
    return counts


# ---------------------------------------------------------------------------------- merge


@wrong("count_pairs.pair_range_off_by_one")
def count_up_to_len_minus_two(words):
    counts = defaultdict(int)
    for word, freq in words.items():
        for i in range(len(word) - 2):  # one pair short
            counts[word[i], word[i + 1]] += freq
    return dict(counts)


@wrong("count_pairs.assigned")
def count_by_assignment(words):
    counts = {}
    for word, freq in words.items():
        for a, b in zip(word[:-1], word[1:]):
            counts[(a, b)] = freq  # overwrites
    return counts


@wrong("count_pairs.return_kind")
def count_with_text_keys(words):
    counts = Counter()
    for word, freq in words.items():
        for i in range(len(word) - 1):
            counts[f"{word[i]},{word[i + 1]}"] += freq
    return dict(counts)


@wrong("merge.touching_missed")
def merge_padded_replace(word, pair, new_id):
    joined = "|" + "|".join(str(t) for t in word) + "|"
    joined = joined.replace(f"|{pair[0]}|{pair[1]}|", f"|{new_id}|")
    return tuple(int(t) for t in joined.strip("|").split("|") if t)


@wrong("merge.either_order")
def merge_sorted_pair(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and sorted(word[i:i + 2]) == sorted(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


@wrong("encode.rank_default_zero")
def encode_unknown_pairs_first(text, merges):
    ids = []
    for piece in pre_tokenize(text):
        word = tuple(piece.encode("utf-8"))
        while len(word) > 1:
            best = sorted(zip(word, word[1:]), key=lambda p: merges.get(p, 0))[0]
            if best not in merges:
                break
            word = _merge(word, best, merges[best])
        ids.extend(word)
    return ids


@wrong("encode.return_kind")
def encode_a_list_per_piece(text, merges):
    out = []
    for piece in pre_tokenize(text):
        word = tuple(piece.encode("utf-8"))
        while True:
            known = [p for p in zip(word, word[1:]) if p in merges]
            if not known:
                break
            pair = min(known, key=merges.__getitem__)
            word = _merge(word, pair, merges[pair])
        out.append(list(word))
    return out


@wrong("decode.ids_as_bytes")
def decode_ids_as_bytes(ids, vocab):
    return bytearray(ids).decode(errors="replace")


_MERGED = {}


@wrong("merge.state_kept")
def merge_remembered_by_word_and_pair(word, pair, new_id):
    key = (tuple(word), tuple(pair))  # new_id left out of the key
    if key not in _MERGED:
        out, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == tuple(pair):
                out.append(new_id)
                i += 2
            else:
                out.append(word[i])
                i += 1
        _MERGED[key] = tuple(out)
    return _MERGED[key]


_UTF8 = codecs.getincrementaldecoder("utf-8")("replace")


@wrong("decode.state_changes")
def decode_through_one_decoder(ids, vocab):
    return _UTF8.decode(b"".join(vocab[i] for i in ids))  # never final=True


@wrong("merge.return_kind")
def merge_into_a_list(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if tuple(word[i:i + 2]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out  # a list: learn_merges cannot use it as a dict key


@wrong("merge.second_kept")
def merge_step_one(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == pair[0] and word[i + 1] == pair[1]:
            out.append(new_id)
        else:
            out.append(word[i])
        i += 1
    return out


@wrong("merge.last_dropped")
def merge_loop_to_len_minus_one(word, pair, new_id):
    out, i = [], 0
    while i < len(word) - 1:
        if (word[i], word[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


@wrong("merge.as_bytes")
def merge_by_bytes_replace(word, pair, new_id):
    return tuple(bytes(word).replace(bytes(pair), bytes([new_id % 256])))


@wrong("merge.first_only")
def merge_first_found(word, pair, new_id):
    word = list(word)
    for i in range(len(word) - 1):
        if (word[i], word[i + 1]) == pair:
            return tuple(word[:i] + [new_id] + word[i + 2:])
    return tuple(word)


@wrong("merge.right_to_left")
def merge_from_the_end(word, pair, new_id):
    out, i = [], len(word) - 1
    while i >= 0:
        if i > 0 and (word[i - 1], word[i]) == pair:
            out.insert(0, new_id)
            i -= 2
        else:
            out.insert(0, word[i])
            i -= 1
    return tuple(out)


# --------------------------------------------------------------------------- learn_merges


def _pairs(words):
    counts = Counter()
    for word, freq in words.items():
        for pair in zip(word, word[1:]):
            counts[pair] += freq
    return counts


def _merge(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if word[i:i + 2] == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def _words(text, special_tokens, escape=re.escape, pieces=pre_tokenize,
           ranks=lambda piece: tuple(piece.encode())):
    """The words' frequencies: the text cut at the special tokens (each passed through
    `escape` into the pattern), each part cut into `pieces`, each piece made `ranks`."""
    found = "|".join(map(escape, sorted(special_tokens, key=len, reverse=True)))
    parts = re.split(found, text) if special_tokens else [text]
    return Counter(ranks(p) for part in parts for p in pieces(part))


def _learn(words, n_merges, first=256, key=None, stop=lambda counts: not counts):
    merges = []
    for i in range(n_merges):
        counts = _pairs(words)
        if stop(counts):
            break
        pair = max(counts, key=key(counts) if key else lambda p, c=counts: (c[p], -p[0], -p[1]))
        merges.append(pair)
        words = {_merge(w, pair, first + i): f for w, f in words.items()}
    return merges


@wrong("learn_merges.specials_merged")
def learn_ignoring_specials(text, n_merges, special_tokens=()):
    return _learn(Counter(tuple(p.encode()) for p in pre_tokenize(text)), n_merges)


@wrong("learn_merges.across_pre_tokens")
def learn_on_the_whole_text(text, n_merges, special_tokens=()):
    parts = re.split("|".join(map(re.escape, special_tokens)), text) if special_tokens else [text]
    return _learn(Counter(tuple(p.encode()) for p in parts if p), n_merges)


@wrong("learn_merges.no_frequency")
def learn_on_distinct_words(text, n_merges, special_tokens=()):
    return _learn(dict.fromkeys(_words(text, special_tokens), 1), n_merges)


@wrong("learn_merges.non_overlapping")
def learn_counting_substrings(text, n_merges, special_tokens=()):
    words = _words(text, special_tokens)
    merges = []
    for i in range(n_merges):
        counts = Counter()
        for word, freq in words.items():
            j = 0
            while j < len(word) - 1:
                counts[word[j:j + 2]] += freq
                j += 2 if word[j] == word[j + 1] else 1  # "a match is consumed"
        if not counts:
            break
        pair = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        merges.append(pair)
        words = {_merge(w, pair, 256 + i): f for w, f in words.items()}
    return merges


@wrong("learn_merges.words_not_updated")
def learn_without_merging(text, n_merges, special_tokens=()):
    words = _words(text, special_tokens)
    merges = []
    for i in range(n_merges):
        counts = _pairs(words)
        if not counts:
            break
        pair = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        merges.append(pair)
        {_merge(w, pair, 256 + i): f for w, f in words.items()}  # result never kept
    return merges


@wrong("learn_merges.tie_rule")
def learn_ties_by_first_element(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens), n_merges, key=lambda c: lambda p: (c[p], -p[0]))


@wrong("learn_merges.tie_rule")
def learn_ties_in_printable_byte_order(text, n_merges, special_tokens=()):
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    order = {b: i for i, b in enumerate(printable + [b for b in range(256) if b not in printable])}
    rank = lambda t: order.get(t, t)  # noqa: E731  (merged tokens: by age)
    return _learn(_words(text, special_tokens), n_merges,
                  key=lambda c: lambda p: (c[p], -rank(p[0]), -rank(p[1])))


@wrong("learn_merges.no_early_stop")
def learn_never_stopping(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens), n_merges, stop=lambda counts: False)


@wrong("learn_merges.specials_as_patterns")
def learn_with_unescaped_specials(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens, escape=str), n_merges)  # '|' read as alternation


@wrong("learn_merges.split_on_whitespace")
def learn_on_whitespace_words(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens, pieces=str.split), n_merges)


@wrong("learn_merges.prefix_space")
def learn_with_prefix_space(text, n_merges, special_tokens=()):
    return _learn(_words(" " + text, special_tokens), n_merges)  # add_prefix_space=True


@wrong("learn_merges.characters_not_bytes")
def learn_on_code_points(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens, ranks=lambda piece: tuple(map(ord, piece))), n_merges)


@wrong("learn_merges.min_count")
def learn_with_min_frequency_two(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens), n_merges,
                  stop=lambda counts: not counts or max(counts.values()) < 2)  # min_frequency=2


@wrong("learn_merges.new_ids_off_by_one")
def learn_from_255(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens), n_merges, first=255)


@wrong("learn_merges.new_ids_off_by_one")
def learn_from_257(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens), n_merges, first=257)


@wrong("learn_merges.n_merges_off_by_one")
def learn_one_more(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens), n_merges + 1)


@wrong("learn_merges.tie_rule")
def learn_first_counted(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens), n_merges, key=lambda counts: counts.get)


@wrong("learn_merges.tie_rule")
def learn_sorted_by_count_then_pair(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens), n_merges,
                  key=lambda counts: lambda p: (counts[p], p))


# Other tokenizers' conventions, carried over.
GPT4_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|"""
                r"""\s*[\r\n]|\s+(?!\S)|\s+""")


@wrong("learn_merges.other_pre_tokenizer")
def learn_with_gpt4_pattern(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens, pieces=lambda part: regex.findall(GPT4_PATTERN, part)),
                  n_merges)


@wrong("learn_merges.other_pre_tokenizer")
def learn_with_ascii_letters(text, n_merges, special_tokens=()):
    pattern = r"""'s|'t|'re|'ve|'m|'ll|'d| ?[a-zA-Z]+| ?[0-9]+| ?[^\sa-zA-Z0-9]+|\s+(?!\S)|\s+"""
    return _learn(_words(text, special_tokens, pieces=lambda part: re.findall(pattern, part)), n_merges)


@wrong("learn_merges.text_changed")
def learn_on_stripped_text(text, n_merges, special_tokens=()):
    return _learn(_words(text.strip(), special_tokens), n_merges)


@wrong("learn_merges.text_changed")
def learn_on_nfkc_text(text, n_merges, special_tokens=()):
    return _learn(_words(unicodedata.normalize("NFKC", text), special_tokens), n_merges)


@wrong("learn_merges.specials_not_longest_first")
def learn_with_specials_in_given_order(text, n_merges, special_tokens=()):
    words = Counter()
    parts = [text]
    for special in special_tokens:  # split on each in turn: a shorter one first cuts a longer one
        parts = [q for part in parts for q in part.split(special)]
    for part in parts:
        words.update(tuple(p.encode()) for p in pre_tokenize(part))
    return _learn(words, n_merges)


@wrong("learn_merges.specials_take_ids")
def learn_ids_after_specials(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens), n_merges, first=256 + len(special_tokens))


@wrong("learn_merges.specials_in_budget")
def learn_specials_in_budget(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens), n_merges - len(special_tokens))


_SEEN_TEXTS = {}


@wrong("learn_merges.state_kept")
def learn_cached_by_text(text, n_merges, special_tokens=()):
    if text not in _SEEN_TEXTS:  # the cache forgets n_merges and the special tokens
        _SEEN_TEXTS[text] = _learn(_words(text, special_tokens), n_merges)
    return _SEEN_TEXTS[text]


# --------------------------------------------------------------------------------- encode


def _encode_word(word, merges, choose):
    while len(word) > 1:
        found = [p for p in zip(word, word[1:]) if p in merges]
        if not found:
            break
        pair = choose(found, merges)
        word = _merge(tuple(word), pair, merges[pair])
    return list(word)


@wrong("encode.characters_not_bytes")
def encode_code_points(text, merges):
    return [r for piece in pre_tokenize(text) for r in _encode_word(
        tuple(ord(c) for c in piece), merges, lambda found, m: min(found, key=m.get))]


@wrong("encode.no_pre_tokens")
def encode_whole_text(text, merges):
    return _encode_word(tuple(text.encode()), merges, lambda found, m: min(found, key=m.get))


@wrong("encode.greedy_longest")
def encode_longest_match(text, merges):
    vocab = {bytes([b]): b for b in range(256)}
    pieces = {b: bytes([b]) for b in range(256)}
    for (a, b), r in merges.items():
        pieces[r] = pieces[a] + pieces[b]
        vocab[pieces[r]] = r
    out = []
    for piece in pre_tokenize(text):
        data = piece.encode()
        while data:
            n = max(n for n in range(1, len(data) + 1) if data[:n] in vocab)
            out.append(vocab[data[:n]])
            data = data[n:]
    return out


@wrong("encode.leftmost_pair")
def encode_first_pair_found(text, merges):
    return [r for piece in pre_tokenize(text) for r in _encode_word(
        tuple(piece.encode()), merges, lambda found, m: found[0])]


@wrong("encode.by_count")
def encode_most_frequent_pair(text, merges):
    out = []
    for piece in pre_tokenize(text):
        ids = list(piece.encode("utf-8"))
        while len(ids) > 1:
            counts = {}
            for pair in zip(ids, ids[1:]):
                counts[pair] = counts.get(pair, 0) + 1
            known = [pair for pair in counts if pair in merges]
            if not known:
                break
            pair = max(known, key=lambda p: counts[p])  # as training chooses
            ids = list(merge(tuple(ids), pair, merges[pair]))
        out += ids
    return out


@wrong("encode.latest_first")
def encode_highest_rank(text, merges):
    return [r for piece in pre_tokenize(text) for r in _encode_word(
        tuple(piece.encode()), merges, lambda found, m: max(found, key=m.get))]


@wrong("encode.prefix_space")
def encode_with_prefix_space(text, merges):
    return [r for piece in pre_tokenize(" " + text) for r in _encode_word(
        tuple(piece.encode()), merges, lambda found, m: min(found, key=m.get))]


@wrong("encode.last_pair_unmerged")
def encode_while_more_than_two(text, merges):
    ids = []
    for piece in pre_tokenize(text):
        word = tuple(piece.encode())
        while len(word) > 2:
            found = [p for p in zip(word, word[1:]) if p in merges]
            if not found:
                break
            pair = min(found, key=merges.get)
            word = _merge(word, pair, merges[pair])
        ids += word
    return ids


@wrong("encode.one_round")
def encode_one_round(text, merges):
    out = []
    for piece in pre_tokenize(text):
        word = tuple(piece.encode())
        found = [p for p in zip(word, word[1:]) if p in merges]
        if found:
            pair = min(found, key=merges.get)
            word = _merge(word, pair, merges[pair])
        out.extend(word)
    return out


@wrong("encode.other_pre_tokenizer")
def encode_with_gpt4_pattern(text, merges):
    return [r for piece in regex.findall(GPT4_PATTERN, text) for r in _encode_word(
        tuple(piece.encode()), merges, lambda found, m: min(found, key=m.get))]


@wrong("encode.other_pre_tokenizer")
def encode_case_insensitively(text, merges):
    pattern = regex.compile(GPT2_PATTERN, regex.IGNORECASE)
    return [r for piece in pattern.findall(text) for r in _encode_word(
        tuple(piece.encode()), merges, lambda found, m: min(found, key=m.get))]


@wrong("encode.text_changed")
def encode_stripped(text, merges):
    return [r for piece in pre_tokenize(text.strip()) for r in _encode_word(
        tuple(piece.encode()), merges, lambda found, m: min(found, key=m.get))]


@wrong("encode.text_changed")
def encode_nfc(text, merges):
    return [r for piece in pre_tokenize(unicodedata.normalize("NFC", text)) for r in _encode_word(
        tuple(piece.encode()), merges, lambda found, m: min(found, key=m.get))]


# --------------------------------------------------------------------------------- decode


@wrong("decode.token_by_token")
def decode_each_token(ids, vocab):
    return "".join(vocab[i].decode("utf-8") for i in ids)


@wrong("decode.token_by_token")
def decode_each_token_replacing(ids, vocab):
    text = ""
    for i in ids:
        text += vocab[i].decode("utf-8", errors="replace")
    return text


@wrong("decode.strict")
def decode_strict(ids, vocab):
    return b"".join(vocab[i] for i in ids).decode("utf-8")


@wrong("decode.ignored")
def decode_ignoring(ids, vocab):
    return b"".join(vocab[i] for i in ids).decode(errors="ignore")


@wrong("decode.other_handler")
def decode_backslashreplace(ids, vocab):
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="backslashreplace")


@wrong("decode.cleaned_up")
def decode_cleaned_up(ids, vocab):
    text = b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")
    return re.sub(r" ([.,!?])", r"\1", text).replace(" n't", "n't")


@wrong("decode.leading_space_dropped")
def decode_without_the_dummy_prefix(ids, vocab):
    text = b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")
    return text[1:] if text.startswith(" ") else text


@wrong("decode.joined_with_spaces")
def decode_joined_with_spaces(ids, vocab):
    return " ".join(vocab[i].decode("utf-8", errors="replace") for i in ids)


@wrong("decode.latin1")
def decode_latin1(ids, vocab):
    return "".join(vocab[i].decode("latin-1") for i in ids)


@wrong("count_pairs.rare_pruned")
def count_pruning_singletons(words):
    counts = Counter()
    for word, freq in words.items():
        for pair in zip(word, word[1:]):
            counts[pair] += freq
    return {p: c for p, c in counts.items() if c >= 2}  # subword-nmt's threshold


@wrong("merge.compared_by_identity")
def merge_by_identity(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and word[i] is pair[0] and word[i + 1] is pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


@wrong("count_pairs.state_kept")
def count_into_a_default_counter(words, counts=Counter()):  # noqa: B006  (the mistake)
    for word, freq in words.items():
        for pair in zip(word, word[1:]):
            counts[pair] += freq
    return dict(counts)


@wrong("count_pairs.reversed_pair")
def count_from_the_end(words):
    counts = defaultdict(int)
    for word, freq in words.items():
        backwards = word[::-1]
        for pair in zip(backwards, backwards[1:]):  # (b, a): read from the end
            counts[pair] += freq
    return dict(counts)


@wrong("merge.half_compared")
def merge_on_the_first_token(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if word[i] == pair[0] and i < len(word) - 1:  # the second token never looked at
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


@wrong("merge.half_compared")
def merge_on_the_second_token(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and word[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


@wrong("merge.overlaps_merged")
def merge_every_matching_position(word, pair, new_id):
    starts = [i for i in range(len(word) - 1) if (word[i], word[i + 1]) == tuple(pair)]
    out, i = [], 0
    while i < len(word):
        if i in starts:
            out.append(new_id)
            i += 1 if i + 1 in starts else 2  # the next start is kept: overlapping pairs both merge
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


@wrong("learn_merges.words_partly_merged")
def learn_merging_one_word(text, n_merges, special_tokens=()):
    words, merges = dict(_words(text, special_tokens)), []
    for i in range(n_merges):
        counts = _pairs(words)
        if not counts:
            break
        pair = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        merges.append(pair)
        for w in list(words):
            if pair in zip(w, w[1:]):
                merged = _merge(w, pair, 256 + i)
                words[merged] = words.get(merged, 0) + words.pop(w)
                break  # the first word that holds the pair, not all of them
    return merges


@wrong("learn_merges.words_partly_merged")
def learn_replacing_the_first_occurrence(text, n_merges, special_tokens=()):
    words, merges = _words(text, special_tokens), []
    for i in range(n_merges):
        counts = _pairs(words)
        if not counts:
            break
        pair = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        merges.append(pair)
        merged = Counter()
        for w, f in words.items():
            at = next((j for j in range(len(w) - 1) if w[j:j + 2] == pair), None)
            merged[w if at is None else (*w[:at], 256 + i, *w[at + 2:])] += f
        words = merged
    return merges


@wrong("learn_merges.specials_joined")
def learn_with_specials_deleted(text, n_merges, special_tokens=()):
    for special in special_tokens:
        text = text.replace(special, "")
    return _learn(_words(text, ()), n_merges)


@wrong("learn_merges.tie_rule")
def learn_ties_by_second_token(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens), n_merges,
                  key=lambda counts: lambda p: (counts[p], -p[1], -p[0]))


@wrong("learn_merges.other_pre_tokenizer")
def learn_per_character(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens, pieces=list), n_merges)


@wrong("encode.other_pre_tokenizer")
def encode_each_character(text, merges):
    return [r for c in text for r in _encode_word(
        tuple(c.encode()), merges, lambda found, m: min(found, key=m.get))]


@wrong("encode.other_pre_tokenizer")
def encode_with_a_re_port_of_gpt4(text, merges):
    pattern = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\w]?[a-zA-Z]+|\d{1,3}| ?[^\s\w]+[\r\n]*|"""
               r"""\s*[\r\n]|\s+(?!\S)|\s+""")  # re has no \p{L}
    return [r for piece in re.findall(pattern, text) for r in _encode_word(
        tuple(piece.encode()), merges, lambda found, m: min(found, key=m.get))]


@wrong("count_pairs.short_words_skipped")
def count_words_of_three_or_more(words):
    counts = Counter()
    for word, freq in words.items():
        if len(word) <= 2:  # "no pair to count" one token too early
            continue
        for pair in zip(word, word[1:]):
            counts[pair] += freq
    return dict(counts)


@wrong("count_pairs.read_past_the_end")
def count_every_position(words):
    counts = defaultdict(int)
    for word, freq in words.items():
        for i in range(len(word)):
            counts[word[i], word[i + 1]] += freq
    return counts


@wrong("learn_merges.pattern_in_re")
def learn_with_re(text, n_merges, special_tokens=()):
    pieces = re.compile(GPT2_PATTERN).findall
    return _learn(_words(text, special_tokens, pieces=pieces), n_merges)


@wrong("learn_merges.stand_ins_as_ranks")
def learn_on_printable_stand_ins(text, n_merges, special_tokens=()):
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    table = dict(zip(printable, printable)) | {
        b: 256 + n for n, b in enumerate(b for b in range(256) if b not in printable)}
    return _learn(_words(text, special_tokens, ranks=lambda p: tuple(table[b] for b in p.encode())),
                  n_merges)


@wrong("learn_merges.vocab_size")
def learn_up_to_a_vocabulary_size(text, n_merges, special_tokens=()):
    return _learn(_words(text, special_tokens), n_merges - 256)  # range() of a negative: no merge


@wrong("encode.rank_none")
def encode_ranked_by_get(text, merges):
    out = []
    for piece in pre_tokenize(text):
        word = tuple(piece.encode())
        while len(word) > 1:
            pair = min(zip(word, word[1:]), key=merges.get)
            if pair not in merges:
                break
            word = _merge(word, pair, merges[pair])
        out += word
    return out


@wrong("encode.merges_in_pair_order")
def encode_merges_sorted(text, merges):
    out = []
    for piece in pre_tokenize(text):
        word = tuple(piece.encode())
        for pair in sorted(merges):
            word = _merge(word, pair, merges[pair])
        out += word
    return out


@wrong("encode.pattern_in_re")
def encode_with_re(text, merges):
    return [r for piece in re.findall(GPT2_PATTERN, text) for r in _encode_word(
        tuple(piece.encode()), merges, lambda found, m: min(found, key=m.get))]


@wrong("encode.stand_ins_as_ranks")
def encode_printable_stand_ins(text, merges):
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    others = [b for b in range(256) if b not in printable]
    table = {b: b if b in printable else 256 + others.index(b) for b in range(256)}
    return [r for piece in pre_tokenize(text) for r in _encode_word(
        tuple(table[b] for b in piece.encode()), merges, lambda found, m: min(found, key=m.get))]


@wrong("learn_merges.counts_carried")
def learn_with_counts_made_once(text, n_merges, special_tokens=()):
    words, merges, counts = _words(text, special_tokens), [], Counter()
    for i in range(n_merges):
        counts.update(_pairs(words))  # added to what earlier steps counted
        if not counts:
            break
        pair = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        merges.append(pair)
        del counts[pair]
        words = {_merge(w, pair, 256 + i): f for w, f in words.items()}
    return merges


@wrong("encode.each_merge_once")
def encode_each_merge_at_its_first_place(text, merges):
    out = []
    for piece in pre_tokenize(text):
        word = list(piece.encode())
        for pair, rank in merges.items():
            if pair in zip(word, word[1:]):
                j = list(zip(word, word[1:])).index(pair)
                word[j:j + 2] = [rank]
        out += word
    return out


# ---------------------------------------------------------------------------------- RIGHT


def count_with_zip_over_a_flat_list(words):
    counts = {}
    for word, freq in words.items():
        for i in range(len(word) - 1):
            counts[word[i], word[i + 1]] = counts.get((word[i], word[i + 1]), 0) + freq
    return counts


def merge_by_list_building(word, pair, new_id):
    out = list(word)
    i = 0
    while i < len(out) - 1:
        if out[i] == pair[0] and out[i + 1] == pair[1]:
            out[i:i + 2] = [new_id]
        i += 1
    return tuple(out)


def learn_with_min_and_a_tuple_key(text, n_merges, special_tokens=()):
    words = _words(text, special_tokens)
    merges = []
    for i in range(n_merges):
        counts = _pairs(words)
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        merges.append(pair)
        words = Counter({_merge(w, pair, 256 + i): f for w, f in words.items()})
    return merges


def encode_with_ranks_looked_up(text, merges):
    out = []
    for piece in pre_tokenize(text):
        ids = list(piece.encode("utf-8"))
        while True:
            ranked = [(merges.get(p, float("inf")), i) for i, p in enumerate(zip(ids, ids[1:]))]
            if not ranked or min(ranked)[0] == float("inf"):
                break
            pair = (ids[min(ranked)[1]], ids[min(ranked)[1] + 1])
            ids = list(_merge(tuple(ids), pair, merges[pair]))
        out += ids
    return out


def decode_by_bytearray(ids, vocab):
    data = bytearray()
    for i in ids:
        data.extend(vocab[i])
    return data.decode("utf-8", "replace")


RIGHT = {"count_pairs": [count_with_zip_over_a_flat_list], "merge": [merge_by_list_building],
         "learn_merges": [learn_with_min_and_a_tuple_key], "encode": [encode_with_ranks_looked_up],
         "decode": [decode_by_bytearray]}


@wrong("encode.leftmost_pair")
def encode_first_occurrence_first(text, merges):
    ids = []
    for piece in pre_tokenize(text):
        word = list(piece.encode())
        merged = True
        while merged:
            merged = False
            for j in range(len(word) - 1):
                if (word[j], word[j + 1]) in merges:  # the leftmost occurrence alone
                    word[j:j + 2] = [merges[word[j], word[j + 1]]]
                    merged = True
                    break
        ids += word
    return ids


@wrong("merge.as_text")
def merge_as_text(word, pair, new_id):
    s = " ".join(map(str, word)).replace(f"{pair[0]} {pair[1]}", str(new_id))
    return tuple(int(t) for t in s.split())


@wrong("merge.no_bound_check")
def merge_without_a_bound_check(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if word[i] == pair[0] and word[i + 1] == pair[1]:  # word[i + 1] past the end
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


@wrong("merge.pair_written")
def merge_writing_the_pair(word, pair, new_id):
    out = []
    for token in word:
        if out and (out[-1], token) == tuple(pair):
            out[-1] = pair  # the pair, not new_id
        else:
            out.append(token)
    return tuple(out)


@wrong("decode.bytes_of_tokens")
def decode_with_bytes_of_tokens(ids, vocab):
    return bytes(vocab[i] for i in ids).decode("utf-8", errors="replace")


@wrong("merge.last_appended")
def merge_then_the_last_token(word, pair, new_id):
    out, i = [], 0
    while i < len(word) - 1:
        if (word[i], word[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out + list(word[-1:]))  # back again when the last pair was merged


@wrong("merge.next_skipped")
def merge_by_index_of_the_first_token(word, pair, new_id):
    word, out, i = list(word), [], 0
    while pair[0] in word[i:]:
        j = word.index(pair[0], i)
        out += word[i:j]
        out.append(new_id if word[j + 1:j + 2] == [pair[1]] else word[j])
        i = j + 2  # after a miss too: word[j + 1] never looked at
    return tuple(out + word[i:])


@wrong("encode.stopped_at_absent_merge")
def encode_merges_in_order_until_one_is_absent(text, merges):
    ids = []
    for piece in pre_tokenize(text):
        word = tuple(piece.encode("utf-8"))
        for pair, rank in sorted(merges.items(), key=lambda kv: kv[1]):
            if pair not in zip(word, word[1:]):
                break
            word = merge(word, pair, rank)
        ids.extend(word)
    return ids


@wrong("count_pairs.word_left_out")
def count_all_words_but_the_last(words):
    items, counts = list(words.items()), {}
    for k in range(len(items) - 1):  # one word short
        word, freq = items[k]
        for pair in zip(word, word[1:]):
            counts[pair] = counts.get(pair, 0) + freq
    return counts


@wrong("merge.no_bound_check")
def merge_comparing_a_tuple_at_every_position(word, pair, new_id):
    word, out, i = list(word), [], 0
    while i < len(word):
        if (word[i], word[i + 1]) == tuple(pair):  # word[i + 1] at the last position too
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


@wrong("encode.nothing_merged")
def encode_looking_up_one_token(text, merges):
    ids = []
    for piece in pre_tokenize(text):
        word = list(piece.encode("utf-8"))
        while len(word) > 1:
            ranks = [merges.get(t, float("inf")) for t in word]  # one token, never a pair
            if min(ranks) == float("inf"):
                break
            j = ranks.index(min(ranks))
            word[j:j + 2] = [min(ranks)]
        ids += word
    return ids


@wrong("learn_merges.words_dropped")
def learn_keeping_only_the_merged_words(text, n_merges, special_tokens=()):
    words, merges = _words(text, special_tokens), []
    for i in range(n_merges):
        counts = _pairs(words)
        if not counts:
            break
        pair = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        merges.append(pair)
        words = {_merge(w, pair, 256 + i): f for w, f in words.items() if pair in zip(w, w[1:])}
    return merges


@wrong("learn_merges.wordpiece_score")
def learn_by_likelihood_score(text, n_merges, special_tokens=()):
    words, merges = _words(text, special_tokens), []
    for i in range(n_merges):
        counts = _pairs(words)
        if not counts:
            break
        units = Counter()
        for w, f in words.items():
            for t in w:
                units[t] += f
        pair = min(counts, key=lambda p: (-counts[p] / (units[p[0]] * units[p[1]]), p))
        merges.append(pair)
        words = Counter({_merge(w, pair, 256 + i): f for w, f in words.items()})
    return merges


@wrong("count_pairs.stride_two")
def count_in_steps_of_two(words):
    counts = {}
    for word, freq in words.items():
        for i in range(0, len(word) - 1, 2):  # merge's stride
            counts[word[i], word[i + 1]] = counts.get((word[i], word[i + 1]), 0) + freq
    return counts


@wrong("count_pairs.frequency_as_index")
def count_with_enumerate(words):
    counts = Counter()
    for freq, word in enumerate(words):  # enumerate for items()
        for pair in zip(word, word[1:]):
            counts[pair] += freq
    return counts


@wrong("count_pairs.return_kind")
def count_with_packed_keys(words):
    counts = {}
    for word, freq in words.items():
        for a, b in zip(word, word[1:]):
            counts[a << 32 | b] = counts.get(a << 32 | b, 0) + freq  # a u64 key
    return counts


@wrong("merge.end_pair_missed")
def merge_bound_two_short(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if i < len(word) - 2 and word[i] == pair[0] and word[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


@wrong("merge.two_at_a_time")
def merge_in_chunks_of_two(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if tuple(word[i:i + 2]) == tuple(pair):
            out.append(new_id)
        else:
            out.extend(word[i:i + 2])
        i += 2
    return tuple(out)


@wrong("merge.token_compared_twice")
def merge_comparing_pair0_twice(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if i < len(word) - 1 and word[i] == pair[0] and word[i + 1] == pair[0]:  # pair[1]
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


@wrong("merge.never_true")
def merge_by_tuple_identity(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if i < len(word) - 1 and (word[i], word[i + 1]) is pair:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


@wrong("merge.extended_by_int")
def merge_adding_the_int(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if i < len(word) - 1 and word[i] == pair[0] and word[i + 1] == pair[1]:
            out += new_id
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


@wrong("learn_merges.one_part_trained")
def learn_with_words_reset_per_part(text, n_merges, special_tokens=()):
    parts = [text]
    if special_tokens:
        parts = re.split("|".join(map(re.escape, sorted(special_tokens, key=len, reverse=True))), text)
    for part in parts:
        words = Counter(tuple(p.encode("utf-8")) for p in pre_tokenize(part))  # made again each part
    return _learn(words, n_merges)


@wrong("encode.pair_reversed")
def encode_looking_pairs_up_reversed(text, merges):
    ids = []
    for piece in pre_tokenize(text):
        word = tuple(piece.encode("utf-8"))
        while len(word) >= 2:
            pair = min(zip(word, word[1:]), key=lambda p: merges.get((p[1], p[0]), float("inf")))
            if pair not in merges:
                break
            word = merge(word, pair, merges[pair])
        ids.extend(word)
    return ids


@wrong("encode.merges_in_dict_order")
def encode_each_merge_in_dict_order(text, merges):
    ids = []
    for piece in pre_tokenize(text):
        word = tuple(piece.encode("utf-8"))
        for pair, rank in merges.items():
            word = merge(word, pair, rank)
        ids.extend(word)
    return ids


@wrong("encode.rank_offset")
def encode_writing_the_merge_index(text, merges):
    ids = []
    for piece in pre_tokenize(text):
        word = list(piece.encode("utf-8"))
        while len(word) > 1:
            pair = min(zip(word, word[1:]), key=lambda p: merges.get(p, float("inf")))
            if pair not in merges:
                break
            word = list(merge(word, pair, merges[pair] - 256))
        ids += word
    return ids


@wrong("encode.emitted_inside_loop")
def encode_extending_inside_the_loop(text, merges):
    ids = []
    for piece in pre_tokenize(text):
        word = tuple(piece.encode("utf-8"))
        while len(word) >= 2:
            pair = min(zip(word, word[1:]), key=lambda p: merges.get(p, float("inf")))
            if pair not in merges:
                break
            word = merge(word, pair, merges[pair])
            ids.extend(word)
    return ids


@wrong("encode.ranked_once")
def encode_ranking_the_bytes_once(text, merges):
    ids = []
    for piece in pre_tokenize(text):
        word = list(piece.encode("utf-8"))
        for rank, pair in sorted((merges[p], p) for p in zip(word, word[1:]) if p in merges):
            word = list(merge(word, pair, rank))
        ids.extend(word)
    return ids


@wrong("decode.id_left_out")
def decode_all_but_the_last(ids, vocab):
    return b"".join(vocab[ids[k]] for k in range(len(ids) - 1)).decode("utf-8", errors="replace")


@wrong("decode.cut_at_nul")
def decode_as_a_c_string(ids, vocab):
    return b"".join(vocab[i] for i in ids).split(b"\x00")[0].decode("utf-8", errors="replace")


@wrong("decode.cut_until_valid")
def decode_strictly_cutting_the_end(ids, vocab):
    data = b"".join(vocab[i] for i in ids)
    while True:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            data = data[:-1]


@wrong("count_pairs.pairs_apart")
def count_tokens_two_apart(words):
    counts = Counter()
    for word, freq in words.items():
        for pair in zip(word, word[2:]):  # word[1:]
            counts[pair] += freq
    return counts
