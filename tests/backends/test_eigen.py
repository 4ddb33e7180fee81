"""eigh and svd on tinygrad (Jacobi rotations), against JAX on XLA (LAPACK's syevd and gesdd), natively only.

Every output has JAX's shape, dtype and weak type. Eigenvalues and singular values equal JAX's within float32 (or
float64) accuracy, relative to the largest in magnitude. Vectors are unique only up to sign (and within repeated
values, up to rotation), and LAPACK's signs follow its iterations, so they are checked by their properties:
A V = V diag(w), V^T V = I; U diag(s) V^T = A, U^T U = I, V V^T = I; and by sign-free functions of them (pinv, the
gradients). NaN in: all of the batch member's outputs NaN, as JAX's.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
from oracle import check, check_accuracy, native
from tinyjax.core.mirror import wrap

# relative to the largest eigenvalue or singular value, or to |A|: Jacobi and LAPACK round differently
TOLERANCE = {np.float32: 1e-4, np.float64: 1e-11}
# vectors' residuals and orthogonality (JAX's own tests allow 200-300 eps)
PROPERTY = {np.float32: 2e-5, np.float64: 5e-14}


def lax_linalg(np_, name, **params):
  fn = functools.partial(getattr(jax.lax.linalg, name), **params)
  return fn if np_ is jnp else wrap(fn)


def standard_normal(shape, seed=0, dtype=np.float32):
  return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def symmetric(shape, seed=0, dtype=np.float32):
  x = standard_normal(shape, seed, dtype)
  return (x + np.swapaxes(x, -1, -2)).astype(dtype)


def run_both(fn, *args):
  """fn(jnp, *args) on XLA and fn(tnp, *args) on tinygrad with nothing falling back: both as lists of numpy arrays,
  after checking that each output has JAX's shape, dtype and weak type."""
  expected = jax.tree_util.tree_leaves(fn(jnp, *args))
  with native():
    actual = fn(tnp, *args)
    tinyjax.flush()
  actual = jax.tree_util.tree_leaves(actual, is_leaf=lambda x: isinstance(x, tinyjax.Array))
  assert len(actual) == len(expected)
  for a, e in zip(actual, expected):
    assert (a.shape, a.dtype, a.weak_type) == (e.shape, e.dtype, e.aval.weak_type), (a.aval, e.aval)
  return [np.asarray(a) for a in actual], [np.asarray(e) for e in expected]


def assert_values(actual, expected, dtype=np.float32):
  """Eigenvalues or singular values: equal within TOLERANCE relative to the largest of each batch member; NaN where
  JAX has NaN."""
  np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
  finite = ~np.isnan(expected)
  size = np.abs(np.where(finite, expected, 0)).max(-1, keepdims=True) if expected.size else 0
  assert np.all(np.abs(np.where(finite, actual - expected, 0)) <= TOLERANCE[dtype] * size), (actual, expected)


def wide(x):
  """x in float64 (complex128 for a complex x)."""
  return x.astype(np.result_type(x.dtype, np.float64))


def adjoint(x):
  return np.conj(np.swapaxes(x, -1, -2))


def assert_orthonormal(q, dtype=np.float32, columns=True):
  q = wide(q)
  gram = adjoint(q) @ q if columns else q @ adjoint(q)
  assert np.abs(gram - np.eye(gram.shape[-1])).max() <= PROPERTY[dtype], np.abs(gram - np.eye(gram.shape[-1])).max()


def assert_eigenpairs(a, v, w, dtype=np.float32):
  """A V = V diag(w) relative to |A|, V orthonormal (unitary)."""
  a64, v64 = wide(a), wide(v)
  scale = max(np.abs(a64).max(), np.finfo(np.float64).tiny)
  assert np.abs(a64 @ v64 - v64 * w[..., None, :]).max() <= PROPERTY[dtype] * a.shape[-1] * scale
  assert_orthonormal(v, dtype)


