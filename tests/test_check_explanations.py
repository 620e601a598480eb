"""What the checks say when no catalogued mistake matches: what the learner's result is, told
by the expected one (a constant factor or offset with its value, an elementwise function,
its values in another order, a monotone function: then the first line names that, not "no
common mistake matches"), a float where integers are expected with the likely `/` (in a
result, or as a size or index that torch refuses), a mask with an axis too many, and what
is new in the first case that fails (a feature, or two features seen apart, together); where a
token sequence first differs, in the learner's terms; state kept between calls; a rounding
story only when a 16-bit float was made."""

import dataclasses
import math
import re
from collections import Counter

import pytest
import torch

from tfcourse import positional, tokens
from tfcourse.checking import Case, CheckFailure, Item, entry
from tfcourse.checking.explanation import resemblance
from tfcourse.data import BOS, EOS, PAD, Batch, pad_sequences
from tfcourse.masks import target_mask


def first_line(item, target):
    with pytest.raises(CheckFailure) as raised:
        item.check(target)
    return str(raised.value).splitlines()[0]


def _table(max_len, d_model):
    angle = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


TABLE = entry.item("ex03_positional_encoding.sinusoidal_encoding")


def test_a_constant_factor_is_told_with_its_value():
    def noam_lr(step, d_model, warmup):  # a rate scaled by the wrong quantity
        return 44.7 * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    line = first_line(entry.item("ex07_training.noam_lr"), noam_lr)
    assert "your rates are 44.7 times the expected at every entry" in line, line
    assert line.startswith("Wrong rates on ") and "no common mistake matches" not in line, line


def test_a_factor_of_the_settings_alone_is_told_for_each_setting():
    # not one constant over all the cases (d_model and warmup differ among them), but one
    # over the steps of each (d_model, warmup): the scale is wrong, not the schedule's shape
    def noam_lr(step, d_model, warmup):
        if step < 1:
            raise ValueError("step counts from 1")
        return (d_model * warmup) ** 0.3 * min(step**-0.5, step * warmup**-1.5)

    line = first_line(entry.item("ex07_training.noam_lr"), noam_lr)
    assert line.startswith("Wrong rates on ") and "no common mistake matches" not in line, line
    assert ("your rates are the expected times a factor that depends on d_model and warmup "
            "alone, the same at every step (1.77e+03 for d_model=512, warmup=4000; 111 for "
            "d_model=64, warmup=100;") in line, line


def test_a_constant_offset_is_told_with_its_value():
    def mean_pool(h, keep):
        k = keep[..., None].to(h.dtype)
        return (h * k).sum(1) / k.sum(1).clamp(min=1) + 0.25

    line = first_line(entry.item("ex09_variants.mean_pool"), mean_pool)
    assert "your pooled vectors are the expected plus 0.25 at every entry" in line, line


def test_values_in_another_order_along_an_axis_are_told():
    line = first_line(TABLE, lambda n, d: _table(n, d).roll(2, 1))
    assert ("holds the right values in another order along the last axis: rolled by 2" in line), line
    assert "reversed" in resemblance(torch.arange(6.0).flip(0), torch.arange(6.0))


def test_an_elementwise_or_monotone_function_of_the_right_answer_is_told():
    assert "the exp of the expected" in resemblance(torch.linspace(-1, 1, 7).exp(), torch.linspace(-1, 1, 7))
    line = first_line(TABLE, lambda n, d: _table(n, d) ** 3)
    assert "your table is an increasing function of the expected, entry by entry" in line, line
    assert resemblance(torch.randn(20), torch.randn(20)) == ""  # unrelated: nothing told


def test_a_float_where_integers_are_expected_names_true_division():
    def beam_search_step(scores, log_probs, lengths, alpha=0.6):
        vocab = log_probs.size(-1)
        candidates = (scores[:, :, None] + log_probs).flatten(1)
        best = candidates.topk(scores.size(1)).indices
        return candidates.gather(1, best), best / vocab, best % vocab

    line = first_line(entry.item("ex08_decoding.beam_search_step"), beam_search_step)
    assert line.startswith("Wrong dtype: beam has dtype torch.float32, expected torch.int64: "
                           "values with a fractional part"), line
    assert "a true division `/` where `//` is meant" in line


