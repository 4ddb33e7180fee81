"""Linear algebra: cholesky, triangular_solve, lu and lu_pivots_to_permutation, as XLA's CPU backend computes them
(with LAPACK's potrf, trsm and getrf).

Each rule is a Python loop over the (static) matrix size that builds lazy tinygrad ops on whole rows and columns,
with masks where LAPACK indexes single elements: n steps of O(n^2) work each, fine for the small matrices (n <= 64)
programs run these on. Batch dimensions lead, as in the primitives.
NB: LAPACK blocks its loops and so sums in another order: float32 results differ from XLA's by rounding, within
~1e-4 relative for well-conditioned matrices.
"""
import math

import numpy as np

from tinygrad import Tensor, dtypes

from tinyjax.backends.tinygrad.indexing import arange, pick
from tinyjax.backends.tinygrad.table import register


def _index_grid(rows: int, cols: int, device):
  """Row and column positions shaped (rows, 1) and (1, cols), to build masks that broadcast over a matrix."""
  return arange(rows, device).reshape(rows, 1), arange(cols, device).reshape(1, cols)


@register("cholesky")
def _cholesky(ctx, a):
  """Right-looking Cholesky of the lower triangle (the upper is never read). Like LAPACK's potrf, the strict upper
  triangle of the result is the input's; NB: XLA returns all NaN for a matrix whose factorization fails (a pivot
  <= 0; a NaN pivot is no failure, it only propagates), so each batch member is masked by whether one failed."""
  n = a.shape[-1]
  rows, cols = _index_grid(n, n, a.device)
  work, failed = a, None
  for k in range(n):
    pivot = work[..., k:k + 1, k:k + 1]
    fails = (pivot < 0) | (pivot == 0)  # NB: tinygrad's <= is not(>), true for NaN
    failed = fails if failed is None else failed | fails
    root = pivot.sqrt()
    column = (rows == k).where(root, work[..., :, k:k + 1] / root)
    trailing = (rows > k) & (cols > k)
    work = ((rows >= k) & (cols == k)).where(column, trailing.where(work - column * column.transpose(-1, -2), work))
  if failed is None:
    return a
  return failed.where(math.nan, (rows >= cols).where(work, a))


@register("triangular_solve")
def _triangular_solve(ctx, a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
  """op(a) x = b (left_side) or x op(a) = b, op transposing when transpose_a; only a's `lower` (or upper) triangle is
  read, and not its diagonal when unit_diagonal. conjugate_a changes nothing: tinygrad has no complex dtypes.
  x op(a) = b is solved as op(a)^T x^T = b^T, so everything becomes a left-side solve by substitution."""
  m = a.shape[-1]
  rows, cols = _index_grid(m, m, a.device)
  a = ((rows >= cols) if lower else (rows <= cols)).where(a, 0)
  if unit_diagonal:
    a = (rows == cols).where(1, a)
  transposed = transpose_a == left_side
  matrix = a.transpose(-1, -2) if transposed else a
  forward = lower != transposed  # the matrix solved with is lower triangular: substitute from the top
  x = b if left_side else b.transpose(-1, -2)
  for j in (range(m) if forward else reversed(range(m))):
    solved = x[..., j:j + 1, :] if unit_diagonal else x[..., j:j + 1, :] / matrix[..., j:j + 1, j:j + 1]
    later = rows > j if forward else rows < j
    x = (rows == j).where(solved, later.where(x - matrix[..., :, j:j + 1] * solved, x))
  return x if left_side else x.transpose(-1, -2)


def _permutation(pivots: list, size: int, batch: tuple, device):
  """The row order after swapping row i with row pivots[i] in turn (each pivot shaped batch + (1,))."""
  position = arange(size, device)
  order = position.reshape(*[1] * len(batch), size).expand(*batch, size)
  for i, pivot in enumerate(pivots):
    at_pivot = position == pivot
    pivot_entry = pick(at_pivot, order, -1, np.int32).unsqueeze(-1)
    order = (position == i).where(pivot_entry, at_pivot.where(order[..., i:i + 1], order))
  return order


@register("lu")
def _lu(ctx, a):
  """LU with partial pivoting as LAPACK's getrf: at step k the pivot is the first row (from k on) of largest |value|
  in column k; the multipliers are the column times the pivot's reciprocal, skipped when the pivot is 0 (a singular
  matrix keeps its zero column). Returns [lu, pivots, permutation], the latter two int32 and 0-based."""
  lu_aval, _, _ = ctx.out_avals
  *batch, m, n = a.shape
  rows, cols = _index_grid(m, n, a.device)
  pivots = []
  for k in range(min(m, n)):
    size = (rows >= k).where(a[..., :, k:k + 1].abs(), -1)
    first_largest = (size == size.max(-2, keepdim=True)).where(rows, m).min(-2, keepdim=True)
    pivot_row = (first_largest == m).where(k, first_largest)  # a NaN column has no largest: keep row k
    at_pivot = rows == pivot_row
    pivot_values = pick(at_pivot, a, -2, lu_aval.dtype).unsqueeze(-2)
    a = (rows == k).where(pivot_values, at_pivot.where(a[..., k:k + 1, :], a))
    pivot = a[..., k:k + 1, k:k + 1]
    column = a[..., :, k:k + 1]
    multipliers = (pivot != 0).where(column * (1 / pivot), column)
    below = rows > k
    a = (below & (cols == k)).where(multipliers, (below & (cols > k)).where(a - multipliers * a[..., k:k + 1, :], a))
    pivots.append(pivot_row.reshape(*batch, 1))
  pivot_tensor = Tensor.cat(*pivots, dim=-1) if pivots else Tensor.zeros(*batch, 0, dtype=dtypes.int32,
                                                                            device=a.device)
  return [a, pivot_tensor.cast(dtypes.int32), _permutation(pivots, m, tuple(batch), a.device)]


@register("lu_pivots_to_permutation")
def _lu_pivots_to_permutation(ctx, pivots, *, permutation_size):
  *batch, count = pivots.shape
  return _permutation([pivots[..., i:i + 1] for i in range(count)], permutation_size, tuple(batch), pivots.device)
