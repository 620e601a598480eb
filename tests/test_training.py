import os

import pytest
import torch
import torch.nn.functional as F

import tfcourse.training as training
from tfcourse.data import PAD, copy_task, make_batch
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.training import (
    TrainConfig,
    cosine_lr,
    cosine_scheduler,
    exact_match,
    label_smoothing_loss,
    load_checkpoint,
    noam_lr,
    noam_scheduler,
    save_checkpoint,
    smoothed_targets,
    train,
    train_step,
)


@pytest.fixture(scope="module")
def task():
    return copy_task(seed=0, n_train=2000, n_val=64, n_test=64)


def tiny_model(task, seed=0, **overrides):
    torch.manual_seed(seed)
    return Transformer(TransformerConfig.tiny(len(task.vocab), **overrides))


def flat(model):
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


QUICK = dict(steps=6, batch_size=16, warmup=4, lr=0.5, eval_every=0, eval_size=16)


# ------------------------------------------------------------------------------ schedules


def test_noam_lr_is_the_papers_formula():
    d_model, warmup = 512, 4000
    for step in (1, 100, 3999, 4000, 4001, 100_000):
        expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert noam_lr(step, d_model, warmup) == pytest.approx(expected, rel=1e-12)
    assert noam_lr(1, 512, 4000) == pytest.approx(512**-0.5 * 4000**-1.5)  # starts near 0
    peak = noam_lr(4000, 512, 4000)
    assert peak == pytest.approx((512 * 4000) ** -0.5)  # 7.0e-4, the paper's maximum
    assert noam_lr(3999, 512, 4000) < peak and noam_lr(4001, 512, 4000) < peak
    assert noam_lr(16000, 512, 4000) == pytest.approx(peak / 2)  # then 1 / sqrt(step)
    with pytest.raises(ValueError, match="step counts from 1"):
        noam_lr(0, 512, 4000)


def test_noam_scheduler_counts_from_step_one_and_scales_by_lr():
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([param], lr=2.0)
    scheduler = noam_scheduler(optimizer, d_model=64, warmup=10)
    seen = []
    for _ in range(30):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([2.0 * noam_lr(k, 64, 10) for k in range(1, 31)], rel=1e-12)
    assert seen[0] > 0  # the first update already moves: step 0 is never used


def test_cosine_schedule():
    assert [cosine_lr(s, 4, 12) for s in (1, 2, 4)] == pytest.approx([0.25, 0.5, 1.0])
    assert cosine_lr(8, 4, 12) == pytest.approx(0.5)  # half way down
    assert cosine_lr(12, 4, 12) == pytest.approx(0.0) and cosine_lr(50, 4, 12) == 0.0
    after = [cosine_lr(s, 4, 12) for s in range(4, 13)]
    assert all(a > b for a, b in zip(after, after[1:]))
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = cosine_scheduler(optimizer, warmup=4, total_steps=12)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.025)
    optimizer.step()
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
    with pytest.raises(ValueError):
        cosine_lr(0, 4, 12)


# ------------------------------------------------------------------------ label smoothing


def test_smoothed_targets():
    q = smoothed_targets(torch.tensor([[2, 0]]), n_classes=5, eps=0.1)
    assert q.shape == (1, 2, 5)
    assert q[0, 0].tolist() == pytest.approx([0.02, 0.02, 0.92, 0.02, 0.02])
    assert q.sum(-1)[0].tolist() == pytest.approx([1.0, 1.0])


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothing_loss_equals_torch(eps):
    torch.manual_seed(0)
    logits = torch.randn(3, 7, 11, dtype=torch.float64, requires_grad=True)
    target = torch.randint(1, 11, (3, 7))
    target[0, 4:] = PAD
    target[2, 1:] = PAD
    ours = label_smoothing_loss(logits, target, eps)
    theirs = F.cross_entropy(logits.reshape(-1, 11), target.reshape(-1), label_smoothing=eps,
                             ignore_index=PAD)
    torch.testing.assert_close(ours, theirs)
    (g_ours,) = torch.autograd.grad(ours, logits)
    (g_theirs,) = torch.autograd.grad(theirs, logits)
    torch.testing.assert_close(g_ours, g_theirs)
    assert g_ours[2, 1:].abs().max() == 0  # padding gets no gradient