def assert_svd(a, u, s, vt, dtype=np.float32):
  """U diag(s) V^T = A (with the first min(m, n) columns of U and rows of V^T) relative to |A|; U and V orthonormal."""
  k = min(a.shape[-2:])
  product = (wide(u[..., :, :k]) * s[..., None, :]) @ wide(vt[..., :k, :])
  scale = max(np.abs(a).max(), np.finfo(np.float64).tiny)
  assert np.abs(product - a).max() <= PROPERTY[dtype] * max(a.shape[-2:]) * scale
  assert_orthonormal(u, dtype)
  assert_orthonormal(vt, dtype, columns=False)


# --- eigh
EIGH_SHAPES = [(1, 1), (2, 2), (5, 5), (8, 8), (3, 4, 4)]


@pytest.mark.parametrize("shape", EIGH_SHAPES, ids=str)
def test_eigh_primitive(shape):
  """lower=True reads the lower triangle only: the upper holds other values."""
  a = symmetric(shape) + np.triu(np.full(shape[-2:], 3.0, np.float32), 1)
  (v, w), (_, w_jax) = run_both(lambda np_, x: lax_linalg(np_, "eigh", symmetrize_input=False)(x), a)
  assert_values(w, w_jax)
  assert_eigenpairs(np.tril(a) + np.swapaxes(np.tril(a, -1), -1, -2), v, w)
  assert np.all(np.diff(w, axis=-1) >= 0)


def test_eigh_upper():
  """lower=False reads the upper triangle only: the lower holds NaN, which must not be read."""
  a = symmetric((2, 5, 5), seed=1)
  a[..., np.tri(5, k=-1, dtype=bool)] = np.nan
  (v, w), (_, w_jax) = run_both(lambda np_, x: lax_linalg(np_, "eigh", lower=False, symmetrize_input=False)(x), a)
  assert_values(w, w_jax)
  full = np.triu(a) + np.swapaxes(np.triu(a, 1), -1, -2)
  assert_eigenpairs(full, v, w)


@pytest.mark.parametrize("a", [np.eye(4, dtype=np.float32), np.diag([2, 1, 2, 3, 1]).astype(np.float32),
                               np.zeros((3, 3), np.float32), np.full((4, 4), 1.5, np.float32)],
                         ids=["identity", "repeated diagonal", "zero", "rank one"])
def test_eigh_repeated_eigenvalues(a):
  (w, v), (w_jax, _) = run_both(lambda np_, x: np_.linalg.eigh(x), a)
  assert_values(w, w_jax)
  assert_eigenpairs(a, v, w)


def test_eigh_nan():
  """A NaN in the triangle read makes that batch member's outputs all NaN, as in JAX; the others are unaffected.
  NB: an inf gives NaN eigenvalues in both, but LAPACK's vectors are what its arithmetic left (partly NaN, or the
  identity for an inf on the diagonal); here they are all NaN."""
  a = np.stack([symmetric((3, 3), seed=s) for s in range(5)])
  a[1, 2, 0] = np.nan
  a[2, 0, 2] = np.nan  # upper triangle: not read
  a[3, 1, 0] = -np.inf
  a[4, 1, 1] = np.inf
  (v, w), (v_jax, w_jax) = run_both(lambda np_, x: lax_linalg(np_, "eigh", symmetrize_input=False)(x), a)
  np.testing.assert_array_equal(np.isnan(v[:3]), np.isnan(v_jax[:3]))
  assert np.isnan(v[1]).all() and np.isnan(v[3:]).all()
  assert_values(w, w_jax)


def test_jnp_eigh_and_eigvalsh():
  a = symmetric((2, 6, 6), seed=2)
  (w, v, w2), (w_jax, _, w2_jax) = run_both(lambda np_, x: (*np_.linalg.eigh(x), np_.linalg.eigvalsh(x)), a)
  assert_values(w, w_jax)
  assert_values(w2, w2_jax)
  assert_eigenpairs(a, v, w)


