"""Simple baselines for the shipped models, on the same splits: what a model must beat before
its number means anything.

- language model (nats per character of held-out text): ``unigram_nats`` (each character
  by its frequency alone) and ``NGramLM`` (characters from the n - 1 before them,
  interpolated Kneser-Ney);
- language identification (accuracy): ``NaiveBayes`` over character n-grams;
- dates (exact match): ``most_frequent_answer``, and ``DateRule``, a rule that reads the
  numbers and looks the month's word up in a table learned from the training pairs.

Each is fitted on a task's training split and scored on its test split, as the models are.
"""

import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence

from tfcourse.vocab import Vocab

# ------------------------------------------------------------------------- language model

def unigram_nats(train: Sequence[int], test: Sequence[int], vocab_size: int) -> float:
    """Cross entropy (nats per character) of ``test`` under the training text's character
    frequencies, add-one smoothed: p(c) = (count(c) + 1) / (n + vocab_size)."""
    counts, n = Counter(train), len(train)
    return -sum(math.log((counts[c] + 1) / (n + vocab_size)) for c in test) / len(test)


class NGramLM:
    """A character n-gram language model with interpolated Kneser-Ney smoothing (Chen and
    Goodman 1999): with h the n - 1 characters before c,

        p(c | h) = max(N(h c) - D, 0) / N(h) + D T(h) / N(h) p(c | h minus its first)

    where N counts the order's contexts (raw counts at the top order, the number of distinct
    characters before them at lower orders), T(h) is how many distinct characters follow h,
    D = 0.75; the lowest order interpolates with the uniform distribution over the
    vocabulary, so that no character has probability 0. Contexts never seen use the next
    order down entirely. Trained on ids (a Vocab's encoding)."""

    def __init__(self, train: Sequence[int], vocab_size: int, order: int = 5,
                 discount: float = 0.75):
        if order < 1:
            raise ValueError(f"order must be >= 1, got {order}")
        self.order, self.vocab_size, self.discount = order, vocab_size, discount
        train = tuple(train)
        top = Counter(train[i - order + 1: i + 1] for i in range(order - 1, len(train)))
        # counts[k]: (context of k characters, c) -> count, for k = order - 1 down to 0
        self.counts = {order - 1: top}
        for k in range(order - 2, -1, -1):  # continuation counts: distinct characters before
            self.counts[k] = Counter(gram[1:] for gram in self.counts[k + 1])
        self.totals, self.types = {}, {}  # per order: context -> N(h), T(h)
        for k, grams in self.counts.items():
            totals, types = defaultdict(int), defaultdict(int)
            for gram, n in grams.items():
                totals[gram[:-1]] += n
                types[gram[:-1]] += 1
            self.totals[k], self.types[k] = dict(totals), dict(types)

    def probability(self, context: Sequence[int], c: int) -> float:
        """p(c | the last order - 1 ids of context)."""
        p = 1.0 / self.vocab_size
        context = tuple(context)
        for k in range(0, self.order):
            if k > len(context):
                break
            h = context[len(context) - k:] if k else ()
            total = self.totals[k].get(h)
            if total is None:
                break  # unseen here, so unseen with more context too
            count = self.counts[k].get((*h, c), 0)
            p = max(count - self.discount, 0) / total + self.discount * self.types[k][h] / total * p
        return p

    def nats(self, ids: Sequence[int], block_size: int | None = None) -> float:
        """Cross entropy (nats per character) of predicting each id after the first from the
        ones before it; with ``block_size``, the text is read in consecutive windows of
        block_size + 1 ids as the language model's evaluation (corpora.TextWindows), so that
        each window's first prediction has one character of context, as the model's."""
        ids = tuple(ids)
        total = 0.0
        for t in range(1, len(ids)):
            start = max(0, t - self.order + 1)
            if block_size is not None:
                start = max(start, (t - 1) // block_size * block_size)
            total -= math.log(self.probability(ids[start:t], ids[t]))
        return total / (len(ids) - 1)


# --------------------------------------------------------------- language identification

class NaiveBayes:
    """Multinomial naive Bayes over the character n-grams (1 to ``order`` characters, the text
    padded with a space at each end, lower-cased) of short texts:

        class = argmax_y  log p(y) + sum over the text's n-grams g of log p(g | y)

    with p(g | y) = (count(g, y) + alpha) / (count(y) + alpha |G|), G the training n-grams."""

    def __init__(self, pairs: Sequence[tuple[str, str]], order: int = 3, alpha: float = 0.1):
        self.order, self.alpha = order, alpha
        self.counts, self.priors = defaultdict(Counter), Counter(y for _, y in pairs)
        for text, y in pairs:
            self.counts[y].update(self.ngrams(text))
        self.grams = set().union(*self.counts.values())
        self.totals = {y: sum(c.values()) for y, c in self.counts.items()}

    def ngrams(self, text: str) -> list[str]:
        text = f" {text.lower()} "
        return [text[i: i + n] for n in range(1, self.order + 1) for i in range(len(text) - n + 1)]

    def log_scores(self, text: str) -> dict[str, float]:
        """Class -> log p(y) + sum log p(g | y) (unnormalized)."""
        n, grams = sum(self.priors.values()), self.ngrams(text)
        scores = {}
        for y, counts in self.counts.items():
            denominator = math.log(self.totals[y] + self.alpha * len(self.grams))
            scores[y] = math.log(self.priors[y] / n) + sum(
                math.log(counts[g] + self.alpha) - denominator for g in grams)
        return scores

    def classify(self, text: str) -> str:
        scores = self.log_scores(text)
        return max(scores, key=scores.get)

    def accuracy(self, pairs: Sequence[tuple[str, str]]) -> float:
        return sum(self.classify(text) == y for text, y in pairs) / len(pairs)


# ------------------------------------------------------------------------------- dates

def most_frequent_answer(train: Sequence[tuple[str, str]], test: Sequence[tuple[str, str]]
                         ) -> float:
    """Exact match of always answering the training split's most frequent target."""
    answer = Counter(t for _, t in train).most_common(1)[0][0]
    return sum(t == answer for _, t in test) / len(test)


class DateRule:
    """A hand-written rule for written-out dates: the four-digit number is the year, the
    other number the day, and the month is the first word found in a table learned from
    the training pairs (a word, lower-cased, that always came with one month, seen at least
    ``min_count`` times). None when the text does not fit the rule."""

    def __init__(self, train: Sequence[tuple[str, str]], min_count: int = 5):
        months = defaultdict(Counter)  # word -> Counter of months
        for text, target in train:
            for word in self.words(text):
                months[word][target[5:7]] += 1
        self.months = {w: m.most_common(1)[0][0] for w, m in months.items()
                       if len(m) == 1 and m.total() >= min_count}

    @staticmethod
    def words(text: str) -> list[str]:
        return re.findall(r"[^\W\d_]+\.?", text.lower())

    def __call__(self, text: str) -> str | None:
        numbers = re.findall(r"\d+", text)
        years = [n for n in numbers if len(n) == 4]
        days = [n for n in numbers if len(n) <= 2]
        month = next((self.months[w] for w in self.words(text) if w in self.months), None)
        if len(years) != 1 or len(days) != 1 or month is None:
            return None
        return f"{years[0]}-{month}-{int(days[0]):02d}"

    def accuracy(self, pairs: Sequence[tuple[str, str]]) -> float:
        return sum(self(s) == t for s, t in pairs) / len(pairs)


def lm_baselines(vocab: Vocab, train: str, test: str, orders: Sequence[int] = (3, 5),
                 block_size: int | None = None) -> dict[str, float]:
    """{"unigram": nats/char, "3-gram": ..., ...} on ``test``, fitted on ``train``."""
    train_ids, test_ids = vocab.encode(train), vocab.encode(test)
    out = {"unigram": unigram_nats(train_ids, test_ids[1:], len(vocab))}
    for n in orders:
        out[f"{n}-gram"] = NGramLM(train_ids, len(vocab), n).nats(test_ids, block_size)
    return out
