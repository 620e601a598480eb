"""One interface for three kinds of model: the training loop, evaluation, checkpoints and
the generation loop run chapter 09's kinds (here: the stand-ins of model_kinds.py) through
the same code as the encoder-decoder, with no branch on the kind."""

import pytest
import torch
from model_kinds import KINDS, TinyClassifier, TinyLM

import tfcourse.checkpoint as checkpoint
from tfcourse.checkpoint import load_checkpoint
from tfcourse.decoding import generate, greedy, sampler
from tfcourse.training import Interrupted, TrainConfig, train
from tfcourse.vocab import BOS, EOS, PAD

CONFIG = dict(steps=40, batch_size=16, warmup=5, lr=0.01, schedule="cosine", eval_every=10,
              eval_size=20, label_smoothing=0.0)


@pytest.fixture
def registry(monkeypatch):
    """Stand-ins registered for the kinds "lm" and "classifier" (as tfcourse.checkpoint.register
    does for a new kind)."""
    monkeypatch.setattr(checkpoint, "_KINDS", dict(checkpoint._KINDS))
    checkpoint.register(TinyLM)
    checkpoint.register(TinyClassifier)


def build(kind, seed=0):
    cls, config_of, make_task = KINDS[kind]
    task = make_task()
    torch.manual_seed(seed)
    return task, cls(config_of(task))


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_trains_and_checkpoints_through_the_one_loop(kind, registry, tmp_path):
    task, model = build(kind)
    before = task.evaluate(model, task.test)
    history = train(model, task, TrainConfig(**CONFIG), checkpoint=tmp_path / "m.pt",
                    progress=False)
    after = task.evaluate(model, task.test)
    assert (after > before + 0.2) if task.higher_is_better else (after < 0.8 * before)
    assert history["val_step"] == [10, 20, 30, 40] and len(history["val_metric"]) == 4
    loaded, vocab, state = load_checkpoint(tmp_path / "m.pt")
    assert type(loaded) is type(model) and state["kind"] == kind == model.kind
    assert loaded.config == model.config and vocab == task.vocab
    assert task.evaluate(loaded, task.test) == after


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_resumes_exactly(kind, registry, tmp_path, monkeypatch):
    config = TrainConfig(**{**CONFIG, "steps": 12, "eval_every": 5})
    task, straight = build(kind)
    want = train(straight, task, config, progress=False)

    task, model = build(kind)
    real, calls = task.make_batch, []

    def interrupt_in_step_6(examples):  # calls: steps 1-5, validation at 5, step 6
        calls.append(1)
        if len(calls) == 7:
            raise KeyboardInterrupt
        return real(examples)

    task.make_batch = interrupt_in_step_6
    with pytest.raises(Interrupted) as stop:
        train(model, task, config, checkpoint=tmp_path / "m.pt", progress=False)
    assert (stop.value.step, stop.value.saved) == (5, True)
    task, resumed = build(kind, seed=1)  # a fresh model: everything comes from the checkpoint
    got = train(resumed, task, config, checkpoint=tmp_path / "m.pt", resume=True, progress=False)
    assert got == want
    for p, q in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(p, q)


def test_stop_at_follows_the_metric_direction():
    task, model = build("lm")  # its metric is a loss: reached when it is low enough
    history = train(model, task, TrainConfig(**CONFIG), progress=False, stop_at=10.0)
    assert history["val_step"] == [10] and history["step"][-1] == 10


def test_a_language_model_generates_with_the_shared_loop_and_its_cache():
    task, model = build("lm")
    train(model, task, TrainConfig(**CONFIG), progress=False)
    model.eval()
    prompt = torch.tensor([[BOS, *task.vocab.encode("aa")], [BOS, *task.vocab.encode("cc")]])

    def step(tokens):  # the whole sequence every time
        return model(tokens)[:, -1].log_softmax(-1)

    cache = model.init_cache()

    def cached_step(tokens):  # the prompt once, then only the newest token
        return model(tokens[:, len(cache):], cache=cache)[:, -1].log_softmax(-1)

    out = generate(step, prompt, 12, EOS, PAD, greedy)
    assert torch.equal(generate(cached_step, prompt, 12, EOS, PAD, greedy), out)
    assert torch.equal(out[:, :3], prompt)
    texts = [task.vocab.decode(row[1:]) for row in out]
    assert texts[0].startswith("aaaaaa") and texts[1].startswith("cccccc")  # it learned the data
    assert (out == EOS).any(1).all() and out.size(1) < 3 + 12  # stopped at EOS

    draws = [generate(step, prompt, 12, EOS, PAD, sampler(2.0, generator=torch.Generator()
                                                           .manual_seed(0))) for _ in range(2)]
    assert torch.equal(*draws)
    assert torch.equal(generate(step, prompt, 12, EOS, PAD, sampler(5.0, top_k=1)), out)


def test_a_stopped_sequence_only_pads():
    script = torch.tensor([[5, EOS, 6, 7], [5, 6, 7, EOS]])  # what each row says at steps 0..3

    def step(tokens):
        t = tokens.size(1) - 1
        return torch.nn.functional.one_hot(script[:, t], 9).float().log()

    out = generate(step, torch.full((2, 1), BOS), 10, EOS, PAD, greedy)
    assert out.tolist() == [[BOS, 5, EOS, PAD, PAD], [BOS, 5, 6, 7, EOS]]


# ----------------------------------------------------------- chapter 09's kinds, for real


def test_chapter_9_kinds_are_known_to_checkpoints(tmp_path):
    from tfcourse.recipes import build

    assert checkpoint.kinds() == ("seq2seq", "classifier", "lm", "llama")
    for name in ("classify", "mlm", "lm", "lm-llama"):
        task, model, _ = build(name, model=dict(d_model=16, n_heads=2, d_ff=32, n_layers=1))
        checkpoint.save_checkpoint(tmp_path / "m.pt", model, task, TrainConfig(), step=0)
        loaded, vocab, state = load_checkpoint(tmp_path / "m.pt")
        assert type(loaded) is type(model) and loaded.config == model.config
        assert vocab == task.vocab and state["task"] == name == task.name
        assert state["classes"] == list(getattr(task, "classes", []))
        batch = task.make_batch(task.val[:3])
        torch.testing.assert_close(batch.loss_inputs(loaded)[0], batch.loss_inputs(model.eval())[0])
    assert state["classes"] == [] and build("classify")[0].classes == ("en", "de", "nl", "sv",
                                                                       "fr", "es", "pt", "it",
                                                                       "pl", "tr")


def test_mlm_pre_training_then_classification_on_one_model():
    """The notebook's path: the same EncoderClassifier trained on "mlm", then on "classify"
    (its encoder and embeddings carry over; the MLM head is tied to the embeddings)."""
    from tfcourse.recipes import build

    small = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1)
    mlm, model, _ = build("mlm", model=small)
    quick = TrainConfig(**{**CONFIG, "steps": 20, "eval_every": 0, "eval_size": 50})
    history = train(model, mlm, quick, progress=False)
    assert history["val_metric"][-1] > 0.05
    embeddings = model.embed.embedding.weight.detach().clone()
    classify = build("classify")[0]
    assert classify.vocab == mlm.vocab and classify.val == mlm.val
    history = train(model, classify, quick, progress=False)
    assert 0 <= history["val_metric"][-1] <= 1
    assert not torch.equal(model.embed.embedding.weight, embeddings)  # trained further