def test_eigh_clustered_and_graded():
  """Jacobi's hard cases, n = 16: eigenvalues in clusters of equal ones, and eigenvalues from 1e-6 to 1 (in values
  relative to the largest)."""
  q, _ = np.linalg.qr(np.random.default_rng(3).standard_normal((2, 16, 16)))
  spectra = np.stack([np.repeat([-2.0, 0.0, 1.0, 3.0], 4), np.logspace(-6, 0, 16) * (-1) ** np.arange(16)])
  a = ((q * spectra[:, None, :]) @ np.swapaxes(q, -1, -2)).astype(np.float32)
  a = (a + np.swapaxes(a, -1, -2)) / 2
  (w, v), (w_jax, _) = run_both(lambda np_, x: np_.linalg.eigh(x), a)
  assert_values(w, w_jax)
  assert_eigenpairs(a, v, w)


def test_eigh_subset_by_index():
  """XLA's CPU refuses subset_by_index; tinygrad computes all and slices: checked against all of JAX's, sliced."""
  a = symmetric((5, 5), seed=4)
  with native():
    v, w = lax_linalg(tnp, "eigh", subset_by_index=(1, 4))(a)
    v, w = np.asarray(v), np.asarray(w)
  v_all, w_all = jax.lax.linalg.eigh(a)
  assert v.shape == (5, 3) and w.shape == (3,)
  assert_values(w, np.asarray(w_all)[1:4])
  assert np.abs(a @ v - v * w).max() <= 1e-4 * np.abs(a).max()


# --- svd
SVD_SHAPES = [(1, 1), (2, 2), (8, 8), (3, 5), (5, 3), (2, 3, 4)]


@pytest.mark.parametrize("full_matrices", [True, False], ids=["full", "reduced"])
@pytest.mark.parametrize("shape", SVD_SHAPES, ids=str)
def test_svd(shape, full_matrices):
  a = standard_normal(shape, seed=5)
  (u, s, vt), (_, s_jax, _) = run_both(lambda np_, x: np_.linalg.svd(x, full_matrices=full_matrices), a)
  assert_values(s, s_jax)
  assert_svd(a, u, s, vt)
  assert np.all(np.diff(s, axis=-1) <= 0)


@pytest.mark.parametrize("shape", [(3, 5), (2, 6, 6)], ids=str)
def test_svd_values_only(shape):
  a = standard_normal(shape, seed=6)
  (s,), (s_jax,) = run_both(lambda np_, x: np_.linalg.svd(x, compute_uv=False), a)
  assert_values(s, s_jax)


@pytest.mark.parametrize("a", [
  np.zeros((3, 4), np.float32),
  np.outer([1, 2, 3, 4], [1, -1, 2]).astype(np.float32),
  np.diag([3, 0, 1, 0]).astype(np.float32),
  np.array([[1e-3, 2], [3e3, 4]], np.float32),
], ids=["zero", "rank one", "diagonal with zeros", "badly scaled"])
def test_svd_rank_deficient(a):
  """Zero singular values: their vectors complete an orthonormal basis (full and reduced alike)."""
  for full_matrices in (True, False):
    (u, s, vt), (_, s_jax, _) = run_both(lambda np_, x: np_.linalg.svd(x, full_matrices=full_matrices), a)
    assert_values(s, s_jax)
    assert_svd(a, u, s, vt)


def test_svd_graded():
  """Columns scaled from 1 to 1e-6 (A = B D, B well-conditioned): one-sided Jacobi finds the small singular values
  to high relative accuracy (and so does float64 LAPACK: the reference)."""
  rng = np.random.default_rng(7)
  a = (rng.standard_normal((12, 10)) * np.logspace(0, -6, 10)).astype(np.float32)
  (u, s, vt), (_, s_jax, _) = run_both(lambda np_, x: np_.linalg.svd(x, full_matrices=False), a)
  assert_values(s, s_jax)
  exact = np.linalg.svd(a.astype(np.float64), compute_uv=False)
  np.testing.assert_allclose(s, exact, rtol=1e-5)  # relative to each, the smallest too
  assert_svd(a, u, s, vt)


