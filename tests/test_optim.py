"""Chapter 13's training recipe against the real thing: AdamW against torch.optim.AdamW, the
cosine schedule with its floor against the formula, transformers' and torch's schedulers,
clipping against torch.nn.utils.clip_grad_norm_, and the parameter groups."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR
from transformers import get_cosine_with_min_lr_schedule_with_warmup

from tfcourse.data import copy_task
from tfcourse.model import Transformer, TransformerConfig
from tfcourse.modern import LlamaConfig, LlamaLM
from tfcourse.optim import AdamW, clip_grad_norm, param_groups
from tfcourse.schedules import cosine_lr, cosine_scheduler
from tfcourse.training import Interrupted, TrainConfig, train
from tfcourse.variants import DecoderLM, DecoderLMConfig

VOCAB = 40


def llama(seed=0, **overrides):
    torch.manual_seed(seed)
    return LlamaLM(LlamaConfig.tiny(VOCAB, **overrides))


def lm_loss(model, tokens):
    logits = model(tokens[:, :-1])  # (batch, seq - 1, vocab)
    return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())


# ------------------------------------------------------------------------------ AdamW


@pytest.mark.parametrize("tie_output", [True, False])
def test_adamw_equals_torchs_after_100_steps_of_a_real_model(tie_output):
    """Three groups (decayed matrices at two learning rates, the rest without decay), a
    cosine schedule with a floor: parameters and state agree with torch.optim.AdamW."""
    ours, theirs = llama(tie_output=tie_output), llama(tie_output=tie_output)

    def groups(model):
        decay, rest = param_groups(model, 0.1)
        half = len(decay["params"]) // 2
        return [dict(params=decay["params"][:half], weight_decay=0.1),
                dict(params=decay["params"][half:], weight_decay=0.1, lr=3e-3), rest]

    settings = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    optimizers = [AdamW(groups(ours), **settings), torch.optim.AdamW(groups(theirs), **settings)]
    schedulers = [cosine_scheduler(o, 10, 100, 0.1) for o in optimizers]
    generator = torch.Generator().manual_seed(0)
    for _ in range(100):
        tokens = torch.randint(VOCAB, (4, 17), generator=generator)
        for model, optimizer, scheduler in zip((ours, theirs), optimizers, schedulers):
            optimizer.zero_grad()
            lm_loss(model, tokens).backward()
            optimizer.step()
            scheduler.step()
    start = llama(tie_output=tie_output)
    for (name, p), q, p0 in zip(ours.named_parameters(), theirs.parameters(), start.parameters()):
        assert not torch.equal(p, p0), name  # every parameter moved
        torch.testing.assert_close(p, q, msg=name)
        mine, torchs = optimizers[0].state[p], optimizers[1].state[q]
        assert mine["step"] == int(torchs["step"]) == 100
        torch.testing.assert_close(mine["exp_avg"], torchs["exp_avg"])
        torch.testing.assert_close(mine["exp_avg_sq"], torchs["exp_avg_sq"])


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_adamw_equals_torchs_in_other_dtypes(dtype):
    generator = torch.Generator().manual_seed(1)
    start = torch.randn(5, 3, generator=generator).to(dtype)
    ours, theirs = (torch.nn.Parameter(start.clone()) for _ in range(2))
    optimizers = [AdamW([ours], lr=0.1, weight_decay=0.5),
                  torch.optim.AdamW([theirs], lr=0.1, weight_decay=0.5)]
    for _ in range(20):
        grad = torch.randn(5, 3, generator=generator).to(dtype)
        for p, optimizer in zip((ours, theirs), optimizers):
            p.grad = grad.clone()
            optimizer.step()
    assert ours.dtype == dtype and optimizers[0].state[ours]["exp_avg"].dtype == dtype
    torch.testing.assert_close(ours, theirs)


def test_adamw_skips_parameters_without_a_gradient_and_decay_is_decoupled():
    frozen, moved = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    optimizer = AdamW([frozen, moved], lr=0.1, weight_decay=0.5)
    moved.grad = torch.zeros(3)  # no gradient signal: only the decay moves it
    optimizer.step()
    assert torch.equal(frozen, torch.ones(3)) and frozen not in optimizer.state
    torch.testing.assert_close(moved, torch.full((3,), 1 - 0.1 * 0.5))  # p (1 - lr wd)
    # Adam's L2 (torch.optim.Adam(weight_decay=)) moves it by about lr instead: the decay
    # went through m / sqrt(v), where it is normalized away.
    l2 = torch.nn.Parameter(torch.ones(3))
    adam = torch.optim.Adam([l2], lr=0.1, weight_decay=0.5)
    l2.grad = torch.zeros(3)
    adam.step()
    torch.testing.assert_close(l2, torch.full((3,), 0.9), atol=1e-6, rtol=0)


@pytest.mark.parametrize(("settings", "message"), [
    (dict(lr=-1.0), "lr must be"), (dict(betas=(0.9, 1.0)), "betas must be"),
    (dict(eps=-1e-8), "eps must be"), (dict(weight_decay=-0.1), "weight_decay must be"),
])
def test_adamw_names_a_bad_setting(settings, message):
    with pytest.raises(ValueError, match=message):
        AdamW([torch.nn.Parameter(torch.ones(1))], **settings)


# ------------------------------------------------------------------------------ schedule


def test_cosine_lr_is_the_formula_step_by_step():
    warmup, total, floor = 5, 30, 0.1
    for step in range(1, 40):
        if step <= warmup:
            want = step / warmup
        else:
            progress = min(1.0, (step - warmup) / (total - warmup))
            want = floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
        assert cosine_lr(step, warmup, total, floor) == pytest.approx(want, rel=1e-15)
    assert cosine_lr(1, warmup, total, floor) == 1 / warmup  # the first step is not 0
    assert cosine_lr(warmup, warmup, total, floor) == 1.0  # the peak
    assert cosine_lr(total, warmup, total, floor) == pytest.approx(floor)  # the floor ...
    assert cosine_lr(10 * total, warmup, total, floor) == cosine_lr(total, warmup, total, floor)
    assert cosine_lr(1, 0, total, floor) == pytest.approx(1.0 - 0.9 * (1 - math.cos(
        math.pi / total)) / 2)  # no warm-up: step 1 is already one step down

    def chapter_07s(step):  # cosine_lr before its floor, as it trained every recipe
        if step <= warmup:
            return step / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    assert all(cosine_lr(step, warmup, total) == chapter_07s(step) for step in range(1, 40))


@pytest.mark.parametrize(("warmup", "total", "floor"), [(10, 100, 0.1), (1, 20, 0.0),
                                                        (0, 20, 0.5), (20, 20, 0.1)])
def test_cosine_scheduler_equals_transformers_one_step_later(warmup, total, floor):
    """transformers counts from 0 and its step 0 has lr 0 (an update that does nothing);
    cosine_scheduler's k-th update (k from 0) has cosine_lr(k + 1). So ours at k equals
    transformers' at k + 1, for every update up to total_steps (after it transformers' goes
    back up: its cosine is not clamped)."""
    ours = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    theirs = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    schedulers = (cosine_scheduler(ours, warmup, total, floor),
                  get_cosine_with_min_lr_schedule_with_warmup(theirs, warmup, total,
                                                              min_lr_rate=floor))
    assert theirs.param_groups[0]["lr"] == (0.0 if warmup else 2.0)  # transformers' step 0
    theirs.step()
    schedulers[1].step()
    for k in range(total):
        assert ours.param_groups[0]["lr"] == pytest.approx(theirs.param_groups[0]["lr"],
                                                           rel=1e-12, abs=1e-15)
        assert ours.param_groups[0]["lr"] == pytest.approx(2.0 * cosine_lr(k + 1, warmup,
                                                                           total, floor))
        for optimizer, scheduler in zip((ours, theirs), schedulers):
            optimizer.step()  # no gradient: nothing moves, but torch wants this order
            scheduler.step()
    for _ in range(3):  # past the end: the floor
        assert ours.param_groups[0]["lr"] == pytest.approx(2.0 * floor, abs=1e-15)
        ours.step()
        schedulers[0].step()


def test_cosine_scheduler_equals_torchs_sequential_linear_then_cosine():
    """torch: LinearLR from 1/warmup to 1 over updates 0..warmup-1 (total_iters=warmup-1),
    then CosineAnnealingLR from the peak at update warmup-1 down to floor*lr at update
    total-1 (T_max = total - warmup). Both count from 0, as cosine_scheduler does."""
    warmup, total, floor, peak = 8, 50, 0.1, 3e-3
    ours = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    theirs = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    mine = cosine_scheduler(ours, warmup, total, floor)
    torchs = SequentialLR(theirs, [
        LinearLR(theirs, start_factor=1 / warmup, total_iters=warmup - 1),
        CosineAnnealingLR(theirs, T_max=total - warmup, eta_min=floor * peak)],
        milestones=[warmup - 1])
    for _ in range(total):
        assert ours.param_groups[0]["lr"] == pytest.approx(theirs.param_groups[0]["lr"],
                                                           rel=1e-9)
        for optimizer, scheduler in ((ours, mine), (theirs, torchs)):
            optimizer.step()
            scheduler.step()


# ------------------------------------------------------------------------------ clipping


def grads_of(seed, scale, shapes=((4, 3), (3,), (2, 2, 2)), dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.zeros(s, dtype=dtype)) for s in shapes]
    for p in params:
        p.grad = (scale * torch.randn(p.shape, generator=generator)).to(dtype)
    return params


@pytest.mark.parametrize("scale", [0.0, 0.01, 1.0, 100.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_clip_grad_norm_equals_torchs(scale, dtype):
    ours, theirs = grads_of(0, scale, dtype=dtype), grads_of(0, scale, dtype=dtype)
    theirs[1].grad = ours[1].grad = None  # a parameter without a gradient is skipped
    norm = clip_grad_norm(ours, 1.0)
    want = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert torch.equal(norm, want) and norm.dtype == want.dtype
    for p, q in zip(ours, theirs):
        assert (p.grad is None and q.grad is None) or torch.equal(p.grad, q.grad)


def test_clip_grad_norm_scales_all_gradients_by_one_factor():
    params = grads_of(1, 10.0)
    before = [p.grad.clone() for p in params]
    norm = clip_grad_norm(params, 2.0)
    assert norm == pytest.approx(torch.cat([g.flatten() for g in before]).norm().item())
    after = torch.cat([p.grad.flatten() for p in params])
    assert after.norm() == pytest.approx(2.0, rel=1e-5)  # the global norm, not each one's
    ratios = [(p.grad / g).flatten() for p, g in zip(params, before)]
    torch.testing.assert_close(torch.cat(ratios), torch.full_like(after, 2.0 / norm.item()))
    assert torch.equal(torch.cat([p.flatten() for p in params]), torch.zeros_like(after))


def test_clip_grad_norm_at_the_threshold_and_on_a_tensor():
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor([3.0, 4.0])  # norm exactly 5
    q = torch.nn.Parameter(torch.zeros(2))
    q.grad = p.grad.clone()
    assert clip_grad_norm(p, 5.0) == 5.0  # a lone tensor, as torch accepts
    torch.nn.utils.clip_grad_norm_(q, 5.0)
    assert torch.equal(p.grad, q.grad)  # torch's 1e-6 in the denominator: 5 / 5.000001
    assert clip_grad_norm([torch.nn.Parameter(torch.ones(2))], 1.0) == 0.0  # no gradients


# ------------------------------------------------------------------------------ groups


def names(model, group):
    ids = {id(p) for p in group["params"]}
    return {n for n, p in model.named_parameters() if id(p) in ids}


@pytest.mark.parametrize("tie_output", [True, False])
def test_param_groups_decay_the_linear_maps_only(tie_output):
    model = llama(tie_output=tie_output)
    decay, rest = param_groups(model, 0.1)
    assert (decay["weight_decay"], rest["weight_decay"]) == (0.1, 0.0)
    linear = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    if tie_output:  # the tied output is the embedding table: not decayed
        linear.discard("generator.weight")
    assert names(model, decay) == linear and "layers.0.self_attn.w_q.weight" in linear
    assert "embed.embedding.weight" in names(model, rest)
    assert {n for n in names(model, rest) if "norm" in n} == {
        n for n, _ in model.named_parameters() if "norm" in n}
    assert len(decay["params"]) + len(rest["params"]) == len(list(model.parameters()))
    assert not {id(p) for p in decay["params"]} & {id(p) for p in rest["params"]}


def test_param_groups_leave_biases_and_layer_norms_of_chapter_09s_model():
    torch.manual_seed(0)
    model = DecoderLM(DecoderLMConfig.tiny(VOCAB))
    decay, rest = param_groups(model, 0.1)
    assert decay["params"] and all(p.dim() == 2 for p in decay["params"])
    assert any(n.endswith(".bias") for n in names(model, rest))
    assert not any(n.endswith(".bias") for n in names(model, decay))
    assert {n for n in names(model, rest) if "positional" in n}  # learned positions: a table


# ------------------------------------------------------------------------------ training


@pytest.fixture(scope="module")
def task():
    return copy_task(seed=0, n_train=500, n_val=16, n_test=16)


ADAMW = dict(steps=8, batch_size=8, warmup=2, lr=3e-3, eval_every=0, eval_size=16,
             schedule="cosine", optimizer="adamw", beta2=0.95, weight_decay=0.1,
             min_lr_ratio=0.1)


def test_training_with_adamw_resumes_exactly(task, tmp_path, monkeypatch):
    def model():
        torch.manual_seed(0)
        return Transformer(TransformerConfig.tiny(len(task.vocab)))

    straight = model()
    history = train(straight, task, TrainConfig(**ADAMW), progress=False)
    assert history["lr"][1] == pytest.approx(3e-3) and history["lr"][-1] == pytest.approx(
        3e-3 * cosine_lr(8, 2, 8, 0.1))
    path, calls, real = tmp_path / "run.pt", [], task.make_batch

    def interrupted(*args):  # Ctrl-C in step 5 (the first call measures memory)
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(task, "make_batch", interrupted)
    with pytest.raises(Interrupted):
        train(model(), task, TrainConfig(**ADAMW), checkpoint=path, progress=False)
    monkeypatch.undo()
    resumed = model()
    train(resumed, task, TrainConfig(**ADAMW), checkpoint=path, resume=True, progress=False)
    for p, q in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(p, q)


@pytest.mark.parametrize(("overrides", "message"), [
    (dict(weight_decay=0.1), "weight_decay=0.1 needs optimizer='adamw'"),
    (dict(optimizer="adamw", weight_decay=-0.1), "weight_decay must be a number in"),
    (dict(optimizer="adamw", weight_decay=2.0), "weight_decay must be a number in"),
    (dict(optimizer="adamw", schedule="cosine", lr=20.0, weight_decay=0.1),
     "lr \\* weight_decay = 2 >= 1"),
    (dict(optimizer="adamw", steps=100, warmup=200), "warmup=200 is longer than the run"),
    (dict(min_lr_ratio=0.1), "schedule='noam' has none"),
    (dict(schedule="cosine", min_lr_ratio=1.5), "min_lr_ratio must be a number in"),
    (dict(beta2=1.0), "beta2 must be a number in"),
    (dict(optimizer="sgd"), "optimizer must be one of"),
    (dict(clip=-1.0), "clip must be a number >= 0"),
])
def test_train_config_names_a_bad_recipe(overrides, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**overrides)


@pytest.mark.parametrize("amp_cpu", [False, True])
def test_amp_cpu_trains_under_bfloat16_autocast(task, monkeypatch, amp_cpu):
    import tfcourse.training as training
    seen, real = [], training.train_step
    monkeypatch.setattr(training, "train_step", lambda *args: seen.append(args[-1]) or real(*args))
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.tiny(len(task.vocab)))
    config = TrainConfig(**{**ADAMW, "steps": 2, "amp_cpu": amp_cpu})
    history = train(model, task, config, device="cpu", progress=False)
    assert seen == [torch.bfloat16 if amp_cpu else None] * 2
    assert all(math.isfinite(loss) for loss in history["loss"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--optimizer", "adamw", "--steps", "30", "--warmup", "50"],
     "warmup=50 is longer than the run (steps=30)"),
    (["--weight-decay", "0.1"], "weight_decay=0.1 needs optimizer='adamw'"),
    (["--optimizer", "adamw", "--weight-decay", "-1"], "--weight-decay: must be a number in [0, 1]"),
    (["--optimizer", "adamw", "--weight-decay", "nan"], "--weight-decay: must be a number in [0, 1]"),
    (["--clip", "-1"], "--clip: must be a number >= 0"),
    (["--min-lr-ratio", "0.1", "--schedule", "noam"], "schedule='noam' has none"),
])
def test_tfcourse_train_refuses_a_recipe_that_makes_no_sense_in_one_line(argv, message, tmp_path,
                                                                         capsys):
    from tfcourse.cli import main
    try:
        code = main(["train", "--task", "copy", "--out", str(tmp_path / "c.pt"), *argv])
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err.strip()
    assert code != 0 and "\n" not in err and message in err, err
    assert not (tmp_path / "c.pt").exists()


def test_bfloat16_autocast_on_the_cpu_trains_as_float32_does():
    """The loss under bfloat16 autocast follows float32's to bfloat16's precision (the
    speed is benchmarks/precision.py's): 20 steps of the tiny Llama LM, the same batches."""
    import tfcourse.training as training

    class Batch:  # what train_step needs: the model's inputs and targets
        pad_id = None

        def __init__(self, tokens):
            self.tokens = tokens

        def loss_inputs(self, model):
            return model(self.tokens[:, :-1]), self.tokens[:, 1:]

    losses = {}
    for dtype in (None, torch.bfloat16):
        model = llama(d_model=128, d_ff=352)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        g = torch.Generator().manual_seed(0)
        losses[dtype] = [training.train_step(model, [Batch(torch.randint(VOCAB, (8, 33), generator=g))],
                                             optimizer, 0.0, 1.0, dtype) for _ in range(20)]
    assert losses[None][-1] < losses[None][0] - 0.3  # it learns (the batches' token frequencies)
    assert losses[torch.bfloat16] == pytest.approx(losses[None], abs=0.05)
    assert losses[torch.bfloat16] != losses[None]  # and it did run in bfloat16
