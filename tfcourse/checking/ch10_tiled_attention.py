"""Exercise 10: tiled attention with an online softmax, and local attention's sliding-window
mask: their cases and their catalogues of mistakes.

Most mistakes of the online softmax are exact on paper and show only on some inputs: the
cases are built so that each shows on one of them (blocks whose maximum grows, a last block
that is shorter, masks that block whole blocks or every key of a query, scores too large
for e^s, masked keys with the largest scores). Once every case passes, a long sequence
checks that the learner's code never holds all q_len x k_len scores at once.
"""

import dataclasses
import math

import torch

from ..efficiency import ForwardMemory
from ..efficiency import tiled_attention as reference
from ..long_attention import sliding_window_mask
from .ch06_decoder import _draw
from .comparison import same
from .explanation import difference, structure_problem
from .mistakes import NO_MATCH, Mistake, laddered, member
from .pipeline import Case, Item, fail_on_error, gradient_case
from .sandbox import call

EXERCISE = "ex10_tiled_attention"
NAME = "tiled_attention"
INF = math.inf


def _sqrt_d_k(q, k, v):
    return math.sqrt(q.size(-1))


def _tiled(q, k, v, m=None, block_size=128, *, scale=_sqrt_d_k, rescale_sum=1, rescale_out=1,
           running=True, update=True, guard=True, fill=-INF, subtract=True, normalize="end",
           blocks="all", mask_at="scores", empty="zero", exps="new", factor="down", values="block",
           keepdim=True, axes=(-2, -1), start="zeros", first_max=-INF, expand_mask=True,
           mask_of="block"):
    """The online softmax of tfcourse.efficiency.tiled_attention, with the variations that
    mistakes make (the defaults give the reference):

    scale        what the scores are divided by
    rescale_sum, rescale_out   the power of e^(m - m') the old sum and output get (0, 2)
    running      m' = max(m, rowmax(S)) (False: the block's own max; "first": the first block's,
                 kept after it)
    update       m = m' after each block
    guard        subtract 0 where m' = -inf
    fill         what masked scores become ("min": the dtype's lowest)
    subtract     subtract m' at all ("rescaled": 0 subtracted, the sums still multiplied by
                 e^(m - 0) = e^m, the running maximum's exp)
    normalize    "end" (o / l), "block_sum" / "block_mean" (each block's own softmax, summed
                 or averaged; with "_rescaled", the sum so far multiplied by e^(m - m') at each
                 block all the same), "inside" / "inside_end" (o / l in the loop, and again at the
                 end), "none"
    blocks       "all", "whole" (the last, shorter block dropped), "last" (the last block
                 dropped), "end" (every block ends at block_size: the later ones are empty),
                 "short" (every block one key short: start + block_size - 1)
    mask_at      "scores", "inverted", "zero" (masked scores 0), "ignored", "exp" (e^(S - m')
                 zeroed, m' over every key), "values" (the sum counts masked keys)
    empty        "zero" (a query that saw no key gets 0) or "nan" (0 / 0)
    exps         e^(S - m') relative to the "new" maximum, the "old" one (0 where it is -inf),
                 "old_nan" (-inf kept), or the "block"'s own maximum (0 where it is -inf)
    factor       e^(m - m') ("down"), e^(m' - m) ("up"), or e^(m' - m) taken as 1 where m is
                 -inf ("up_guarded")
    values       each block's ("block") or the first block's ("first")
    keepdim      rowmax(S) keeps its last axis (False: raises, as the learner's code does)
    axes         the key's axes that are swapped
    start        the running output starts as zeros (..., q_len, d_v), or like the "query"
    first_max    what the running maximum starts at (a finite number: only "very negative")
    expand_mask  the mask broadcast over the keys before it is sliced by block (False: a mask
                 of one flag per query is empty from the second block on, and raises)
    mask_of      each "block"'s own columns of the mask, or the "first" block's for every block
                 (mask[..., :block width])
    """
    k_len = k.size(-2)
    if m is not None and expand_mask:
        m = m.expand(*m.shape[:-1], k_len)
    stop = {"all": k_len, "end": k_len, "short": k_len, "whole": k_len - k_len % block_size,
            "last": k_len - block_size}[blocks]
    run_max = torch.full_like(q[..., :1], first_max)  # (..., q_len, 1)
    denom = torch.zeros_like(run_max)
    numer = q.new_zeros(*q.shape[:-1], v.size(-1)) if start == "zeros" else torch.zeros_like(q)
    n_blocks = 0
    for start in range(0, stop, block_size):
        block = slice(start, block_size if blocks == "end"
                      else start + block_size - (blocks == "short"))
        s = q @ k[..., block, :].transpose(*axes) / scale(q, k, v)
        allowed = None if m is None else m[..., :s.size(-1)] if mask_of == "first" else m[..., block]
        if allowed is not None and mask_at in ("scores", "inverted", "zero"):
            where = {"scores": ~allowed, "inverted": allowed, "zero": ~allowed}[mask_at]
            value = torch.finfo(s.dtype).min if fill == "min" else fill
            s = s.masked_fill(where, 0.0 if mask_at == "zero" else value)
        block_max = s.amax(dim=-1, keepdim=keepdim)
        if running == "first":  # the first block's maximum, kept
            new_max = run_max if n_blocks else block_max
        else:
            new_max = torch.maximum(run_max, block_max) if running else block_max
        shift = new_max.masked_fill(new_max == -INF, 0.0) if guard else new_max
        if subtract in (False, "rescaled"):  # "rescaled": e^(m - 0) still rescales the sums
            shift = torch.zeros_like(shift)
        old = run_max.masked_fill(run_max == -INF, 0.0) if exps == "old" else run_max
        own = block_max.masked_fill(block_max == -INF, 0.0)
        p = torch.exp(s - {"new": shift, "block": own}.get(exps, old))
        rescale = torch.exp(run_max - shift) if subtract else torch.ones_like(shift)
        if factor == "up":
            rescale = torch.exp(shift - run_max)
        if factor == "up_guarded":
            rescale = torch.exp(shift - torch.where(run_max == -INF, shift, run_max))
        v_block = v[..., :block_size, :] if values == "first" else v[..., block, :]
        p_values = p
        if allowed is not None and mask_at in ("exp", "values"):
            p_values = p.masked_fill(~allowed, 0.0)
            p = p_values if mask_at == "exp" else p
        n_blocks += 1
        if normalize.startswith(("block_sum", "block_mean")):
            total = p.sum(dim=-1, keepdim=True)
            if normalize.endswith("_rescaled"):  # the sum of the blocks' softmaxes rescaled
                numer = rescale**rescale_out * numer  # by e^(m - m') all the same
                if update:
                    run_max = new_max
            numer = numer + p_values @ v_block / total.masked_fill(total == 0, 1.0)
            continue
        denom = rescale ** rescale_sum * denom + p.sum(dim=-1, keepdim=True)
        numer = rescale ** rescale_out * numer + p_values @ v_block
        if normalize in ("inside", "inside_end"):
            numer = numer / denom.masked_fill(denom == 0, 1.0)
        if update:
            run_max = new_max
    if normalize.startswith("block_mean"):
        return numer / max(n_blocks, 1)
    if normalize.startswith("block_sum") or normalize in ("inside", "none"):
        return numer
    return numer / (denom.masked_fill(denom == 0, 1.0) if empty == "zero" else denom)