def test_svd_nan():
  """A NaN makes all of that member's outputs NaN, as in JAX. NB: an inf gives NaN singular values in both, but
  LAPACK's vectors are what its workspace held; here they are NaN too."""
  a = standard_normal((3, 3, 2), seed=8)
  a[1, 0, 1] = np.nan
  a[2, 2, 0] = np.inf
  (u, s, vt), (u_jax, s_jax, vt_jax) = run_both(lambda np_, x: np_.linalg.svd(x), a)
  assert_values(s, s_jax)
  np.testing.assert_array_equal(np.isnan(u[:2]), np.isnan(u_jax[:2]))
  np.testing.assert_array_equal(np.isnan(vt[:2]), np.isnan(vt_jax[:2]))
  assert np.isnan(u[2]).all() and np.isnan(vt[2]).all()
  assert_svd(a[0], u[0], s[0], vt[0])


def test_svd_subset_by_index():
  """XLA's CPU refuses subset_by_index; tinygrad computes all and slices: checked against all of JAX's, sliced."""
  a = standard_normal((4, 6), seed=9)
  with native():
    u, s, vt = lax_linalg(tnp, "svd", full_matrices=False, subset_by_index=(1, 3))(a)
    u, s, vt = np.asarray(u), np.asarray(s), np.asarray(vt)
  assert (u.shape, s.shape, vt.shape) == ((4, 2), (2,), (2, 6))
  assert_values(s, np.asarray(jax.lax.linalg.svd(a, compute_uv=False))[1:3])
  assert np.abs(a @ vt.T - u * s).max() <= 1e-4 * np.abs(a).max()


def test_svd_hermitian():
  """jnp.linalg.svd(hermitian=True) is eigh's."""
  a = symmetric((4, 4), seed=10)
  (u, s, vt), (_, s_jax, _) = run_both(lambda np_, x: np_.linalg.svd(x, hermitian=True), a)
  assert_values(s, s_jax)
  assert_svd(a, u, s, vt)


# --- what is built on them: sign-free, compared with JAX's as values
@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (2, 3, 5)], ids=str)
def test_pinv(shape):
  check_accuracy(lambda np_, x: np_.linalg.pinv(x), standard_normal(shape, seed=11))


def test_pinv_hermitian():
  check_accuracy(lambda np_, x: np_.linalg.pinv(x, hermitian=True), symmetric((4, 4), seed=12))


@pytest.mark.parametrize("a", [standard_normal((4, 5), seed=13), np.outer([1, 2, 3], [4, 5, 6]).astype(np.float32),
                               np.zeros((3, 3), np.float32)], ids=["full rank", "rank one", "zero"])
def test_matrix_rank(a):
  check(lambda np_, x: np_.linalg.matrix_rank(x), a)


@pytest.mark.parametrize("ord", [2, -2, "nuc"])
def test_norm_and_cond(ord):
  a = standard_normal((2, 4, 3), seed=14)
  check(lambda np_, x: np_.linalg.norm(x, ord=ord, axis=(-2, -1)), a, rtol=1e-5)
  if ord in (2, -2):
    check(lambda np_, x: np_.linalg.cond(x[..., :3, :], p=ord), a, rtol=1e-4)


# --- gradients through JAX's own rules (eigh's and svd's JVPs), by tinyjax.grad: 1/(w_i - w_j) amplifies rounding,
# so each is as accurate as XLA's from the float64 truth (oracle.check_accuracy)
def test_eigh_gradient():
  """d(sum of weighted eigenvalues) and d(a sign-free function of the eigenvectors): JAX's JVP of eigh runs eigh,
  then matmuls with the vectors."""
  weights = np.arange(1, 6, dtype=np.float32)
  def loss(np_, x):
    w, v = np_.linalg.eigh(x)
    return (w * weights).sum() + (v * v * weights).sum()
  grad = lambda np_: (jax.grad if np_ is jnp else tinyjax.grad)(functools.partial(loss, np_))
  check_accuracy(lambda np_, x: grad(np_)(x), symmetric((5, 5), seed=15))


