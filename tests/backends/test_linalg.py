"""The linear algebra primitives on tinygrad, against JAX on XLA (LAPACK): cholesky, triangular_solve, lu and
lu_pivots_to_permutation with every flag, batched, rectangular and singular matrices and non-positive-definite
Cholesky inputs; the Householder family (qr with and without pivoting, geqrf, householder_product, ormqr, hessenberg)
on tall, wide, batched, rank-deficient and zero-column matrices and NaN, inf, -0.0, huge and tiny entries;
cholesky_update and symmetric_product; and the jnp.linalg / jax.scipy.linalg functions built on them. Floats compare
within 1e-4: LAPACK sums in another order.
"""
import functools

import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
import tinyjax.scipy.linalg
from oracle import assert_like_jax, check, check_accuracy, check_traced, on_tinygrad
from xfail import param
from tinyjax.core.mirror import wrap

RTOL, ATOL = 1e-4, 1e-5
SHAPES = [(1, 1), (3, 3), (8, 8), (2, 3, 3)]
SCIPY = {jnp: jax.scipy.linalg, tnp: tinyjax.scipy.linalg}


def lax_linalg(np_, name, **params):
  """jax.lax.linalg.<name> with params, run lazily by tinyjax when np_ is tinyjax.numpy."""
  fn = functools.partial(getattr(jax.lax.linalg, name), **params)
  return fn if np_ is jnp else wrap(fn)


def well_conditioned(shape, seed=0):
  """Random entries plus n times the identity."""
  n = shape[-1]
  return (np.random.default_rng(seed).standard_normal(shape) + n * np.eye(n)).astype(np.float32)


def positive_definite(shape, seed=0):
  a = well_conditioned(shape, seed)
  return (a @ np.swapaxes(a, -1, -2)).astype(np.float32)


