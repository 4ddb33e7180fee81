"""Eigendecomposition of symmetric and Hermitian matrices (eigh) and singular value decomposition (svd) by Jacobi
rotations, for real and complex matrices (float32, float64, complex64, complex128; a complex one as a linalg.Pair).
A complex pair a_pq = |a_pq| e rotates as a real one of |a_pq| after its column q is scaled by conj(e) (the standard
complex Jacobi rotation: one phase factor per pair, _pair_rotations); the values stay real.

eigh: cyclic two-sided Jacobi. Each rotation zeroes one off-diagonal pair a_pq = a_qp of the symmetric matrix built
from the triangle LAPACK reads (`lower`), with the smaller of the two angles that do (|tan| <= 1), and writes the
pair's new diagonal as a_pp - t a_pq, a_qq + t a_pq (Rutishauser's updates). The rotations accumulate into V; at the
end the diagonal holds the eigenvalues.
svd: one-sided Jacobi (Hestenes): rotations of pairs of columns of the working matrix X (A, or A^T) make them
mutually orthogonal, X J_1 J_2 ... = W; then sigma_j = |w_j|, and the other side's vectors are w_j / sigma_j. It
never forms A^T A, whose eigenvalues would lose singular values below sqrt(eps) |A|, and it finds small singular
values to high relative accuracy where they come from badly scaled columns (A = B D, B well-conditioned).

Both run in a parallel ("round-robin") ordering: the matrix's N (n made even by a zero pad) indices sit on a ring,
position i pairs with position N-1-i, so a round rotates N/2 disjoint pairs at once with whole-tensor operations
(the partner of every row or column is the flipped tensor's). After each round positions 1..N-1 move one place round
the ring (position 0 stays): N-1 rounds meet every pair once (a sweep), and leave the ring as it started. Every
round is the same computation on the same shapes, so a TinyJit captures one round and replays it: tinygrad's
scheduler costs tens of milliseconds per realize of a round and grows faster than linearly with the kernels of one
lazy graph, while a replay costs about a millisecond (n = 64, CPU). NB: the rules are therefore host_sync: a program
that holds eigh or svd is not captured by TinyJit as a whole, nor exported (tinyjax.export refuses it).

Sweeps: a pair rotates only above a threshold (eigh: |a_pq| > eps max|A|; svd: a cosine above sqrt(rows) eps, the
test of LAPACK's gesvj), and the loop stops after the first sweep that rotated nothing (read on the host after each
sweep), or at MAX_SWEEPS. Not a fixed number of sweeps: on batches of random, graded (values 1e-6..1) and clustered
or exactly rank-deficient matrices, n = 3..64, float32 and float64, eigh stops after 4-11 sweeps, svd after 5-10 on
random matrices but up to 20 on graded or rank-deficient ones (one-sided Jacobi converges only linearly on their null
columns): a fixed count would have to be ~20 everywhere, twice the work of the common case, with no margin.
Accuracy, measured on those matrices (n <= 64, batches of 6, float32 and float64, in units of eps): eigh
|A V - V w| <= 25 max|A|, |V^T V - I| <= 14, eigenvalues within 3 max|w| of the exact ones; svd |A - U S V^T|_F <= 12
|A|_F, |U^T U - I| and |V^T V - I| <= 20, singular values within 4 max(s) (LAPACK's: 1-2). JAX's own tests allow 200
and 300. Two refinements after the sweeps make these: the vectors' columns are normalized (the rotations' rounding
makes their norms drift, the largest error otherwise), and the values are recomputed from them (see _jacobi_eigh and
_svd).

NB: differences from XLA (LAPACK's syevd and gesdd):
- vectors are unique only up to sign (and within repeated eigen/singular values, up to rotation), and LAPACK's signs
  follow its iterations: here each eigenvector, and each left singular vector (its right one with it), has its first
  entry of largest magnitude positive;
- a NaN or an infinity in what is read (eigh: the triangle `lower` names) makes all of that batch member's outputs
  NaN. XLA agrees for NaN; for an infinity its values are NaN too, but its vectors are what LAPACK's arithmetic
  left: partly NaN, or the identity (eigh, an inf on the diagonal), or a permutation (svd);
- values agree with LAPACK's within rounding (a few eps relative to the largest), not bit for bit;
- subset_by_index (which XLA's CPU refuses) computes everything and slices; sort_eigenvalues=False sorts anyway (as
  LAPACK does); svd's `algorithm` is not consulted (XLA's CPU refuses Jacobi and Polar).
"""
import functools
import math

