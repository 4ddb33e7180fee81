"""cholesky, triangular_solve, lu and lu_pivots_to_permutation on tinygrad, against JAX on XLA (LAPACK): the
primitives with every flag, batched, rectangular and singular matrices, non-positive-definite Cholesky inputs, and
the jnp.linalg / jax.scipy.linalg functions built on them. Floats compare within 1e-4: LAPACK sums in another order.
"""
import functools

import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np
import pytest

import tinyjax.numpy as tnp
import tinyjax.scipy.linalg
from oracle import check
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


@pytest.mark.parametrize("trans", [0, 1])
def test_scipy_lu_solve(trans):
  a, b = well_conditioned((3, 3)), np.random.default_rng(5).standard_normal((3, 2)).astype(np.float32)
  close(lambda np_, x, y: SCIPY[np_].lu_solve(SCIPY[np_].lu_factor(x), y, trans=trans), a, b)