def close(fn, *args, native_only=True):
  return check(fn, *args, native_only=native_only, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cholesky_primitive(shape):
  """The strict upper triangle of the result is the input's, so it is filled with distinct values."""
  a = positive_definite(shape) + np.triu(np.full(shape[-2:], 7.0, np.float32), 1)
  close(lambda np_, x: lax_linalg(np_, "cholesky", symmetrize_input=False)(x), a)


def test_cholesky_scales_by_the_reciprocal_and_rounds_each_product_as_lapack():
  """LAPACK's potf2 (reference and OpenBLAS alike) scales a column by the reciprocal of its pivot and subtracts a
  rounded square from the next pivot. For 2 x 2 matrices that is all it does, whatever the BLAS kernels: XLA's bits.
  Divided by the pivot, and with the square contracted into a fused multiply-add (clang and POCL contract what is
  written together), 1,481 of these 4,000 factors differed from XLA's (990 in L[1, 0], 995 in L[1, 1]); with the
  reciprocal alone, 656."""
  rng = np.random.default_rng(11)
  a = rng.normal(size=(4000, 2, 2)).astype(np.float32)
  a = (a @ np.swapaxes(a, -1, -2) + np.float32(0.1) * np.eye(2, dtype=np.float32)).astype(np.float32)
  check(lambda np_, x: lax_linalg(np_, "cholesky", symmetrize_input=False)(x), a, rtol=0)


def test_cholesky_not_positive_definite():
  """XLA returns all NaN for the batch member whose factorization fails (here an indefinite matrix, one with a
  zero pivot), and factors the others; a NaN pivot is no failure (XLA only propagates it)."""
  a = np.array([[[1, 2], [2, 1]], [[4, 2], [2, 3]], [[0, 0], [0, 1]], [[1, 0], [np.nan, 1]], [[np.nan, 0], [0, 1]]],
               np.float32)
  close(lambda np_, x: lax_linalg(np_, "cholesky", symmetrize_input=False)(x), a)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_jnp_cholesky(shape):
  close(lambda np_, x: np_.linalg.cholesky(x), positive_definite(shape))


def test_jnp_cholesky_not_positive_definite():
  close(lambda np_, x: np_.linalg.cholesky(x), np.array([[1, 2], [2, 1]], np.float32))


FLAGS = [(left, lower, transpose, unit) for left in (True, False) for lower in (True, False)
         for transpose in (False, True) for unit in (False, True)]


@pytest.mark.parametrize("left_side,lower,transpose_a,unit_diagonal", FLAGS,
                         ids=["-".join(k for k, v in zip(("left", "lower", "T", "unit"), f) if v) or "none"
                              for f in FLAGS])
def test_triangular_solve(left_side, lower, transpose_a, unit_diagonal):
  """The other triangle holds NaN: it must not be read (nor the diagonal, with unit_diagonal)."""
  a = well_conditioned((2, 4, 4))
  a[..., ~np.tri(4, dtype=bool) if lower else np.tri(4, k=-1, dtype=bool)] = np.nan
  if unit_diagonal:
    a[..., np.eye(4, dtype=bool)] = np.nan
  b = np.random.default_rng(1).standard_normal((2, 4, 3) if left_side else (2, 3, 4)).astype(np.float32)
  solve = lambda np_: lax_linalg(np_, "triangular_solve", left_side=left_side, lower=lower, transpose_a=transpose_a,
                                 unit_diagonal=unit_diagonal)
  close(lambda np_, x, y: solve(np_)(x, y), a, b)


@pytest.mark.parametrize("lower,trans,unit_diagonal", [(lo, t, u) for lo in (True, False) for t in (0, 1, 2)
                                                        for u in (False, True)])
def test_scipy_solve_triangular(lower, trans, unit_diagonal):
  a, b = well_conditioned((3, 3)), np.random.default_rng(2).standard_normal((3,)).astype(np.float32)
  close(lambda np_, x, y: SCIPY[np_].solve_triangular(x, y, trans=trans, lower=lower, unit_diagonal=unit_diagonal),
        a, b)


@pytest.mark.parametrize("shape", SHAPES + [(3, 5), (5, 3)], ids=str)
def test_lu_primitive(shape):
  close(lambda np_, x: lax_linalg(np_, "lu")(x), well_conditioned(shape) if shape[-1] == shape[-2]
        else np.random.default_rng(3).standard_normal(shape).astype(np.float32))


def test_lu_pivoting():
  """Ties pick the first largest |value|; a zero column is left as it is (no division by the zero pivot)."""
  a = np.array([[[1, 2, 3], [-3, 1, 0], [3, 5, 1]], [[0, 1, 2], [0, 3, 4], [0, 5, 6]]], np.float32)
  close(lambda np_, x: lax_linalg(np_, "lu")(x), a)


def test_lu_pivots_to_permutation():
  pivots = np.array([[2, 2, 4], [1, 4, 3]], np.int32)
  close(lambda np_, p: lax_linalg(np_, "lu_pivots_to_permutation", permutation_size=5)(p), pivots)


@pytest.mark.parametrize("shape", SHAPES[:-1], ids=str)  # jax.scipy.linalg.lu takes no batch dimensions
def test_scipy_lu(shape):
  close(lambda np_, x: SCIPY[np_].lu(x), well_conditioned(shape))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_scipy_lu_factor(shape):
  close(lambda np_, x: SCIPY[np_].lu_factor(x), well_conditioned(shape))


# jnp.linalg.solve, inv, det and slogdet, and lu_solve, also gather, sort, scatter and a cond: those rules belong to
# other files; these tests check the whole function natively.
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_jnp_solve(shape):
  b = np.random.default_rng(4).standard_normal(shape[:-1] + (2,)).astype(np.float32)
  close(lambda np_, x, y: np_.linalg.solve(x, y), well_conditioned(shape), b)


@pytest.mark.parametrize("name", ["inv", "det", "slogdet"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_jnp_linalg(name, shape):
  close(lambda np_, x: getattr(np_.linalg, name)(x), well_conditioned(shape))


@pytest.mark.parametrize("condition", [1e3, 1e5], ids=["cond 1e3", "cond 1e5"])
def test_near_singular_solve(condition):
  """A system whose matrix has condition number 1e3 or 1e5 (singular values spaced from 1 to 1/condition): float32
  keeps only log10(1e7 / condition) digits of the solution, XLA's LU too. As accurate as XLA's from the float64
  truth (oracle.check_accuracy): the tolerance this conditioning gives."""
  rng = np.random.default_rng(6)
  u, _ = np.linalg.qr(rng.standard_normal((6, 6)))
  v, _ = np.linalg.qr(rng.standard_normal((6, 6)))
  a = (u * np.geomspace(1, 1 / condition, 6)) @ v.T
  b = rng.standard_normal((6, 2))
  check_accuracy(lambda np_, x, y: np_.linalg.solve(x, y), a.astype(np.float32), b.astype(np.float32))


@pytest.mark.parametrize("trans", [0, 1])
def test_scipy_lu_solve(trans):
  a, b = well_conditioned((3, 3)), np.random.default_rng(5).standard_normal((3, 2)).astype(np.float32)
  close(lambda np_, x, y: SCIPY[np_].lu_solve(SCIPY[np_].lu_factor(x), y, trans=trans), a, b)


# --- the Householder family: Q and R as LAPACK's geqrf / geqp3 and orgqr give them (their signs too)
def standard_normal(shape, seed=6):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("shape,mode", [((1, 1), "complete"), ((3, 3), "reduced"), ((5, 3), "reduced"),
                                        ((5, 3), "complete"), ((3, 5), "complete"), ((3, 5), "r"),
                                        ((2, 4, 4), "reduced")], ids=str)
def test_jnp_qr(shape, mode):
  """Q and R as accurate as LAPACK's float32 ones from its float64 ones (same signs: the same reflectors), and by
  their properties: Q R = A and Q^T Q = I to within 30 n eps (Householder QR's backward error is a small multiple of
  n eps |A|; JAX's own tests allow 200-300 eps)."""
  a = standard_normal(shape)
  result = check_accuracy(lambda np_, x: np_.linalg.qr(x, mode=mode), a)
  if mode != "r":
    q, r = (np.asarray(x, np.float64) for x in result)
    allowed = 30 * max(shape[-2:]) * np.finfo(np.float32).eps
    np.testing.assert_allclose(q @ r, a, atol=allowed * np.abs(a).max())
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(q.shape[-1]), r.shape[:-2] +
                                                                           (q.shape[-1],) * 2), atol=allowed)


# Special matrices, batched by shape (each batch member is factored on its own)
QR_SPECIAL = {
  "3x3": [
    [[0, 1, 2], [0, 3, 4], [0, 5, 6]],  # a zero first column: tau = 0, that reflector is the identity
    [[1, 2, 0], [0, 0, 0], [0, 0, 1]],  # rank deficient, zero below the diagonal: every tau 0
  ],
  "3x2": [
    [[0, 0], [0, 0], [0, 0]],
    [[1, 2], [np.nan, 3], [4, 5]],
    [[1, 2], [np.inf, 3], [4, 5]],
    [[1, np.inf], [2, 3], [4, 5]],
    # LAPACK's reflector skips the rows after its vector's last nonzero entry: the inf is not multiplied by 0
    [[1, 1], [1, 1], [0, np.inf]],
  ],
  "2x2": [
    [[-0.0, 1], [3, 3]],  # beta = -sign(-0.0) * 3 = +3
    [[0.0, 1], [3, 3]],
    [[1e20, 2], [3e20, 3]],  # squares overflow float32: the norms are scaled
    [[1e-20, 2e-20], [3e-20, 3e-20]],  # squares underflow float32
    # ... and the columns after the last one nonzero in its rows: the zero column stays zero next to the NaN
    [[1, 0], [np.nan, 0]],
  ],
}


@pytest.mark.parametrize("shape", QR_SPECIAL)
def test_qr_special_matrices(shape):
  close(lambda np_, x: np_.linalg.qr(x, mode="complete"), np.array(QR_SPECIAL[shape], np.float32))


def test_qr_rank_deficient():
  """After the first reflector the trailing columns are rounding noise, so Q's later columns are too (LAPACK's as
  ours): R, whose trailing rows are that noise, is what is defined."""
  close(lambda np_, x: np_.linalg.qr(x, mode="r"), np.array([[1, 2, 3], [2, 4, 6], [3, 6, 9]], np.float32))


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (2, 0, 0)], ids=str)
def test_qr_empty(shape):
  close(lambda np_, x: np_.linalg.qr(x, mode="complete"), np.zeros(shape, np.float32))