def _with(**bug):
    return lambda q, k, v, m=None, block_size=128: _tiled(q, k, v, m, block_size, **bug)


BUILTIN = Mistake(
    "builtin", "Built-in attention called",
    "you called torch.nn.functional.scaled_dot_product_attention; the exercise is to write the "
    "loop over blocks of keys yourself, with @ (matmul) and torch.exp.",
    uses=("scaled_dot_product_attention",),
)
WHOLE_MATRIX = Mistake(
    "whole_matrix", "All q_len x k_len scores held at once",
    "{detail}. Tiling is about memory: compute one block's scores, fold them into m, l and o, "
    "and let them go before the next block (no softmax over all keys, no list of every "
    "block's scores, no chapter 01 attention inside).",
)
def _mask_expanded(case):
    """The case with its mask broadcast to (..., q_len, k_len): what code that slices the mask
    by block before broadcasting it gets right."""
    if len(case.args) < 4 or case.args[3].size(-1) != 1:
        return None
    q, k, v, mask = case.args
    full = mask.expand(*mask.shape[:-1], k.size(-2))
    return dataclasses.replace(case, args=(q, k, v, full))


MISTAKES = (
    BUILTIN,
    Mistake(
        "no_scaling", "Scores not scaled",
        "divide each block's Q K_B^T by sqrt(d_k), as chapter 01's attention does: tiling "
        "changes the order of the work, not the formula.",
        (_with(scale=lambda q, k, v: 1.0),),
    ),
    Mistake(
        "wrong_scale", "Scores scaled by the wrong amount",
        "the scores are Q K^T / sqrt(d_k), d_k = query.size(-1): divided once, by the square "
        "root of the queries' and keys' width.",
        (_with(scale=lambda q, k, v: q.size(-1)),
         _with(scale=lambda q, k, v: 1 / math.sqrt(q.size(-1))),
         _with(scale=lambda q, k, v: math.sqrt(v.size(-1))),
         _with(scale=lambda q, k, v: q.size(-1) ** 0.25)),
    ),
    Mistake(
        "keepdim", "Row maximum taken without keepdim=True",
        "s.amax(dim=-1) drops the last axis: (..., q_len) does not broadcast against m and the "
        "scores (..., q_len, block). Keep it: s.amax(dim=-1, keepdim=True) is (..., q_len, 1).",
        (_with(keepdim=False),),
    ),
    Mistake(
        "key_axes", "Key transposed on the wrong axes",
        "your code works for 3-D inputs (batch, seq, d_k) but not for 4-D (batch, heads, seq, "
        "d_k). Transpose the last two axes, whatever the rank: key.transpose(-2, -1).",
        (_with(axes=(1, 2)),),
    ),
    Mistake(
        "output_like_query", "Running output started with the query's shape",
        "o sums weighted VALUES: it is (..., q_len, d_v), and d_v may differ from d_k. Start it "
        "as zeros of query.shape[:-1] + (value.size(-1),).",
        (_with(start="query"),),
    ),
    Mistake(
        "block_slice_end", "Blocks sliced up to block_size instead of start + block_size",
        "block j holds keys start:start + block_size; key[..., start:block_size] is empty after "
        "the first block.",
        (_with(blocks="end"),),
    ),
    Mistake(
        "nan_from_start", "NaN from the running maximum's start at -inf",
        "m starts at -inf, so e^(m' - m) (the factor upside down: it is e^(m - m') <= 1) or "
        "e^(S - m) with the old maximum (use the new m') is e^(+inf) = inf, and inf x 0 = NaN.",
        (_with(factor="up"), _with(exps="old_nan")),
    ),
    Mistake(
        "old_max_in_exp", "Block's exps taken relative to the old maximum",
        "compute e^(S - m') with the NEW maximum m' = max(m, rowmax(S)), the one the old sum "
        "and output are rescaled to: relative to the old m the block's terms are on another "
        "scale (and overflow when its scores are far larger).",
        (_with(exps="old"),),
    ),
    Mistake(
        "block_own_max", "Block's exps taken relative to the block's own maximum, the rescaling "
        "to the running one",
        "e^(S - rowmax(S)) is on the block's own scale, while e^(m - m') brings the old sum and "
        "output to the running m' = max(m, rowmax(S)): the two terms added are then on two "
        "scales. Take the block's exps relative to the same m' as the rescaling, e^(S - m').",
        (_with(exps="block"),),
    ),
    Mistake(
        "value_block", "Values of the wrong block",
        "slice value like key, value[..., start:start + block_size, :]: block j's weights "
        "e^(S - m') weigh block j's values.",
        (_with(values="first"),),
    ),
    Mistake(
        "last_block_dropped", "Last block of keys dropped",
        "when k_len is not a multiple of block_size, the last block is shorter but still "
        "counts: loop `for start in range(0, k_len, block_size)` and slice "
        "key[..., start:start + block_size, :] (a slice past the end just stops there).",
        (_with(blocks="whole"), _with(blocks="last")),
    ),
    Mistake(
        "no_rescale", "Old sum and output not rescaled when the maximum grows",
        "the running sum l and output o were computed relative to the old maximum m; when a "
        "block raises it to m', multiply BOTH by e^(m - m') before adding the block's terms.",
        (_with(rescale_sum=0, rescale_out=0), _with(rescale_sum=1, rescale_out=0),
         _with(rescale_sum=0, rescale_out=1)),
    ),
    Mistake(
        "rescaled_twice", "Rescaling applied twice",
        "multiply the old sum and output by e^(m - m') once per block: applied a second time "
        "(or to both l and o and then to their ratio) it shrinks what came before too much.",
        (_with(rescale_sum=2, rescale_out=2), _with(rescale_sum=1, rescale_out=2),
         _with(rescale_sum=2, rescale_out=1)),
    ),
    Mistake(
        "rescale_inverted", "Rescaling factor upside down: e^(m' - m) instead of e^(m - m')",
        "when a block raises the maximum from m to m' >= m, the old sum and output were "
        "computed relative to m and must shrink to m's scale: multiply them by e^(m - m') <= 1. "
        "e^(m' - m) grows them instead.",
        (_with(factor="up_guarded"),),
    ),
    Mistake(
        "block_one_short", "Each block one key short: sliced up to start + block_size - 1",
        "a Python slice leaves its end out: key[..., start:start + block_size, :] holds "
        "block_size keys, the last one included. An end of start + block_size - 1 (an "
        "inclusive-end habit) drops one key of every block.",
        (_with(blocks="short"),),
    ),
    Mistake(
        "max_frozen", "Running maximum taken from the first block, then kept",
        "m' = max(m, rowmax(S)) at EVERY block. A maximum fixed by the first block is -inf for "
        "a query whose first block is all masked (then e^(m - m') = 0 wipes what came before), "
        "and a later block with larger scores overflows e^(S - m).",
        (_with(running="first"),),
    ),
    Mistake(
        "max_not_updated", "Running maximum never updated",
        "after each block set m = m'. Left at -inf, e^(m - m') is 0 at every block and wipes "
        "what was summed before: only the last block's keys count.",
        (_with(update=False),),
    ),
    Mistake(
        "normalised_per_block", "Each block normalised on its own",
        "a block's softmax over its own keys is not the softmax over all keys: keep the "
        "unnormalised running sum l and output o, and divide o by l once, after the last block.",
        (_with(normalize="block_sum"), _with(normalize="block_mean"), _with(normalize="inside"),
         _with(normalize="inside_end"), _with(normalize="block_mean_rescaled"),
         _with(normalize="block_sum_rescaled")),
    ),
    Mistake(
        "not_divided", "Output not divided by the running sum",
        "o is a sum of e^(s - m) v, not yet an average: the output is o / l, after the last "
        "block.",
        (_with(normalize="none"),),
    ),
    Mistake(
        "mask_inverted", "Mask polarity inverted",
        "here True means 'may attend' (as in F.scaled_dot_product_attention); you blocked the "
        "keys that are allowed and let through the masked ones.",
        (_with(mask_at="inverted"),),
    ),
    Mistake(
        "mask_ignored", "Mask ignored",
        "your output is the same as with no mask: slice the mask like the keys, "
        "mask[..., start:start + block_size], and block each block's scores where it is False.",
        (_with(mask_at="ignored"),),
    ),
    Mistake(
        "mask_of_first_block", "The first block's mask used for every block",
        "each block of keys has its own columns of the mask: slice it like the keys, "
        "mask[..., start:start + block_size]; mask[..., :block_size] (or :s.size(-1)) gives every "
        "block the first block's columns.",
        (_with(mask_of="first"),),
    ),
    Mistake(
        "masked_to_zero", "Masked scores set to 0 instead of -inf",
        "e^0 = 1, so masked keys still get weight. Fill masked scores with -inf so that "
        "e^(s - m) makes them 0.",
        (_with(mask_at="zero"),),
    ),
    Mistake(
        "masked_in_sum", "Masked keys counted in the running sum",
        "you kept masked keys out of the output but added their e^(s - m) to l, so the weights "
        "of a query no longer sum to 1. Mask the scores (-inf) before the max, the exp and both "
        "sums.",
        (_with(mask_at="values"),),
    ),
    Mistake(
        "fully_masked_block_nan", "A fully masked block gives NaN",
        "when every key of a query is masked in the first blocks, m' = max(-inf, -inf) = -inf "
        "and s - m' = -inf - (-inf) = NaN, which then spreads to the whole row. Where m' is "
        "-inf, subtract 0 instead (e^(-inf - 0) = 0, as it should be).",
        (_with(guard=False), _with(guard=False, empty="nan")),
    ),
    Mistake(
        "empty_row", "Query that may see no key not 0",
        "when ALL keys of a query are masked, its l stays 0 and o / l is 0 / 0 = NaN (or, with "
        "a finite fill such as -1e9, every key gets the same weight). Such a query attends to "
        "nothing: make its output 0 (divide by 1 where l is 0).",
        (_with(empty="nan"), _with(fill=-1e9), _with(fill="min")),
    ),
    Mistake(
        "max_not_subtracted", "Maximum not subtracted before exp",
        "e^s overflows to inf for scores above about 88 in float32 (inf / inf = NaN). On paper "
        "the max cancels out, in floats it is what keeps e^(s - m') <= 1: subtract the running "
        "maximum m' before the exp and rescale by e^(m - m').",
        (_with(subtract=False), _with(subtract=False, empty="nan"),
         lambda *args, **kwargs: _with(subtract=False, empty="nan")(*args, **kwargs).nan_to_num(0.0),
         _with(subtract="rescaled"), _with(subtract="rescaled", empty="nan")),
    ),
    Mistake(
        "block_max_only", "Block's own maximum used instead of the running maximum",
        "m' = max(m, rowmax(S)): with the block's own max, e^(m - m') grows past 1 when a block "
        "has smaller scores than before (it overflows when they are far smaller, and a fully "
        "masked block sets m to -inf). Keep the larger of the running max and the block's.",
        (_with(running=False), _with(running=False, rescale_sum=0, rescale_out=0)),
    ),
    Mistake(
        "finite_start", "Running maximum started at a finite number instead of -inf",
        "m starts at -inf: a finite start (0, -1e4, ...) is only 'very negative'. When every "
        "score of a query is below it (here all below -10^5), m' stays at your start, every "
        "e^(s - m') underflows to 0, and the query's output comes out 0. Start at -inf, and "
        "subtract 0 where m' is still -inf (hint 3).",
        tuple(_with(first_max=f) for f in (0.0, -1e4, -1e3, -1e5, -65504.0, -1e2)),
    ),
    Mistake(
        "masked_max", "Block maximum taken over masked keys",
        "mask the scores (-inf) before the block's max and the exp. Taking the max of the raw "
        "scores, or zeroing e^(s - m') after the exp, is exact on paper, but a masked key with "
        "a large score then sets m, and e^(s - m) of every allowed key underflows to 0.",
        (_with(mask_at="exp"), _with(mask_at="exp", empty="nan")),
    ),
    Mistake(
        "mask_not_broadcast", "Mask sliced by block before it was broadcast to the keys",
        "a mask may hold one flag per query, (..., q_len, 1), and broadcast over every key: "
        "its key axis has size 1, so mask[..., start:start + block_size] is empty from the "
        "second block on. Broadcast the mask to (..., q_len, k_len) first (expand), then "
        "slice each block.",
        (_with(expand_mask=False),),
        probe=lambda case, error: _mask_expanded(case),
    ),
)