import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.dtype import _to_np_dtype

from tinyjax.backends.tinygrad.numerics import floatbits as fb
from tinyjax.backends.tinygrad.numerics import floatmath as fm
from tinyjax.backends.tinygrad.rules.indexing import arange, pick
from tinyjax.backends.tinygrad.rules import pairs
from tinyjax.backends.tinygrad.rules.pairs import Pair, real_and_complex
from tinyjax.backends.tinygrad.machinery.replay import (Alternating, capturing, distinct_buffers, distinct_groups,
                                                       step_jit)

# A safety net, never reached in the measurements above: every sweep of a converging run rotates something, and the
# criteria below are met after at most ~20 sweeps for n <= 64.
MAX_SWEEPS = 40
# svd: a column whose norm is at most this many eps times |A|_F is negligible: it takes no part in the convergence
# test (a null column of a rank-deficient matrix only decays linearly), and its singular vector is replaced by an
# orthonormal completion (a backward error of at most 2 sigma_j, within LAPACK's)
NEGLIGIBLE = 4


def _eps(x) -> float:
  return float(np.finfo(_to_np_dtype(x.dtype)).eps)


def _pad_to_even(x, axes: tuple):
  """x with one zero row / column appended along each of `axes` when its size there is odd."""
  if x.shape[axes[0]] % 2 == 0:
    return x
  padding = [(0, 0)] * x.ndim
  for axis in axes:
    padding[axis % x.ndim] = (0, 1)
  return x.pad(tuple(padding))


def _ring_shift(x, axis: int):
  """Positions 1..N-1 of `axis` move one place on (N-1 to 1); position 0 stays: the round-robin's next round."""
  size = x.shape[axis]
  if size <= 2:
    return x
  part = lambda start, end: x.shrink(tuple((start, end) if i == axis % x.ndim else None for i in range(x.ndim)))
  return pairs.cat([part(0, 1), part(size - 1, size), part(1, size - 1)], dim=axis)


def _tangent(app, aqq, apq):
  """tan of the smaller angle (|t| <= 1) whose rotation zeroes apq of [[app, apq], [apq, aqq]]:
  t = 2 apq sign(tau) / (|tau| + hypot(tau, 2 apq)), tau = aqq - app, sign(0) = 1 (0 where apq and tau are 0).
  NB: no division by zero even where the result is then masked: WGSL's compilers may assume no NaN."""
  tau, twice = aqq - app, apq + apq
  tau_size, twice_size = fb.fabs(tau), fb.fabs(twice)
  larger, smaller = tau_size.maximum(twice_size), tau_size.minimum(twice_size)
  nonzero = fb.nonzero(larger)
  hypot = larger * (1 + fm.div(smaller, nonzero.where(larger, 1)).square()).sqrt()  # no square overflows
  return fm.div((tau < 0).where(-twice, twice), nonzero.where(tau_size + hypot, 1))


def _off_diagonal(apq, rotates):
  """|apq| and apq's phase apq / |apq| (1 where the pair does not rotate) for a complex apq; apq and None (a phase of
  1) for a real one, whose rotations take its sign in the tangent."""
  if not pairs.is_pair(apq):
    return apq, None
  size = pairs.magnitude(apq)
  divisor = rotates.where(size, 1)  # NB: no division by zero even where masked (WGSL)
  return size, Pair(rotates.where(fm.div(apq.re, divisor), 1), rotates.where(fm.div(apq.im, divisor), 0))


