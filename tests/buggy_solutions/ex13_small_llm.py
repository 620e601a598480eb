"""Wrong ways to write exercise 13 (adamw_step, cosine_lr, clip_grad_norm, param_groups,
TextStream), and the diagnosis each must get; then RIGHT: correct solutions in other styles than the
reference's, which every check must pass (tests/test_right_solutions.py)."""

import codecs
import math

import torch
from torch import nn

from tfcourse.tokens import TextStream

from . import wrong

# ----------------------------------------------------------------------------- adamw_step


def _adam(param, grad, m, v, step, lr, betas, eps):
    """Adam's moments and step, written plainly: (the step to subtract, new m, new v)."""
    beta1, beta2 = betas
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    m_hat = m / (1 - beta1**step)
    v_hat = v / (1 - beta2**step)
    return lr * m_hat / (torch.sqrt(v_hat) + eps), m, v


@wrong("adamw_step.l2_decay")
def adamw_l2(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
             weight_decay=1e-2):
    grad = grad + weight_decay * param  # torch.optim.Adam(weight_decay=...)
    update, m, v = _adam(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps)
    return param - update, m, v


@wrong("adamw_step.decay_scale")
def adamw_decay_without_lr(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                           eps=1e-8, weight_decay=1e-2):
    update, m, v = _adam(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps)
    return param - weight_decay * param - update, m, v


@wrong("adamw_step.decay_scale")
def adamw_decay_lr_twice(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                         eps=1e-8, weight_decay=1e-2):
    decay = lr * weight_decay
    param = param * (1 - lr * decay)
    update, m, v = _adam(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps)
    return param - update, m, v


@wrong("adamw_step.decay_scale")
def adamw_decay_in_step_size(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                             eps=1e-8, weight_decay=1e-2):
    beta1, beta2 = betas
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad**2
    step_size = lr / (1 - beta1**step)
    denom = (v / (1 - beta2**step)).sqrt() + eps
    return param - step_size * (m / denom + weight_decay * param), m, v


@wrong("adamw_step.decay_after_update")
def adamw_decay_after(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                      weight_decay=1e-2):
    update, m, v = _adam(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps)
    param = param - update
    return param - lr * weight_decay * param, m, v


@wrong("adamw_step.no_bias_correction")
def adamw_uncorrected(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                      weight_decay=1e-2):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    return param - lr * m / (v.sqrt() + eps), m, v


@wrong("adamw_step.no_bias_correction")
def adamw_only_m_corrected(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                           eps=1e-8, weight_decay=1e-2):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    return param - lr * (m / (1 - beta1**step)) / (v.sqrt() + eps), m, v


@wrong("adamw_step.correction_step")
def adamw_counted_from_zero(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=1e-2):
    t = step - 1  # "steps count from 0"
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    m_hat, v_hat = m / (1 - beta1**t), v / (1 - beta2**t)
    return param - lr * m_hat / (v_hat.sqrt() + eps), m, v


@wrong("adamw_step.correction_step")
def adamw_step_size_from_zero(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                              eps=1e-8, weight_decay=1e-2):
    beta1, beta2 = betas
    step_size = lr / (1 - beta1 ** (step - 1))  # raises at step 1
    param = param * (1 - lr * weight_decay)
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    return param - step_size * m / ((v / (1 - beta2 ** (step - 1))).sqrt() + eps), m, v


@wrong("adamw_step.eps_inside")
def adamw_eps_inside(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                     weight_decay=1e-2):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    m_hat, v_hat = m / (1 - beta1**step), v / (1 - beta2**step)
    return param - lr * m_hat / torch.sqrt(v_hat + eps), m, v


@wrong("adamw_step.eps_uncorrected")
def adamw_keras_form(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                     weight_decay=1e-2):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    lr_t = lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)
    return param - lr_t * m / (v.sqrt() + eps), m, v


@wrong("adamw_step.no_sqrt")
def adamw_no_root(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                  weight_decay=1e-2):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    return param - lr * (m / (1 - beta1**step)) / (v / (1 - beta2**step) + eps), m, v


@wrong("adamw_step.betas_swapped")
def adamw_betas_swapped(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                        weight_decay=1e-2):
    beta2, beta1 = betas
    param = param * (1 - lr * weight_decay)
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    return param - lr * (m / (1 - beta1**step)) / ((v / (1 - beta2**step)).sqrt() + eps), m, v


@wrong("adamw_step.moment_weights")
def adamw_plain_sums(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                     weight_decay=1e-2):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = beta1 * exp_avg + grad
    v = beta2 * exp_avg_sq + grad * grad
    return param - lr * (m / (1 - beta1**step)) / ((v / (1 - beta2**step)).sqrt() + eps), m, v


@wrong("adamw_step.moment_weights")
def adamw_weights_swapped(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                          eps=1e-8, weight_decay=1e-2):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = torch.lerp(exp_avg, grad, beta1)  # lerp's weight is the NEW value's
    v = torch.lerp(exp_avg_sq, grad * grad, beta2)
    return param - lr * (m / (1 - beta1**step)) / ((v / (1 - beta2**step)).sqrt() + eps), m, v


@wrong("adamw_step.grad_not_squared")
def adamw_abs(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
              weight_decay=1e-2):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad.abs()
    return param - lr * (m / (1 - beta1**step)) / ((v / (1 - beta2**step)).sqrt() + eps), m, v


@wrong("adamw_step.old_moments")
def adamw_old_moments(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                      weight_decay=1e-2):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m_hat, v_hat = exp_avg / (1 - beta1**step), exp_avg_sq / (1 - beta2**step)
    param = param - lr * m_hat / (v_hat.sqrt() + eps)
    return param, beta1 * exp_avg + (1 - beta1) * grad, beta2 * exp_avg_sq + (1 - beta2) * grad**2