def test_the_first_failing_case_says_what_is_new_in_it():
    item = Item("ex99_test", "double", lambda x: 2 * x,
                [Case((torch.randn(3, 4),), names=("x",)), Case((torch.randn(2, 3, 4, 5),), names=("x",))])

    def double(x):  # right on 2-D inputs only
        return 2 * x if x.dim() < 4 else 2 * x + x**3

    line = first_line(item, double)
    assert ("Your code is right on the 1 case before this one, and this is the first with 4-D "
            "inputs") in line, line


def test_large_scores_with_a_finite_fill_are_a_named_mistake():
    attention = entry.item("ex01_attention.scaled_dot_product_attention")

    def fill_minus_five_thousand(query, key, value, mask=None):  # no catalogued value
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask, -5000.0)
        weights = torch.softmax(scores, -1).masked_fill(
            ~mask.any(-1, keepdim=True), 0.0) if mask is not None else torch.softmax(scores, -1)
        return weights @ value, weights

    assert first_line(attention, fill_minus_five_thousand).startswith(
        "Masked scores filled with a number real scores can go below:")


def test_a_float_used_as_a_size_names_true_division():
    def split_heads(x, n_heads):  # the paper's d_k = d_model / h, written literally
        b, s, d = x.shape
        return x.reshape(b, s, n_heads, d / n_heads).transpose(1, 2)

    line = first_line(entry.item("ex02_multi_head_attention.split_heads"), split_heads)
    assert line.startswith("Raised TypeError"), line
    assert "a float where a whole number is wanted" in line and "use `//`" in line, line


def test_a_mask_with_an_axis_too_many_is_told():
    given = entry.load_exercise(entry.exercises_dir() / "ex05_encoder.py")

    class MaskUnsqueezed(given.EncoderLayer):  # the Annotated Transformer's mask.unsqueeze(1)
        def forward(self, x, mask=None):
            mask = None if mask is None else mask.unsqueeze(1)
            x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, mask)[0])
            return self.sublayers[1](x, self.feed_forward)

    line = first_line(entry.item("ex05_encoder.EncoderLayer"), MaskUnsqueezed)
    assert "the mask has 5 axes and the scores 4: an axis too many" in line, line


def test_the_first_case_with_two_features_together_is_told():
    def mask(*shape):  # every row mixes True and False
        return (torch.arange(shape[-1]) % 2 == 0).expand(*shape)

    item = Item("ex99_test", "double", lambda x, m: 2 * x,
                [Case((torch.randn(3, 4), mask(3, 4)), names=("x", "m")),
                 Case((torch.randn(2, 3, 4, 5), torch.ones(2, 3, 4, 5, dtype=torch.bool)),
                      names=("x", "m")),
                 Case((torch.randn(2, 3, 4, 5), mask(2, 3, 4, 5)), names=("x", "m"))])

    def double(x, m):  # right unless the input is 4-D and masked
        if x.dim() == 4 and not m.all():
            raise RuntimeError("The size of tensor a (4) must match the size of tensor b (11) at "
                               "non-singleton dimension 3")
        return 2 * x

    line = first_line(item, double)
    assert ("Your code is right on the 2 cases before this one, and this is the first with "
            "4-D inputs and a mask together") in line, line


# Stories that name conventions, regimes and off-by-one without a catalogued mistake.


def test_a_result_one_length_off_is_named_off_by_one_by_rerunning_the_reference():
    def causal_mask(size, device=None):  # a mask for positions 1 .. size - 1
        return torch.ones(size - 1, size - 1, dtype=torch.bool).tril()

    line = first_line(entry.item("ex06_decoder.causal_mask"), causal_mask)
    assert line.startswith("Off by one: the reference with size = 4 (not 5) gives exactly your "
                           "mask: size is a length, and yours counts one too few"), line

    item = Item("ex99_test", "ramp", lambda n: torch.arange(n) * 2.0,
                [Case((5,), names=(None,))], shifts=((0, "n", "count"),))
    line = first_line(item, lambda n: torch.arange(n + 1) * 2.0)
    assert line.startswith("Off by one: the reference with n = 6 (not 5) gives exactly your "
                           "output: n is a count, and yours counts one too many"), line


def test_values_shifted_by_one_position_are_told():
    bare = dataclasses.replace(TABLE, mistakes=())  # (its catalogue names positions from 1)
    line = first_line(bare, lambda n, d: _table(n + 1, d)[1:])  # positions 1 .. max_len
    assert ("your table along the first axis is the expected shifted by one: position i holds "
            "the expected's i + 1") in line, line
    item = Item("ex99_test", "ids", lambda t: t * 3, [Case((torch.arange(12).view(2, 6),),
                                                           names=("t",))])
    line = first_line(item, lambda t: torch.cat([t[:, 1:], t[:, :1]], 1) * 0 + (t + 1) * 3)
    assert "along the last axis is the expected shifted by one" in line, line