def _pair_rotations(t, rotates, phase=None):
  """cos and sin per pair (shaped like t), and the factors C, S per ring position (the pair's top p and bottom q):
  a round's new column at position i is C_i col_i + S_i col_{N-1-i}, its new row conj(C_i) row_i + conj(S_i)
  row_{N-1-i}. With the phase e of a complex a_pq = |a_pq| e, the rotation is the real one of |a_pq| after scaling
  column q by conj(e) (row q by e): new col_p = c col_p - s conj(e) col_q, new col_q = s col_p + c conj(e) col_q."""
  t = rotates.where(t, 0)
  c = fm.div(1, (1 + t * t).sqrt())
  s = t * c
  turn = 1 if phase is None else pairs.conj(phase)
  return t, (pairs.cat([c, pairs.mul(c, turn).flip(-1)], dim=-1), pairs.cat([pairs.mul(-s, turn), s.flip(-1)], dim=-1))


def _eigh_round(a, v, rotated, tiny):
  """One round of two-sided Jacobi on a (batch + (N, N), symmetric), its rotations accumulated into v's columns:
  the pairs (i, N-1-i) with |a_pq| > tiny rotate. Returns a, v and `rotated` (batch + (1,)) raised where any did,
  each on the ring's next round, realized."""
  size = a.shape[-1]
  half = size // 2
  diagonal = pairs.real(a.diagonal(dim1=-2, dim2=-1))
  app, aqq = diagonal[..., :half], diagonal.flip(-1)[..., :half]
  apq = a.flip(-1).diagonal(dim1=-2, dim2=-1)[..., :half]  # a[i, N-1-i]
  rotates = pairs.magnitude(apq) > tiny
  apq, phase = _off_diagonal(apq, rotates)
  t, (c, s) = _pair_rotations(_tangent(app, aqq, apq), rotates, phase)
  ci, si, cj, sj = pairs.conj(c).unsqueeze(-1), pairs.conj(s).unsqueeze(-1), c.unsqueeze(-2), s.unsqueeze(-2)
  # NB: summed as (1 + 4) + (2 + 3), a form symmetric in the row and the column, each coefficient formed before it
  # multiplies: `a` stays exactly symmetric (Hermitian)
  rotated_a = ((pairs.mul(pairs.mul(ci, cj), a) + pairs.mul(pairs.mul(si, sj), a.flip(-1).flip(-2)))
               + (pairs.mul(pairs.mul(ci, sj), a.flip(-1)) + pairs.mul(pairs.mul(si, cj), a.flip(-2))))
  shift = t * apq
  new_diagonal = diagonal + (-shift).cat(shift.flip(-1), dim=-1)
  rows, cols = arange(size).reshape(size, 1), arange(size).reshape(1, size)
  rotated_a = pairs.where(rows == cols, new_diagonal.unsqueeze(-2), pairs.where(rows + cols == size - 1, 0, rotated_a))
  out = [_ring_shift(_ring_shift(rotated_a, -1), -2).contiguous(),
         _ring_shift(pairs.mul(v, cj) + pairs.mul(v.flip(-1), sj), -1).contiguous(),
         rotated.maximum(rotates.max(-1, keepdim=True).cast(rotated.dtype)).contiguous()]
  _realize(out)
  return out


