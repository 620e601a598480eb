import math
import os

import pytest
import torch
import torch.nn.functional as F

import tfcourse.device as device
import tfcourse.inference as inference
import tfcourse.training as training
from tfcourse.batches import make_batch
from tfcourse.checkpoint import load_checkpoint, save_checkpoint, seal
from tfcourse.data import copy_task
from tfcourse.inference import exact_match
from tfcourse.losses import label_smoothing_loss, smoothed_targets
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.recipes import build
from tfcourse.schedules import cosine_lr, cosine_scheduler, noam_lr, noam_scheduler
from tfcourse.training import Interrupted, TrainConfig, train, train_step
from tfcourse.vocab import PAD


@pytest.fixture(scope="module")
def task():
    return copy_task(seed=0, n_train=2000, n_val=64, n_test=64)


def tiny_model(task, seed=0, **overrides):
    torch.manual_seed(seed)
    return Transformer(TransformerConfig.tiny(len(task.vocab), **overrides))


def flat(model):
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


QUICK = dict(steps=6, batch_size=16, warmup=4, lr=0.5, eval_every=0, eval_size=16)


def interrupt_at(monkeypatch, task, call, method="make_batch"):
    """Ctrl-C at the call-th call of task.<method> (make_batch: once per step, after the one
    call that measures the memory a step needs; evaluate: once per validation round)."""
    calls, real = [], getattr(task, method)
    call += method == "make_batch"

    def interrupted(*args):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(task, method, interrupted)


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
    assert sum(history["loss"][-5:]) < 0.9 * sum(history["loss"][:5])
    assert history["val_loss"][1] < history["val_loss"][0]
    assert all(0.0 <= a <= 1.0 for a in history["val_metric"])


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
    interrupt_at(monkeypatch, task, 6)  # during step 6: steps 1..5 are done
    resumed = tiny_model(task)
    with pytest.raises(Interrupted) as stop:
        train(resumed, task, config, checkpoint=path, progress=False)
    assert (stop.value.step, stop.value.saved) == (5, True)
    assert isinstance(stop.value, KeyboardInterrupt)  # a notebook shows it as one
    assert torch.load(path, weights_only=True)["step"] == 5
    monkeypatch.undo()

    resumed = tiny_model(task, seed=1)  # a fresh model: everything comes from the checkpoint
    history = train(resumed, task, config, checkpoint=path, resume=True, progress=False)
    assert history["step"] == list(range(1, 9))
    for p, q in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(p, q)


def test_copy_task_reaches_full_exact_match():
    """The course's recipe (notebook 07, `tfcourse train --task copy`): model and training."""
    task, model, config = build("copy", seed=0)
    train(model, task, config, progress=False)
    assert exact_match(model, task.test, task.vocab) == 1.0


def test_exact_match_counts_whole_sequences(task, monkeypatch):
    pairs = [("abc", "abc"), ("ab", "ab"), ("gfe", "gfe"), ("a", "a")]
    seen = {}

    def fake_predict(model, texts, vocab, max_len, beam):
        seen.update(texts=texts, max_len=max_len)
        return ["abc", "abx", "gfe", "a" + "a"]  # right, wrong, right, runs on

    monkeypatch.setattr(inference, "predict", fake_predict)
    assert exact_match(None, pairs, task.vocab) == 0.5
    assert seen == {"texts": ["abc", "ab", "gfe", "a"], "max_len": 5}


def test_label_smoothing_loss_without_padding_counts_every_target():
    logits, labels = torch.randn(4, 3), torch.tensor([0, 2, 1, 0])  # class 0 is a class
    torch.testing.assert_close(label_smoothing_loss(logits, labels, 0.1, pad_id=None),
                               F.cross_entropy(logits, labels, label_smoothing=0.1))


@pytest.mark.parametrize(("overrides", "message"), [
    (dict(lr=float("inf")), "lr must be a number > 0, got inf"),
    (dict(lr=float("nan")), "lr must be a number > 0, got nan"),
    (dict(clip=float("nan")), "clip must be"),
    (dict(steps=2.5), "steps must be an integer >= 1, got 2.5"),
    (dict(eval_every=-1), "eval_every must be an integer >= 0"),
    (dict(label_smoothing=float("nan")), "label_smoothing"),
])
def test_train_config_names_the_bad_value(overrides, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**overrides)


def test_interrupt_during_validation_keeps_the_history_whole(task, tmp_path, monkeypatch):
    """Ctrl-C in a validation round: the step is saved, the round is not half-recorded, and
    the resumed run does the round again: it ends as an uninterrupted run."""
    config = TrainConfig(**{**QUICK, "eval_every": 3})
    straight = tiny_model(task)
    want = train(straight, task, config, progress=False)
    assert want["val_step"] == [3, 6]

    path = tmp_path / "run.pt"
    interrupt_at(monkeypatch, task, 2, "evaluate")  # the round at step 6
    with pytest.raises(Interrupted) as stop:
        train(tiny_model(task), task, config, checkpoint=path, progress=False)
    assert (stop.value.step, stop.value.saved) == (6, True)
    saved = torch.load(path, weights_only=True)["history"]
    assert saved["val_step"] == [3] and len(saved["val_loss"]) == len(saved["val_metric"]) == 1
    monkeypatch.undo()

    resumed = tiny_model(task, seed=1)
    got = train(resumed, task, config, checkpoint=path, resume=True, progress=False)
    assert got == want
    assert torch.equal(flat(resumed), flat(straight))


