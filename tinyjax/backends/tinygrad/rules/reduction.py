"""Reductions (reduce_sum, _prod, _max, _min, _and, _or, _xor, reduce with a custom body, argmax, argmin) and the
cumulative ops (cumsum, cumprod, cummax, cummin, cumlogsumexp), with XLA's results on NaN, signed zeros, empty axes
and integer wrap-around.

An order key carries most of it: floats compared as integers (their bits, with the magnitude bits of negatives
flipped) order -0.0 below +0.0 as XLA's max/min do, and let NaN sort above or below everything, so it propagates.
The cumulative ops use tinygrad's windowed scans (cummax/cummin on the order key); reverse ones scan the flipped axis,
except cumprod, whose windows start at each element as XLA's. cumlogsumexp follows XLA's reduce_window step by step.
"""
import math
import operator

import numpy as np
from tinygrad import Tensor, dtypes

from tinyjax.backends.tinygrad.numerics import floatbits as fb
from tinyjax.backends.tinygrad.numerics import floatmath as fm
from tinyjax.backends.tinygrad.numerics.rounding import ROUNDED, rounded
from tinyjax.backends.tinygrad.table import register, tg_dtype



# --- reductions over `axes`

_WINDOW = 32  # XLA's CPU tree reduction rewriter: reduced dimensions of 32 or more reduce in windows of 32
_LONGEST_FOLD = 64  # the most elements one output of a level folds here (in one kernel, one after another)


