"""Linear algebra as XLA's CPU backend computes it: cholesky, triangular_solve, lu and lu_pivots_to_permutation
(LAPACK's potrf, trsm and getrf); the Householder family: qr (geqrf, or geqp3 with pivoting, then orgqr, as JAX's
lowering builds it), geqrf, householder_product (orgqr), ormqr and hessenberg (gehrd); and cholesky_update and
symmetric_product (JAX's own formulas on CPU). All but the last two take complex matrices too (LAPACK's z/c
routines: L L^H, conjugate_a, izamax's |re| + |im| pivots, reflectors I - tau v v^H with a complex tau and a real
beta), written once for both: a complex operand is a `Pair` of real Tensors, and the arithmetic helpers below are
the real ones for a Tensor.

Each rule is a Python loop over the (static) matrix size that builds lazy tinygrad ops on whole rows and columns,
with masks where LAPACK indexes single elements: n steps of O(n^2) work each, fine for the small matrices (n <= 64)
programs run these on. NB: each step's result is computed at once (contiguous, realized): left lazy, the n steps
were one graph that tinygrad's scheduler took minutes and gigabytes to split (a 64 x 64 cholesky: 218 s and 3 GB;
200 x 200: out of memory), and even with a buffer at each step, one schedule of all of them held every step's graph
(a 2 x 200 x 100 geqrf: 33 s and 7.8 GB; realized step by step: 6 s and 0.2 GB). Each step is a module-level
function of the step's index and the loop's state, run by `_loop`: replayed by TinyJits of it shared by every loop of
the same layout (as the eigen.py sweeps are), and inside a TinyJit's capture plainly, where the capture records it.
Batch dimensions lead, as in the primitives. The steps take their index as data (`_step`), so that they share
compiled kernels.
The Householder rules follow LAPACK's unblocked routines, which it runs for these sizes, down to their scalar rules:
the reflectors' signs (so Q and R agree with LAPACK's, not only up to sign), tau = 0 for a column already zero,
-0.0 taken as negative, and which rows and columns a reflector leaves alone (so NaN and inf spread as in LAPACK).
NB: LAPACK blocks its loops and so sums in another order: float32 results differ from XLA's by rounding, within
~1e-4 relative for well-conditioned matrices. Q is unique only for matrices of full column rank: for a
rank-deficient one, the columns after the rank follow rounding noise (LAPACK's and ours alike) unless the
elimination cancels exactly.
"""
import functools
import math

import numpy as np

from tinygrad import Tensor, dtypes
from tinygrad.dtype import _to_np_dtype

from tinyjax.backends.tinygrad.rules import pairs
from tinyjax.backends.tinygrad.numerics import floatbits as fb
from tinyjax.backends.tinygrad.numerics import floatmath as fm
from tinyjax.backends.tinygrad.rules.indexing import arange, pick
from tinyjax.backends.tinygrad.rules.pairs import Pair, real_and_complex
from tinyjax.backends.tinygrad.machinery.replay import (Alternating, capturing, distinct_buffers, distinct_groups,
                                                       step_jit)
from tinyjax.backends.tinygrad.table import register


def _index_grid(rows: int, cols: int):
  """Row and column positions shaped (rows, 1) and (1, cols), to build masks that broadcast over a matrix."""
  return arange(rows).reshape(rows, 1), arange(cols).reshape(1, cols)