def test_swapped_and_merged_axes_are_named():
    split = entry.item("ex02_multi_head_attention.split_heads")

    def split_heads(x, n_heads):  # written for nn.MultiheadAttention's (seq, batch, d_model)
        seq, batch, d_model = x.shape
        return x.view(seq, batch, n_heads, d_model // n_heads).permute(1, 2, 0, 3)

    line = first_line(split, split_heads)
    assert ("the batch and seq axes swapped: yours are (seq, heads, batch, d_head), expected "
            "(batch, heads, seq, d_head) (the (seq, batch, ...) layout of "
            "nn.MultiheadAttention") in line, line
    line = first_line(entry.item("ex02_multi_head_attention.merge_heads"),
                      lambda x: x.transpose(1, 2).flatten(1))
    assert "the seq and d_model axes merged into one" in line, line
    same_sizes = Item("ex99_test", "same", lambda x: x * 2, [Case((torch.randn(4, 4, 3),),
                                                                names=("x",))],
                      axes=("batch", "seq", "d_model"))
    line = first_line(same_sizes, lambda x: x.transpose(0, 1) * 2)
    assert ("your output is the expected with the batch and seq axes swapped (both of size 4)"
            in line), line


def test_a_result_in_another_dtype_or_convention_says_where_it_comes_from():
    def table(max_len, d_model):  # angles made in float64, as NumPy does
        return _table(max_len, d_model).double()

    line = first_line(TABLE, table)
    assert "float64, the dtype of NumPy arrays" in line, line
    batch = entry.item("ex07_training.make_batch")

    def additive(pairs, vocab):  # nn.MultiheadAttention's float mask
        src = pad_sequences([vocab.encode(s) for s, _ in pairs])
        ys = [vocab.encode(t) for _, t in pairs]
        tgt_in = pad_sequences([[BOS, *y] for y in ys])
        src_mask = torch.zeros(src.shape).masked_fill(src == PAD, float("-inf"))[:, None, None]
        return Batch(src, tgt_in, pad_sequences([[*y, EOS] for y in ys]), src_mask,
                     target_mask(tgt_in, PAD))

    line = first_line(batch, additive)
    assert "an additive float mask" in line and "nn.MultiheadAttention's float attn_mask" in line, line
    def band(size, window):
        offset = (torch.arange(size)[:, None] - torch.arange(size)).abs()
        return offset <= window

    def hf_band(size, window):  # 1 = attend, as Hugging Face's attention_mask
        return ((torch.arange(size)[:, None] - torch.arange(size)).abs() <= window).long()

    item = Item("ex99_test", "band", band, [Case((7, 2))])
    line = first_line(item, hf_band)
    assert "a mask of 0/1 integers, Hugging Face's attention_mask convention" in line, line
    line = first_line(item, lambda size, window: hf_band(size, window) == 0)  # True = blocked
    assert "True and False swapped at every entry: the other polarity" in line, line


def test_an_input_read_with_another_convention_is_named():
    item = Item("ex99_test", "masked_mean", lambda x, m: (x * m).sum(1) / m.sum(1),
                [Case((torch.randn(2, 3, 4), torch.tensor([[True, False, True]] * 2)[..., None]),
                      names=("x", "keep"))])
    line = first_line(item, lambda x, m: (x * ~m).sum(1) / (~m).sum(1))
    assert line.startswith("Mask read with the other polarity: keep inverted gives exactly your "
                           "output"), line
    item = Item("ex99_test", "running", lambda x: x.cumsum(1), [Case((torch.randn(2, 5, 3),),
                                                                    names=("x",))])
    line = first_line(item, lambda x: x.cumsum(0))  # the sequence read on axis 0
    assert line.startswith("Batch and sequence axes mixed up: x read as (seq, batch, ...) gives "
                           "exactly your output"), line


def test_the_numerical_regime_of_the_first_failing_case_is_told():
    norm = entry.item("ex04_feed_forward_and_norm.LayerNorm")
    cases = [norm.cases[0], norm.cases[-1]]  # the last: means 10^5 times the spread

    class Moments(norm.reference):  # E[x^2] - E[x]^2, written so that no computation matches
        def forward(self, x):
            var = x.pow(2).mean(-1, keepdim=True).sub(x.mean(-1, keepdim=True).pow(2)).abs()
            return self.weight * (x - x.mean(-1, keepdim=True)) / (var + self.eps).sqrt() + self.bias

    line = first_line(dataclasses.replace(norm, cases=cases, mistakes=()), Moments)
    assert "positions whose mean is large against their spread" in line, line
    assert "catastrophic cancellation" in line, line


def test_a_result_rounded_in_a_16_bit_float_is_told():
    attention = dataclasses.replace(entry.item("ex01_attention.scaled_dot_product_attention"),
                                    mistakes=())

    def scores_in_half(query, key, value, mask=None):  # Q K^T in float16, the rest in float32
        scores = (query.half() @ key.half().transpose(-2, -1)).to(query.dtype)
        weights = torch.softmax(scores / math.sqrt(query.size(-1)), dim=-1)
        return weights @ value, weights

    line = first_line(attention, scores_in_half)
    assert "up to a rounding noise of about" in line, line
    assert "an intermediate computed in float16 or bfloat16" in line, line
    expected = torch.linspace(-1, 1, 50)
    smooth = expected + 1e-4 * expected**3  # a small error that follows the values: a formula
    assert "rounding noise" not in resemblance(smooth, expected)


def test_ids_in_another_library_convention_are_told():
    batch = entry.item("ex07_training.make_batch")

    def make_batch(pairs, vocab, left=False, labels=False):
        def pad(rows):  # on the left when `left`: Hugging Face's padding_side="left"
            n = max(map(len, rows))
            return torch.tensor([[PAD] * (n - len(r)) * left + r + [PAD] * (n - len(r)) * (not left)
                                 for r in rows])

        src = pad([vocab.encode(s) for s, _ in pairs])
        ys = [vocab.encode(t) for _, t in pairs]
        tgt_in, tgt_out = pad_sequences([[BOS, *y] for y in ys]), pad_sequences([[*y, EOS] for y in ys])
        if labels:  # Hugging Face's labels: -100 where the loss must not look
            tgt_out = tgt_out.masked_fill(tgt_out == PAD, -100)
        return Batch(src, tgt_in, tgt_out, (src != PAD)[:, None, None], target_mask(tgt_in, PAD))

    line = first_line(batch, lambda pairs, vocab: make_batch(pairs, vocab, left=True))
    assert "each row of your src holds the expected's values moved right by its own amount" in line
    assert "Hugging Face's padding_side='left'" in line, line
    line = first_line(batch, lambda pairs, vocab: make_batch(pairs, vocab, labels=True))
    assert "every difference is a -100 where 0 is expected: -100 is the ignore_index" in line, line
    pool = entry.item("ex09_variants.mean_pool")

    def mean_pool(h, keep):  # the mean over axis 0, as for (seq, batch, d_model)
        k = keep.to(h.dtype)[..., None]
        return (h * k).sum(0) / k.sum(0).clamp(min=1)

    line = first_line(pool, mean_pool)
    assert line.startswith("Batch and sequence axes mixed up: h and keep read as (seq, batch, "
                           "...) give exactly your pooled vectors"), line


# Chapter 11's sequences (sequences.py) and state kept between calls (state.py), each with
# the item's catalogue emptied, so that the explanation, not a named mistake, speaks.
def _bare(key):
    return dataclasses.replace(entry.item(key), mistakes=())


def _encode_piece(piece, merges, rounds):
    word = tuple(piece.encode())
    for _ in range(rounds):
        found = [p for p in zip(word, word[1:]) if p in merges]
        if not found:
            break
        pair = min(found, key=merges.get)
        word = tokens.merge(word, pair, merges[pair])
    return list(word)


def test_a_token_sequence_that_differs_says_where_in_the_learners_terms():
    def encode(text, merges):  # one round of merges: tokens not merged far enough
        return [r for piece in tokens.pre_tokenize(text) for r in _encode_piece(piece, merges, 1)]

    line = first_line(_bare("ex11_tokens.encode"), encode)
    assert line.startswith("Wrong length: 6 tokens where the reference has 5"), line
    assert "in the pre-token 'cbbbbcbc', your token b'b' where the reference has b'bb'" in line, line
    assert "not merged far enough" in line, line

    def stripped(text, merges):
        return [r for piece in tokens.pre_tokenize(text.strip()) for r in _encode_piece(piece, merges, 99)]

    line = first_line(_bare("ex11_tokens.encode"), stripped)
    assert "your ranks decode to 'hello world', not the text" in line, line
    assert "stripped of the whitespace at its start and end" in line, line


def test_ranks_of_part_of_the_text_say_which_part():
    def last_character(text, merges):  # the ids of each pre-token's last character only
        out = []
        for piece in tokens.pre_tokenize(text):
            for c in piece:
                ids = _encode_piece(c, merges, 99)
            out += ids
        return out

    line = first_line(_bare("ex11_tokens.encode"), last_character)
    assert "only the last character of each pre-token" in line, line

    def ascii_letters(text, merges):  # re.findall drops the letters outside ASCII
        pieces = re.findall(r" ?[a-zA-Z]+| ?[0-9]+| ?[^\s\w]+|\s+(?!\S)|\s+", text)
        return [r for piece in pieces for r in _encode_piece(piece, merges, 99)]

    line = first_line(_bare("ex11_tokens.encode"), ascii_letters)
    assert "the characters 'é', 'à' left out" in line and "re.findall" in line, line


def test_a_decoded_text_changed_as_a_whole_says_how():
    def decode(ids, vocab):
        return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace").rstrip()

    line = first_line(_bare("ex11_tokens.decode"), decode)
    assert "is the reference's '\ufffdcé  ' stripped of the whitespace at its" in line, line


def _pair_counts(words):
    """count_pairs written right, as a learner's own code (the checks refuse the reference)."""
    counts = Counter()
    for w, f in words.items():
        counts.update({p: n * f for p, n in Counter(zip(w, w[1:])).items()})
    return counts


def test_words_and_texts_changed_in_a_usual_way_say_how():
    def most_common(words):
        return _pair_counts(words).most_common()

    line = first_line(_bare("ex11_tokens.count_pairs"), most_common)
    assert line.startswith("Wrong kind of result: a list of (pair, count) returned where a dict is "
                           "expected"), line

    def unchanged(word, pair, new_id):  # a list compared with a tuple: never equal
        return tuple(word)

    line = first_line(_bare("ex11_tokens.merge"), unchanged)
    assert "nothing merged, the word comes back as it was" in line, line

    def stopped(word, pair, new_id):  # everything after the first merge dropped
        i = next((i for i in range(len(word) - 1) if (word[i], word[i + 1]) == pair), None)
        return tuple(word) if i is None else (*word[:i], new_id)

    line = first_line(_bare("ex11_tokens.merge"), stopped)
    assert "the rest of the word dropped after 1 tokens" in line, line

    def meta_spaces(text, merges):
        pieces = tokens.pre_tokenize(text.replace(" ", "\u2581"))
        return [r for piece in pieces for r in _encode_piece(piece, merges, 99)]

    line = first_line(_bare("ex11_tokens.encode"), meta_spaces)
    assert "its spaces written as '\u2581'" in line, line

    def spaces_apart(text, merges):
        return [r for piece in re.findall(r"\w+|[^\w\s]+|\s+", text)
                for r in _encode_piece(piece, merges, 99)]

    assert "a space cut off its word" in first_line(_bare("ex11_tokens.encode"), spaces_apart)

    def question_marks(ids, vocab):
        return b"".join(vocab[i] for i in ids).decode("utf-8", "replace").replace("\ufffd", "?")

    line = first_line(_bare("ex11_tokens.decode"), question_marks)
    assert "with each U+FFFD written as '?'" in line, line


def test_a_stream_right_in_the_end_but_late_is_told_so():
    class TextStream:  # held until a space, as transformers' TextStreamer shows whole words
        def __init__(self, tokenizer, shown=b""):
            self.tokenizer, self.data, self.sent, self.skip, self.done = tokenizer, b"", 0, len(shown), False

        def push(self, i):
            if self.done or i in (PAD, BOS):
                return ""
            if i == EOS:
                self.done = True
                return ""
            self.data += self.tokenizer.decode([i]).encode() if i == 3 else self.tokenizer.token(i)
            text = self.data[self.skip:].decode("utf-8", "replace")
            piece = "" if text.endswith("\ufffd") else text[self.sent:text.rfind(" ") + 1]
            self.sent += len(piece)
            return piece

        def end(self):
            piece = self.data[self.skip:].decode("utf-8", "replace")[self.sent:]
            self.sent += len(piece)
            return piece

    line = first_line(_bare("ex13_small_llm.TextStream"), TextStream)
    assert line.startswith("Finished characters held back: the right text in the end, but later: "
                           "call 1 of 4, push("), line


def _learn(words, n_merges, key):
    merges = []
    for i in range(n_merges):
        counts = Counter(p for w, f in words.items() for p in zip(w, w[1:]) for _ in range(f))
        if not counts:
            break
        pair = max(counts, key=lambda p: key(counts, p))
        merges.append(pair)
        words = Counter({tokens.merge(w, pair, 256 + i): f for w, f in words.items()})
    return merges


def test_merges_that_differ_give_both_pairs_with_their_counts():
    def learn_merges(text, n_merges, special_tokens=()):  # ties to the largest pair
        words = Counter(tuple(p.encode()) for p in tokens.pre_tokenize(text))
        return _learn(words, n_merges, lambda counts, p: (counts[p], p))

    line = first_line(_bare("ex11_tokens.learn_merges"), learn_merges)
    assert "counted" in line and "where the reference's is" in line and "a tie" in line, line

    def whole_text(text, n_merges, special_tokens=()):  # no pre-tokens
        return _learn(Counter([tuple(text.encode())]), n_merges,
                      lambda counts, p: (counts[p], -p[0], -p[1]))

    line = first_line(_bare("ex11_tokens.learn_merges"), whole_text)
    assert "counted across the pre-token boundary" in line, line


def test_counts_and_words_of_the_wrong_length_are_said_so():
    def count_pairs(words):  # the words joined into one
        flat = [t for w in words for t in w]
        return Counter(zip(flat, flat[1:]))

    line = first_line(_bare("ex11_tokens.count_pairs"), count_pairs)
    assert "no word holds it" in line and "counted across two words" in line, line

    def merge(word, pair, new_id):  # the second token kept
        out, i = [], 0
        while i < len(word):
            if tuple(word[i:i + 2]) == tuple(pair):
                out += [new_id, word[i + 1]]
                i += 2
            else:
                out.append(word[i])
                i += 1
        return tuple(out)

    line = first_line(_bare("ex11_tokens.merge"), merge)
    assert line.startswith("Wrong length: 5 tokens where the reference has 3"), line
    assert "Wrong type" not in line


_TABLES = {}


def test_state_kept_between_calls_is_named():
    def rotate(x, start=0, base=10000.0, pairs="halves"):  # tables cached by shape alone
        key = (x.size(-2), x.size(-1))
        if key not in _TABLES:
            _TABLES[key] = positional.rotary_cos_sin(torch.arange(x.size(-2)) + start, x.size(-1), base)
        cos, sin = _TABLES[key]
        return positional.apply_rotary(x, cos.to(x.dtype), sin.to(x.dtype), pairs)

    line = first_line(_bare("ex12_modern_block.rotate"), rotate)
    assert line.startswith("Right when called first, wrong after earlier calls"), line
    assert "the module's `_TABLES` changed" in line, line


def test_a_rounding_story_is_told_only_when_a_16_bit_float_is_made():
    attention = _bare("ex12_modern_block.rotary_attention")

    def keys_from_zero(q, k, v, past_k=None, past_v=None, base=10000.0):  # float32 throughout
        start = 0 if past_k is None else past_k.size(-2)
        rope = positional.RotaryEmbedding(q.size(-1), base)
        q, k = rope(q, start), rope(k, 0)
        if past_k is not None:
            k, v = torch.cat((past_k, k), -2), torch.cat((past_v, v), -2)
        mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril(start)
        return torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(
            ~mask, -math.inf), -1) @ v

    assert "rounding noise" not in first_line(attention, keys_from_zero)


