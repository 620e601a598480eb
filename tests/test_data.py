import datetime

import pytest
import torch

from tfcourse.batches import make_batch
from tfcourse.data import DATE_LOCALES, DATE_STYLES, copy_task, dates_task, format_dates, reverse_task
from tfcourse.masks import padding_mask, target_mask
from tfcourse.vocab import BOS, EOS, PAD, UNK, Vocab


@pytest.fixture(scope="module")
def dates():
    return dates_task(seed=0, n_train=3000, n_val=300, n_test=600)


def test_vocab_ids_encode_decode():
    vocab = Vocab("abc")
    assert (PAD, BOS, EOS, UNK) == (0, 1, 2, 3)
    assert vocab.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert len(vocab) == 7 and vocab.symbols == ["a", "b", "c"]
    assert vocab.encode("cab") == [6, 4, 5]
    assert vocab.encode("az") == [4, UNK]
    assert vocab.decode([BOS, 6, 4, UNK, EOS, 5]) == "ca?"  # stops at EOS
    assert vocab.decode(torch.tensor([4, 5, PAD, PAD])) == "ab"
    assert Vocab.from_texts(["ba", "cab"]).symbols == ["a", "b", "c"]
    with pytest.raises(ValueError, match="distinct"):
        Vocab("aba")


def test_make_batch_shifts_targets_and_pads():
    vocab = Vocab("abc")
    batch = make_batch([("ab", "abc"), ("c", "b")], vocab)
    a, b, c = 4, 5, 6
    assert batch.src.tolist() == [[a, b], [c, PAD]]
    assert batch.tgt_in.tolist() == [[BOS, a, b, c], [BOS, b, PAD, PAD]]  # BOS + y
    assert batch.tgt_out.tolist() == [[a, b, c, EOS], [b, EOS, PAD, PAD]]  # y + EOS
    assert torch.equal(batch.src_mask, padding_mask(batch.src, PAD))
    assert torch.equal(batch.tgt_mask, target_mask(batch.tgt_in, PAD))
    assert batch.tgt_mask.shape == (2, 1, 4, 4) and batch.src_mask.shape == (2, 1, 1, 2)
    assert batch.n_targets == 6
    # teacher forcing: the input at position t+1 is the target at position t
    real = (batch.tgt_out[:, :-1] != PAD) & (batch.tgt_out[:, :-1] != EOS)
    assert torch.equal(batch.tgt_in[:, 1:][real], batch.tgt_out[:, :-1][real])


@pytest.mark.parametrize("make", [copy_task, reverse_task])
def test_sequence_tasks(make):
    task = make(seed=3, n_train=2000, n_val=100, n_test=200)
    assert len(task.vocab) == 11  # The Annotated Transformer's V = 11
    assert (len(task.train), len(task.val), len(task.test)) == (2000, 100, 200)
    sources = [{s for s, _ in split} for split in (task.train, task.val, task.test)]
    assert sum(map(len, sources)) == 2300  # all distinct: the splits share nothing
    for s, t in task.train[:50]:
        assert t == (s if task.name == "copy" else s[::-1])
        assert set(s) <= set("abcdefg")
    if task.name == "copy":
        assert {len(s) for s, _ in task.train} == {10}
    else:
        assert {len(s) for s, _ in task.train} == set(range(1, 11))
    assert make(seed=3, n_train=2000, n_val=100, n_test=200) == task  # deterministic
    assert make(seed=4, n_train=2000, n_val=100, n_test=200).train != task.train


def test_dates_examples_are_right(dates):
    for text, iso in dates.train[:300] + dates.test[:300]:
        date = datetime.date.fromisoformat(iso)
        assert text in format_dates(date).values()
        assert str(date.year) in text  # four-digit years, always
    assert format_dates(datetime.date(2026, 11, 21))[("fr_FR", "full")] == \
        "samedi 21 novembre 2026"
    assert format_dates(datetime.date(2026, 11, 21))[("en_US", "long")] == "November 21, 2026"


def test_dates_split_by_date(dates):
    days = [{t for _, t in split} for split in (dates.train, dates.val, dates.test)]
    assert not days[0] & days[1] and not days[0] & days[2] and not days[1] & days[2]
    assert len(days[1]) == 300 and len(days[2]) == 600  # one example per held-out date
    # every (locale, style) appears equally often in the test split
    n_formats = len(DATE_LOCALES) * len(DATE_STYLES)
    styles = [format_dates(datetime.date.fromisoformat(t)) for _, t in dates.test[:n_formats]]
    assert [list(s.values())[i] for i, s in enumerate(styles)] == \
        [s for s, _ in dates.test[:n_formats]]


def test_dates_input_determines_output():
    # All dates of a leap year and a common year in every locale and style: no text is the
    # writing of two different dates (no numeric day/month order, no clashing month names).
    seen = {}
    day = datetime.date(2000, 1, 1)
    while day.year < 2002:
        for text in format_dates(day).values():
            assert seen.setdefault(text, day) == day, text
        day += datetime.timedelta(days=1)


def test_dates_vocab_covers_every_character(dates):
    for text, iso in dates.train + dates.val + dates.test:
        assert UNK not in dates.vocab.encode(text + iso)


def test_dates_deterministic_and_seeded(dates):
    assert dates_task(seed=0, n_train=3000, n_val=300, n_test=600) == dates
    other = dates_task(seed=1, n_train=3000, n_val=300, n_test=600)
    assert other.test != dates.test and other.vocab.itos == dates.vocab.itos


def test_bad_arguments():
    with pytest.raises(ValueError, match="short"):
        dates_task(styles=("short",))
    with pytest.raises(ValueError, match="four-digit"):
        dates_task(first_year=99)
    with pytest.raises(ValueError, match="min_len"):
        copy_task(min_len=0)
    with pytest.raises(ValueError, match="too few"):
        copy_task(max_len=2, min_len=1)