def _svd_round(w, *rest, tolerance: float):
  """One round of one-sided Jacobi on the columns of w (batch + (R, N)), its rotations accumulated into the columns
  of q if given (rest: [q,] rotated, negligible): the pairs (i, N-1-i) whose cosine |w_p . w_q| / (|w_p| |w_q|)
  exceeds `tolerance` and whose columns are both above `negligible` (a bound on their squared norms, batch + (1,))
  rotate, and `rotated` rises where any did. Returns w[, q], rotated, realized.

  NB: a pair with a negligible column does not rotate: such a column is what rounding left of a column earlier
  rotations emptied, and rotations of such columns by their complex phase made q, the full U or V of a non-square
  matrix, far from unitary (1e-3 to 0.16 off in complex64; the rotations that matter are the live columns')."""
  *q, rotated, negligible = rest
  size = w.shape[-1]
  half = size // 2
  norms = pairs.real(pairs.mul(pairs.conj(w), w)).sum(-2)
  dots = pairs.mul(pairs.conj(w), w.flip(-1)).sum(-2)[..., :half]  # w_p^H w_q
  alpha, beta = norms[..., :half], norms.flip(-1)[..., :half]
  live = (alpha > negligible) & (beta > negligible)
  rotates = (pairs.magnitude(dots) > tolerance * alpha.sqrt() * beta.sqrt()) & live
  dots, phase = _off_diagonal(dots, rotates)
  _, (c, s) = _pair_rotations(_tangent(alpha, beta, dots), rotates, phase)
  c, s = c.unsqueeze(-2), s.unsqueeze(-2)
  out = [_ring_shift(pairs.mul(x, c) + pairs.mul(x.flip(-1), s), -1).contiguous() for x in (w, *q)]
  out.append(rotated.maximum(rotates.max(-1, keepdim=True).cast(rotated.dtype)).contiguous())
  _realize(out)
  return out


def _realize(out: list):
  """Realizes a round's results: the real ones and the real parts, then the imaginary parts. NB: realized all at once,
  a complex round's results make kernels whose buffer slots the CL runtime misreads (IndexError in ops_cl)."""
  Tensor.realize(*[pairs.real(x) for x in out])
  if pairs.is_pair(*out):
    Tensor.realize(*[x.im for x in out if pairs.is_pair(x)])


@functools.lru_cache(maxsize=None)
def _on_parts(round_fn, count: int):
  """round_fn of `count` complex matrices (Pairs) as a function of their parts (TinyJit captures Tensors)."""
  def run(*args):
    out = round_fn(*[Pair(args[2 * i], args[2 * i + 1]) for i in range(count)], *args[2 * count:])
    return pairs.tensors(out)
  return run


def _sweeps(round_fn, device: str, matrices: list, extra: list) -> list:
  """Sweeps of N-1 rounds of round_fn(*matrices, rotated, *extra) -> [*matrices, rotated] until a sweep rotates
  nothing, or MAX_SWEEPS; returns the matrices, each a buffer of its own (complex ones as Pairs)."""
  if pairs.is_pair(*matrices):
    parts = _sweeps(_on_parts(round_fn, len(matrices)), device, pairs.tensors(matrices), extra)
    return [Pair(parts[2 * i], parts[2 * i + 1]) for i in range(len(matrices))]
  size = matrices[0].shape[-1]
  matrices, extra = distinct_groups(device, matrices, extra)
  # NB: inside another TinyJit's capture (TinyJits cannot nest) the rounds run plainly, and MAX_SWEEPS of them: a
  # host read there would freeze one run's count into the capture
  jitted = not capturing()
  step = round_fn
  if jitted:
    step = Alternating(functools.partial(step_jit, round_fn, device, (tuple(m.shape for m in matrices),
                                                                      matrices[0].dtype)))
  for _ in range(MAX_SWEEPS):
    rotated = Tensor.zeros(*matrices[0].shape[:-2], 1, dtype=matrices[0].dtype, device=device).contiguous().realize()
    for _ in range(size - 1):
      *matrices, rotated = step(*matrices, rotated, *extra)
    if jitted and rotated.max().item() == 0:
      break
  # NB: TinyJit reuses its output buffers on every replay: the results are copied out of them
  return distinct_buffers(device, matrices, taken=matrices) if jitted else matrices


@functools.lru_cache(maxsize=None)
def _svd_round_for(tolerance: float):
  return functools.partial(_svd_round, tolerance=tolerance)