def test_label_smoothing_loss_ignores_padding_and_checks_shapes():
    logits, target = torch.randn(2, 3, 5), torch.tensor([[1, 2, PAD], [3, PAD, PAD]])
    changed = logits.clone()
    changed[target == PAD] = 100.0  # whatever the model says at padding does not count
    assert label_smoothing_loss(logits, target) == label_smoothing_loss(changed, target)
    with pytest.raises(ValueError, match="must agree"):
        label_smoothing_loss(logits, target[:, :2])


# ------------------------------------------------------------------------------- the loop


def test_train_step_accumulates_zeroes_and_clips(task):
    pairs = task.train[:16]
    big = [make_batch(pairs, task.vocab)]
    micro = [make_batch(pairs[:8], task.vocab), make_batch(pairs[8:], task.vocab)]
    models = [tiny_model(task, dropout=0.0) for _ in range(3)]
    start = flat(models[0])
    for model in models:
        for p in model.parameters():
            p.grad = torch.full_like(p, 7.0)  # left over from elsewhere: must not count
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    loss_big = train_step(models[0], big, optimizers[0], 0.1, clip=0.0)
    loss_micro = train_step(models[1], micro, optimizers[1], 0.1, clip=0.0)
    # copy sequences have one length: the mean of the two halves' losses is the whole's
    assert loss_micro == pytest.approx(loss_big, rel=1e-5)
    expected = label_smoothing_loss(tiny_model(task, dropout=0.0)(
        big[0].src, big[0].tgt_in, big[0].src_mask, big[0].tgt_mask), big[0].tgt_out)
    assert loss_big == pytest.approx(expected.item(), rel=1e-6)
    torch.testing.assert_close(flat(models[1]), flat(models[0]))
    # clipping: the SGD update is lr * gradient, of norm at most lr * clip
    train_step(models[2], big, optimizers[2], 0.1, clip=0.01)
    assert (flat(models[2]) - start).norm().item() == pytest.approx(0.1 * 0.01, rel=1e-4)


def test_train_config_rejects_bad_values():
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="linear")
    with pytest.raises(ValueError, match="batch_size"):
        TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match="label_smoothing"):
        TrainConfig(label_smoothing=1.0)


def test_history_and_loss_falls(task):
    model = tiny_model(task)
    config = TrainConfig(**{**QUICK, "steps": 40, "eval_every": 20})
    history = train(model, task, config, progress=False)
    assert history["step"] == list(range(1, 41))
    assert len(history["loss"]) == len(history["lr"]) == 40
    assert history["lr"][:3] == pytest.approx([0.5 * noam_lr(s, 64, 4) for s in (1, 2, 3)])
    assert history["val_step"] == [20, 40]
    assert sum(history["loss"][-5:]) < 0.8 * sum(history["loss"][:5])
    assert history["val_loss"][1] < history["val_loss"][0]
    assert all(0.0 <= a <= 1.0 for a in history["val_accuracy"])


def test_gradient_accumulation_equals_a_big_batch(task):
    # Copy sequences all have the same length, so the mean of the micro-batches' mean losses
    # is the mean over the big batch. Adam turns float rounding in gradients near 0 into
    # whole updates, so compare how far the models moved: the same way up to 1e-3, where
    # other examples (seed=1) give a difference as large as the move itself.
    start = flat(tiny_model(task, dropout=0.0))
    moved = {}
    for name, overrides in (("big", {"batch_size": 16}),
                            ("accum", {"batch_size": 8, "accum_steps": 2}),
                            ("other", {"batch_size": 8, "accum_steps": 2, "seed": 1})):
        model = tiny_model(task, dropout=0.0)
        moved[name] = train(model, task, TrainConfig(**{**QUICK, **overrides}), progress=False)
        moved[name] = flat(model)
    distance = (moved["big"] - start).norm()
    assert (moved["accum"] - moved["big"]).norm() < 1e-2 * distance
    assert (moved["other"] - moved["big"]).norm() > 0.3 * distance