@pytest.mark.parametrize("shape,mode", [((1, 1), "full"), ((3, 3), "full"), ((5, 3), "economic"),
                                        ((3, 5), "full"), ((2, 4, 4), "r")], ids=str)
def test_scipy_qr_pivoting(shape, mode):
  close(lambda np_, x: SCIPY[np_].qr(x, mode=mode, pivoting=True), standard_normal(shape))


@pytest.mark.parametrize("a", [
  param(np.eye(3), name="qr pivoting", id="equal norms"),  # ties go to the first column, and stay exact ties
  param([[0, 1, 2], [0, 3, 4], [0, 5, 6]], name="qr pivoting", id="zero column"),
  param([[1, 2, 0], [0, 0, 0], [0, 0, 1]], name="qr pivoting", id="rank deficient"),
  param([[1, 2], [np.nan, 3], [4, 5]], name="qr pivoting", id="NaN"),  # a NaN norm first is kept, as idamax does
  param([[1, 2], [3, np.nan], [4, 5]], name="qr pivoting", id="NaN later"),
  param([[1, 2], [np.inf, 3], [4, 5]], name="qr pivoting", id="inf"),
])
def test_scipy_qr_pivoting_special(a):
  close(lambda np_, x: SCIPY[np_].qr(x, pivoting=True), np.array(a, np.float32))


