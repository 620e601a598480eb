"""What a wrong sequence of tokens tells, in the learner's terms, when no catalogued mistake
matches (chapter 11's items): where the learner's counts, merges, ranks or text first differ
from the reference's, and how. The pre-token and the bytes of the tokens on each side; the
pair chosen against the pair expected, with both counts; a token merged too far or not far
enough; a pair counted across two words; a text changed before encoding (the learner's ranks
decoded, against the input). A sequence of the wrong length is said to be one: "5 tokens
where the reference has 4, ...".

Each `explain_*` returns (mistake, fields) for Mistake.fail, or None when it has nothing to
tell (the result is not a sequence of that kind: the structure checks speak then). The
tokenizer's own parts (pre-tokenizing, counting, merging) are given by the chapter."""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Callable

import regex

from .mistakes import RETURN_KIND, SEQUENCE_DIFFERS, WRONG_LENGTH


def _b(data: bytes) -> str:
    """b'the' -> "b'the'"; the bytes of a token as Python writes them."""
    return repr(bytes(data))


def _tokens(ids, vocab) -> str:
    return " ".join(_b(vocab[i]) if i in vocab else f"<{i}?>" for i in ids)


def _said(length: str, story: str, what: str, prep: str, label: str):
    """The first line: a wrong length ("5 tokens where the reference has 4") first, else
    "Wrong ranks on ...", then the story."""
    if length:
        return WRONG_LENGTH, {"length": length, "story": story, "prep": prep}
    return SEQUENCE_DIFFERS, {"what": what, "prep": prep, "story": story}


def _length(got, want, unit: str) -> str:
    if len(got) == len(want):
        return ""
    return f"{len(got)} {unit}{'s' * (len(got) != 1)} where the reference has {len(want)}"


def _first_difference(got, want) -> int:
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))


# ------------------------------------------------------------------------------ counts


def explain_counts(words: dict, got, want: dict, label: str):
    """count_pairs: the first pair, in the order of the words, whose count differs (or the
    counts as a list of (pair, count), most_common's)."""
    if isinstance(got, list) and all(isinstance(e, tuple) and len(e) == 2 for e in got) \
            and dict(got) == dict(want):
        return RETURN_KIND, {"got": "a list of (pair, count)", "want": "a dict is",
                             "what": "counts", "why": "Counter.most_common() is a list sorted "
                             "by count; return the dict (or the Counter) itself"}
    if not isinstance(got, dict) or not all(isinstance(k, tuple) and len(k) == 2 for k in got):
        return None
    got = {k: v for k, v in got.items() if v}
    told = _counts_cut(words, got, want)
    if told:
        return SEQUENCE_DIFFERS, {"what": "counts", "prep": "for", "story": told}
    order = [p for w in words for p in zip(w, w[1:])] + sorted(set(got) - set(want))
    pair = next((p for p in dict.fromkeys(order) if got.get(p, 0) != want.get(p, 0)), None)
    if pair is None:
        return None
    holders = [(w, f, [i for i, p in enumerate(zip(w, w[1:])) if p == pair]) for w, f in words.items()]
    holders = [h for h in holders if h[2]]
    if not holders:
        across = [(u, w) for u in words for w in words if u and w and (u[-1], w[0]) == pair]
        digits = [(x, y) for w in words for x, y in zip(w, w[1:]) if (x, y) != pair
                  and str(x).endswith(str(pair[0])) and str(y).startswith(str(pair[1]))]
        story = ("no word holds it" + (f": it joins the end of {across[0][0]} to the start of "
                                       f"{across[0][1]}, a pair counted across two words; count "
                                       "within each word only" if across else
                                       f": its digits are those of {digits[0]} read from inside "
                                       "the numbers: pairs found in the ranks written as text (a "
                                       "regex or a substring search can start inside a number); "
                                       "pair the ranks themselves, zip(word, word[1:])" if digits
                                       else ""))
    else:
        w, f, at = holders[0]
        story = (f"{w} (frequency {f}) holds it at position{'s' * (len(at) > 1)} "
                 f"{', '.join(map(str, at))}" + (f", and {len(holders) - 1} more word"
                                                  f"{'s' * (len(holders) > 2)} hold it"
                                                  if len(holders) > 1 else ""))
    return SEQUENCE_DIFFERS, {"what": "counts", "prep": "for",
                              "story": f"the pair {pair} counted {got.get(pair, 0)} time"
                                       f"{'s' * (got.get(pair, 0) != 1)} where the reference "
                                       f"counts {want.get(pair, 0)}: {story}"}