# --- before and after the sweeps
def _nonfinite(x, axes=(-2, -1)):
  """Where x has a NaN or an infinity along `axes` (kept, size 1)."""
  if pairs.is_pair(x):
    return _nonfinite(x.re, axes) | _nonfinite(x.im, axes)
  bad = fb.isnan(x) | (fb.fabs(x) == math.inf)
  for axis in axes:
    bad = bad.max(axis, keepdim=True)
  return bad


def _power_of_two_scale(x):
  """2^floor(log2(max |x|)) per matrix (batch + (1, 1)), at least the smallest normal number: dividing by it is exact,
  and brings the largest entry into [1, 2), so that no square in the rotations overflows or underflows."""
  largest = pairs.magnitude(x).max(-1, keepdim=True).max(-2, keepdim=True)
  exponent_bits = fb.bits(largest) & fb.typed(fb.bits(largest), _exponent_mask(x.dtype))
  scale = exponent_bits.bitcast(x.dtype)
  return (scale == 0).where(float(np.finfo(_to_np_dtype(x.dtype)).tiny), scale)


def _exponent_mask(dtype) -> int:
  exponent, mantissa = dtypes.finfo(dtype)
  return ((1 << exponent) - 1) << mantissa


def _order(keys, descending: bool):
  """The stable sorting permutation of keys (batch + (n,)) as a one-hot mask batch + (n, n): [i, r] holds where
  keys[i] goes to position r."""
  n = keys.shape[-1]
  mine, other = keys.unsqueeze(-1), keys.unsqueeze(-2)  # [i, j]: keys[i], keys[j]
  before = (other > mine) if descending else (other < mine)
  earlier = arange(n).reshape(1, n) < arange(n).reshape(n, 1)
  rank = (before | ((other == mine) & earlier)).cast(dtypes.int32).sum(-1, keepdim=True)
  return rank == arange(n).reshape(1, n)


def _reorder(x, order):
  """A vector's entries (batch + (n,)) moved by `order`, bit for bit."""
  return pick(order, x.unsqueeze(-1), -2, _to_np_dtype(x.dtype))


def _reorder_columns(x, order):
  """A matrix's columns (batch + (R, n)) moved by `order`, bit for bit."""
  if pairs.is_pair(x):
    return Pair(_reorder_columns(x.re, order), _reorder_columns(x.im, order))
  return pick(order.unsqueeze(-3), x.unsqueeze(-1), -2, _to_np_dtype(x.dtype))


def _sign_of_largest(x):
  """Per column of x (batch + (R, n)), the factor that makes its first entry of largest magnitude real and positive
  (the sign rule of the vectors, batch + (1, n)): -1 where that entry is negative, else 1; for a complex x, its
  conjugate phase (1 for a zero column)."""
  rows = x.shape[-2]
  size = pairs.magnitude(x)
  position = arange(rows).reshape(rows, 1)
  first = (size == size.max(-2, keepdim=True)).where(position, rows).min(-2, keepdim=True)
  largest = pairs.at(position == first, x, -2)
  if not pairs.is_pair(x):
    return (largest < 0).where(-1, 1).cast(x.dtype)
  magnitude = pairs.at(position == first, size, -2)
  zero = magnitude == 0
  return pairs.where(zero, 1, pairs.div(pairs.conj(largest), zero.where(1, magnitude)))


def _unit_columns(x):
  """x's columns scaled to norm 1 (zero columns stay)."""
  norm = pairs.norm(x, -2)
  return pairs.div(x, (norm == 0).where(1, norm))


def _jacobi_eigh(a, device: str):
  """Eigenvalues (unsorted, batch + (n,)) and eigenvectors (columns) of the symmetric a, its largest |entry| in
  [1, 2) or 0.

  The eigenvalues are the Rayleigh quotients v^T A v of the normalized vectors, not the final diagonal: that
  diagonal carries the rounding of every rotation (~5 eps |A| at n = 64), the quotient only one product's and the
  square of the vectors' error (~2.5 eps; measured on random symmetric matrices, n = 16..64)."""
  n = a.shape[-1]
  padded = _pad_to_even(a, (-2, -1))
  eye = _identity(padded.shape, a)
  tiny = (_eps(a) * pairs.magnitude(a).max(-1).max(-1, keepdim=True))
  _, v = _sweeps(_eigh_round, device, [padded, eye], [tiny])
  v = _unit_columns(v[..., :n, :n])
  return pairs.real(pairs.mul(pairs.conj(v), pairs.matmul(a, v))).sum(-2), v


