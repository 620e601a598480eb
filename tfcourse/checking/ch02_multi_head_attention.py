"""Checks for exercise 02: multi-head attention, and its catalogue of mistakes."""

import math
from dataclasses import dataclass
from itertools import permutations

import torch

from ..masks import causal_mask
from ..multi_head import MultiHeadAttention as Reference
from ..multi_head import merge_heads, split_heads
from .ch01_attention import FULLY_MASKED
from .core import (
    CheckFailure,
    Mistake,
    call,
    checks,
    close,
    describe,
    difference,
    fail_on_error,
    first_match,
    tensor_problem,
)

# ---------------------------------------------------------------------------------------
# Wrong ways to split and merge heads


def _split_without_transpose(x, n_heads):
    """A single view to (batch, heads, seq, d_head): each head gets rows of several positions."""
    batch, seq, d_model = x.shape
    return x.reshape(batch, n_heads, seq, d_model // n_heads)


def _split_heads_last(x, n_heads):
    """(batch, seq, heads, d_head): the transpose forgotten altogether."""
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, n_heads, d_model // n_heads)


def _split_strided(x, n_heads):
    """Head i gets the features i, i + heads, i + 2 heads, ... instead of a contiguous slice."""
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, d_model // n_heads, n_heads).permute(0, 3, 1, 2)


def _merge_without_transpose(x):
    """(batch, heads, seq, d_head) viewed straight to (batch, seq, d_model): positions mixed."""
    batch, heads, seq, d_head = x.shape
    return x.reshape(batch, seq, heads * d_head)


def _merge_feature_major(x):
    """The last two axes swapped before the reshape: features and positions mixed."""
    batch, heads, seq, d_head = x.shape
    return x.transpose(2, 3).reshape(batch, seq, heads * d_head)


def _merge_strided(x):
    """Heads interleaved feature by feature instead of concatenated."""
    batch, heads, seq, d_head = x.shape
    return x.permute(0, 2, 3, 1).reshape(batch, seq, heads * d_head)


SPLIT_WITHOUT_TRANSPOSE = Mistake(
    "Heads split by view without the transpose",
    "view (batch, seq, d_model) as (batch, seq, heads, d_head) first, then swap axes 1 and 2. "
    "A single view to (batch, heads, seq, d_head) fills each head with pieces of several "
    "positions: positions get mixed.",
    (_split_without_transpose, _split_heads_last),
)
SPLIT_STRIDED = Mistake(
    "Head features taken with a stride",
    "head i must get the contiguous features i * d_head ... (i + 1) * d_head - 1: cut the last "
    "axis as (heads, d_head), not (d_head, heads).",
    (_split_strided,),
)
MERGE_ORDER = Mistake(
    "Heads merged in the wrong order",
    "first bring (batch, heads, seq, d_head) back to (batch, seq, heads, d_head) (swap axes 1 "
    "and 2), then reshape to (batch, seq, d_model): each position concatenates its own heads, "
    "head 0 first.",
    (_merge_without_transpose, _merge_feature_major, _merge_strided),
)
SPLIT_MISTAKES = (SPLIT_WITHOUT_TRANSPOSE, SPLIT_STRIDED)
MERGE_MISTAKES = (MERGE_ORDER,)


# ---------------------------------------------------------------------------------------
# Wrong ways to write MultiHeadAttention.forward


def _forward(mha, query, key, value, mask=None, *, split=split_heads, merge=merge_heads,
             roles="qkv", scale=lambda mha: mha.d_head, adapt_mask=None, fill=None,
             empty_rows=True, project=True, average=False):
    """The reference's forward, with the variations that mistakes make."""
    projection = {"q": mha.w_q, "k": mha.w_k, "v": mha.w_v}
    q, k, v = (split(projection[r](x), mha.n_heads) for r, x in zip(roles, (query, key, value)))
    scores = q @ k.transpose(-2, -1) / math.sqrt(scale(mha))  # (batch, heads, q_len, k_len)
    if mask is not None:
        mask = mask if adapt_mask is None else adapt_mask(mask, q)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min if fill is None else fill)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None and empty_rows:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    out = merge(weights @ v)  # (batch, q_len, d_model)
    return (mha.w_o(out) if project else out), (weights.mean(1) if average else weights)


def _variant(**changes):
    return lambda mha, query, key, value, mask=None: _forward(mha, query, key, value, mask, **changes)