def _counts_cut(words: dict, got: dict, want: dict) -> str:
    """How `got` is `want` scaled (relative frequencies) or cut short: only the most frequent
    pairs kept (a trim), or some words never counted (a loop over part of them); else ''."""
    if want and set(got) == set(want):
        ratios = [got[p] / want[p] for p in want]
        total = sum(want.values())
        if all(abs(r - ratios[0]) < 1e-9 * abs(ratios[0]) for r in ratios) and ratios[0] != 1:
            return ("every count divided by the total, " + str(total) + " (relative frequencies): "
                    "count(a, b) is a whole number of occurrences; return the counts themselves"
                    if abs(ratios[0] * total - 1) < 1e-9 else
                    f"every count multiplied by {ratios[0]:.6g}: return the counts themselves")
    if not got or len(got) >= len(want) or any(want.get(p) != c for p, c in got.items()):
        return ""
    if min(got.values()) >= max(c for p, c in want.items() if p not in got):
        return (f"only the {len(got)} most frequent pairs returned (most_common({len(got)}), a "
                f"trim): the other {len(want) - len(got)} pairs' counts are lost; return every pair")
    left = [w for w in words if all(p not in got for p in zip(w, w[1:])) and len(w) > 1]
    kept = [(w, f) for w, f in words.items() if w not in left]
    if left and all(want.get(p) == sum(f * list(zip(w, w[1:])).count(p) for w, f in kept) for p in got):
        where = " (the last ones)" if list(words)[-len(left):] == left else ""
        return (f"the words {', '.join(map(str, left[:3]))}{' ...' * (len(left) > 3)}{where} never "
                f"counted: {len(left)} of the {len(words)} words left out (a loop over part of them: "
                "chunks, a slice, a range that stops early); count every word")
    return ""


# -------------------------------------------------------------------------------- merge


def explain_word(word, got, want, label: str):
    """merge: a word of the wrong length, or the first position that differs."""
    if not isinstance(got, (tuple, list)) or not all(isinstance(t, int) for t in got):
        return None
    got, want = tuple(got), tuple(want)
    i = _first_difference(got, want)
    mine, theirs = got[i:i + 2] or "nothing", want[i:i + 2] or "nothing"
    story = (f"your word {got}, the reference's {want}: from position {i}, yours holds {mine} "
             f"where the reference's holds {theirs}")
    if got == tuple(word):
        story += (": nothing merged, the word comes back as it was: your pair test is never true "
                  "here, though the word holds the pair")
    elif len(got) < len(want) and got == want[:len(got)]:
        story += (f": the rest of the word dropped after {len(got)} tokens (a flag that skips "
                  "the token after a merge, never set back? a break?)")
    return _said(_length(got, want, "token"), story, "word", "for", label)


# ------------------------------------------------------------------------------- merges