def _eigh_sorted(a, device: str):
  """_jacobi_eigh's results sorted ascending, with the sign rule applied to the vectors."""
  w, v = _jacobi_eigh(a, device)
  order = _order(w, descending=False)
  v = _reorder_columns(v, order)
  return _reorder(w, order), pairs.mul(v, _sign_of_largest(v))


@real_and_complex("eigh", host_sync=True)
def _eigh(ctx, a, *, lower, sort_eigenvalues, subset_by_index, algorithm):
  """The eigenvalues ascending and the eigenvectors of the symmetric (Hermitian) matrix whose `lower` (or upper)
  triangle `a` holds (the other is not read; nor, as LAPACK's heevd, the imaginary part of its diagonal). Returns
  [v, w] (the primitive's order)."""
  *batch, n, _ = a.shape
  rows, cols = arange(n).reshape(n, 1), arange(n).reshape(1, n)
  read = (rows >= cols) if lower else (rows <= cols)
  # (the rule realizes its work anyway: its results' expressions start here, never deeper than depth.py's bound)
  triangle = pairs.where(read, a, 0).contiguous()
  bad = _nonfinite(triangle)
  symmetric = pairs.where(bad, 0, pairs.where(rows == cols, pairs.real(triangle), triangle + pairs.adjoint(triangle)))
  scale = _power_of_two_scale(symmetric)
  w, v = _eigh_sorted(pairs.div(symmetric, scale), ctx.device)
  w = w * scale.reshape(*batch, 1)
  if subset_by_index is not None:
    start, end = subset_by_index
    w, v = w[..., start:end], v[..., start:end]
  return [pairs.where(bad, pairs.nan_like(v), v), bad.reshape(*batch, 1).where(math.nan, w)]


def _identity(shape, like):
  """The identity matrices (their leading columns, for a tall shape) broadcast to `shape` (batch + (R, k)), real or
  complex as `like`."""
  rows, cols = shape[-2:]
  eye = (arange(rows).reshape(rows, 1) == arange(cols).reshape(1, cols)).cast(like.dtype).expand(*shape)
  return Pair(eye, eye.zeros_like()) if pairs.is_pair(like) else eye


def _complete(y, live, device: str):
  """y (batch + (R, k)), its columns orthonormal where `live` (batch + (1, k), a prefix of the columns) and zero
  elsewhere, with those others replaced by orthonormal vectors orthogonal to the live ones.

  The candidates are the first k columns C of the identity: with M = Y^T C, G = (P C)^T (P C) = I - M^T M for the
  projector P = I - Y Y^T onto the complement, and as M has rank r (the live count), at least k - r of G's
  eigenvalues are exactly 1. The eigenvectors z of the k - r largest give orthonormal P C z / |P C z| there, and
  sorted ascending they are the last k - r: the positions of the columns that are not live."""
  rows, k = y.shape[-2:]
  top = y[..., :k, :]  # M^H: C's rows of y
  g = _identity(top.shape, y) - pairs.matmul(top, pairs.adjoint(top))
  _, z = _eigh_sorted(g, device)
  candidates = z.pad(((0, 0),) * (z.ndim - 2) + ((0, rows - k), (0, 0))) if rows > k else z
  p = candidates - pairs.matmul(y, pairs.matmul(pairs.adjoint(top), z))
  return pairs.where(live, y, pairs.div(p, pairs.norm(p, -2)))