def _mask_repeated(mask, q):
    """The mask flattened to (batch * heads, ...) with repeat: batch b, head h gets the mask
    of batch (b * heads + h) % batch."""
    batch, heads, q_len, _ = q.shape
    per_batch = mask.expand(batch, 1, q_len, mask.size(-1))[:, 0]  # (batch, q_len, k_len)
    return per_batch.repeat(heads, 1, 1).view(batch, heads, q_len, -1)


def _same_for(mistake, *computes):
    """The same mistake, recognised in the output of the whole module."""
    return Mistake(mistake.title, mistake.hint, computes)


MASK_HEADS = Mistake(
    "Mask not broadcast over heads",
    "the mask, e.g. (batch, 1, 1, k_len) or (q_len, k_len), already broadcasts to the scores' "
    "(batch, heads, q_len, k_len); the heads axis is axis 1. Inserting an axis elsewhere, or "
    "repeating the mask for (batch * heads), pairs masks with the wrong heads or sequences.",
    (_variant(adapt_mask=_mask_repeated), _variant(adapt_mask=lambda m, q: m.unsqueeze(1))),
)
KEY_LENGTH = Mistake(
    "Works only when key and value are as long as the query",
    "in cross-attention k_len differs from q_len: split key and value with their own length "
    "(or -1 in view), not the query's.",
)
WEIGHTS_NOT_RETURNED = Mistake(
    "Weights not returned",
    "with need_weights=True return (output, weights), the weights of every head "
    "(batch, heads, q_len, k_len).",
)
WEIGHTS_NOT_ASKED = Mistake(
    "Weights returned when not asked for",
    "with need_weights=False (the default) return (output, None), as the reference does.",
)
RENAMED = Mistake(
    "Parameters renamed",
    "the checks copy the reference's weights into w_q, w_k, w_v and w_o by name: keep "
    "__init__ as given and write only forward.",
)
MISTAKES = (
    _same_for(SPLIT_WITHOUT_TRANSPOSE, _variant(split=_split_without_transpose)),
    _same_for(SPLIT_STRIDED, _variant(split=_split_strided)),
    _same_for(MERGE_ORDER, _variant(merge=_merge_without_transpose), _variant(merge=_merge_strided)),
    Mistake(
        "Output projection missing",
        "MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O: after merging the heads, apply "
        "self.w_o, which mixes what the heads found.",
        (_variant(project=False),),
    ),
    Mistake(
        "Scaled by sqrt(d_model) instead of sqrt(d_head)",
        "each head compares queries and keys of d_head = d_model / n_heads features, so its "
        "scores are divided by sqrt(d_head). The input's width, query.size(-1), is d_model: "
        "take the width after the split.",
        (_variant(scale=lambda mha: mha.d_head * mha.n_heads),),
    ),
    Mistake(
        "Scores not scaled",
        "divide each head's Q K^T by sqrt(d_head), as in chapter 01.",
        (_variant(scale=lambda mha: 1.0),),
    ),
    Mistake(
        "Query, key and value mixed up",
        "queries are w_q(query), keys w_k(key), values w_v(value). In cross-attention these "
        "are three different tensors: keys and values do not come from the query.",
        tuple(_variant(roles="".join(r)) for r in permutations("qkv") if r != tuple("qkv"))
        + (
            lambda mha, q, k, v, m=None: _forward(mha, q, q, q, m),
            lambda mha, q, k, v, m=None: _forward(mha, q, k, k, m),
            lambda mha, q, k, v, m=None: _forward(mha, q, v, k, m),
        ),
    ),
    Mistake(
        "Mask polarity inverted",
        "True means 'may attend' here, as in F.scaled_dot_product_attention (torch.nn."
        "MultiheadAttention takes the opposite): pass the mask on without inverting it.",
        (_variant(adapt_mask=lambda m, q: ~m),),
    ),
    Mistake(
        "Mask ignored",
        "your output is the same as with no mask: pass `mask` on to the attention.",
        (lambda mha, q, k, v, m=None: _forward(mha, q, k, v),),
    ),
    MASK_HEADS,
    Mistake(
        "Weights averaged over heads",
        "return the weights of every head, (batch, heads, q_len, k_len), not their mean "
        "(torch.nn.MultiheadAttention averages by default; the reference does not).",
        (_variant(average=True),),
    ),
    _same_for(
        FULLY_MASKED,
        _variant(fill=float("-inf"), empty_rows=False),
        _variant(fill=-1e9, empty_rows=False),
    ),
)