def _levels(shape, axes):
  """XLA's CPU reduction of `axes` as its tree reduction rewriter splits it: per level, each reduced axis's
  (padding, window); the last level's windows are the whole axes (all under 32)."""
  levels = []
  while True:
    sizes = {a: shape[a] for a in axes}
    if all(n < _WINDOW for n in sizes.values()):
      return [*levels, {a: ((0, 0), n) for a, n in sizes.items()}]
    padding = {a: -(-n // _WINDOW) * _WINDOW - n if n >= _WINDOW else 0 for a, n in sizes.items()}
    levels.append({a: ((p // 2, p - p // 2), _WINDOW if sizes[a] >= _WINDOW else sizes[a]) for a, p in padding.items()})
    shape = [-(-n // _WINDOW) if a in axes and n >= _WINDOW else 1 if a in axes else n for a, n in enumerate(shape)]


def tree_fold(x, axes, pad, fold):
  """A reduction over `axes` in the order of XLA's CPU (its tree reduction rewriter, _levels): per level, the reduced
  axes padded (`pad(x, padding)`, padding a (low, high) pair per axis of x, to be filled with the identity) and split
  into windows, and `fold(windows)` reducing the last axis of `windows`, which holds each window's elements in
  row-major order (the kept axes and the windows' indices before it). Axes of x after the reduced ones (complex
  numbers' pairs) stay last and are kept."""
  levels = _levels(x.shape, axes)
  for depth, level in enumerate(levels):
    padding = tuple(level[a][0] if a in level else (0, 0) for a in range(x.ndim))
    if any(lo or hi for lo, hi in padding):  # NB: padded in a kernel of its own: the fold's many loads, each gated, took seconds to rewrite
      x = pad(x, padding).contiguous()
    split, outer, inner = [], [], []  # each reduced axis becomes (windows, window): windows stays, window is folded
    for a, n in enumerate(x.shape):
      window = level[a][1] if a in level else None
      split += [n // window, window] if window else [n]
      outer.append(len(split) - (2 if window else 1))
      inner += [len(split) - 1] if window else []
    windows = x.reshape(split).permute(*outer, *inner)
    total = fold(windows.reshape(*windows.shape[:len(outer)], -1))
    # a kernel per level: a level's expression inlined into each of the next level's loads would grow with both
    x = total if depth == len(levels) - 1 else total.contiguous()
  return x.reshape([n for a, n in enumerate(x.shape) if a not in axes])


def _rounded_fold(x, axes, combine, identity, subnormals_exact=False):
  """A float16 or bfloat16 sum or product over `axes` as XLA's CPU computes it, bit for bit: XLA splits a reduced
  axis of 32 or more into windows of 32 (padded evenly at both ends), folds each window's elements in row-major order
  from the initial value, rounding each partial result to the dtype (60000 + 60000 - 60000 is inf in float16;
  1 + 2**-8 + 2**-8 is 1 in bfloat16), and reduces the windows' results the same way until every axis is under 32.
  tinygrad accumulates in float32, or in a C `__fp16` that its chain of unrolled additions computes in float.

  NB: None where one output folds more than _LONGEST_FOLD elements in a level (several reduced axes: up to 32 * 31 *
  ... in a row): a kernel of hundreds of roundings takes seconds to build; those sums are rounded once."""
  if any(math.prod(window for _, window in level.values()) > _LONGEST_FOLD for level in _levels(x.shape, axes)):
    return None

  def fold(windows):
    total = Tensor.full(windows.shape[:-1], identity, dtype=x.dtype, device=x.device)
    for i in range(windows.shape[-1]):
      total = rounded(combine(total.cast(dtypes.float32), windows[..., i].cast(dtypes.float32)).cast(x.dtype),
                      subnormals_exact)
    return total
  return tree_fold(x, axes, lambda x, padding: x.pad(padding, value=identity), fold)


def _sum(x, axes):
  # NB: tinygrad accumulates small ints and float16 in a wider dtype; XLA accumulates in the operand's dtype
  total = _rounded_fold(x, axes, lambda a, b: a + b, 0.0, subnormals_exact=True) if x.dtype in ROUNDED else None
  if total is None:  # NB: a 16-bit float here is summed in float32 (tinygrad's bfloat16 accumulator fails to compile)
    total = x.cast(dtypes.float32).sum(axes) if x.dtype in ROUNDED else x.sum(axes, dtype=x.dtype)
  return fb.positive_zero(total) if math.prod(x.shape[a] for a in axes) > 1 else total


def _prod(x, axes):
  total = _rounded_fold(x, axes, lambda a, b: a * b, 1.0) if x.dtype in ROUNDED else None
  return (x.cast(dtypes.float32) if x.dtype in ROUNDED else x).prod(axes) if total is None else total


def _max_or_min(pick: str):
  """reduce_max / reduce_min: XLA's (fb.max_or_min) for floats."""
  def reduce(x, axes):
    return fb.max_or_min(x, axes, largest=pick == "max") if dtypes.is_float(x.dtype) else getattr(x, pick)(axes)
  return reduce


def _bitwise(reduce_bits):
  """reduce_and / _or / _xor: each bit position reduced on its own (tinygrad reduces only by add, mul and max)."""
  def reduce(x, axes):
    width = 1 if x.dtype == dtypes.bool else 8 * x.dtype.itemsize
    unsigned = dtypes.uint8 if x.dtype == dtypes.bool else fb.UINT[x.dtype.itemsize]
    shifts = Tensor.arange(width, dtype=unsigned)
    bits = ((x.cast(unsigned) if x.dtype == dtypes.bool else x.bitcast(unsigned)).unsqueeze(-1) >> shifts) & 1
    joined = (reduce_bits(bits, axes) << shifts).sum(-1, dtype=unsigned)  # the bits are disjoint: sum is or
    return joined.cast(dtypes.bool) if x.dtype == dtypes.bool else joined.bitcast(x.dtype)
  return reduce


def _reduction(reduce, identity):
  """A reduce_* rule: `reduce(x, axes)` on non-empty axes, `identity(dtype)` filling the result of empty ones."""
  def rule(ctx, x, *, axes, out_sharding=None):
    if not axes:
      return x
    dtype = tg_dtype(ctx.out_aval.dtype)
    if math.prod(x.shape[a] for a in axes) == 0:
      return Tensor.full(ctx.out_aval.shape, identity(dtype), dtype=dtype, device=ctx.device)
    return reduce(x, tuple(axes)).cast(dtype)
  return rule


def _all_ones(dtype):
  return True if dtype == dtypes.bool else dtype.max if dtypes.is_unsigned(dtype) else -1


register("reduce_sum")(_reduction(_sum, lambda dtype: 0))
register("reduce_prod")(_reduction(_prod, lambda dtype: 1))
register("reduce_max")(_reduction(_max_or_min("max"), lambda dtype: dtype.min))
register("reduce_min")(_reduction(_max_or_min("min"), lambda dtype: dtype.max))
register("reduce_and")(_reduction(_bitwise(lambda bits, axes: bits.min(axes)), _all_ones))
register("reduce_or")(_reduction(_bitwise(lambda bits, axes: bits.max(axes)), lambda dtype: 0))
register("reduce_xor")(_reduction(_bitwise(lambda bits, axes: bits.sum(axes, dtype=bits.dtype) & 1), lambda dtype: 0))


@register("reduce")
def _reduce(ctx, *operands_and_inits, computation, jaxpr, dimensions):
  """lax.reduce with a custom body: a pairwise tree of body applications over the reduced elements, padded to a power
  of two with the init values, which the result is folded into last. XLA leaves the order unspecified (the body
  must be associative, the init values its identities); its CPU loop runs in sequence."""
  count = len(operands_and_inits) // 2
  operands, inits = operands_and_inits[:count], operands_and_inits[count:]
  if not dimensions:
    return list(operands)
  kept = [d for d in range(operands[0].ndim) if d not in dimensions]
  kept_shape = tuple(operands[0].shape[d] for d in kept)
  size = math.prod(operands[0].shape[d] for d in dimensions)
  rows = [x.permute((*dimensions, *kept)).reshape(size, *kept_shape) for x in operands]
  width = 1 << max(size - 1, 0).bit_length()
  if width > size:
    edges = ((0, width - size),) + (None,) * len(kept)
    inside = Tensor.full((size,) + (1,) * len(kept), True, buffer=False).pad(edges)
    rows = [inside.where(row.pad(edges), init) for row, init in zip(rows, inits)]
  while width > 1:
    width //= 2
    # NB: realized per level: fused, level k would recompute its input 2**k times
    rows = [row.contiguous() for row in ctx.backend.run_jaxpr(jaxpr, *(r[:width] for r in rows),
                                                              *(r[width:] for r in rows))]
  return ctx.backend.run_jaxpr(jaxpr, *inits, *(row.reshape(kept_shape) for row in rows))


def _arg_max_or_min(pick: str):
  """argmax / argmin: the first index of the extreme value, or of the first NaN (XLA)."""
  def rule(ctx, x, *, axes, index_dtype):
    # NB: JAX's eager shard_map binds the body's argmax with `axes` one NumPy integer, where a trace gives a tuple
    axis, = np.atleast_1d(axes).tolist()
    # NB: XLA's argmax takes -0.0 and +0.0 as a tie (the first wins), though its max orders them
    key = fb.order_key(fb.positive_zero(x), nan_largest=pick == "max")
    size = x.shape[axis]
    positions = Tensor.arange(size).reshape([size if d == axis else 1 for d in range(x.ndim)])
    first = (key == getattr(key, pick)(axis, keepdim=True)).where(positions, size).min(axis)
    return first.cast(tg_dtype(index_dtype))
  return rule


register("argmax")(_arg_max_or_min("max"))
register("argmin")(_arg_max_or_min("min"))


# --- cumulative ops along `axis`

def _cumulative(scan):
  """A cum* rule from `scan(x, axis)`, a forward inclusive scan; reverse scans the flipped axis.

  NB: XLA reduces each window from its start, so in reverse its order differs from the flipped scan's: rounding
  may differ by an ulp (a reverse cumprod is XLA's own: _suffix_products)."""
  def rule(ctx, x, *, axis, reverse):
    if not reverse:
      return scan(x, axis)
    return scan(x.flip(axis), axis).flip(axis)
  return rule


_WINDOWED = 512  # NB: the longest axis tinygrad's own cumulative ops scan as one window per element (_split_cumalu)


def _suffix_products(x, axis):
  """Reverse cumprod as XLA's: a window starting at each element, multiplied from there (x[i] * x[i+1] * ...), so
  that a 0 comes before what overflows later in the suffix (0 * 0 * -2 * -3e38 is 0).

  NB: the flipped scan multiplies from the end, where an overflowed inf may meet the 0 (NaN). Windows cost n**2: an
  axis longer than tinygrad's windowed scans takes the flipped scan (tinygrad's two stages, in XLA's order only
  where no inf meets a 0)."""
  n = x.shape[axis]
  if n == 0 or n > _WINDOWED:
    return x.flip(axis).cumprod(axis).flip(axis)
  ones_after = x.pad(tuple((0, n - 1) if d == axis else None for d in range(x.ndim)), value=1)
  return ones_after.unfold(axis, n, 1).prod(-1)  # unfold puts the window last


@register("cumprod")
def _cumprod(ctx, x, *, axis, reverse):
  return _suffix_products(x, axis) if reverse else x.cumprod(axis)


def _cumsum(x, axis):
  # NB: tinygrad's cumsum accumulates small ints in int32 (cast back: the same wrap-around as XLA's)
  total = x.cumsum(axis).cast(x.dtype)
  return fb.positive_zero(total) if x.shape[axis] > 1 else total  # XLA passes a length-1 axis through


def _cumulative_max_or_min(pick: str):
  """cummax / cummin on the order key (see _max_or_min)."""
  def scan(x, axis):
    key = fb.order_key(x, nan_largest=pick == "max")
    return fb.from_order_key(getattr(key, "cum" + pick)(axis)[0], x.dtype)  # [0]: the values (the indices stay unbuilt)
  return scan


register("cumsum")(_cumulative(_cumsum))
register("cummax")(_cumulative(_cumulative_max_or_min("max")))
register("cummin")(_cumulative(_cumulative_max_or_min("min")))


_SCAN_ROW = 16  # XLA's CPU reduce-window rewriter: a cumulative window longer than 16 is scanned in rows of 16


def _window_scan(x, combine, identity, reverse):
  """A cumulative reduce_window along the last axis as XLA's CPU computes it, bit for bit: each output's window (the
  elements up to it; in reverse, from it) folded from the window's start, `total = combine(total, element)` from
  `identity`; an axis longer than 16 padded at its end to rows of 16, each row scanned so, the rows' totals scanned the
  same way, and each row's scan combined with the total of the rows before it. `identity` must be exact on either
  side (combine(t, identity) is t). At most 16 steps a level, log16(n) levels: the cost grows as n log n."""
  n = x.shape[-1]
  keep = ((0, 0),) * (x.ndim - 1)
  if n > _SCAN_ROW:
    rows = -(-n // _SCAN_ROW)
    padded = x.pad(keep + ((0, rows * _SCAN_ROW - n),), value=identity).reshape(*x.shape[:-1], rows, _SCAN_ROW)
    within = _window_scan(padded, combine, identity, reverse).contiguous()
    totals = _window_scan(within[..., 0 if reverse else -1], combine, identity, reverse)
    before = totals[..., 1:].pad(keep + ((0, 1),), value=identity) if reverse else \
      totals[..., :-1].pad(keep + ((1, 0),), value=identity)
    return combine(before.unsqueeze(-1), within).reshape(*x.shape[:-1], -1)[..., :n]
  windows = x.pad(keep + ((0, n - 1) if reverse else (n - 1, 0),), value=identity).contiguous()
  total = x.full_like(identity).contiguous()
  for k in range(n):
    # NB: each step a kernel of its own, on buffers of its own: every step is then one kernel, built once (inlined,
    # a level's steps made one kernel whose build grew with them, seconds a step)
    total = combine(total, windows[..., k:k + n].contiguous()).contiguous()
  return total


def _logaddexp(a, b):
  """jax's logaddexp (lax/other.py) as XLA computes it, each operation rounded to a 16-bit float's dtype."""
  delta = fm.rounded_op(operator.sub)(a, b)  # NaN: a NaN, or infinities of one sign, whose sum needs no rounding
  rest = fm.log1p(fm.exp(fb.minus(fb.fabs(delta))))
  return fb.isnan(delta).where(a + b, fm.rounded_op(operator.add)(a.maximum(b), rest))


@register("cumlogsumexp")
def _cumlogsumexp(ctx, x, *, axis, reverse):
  """XLA's reduce_window of logaddexp (jax lowers every cumulative op to one), followed step by step: float16 rounded
  at every operation as XLA does (log(3) - 1 is 2 ulp from log1p(e**-1)'s nearest float16), -inf padding exact."""
  if x.shape[axis] == 0:
    return x
  return _window_scan(x.transpose(axis, -1), _logaddexp, -math.inf, reverse).transpose(axis, -1)