def test_interrupt_before_the_first_step_saves_nothing(task, tmp_path, monkeypatch):
    path = tmp_path / "old.pt"
    path.write_bytes(b"an older run")
    interrupt_at(monkeypatch, task, 1)
    with pytest.raises(Interrupted) as stop:
        train(tiny_model(task), task, TrainConfig(**QUICK), checkpoint=path, progress=False)
    assert (stop.value.step, stop.value.saved) == (0, False)
    assert path.read_bytes() == b"an older run"


def test_a_diverging_run_stops_with_a_clear_error(task, tmp_path, monkeypatch):
    path = tmp_path / "run.pt"
    real_step, losses = training.train_step, []

    def diverging(*args):
        losses.append(real_step(*args) if len(losses) < 3 else math.nan)  # from step 4 on
        return losses[-1]

    monkeypatch.setattr(training, "train_step", diverging)
    config = TrainConfig(**{**QUICK, "eval_every": 2})
    with pytest.raises(FloatingPointError, match=r"the loss is nan at step 4: training diverged"):
        train(tiny_model(task), task, config, checkpoint=path, progress=False)
    model, _, state = load_checkpoint(path)  # the last round before it diverged
    assert state["step"] == 2 and all(p.isfinite().all() for p in model.parameters())

    monkeypatch.undo()  # weights that overflow: the validation round catches it, saves nothing
    config = TrainConfig(**{**QUICK, "schedule": "cosine", "lr": 1e38, "eval_every": 1})
    with pytest.raises(FloatingPointError, match=r"the validation loss is nan at step 1"):
        train(tiny_model(task), task, config, checkpoint=tmp_path / "new.pt", progress=False)
    assert not (tmp_path / "new.pt").exists()


def test_a_failed_save_leaves_no_file_behind(task, tmp_path, monkeypatch):
    path = tmp_path / "run.pt"
    save_checkpoint(path, tiny_model(task), task, TrainConfig(), step=1)
    before = path.read_bytes()

    def disk_full(obj, f, *args, **kwargs):  # what torch.save does when the disk is full
        with open(f, "wb") as out:
            out.write(b"PK\x03\x04 half a file")
        raise RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter "
                           "failed writing file data/3: file write failed")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError, match=f"cannot write the checkpoint {path}: RuntimeError"):
        save_checkpoint(path, tiny_model(task), task, TrainConfig(), step=2)
    assert os.listdir(tmp_path) == ["run.pt"] and path.read_bytes() == before


def test_checkpoints_record_the_kind_and_old_ones_load(task, tmp_path):
    path = tmp_path / "model.pt"
    save_checkpoint(path, tiny_model(task), task, TrainConfig(), step=1)
    state = torch.load(path, weights_only=True)
    assert state["kind"] == "seq2seq"
    del state["kind"]  # a checkpoint from before kinds: an encoder-decoder
    torch.save(state, path)
    assert isinstance(load_checkpoint(path)[0], Transformer)
    torch.save(seal({**state, "kind": "xyz"}), path)  # a kind registered where it was saved
    with pytest.raises(ValueError, match="kind 'xyz', which this version of tfcourse does not know"):
        load_checkpoint(path)


def test_progress_ends_with_one_line_of_results(task, capsys):
    train(tiny_model(task), task, TrainConfig(**QUICK), progress=True)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("copy: 6 steps in ")
    assert "training loss" in lines[0] and "validation exact match" in lines[0]


@pytest.mark.parametrize(("idle_ticks", "idle_cores"), [(0, 1), (100, 1), (260, 3), (400, 4)])
def test_free_cpu_cores_counts_the_idle_ones(tmp_path, monkeypatch, idle_ticks, idle_cores):
    stat = tmp_path / "stat"
    cores = "".join(f"cpu{i} 0 0 0 0 0 0 0 0 0 0\n" for i in range(4))  # 4 CPUs
    stat.write_text("cpu  0 0 0 0 0 0 0 0 0 0\n" + cores)
    busy = 400 - idle_ticks  # 100 ticks per CPU in the interval

    def interval(seconds):
        stat.write_text(f"cpu  {busy} 0 0 {idle_ticks} 0 0 0 0 0 0\n" + cores)

    monkeypatch.setattr(device, "_PROC_STAT", str(stat))
    monkeypatch.setattr(device.time, "sleep", interval)
    ours = len(os.sched_getaffinity(0))
    assert device.free_cpu_cores() == min(ours, idle_cores)