# ---------------------------------------------------------------------------------------
# Cases


def _lengths_mask(lengths, k_len):
    """(batch, 1, 1, k_len): keys beyond each sequence's length are padding."""
    return (torch.arange(k_len) < torch.tensor(lengths)[:, None])[:, None, None, :]


@dataclass
class Case:
    seed: int
    d_model: int
    n_heads: int
    batch: int
    q_len: int
    k_len: int = None  # None: self-attention (key and value are the query)
    mask: torch.Tensor = None
    bias: bool = True

    def tensors(self):
        g = torch.Generator().manual_seed(self.seed)
        query = torch.randn(self.batch, self.q_len, self.d_model, generator=g)
        if self.k_len is None:
            return query, query, query, self.mask
        key = torch.randn(self.batch, self.k_len, self.d_model, generator=g)
        value = torch.randn(self.batch, self.k_len, self.d_model, generator=g)
        return query, key, value, self.mask

    def modules(self, cls):
        """The reference and the learner's module (built by `call`), with the same weights."""
        torch.manual_seed(self.seed)
        reference = Reference(self.d_model, self.n_heads, bias=self.bias).eval()
        torch.manual_seed(self.seed)
        built = call(cls, self.d_model, self.n_heads, bias=self.bias)
        fail_on_error(built, "MultiHeadAttention", f"d_model={self.d_model}, n_heads={self.n_heads}")
        try:
            built.value.load_state_dict(reference.state_dict())
            built.value.eval()
        except Exception as error:
            RENAMED.fail(f"  {str(error).strip().splitlines()[-1].strip()}")
        return reference, built.value


# Unmasked cases first (self, then cross), then masks whose rows mix True and False:
# padding (batch, 1, 1, k_len); causal (q_len, k_len) with q_len == heads, so that a mask
# unsqueezed on axis 1 still broadcasts (to the wrong heads); padding & causal; and last a
# sequence made only of padding.
MHA_CASES = [
    Case(0, d_model=12, n_heads=3, batch=2, q_len=5),
    Case(1, d_model=8, n_heads=2, batch=3, q_len=4, bias=False),
    Case(2, d_model=12, n_heads=3, batch=2, q_len=3, k_len=6),
    Case(3, d_model=12, n_heads=3, batch=2, q_len=5, mask=_lengths_mask([5, 3], 5)),
    Case(4, d_model=16, n_heads=4, batch=2, q_len=4, mask=causal_mask(4)),
    Case(5, d_model=8, n_heads=2, batch=3, q_len=3, k_len=6, mask=_lengths_mask([6, 4, 2], 6)),
    Case(6, d_model=12, n_heads=3, batch=2, q_len=5, mask=_lengths_mask([5, 2], 5) & causal_mask(5)),
    Case(7, d_model=8, n_heads=2, batch=2, q_len=3, k_len=4, mask=_lengths_mask([0, 3], 4)),
]