def test_scipy_qr_pivoting_downdated_tie():
  """Every column's norm is 3; after the first step two downdated norms are equal in exact arithmetic, so which
  one LAPACK picks depends on its rounding of the moment (it differs between machines of one kind). The result is
  checked for what holds either way: a valid pivoted factorization whose first pivot and |R| diagonal match JAX's."""
  a = np.array([[1, 2, 2, 0], [2, 0, 1, 2], [2, 1, 0, 2], [0, 2, 2, 1]], np.float32)
  q, r, p = (np.asarray(v) for v in tinyjax.scipy.linalg.qr(tnp.asarray(a), pivoting=True))
  _, r_jax, p_jax = (np.asarray(v) for v in jax.scipy.linalg.qr(a, pivoting=True))
  assert sorted(p.tolist()) == [0, 1, 2, 3] and p[0] == p_jax[0]
  np.testing.assert_allclose(q @ r, a[:, p], atol=ATOL)
  np.testing.assert_allclose(q.T @ q, np.eye(4), atol=ATOL)
  np.testing.assert_array_equal(np.tril(r, -1), 0)
  np.testing.assert_allclose(np.abs(np.diag(r))[:2], np.abs(np.diag(r_jax))[:2], rtol=RTOL)


def test_qr_raw():
  """mode="raw" is the geqrf primitive: the reflectors below R's diagonal and the taus."""
  close(lambda np_, x: np_.linalg.qr(x, mode="raw"), standard_normal((2, 5, 3)))


def test_householder_product():
  """Any taus, fewer than the columns: the later columns start as the identity's."""
  close(lambda np_, x, t: lax_linalg(np_, "householder_product")(x, t), standard_normal((2, 5, 3)),
        standard_normal((2, 2), seed=7))


@pytest.mark.parametrize("left,transpose", [(True, False), (True, True), (False, False), (False, True)])
def test_ormqr(left, transpose):
  def ormqr(np_, x, c):
    reflectors, taus = np_.linalg.qr(x, mode="raw")
    return lax_linalg(np_, "ormqr", left=left, transpose=transpose)(np_.swapaxes(reflectors, -1, -2), taus, c)
  close(ormqr, standard_normal((2, 5, 3)), standard_normal((2, 5, 4) if left else (2, 4, 5), seed=7))


@pytest.mark.parametrize("mode", ["left", "right"])
def test_scipy_qr_multiply(mode):
  close(lambda np_, x, c: SCIPY[np_].qr_multiply(x, c, mode=mode), standard_normal((5, 3)),
        standard_normal((3, 2) if mode == "left" else (2, 5), seed=7))


def test_qr_gradient():
  """JAX's derivative of qr: qr itself, triangular_solve and matmuls, traced whole."""
  weights = np.arange(12, dtype=np.float32).reshape(4, 3)
  loss = lambda x: (jnp.linalg.qr(x)[0] * weights).sum() + jnp.linalg.qr(x)[1].sum()
  check_traced(jax.grad(loss), standard_normal((4, 3)), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("a", [param(well_conditioned((4, 4)), name="jax.scipy.linalg.polar", id="4x4")])
def test_scipy_polar(a):
  """QDWH: qr in a loop, of the matrix stacked on the identity with dynamic_update_slice."""
  close(lambda np_, x: SCIPY[np_].polar(x), a)


def test_qr_in_jit_replays():
  """A program that TinyJit captures and replays: each step's index is a buffer of the capture, the same every run."""
  qr = tinyjax.jit(tnp.linalg.qr)
  for seed in range(3):
    x = standard_normal((6, 2), seed)
    with on_tinygrad():
      actual = qr(x)
    assert_like_jax(actual, jnp.linalg.qr(x), RTOL, ATOL)


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (2, 5, 5)], ids=str)
def test_hessenberg(shape):
  close(lambda np_, x: lax_linalg(np_, "hessenberg")(x), standard_normal(shape))