def _inputs(seed, batch, q_len, k_len, d_k, d_v, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, q_len, d_k, generator=g, dtype=dtype)
    k = torch.randn(*batch, k_len, d_k, generator=g, dtype=dtype)
    v = torch.randn(*batch, k_len, d_v, generator=g, dtype=dtype)
    return q, k, v


def _case(args, block_size, seed, note=""):
    names = ("query", "key", "value", "mask")
    label = ", ".join(f"{n} {tuple(a.shape)}" for n, a in zip(names, args))
    return Case(args, {"block_size": block_size}, f"{label}, block_size={block_size}{note}",
                names=names, seed=seed)


def _random(seed, batch, q_len, k_len, d_k, d_v, block_size, mask=None, dtype=torch.float32,
            note=""):
    args = _inputs(seed, batch, q_len, k_len, d_k, d_v, dtype)
    return _case(args + (() if mask is None else (mask,)), block_size, seed, note)


def _large_scores(seed, masked):
    """Four keys (one block) point along the queries' common direction, scores above 200;
    the other keys are random, scores near 0. `masked`: those keys are masked (the largest
    scores belong to keys no query may see), else they are the first block."""
    g = torch.Generator().manual_seed(seed)
    u = torch.nn.functional.normalize(torch.randn(8, generator=g), dim=0)
    q = 0.5 * torch.randn(2, 4, 8, generator=g) + 4 * u
    k = torch.randn(2, 10, 8, generator=g)
    v = torch.randn(2, 10, 5, generator=g)
    big = slice(4, 8) if masked else slice(0, 4)
    k[:, big] = 200 * u + 0.5 * torch.randn(2, 4, 8, generator=g)
    if not masked:
        return _case((q, k, v), 4, seed, " (scores above 200 in the first block)")
    mask = torch.ones(1, 10, dtype=torch.bool)
    mask[:, big] = False
    return _case((q, k, v, mask), 4, seed, " (the masked keys have the largest scores)")