def test_counts_cut_short_and_texts_changed_at_their_regimes_say_how():
    def chunked(words):  # four chunks of len // 4 words: the words after them never counted
        items, counts = list(words.items()), Counter()
        size = max(1, len(items) // 4)
        for w, f in items[:size * 4]:
            counts.update({p: n * f for p, n in Counter(zip(w, w[1:])).items()})
        return dict(counts)

    line = first_line(_bare("ex11_tokens.count_pairs"), chunked)
    assert "the words (13, 14), (15, 16, 17), (18, 19) (the last ones) never counted" in line, line

    def trimmed(words):
        return dict(_pair_counts(words).most_common(10))

    line = first_line(_bare("ex11_tokens.count_pairs"), trimmed)
    assert "only the 10 most frequent pairs returned" in line, line

    def bytes_keys(words):
        counts = Counter()
        for w, f in words.items():
            for i in range(len(w) - 1):
                counts[bytes(w[i:i + 2])] += f
        return dict(counts)

    line = first_line(_bare("ex11_tokens.count_pairs"), bytes_keys)
    assert line.startswith("Wrong kind of result: bytes keys returned where tuple keys are"), line

    for change, told in ((lambda t: t.removeprefix("\ufeff"), "without the U+FEFF it starts with"),
                         (lambda t: t.replace("\r\n", "\n"), "line endings made \\n"),
                         (lambda t: re.sub("\ufffd+", "\ufffd", t), "each run of U+FFFD collapsed"),
                         (lambda t: t.translate(dict.fromkeys(range(4))),
                          "ids 0-3 skipped as if they were PAD, BOS, EOS and UNK")):
        def decode(ids, vocab, change=change):
            return change(b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace"))

        line = first_line(_bare("ex11_tokens.decode"), decode)
        assert told in line, line

    def long_pieces_raw(text, merges):  # pre-tokens over 16 bytes never merged
        return [r for piece in tokens.pre_tokenize(text)
                for r in (_encode_piece(piece, merges, 99) if len(piece.encode()) <= 16 else piece.encode())]

    line = first_line(_bare("ex11_tokens.encode"), long_pieces_raw)
    assert "yours is its 19 bytes unmerged, while shorter pre-tokens are merged" in line, line

    def no_ll(text, merges):  # GPT-2's pattern with 'll written 'l l
        pattern = tokens.GPT2_PATTERN.replace("'ll", "'l l")
        return [r for piece in tokens.pre_tokenize(text, pattern) for r in _encode_piece(piece, merges, 99)]

    line = first_line(_bare("ex11_tokens.encode"), no_ll)
    assert "the contraction \"'ll\" is no pre-token of yours" in line, line


def test_a_stream_writing_a_placeholder_for_a_cut_character_is_told_so():
    class TextStream:  # each token decoded alone, a sentinel where its bytes are no text
        def __init__(self, tokenizer, shown=b""):
            self.tokenizer, self.skip, self.done = tokenizer, len(shown), False

        def push(self, i):
            if self.done or i in (PAD, BOS):
                return ""
            if i == EOS:
                self.done = True
                return ""
            data = self.tokenizer.decode([i]).encode() if i == 3 else self.tokenizer.token(i)
            data, self.skip = data[self.skip:], max(0, self.skip - len(data))
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError:
                return "[Invalid UTF-8]"

        def end(self):
            return ""

    line = first_line(_bare("ex13_small_llm.TextStream"), TextStream)
    assert "part of a character written as '[Invalid UTF-8]' (a placeholder" in line, line


def test_counts_as_relative_frequencies_are_told_so():
    def shares(words):
        counts = _pair_counts(words)
        return {p: c / sum(counts.values()) for p, c in counts.items()}

    line = first_line(_bare("ex11_tokens.count_pairs"), shares)
    assert "every count divided by the total, 3 (relative frequencies)" in line, line


def test_pairs_found_in_the_ranks_written_as_text_are_told_so():
    def lookahead(words):  # '97 97' also yields (7, 97): a match may start inside a number
        counts = Counter()
        for w, f in words.items():
            for a, b in re.findall(r"(?=(\d+) (\d+))", " ".join(map(str, w))):
                counts[int(a), int(b)] += f
        return dict(counts)

    line = first_line(_bare("ex11_tokens.count_pairs"), lookahead)
    assert "its digits are those of (97, 97) read from inside the numbers" in line, line


def test_groups_that_a_name_test_gives_are_told_as_chosen_by_name():
    """Only when the learner's groups are exactly a name test's and an nn.Linear weight went
    undecayed for its name; groups chosen by a list of layer types are not told so."""
    from tests.buggy_solutions.ex13_small_llm import groups_by_known_layers, groups_by_name_keywords

    groups = entry.item("ex13_small_llm.param_groups")
    line = first_line(groups, groups_by_name_keywords)
    assert line.startswith("Groups chosen by the parameters' names"), line
    assert "'bias' or 'emb'" in line and "embed_proj.weight (nn.Linear)" in line, line
    assert "names" not in first_line(groups, groups_by_known_layers).split(":")[0]