def _empty_svd(ctx, a, full_matrices: bool, compute_uv: bool) -> list:
  """A matrix with no rows or no columns (or an empty batch): no singular values; full U and V^T are identities,
  as in JAX's _empty_svd."""
  outs = [Tensor.zeros(*ctx.out_avals[0].shape, dtype=a.dtype, device=ctx.device)]
  if compute_uv:
    for aval in ctx.out_avals[1:]:
      outs.append(_identity(aval.shape, a).contiguous() if full_matrices else pairs.zeros(aval.shape, a, ctx.device))
  return outs


@real_and_complex("svd", host_sync=True)
def _svd(ctx, a, *, full_matrices, compute_uv, subset_by_index, algorithm=None):
  """Singular values descending, and with compute_uv U and V^T, by one-sided Jacobi on the columns of A (or A^T).
  Returns [s, u, vt] or [s] (the primitive's order).

  The working matrix X gets the fewer columns (A for a tall A, A^T for a wide one), except for full U or V of a
  non-square A: then the more columns, so that the accumulated rotations are the full square factor. The other
  factor is W's columns over their norms, completed where those vanish (_complete)."""
  *batch, m, n = a.shape
  k = min(m, n)
  if 0 in a.shape:
    return _empty_svd(ctx, a, full_matrices, compute_uv)
  a = a.contiguous()  # (the rule realizes its work anyway: its results' expressions start here)
  bad = _nonfinite(a)
  scale = _power_of_two_scale(pairs.where(bad, 0, a))
  x = pairs.div(pairs.where(bad, 0, a), scale)
  wide = compute_uv and full_matrices and m != n
  transposed = (m < n) != wide
  x = pairs.adjoint(x) if transposed else x
  rows, cols = x.shape[-2:]
  eps = _eps(x)
  norm = pairs.real(pairs.mul(pairs.conj(x), x)).sum(-1).sum(-1, keepdim=True).sqrt()  # |X|_F, batch + (1,)
  negligible = (NEGLIGIBLE * eps * norm).square()
  work = [_pad_to_even(x, (-1,))]
  work.append(_identity(batch + [work[0].shape[-1]] * 2, x))
  w, q = _sweeps(_svd_round_for(math.sqrt(rows) * eps), ctx.device, work, [negligible])
  w, q = w[..., :cols], _unit_columns(q[..., :cols, :cols])
  # NB: sigma_j = |X q_j| for the normalized q_j, not |w_j|: w carries the rounding of every rotation (~15 eps
  # relative at n = 30-60, 40 at 64), X q_j one product's and the square of q's error (~0.5 eps, LAPACK's)
  sigma = pairs.norm(pairs.matmul(x, q), -2).squeeze(-2)
  order = _order(sigma, descending=True)
  sigma = _reorder(sigma, order)
  flat_bad = bad.reshape(*batch, 1)
  s = flat_bad.where(math.nan, sigma[..., :k] * scale.reshape(*batch, 1))
  # (JAX allows a subset with full matrices only when it is all of them)
  start, end = subset_by_index if subset_by_index is not None and not full_matrices else (0, None)
  if not compute_uv:
    return [s[..., start:end]]
  w = _reorder_columns(w, order)[..., :k]
  q = _reorder_columns(q, order)
  live = sigma[..., :k].unsqueeze(-2) > NEGLIGIBLE * eps * norm.unsqueeze(-1)
  y = pairs.where(live, _unit_columns(w), 0)
  if not live.min().item():  # a (numerically) rank-deficient member: its vectors for the zero singular values
    y = _complete(y, live, ctx.device).contiguous()
  u, v = (q, y) if transposed else (y, q)
  sign_u, sign_v = _sign_of_largest(u), _sign_of_largest(v)
  u, v = pairs.mul(u, sign_u), pairs.mul(v, pairs.cat([sign_u[..., :k], sign_v[..., k:]], dim=-1))
  if not full_matrices:
    u, v = u[..., :k], v[..., :k]
  vt = pairs.adjoint(v)
  return [s[..., start:end], pairs.where(bad, pairs.nan_like(u), u[..., start:end]), pairs.where(bad, pairs.nan_like(vt), vt[..., start:end, :])]