def explain_merges(words: dict, got, want, label: str, *, count: Callable, merge: Callable,
                   whole: tuple = ()):
    """learn_merges: the first step where the merges differ, with the counts of the pair
    chosen and of the pair expected in the reference's words at that step (`words`: the
    reference's words before any merge; `count`, `merge`: the reference's; `whole`: the text's
    bytes as one word, to tell a pair that only crosses a pre-token boundary)."""
    if not isinstance(got, (list, tuple)) or not all(
            isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(t, int) for t in p)
            for p in got):
        return None
    got, want = [tuple(p) for p in got], [tuple(p) for p in want]
    step = _first_difference(got, want)
    vocab = {b: bytes([b]) for b in range(256)}
    before = count(words)  # the counts before any merge
    for i, (a, b) in enumerate(want[:step]):
        vocab[256 + i] = vocab[a] + vocab[b]
        words = {merge(w, (a, b), 256 + i): f for w, f in words.items()}
        whole = merge(whole, (a, b), 256 + i)
    counts = count(words)
    length = _length(got, want, "merge")

    def told(pair):
        return f"{pair} ({_tokens(pair, vocab)}), counted {counts.get(pair, 0)}"

    if step == len(got):  # stopped early
        story = f"you stop after merge {step}, where the reference goes on with {told(want[step])}"
    elif step == len(want):
        story = (f"you go on after the reference's {step} merges with {got[step]}" + (
            ": no pair is left in the reference's words there, so yours hold pairs that its words "
            "do not (across pre-tokens, or across special tokens?)" if not counts else ""))
    else:
        mine, theirs = got[step], want[step]
        story = f"merge {step} (rank {256 + step}) is {told(mine)}, where the reference's is {told(theirs)}"
        if counts.get(mine, 0) == counts[theirs]:
            story += (": a tie, which goes to the smallest pair (the smallest first token, then "
                      "the smallest second)")
        elif not counts.get(mine) and (mine in zip(whole, whole[1:])):
            story += (": a pair no pre-token holds, only two neighbouring pre-tokens: counted "
                      "across the pre-token boundary")
        elif not counts.get(mine) and before.get(mine):
            story += (": a pair of the words before the merges, which an earlier merge took: the "
                      "counts not recounted, or not updated, after a merge")
        elif not counts.get(mine):
            story += ": a pair that no word holds at that step"
        elif counts[mine] < counts[theirs]:
            story += f": yours is not the pair of the largest count; counted your way, {mine} comes first"
        else:
            story += ": yours has the larger count by the reference's counting, yet another was chosen"
    return _said(length, story, "merges", "on", label)


# ---------------------------------------------------------------------------------- ids


def _change(text: str, decoded: str) -> str:
    """How `decoded` was made from `text` by one of the usual changes, or ''."""
    for change, how in (
            (lambda t: t.strip(), "stripped of the whitespace at its start and end"),
            (lambda t: t.lstrip(), "stripped of the whitespace at its start"),
            (lambda t: t.rstrip(), "stripped of the whitespace at its end"),
            (lambda t: " ".join(t.split()), "its runs of whitespace collapsed into single spaces"),
            (lambda t: " " + t, "a space put before it (add_prefix_space)"),
            (str.lower, "lower-cased"),
            (lambda t: unicodedata.normalize("NFC", t), "normalized to NFC"),
            (lambda t: unicodedata.normalize("NFKC", t), "normalized to NFKC"),
            (lambda t: unicodedata.normalize("NFD", t), "normalized to NFD"),
            (lambda t: t.replace("\n", " "), "its newlines made spaces"),
            (lambda t: t.replace("\r\n", "\n"), "its \\r\\n line endings made \\n (the \\r bytes lost: "
             "a text opened or normalized with universal newlines)"),
            (lambda t: t.removeprefix("\ufeff"), "without the U+FEFF it starts with (the byte order "
             "mark dropped: 'utf-8-sig', the file-reading codec, not 'utf-8')"),
            (lambda t: regex.sub("\ufffd+", "\ufffd", t), "with each run of U+FFFD collapsed into one "
             "(each invalid byte is its own U+FFFD)"),
            (lambda t: t.replace(" ", "\u2581"), "its spaces written as '\u2581' (sentencepiece's meta "
             "symbol, which byte-level BPE does not use)"),
            (lambda t: "\u2581" + t.replace(" ", "\u2581"), "its spaces written as '\u2581' and one put "
             "before it (sentencepiece's meta symbol, which byte-level BPE does not use)")):
        if change(text) == decoded != text:
            return how
    return ""