def _randn(seed, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


SPLIT_CASES = [  # (x (batch, seq, d_model), n_heads)
    (_randn(10, 2, 5, 12), 3),
    (_randn(11, 1, 7, 8), 4),
    (_randn(12, 3, 4, 6, dtype=torch.float64), 2),
]
MERGE_CASES = [_randn(20, 2, 3, 5, 4), _randn(21, 1, 4, 7, 2), _randn(22, 3, 2, 4, 3, dtype=torch.float64)]


# ---------------------------------------------------------------------------------------
# Checks


def _compare_tensor(name, fn, args, inputs, reference, mistakes):
    """Call fn(*clones of args); fail naming the mistake unless it equals reference(*args)."""
    given = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    outcome = call(fn, *given)
    fail_on_error(outcome, name, inputs)
    if not all(torch.equal(a, b) for a, b in zip(given, args) if isinstance(a, torch.Tensor)):
        raise CheckFailure(
            f"Input modified in place: {name} changed the caller's tensor. Use out-of-place "
            "operations (view, transpose, reshape) and return a new tensor."
        )
    expected = reference(*args)
    if close(outcome.value, expected):
        return
    mistake = first_match(mistakes, outcome.value, *args, same=close)
    if mistake is not None:
        mistake.fail(f"  on {inputs}")
    problem = tensor_problem(outcome.value, expected, "the result")
    if problem:
        raise CheckFailure(f"Wrong result of {name}: {problem} on {inputs}")
    raise CheckFailure(
        f"Wrong result of {name} on {inputs}, and no common mistake matches: "
        f"{difference(outcome.value, expected)}."
    )


@checks("split_heads")
def check_split_heads(fn):
    for x, n_heads in SPLIT_CASES:
        _compare_tensor("split_heads", fn, (x, n_heads), describe(x=x, n_heads=n_heads),
                        split_heads, SPLIT_MISTAKES)


@checks("merge_heads")
def check_merge_heads(fn):
    for x in MERGE_CASES:
        _compare_tensor("merge_heads", fn, (x,), describe(x=x), merge_heads, MERGE_MISTAKES)


def _same(actual, predicted):
    return (
        isinstance(actual, (tuple, list))
        and len(actual) == 2
        and close(actual[0], predicted[0])
        and close(actual[1], predicted[1])
    )


@checks("MultiHeadAttention")
def check_multi_head_attention(cls):
    """Copy the reference's weights into the learner's module and compare on MHA_CASES."""
    name = "MultiHeadAttention"
    passed = {"self": False, "cross": False}  # a case of each kind without a mask passed
    for case in MHA_CASES:
        reference, module = case.modules(cls)
        query, key, value, mask = args = case.tensors()
        inputs = describe(query=query, key=key, value=value, mask=mask)
        inputs += f" (d_model={case.d_model}, n_heads={case.n_heads})"
        with torch.no_grad():  # first, so torch's one-off start-up is not timed as learner code
            expected = reference(*args, need_weights=True)
        given = [a.clone() if a is not None else None for a in args]
        outcome = call(module, *given, need_weights=True)
        unmasked_passed = passed["self"] and passed["cross"]
        if outcome.error is not None and not isinstance(outcome.error, NotImplementedError):
            if mask is not None and unmasked_passed:
                MASK_HEADS.fail(_raised(outcome, inputs))
            if case.k_len is not None and passed["self"] and not passed["cross"]:
                KEY_LENGTH.fail(_raised(outcome, inputs))
        fail_on_error(outcome, name, inputs)
        changed = [n for n, a, b in zip(("query", "key", "value", "mask"), given, args)
                   if a is not None and not torch.equal(a, b)]
        if changed:
            raise CheckFailure(
                f"Input modified in place: forward changed the caller's {' and '.join(changed)}. "
                "Use out-of-place operations (x = x / s, not x /= s; masked_fill, not masked_fill_)."
            )
        result = outcome.value
        if _same(result, expected):
            passed["self" if case.k_len is None else "cross"] = True
            continue
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            kind = type(result).__name__ if result is not None else "None"
            raise CheckFailure(
                f"{name} should return a tuple (output, weights), got {kind} on {inputs}"
                + ("\n  did you forget `return output, weights`?" if result is None else "")
            )
        mistake = first_match(MISTAKES, result, reference, *args, same=_same)
        if mistake is not None:
            mistake.fail(f"  on {inputs}")
        if close(result[0], expected[0]) and result[1] is None:
            WEIGHTS_NOT_RETURNED.fail(f"  on {inputs} with need_weights=True it returned None")
        for value_, want, what in zip(result, expected, ("output", "weights")):
            problem = tensor_problem(value_, want, what)
            if problem and mask is not None and unmasked_passed:
                MASK_HEADS.fail(f"  on {inputs}: {problem}")
            if problem:
                raise CheckFailure(f"Wrong {what}: {problem} on {inputs}")
        what = "output" if not close(result[0], expected[0]) else "weights"
        got, want = (result[0], expected[0]) if what == "output" else (result[1], expected[1])
        raise CheckFailure(
            f"Wrong {what} on {inputs}, and no common mistake matches: {difference(got, want)}. "
            "Compare each step with Concat(head_1, ..., head_h) W^O."
        )
    _check_weights_only_when_asked(cls)


def _raised(outcome, inputs):
    message = str(outcome.error).strip().splitlines()
    return f"  on {inputs} it raised {type(outcome.error).__name__}: {message[0] if message else ''}"


def _check_weights_only_when_asked(cls):
    case = MHA_CASES[0]
    reference, module = case.modules(cls)
    query, key, value, _ = case.tensors()
    outcome = call(module, query.clone(), key.clone(), value.clone())
    fail_on_error(outcome, "MultiHeadAttention", describe(query=query, key=key, value=value))
    result = outcome.value
    if not (isinstance(result, (tuple, list)) and len(result) == 2 and result[1] is None):
        WEIGHTS_NOT_ASKED.fail(f"  on {describe(query=query, key=key, value=value)}")