@real_and_complex("cholesky", stepped=True)
def _cholesky(ctx, a):
  """Right-looking Cholesky of the lower triangle (the upper is never read): L L^H = A. As LAPACK's potrf, a pivot is
  the real part of its diagonal entry (a Hermitian matrix's diagonal is real), and the strict upper triangle of the
  result is the input's; NB: XLA returns all NaN for a matrix whose factorization fails (a pivot <= 0; a NaN pivot is
  no failure, it only propagates), so each batch member is masked by whether one failed. As potf2, a column is
  scaled by the reciprocal of its pivot, and each product is rounded before it is subtracted (NB: clang and POCL
  would fuse it: a 2 x 2 factor is then XLA's bits, and larger ones mostly, docs/conformance.md); LAPACK sums a
  column's products before subtracting them (left-looking), this subtracts them one step at a time."""
  *batch, n, _ = a.shape
  # realized with each step: left lazy, `failed` would read every step's pivot, so every step's buffer would live to
  # the end (and in a TinyJit's capture of the program, for as long as the capture)
  failed = Tensor.zeros(*batch, 1, 1, dtype=dtypes.bool, device=ctx.device)
  work, failed = _loop(_cholesky_step, range(n), [a, failed], [], ctx.device)
  rows, cols = _index_grid(n, n)
  return pairs.where(failed, pairs.nan_like(a), pairs.where(rows >= cols, work, a))


def _cholesky_step(j, work, failed):
  n = work.shape[-1]
  rows, cols = _index_grid(n, n)
  diagonal_column = pairs.at(cols == j, work, -1)
  pivot = pairs.real(pairs.at(rows == j, diagonal_column, -2))
  fails = (pivot < 0) | (pivot == 0)  # NB: tinygrad's <= is not(>), true for NaN
  root = pivot.sqrt()
  column = pairs.where(rows == j, root, pairs.mul(diagonal_column, fm.reciprocal(root)))
  trailing = (rows > j) & (cols > j)
  update = pairs.mul(column, pairs.adjoint(column), fused=False)
  return [pairs.where((rows >= j) & (cols == j), column, pairs.where(trailing, work - update, work)),
          failed | fails]


