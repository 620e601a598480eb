"""Chapter 07: data. Three seq2seq tasks (their batches are tfcourse.batches', the vocabulary
tfcourse.vocab's).

Every task is generated offline and deterministically from a seed, as pairs of strings
(source, target) split into train, validation and test sets that share no example:

- ``copy``: the first example of The Annotated Transformer. There the vocabulary has 11
  ids (0 = padding, 1..10 symbols, the first of each sequence fixed to 1 as the start
  symbol) and sequences of length 10. Here the 11 ids are our 4 specials (PAD, BOS, EOS,
  UNK) and the 7 symbols "abcdefg"; a source is 10 free symbols and the decoder gets its
  start symbol (BOS) and learns to stop (EOS) on top of them.
- ``reverse``: the same symbols, lengths 1 to 10, target = source reversed.
- ``dates``: a date written out the way people write it, in 8 languages and 3 styles
  from Babel's locale data (``babel.dates.format_date`` with the ``full``, ``long`` and
  ``medium`` formats: "sobota, 21 listopada 2026", "November 21, 2026",
  "2026. nov. 21.") -> ISO 8601 "2026-11-21". Babel's numeric ``short`` formats are left
  out ("03/06/04" is March or June depending on the locale, which the input does not
  show), and so are locales whose ``medium`` format is numeric (de_DE: "21.11.2026").
  Every year is written with four digits, so every input determines its output. The
  splits are made by date: a validation or test date never appears in training, in any
  language or style.
"""

import datetime
import random
from dataclasses import dataclass

from babel.dates import format_date

# Exercise 07's file imports BOS, EOS, PAD, Batch and pad_sequences from here (their homes
# are tfcourse.vocab and tfcourse.batches), exercise 09's PAD.
from tfcourse.batches import Batch, make_batch, pad_sequences  # noqa: F401
from tfcourse.inference import exact_match, predict
from tfcourse.vocab import BOS, EOS, PAD, Vocab  # noqa: F401


@dataclass
class Task:
    """A seq2seq task: its vocabulary (shared by source and target) and three disjoint splits
    of (source, target) pairs. It makes its batches and says how it is judged, as every task
    does for the training loop (tfcourse.interface.TaskLike)."""

    name: str
    vocab: Vocab
    train: list
    val: list
    test: list
    metric = "exact match"  # class attributes: what evaluate() measures, and its direction
    higher_is_better = True

    def make_batch(self, examples: list[tuple[str, str]]) -> Batch:
        """(source, target) pairs -> Batch (teacher forcing)."""
        return make_batch(examples, self.vocab)

    def evaluate(self, model, examples: list[tuple[str, str]]) -> float:
        """Exact match: the fraction of examples whose whole greedy output is right."""
        return exact_match(model, examples, self.vocab)

    def show(self, model, examples: list[tuple[str, str]]) -> list[str]:
        """One line per example: what the model makes of it, and whether that is right."""
        outputs = predict(model, [s for s, _ in examples], self.vocab)
        return [f"{source} -> {output}  ({'ok' if output == target else f'WRONG, expected {target}'})"
                for (source, target), output in zip(examples, outputs, strict=True)]


def _unique_strings(rng, n, symbols, min_len, max_len):
    seen = {}  # a dict keeps the order of first appearance, so the result is deterministic
    while len(seen) < n:
        s = "".join(rng.choices(symbols, k=rng.randint(min_len, max_len)))
        seen[s] = None
    return list(seen)


def _sequence_task(name, fn, seed, n_train, n_val, n_test, min_len, max_len, symbols):
    if min_len < 1 or max_len < min_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    n = n_train + n_val + n_test
    if len(symbols) ** max_len < 2 * n:  # there must be room for n distinct sequences
        raise ValueError(f"{n} distinct sequences of length <= {max_len} from {symbols!r}: too few")
    texts = _unique_strings(random.Random(seed), n, symbols, min_len, max_len)
    pairs = [(t, fn(t)) for t in texts]
    return Task(name, Vocab(symbols), pairs[:n_train], pairs[n_train:n_train + n_val],
                pairs[n_train + n_val:])


def copy_task(seed=0, n_train=20_000, n_val=500, n_test=1000, min_len=10, max_len=10,
              symbols="abcdefg"):
    """Copy the source: "gbadcfaebd" -> "gbadcfaebd". Distinct sequences, split at random."""
    return _sequence_task("copy", lambda t: t, seed, n_train, n_val, n_test, min_len, max_len,
                          symbols)


def reverse_task(seed=0, n_train=20_000, n_val=500, n_test=1000, min_len=1, max_len=10,
                 symbols="abcdefg"):
    """Reverse the source: "gbadc" -> "cdabg". Distinct sequences, split at random."""
    return _sequence_task("reverse", lambda t: t[::-1], seed, n_train, n_val, n_test, min_len,
                          max_len, symbols)