def _very_negative_scores(seed, masked):
    """Every key along the queries' opposite direction: every score below -10^5. `masked`:
    the first block of keys masked too (a query's first block fully masked, its later
    scores very negative)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.nn.functional.normalize(torch.randn(8, generator=g), dim=0)
    q = -40 * u + 0.5 * torch.randn(2, 4, 8, generator=g)
    k = 10000 * u + 20 * torch.randn(2, 10, 8, generator=g)
    v = torch.randn(2, 10, 5, generator=g)
    if not masked:
        return _case((q, k, v), 4, seed, " (every score below -10^5)")
    mask = torch.ones(1, 10, dtype=torch.bool)
    mask[:, :4] = False
    return _case((q, k, v, mask), 4, seed,
                 " (every score below -10^5, the first block of keys masked)")


def _lengths_mask(lengths, k_len, left=False):
    """(batch, 1, k_len): padding after (or before, `left`) each sequence's tokens."""
    positions = torch.arange(k_len)
    if left:
        positions = positions.flip(0)
    return (positions < torch.tensor(lengths)[:, None])[:, None, :]


def _empty_rows():
    mask = torch.ones(2, 5, 9, dtype=torch.bool).tril(3)
    mask[0, 2] = False  # one query of the first sequence may see no key
    mask[1] = False  # the second sequence is all padding
    return mask