def test_svd_gradient():
  """d(weighted singular values) and d(|U diag(s) V^T|^2): JAX's JVP of svd runs svd (reduced), then matmuls."""
  weights = np.arange(1, 4, dtype=np.float32)
  def loss(np_, x):
    u, s, vt = np_.linalg.svd(x, full_matrices=False)
    return (s * weights).sum() + (((u * s[..., None, :]) @ vt) ** 2).sum()
  grad = lambda np_: (jax.grad if np_ is jnp else tinyjax.grad)(functools.partial(loss, np_))
  check_accuracy(lambda np_, x: grad(np_)(x), standard_normal((4, 3), seed=16))


# --- float64
@pytest.mark.float64
def test_eigh_float64(x64):
  a = symmetric((2, 7, 7), seed=17, dtype=np.float64)
  (w, v), (w_jax, _) = run_both(lambda np_, x: np_.linalg.eigh(x), a)
  assert w.dtype == np.float64
  assert_values(w, w_jax, np.float64)
  assert_eigenpairs(a, v, w, np.float64)


@pytest.mark.float64
@pytest.mark.parametrize("shape", [(6, 6), (7, 4), (3, 6)], ids=str)
def test_svd_float64(x64, shape):
  a = standard_normal(shape, seed=18, dtype=np.float64)
  (u, s, vt), (_, s_jax, _) = run_both(lambda np_, x: np_.linalg.svd(x), a)
  assert s.dtype == np.float64
  assert_values(s, s_jax, np.float64)
  assert_svd(a, u, s, vt, np.float64)


# --- larger: odd n (a padded ring) and more rounds
def test_larger_matrices():
  a = symmetric((33, 33), seed=19)
  (w, v), (w_jax, _) = run_both(lambda np_, x: np_.linalg.eigh(x), a)
  assert_values(w, w_jax)
  assert_eigenpairs(a, v, w)
  b = standard_normal((40, 24), seed=20)
  (u, s, vt), (_, s_jax, _) = run_both(lambda np_, x: np_.linalg.svd(x), b)
  assert_values(s, s_jax)
  assert_svd(b, u, s, vt)


# --- complex matrices: Hermitian eigh by complex Jacobi rotations, complex one-sided Jacobi svd; values real
def complex_normal(shape, seed=0, dtype=np.complex64):
  rng = np.random.default_rng(seed)
  return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def hermitian(shape, seed=0, dtype=np.complex64):
  x = complex_normal(shape, seed, dtype)
  return (x + adjoint(x)).astype(dtype)


@pytest.mark.parametrize("shape", EIGH_SHAPES, ids=str)
def test_complex_eigh(shape):
  """lower=True reads the lower triangle only, and not the imaginary part of the diagonal (as LAPACK's heevd)."""
  n = shape[-1]
  a = hermitian(shape, seed=30) + np.triu(np.full((n, n), 3 + 1j, np.complex64), 1) + 2j * np.eye(n)
  (v, w), (_, w_jax) = run_both(lambda np_, x: lax_linalg(np_, "eigh", symmetrize_input=False)(x), a)
  assert w.dtype == np.float32 and v.dtype == np.complex64
  assert_values(w, w_jax)
  full = np.tril(a, -1) + adjoint(np.tril(a, -1)) + np.real(np.diagonal(a, axis1=-2, axis2=-1))[..., None] * np.eye(n)
  assert_eigenpairs(full, v, w)
  assert np.all(np.diff(w, axis=-1) >= 0)


def test_complex_eigh_upper_and_nan():
  a = hermitian((3, 4, 4), seed=31)
  a[..., np.tri(4, k=-1, dtype=bool)] = np.nan
  a[2, 0, 3] = np.nan + 1j
  (v, w), (_, w_jax) = run_both(lambda np_, x: lax_linalg(np_, "eigh", lower=False, symmetrize_input=False)(x), a)
  assert_values(w, w_jax)
  assert_eigenpairs(np.triu(a[:2]) + adjoint(np.triu(a[:2], 1)), v[:2], w[:2])
  assert np.isnan(v[2]).all() and np.isnan(w[2]).all()