@real_and_complex("triangular_solve", stepped=True)
def _triangular_solve(ctx, a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
  """op(a) x = b (left_side) or x op(a) = b, op transposing when transpose_a and conjugating when conjugate_a (which
  changes nothing for a real a); only a's `lower` (or upper) triangle is read, and not its diagonal when
  unit_diagonal. x op(a) = b is solved as op(a)^T x^T = b^T, so everything becomes a left-side solve by
  substitution."""
  m = a.shape[-1]
  rows, cols = _index_grid(m, m)
  a = pairs.where((rows >= cols) if lower else (rows <= cols), a, 0)
  if unit_diagonal:
    a = pairs.where(rows == cols, 1, a)
  a = pairs.conj(a) if conjugate_a else a
  transposed = transpose_a == left_side
  matrix = a.transpose(-1, -2) if transposed else a
  forward = lower != transposed  # the matrix solved with is lower triangular: substitute from the top
  x = b if left_side else b.transpose(-1, -2)
  (x,) = _loop(_substitution_step, range(m) if forward else reversed(range(m)), [x], [matrix], ctx.device,
               forward=forward, unit_diagonal=unit_diagonal)
  return x if left_side else x.transpose(-1, -2)


def _substitution_step(j, x, matrix, *, forward, unit_diagonal):
  """Row j of x solved, and eliminated from the rows solved after it."""
  rows, cols = _index_grid(*matrix.shape[-2:])
  solved, matrix_column = pairs.at(rows == j, x, -2), pairs.at(cols == j, matrix, -1)
  solved = solved if unit_diagonal else pairs.div(solved, pairs.at(rows == j, matrix_column, -2))
  later = rows > j if forward else rows < j
  return [pairs.where(rows == j, solved, pairs.where(later, x - pairs.mul(matrix_column, solved), x))]


def _permutation(pivots, size: int, device: str):
  """The row order after swapping row i with row pivots[..., i] in turn (pivots shaped batch + (count,), int32)."""
  *batch, count = pivots.shape
  order = arange(size).reshape(*[1] * len(batch), size).expand(*batch, size)
  (order,) = _loop(_swap_step, range(count), [order], [pivots], device)
  return order


def _swap_step(i, order, pivots):
  """Entry i of `order` swapped with the entry pivots[..., i] names."""
  i = i.reshape(1)
  position, steps = arange(order.shape[-1]), arange(pivots.shape[-1])
  at_pivot = position == pick(steps == i, pivots, -1, np.int32).unsqueeze(-1)
  pivot_entry, entry_i = (pick(at, order, -1, np.int32).unsqueeze(-1) for at in (at_pivot, position == i))
  return [(position == i).where(pivot_entry, at_pivot.where(entry_i, order))]


@real_and_complex("lu", stepped=True)
def _lu(ctx, a):
  """LU with partial pivoting as LAPACK's getrf: at step k the pivot is the first row (from k on) of largest size
  in column k (|value|, or |re| + |im| for a complex one, as izamax); the multipliers are the column times the
  pivot's reciprocal, skipped when the pivot is 0 (a singular matrix keeps its zero column). Returns [lu, pivots,
  permutation], the latter two int32 and 0-based."""
  *batch, m, n = a.shape
  count = min(m, n)
  pivots = Tensor.zeros(*batch, 1, count, dtype=dtypes.int32, device=ctx.device)
  a, pivots = _loop(_elimination_step, range(count), [a, pivots], [], ctx.device)
  pivots = pivots.reshape(*batch, count)
  return [a, pivots, _permutation(pivots, m, ctx.device)]


def _elimination_step(k, a, pivots):
  """getrf's step k: the pivot row swapped into row k, and column k eliminated below it."""
  m, n = a.shape[-2:]
  rows, cols = _index_grid(m, n)
  size = (rows >= k).where(pairs.abs1(pairs.at(cols == k, a, -1)), -1)
  first_largest = (size == size.max(-2, keepdim=True)).where(rows, m).min(-2, keepdim=True)
  pivot_row = (first_largest == m).where(k, first_largest)  # a NaN column has no largest: keep row k
  at_pivot, at_k = rows == pivot_row, rows == k
  a = pairs.where(at_k, pairs.at(at_pivot, a, -2), pairs.where(at_pivot, pairs.at(at_k, a, -2), a))
  column, row = pairs.at(cols == k, a, -1), pairs.at(at_k, a, -2)
  pivot = pairs.at(at_k, column, -2)
  multipliers = pairs.where(pairs.nonzero(pivot), pairs.mul(column, pairs.div(1, pivot)), column)
  below = rows > k
  return [pairs.where(below & (cols == k), multipliers, pairs.where(below & (cols > k), a - pairs.mul(multipliers, row), a)),
          (arange(pivots.shape[-1]) == k).where(pivot_row, pivots)]


@register("lu_pivots_to_permutation", stepped=True)
def _lu_pivots_to_permutation(ctx, pivots, *, permutation_size):
  return _permutation(pivots, permutation_size, ctx.device)


def _step(j: int, device: str):
  """Step j's index as a (1, 1) Tensor holding it as data: a Python int would be a constant in each kernel's code, so
  every step of a loop would compile kernels of its own; with the index as data, the steps' kernels are the same
  programs and compile once. Outside a TinyJit's capture, a buffer made once (a capture would record the copy that
  fills it without running it)."""
  return Tensor([[j]], dtype=dtypes.int32, device=device) if capturing() else _step_buffer(j, device)


@functools.lru_cache(maxsize=4096)
def _step_buffer(j: int, device: str):
  return Tensor([[j]], dtype=dtypes.int32, device=device).realize()


def _loop(step, indices, state: list, consts: list, device: str, **options) -> list:
  """state = step(j, *state, *consts, **options) for each j of `indices` (passed as data, _step), each step's state
  realized (Tensors and Pairs; `step` a module-level function, `options` hashable).

  NB: outside a TinyJit's capture the step is replayed by TinyJits of it (replay.step_jit, two in turn), shared
  by every loop of that step, options and layout in the process: tinygrad schedules each realize anew (tens of
  milliseconds for a step of these rules, n of them per factorization), a replay launches its kernels. Inside a
  capture (TinyJits cannot nest) the steps run plainly, and the capture records them."""
  kinds, n_state = tuple(pairs.is_pair(x) for x in [*state, *consts]), len(state)
  run = _flat_step(step, kinds, n_state, tuple(sorted(options.items())))
  state, consts = pairs.tensors(state), pairs.tensors(consts)
  jitted = not capturing()
  if jitted:
    state, consts = distinct_groups(device, state, consts)
    layout = (kinds, tuple((x.shape, x.dtype) for x in [*state, *consts]))
    run = Alternating(functools.partial(step_jit, run, device, layout))
  for j in indices:
    state = run(_step(j, device), *state, *consts)
  if jitted:  # NB: TinyJit reuses its output buffers on every replay: the state is copied out of them
    state = distinct_buffers(device, state, taken=state)
  return _from_tensors(state, kinds[:n_state])


@functools.lru_cache(maxsize=None)
def _flat_step(step, kinds: tuple, n_state: int, options: tuple):
  """`step` as a function of Tensors (each Pair as its two parts, `kinds` saying which), its state realized."""
  def run(j, *tensors):
    values = _from_tensors(tensors, kinds)
    out = step(j, *values[:n_state], *values[n_state:], **dict(options))
    # NB: realized together (shared work done once), as distinct buffers: TinyJit takes them back as its inputs
    return distinct_buffers(j.device, pairs.tensors(out), taken=tensors)
  return run


def _from_tensors(tensors, kinds: tuple) -> list:
  """The values whose Tensors (pairs.tensors) these are, `kinds` saying which are Pairs."""
  values, tensors = [], list(tensors)
  for pair in kinds:
    values.append(Pair(tensors.pop(0), tensors.pop(0)) if pair else tensors.pop(0))
  return values


def _reflect(a, v, tau, rows, cols, j, first_col):
  """`a` with the Householder reflector I - tau v v^H applied from the left to its columns from `first_col` on, as
  LAPACK's larf: v is nonzero only from row j on; nothing changes when tau is 0, nor in the rows after v's last nonzero
  entry, nor in the columns after the last one with a nonzero entry in those rows (so an inf or NaN there is not
  multiplied by a zero into NaN). (LAPACK's callers pass conj(tau) where they apply H^H.)"""
  from_j, columns = rows >= j, cols >= first_col
  last_row = (from_j & pairs.nonzero(v)).where(rows, j).max(-2, keepdim=True)
  in_v = from_j & (rows <= last_row)
  v = pairs.where(in_v, v, 0)
  last_col = (columns & (in_v & pairs.nonzero(a)).max(-2, keepdim=True)).where(cols, -1).max(-1, keepdim=True)
  w = pairs.where(in_v, pairs.mul(pairs.conj(v), a), 0).sum(-2, keepdim=True)
  touched = in_v & columns & (cols <= last_col) & pairs.nonzero(tau)
  return pairs.where(touched, a - pairs.mul(pairs.mul(tau, v), w), a)


def _reflector(packed, i, rows, cols):
  """Reflector i's vector v from below the diagonal of `packed` (v[i] = 1, zero above), shaped batch + (m, 1)."""
  return pairs.where(rows == i, 1, pairs.where(rows > i, pairs.at(cols == i, packed, -1), 0))


def _tau(taus, i):
  """taus[..., i] shaped batch + (1, 1)."""
  return pairs.at(arange(taus.shape[-1]) == i, taus.unsqueeze(-2), -1)


def _householder_vector(column, top, rows):
  """LAPACK's larfg on column[top:] (shaped batch + (m, 1)): the reflector H = I - tau v v^H with H^H column[top:] =
  beta e_top, beta = -sign(re alpha) |column[top:]| (real; alpha = column[top], -0.0 counting as negative), and
  tau = (beta - alpha) / beta. Returns v (v[top] = 1, meaningful from row top on), tau (shaped batch + (1, 1)) and
  the column as larfg leaves it: beta at top, v below (the reflector's storage), the rows above unchanged. A column
  already zero below top (and real at top) gets tau = 0 and stays."""
  at_top, below = rows == top, rows > top
  alpha = pairs.at(at_top, column, -2)
  x = pairs.where(below, column, 0)
  x_norm = pairs.norm(x, -2)
  # NB: true for NaN, which then spreads as in LAPACK; (x_norm + |im alpha| tested once: POCL miscompiles the `|` of the two
  # tests in the kernel that stores v)
  reflects = fb.nonzero(x_norm + fb.fabs(alpha.im) if pairs.is_pair(alpha) else x_norm)
  beta = -fb.with_sign(pairs.hypot(pairs.magnitude(alpha), x_norm), pairs.real(alpha))
  tau = pairs.where(reflects, pairs.div(-(alpha - beta), beta), 0)
  v = pairs.mul(x, pairs.div(1, alpha - beta))  # LAPACK scales by the reciprocal too
  return pairs.where(at_top, 1, v), tau, pairs.where(at_top, pairs.where(reflects, beta, alpha),
                                           pairs.where(below & reflects, v, column))


def _householder_step(a, j, rows, cols):
  """Step j of LAPACK's geqr2 (and laqp2): reflector j reduces column j below the diagonal and is applied to the
  columns after it. Returns the new `a` and tau."""
  at_col = cols == j
  v, tau, column = _householder_vector(pairs.at(at_col, a, -1), j, rows)
  return pairs.where(at_col, column, _reflect(a, v, pairs.conj(tau), rows, cols, j, j + 1)), tau


def _no_taus(batch: tuple, k: int, like, device: str):
  """Room for k taus, shaped batch + (1, k).
  NB: each step stores its tau and is made a buffer: 100 lazy taus concatenated at the end were one graph over every
  step's matrix, which tinygrad took 11 GB to schedule (a 2 x 200 x 100 qr)."""
  return pairs.zeros((*batch, 1, k), like, device)


def _tau_positions(taus):
  """The positions to store step j's tau at in `taus` (batch + (1, k))."""
  return arange(taus.shape[-1]).reshape(1, taus.shape[-1])


def _geqrf(a, device: str):
  """Householder QR as LAPACK's geqr2 (geqrf's unblocked code, which it runs below 128 columns): R on and above the
  diagonal, the reflectors' vectors below it, and the taus (shaped batch + (min(m, n),))."""
  *batch, m, n = a.shape
  k = min(m, n)
  a, taus = _loop(_geqr2_step, range(k), [a, _no_taus(tuple(batch), k, a, device)], [], device)
  return a, taus.reshape(*batch, k)


def _geqr2_step(j, a, taus):
  rows, cols = _index_grid(*a.shape[-2:])
  a, tau = _householder_step(a, j, rows, cols)
  return [a, pairs.where(_tau_positions(taus) == j, tau, taus)]


def _geqp3(a, device: str):
  """QR with column pivoting as LAPACK's geqp3 (its unblocked laqp2, run below 128 columns): before step i the
  column from i on of largest remaining norm (the first of equal ones) is swapped into place. The remaining norms are
  downdated after each step and recomputed when cancellation makes the downdate inaccurate (LAWN 176). Returns
  geqrf's two results and the permutation (int32, 0-based).
  NB: norms that a downdate leaves equal in exact arithmetic are told apart by rounding, LAPACK's own (its nrm2, its
  gemv's order) there, so such a tie may go the other way (tests/xfail.py)."""
  *batch, m, n = a.shape
  norms = pairs.norm(a, -2)  # LAPACK's vn1, downdated
  exact_norms = norms  # LAPACK's vn2: each norm as last computed
  order = arange(n).reshape(1, n).expand(*batch, 1, n)
  k = min(m, n)
  a, order, norms, exact_norms, taus = _loop(_laqp2_step, range(k),
                                             [a, order, norms, exact_norms, _no_taus(tuple(batch), k, a, device)], [],
                                             device)
  return a, taus.reshape(*batch, k), order.reshape(*batch, n)


def _laqp2_step(i, a, order, norms, exact_norms, taus):
  m, n = a.shape[-2:]
  rows, cols = _index_grid(m, n)
  # laqp2 recomputes a downdated norm below this: sqrt of LAPACK's machine epsilon (half an ulp of 1)
  recompute_below = math.sqrt(float(np.finfo(_to_np_dtype(a.dtype)).eps) / 2)
  at_i, remaining = cols == i, cols >= i
  largest = remaining.where(norms, -1).max(-1, keepdim=True)  # NB: tinygrad's max skips NaN
  pivot = (remaining & (norms == largest)).where(cols, n).min(-1, keepdim=True)
  # LAPACK's idamax keeps its first candidate unless a later one is larger: a NaN there (or everywhere) stays
  pivot = ((pivot == n) | fb.isnan(pairs.at(at_i, norms, -1))).where(i, pivot)
  at_pivot = cols == pivot
  a, order, norms, exact_norms = [pairs.where(at_i, pairs.at(at_pivot, x, -1), pairs.where(at_pivot, pairs.at(at_i, x, -1), x))
                                  for x in (a, order, norms, exact_norms)]
  a, tau = _householder_step(a, i, rows, cols)
  taus = pairs.where(_tau_positions(taus) == i, tau, taus)
  fraction = (1 - fm.div(pairs.magnitude(pairs.at(rows == i, a, -2)), norms).square()).maximum(0)
  inaccurate = fraction * fm.div(norms, exact_norms).square() <= recompute_below
  recomputed = pairs.norm(pairs.where(rows > i, a, 0), -2)
  downdated = inaccurate.where(recomputed, norms * fraction.sqrt())
  update = (cols > i) & fb.nonzero(norms)
  return [a, order, update.where(downdated, norms), (update & inaccurate).where(recomputed, exact_norms), taus]


def _orgqr(a, taus, device: str):
  """The m x n matrix with orthonormal (unitary) columns Q = H_0 H_1 ... H_{k-1} of the k reflectors stored below the diagonal of
  a's first k columns (with taus shaped batch + (k,)), as LAPACK's org2r: the reflectors are applied last to first
  to the identity's columns; a's entries on and above the diagonal are not read."""
  *batch, m, n = a.shape
  k = taus.shape[-1]
  rows, cols = _index_grid(m, n)
  q = pairs.where(cols >= k, (rows == cols).cast(a.dtype), a)
  (q,) = _loop(_org2r_step, reversed(range(k)), [q], [taus], device)
  return q


def _org2r_step(i, q, taus):
  rows, cols = _index_grid(*q.shape[-2:])
  tau, v = _tau(taus, i), _reflector(q, i, rows, cols)
  q = _reflect(q, v, tau, rows, cols, i, i + 1)
  scaled = pairs.mul(-tau, v)
  if pairs.is_pair(tau):  # NB: OpenBLAS's zscal by 0 writes zeros (+0, where -tau v has -0 parts)
    scaled = pairs.where(pairs.nonzero(tau), scaled, 0)
  return [pairs.where(cols == i, pairs.where(rows > i, scaled, pairs.where(rows == i, 1 - tau, 0)), q)]


@real_and_complex("householder_product", stepped=True)
def _householder_product(ctx, a, taus):
  return _orgqr(a, taus, ctx.device)


@real_and_complex("ormqr", stepped=True)
def _ormqr(ctx, a, taus, c, *, left, transpose):
  """Q c, Q^H c, c Q or c Q^H with Q = H_0 H_1 ... H_{k-1} (transpose is the conjugate transpose for complex
  matrices), as LAPACK's orm2r / unm2r: the reflectors are applied to c one by one, first to last as H_i^H (tau
  conjugated) for Q^H c (and c Q, computed as (Q^H c^H)^H), last to first for Q c."""
  c = c if left else pairs.adjoint(c)
  k = taus.shape[-1]
  adjoint = transpose == left
  (c,) = _loop(_orm2r_step, range(k) if adjoint else reversed(range(k)), [c], [a, taus], ctx.device, adjoint=adjoint)
  return c if left else pairs.adjoint(c)


def _orm2r_step(i, c, a, taus, *, adjoint):
  rows, cols = _index_grid(*c.shape[-2:])
  reflector_cols = arange(a.shape[-1]).unsqueeze(-2)
  tau = pairs.conj(_tau(taus, i)) if adjoint else _tau(taus, i)
  return [_reflect(c, _reflector(a, i, rows, reflector_cols), tau, rows, cols, i, 0)]


@real_and_complex("geqrf", stepped=True)
def _geqrf_rule(ctx, a):
  return list(_geqrf(a, ctx.device))


@real_and_complex("hessenberg", stepped=True)
def _hessenberg(ctx, a):
  """Reduction to upper Hessenberg form as LAPACK's gehd2 (gehrd's unblocked code, which it runs up to 128 rows):
  reflector j reduces column j below the subdiagonal and is applied from the right to the columns after j, then
  from the left to the rows and columns after j. Returns the reduced matrix with the reflectors below its
  subdiagonal, and the n - 1 taus."""
  *batch, n, _ = a.shape
  a, taus = _loop(_gehd2_step, range(n - 1), [a, _no_taus(tuple(batch), max(n - 1, 0), a, ctx.device)], [],
                  ctx.device)
  return [a, taus.reshape(*batch, max(n - 1, 0))]


def _gehd2_step(j, a, taus):
  rows, cols = _index_grid(*a.shape[-2:])
  below_j = j + 1
  at_col = cols == j
  v, tau, column = _householder_vector(pairs.at(at_col, a, -1), below_j, rows)
  # H from the right (A H = (H^H A^H)^H), then H^H from the left
  a = pairs.adjoint(_reflect(pairs.adjoint(a), v, pairs.conj(tau), rows, cols, below_j, 0))
  return [pairs.where(at_col, column, _reflect(a, v, pairs.conj(tau), rows, cols, below_j, below_j)),
          pairs.where(_tau_positions(taus) == j, tau, taus)]


@real_and_complex("qr", stepped=True)
def _qr(ctx, a, *, pivoting, full_matrices, use_magma):
  """Q and R (and the column permutation, with pivoting) as JAX's lowering builds them from geqrf (or geqp3) and orgqr
  (householder_product)."""
  *batch, m, n = a.shape
  packed, taus, *permutation = _geqp3(a, ctx.device) if pivoting else _geqrf(a, ctx.device)
  if m < n:
    q = _orgqr(packed[..., :, :m], taus, ctx.device)
  elif full_matrices:
    q = _orgqr(packed.pad(((0, 0),) * len(batch) + ((0, 0), (0, m - n))), taus, ctx.device)
  else:
    q = _orgqr(packed, taus, ctx.device)
    packed = packed[..., :n, :]
  rows, cols = _index_grid(*packed.shape[-2:])
  return [q, pairs.where(rows <= cols, packed, 0), *permutation]


@register("cholesky_update", stepped=True)
def _cholesky_update(ctx, r, w):
  """The Cholesky factor of R^T R + w w^T by Givens rotations of row k of R against w, k = 0, 1, ..., with the
  formulas of JAX's lowering (XLA runs JAX's own code for it on CPU)."""
  r, _ = _loop(_givens_step, range(r.shape[-1]), [r, w.unsqueeze(-2)], [], ctx.device)
  return r


def _givens_step(k, r, w):
  rows, cols = _index_grid(*r.shape[-2:])
  row = pairs.at(rows == k, r, -2)
  x, y = pairs.at(cols == k, row, -1), pairs.at(cols == k, w, -1)
  larger = (fb.fabs(x) > fb.fabs(y)).where(fb.fabs(x), fb.fabs(y))
  x, y = fm.div(x, larger), fm.div(y, larger)
  reciprocal = fm.div(1, (x * x + y * y).sqrt())
  rotates = fb.nonzero(y)
  c, s = rotates.where(x * reciprocal, 1), rotates.where(-y * reciprocal, 0)
  return [(rows == k).where(c * row - s * w, r), c * w + s * row]


@register("symmetric_product")
def _symmetric_product(ctx, a, c, *, alpha, beta):
  """alpha a a^T + beta c, as JAX's lowering computes it on CPU."""
  return alpha * (a @ a.transpose(-1, -2)) + beta * c