def _query_flags():
    """(batch, q_len, 1): which queries may attend at all (padding on the queries' side), a
    mask that broadcasts over every key."""
    flags = torch.ones(2, 5, 1, dtype=torch.bool)
    flags[0, 1] = flags[1, 3:] = False
    return flags


GRADIENT = gradient_case(
    _random(9, (2,), 4, 7, 4, 3, 3, mask=torch.ones(4, 7, dtype=torch.bool).tril(2),
            dtype=torch.float64), "query")

# In order: the first case that a mistake changes is where it is named. Mistakes of the loop
# show on the first two; each mask mistake on the first mask case that makes it differ.
CASES = [
    _random(0, (2,), 5, 12, 8, 6, 4),  # 3 whole blocks; each query's max grows across them
    _random(1, (2, 3), 5, 11, 8, 6, 4),  # 4-D; the last block has 3 keys
    _random(2, (2,), 5, 11, 8, 6, 4, mask=torch.ones(5, 11, dtype=torch.bool).tril(4)),
    _random(3, (2,), 6, 10, 8, 6, 3, mask=_lengths_mask([7, 10], 10)),
    _random(4, (2, 2), 5, 11, 8, 6, 4, mask=_lengths_mask([6, 11], 11, left=True)[:, None],
            note=" (left padding: the first blocks of the first sequence are fully masked)"),
    _random(5, (2,), 5, 9, 8, 6, 4, mask=_empty_rows(), note=" (queries that may see no key)"),
    _random(6, (2,), 5, 7, 8, 6, 1),
    _random(7, (3,), 4, 7, 8, 6, 16),
    _large_scores(10, masked=False),
    _large_scores(11, masked=True),
    _random(8, (2,), 5, 9, 8, 6, 4, mask=torch.ones(5, 9, dtype=torch.bool).tril(2),
            dtype=torch.float64),
    GRADIENT,
    # every score below -10^5: a running maximum started (or a mask filled) at a finite
    # "very negative" number is then above every real score
    _very_negative_scores(12, masked=False),
    _very_negative_scores(13, masked=True),
    # a mask that broadcasts over the keys: last, so that any other mistake is named first
    _random(14, (2,), 5, 11, 8, 6, 4, mask=_query_flags(),
            note=" (one flag per query, broadcast over the keys)"),
]

# After every case passes: a long sequence. Its q_len x k_len scores take 64 KiB; tiled
# attention in blocks of 32 keys holds about a tenth of that at once (a quarter with blocks of
# 128, a block_size ignored). Half is the limit.
LONG = (8, 2048, 32, 32)  # q_len, k_len, d, block_size


def _check_memory(item, target):
    q_len, k_len, d, block_size = LONG
    q, k, v = _inputs(12, (1,), q_len, k_len, d, d)
    label = f"query {tuple(q.shape)}, key {tuple(k.shape)}, value {tuple(v.shape)}, block_size={block_size}"
    shapes = {tuple(sorted(t.shape)) for t in (k, v)}  # (1, 2048, 32): no scores' shape
    # a copy of the keys or values (a cast, a .contiguous(), a transposed copy) is not scores:
    # a right solution may compute in float64 on copies of the whole key and value
    memory = ForwardMemory(ignore=lambda t: tuple(sorted(t.shape)) in shapes)

    def run():
        with torch.no_grad(), memory:
            return target(q, k, v, block_size=block_size)

    outcome = call(run)
    fail_on_error(outcome, NAME, label)
    expected = reference(q, k, v, block_size=block_size)
    scores = q_len * k_len * q.element_size()
    if memory.peak >= scores / 2:
        WHOLE_MATRIX.fail(f"  on {label}",
                          detail=f"on {q_len} queries and {k_len:,} keys your code held "
                                 f"{memory.peak / 1024:,.0f} KiB of tensors at once (copies of "
                                 f"key and value aside); the scores "
                                 f"of all keys take {scores / 1024:,.0f} KiB, one block's "
                                 f"{q_len * block_size * 4 / 1024:,.0f} KiB")
    if not same(outcome.value, expected):
        problem = structure_problem(outcome.value, expected, "output")
        if problem:
            problem[0].fail(problem=problem[1], label=label)
        NO_MATCH.fail(what="output", prep="on", label=label, formula="",
                      difference=difference(outcome.value, expected))