def test_complex_eigh_repeated_and_real():
  """A complex Hermitian matrix with repeated eigenvalues, and a real symmetric one given as complex."""
  q, _ = np.linalg.qr(complex_normal((6, 6), seed=32))
  a = np.stack([(q * np.repeat([-1.0, 2.0], 3)) @ adjoint(q), symmetric((6, 6), seed=33)]).astype(np.complex64)
  (w, v), (w_jax, _) = run_both(lambda np_, x: np_.linalg.eigh(x), a)
  assert_values(w, w_jax)
  assert_eigenpairs(a, v, w)


@pytest.mark.parametrize("full_matrices", [True, False], ids=["full", "reduced"])
@pytest.mark.parametrize("shape", SVD_SHAPES, ids=str)
def test_complex_svd(shape, full_matrices):
  a = complex_normal(shape, seed=34)
  (u, s, vt), (_, s_jax, _) = run_both(lambda np_, x: np_.linalg.svd(x, full_matrices=full_matrices), a)
  assert s.dtype == np.float32 and u.dtype == vt.dtype == np.complex64
  assert_values(s, s_jax)
  assert_svd(a, u, s, vt)
  assert np.all(np.diff(s, axis=-1) <= 0)


@pytest.mark.parametrize("shape", [(7, 2), (2, 7), (3, 5), (6, 1), (2, 3, 2, 7)], ids=str)
def test_complex_svd_full_factors_of_non_square_matrices(shape):
  """Full U (or V) of a non-square complex matrix is the product of every rotation: unitary to float32 accuracy
  (JAX's testSVD draws entries as here, uniform in [-5, 5], and allows 3.6e-5 off the identity)."""
  rng = np.random.default_rng(39)
  a = (rng.uniform(-5, 5, (8, *shape)) + 1j * rng.uniform(-5, 5, (8, *shape))).astype(np.complex64)
  (u, s, vt), (_, s_jax, _) = run_both(lambda np_, x: np_.linalg.svd(x, full_matrices=True), a)
  assert_values(s, s_jax)
  assert_svd(a, u, s, vt)


def test_complex_svd_rank_deficient_and_nan():
  """Rank one (its null vectors completed to a unitary basis), and a NaN member."""
  a = np.stack([np.outer(complex_normal(4, seed=35), complex_normal(3, seed=36)), complex_normal((4, 3), seed=37),
                complex_normal((4, 3), seed=38)]).astype(np.complex64)
  a[2, 1, 1] = np.nan
  (u, s, vt), (_, s_jax, _) = run_both(lambda np_, x: np_.linalg.svd(x), a)
  assert_values(s, s_jax)
  assert_svd(a[:2], u[:2], s[:2], vt[:2])
  assert np.isnan(u[2]).all() and np.isnan(vt[2]).all()


def test_complex_pinv_and_gradient():
  """Sign-free functions of the vectors: pinv, and the gradient of a real function through eigh."""
  check_accuracy(lambda np_, x: np_.linalg.pinv(x), complex_normal((4, 3), seed=39))
  weights = np.arange(1, 5, dtype=np.float32)
  def loss(np_, x):
    h = x + np_.conj(x.T)
    w, v = np_.linalg.eigh(h)
    return (w * weights).sum() + (np_.abs(v) ** 2 * weights).sum()
  grad = lambda np_: (jax.grad if np_ is jnp else tinyjax.grad)(functools.partial(loss, np_))
  check_accuracy(lambda np_, x: grad(np_)(x), complex_normal((4, 4), seed=40))


@pytest.mark.float64
def test_complex128(x64):
  a = hermitian((2, 5, 5), seed=41, dtype=np.complex128)
  (w, v), (w_jax, _) = run_both(lambda np_, x: np_.linalg.eigh(x), a)
  assert_values(w, w_jax, np.float64)
  assert_eigenpairs(a, v, w, np.float64)
  b = complex_normal((6, 4), seed=42, dtype=np.complex128)
  (u, s, vt), (_, s_jax, _) = run_both(lambda np_, x: np_.linalg.svd(x), b)
  assert_values(s, s_jax, np.float64)
  assert_svd(b, u, s, vt, np.float64)