@pytest.mark.parametrize("name", ["zero first column", "NaN", "inf below the diagonal"])
def test_hessenberg_special(name):
  a = {"zero first column": [[1, 2, 3], [0, 5, 6], [0, 8, 9]], "NaN": [[1, 2, 3], [4, 5, 6], [np.nan, 8, 9]],
       "inf below the diagonal": [[1, 2, 3], [4, np.inf, 6], [0, 8, 9]]}[name]
  close(lambda np_, x: lax_linalg(np_, "hessenberg")(x), np.array(a, np.float32))


def test_scipy_hessenberg():
  close(lambda np_, x: SCIPY[np_].hessenberg(x, calc_q=True), standard_normal((5, 5)))


EMPTY_BATCH = {"hessenberg": lambda np_, x: lax_linalg(np_, "hessenberg")(x), "qr": lambda np_, x: np_.linalg.qr(x),
               "eigh": lambda np_, x: np_.linalg.eigh(x), "svd": lambda np_, x: np_.linalg.svd(x),
               "cholesky": lambda np_, x: np_.linalg.cholesky(x), "lu": lambda np_, x: lax_linalg(np_, "lu")(x)}


@pytest.mark.parametrize("dtype", [np.float32, np.complex64], ids=str)
@pytest.mark.parametrize("name", EMPTY_BATCH)
def test_empty_batch(name, dtype):
  """A batch of no matrices gives JAX's empty results. NB: computed without running the rules, whose loops over the
  columns took their full time on no data (a (0, 100, 100) hessenberg: 42 s)."""
  close(EMPTY_BATCH[name], np.zeros((0, 40, 40), dtype))


# --- rank-1 Cholesky update and the symmetric product (JAX's own formulas on CPU)
@pytest.mark.parametrize("w", [[-0.5, -0.3, 0.4, 1.0], [0, 1, 0, 2],
                               [1, np.nan, 0, 0]],
                         ids=["dense", "zeros: no rotation", "NaN"])
def test_cholesky_update(w):
  r = np.linalg.cholesky(positive_definite((4, 4))).T.astype(np.float32)
  close(lambda np_, x, y: lax_linalg(np_, "cholesky_update")(x, y), r, np.array(w, np.float32))


def test_symmetric_product():
  close(lambda np_, a, c: lax_linalg(np_, "symmetric_product", alpha=0.5, beta=2.0)(a, c), standard_normal((2, 3, 5)),
        standard_normal((2, 3, 3), seed=7))


# --- 16-bit floats: JAX's factorizations refuse them (LAPACK and cuSOLVER have none), its triangular solve computes
HALF_PRECISION_CALLS = {
  "qr": lambda np_, a: np_.linalg.qr(a),
  "cholesky": lambda np_, a: np_.linalg.cholesky(a),
  "lu": lambda np_, a: SCIPY[np_].lu(a),
  "svd": lambda np_, a: np_.linalg.svd(a),
  "eigh": lambda np_, a: np_.linalg.eigh(a),
  "eig": lambda np_, a: np_.linalg.eig(a),
  "det (lu)": lambda np_, a: np_.linalg.det(a),
  "solve (lu)": lambda np_, a: np_.linalg.solve(a, a),
  "hessenberg": lambda np_, a: SCIPY[np_].hessenberg(a),
  "schur": lambda np_, a: SCIPY[np_].schur(a),
  "householder_product": lambda np_, a: lax_linalg(np_, "householder_product")(a, a[0]),
  "tridiagonal": lambda np_, a: lax_linalg(np_, "tridiagonal")(a),
}