# The second hints (check(..., hint=2)), by mistake, for each item (sections: the item's).
_TILED_LADDER = {
    "block_own_max": (None, "on two blocks where the second has the larger scores, print the "
                      "maximum your e^(S - ...) subtracts and the m' your rescaling uses, "
                      "block by block: they must be the same number."),
    "builtin": (None, "write the loop over blocks of keys yourself: scores, running max, "
                "running sum, running output."),
    "no_scaling": (None, "print one block's scores next to chapter 01's scaled scores for "
                   "the same keys."),
    "wrong_scale": (None, "print the number your scores are divided by, next to "
                    "math.sqrt(query.size(-1))."),
    "keepdim": (None, "print the shape of your block's row maximum: (..., q_len, 1)."),
    "key_axes": (None, "on 4-D inputs print the shape of your transposed key block: only "
                 "the last two axes may move."),
    "output_like_query": (None, "with d_v != d_k print the shape you start o with: (..., "
                          "q_len, d_v)."),
    "block_slice_end": (None, "print the start and the end of each block you slice: every "
                        "block ends at start + block_size."),
    "rescale_inverted": (None, "print e^(m - m') after a block whose scores are larger than "
                         "before: it must be below 1."),
    "block_one_short": (None, "print key[..., start:start + block_size, :].size(-2) in your "
                        "loop: block_size, but the last."),
    "max_frozen": (None, "print m after each block on a case whose later blocks hold larger "
                   "scores: it must grow."),
    "nan_from_start": (None, "print m, m' and e^(m - m') after the first block: which "
                       "subtraction gives NaN?"),
    "old_max_in_exp": (None, "print max(e^(S - m)) of each block: never above 1 when you "
                       "subtract the NEW maximum."),
    "value_block": (None, "print the rows of value each block uses next to the keys it "
                    "uses: the same rows."),
    "last_block_dropped": (None, "with k_len = 11 and block_size = 4, print the blocks you "
                           "visit: the last has 3 keys."),
    "no_rescale": (None, "make the second block's scores larger than the first's: print l "
                   "before and after; the old part must shrink by e^(m - m')."),
    "rescaled_twice": (None, "count how many times l and o are multiplied by e^(m - m') per "
                       "block: once."),
    "max_not_updated": (None, "print m after each block: it must never fall, and must "
                        "follow the largest score seen."),
    "normalised_per_block": (None, "print l after each block: it keeps growing; divide only "
                             "once, at the end."),
    "not_divided": (None, "print your output's rows next to chapter 01's: each is l times "
                    "too large."),
    "mask_inverted": (None, "print a block's masked scores next to the mask: -inf where the "
                      "mask is False."),
    "mask_of_first_block": (None, "print the slice of the mask you use for the second block: "
                            "columns block_size to 2 * block_size."),
    "mask_ignored": (None, "print a block's scores after masking: the False keys must be "
                     "-inf."),
    "masked_to_zero": (None, "print e^(S - m') for a masked key: it must be 0."),
    "masked_in_sum": (None, "print l for a query with masked keys next to the sum over its "
                      "allowed keys only."),
    "fully_masked_block_nan": (None, "mask the whole first block for one query and print m, "
                               "m' and S - m' there: -inf - (-inf)."),
    "empty_row": (None, "give one query a mask with no True: print its l and its output."),
    "max_not_subtracted": (None, "print torch.exp(torch.tensor(200.)) in float32."),
    "block_max_only": (None, "print m after each block for one query: with a block of "
                       "smaller scores after a larger one, m must stay."),
    "finite_start": (None, "give a query only scores below -10^5 and print m' after the "
                     "first block, and e^(S - m')."),
    "masked_max": (None, "on the case above print the block's max with and without the "
                   "masked keys."),
    "mask_not_broadcast": (None, "print the shape of each block's slice of the mask: it must "
                           "have the block's keys on its last axis, not 0 or 1."),
    "whole_matrix": (None, "print the shape of the largest scores tensor you make: (..., "
                     "q_len, block_size) at most."),
}
_WINDOW_LADDER = {
    "offsets_swapped": (None, "with size=5 and window=2, print the two masks you combine, one "
                        "at a time: which keys does each keep for query 2, keys 0 to 4?"),
    "window_too_narrow": (None, "print sliding_window_mask(5, 1): each row has 3 True inside "
                          "the band (fewer at the edges)."),
    "window_too_wide": (None, "print sliding_window_mask(5, 0): the diagonal alone."),
    "narrow_positions": (None, "print torch.arange(300).to(torch.int8)[255:258]."),
    "total_width": (None, "print sliding_window_mask(9, 3)[4]: True at keys 1 to 7."),
    "zero_means_none": (None, "print sliding_window_mask(5, 0): the diagonal alone."),
    "causal_excludes_self": (None, "print sliding_window_mask(4, 1, causal=True)[0]: query 0 "
                             "sees key 0."),
    "side_off_by_one": (None, "print sliding_window_mask(5, 1): row 2 is [0, 1, 1, 1, 0], "
                        "as many True after the diagonal as before it."),
    "mask_polarity": (None, "print sliding_window_mask(5, 1)[0, 0]: a query may see itself."),
    "causal_ignored": (None, "print sliding_window_mask(5, 1, causal=True): nothing above the "
                       "diagonal."),
    "wrong_side": (None, "print sliding_window_mask(5, 1, causal=True): row 0 is [1, 0, 0, 0, "
                   "0]."),
    "one_sided": (None, "print sliding_window_mask(5, 1): row 2 is [0, 1, 1, 1, 0]."),
    "one_bound": (None, "print sliding_window_mask(7, 1): row 6 sees keys 5 and 6 only, row 0 "
                  "keys 0 and 1 only."),
    "window_past_size": (None, "try sliding_window_mask(3, 5): every key of every row is "
                         "allowed, as with window 2."),
    "causal_or_window": (None, "print sliding_window_mask(6, 1, causal=True): row 5 sees "
                         "keys 4 and 5 only."),
    "window_dropped": (None, "print sliding_window_mask(6, 1, causal=True): row 5 sees keys "
                       "4 and 5 only."),
    "not_bool": (None, "print sliding_window_mask(3, 1).dtype."),
}
WHOLE_MATRIX = laddered((WHOLE_MATRIX,), _TILED_LADDER)[0]  # reported by `after`