def _left_out(text: str, decoded: str) -> str:
    """The characters of `text` missing from `decoded`, as a short list, when `decoded` is
    `text` with some of its characters left out (in order); else ''."""
    missing, k = [], 0
    for c in text:
        if k < len(decoded) and decoded[k] == c:
            k += 1
        else:
            missing.append(c)
    if k < len(decoded) or not missing:
        return ""
    return ", ".join(map(repr, dict.fromkeys(missing)))


def _changed(text: str, decoded: str, pieces=()) -> str:
    """How `decoded` was made from `text`, if one of the usual changes makes it: a change of
    the whole text, a part of the pre-tokens (`pieces`) kept, or characters left out."""
    how = _change(text, decoded)
    if how:
        return how
    for kept, what in (
            ("".join(p[-1:] for p in pieces), "only the last character of each pre-token: the ids of "
             "the last pass of a loop over its characters (an extend after that loop, not in it?)"),
            ("".join(p[:1] for p in pieces), "only the first character of each pre-token"),
            (pieces[-1] if pieces else "", "only the last pre-token: the ids of the last pass of "
             "the loop over pre-tokens (out = ... where out += ... was meant?)")):
        if kept == decoded:
            return what
    dropped = _left_out(text, decoded)
    if dropped:
        return (f"the characters {dropped} left out: a pre-tokenizer pattern that matches none of "
                "them drops them (re.findall skips what no alternative matches; [a-zA-Z] and re's "
                "classes are not regex's \\p{L}, the letters of every script)")
    i = _first_difference(decoded, text)
    return f"different from character {i} on: {decoded[i:i + 12]!r} where the text has {text[i:i + 12]!r}"


def explain_ids(text: str, pieces: list, got, want, vocab: dict, label: str):
    """encode: ranks that do not decode to the text (the text changed before encoding, or a
    rank that is no token), or the first token that differs: in which pre-token, the bytes on
    each side, merged too far, not far enough, or across two pre-tokens."""
    if not isinstance(got, (list, tuple)) or not all(isinstance(t, int) for t in got):
        return None
    length = _length(got, want, "token")
    unknown = [t for t in got if t not in vocab]
    if unknown:
        story = f"rank {unknown[0]} is no byte and no merge's (the ranks run from 0 to {max(vocab)})"
        return _said(length, story, "ranks", "for", label)
    data = b"".join(vocab[t] for t in got)
    if data != text.encode("utf-8"):
        decoded = data.decode("utf-8", errors="replace")
        story = (f"your ranks decode to {decoded[:60]!r}, not the text: "
                 f"{_changed(text, decoded, pieces)}; encode the text as it is")
        return _said(length, story, "ranks", "for", label)
    k = _first_difference(got, want)
    start = sum(len(vocab[t]) for t in got[:k])  # the byte where the two first differ
    ends, at = [], 0
    for p in pieces:
        at += len(p.encode("utf-8"))
        ends.append(at)
    piece = next(i for i, e in enumerate(ends) if e > start) if ends else 0
    mine = vocab[got[k]] if k < len(got) else b""
    theirs = vocab[want[k]] if k < len(want) else b""
    where = f"in the pre-token {pieces[piece]!r}" if pieces else ""
    if start + len(mine) > ends[piece]:
        how = "a token across two pre-tokens: merges stop at a pre-token's end"
    elif mine and not mine.strip() and theirs.startswith(mine) and theirs[len(mine):len(mine) + 1].strip() \
            and not any(regex.search(rb"\s\S", vocab[t]) for t in got):  # none of yours joins them
        how = ("a space cut off its word: your pre-tokens put spaces apart, GPT-2's keep a word's "
               "leading space (' cat'), and merges join them")
    elif len(mine) > len(theirs):
        how = "merged too far: the reference keeps it in more tokens"
    elif pieces[piece] in ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d"):
        how = (f"not merged far enough: the contraction {pieces[piece]!r} is no pre-token of yours: "
               "GPT-2's pattern starts 's|'t|'re|'ve|'m|'ll|'d, and one of them is missing or "
               "changed in yours (a typo in a copied pattern?), so its merges never apply")
    else:
        how = "not merged far enough: the reference's token is longer" + _left_raw(
            got, vocab, pieces, ends, piece)
    story = (f"{where}, your token {_b(mine)} where the reference has {_b(theirs)} (token {k}: "
             f"{how})")
    return _said(length, story, "ranks", "for", label)


