"""Sorting primitives: sort (operands ordered together by the first num_keys of them, stably) and top_k.

tinygrad's Tensor.sort is a bitonic network that loses NaN and duplicates values (shared/BRIEF.md), so ranks are
counted instead: an element's rank is the number of elements of its row that come before it, comparing order keys
(integers in XLA's order of the values, `floatbits.order_key`) and then positions. That is O(n^2) comparisons per
row, fine for rows of a few thousand; each output element is then picked by comparing ranks with its position.
"""

import numpy as np
from tinygrad import dtypes

from tinyjax.backends.tinygrad.numerics import floatbits as fb
from tinyjax.backends.tinygrad.rules.indexing import arange, pick
from tinyjax.backends.tinygrad.table import register, tg_dtype


def _sort_key(x, dtype):
  """JAX's sort comparator: floats with -0.0 as 0.0 and every NaN as +NaN, then the total order (NaN last)."""
  if not fb.is_float(dtype):
    return fb.order_key(x)
  nan = fb.isnan(x)  # NB: by bits, and no NaN constant: WGSL's NaN literal has the sign bit set (it sorted first)
  key = fb.order_key((x.eq(0) & ~nan).where(0.0, x))
  return nan.where(key.dtype.max, key)


def _ranks(keys: list, descending: bool):
  """Each element's place along the last axis: the elements before it by the keys in turn, then by position."""
  n = keys[0].shape[-1]
  position = arange(n)
  before = position.reshape(1, n) < position.reshape(n, 1)  # [i, j]: j is before i
  for key in reversed(keys):
    mine, theirs = key.unsqueeze(-1), key.unsqueeze(-2)
    ahead = theirs > mine if descending else theirs < mine
    before = ahead | ((theirs == mine) & before)
  return before.sum(-1, dtype=dtypes.int32)


def _place(x, ranks, count: int, dtype):
  """out[..., r] = the element of x (along the last axis) whose rank is r, for r < count."""
  mask = ranks.unsqueeze(-2) == arange(count).reshape(count, 1)
  return pick(mask, x.unsqueeze(-2), -1, dtype)


@register("sort")
def _sort(ctx, *operands, dimension, is_stable, num_keys):
  """NB: an unstable sort is sorted stably too; XLA may leave equal keys in either order there."""
  if operands[0].shape[dimension] <= 1 or operands[0].numel() == 0:
    return list(operands)
  moved = [x.transpose(dimension, -1) for x in operands]
  keys = [_sort_key(x, aval.dtype) for x, aval in zip(moved[:num_keys], ctx.in_avals)]
  ranks = _ranks(keys, descending=False)
  return [_place(x, ranks, x.shape[-1], aval.dtype).transpose(dimension, -1) for x, aval in zip(moved, ctx.in_avals)]


@register("top_k")
def _top_k(ctx, operand, *, k, axis):
  """The k largest along `axis`, largest first, ties to the lower index. NB: unlike sort, top_k orders by XLA's total
  order as it is: NaN above inf (-NaN below -inf) and 0.0 above -0.0."""
  values_aval, indices_aval = ctx.out_avals
  dtype = np.dtype(ctx.in_avals[0].dtype)
  x = operand.transpose(axis, -1)
  ranks = _ranks([fb.order_key(x)], descending=True)
  positions = arange(x.shape[-1], tg_dtype(indices_aval.dtype)).expand(x.shape)
  return [_place(x, ranks, k, dtype).transpose(axis, -1),
          _place(positions, ranks, k, indices_aval.dtype).transpose(axis, -1)]