def test_checkpoint_round_trip(task, tmp_path):
    model = tiny_model(task)
    path = tmp_path / "sub" / "model.pt"
    save_checkpoint(path, model, task, TrainConfig(), step=7)
    assert os.listdir(path.parent) == ["model.pt"]  # the temporary file is gone
    state = torch.load(path, weights_only=True)  # plain types only
    assert state["step"] == 7 and state["task"] == "copy" and state["vocab"] == list("abcdefg")
    assert state["train_config"]["batch_size"] == 64
    loaded, vocab, _ = load_checkpoint(path)
    assert vocab == task.vocab and not loaded.training
    assert loaded.config == model.config
    for (name, p), q in zip(model.state_dict().items(), loaded.state_dict().values(),
                            strict=True):
        assert torch.equal(p, q), name


def test_load_checkpoint_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable tfcourse checkpoint"):
        load_checkpoint(tmp_path / "junk.pt")
    torch.save({"model": {}}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a readable tfcourse checkpoint"):
        load_checkpoint(tmp_path / "other.pt")


def test_interrupted_run_resumes_exactly(task, tmp_path, monkeypatch):
    config = TrainConfig(**{**QUICK, "steps": 8})  # dropout on: its masks must repeat too
    straight = tiny_model(task)
    train(straight, task, config, progress=False)

    path = tmp_path / "run.pt"
    calls, real_make_batch = [], training.make_batch

    def interrupt_at_sixth(pairs, vocab):
        calls.append(1)
        if len(calls) == 6:  # during step 6: steps 1..5 are done
            raise KeyboardInterrupt
        return real_make_batch(pairs, vocab)

    monkeypatch.setattr(training, "make_batch", interrupt_at_sixth)
    resumed = tiny_model(task)
    with pytest.raises(KeyboardInterrupt):
        train(resumed, task, config, checkpoint=path, progress=False)
    assert torch.load(path, weights_only=True)["step"] == 5
    monkeypatch.setattr(training, "make_batch", real_make_batch)

    resumed = tiny_model(task, seed=1)  # a fresh model: everything comes from the checkpoint
    history = train(resumed, task, config, checkpoint=path, resume=True, progress=False)
    assert history["step"] == list(range(1, 9))
    for p, q in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(p, q)


def test_copy_task_reaches_full_exact_match():
    """The course's recipe (notebook 07, `tfcourse train --task copy`): model and training."""
    from tfcourse.cli import TASK_DEFAULTS

    task = copy_task(seed=0)
    model = tiny_model(task, **TASK_DEFAULTS["copy"]["model"])
    train(model, task, TrainConfig(**TASK_DEFAULTS["copy"]["train"]), progress=False)
    assert exact_match(model, task.test, task.vocab) == 1.0


def test_exact_match_counts_whole_sequences(task, monkeypatch):
    pairs = [("abc", "abc"), ("ab", "ab"), ("gfe", "gfe"), ("a", "a")]
    seen = {}

    def fake_predict(model, texts, vocab, max_len, beam):
        seen.update(texts=texts, max_len=max_len)
        return ["abc", "abx", "gfe", "a" + "a"]  # right, wrong, right, runs on

    monkeypatch.setattr(training, "predict", fake_predict)
    assert exact_match(None, pairs, task.vocab) == 0.5
    assert seen == {"texts": ["abc", "ab", "gfe", "a"], "max_len": 5}