def _left_raw(got, vocab, pieces, ends, piece) -> str:
    """', all of it left as raw bytes ...' when the pre-token `piece` is only single bytes in
    `got` while every longer pre-token is too and some shorter one is merged (a length
    limit); else ''."""
    raw, at = {}, 0  # pre-token -> whether all of its tokens in got are single bytes
    for t in got:
        i = next(i for i, e in enumerate(ends) if e > at)
        raw[i] = raw.get(i, True) and t < 256
        at += len(vocab[t])
    size = len(pieces[piece].encode("utf-8"))
    merged = [len(pieces[i].encode("utf-8")) for i, r in raw.items() if not r]
    if not raw.get(piece) or not merged or max(merged) >= size:
        return ""
    return (f", and yours is its {size} bytes unmerged, while shorter pre-tokens are merged: "
            f"pre-tokens longer than {max(merged)} bytes skipped (a length limit: BPE merges every "
            "pre-token, however long)")


# --------------------------------------------------------------------------------- text


def explain_text(got, want: str, label: str):
    """decode: where the text first differs, and how many U+FFFD each side has."""
    if not isinstance(got, str):
        return None
    shown = next((c for c, w in zip(got, want) if w == "\ufffd" != c), None)
    if shown is not None and got == want.replace("\ufffd", shown):
        return SEQUENCE_DIFFERS, {"what": "text", "prep": "for", "story": (
            f"your text {got[:60]!r} is the reference's {want[:60]!r} with each U+FFFD written as "
            f"{shown!r}: errors='replace' gives U+FFFD, the character that says the bytes were no "
            f"text, which a real {shown!r} would hide")}
    how = _change(want, got)
    if how:  # a change of the whole text (strip, lower, a normalization)
        return SEQUENCE_DIFFERS, {"what": "text", "prep": "for", "story": (
            f"your text {got[:60]!r} is the reference's {want[:60]!r} {how}: decode gives the "
            "tokens' text exactly as it is")}
    dropped = _left_out(want, got)
    if dropped:
        missing = Counter(want) - Counter(got)
        low = all(ord(c) < 4 for c in missing)
        return SEQUENCE_DIFFERS, {"what": "text", "prep": "for", "story": (
            f"your text {got[:60]!r} is the reference's {want[:60]!r} with the characters {dropped} "
            "left out" + (": ids 0-3 skipped as if they were PAD, BOS, EOS and UNK, but here they are "
                          "the bytes 0x00-0x03 (this vocabulary has no special tokens)" if low else
                          ": decode keeps every token's bytes"))}
    i = _first_difference(got, want)
    story = (f"your text {got[:60]!r}, the reference's {want[:60]!r}: they differ from character "
             f"{i} on ({got[i:i + 8]!r} where the reference has {want[i:i + 8]!r})")
    if got.count("\ufffd") != want.count("\ufffd"):
        story += (f"; yours has {got.count(chr(0xfffd))} U+FFFD, the reference's "
                  f"{want.count(chr(0xfffd))}")
    return _said(_length(got, want, "character"), story, "text", "for", label)
