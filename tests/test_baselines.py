"""The baselines (tfcourse.baselines) and the confidence measures (tfcourse.inference)."""

import math

import pytest
import torch

from tfcourse.baselines import DateRule, NaiveBayes, NGramLM, most_frequent_answer, unigram_nats
from tfcourse.batches import make_batch
from tfcourse.inference import auroc, output_confidence
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.vocab import Vocab


def test_unigram_nats_by_hand():
    # train: a a b (counts 2, 1), vocabulary 3: p(a) = 3/6, p(b) = 2/6
    assert unigram_nats([0, 0, 1], [0, 1], 3) == pytest.approx(-(math.log(3 / 6) + math.log(2 / 6)) / 2)


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_ngram_probabilities_sum_to_one_in_every_context(order):
    text = [1, 2, 3, 1, 2, 4, 1, 2, 3, 3, 2, 1] * 3
    lm = NGramLM(text, vocab_size=6, order=order)
    for context in ([], [1], [1, 2], [3, 3, 2], [5, 5], [2, 4, 1, 2]):
        assert sum(lm.probability(context, c) for c in range(6)) == pytest.approx(1.0)
        assert all(lm.probability(context, c) > 0 for c in range(6))  # never 0: uniform floor


def test_ngram_uses_its_context_and_windows():
    text = [1, 2, 3] * 50
    bigram, unigram = NGramLM(text, 5, 2), NGramLM(text, 5, 1)
    assert bigram.probability([1], 2) > 0.9 > 0.4 > unigram.probability([1], 2)
    assert bigram.nats(text[:30]) < 0.1 < unigram.nats(text[:30])
    # after 1 1 comes 2 or 3: a trigram needs both; read in windows of 1 (TextWindows'
    # evaluation with block_size=1) every prediction has one character of context only
    text = [1, 1, 2, 1, 1, 3] * 50
    trigram = NGramLM(text, 5, 3)
    assert trigram.nats(text[:30], block_size=1) > 0.3 > trigram.nats(text[:30])


def test_naive_bayes_reads_character_ngrams():
    pairs = [("the cat", "en"), ("the dog", "en"), ("der hund", "de"), ("die katze", "de")]
    nb = NaiveBayes(pairs, order=2)
    assert nb.classify("the hat") == "en" and nb.classify("die hunde") == "de"
    assert nb.accuracy(pairs) == 1.0


def test_date_rule_and_most_frequent_answer():
    train = [("March 3, 1999", "1999-03-03"), ("3 mars 2001", "2001-03-03"),
             ("May 4, 1999", "1999-05-04"), ("4 mai 2001", "2001-05-04")] * 5
    rule = DateRule(train)
    assert rule("mars 21, 2026") == "2026-03-21" and rule("4 May 1900") == "1900-05-04"
    assert rule("hello") is None and rule("March 2026") is None  # no day: not a date it reads
    assert most_frequent_answer(train, [("x", "1999-03-03"), ("y", "2000-01-01")]) == 0.5


def test_auroc_against_pairs_counted_by_hand():
    scores = [0.9, 0.8, 0.8, 0.3, 0.1, 0.8]
    right = [True, True, False, True, False, False]
    pairs = [(s, t) for s, r in zip(scores, right) if r for t, w in zip(scores, right) if not w]
    by_hand = sum(1.0 if s > t else 0.5 if s == t else 0.0 for s, t in pairs) / len(pairs)
    assert auroc(scores, right) == pytest.approx(by_hand)
    assert auroc([1, 2], [False, True]) == 1.0 and auroc([1, 2], [True, False]) == 0.0
    with pytest.raises(ValueError, match="both right and wrong"):
        auroc([1, 2], [True, True])


def test_output_confidence_is_the_weakest_token():
    vocab = Vocab("abc")
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.tiny(len(vocab), dropout=0.0)).eval()
    pairs = [("abc", "cab"), ("a", "bb")]
    with torch.no_grad():
        batch = make_batch(pairs, vocab)
        logits, targets = batch.loss_inputs(model)
        p = logits.softmax(-1).gather(-1, targets[..., None])[..., 0]
    expected = [p[0, :4].min().item(), p[1, :3].min().item()]  # the target's tokens and EOS
    assert output_confidence(model, pairs, vocab) == pytest.approx(expected)