@pytest.mark.parametrize("dtype", [np.float16, jnp.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(HALF_PRECISION_CALLS))
@pytest.mark.parametrize("how", ["eager", "jit"])
def test_factorizations_of_16_bit_floats_raise_jaxs_error_at_the_call(name, dtype, how):
  a = positive_definite((4, 4)).astype(dtype)  # NB: not 3 x 3, whose det JAX writes out without lu
  fn = HALF_PRECISION_CALLS[name]
  calls = {np_: fn if how == "eager" else (jax.jit if np_ is jnp else tinyjax.jit)(functools.partial(fn, np_))
           for np_ in (jnp, tnp)}
  call = lambda np_: calls[np_](np_, a) if how == "eager" else calls[np_](a)  # noqa: E731
  with pytest.raises(NotImplementedError) as expected:
    jax.block_until_ready(call(jnp))
  with pytest.raises(NotImplementedError) as actual:
    call(tnp)  # at the call, before anything is read
  assert str(actual.value) == str(expected.value) and f"Unsupported dtype {np.dtype(dtype).name}" in str(actual.value)


def test_triangular_solve_of_16_bit_floats_computes_as_jaxs():
  a = np.tril(well_conditioned((4, 4))).astype(np.float16)
  b = standard_normal((4, 2)).astype(np.float16)
  check(lambda np_, a, b: SCIPY[np_].solve_triangular(a, b, lower=True), a, b)


# --- complex matrices: LAPACK's z routines (L L^H, conjugate_a, izamax's |re| + |im| pivots, complex reflectors
# with a real beta on R's diagonal), against XLA's results
def complex_normal(shape, seed=21, dtype=np.complex64):
  rng = np.random.default_rng(seed)
  return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def complex_well_conditioned(shape, seed=21, dtype=np.complex64):
  return (complex_normal(shape, seed, dtype) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def complex_positive_definite(shape, seed=21, dtype=np.complex64):
  a = complex_well_conditioned(shape, seed, dtype)
  return (a @ np.conj(np.swapaxes(a, -1, -2))).astype(dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_complex_cholesky(shape):
  """The strict upper triangle is the input's; the diagonal's imaginary part is not read (a Hermitian matrix's is 0)."""
  n = shape[-1]
  a = complex_positive_definite(shape) + np.triu(np.full((n, n), 7 - 2j, np.complex64), 1) + 3j * np.eye(n)
  close(lambda np_, x: lax_linalg(np_, "cholesky", symmetrize_input=False)(x), a.astype(np.complex64))


def test_complex_cholesky_not_positive_definite():
  a = np.array([[[1, 2j], [-2j, 1]], [[4, 1 + 1j], [1 - 1j, 3]]], np.complex64)
  close(lambda np_, x: np_.linalg.cholesky(x), a)


@pytest.mark.parametrize("left_side,lower,transpose_a,conjugate_a", FLAGS,
                         ids=["-".join(k for k, v in zip(("left", "lower", "T", "conj"), f) if v) or "none"
                              for f in FLAGS])
def test_complex_triangular_solve(left_side, lower, transpose_a, conjugate_a):
  a = complex_well_conditioned((2, 4, 4))
  a[..., ~np.tri(4, dtype=bool) if lower else np.tri(4, k=-1, dtype=bool)] = np.nan
  b = complex_normal((2, 4, 3) if left_side else (2, 3, 4), seed=22)
  solve = lambda np_: lax_linalg(np_, "triangular_solve", left_side=left_side, lower=lower, transpose_a=transpose_a,
                                 conjugate_a=conjugate_a)
  close(lambda np_, x, y: solve(np_)(x, y), a, b)


@pytest.mark.parametrize("shape", SHAPES + [(3, 5), (5, 3)], ids=str)
def test_complex_lu(shape):
  """Pivots by |re| + |im| (izamax): the third row (3 + 0j) wins over the second (2 + 2j) though |2 + 2j| > 3."""
  close(lambda np_, x: lax_linalg(np_, "lu")(x), complex_normal(shape))
  close(lambda np_, x: lax_linalg(np_, "lu")(x), np.array([[1, 1], [2 + 2j, 1], [3.5, 2]], np.complex64))


@pytest.mark.parametrize("name", ["solve", "inv", "det", "slogdet"])
def test_complex_jnp_linalg(name):
  a, b = complex_well_conditioned((2, 4, 4)), complex_normal((2, 4, 2), seed=23)
  fn = (lambda np_, x: np_.linalg.solve(x, b)) if name == "solve" else (lambda np_, x: getattr(np_.linalg, name)(x))
  close(fn, a)


@pytest.mark.parametrize("shape,mode", [((1, 1), "complete"), ((3, 3), "reduced"), ((5, 3), "complete"),
                                        ((3, 5), "complete"), ((2, 4, 4), "r"), ((2, 5, 3), "raw")], ids=str)
def test_complex_qr(shape, mode):
  """R's diagonal is real (LAPACK's beta), with the sign opposite to the real part of the column's top entry."""
  close(lambda np_, x: np_.linalg.qr(x, mode=mode), complex_normal(shape))


@pytest.mark.parametrize("a", [
  param([[[2j, 1], [0, 1], [0, 3]], [[2, 1j], [0, 1], [0, 3]]], name="complex qr", id="zero below the diagonal"),
  param([[[1, 2], [np.nan, 1j], [1, 1]]], name="complex qr", id="NaN"),
])
def test_complex_qr_special(a):
  """A column zero below the diagonal but complex on it still reflects (tau != 0: beta must be real); a real one
  keeps tau = 0; NaN spreads as in LAPACK."""
  a = np.array(a, np.complex64)
  close(lambda np_, x: np_.linalg.qr(x, mode="complete"), a)
  close(lambda np_, x: np_.linalg.qr(x, mode="raw"), a)


def test_complex_scipy_qr_pivoting():
  close(lambda np_, x: SCIPY[np_].qr(x, pivoting=True), complex_normal((4, 5)))


def test_complex_householder_and_ormqr():
  close(lambda np_, x, t: lax_linalg(np_, "householder_product")(x, t), complex_normal((2, 5, 3)),
        complex_normal((2, 2), seed=24))
  for mode, c in (("left", complex_normal((3, 2), seed=25)), ("right", complex_normal((2, 5), seed=25))):
    close(lambda np_, x, y: SCIPY[np_].qr_multiply(x, y, mode=mode), complex_normal((5, 3)), c)


def test_complex_hessenberg():
  close(lambda np_, x: lax_linalg(np_, "hessenberg")(x), complex_normal((2, 5, 5)))


@pytest.mark.float64
def test_complex128(x64):
  a = complex_well_conditioned((3, 3), dtype=np.complex128)
  check(lambda np_, x: (np_.linalg.cholesky(x @ np_.conj(x.T)), np_.linalg.qr(x), np_.linalg.solve(x, x[:, :1])),
        a, rtol=1e-10, atol=1e-12)


def test_a_factorization_schedules_its_steps_once(monkeypatch):
  """A factorization's steps are replayed by TinyJits of a step shared by every loop of its layout: a new program
  that solves a system of the same shapes schedules a few realizes per call, not several per row (tinygrad takes tens
  of milliseconds to schedule each), for its first STEPPED_PLAIN_RUNS calls; then TinyJit captures it (each step
  scheduled once), and its later calls schedule nothing (their inputs' copies are the device allocator's). Every
  result is JAX's."""
  from tinygrad import Tensor
  from tinyjax.backends.tinygrad import STEPPED_PLAIN_RUNS
  n = 40
  a, b = well_conditioned((n, n)), np.ones((n, 3), np.float32)
  assert_like_jax(tinyjax.jit(tnp.linalg.solve)(a, b), jnp.linalg.solve(a, b), rtol=RTOL, atol=ATOL)
  scheduled = []
  schedule = Tensor.linear_with_vars
  def counted(*tensors):
    scheduled.append(len(tensors))
    return schedule(*tensors)
  monkeypatch.setattr(Tensor, "linear_with_vars", counted)
  solve_twice = tinyjax.jit(lambda x, y: tnp.linalg.solve(x, y) * 2)
  per_call = []
  for call in range(STEPPED_PLAIN_RUNS + 2):
    x, y = a.T + call, b  # copied to the device at the call, without a schedule
    scheduled.clear()
    result = solve_twice(x, y).block_until_ready()
    per_call.append(len(scheduled))
    assert_like_jax(result, jnp.linalg.solve(a.T + call, b) * 2, rtol=RTOL, atol=ATOL)
  # lu (n steps), its permutation (n) and two triangular solves (n each): one realize a step without the replays
  assert all(0 < count < n for count in per_call[:STEPPED_PLAIN_RUNS]), per_call
  assert per_call[STEPPED_PLAIN_RUNS] >= 4 * n and per_call[-1] == 0, per_call