@wrong("adamw_step.no_momentum")
def adamw_rmsprop(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                  weight_decay=1e-2):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    return param - lr * grad / ((v / (1 - beta2**step)).sqrt() + eps), m, v


@wrong("adamw_step.ascent")
def adamw_uphill(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=1e-2):
    update, m, v = _adam(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps)
    return param * (1 - lr * weight_decay) + update, m, v


@wrong("adamw_step.in_place")
def adamw_in_place(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                   weight_decay=1e-2):
    beta1, beta2 = betas
    param.mul_(1 - lr * weight_decay)  # as an optimizer does, but these are the caller's
    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (exp_avg_sq / (1 - beta2**step)).sqrt() + eps
    param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**step))
    return param, exp_avg, exp_avg_sq


def _moments(grad, m, v, betas):
    beta1, beta2 = betas
    return beta1 * m + (1 - beta1) * grad, beta2 * v + (1 - beta2) * grad * grad


@wrong("adamw_step.float32_out")
def adamw_float32_results(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                          eps=1e-8, weight_decay=1e-2):
    update, m, v = _adam(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps)
    new = torch.zeros(param.shape)  # a float32 buffer
    new.copy_(param * (1 - lr * weight_decay) - update)
    return new, m.float(), v.float()


@wrong("adamw_step.eps_after_division")
def adamw_eps_after_division(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                             eps=1e-8, weight_decay=1e-2):
    m, v = _moments(grad, exp_avg, exp_avg_sq, betas)
    m_hat, v_hat = m / (1 - betas[0] ** step), v / (1 - betas[1] ** step)
    return param * (1 - lr * weight_decay) - (lr * m_hat / v_hat.sqrt() + eps), m, v


@wrong("adamw_step.amsgrad")
def adamw_amsgrad(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                  weight_decay=1e-2):
    m, v = _moments(grad, exp_avg, exp_avg_sq, betas)
    v = torch.maximum(v, exp_avg_sq)
    m_hat, v_hat = m / (1 - betas[0] ** step), v / (1 - betas[1] ** step)
    return param * (1 - lr * weight_decay) - lr * m_hat / (v_hat.sqrt() + eps), m, v


@wrong("adamw_step.state_corrected")
def adamw_corrected_state(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                          eps=1e-8, weight_decay=1e-2):
    m, v = _moments(grad, exp_avg, exp_avg_sq, betas)
    m, v = m / (1 - betas[0] ** step), v / (1 - betas[1] ** step)
    return param * (1 - lr * weight_decay) - lr * m / (v.sqrt() + eps), m, v


@wrong("adamw_step.moments_swapped")
def adamw_second_moment_first(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                              eps=1e-8, weight_decay=1e-2):
    update, m, v = _adam(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps)
    return param * (1 - lr * weight_decay) - update, v, m


@wrong("adamw_step.l2_and_decoupled")
def adamw_l2_and_decoupled(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                           eps=1e-8, weight_decay=1e-2):
    update, m, v = _adam(param, grad + weight_decay * param, exp_avg, exp_avg_sq, step, lr, betas,
                         eps)
    return param * (1 - lr * weight_decay) - update, m, v


@wrong("adamw_step.decay_constant")
def adamw_decay_forgets_param(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                              eps=1e-8, weight_decay=1e-2):
    update, m, v = _adam(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps)
    return param - lr * weight_decay - update, m, v  # the decay's "* param" forgotten


@wrong("adamw_step.correction_misplaced")
def adamw_v_corrected_after_root(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                                 eps=1e-8, weight_decay=1e-2):
    beta1, beta2 = betas
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad**2
    denom = v.sqrt() / (1 - beta2**step) + eps
    return param * (1 - lr * weight_decay) - lr * m / (1 - beta1**step) / denom, m, v