ITEM = Item(
    EXERCISE, NAME, reference, CASES, laddered(MISTAKES, _TILED_LADDER) + (WHOLE_MATRIX,),
    what="output",
    formula="Compare each step with m' = max(m, rowmax(S)), l' = e^(m - m') l + rowsum(e^(S - "
            "m')), o' = e^(m - m') o + e^(S - m') V_B, and o / l at the end.",
    after=(_check_memory,),
    twins=(_with(),),
    section=("10_efficiency_and_scale", "3. Tiled attention: the online softmax"),
)

# ---------------------------------------------------------------------------------------
# sliding_window_mask(size, window, causal=False): local attention's mask (notebook 10, section 8)


def _band(size, window, causal=False, *, reach=None, side="past", combine="and", polarity=True,
          one_side=None, past=0, future=0, bound=None, signs_swapped=False, zero=None,
          positions=None, compare=False):
    """sliding_window_mask with the variations that mistakes make (the defaults give the
    reference): `reach` the largest |i - j| allowed; with causal, the window's `side`
    ("past": j <= i, "future": j >= i, "both": causal ignored) and how the causal mask and the
    band are `combine`d ("and", "or", "causal": the band dropped); `polarity` False: True =
    blocked; `one_side` ("past", "future"): the band on that side only, causal or not;
    `past`, `future`: keys added to (or taken from) the window on that side alone; `bound`
    ("later", "earlier"): only that side of the band bounded, the other side open;
    `signs_swapped`: triu(.., window) & tril(.., -window), the band's two offsets with their
    signs swapped (empty, but for window 0); `zero` "none": a window of 0 read as no window
    (every key, or every past key if causal); side "before": causal keys strictly before
    the query; `positions`: the positions' integer dtype (int8 wraps past 127), `compare`: causal
    told by comparing the positions themselves (j <= i), not by the sign of i - j."""
    i = torch.arange(size) if positions is None else torch.arange(size).to(positions)
    offset = i[:, None] - i[None, :]  # (size, size): query minus key
    band = offset.abs() <= (window if reach is None else reach(window))
    if past or future:
        band = (offset <= window + past) & (-offset <= window + future)
    if bound is not None:  # "later": j <= i + window only; "earlier": j >= i - window only
        band = -offset <= window if bound == "later" else offset <= window
    if signs_swapped:  # j - i >= window and j - i <= -window
        band = (-offset >= window) & (-offset <= -window)
    if one_side is not None:
        band = band & (offset >= 0 if one_side == "past" else offset <= 0)
    if zero == "none" and window == 0:
        band = torch.ones_like(band)
    if causal and side != "both":
        past = {"past": offset >= 0, "future": offset <= 0, "before": offset > 0}[side]
        if compare:
            past = i[None, :] <= i[:, None]
        band = {"and": band & past, "or": band | past, "causal": past}[combine]
    return band if polarity else ~band


def _window_within(case):
    """The case with the window cut to size - 1, which gives the same mask: what code that
    fails on a window wider than the sequence gets right."""
    size, window, causal = case.args
    if window < size:
        return None
    return dataclasses.replace(case, args=(size, max(size - 1, 0), causal))


def _window(**bug):
    return lambda size, window, causal=False: _band(size, window, causal, **bug)