DATE_LOCALES = ("en_US", "fr_FR", "es_ES", "pt_BR", "it_IT", "pl_PL", "tr_TR", "hu_HU")
DATE_STYLES = ("full", "long", "medium")


def format_dates(date, locales=DATE_LOCALES, styles=DATE_STYLES):
    """Every way ``date`` is written: {(locale, style): text}."""
    return {(loc, st): format_date(date, st, locale=loc) for loc in locales for st in styles}


def dates_task(seed=0, n_train=100_000, n_val=500, n_test=2000, first_year=1900,
               last_year=2099, locales=DATE_LOCALES, styles=DATE_STYLES):
    """Written-out dates -> ISO 8601: "samedi 21 novembre 2026" -> "2026-11-21".

    The dates from ``first_year`` to ``last_year`` are shuffled and cut: ``n_val`` dates for
    validation, ``n_test`` for test, the rest for training, so no test date is ever seen in
    training, in any format. A validation or test date appears once, the formats taken in
    turn ((locale, style) pairs, equally often); the ``n_train`` training examples are dates
    and formats drawn at random (with repetition) from the training dates.
    """
    for name, value in (("locales", locales), ("styles", styles)):
        if not value:
            raise ValueError(f"{name} must not be empty")
    bad = set(styles) - {"full", "long", "medium"}
    if bad:
        raise ValueError(f"styles must be among full, long, medium (not the numeric short), "
                         f"got {sorted(bad)}")
    if not 1000 <= first_year <= last_year <= 9999:
        raise ValueError(f"need 1000 <= first_year <= last_year <= 9999 (four-digit years), "
                         f"got first_year={first_year}, last_year={last_year}")
    start = datetime.date(first_year, 1, 1)
    days = (datetime.date(last_year, 12, 31) - start).days + 1
    if n_val + n_test >= days:
        raise ValueError(f"n_val + n_test = {n_val + n_test} must be below the {days} dates")
    rng = random.Random(seed)
    dates = [start + datetime.timedelta(days=i) for i in range(days)]
    rng.shuffle(dates)
    val_dates, test_dates = dates[:n_val], dates[n_val:n_val + n_test]
    train_dates = dates[n_val + n_test:]
    formats = [(loc, st) for loc in locales for st in styles]

    def example(date, fmt):
        return format_date(date, fmt[1], locale=fmt[0]), date.isoformat()

    def held_out(split):
        return [example(d, formats[i % len(formats)]) for i, d in enumerate(split)]

    val, test = held_out(val_dates), held_out(test_dates)
    train = [example(rng.choice(train_dates), rng.choice(formats)) for _ in range(n_train)]
    # Every character any date can show: the names of all months and weekdays (year 2000),
    # the digits and "-".
    year = [datetime.date(2000, 1, 1) + datetime.timedelta(days=i) for i in range(366)]
    texts = [t for d in year for t in format_dates(d, locales, styles).values()]
    vocab = Vocab.from_texts([*texts, "0123456789-"])
    return Task("dates", vocab, train, val, test)


# What a user may type that dates_task never shows: nonsense, and words that are not dates.
NOT_DATES = ("hello world", "asdf", "yesterday", "tomorrow at noon", "12345", "def f(x):",
             "Mitteleuropäische Sommerzeit", "???", "lorem ipsum dolor", "2026", "May",
             "Montag", "32 de diciembre de 2020", "February 30, 2021", "31 avril 2019",
             "nothing", "ab", "xyz 99", "1 2 3 4", "the third of May")
OTHER_LOCALES = ("de_DE", "nl_NL", "sv_SE", "en_GB", "fr_CA", "ro_RO", "cs_CZ", "da_DK",
                 "es_MX", "it_CH")


def unfamiliar_dates(n=200, seed=1):
    """Inputs a user may type that dates_task's training never shows, as (text, ISO date or
    None when there is none) pairs: ``n`` dates written out in other locales (German,
    Dutch, Swedish, ...: "21. März 1948"), ``n`` in numeric or abbreviated formats
    ("22.04.1903", "1982/02/04", "01-27-2075", "26 Apr 42") and NOT_DATES, nonsense and
    impossible dates. Some the model gets right (a Spanish-like date in es_MX), most not:
    what its confidence must tell apart."""
    rng = random.Random(seed)
    start = datetime.date(1900, 1, 1)
    pairs = []
    for i in range(n):
        date = start + datetime.timedelta(days=rng.randrange(200 * 365))
        locale = OTHER_LOCALES[i % len(OTHER_LOCALES)]
        pairs.append((format_date(date, ("long", "full")[i % 2], locale=locale), date.isoformat()))
        numeric = ("%d.%m.%Y", "%Y/%m/%d", "%m-%d-%Y", "%d %b %y")[i % 4]
        pairs.append((date.strftime(numeric), date.isoformat()))
    return pairs + [(text, None) for text in NOT_DATES]