@wrong("adamw_step.moment_betas")
def adamw_second_moment_with_beta1(param, grad, exp_avg, exp_avg_sq, step, lr,
                                   betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    beta1, beta2 = betas
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta1 * exp_avg_sq + (1 - beta1) * grad**2  # the line above, copied
    m_hat, v_hat = m / (1 - beta1**step), v / (1 - beta2**step)
    return param * (1 - lr * weight_decay) - lr * m_hat / (v_hat.sqrt() + eps), m, v


@wrong("adamw_step.state_changes")
def adamw_counting_its_own_steps(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                                 eps=1e-8, weight_decay=1e-2):
    global _ADAMW_CALLS
    _ADAMW_CALLS = globals().get("_ADAMW_CALLS", 0) + 1  # "one optimizer": its own step count
    update, m, v = _adam(param, grad, exp_avg, exp_avg_sq, _ADAMW_CALLS, lr, betas, eps)
    return param * (1 - lr * weight_decay) - update, m, v


@wrong("adamw_step.l2_and_decoupled")
def adamw_l2_of_the_decayed_weight(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                                   eps=1e-8, weight_decay=1e-2):
    param = param * (1 - lr * weight_decay)
    update, m, v = _adam(param, grad + weight_decay * param, exp_avg, exp_avg_sq, step, lr, betas,
                         eps)
    return param - update, m, v


@wrong("adamw_step.state_not_updated")
def adamw_returns_the_old_state(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                                eps=1e-8, weight_decay=1e-2):
    update, m, v = _adam(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps)
    return param * (1 - lr * weight_decay) - update, exp_avg, exp_avg_sq  # m and v left behind


@wrong("adamw_step.decay_of_other_tensor")
def adamw_decay_on_the_gradient(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                                eps=1e-8, weight_decay=1e-2):
    update, m, v = _adam(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps)
    return param - lr * weight_decay * grad - update, m, v


@wrong("adamw_step.grad_not_squared")
def adamw_second_moment_of_grad(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                                eps=1e-8, weight_decay=1e-2):
    beta1, beta2 = betas
    m = exp_avg.mul(beta1).add(grad, alpha=1 - beta1)
    v = exp_avg_sq.mul(beta2).add(grad, alpha=1 - beta2)  # the square lost
    step_size = lr / (1 - beta1**step)
    denom = (v / (1 - beta2**step)).sqrt() + eps
    return param * (1 - lr * weight_decay) - step_size * m / denom, m, v


@wrong("adamw_step.moment_weights")
def adamw_lerp_by_beta(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                       weight_decay=1e-2):
    beta1, beta2 = betas
    m = torch.lerp(exp_avg, grad, beta1)  # lerp's weight is the new value's
    v = beta2 * exp_avg_sq + (1 - beta2) * grad**2
    denom = (v / (1 - beta2**step)).sqrt() + eps
    return param * (1 - lr * weight_decay) - lr * m / (1 - beta1**step) / denom, m, v


@wrong("adamw_step.correction_times_step")
def adamw_corrections_as_products(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                                  eps=1e-8, weight_decay=1e-2):
    beta1, beta2 = betas
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    m_hat, v_hat = m / (1 - beta1 * step), v / (1 - beta2 * step)
    return param * (1 - lr * weight_decay) - lr * m_hat / (v_hat.sqrt() + eps), m, v


@wrong("adamw_step.xor_for_power")
def adamw_caret_square(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                       weight_decay=1e-2):
    beta1, beta2 = betas
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad ^ 2
    m_hat, v_hat = m / (1 - beta1**step), v / (1 - beta2**step)
    return param * (1 - lr * weight_decay) - lr * m_hat / (v_hat.sqrt() + eps), m, v


@wrong("adamw_step.correction_parenthesized")
def adamw_corrections_parenthesized(param, grad, exp_avg, exp_avg_sq, step, lr,
                                    betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    beta1, beta2 = betas
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    m_hat, v_hat = m / (1 - beta1) ** step, v / (1 - beta2) ** step
    return param * (1 - lr * weight_decay) - lr * m_hat / (v_hat.sqrt() + eps), m, v


@wrong("adamw_step.coefficient_typo")
def adamw_v_new_term_of_beta1(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999),
                              eps=1e-8, weight_decay=1e-2):
    beta1, beta2 = betas
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta1) * grad * grad
    m_hat, v_hat = m / (1 - beta1**step), v / (1 - beta2**step)
    return param * (1 - lr * weight_decay) - lr * m_hat / (v_hat.sqrt() + eps), m, v


@wrong("adamw_step.coefficient_typo")
def adamw_m_correction_of_one_minus_beta(param, grad, exp_avg, exp_avg_sq, step, lr,
                                         betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    beta1, beta2 = betas
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad * grad
    m_hat, v_hat = m / (1 - (1 - beta1) ** step), v / (1 - beta2**step)
    return param * (1 - lr * weight_decay) - lr * m_hat / (v_hat.sqrt() + eps), m, v


# ------------------------------------------------------------------------------ cosine_lr


def _decay(step, warmup, total_steps, min_ratio):
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@wrong("cosine_lr.return_kind")
def cosine_as_a_tensor(step, warmup, total_steps, min_ratio=0.0):
    step = torch.tensor(float(step))
    if step <= warmup:
        return step / warmup
    progress = torch.clamp((step - warmup) / max(1, total_steps - warmup), max=1.0)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + torch.cos(math.pi * progress))