WINDOW_MISTAKES = (
    Mistake(
        "window_too_narrow", "Window one key too narrow",
        "query i may attend key j when |i - j| <= window: `window` keys on each side (only "
        "before it, if causal) AND its own position. A window of 0 sees itself alone. (Mistral's "
        "sliding_window counts its own position in: i - j < window.)",
        (_window(reach=lambda w: w - 1),),
    ),
    Mistake(
        "total_width", "Window read as the total width: {reach} keys on each side",
        "window is the number of keys on EACH side: query i may attend key j when |i - j| <= "
        "window (2 * window + 1 keys in all without causal). Longformer's attention_window is "
        "the total width, window // 2 on each side; here it is not halved.",
        (member(_window(reach=lambda w: w // 2), reach="window // 2"),
         member(_window(reach=lambda w: (w - 1) // 2), reach="(window - 1) // 2")),
    ),
    Mistake(
        "window_too_wide", "Window one key too wide",
        "query i may attend key j when |i - j| <= window, not window + 1: a window of 0 sees "
        "itself alone.",
        (_window(reach=lambda w: w + 1),),
    ),
    Mistake(
        "side_off_by_one", "Window one key too {how} on the {side} side only",
        "query i may attend key j when i - window <= j <= i + window: as many keys after it "
        "as before it. In a loop, a slice's end is exclusive: mask[i, lo:hi] stops at hi - 1, "
        "so the last key, i + window, needs hi = i + window + 1.",
        tuple(member(_window(**{side: delta}), how=how, side=name)
              for side, name in (("future", "right (later keys)"), ("past", "left (earlier keys)"))
              for delta, how in ((-1, "narrow"), (1, "wide"))),
    ),
    Mistake(
        "zero_means_none", "A window of 0 read as no window",
        "window = 0 is a window like the others: each query sees its own position alone "
        "(|i - j| <= 0), not every key. Hugging Face's sliding_window=None (or 0 in some "
        "configs) means full attention; here no special case is needed.",
        (_window(zero="none"),),
    ),
    Mistake(
        "causal_excludes_self", "Causal window without the query itself",
        "with causal=True query i sees keys i - window <= j <= i: j = i included (its own "
        "token), so that the first query sees at least itself. j < i leaves it out.",
        (_window(side="before"),),
    ),
    Mistake(
        "mask_polarity", "Window mask polarity inverted",
        "here True means 'may attend' (as in F.scaled_dot_product_attention): True inside the "
        "window, False outside it.",
        (_window(polarity=False),),
    ),
    Mistake(
        "causal_ignored", "causal=True ignored: the window looks ahead too",
        "with causal=True query i may attend only keys j <= i: the band AND the lower "
        "triangle.",
        (_window(side="both"),),
    ),
    Mistake(
        "wrong_side", "Causal window on the wrong side: it sees the next keys",
        "rows are queries, columns keys; a causal query i sees itself and the `window` keys "
        "BEFORE it, i - window <= j <= i: the band's lower half.",
        (_window(side="future"),),
    ),
    Mistake(
        "one_sided", "Window on one side only",
        "without causal, query i sees `window` keys on EACH side, i - window <= j <= i + "
        "window: tril(.., window) keeps j <= i + window and triu(.., -window) keeps j >= "
        "i - window; both offsets, with opposite signs, make the band.",
        (_window(one_side="future"), _window(one_side="past")),
    ),
    Mistake(
        "offsets_swapped", "Band's diagonal offsets with their signs swapped: the window is empty",
        "triu(.., k) keeps the keys j >= i + k and tril(.., k) the keys j <= i + k. With the "
        "offsets' signs swapped the two keep no key in common (but the diagonal, when window is "
        "0): which of the two bounds the earlier keys, i - window <= j, and which the later?",
        (_window(signs_swapped=True),),
    ),
    Mistake(
        "one_bound", "Window bounded on one side only: every {open} key allowed",
        "query i may attend key j when i - window <= j <= i + window: two bounds. tril(.., "
        "window) alone bounds the later keys only (j <= i + window) and lets every earlier key "
        "through; triu(.., -window) alone does the opposite: the band needs both.",
        (member(_window(bound="later"), open="earlier"),
         member(_window(bound="earlier"), open="later")),
    ),
    Mistake(
        "window_past_size", "Fails when the window is wider than the sequence",
        "window may exceed size (the docstring allows it): every key is then within the "
        "window. A diagonal, a slice or a torch.ones(size - k) with k >= size has a negative "
        "or empty length: keep the offsets within the sequence.",
        probe=lambda case, error: _window_within(case),
    ),
    Mistake(
        "causal_or_window", "Causal mask and window combined with OR",
        "a key must be in the window AND not in the future: combine the two masks with & (a "
        "key that passes either one, |, lets every past key and the next `window` keys "
        "through).",
        (_window(combine="or"),),
    ),
    Mistake(
        "window_dropped", "Window dropped when causal: every past key allowed",
        "with causal=True the window still applies: query i sees keys i - window to i, not "
        "all the keys before it.",
        (_window(combine="causal"),),
    ),
    Mistake(
        "narrow_positions", "Positions held in {dtype}: past {top} they wrap around",
        "{dtype} holds {values} only: larger positions wrap around (256 becomes 0), and so does "
        "i - j: a key 256 positions away looks like the query itself. Keep the positions in "
        "torch.arange's own int64.",
        tuple(member(_window(positions=d, compare=compare), dtype=str(d).removeprefix("torch."),
                     top=t, values=v)
              for d, t, v in ((torch.int8, 127, "-128 ... 127"), (torch.uint8, 255, "0 ... 255"))
              for compare in (False, True)),
    ),
    Mistake(
        "not_bool", "Window mask is not boolean",
        "masks in this course are bool tensors, True = may attend (dtype=torch.bool, or .bool()).",
        tuple((lambda size, window, causal=False, dtype=dtype: _band(size, window, causal).to(dtype))
              for dtype in (torch.float32, torch.int64, torch.uint8)),
    ),
)


def _window_case(size, window, causal):
    return Case((size, window, causal), label=f"size={size}, window={window}, causal={causal}",
                seed=0)


WINDOW = Item(
    EXERCISE, "sliding_window_mask", sliding_window_mask,
    [_window_case(*args) for args in ((7, 3, False), (7, 2, True), (6, 0, False), (6, 0, True),
                                      (4, 9, True), (1, 3, False), (300, 3, True))],
    laddered(WINDOW_MISTAKES, _WINDOW_LADDER), what="mask", prep="for",
    show=lambda case, result, expected: f" you returned\n{_draw(result)}",
    formula="Query i may attend key j when |i - j| <= window, and (if causal) j <= i.",
    twins=(_window(),),
    shifts=((0, "size", "length"), (1, "window", "count")),
    section=("10_efficiency_and_scale", "8. Long sequences: local windows, sparse patterns, low rank"),
)

ITEMS = (ITEM, WINDOW)