@wrong("cosine_lr.warmup_off_by_one")
def cosine_from_zero(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return (step - 1) / warmup  # transformers counts from 0
    return _decay(step, warmup, total_steps, min_ratio)


@wrong("cosine_lr.warmup_off_by_one")
def cosine_warmup_plus_one(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return step / (warmup + 1)
    return _decay(step, warmup, total_steps, min_ratio)


@wrong("cosine_lr.warmup_off_by_one")
def cosine_zero_based_warmup(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return (step + 1) / (warmup + 1)  # a 0-based loop's formula on 1-based steps
    return _decay(step, warmup, total_steps, min_ratio)


@wrong("cosine_lr.decay_off_by_one")
def cosine_decay_from_the_next_step(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return step / warmup
    done = step - (warmup + 1)
    c = math.cos(math.pi * min(1.0, done / max(1, total_steps - warmup)))
    return min_ratio + (1 - min_ratio) * (1 + c) / 2


@wrong("cosine_lr.floor_ignored")
def cosine_to_zero(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return step / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return 0.5 * (1 + math.cos(math.pi * progress))


@wrong("cosine_lr.floor_misplaced")
def cosine_floor_added(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return step / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return min_ratio + 0.5 * (1 + math.cos(math.pi * progress))


@wrong("cosine_lr.floor_misplaced")
def cosine_floor_clamp(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return step / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return max(min_ratio, 0.5 * (1 + math.cos(math.pi * progress)))


@wrong("cosine_lr.not_clamped")
def cosine_unclamped(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return step / warmup
    progress = (step - warmup) / max(1, total_steps - warmup)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@wrong("cosine_lr.not_clamped")
def cosine_zero_after(step, warmup, total_steps, min_ratio=0.0):
    if step > total_steps:
        return 0.0
    if step <= warmup:
        return step / warmup
    return _decay(step, warmup, total_steps, min_ratio)


@wrong("cosine_lr.cosine_span")
def cosine_over_the_run(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return step / warmup
    progress = min(1.0, step / total_steps)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@wrong("cosine_lr.full_cosine")
def cosine_full_period(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return step / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(2 * math.pi * progress))


@wrong("cosine_lr.no_warmup")
def cosine_flat_warmup(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return 1.0
    return _decay(step, warmup, total_steps, min_ratio)


@wrong("cosine_lr.zero_division")
def cosine_min_of_both(step, warmup, total_steps, min_ratio=0.0):
    warm = step / warmup
    if warm <= 1:
        return warm
    progress = min(1, (step - warmup) / (total_steps - warmup))
    return min_ratio + (1 - min_ratio) * (1 + math.cos(math.pi * progress)) / 2


@wrong("cosine_lr.zero_division")
def cosine_unguarded_decay(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return step / warmup
    progress = min(1.0, (step - warmup) / (total_steps - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@wrong("cosine_lr.warmup_from_floor")
def cosine_warmup_from_the_floor(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:  # timm's warmup_lr_init set to the floor
        return min_ratio + (1 - min_ratio) * step / warmup
    return _decay(step, warmup, total_steps, min_ratio)


@wrong("cosine_lr.decay_shape")
def cosine_linear_decay(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return step / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return min_ratio + (1 - min_ratio) * (1 - progress)


@wrong("cosine_lr.floor_misplaced")
def cosine_floor_scaled_only(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return step / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@wrong("cosine_lr.integer_division")
def cosine_floor_divided_warmup(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return float(step // warmup)
    return _decay(step, warmup, total_steps, min_ratio)

@wrong("cosine_lr.warmup_floored")
def cosine_floor_everywhere(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return max(min_ratio, step / warmup)  # "never below the floor"
    return _decay(step, warmup, total_steps, min_ratio)


@wrong("cosine_lr.endless_warmup")
def cosine_no_decay_stays_warm(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup or warmup == total_steps:  # "no decay: only the warm-up"
        return step / warmup
    return _decay(step, warmup, total_steps, min_ratio)


@wrong("cosine_lr.decay_off_by_one")
def cosine_counts_both_ends(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return step / warmup
    progress = min(1.0, (step - warmup) / (total_steps - warmup + 1))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@wrong("cosine_lr.warmup_curve")
def cosine_quadratic_warmup(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return (step / warmup) ** 2
    return _decay(step, warmup, total_steps, min_ratio)


@wrong("cosine_lr.floor_misplaced")
def cosine_floor_and_range_swapped(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return step / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return (1 - min_ratio) + min_ratio * 0.5 * (1 + math.cos(math.pi * progress))


@wrong("cosine_lr.decay_shape")
def cosine_without_the_half(step, warmup, total_steps, min_ratio=0.0):
    if step <= warmup:
        return step / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return min_ratio + (1 - min_ratio) * min(1.0, 1 + math.cos(math.pi * progress))


# ------------------------------------------------------------------------- clip_grad_norm


def _norm(grads):
    return torch.sqrt(sum((g**2).sum() for g in grads))


@wrong("clip_grad_norm.per_tensor")
def clip_each(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = _norm(grads)
    for g in grads:
        g.mul_(min(1.0, max_norm / (g.norm().item() + 1e-6)))
    return total


@wrong("clip_grad_norm.weights_clipped")
def clip_weights(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = _norm(grads)
    with torch.no_grad():
        for p in parameters:
            p.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
    return total


@wrong("clip_grad_norm.weights_clipped")
def clip_by_the_weights_norm(parameters, max_norm):
    params = [p for p in parameters if p.grad is not None]
    total = torch.sqrt(sum((p.detach() ** 2).sum() for p in params))
    for p in params:
        p.grad.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


@wrong("clip_grad_norm.coef_inverted")
def clip_inverted(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = _norm(grads)
    if total > max_norm:
        for g in grads:
            g.mul_(total / max_norm)
    return total


@wrong("clip_grad_norm.scaled_below")
def clip_always(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = _norm(grads)
    for g in grads:
        g.mul_(max_norm / (total + 1e-6))
    return total


@wrong("clip_grad_norm.norm_after")
def clip_returns_after(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    coef = min(1.0, max_norm / (_norm(grads).item() + 1e-6))
    for g in grads:
        g.mul_(coef)
    return _norm(grads)


@wrong("clip_grad_norm.norm_after")
def clip_returns_nothing(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    coef = min(1.0, max_norm / (_norm(grads).item() + 1e-6))
    for g in grads:
        g.mul_(coef)


@wrong("clip_grad_norm.norm_not_rooted")
def clip_squared(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = sum((g * g).sum() for g in grads)
    for g in grads:
        g.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


@wrong("clip_grad_norm.sum_of_norms")
def clip_sum_of_norms(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = sum(g.norm() for g in grads)
    for g in grads:
        g.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


@wrong("clip_grad_norm.by_value")
def clip_by_value(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = _norm(grads)
    for g in grads:
        g.clamp_(-max_norm, max_norm)
    return total


@wrong("clip_grad_norm.return_kind")
def clip_returns_a_float(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = _norm(grads).item()
    for g in grads:
        g.mul_(min(1.0, max_norm / (total + 1e-6)))
    return total


@wrong("clip_grad_norm.no_grad_fails")
def clip_every_parameter(parameters, max_norm):
    total = torch.sqrt(sum(p.grad.pow(2).sum() for p in parameters))
    for p in parameters:
        p.grad.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


@wrong("clip_grad_norm.no_epsilon")
def clip_without_epsilon(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = _norm(grads)
    factor = min(1.0, max_norm / total.item())
    for g in grads:
        g.mul_(factor)
    return total


@wrong("clip_grad_norm.not_written_back")
def clip_copies(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = _norm(grads)
    grads = [g * min(1.0, max_norm / (total.item() + 1e-6)) for g in grads]
    return total


@wrong("clip_grad_norm.wrong_norm")
def clip_by_l1(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = sum(g.abs().sum() for g in grads)
    for g in grads:
        g.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
    return total


@wrong("clip_grad_norm.norm_combined")
def clip_norms_summed_unsquared(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = torch.stack([g.norm() for g in grads]).sum().sqrt()  # the ** 2 forgotten
    for g in grads:
        g.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm


@wrong("clip_grad_norm.norm_combined")
def clip_sums_squared(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    norm = sum(g.sum() ** 2 for g in grads) ** 0.5
    for g in grads:
        g.mul_(min(1.0, max_norm / (float(norm) + 1e-6)))
    return norm


@wrong("clip_grad_norm.ratio_inverted")
def clip_ratio_upside_down(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = _norm(grads)
    for g in grads:
        g.mul_(min(1.0, total.item() / (max_norm + 1e-6)))
    return total


@wrong("clip_grad_norm.factor_capped_at_max_norm")
def clip_capped_by_max_norm(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = _norm(grads)
    for g in grads:
        g.mul_(min(max_norm, max_norm / (total.item() + 1e-6)))
    return total


@wrong("clip_grad_norm.first_only")
def clip_returns_in_the_loop(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = _norm(grads)
    for g in grads:
        g.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
        return total


@wrong("clip_grad_norm.gradients_stacked")
def clip_norm_of_the_stack(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = torch.linalg.vector_norm(torch.stack(grads))
    for g in grads:
        g.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
    return total


@wrong("clip_grad_norm.zip_misaligned")
def clip_zipped_with_every_parameter(parameters, max_norm):
    parameters = list(parameters)
    grads = [p.grad for p in parameters if p.grad is not None]
    total = _norm(grads)
    for p, g in zip(parameters, grads):
        p.grad = g * min(1.0, max_norm / (total.item() + 1e-6))
    return total


@wrong("clip_grad_norm.norm_combined")
def clip_mean_squares_summed(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = torch.sqrt(sum(g.pow(2).mean() for g in grads))
    for g in grads:
        g.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
    return total


@wrong("clip_grad_norm.condition_reversed")
def clip_when_small(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = _norm(grads)
    if total < max_norm:
        for g in grads:
            g.mul_(max_norm / (total + 1e-6))
    return total


# ------------------------------------------------------------------------- param_groups


@wrong("param_groups.everything_decayed")
def groups_all(model, weight_decay):
    return [{"params": list(model.parameters()), "weight_decay": weight_decay},
            {"params": [], "weight_decay": 0.0}]


@wrong("param_groups.embeddings_decayed")
def groups_by_dimension(model, weight_decay):  # nanoGPT's rule
    params = list(model.parameters())
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


@wrong("param_groups.norms_decayed")
def groups_by_name(model, weight_decay):
    decay, rest = [], []
    for name, p in model.named_parameters():
        (rest if "bias" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


@wrong("param_groups.biases_decayed")
def groups_all_of_linear(model, weight_decay):
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay = [p for m in model.modules() if isinstance(m, nn.Linear) for p in m.parameters()
             if id(p) not in embedded]
    chosen = {id(p) for p in decay}
    rest = [p for p in model.parameters() if id(p) not in chosen]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


@wrong("param_groups.tied_twice")
def groups_by_module(model, weight_decay):
    linear = {f"{name}.weight" for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    decay = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    rest = [p for name, p in model.named_parameters() if name not in linear]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


@wrong("param_groups.groups_swapped")
def groups_swapped(model, weight_decay):
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)} - embedded
    params = list(model.parameters())
    return [{"params": [p for p in params if id(p) in linear], "weight_decay": 0.0},
            {"params": [p for p in params if id(p) not in linear], "weight_decay": weight_decay}]


@wrong("param_groups.frozen_included")
def groups_with_frozen(model, weight_decay):
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)} - embedded
    decay, other = [], []
    for p in model.parameters():
        (decay if id(p) in linear else other).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": other, "weight_decay": 0.0}]


@wrong("param_groups.groups_reversed")
def groups_no_decay_first(model, weight_decay):
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)} - embedded
    trained = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in trained if id(p) not in linear], "weight_decay": 0.0},
            {"params": [p for p in trained if id(p) in linear], "weight_decay": weight_decay}]


@wrong("param_groups.tied_twice")
def groups_module_by_module(model, weight_decay):
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, rest = [], []
    for m in model.modules():
        for p in m.parameters(recurse=False):  # a tied tensor, once per module that holds it
            if p.requires_grad:
                linear = isinstance(m, nn.Linear) and p is m.weight and id(p) not in embedded
                (decay if linear else rest).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


@wrong("param_groups.tied_decayed")
def groups_every_linear_weight(model, weight_decay):
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    trained = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in trained if id(p) in linear], "weight_decay": weight_decay},
            {"params": [p for p in trained if id(p) not in linear], "weight_decay": 0.0}]


@wrong("param_groups.decay_unset")
def groups_without_zero(model, weight_decay):
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)} - embedded
    trained = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in trained if id(p) in linear], "weight_decay": weight_decay},
            {"params": [p for p in trained if id(p) not in linear]}]


@wrong("param_groups.names_not_tensors")
def groups_of_names(model, weight_decay):
    linear = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, nn.Linear)
              and not any(m.weight is e.weight for e in model.modules() if isinstance(e, nn.Embedding))}
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    return [{"params": [n for n in names if n in linear], "weight_decay": weight_decay},
            {"params": [n for n in names if n not in linear], "weight_decay": 0.0}]


@wrong("param_groups.not_dicts")
def groups_as_lists(model, weight_decay):
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)} - embedded
    trained = [p for p in model.parameters() if p.requires_grad]
    return [[p for p in trained if id(p) in linear], [p for p in trained if id(p) not in linear]]

@wrong("param_groups.groups_differ")
def groups_every_matrix_but_embeddings(model, weight_decay):
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, rest = [], []
    for p in model.parameters():
        if p.requires_grad:  # mmengine-like: every matrix decays (convolutions too), tables not
            (decay if p.dim() >= 2 and id(p) not in tables else rest).append(p)
    return [dict(params=decay, weight_decay=weight_decay), dict(params=rest, weight_decay=0.0)]


@wrong("param_groups.groups_differ")
def groups_by_name_keywords(model, weight_decay):
    decay, rest = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:  # the names' spelling, not the owners
            (rest if any(k in name for k in ("bias", "norm", "emb")) else decay).append(p)
    return [dict(params=decay, weight_decay=weight_decay), dict(params=rest, weight_decay=0.0)]


@wrong("param_groups.groups_differ")
def groups_by_known_layers(model, weight_decay):
    decay, rest = [], []
    for module in model.modules():  # the layer types this author knew
        if isinstance(module, nn.Linear):
            decay.append(module.weight)
            rest += [module.bias] if module.bias is not None else []
        elif isinstance(module, (nn.Embedding, nn.LayerNorm)):
            rest += list(module.parameters(recurse=False))
    seen, groups = set(), []
    for params, wd in ((decay, weight_decay), (rest, 0.0)):
        kept = [p for p in params if p.requires_grad and id(p) not in seen]
        seen |= set(map(id, kept))
        groups.append(dict(params=kept, weight_decay=wd))
    return groups


@wrong("param_groups.tensor_membership")
def groups_by_tensor_membership(model, weight_decay):
    linear = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    embedding = [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]
    decay, rest = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p in linear and p not in embedding else rest).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


@wrong("param_groups.grad_filter")
def groups_of_parameters_with_gradients(model, weight_decay):
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)} - embedded
    live = [p for p in model.parameters() if p.grad is not None]  # a clipping habit
    return [{"params": [p for p in live if id(p) in linear], "weight_decay": weight_decay},
            {"params": [p for p in live if id(p) not in linear], "weight_decay": 0.0}]


@wrong("param_groups.return_kind")
def groups_as_a_tuple(model, weight_decay):
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)} - embedded
    params = [p for p in model.parameters() if p.requires_grad]
    return ({"params": [p for p in params if id(p) in linear], "weight_decay": weight_decay},
            {"params": [p for p in params if id(p) not in linear], "weight_decay": 0.0})


# ----------------------------------------------------------------------------- TextStream


class _Stream:
    """What the streams below share, written right: PAD and BOS give '', nothing after EOS,
    UNK as the tokenizer shows it, the shown bytes skipped; each turns bytes into text its own
    (wrong) way in text(data) and rest()."""

    def __init__(self, tokenizer, shown=b""):
        self.tokenizer, self.skip, self.done = tokenizer, len(shown), False
        self.buffer = b""

    def push(self, i):
        if self.done or i in (0, 1):
            return ""
        if i == 2:
            self.done = True
            return ""
        data = self.tokenizer.decode([i]).encode() if i == 3 else self.tokenizer.token(i)
        data, self.skip = data[self.skip:], max(0, self.skip - len(data))
        return self.text(data)

    def end(self):
        return self.rest()

    def rest(self):
        text = self.buffer.decode("utf-8", errors="replace")
        self.buffer = b""
        return text


def _incomplete_tail(data):
    """How many bytes at the end of `data` start a character that is not finished."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte >> 6 == 0b10:  # a continuation byte: look further back
            continue
        need = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
        return back if need > back else 0
    return 0


@wrong("TextStream.token_by_token")
class StreamTokenByToken(_Stream):
    def text(self, data):
        return data.decode("utf-8", errors="replace")


@wrong("TextStream.token_by_token")
class StreamThroughDecode:
    def __init__(self, tokenizer, shown=b""):
        self.tokenizer = tokenizer

    def push(self, i):
        return self.tokenizer.decode([i])

    def end(self):
        return ""


@wrong("TextStream.token_by_token")
class StreamStrictPerToken(_Stream):
    def text(self, data):
        return data.decode("utf-8")


@wrong("TextStream.bytes_dropped")
class StreamIgnoringPerToken(_Stream):
    def text(self, data):
        return data.decode("utf-8", errors="ignore")


@wrong("TextStream.bytes_dropped")
class StreamWithoutReplacementCharacters(_Stream):  # replicate/cog-llama-template PR 75
    def text(self, data):
        return data.decode("utf-8", errors="replace").replace("\ufffd", "")


@wrong("TextStream.bytes_dropped")
class StreamIgnoringDecoder(_Stream):
    def __init__(self, tokenizer, shown=b""):
        super().__init__(tokenizer, shown)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="ignore")

    def text(self, data):
        return self.decoder.decode(data)

    def rest(self):
        return self.decoder.decode(b"", final=True)


@wrong("TextStream.strict")
class StreamStrictDecoder(StreamIgnoringDecoder):
    def __init__(self, tokenizer, shown=b""):
        super().__init__(tokenizer, shown)
        self.decoder = codecs.getincrementaldecoder("utf-8")()


@wrong("TextStream.decoded_again")
class StreamDecodedAgain(_Stream):  # ChatGLM-6B issue 478's loop
    printed = 0

    def text(self, data):
        self.buffer += data
        text = self.buffer.decode("utf-8", errors="replace")
        new = text[self.printed:]
        self.printed = len(text)
        return new

    def rest(self):
        return ""


@wrong("TextStream.whole_token_held")
class StreamUntilNoReplacement(_Stream):  # tokenizers' DecodeStream: held while it ends in U+FFFD
    def text(self, data):
        self.buffer += data
        text = self.buffer.decode("utf-8", errors="replace")
        if text.endswith("\ufffd"):
            return ""
        self.buffer = b""
        return text


@wrong("TextStream.whole_token_held")
class StreamUntilItDecodes(_Stream):
    def text(self, data):
        self.buffer += data
        try:
            text = self.buffer.decode("utf-8")
        except UnicodeDecodeError:
            return ""
        self.buffer = b""
        return text


@wrong("TextStream.not_held")
class StreamHoldingALeadByteOnly(_Stream):
    def text(self, data):
        self.buffer += data
        if self.buffer and self.buffer[-1] >= 0xC0:  # a lead byte: its character is unfinished
            done, self.buffer = self.buffer[:-1], self.buffer[-1:]
        else:
            done, self.buffer = self.buffer, b""
        return done.decode("utf-8", errors="replace")


@wrong("TextStream.not_held")
class StreamHoldingAfterALeadOnly(_Stream):
    def text(self, data):
        self.buffer += data
        cut = len(self.buffer)
        if self.buffer and 0x80 <= self.buffer[-1] < 0xC0:  # ends in a continuation byte
            cut -= _incomplete_tail(self.buffer)
        done, self.buffer = self.buffer[:cut], self.buffer[cut:]
        return done.decode("utf-8", errors="replace")


class _ByHand(_Stream):
    """Holds back the unfinished last character, by hand (no codecs)."""

    def text(self, data):
        self.buffer += data
        cut = len(self.buffer) - _incomplete_tail(self.buffer)
        done, self.buffer = self.buffer[:cut], self.buffer[cut:]
        return done.decode("utf-8", errors="replace")


@wrong("TextStream.end_drops")
class StreamNeverFlushed(_ByHand):
    def end(self):
        pass


@wrong("TextStream.end_drops")
class StreamEndingInNothing(_ByHand):
    def rest(self):
        self.buffer = b""
        return ""


@wrong("TextStream.end_drops")
class StreamEndingStrictly(_ByHand):
    def rest(self):
        text, self.buffer = self.buffer.decode("utf-8"), b""
        return text


@wrong("TextStream.end_drops")
class StreamEndingByteByByte(_ByHand):
    def rest(self):
        text, self.buffer = "\ufffd" * len(self.buffer), b""
        return text


@wrong("TextStream.specials_shown")
class StreamWithoutSpecials(_ByHand):
    def push(self, i):
        data = self.tokenizer.token(i)  # every id's bytes, the specials' names too
        data, self.skip = data[self.skip:], max(0, self.skip - len(data))
        return self.text(data)


@wrong("TextStream.specials_shown")
class StreamWritingEndOfText(_ByHand):
    def push(self, i):
        if i == 2 and not self.done:
            self.done = True
            return self.text(self.tokenizer.token(2))
        return super().push(i)


@wrong("TextStream.eos_ignored")
class StreamPastEndOfText(_ByHand):
    def push(self, i):
        return "" if i in (0, 1, 2) else super().push(i)


@wrong("TextStream.unk_as_name")
class StreamUnknownByName(_ByHand):
    def push(self, i):
        if i == 3 and not self.done:
            return self.text(self.tokenizer.token(3))
        return super().push(i)


@wrong("TextStream.shown_repeated")
class StreamRepeatingShown(_ByHand):
    def __init__(self, tokenizer, shown=b""):
        super().__init__(tokenizer)


@wrong("TextStream.shared_buffer")
class StreamWithAClassBuffer:
    held = bytearray()  # one bytearray, made once, for every stream

    def __init__(self, tokenizer, shown=b""):
        self.tokenizer, self.skip, self.done = tokenizer, len(shown), False

    def push(self, i):
        if self.done or i in (0, 1):
            return ""
        if i == 2:
            self.done = True
            return ""
        data = self.tokenizer.decode([i]).encode() if i == 3 else self.tokenizer.token(i)
        data, self.skip = data[self.skip:], max(0, self.skip - len(data))
        self.held.extend(data)
        cut = len(self.held) - _incomplete_tail(bytes(self.held))
        done = bytes(self.held[:cut])
        del self.held[:cut]
        return done.decode("utf-8", errors="replace")

    def end(self):
        rest = bytes(self.held).decode("utf-8", errors="replace")
        self.held.clear()
        return rest


_DECODER = codecs.getincrementaldecoder("utf-8")(errors="replace")  # one for the module


@wrong("TextStream.shared_buffer")
class StreamWithAModuleDecoder(_Stream):
    def text(self, data):
        return _DECODER.decode(data)

    def rest(self):
        return _DECODER.decode(b"", final=True)


_finished = False  # one end-of-text for every stream


@wrong("TextStream.state_kept")
class StreamWithAModuleEnd(_ByHand):
    def push(self, i):
        global _finished
        if _finished or i in (0, 1):
            return ""
        if i == 2:
            _finished = True
            return ""
        return super().push(i)


@wrong("TextStream.held_while_not_ascii")
class StreamHeldUntilAscii(_Stream):
    def text(self, data):
        self.buffer += data
        if self.buffer and self.buffer[-1] >= 0x80:  # maybe unfinished: wait for more
            return ""
        return self.rest()


@wrong("TextStream.held_while_not_ascii")
class StreamHeldUntilAsciiThenLost(StreamHeldUntilAscii):
    def end(self):
        return ""  # what is held is never shown


@wrong("TextStream.shown_skipped_otherwise")
class StreamSkippingShownOnce(_ByHand):
    def push(self, i):
        if self.done or i in (0, 1) or i == 2:
            self.done = self.done or i == 2
            return ""
        data = self.tokenizer.decode([i]).encode() if i == 3 else self.tokenizer.token(i)
        data, self.skip = data[self.skip:], 0  # what the first token lacked of shown: lost
        return self.text(data)


@wrong("TextStream.shown_skipped_otherwise")
class StreamSkippingShownEveryTime(_ByHand):
    def push(self, i):
        if self.done or i in (0, 1) or i == 2:
            self.done = self.done or i == 2
            return ""
        data = self.tokenizer.decode([i]).encode() if i == 3 else self.tokenizer.token(i)
        return self.text(data[self.skip:])


@wrong("TextStream.specials_shown")
class StreamOnlyEndingAtEos(_ByHand):
    def push(self, i):
        if self.done:
            return ""
        if i == 2:
            self.done = True
            return ""
        data = self.tokenizer.decode([i]).encode() if i == 3 else self.tokenizer.token(i)
        data, self.skip = data[self.skip:], max(0, self.skip - len(data))
        return self.text(data)


@wrong("TextStream.unk_skipped")
class StreamSkippingUnknown(_ByHand):
    def push(self, i):
        return "" if i == 3 else super().push(i)


@wrong("TextStream.extra_specials_skipped")
class StreamSkippingEverySpecial(_ByHand):
    def push(self, i):
        specials = getattr(self.tokenizer, "offset", 4)  # a BPE's specials come first
        return "" if i < specials and i not in (2, 3) else super().push(i)


@wrong("TextStream.eos_flushes")
class StreamFlushingAtEos(_ByHand):
    def push(self, i):
        if i == 2 and not self.done:
            self.done = True
            return self.rest()
        return super().push(i)


@wrong("TextStream.token_by_token")
class StreamWithADecoderPerToken(_Stream):
    def text(self, data):
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")  # what it held is lost
        return self.decoder.decode(data)

    def rest(self):
        return self.decoder.decode(b"", final=True) if hasattr(self, "decoder") else ""


@wrong("TextStream.other_handler")
class StreamEscapingBadBytes(_Stream):
    def text(self, data):
        if not hasattr(self, "decoder"):
            self.decoder = codecs.getincrementaldecoder("utf-8")("backslashreplace")
        return self.decoder.decode(data)

    def rest(self):
        return self.decoder.decode(b"", final=True) if hasattr(self, "decoder") else ""


@wrong("TextStream.other_handler")
class StreamOfSurrogates(_Stream):  # vllm-mlx PR 195: lone surrogates for the parts of an emoji
    def text(self, data):
        return data.decode("utf-8", errors="surrogateescape")


@wrong("TextStream.reference_used")
class StreamOfTheCourse(TextStream):  # the course's own, under another name
    pass


class _Codecs:
    """A stream on codecs' incremental decoder, written right but for what its subclasses
    change."""

    def __init__(self, tokenizer, shown=b"", errors="replace"):
        self.tokenizer, self.skip, self.shown, self.done = tokenizer, len(shown), shown, False
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors=errors)

    def data(self, i):
        return self.tokenizer.decode([3]).encode() if i == 3 else self.tokenizer.token(i)

    def push(self, i):
        if self.done or i in (0, 1):
            return ""
        if i == 2:
            self.done = True
            return ""
        data = self.data(i)
        data, self.skip = data[self.skip:], max(0, self.skip - len(data))
        return self.decoder.decode(data)

    def end(self):
        return self.decoder.decode(b"", final=True)


@wrong("TextStream.end_drops")
class StreamSilentAfterEos(_Codecs):
    def end(self):
        return "" if self.done else super().end()  # the bytes held at EOS dropped


@wrong("TextStream.shown_skipped_otherwise")
class StreamSkippingShownInCharacters(_Codecs):
    def __init__(self, tokenizer, shown=b""):
        super().__init__(tokenizer, shown)
        self.skip = len(shown.decode("utf-8", errors="replace"))  # characters, not bytes


@wrong("TextStream.shown_skipped_otherwise")
class StreamSkippingShownIfTheFirstTokenHoldsIt(_Codecs):
    def push(self, i):
        if self.skip and i not in (0, 1, 2):
            data, self.skip = self.data(i), 0
            return self.decoder.decode(data[len(self.shown):] if data.startswith(self.shown) else data)
        return super().push(i)


@wrong("TextStream.unk_around_decoder")
class StreamReturningUnkAtOnce(_Codecs):
    def push(self, i):
        if i == 3 and not self.done:
            return self.tokenizer.decode([3])  # the held bytes stay held
        return super().push(i)


@wrong("TextStream.unk_as_fffd")
class StreamShowingUnkAsReplacement(_Codecs):
    def data(self, i):
        return "\ufffd".encode() if i == 3 else self.tokenizer.token(i)


@wrong("TextStream.strict_swallowed")
class StreamSwallowingDecodeErrors(_Codecs):
    def __init__(self, tokenizer, shown=b""):
        super().__init__(tokenizer, shown, errors="strict")

    def push(self, i):
        try:
            return super().push(i)
        except UnicodeDecodeError:
            self.decoder.reset()
            return ""



@wrong("TextStream.ended_by_other")
class StreamEndedByPad(_ByHand):
    def push(self, i):
        if i == 0:
            self.done = True
        return super().push(i)

# ----------------------------------------------------------------------------- right ones


def adamw_by_the_paper(param, grad, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.999), eps=1e-8,
                       weight_decay=1e-2):
    """Loshchilov & Hutter's algorithm 2, with the decay inside the same subtraction."""
    beta1, beta2 = betas
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad**2
    m_hat = m / (1 - beta1**step)
    v_hat = v / (1 - beta2**step)
    return param - lr * (m_hat / (v_hat.sqrt() + eps) + weight_decay * param), m, v


def cosine_with_lambda(step, warmup, total_steps, min_ratio=0.0):
    if warmup and step < warmup:
        return step / warmup
    t = min(1.0, max(0, step - warmup) / max(1, total_steps - warmup))
    angle = torch.tensor(math.pi * t, dtype=torch.float64)
    return float(min_ratio + (1 - min_ratio) * (1 + torch.cos(angle)) / 2)


def clip_with_torch_norms(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]))
    if total > max_norm:
        for g in grads:
            g *= max_norm / (total + 1e-6)
    return total


def groups_by_isinstance(model, weight_decay):
    seen, decay, rest = set(), [], []
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            linear_weight = isinstance(module, nn.Linear) and name == "weight"
            (decay if linear_weight and id(p) not in embedded else rest).append(p)
    return [dict(params=decay, weight_decay=weight_decay), dict(params=rest, weight_decay=0.0)]


class StreamByHand(_ByHand):
    """Holds back the unfinished last character by reading its lead byte, without codecs."""


RIGHT = {"adamw_step": [adamw_by_the_paper], "cosine_lr": [cosine_with_lambda],
         "clip_grad_norm": [clip_with_torch_norms], "param_groups": [groups_by_isinstance],
         "TextStream": [StreamByHand]}
