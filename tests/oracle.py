"""JAX is the oracle: helpers that run the same code on jax.numpy (XLA) and on tinyjax, and compare.

Every comparison checks the tree structure, then per leaf the shape, the dtype, the weak type and the values:
integers and booleans exactly, floats within a tolerance by dtype, with NaN where JAX has NaN, infinities
exactly, and the sign of zeros.
"""
import contextlib

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np

import tinyjax
import tinyjax.lax
import tinyjax.numpy as tnp

# Relative tolerance by dtype: tinygrad's transcendental functions differ from XLA's by a few ulp.
RTOL = {np.dtype(np.float16): 2e-3, np.dtype(jnp.bfloat16): 2e-2, np.dtype(np.float32): 2e-6,
        np.dtype(np.float64): 1e-12, np.dtype(np.complex64): 2e-6, np.dtype(np.complex128): 1e-12}


@contextlib.contextmanager
def native():
  """Inside, any equation that would fall back to XLA raises tinyjax.FallbackError at the call."""
  previous = tinyjax.config.updated().get("fallback")
  tinyjax.config.update("fallback", "error")
  try:
    yield
  finally:
    tinyjax.config.update("fallback", previous)


@contextlib.contextmanager
def on_tinygrad():
  """native(), and at the end a check that the equations run inside (flushed at its end) ran on tinygrad: some did,
  none on XLA, whether by fallback or by the backend's choice (TINYJAX_BACKEND=xla or auto). Calls JAX runs itself
  (values only JAX holds: the report's "run by JAX itself") are XLA's by design."""
  from tinyjax.core import report
  with report.collecting() as ran, native():
    yield
    tinyjax.flush()
  native_runs, runs = ran.native_share
  assert native_runs and native_runs == runs - ran.runs_by_jax, f"not everything ran on tinygrad:\n{ran}"


def assert_like_jax(actual, expected, rtol=None, atol=None, values=True):
  """`actual` (tinyjax results) matches `expected` (JAX results) leaf by leaf (without `values`: all but the size of
  the floats' differences)."""
  a_leaves, a_tree = jax.tree_util.tree_flatten(actual, is_leaf=lambda x: isinstance(x, tinyjax.Array))
  e_leaves, e_tree = jax.tree_util.tree_flatten(expected)
  assert a_tree == e_tree, f"tree {a_tree} != {e_tree}"
  for a, e in zip(a_leaves, e_leaves):
    if not isinstance(e, jax.Array):
      assert not isinstance(a, tinyjax.Array) and a == e, f"{a!r} != {e!r}"
      continue
    assert isinstance(a, tinyjax.Array), f"expected a tinyjax.Array, got {type(a)}"
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    assert a.dtype == e.dtype, f"dtype {a.dtype} != {e.dtype}"
    assert a.weak_type == e.aval.weak_type, f"weak_type {a.weak_type} != {e.aval.weak_type}"
    (assert_values if values else _assert_specials_of)(np.asarray(a), np.asarray(e), rtol, atol)


def _assert_specials_of(a: np.ndarray, e: np.ndarray, *_):
  """Integers equal; floats' (each complex part's) NaN, infinities and signs of zero as JAX's."""
  if not jnp.issubdtype(e.dtype, jnp.inexact):
    np.testing.assert_array_equal(a, e)
  for part in (np.real, np.imag) if jnp.iscomplexobj(e) else (np.asarray,):
    _assert_specials(part(a).astype(np.float64), part(e).astype(np.float64))


def assert_values(a: np.ndarray, e: np.ndarray, rtol=None, atol=None):
  if not jnp.issubdtype(e.dtype, jnp.inexact):
    np.testing.assert_array_equal(a, e)
    return
  rtol = RTOL.get(np.dtype(e.dtype), 1e-6) if rtol is None else rtol
  atol = 0.0 if atol is None else atol
  if jnp.iscomplexobj(e):
    # each part: NaN, infinities and the sign of zeros as JAX's; where all parts are finite, within rtol of |e|
    a, e = np.asarray(a, np.complex128), np.asarray(e, np.complex128)
    for part in (np.real, np.imag):
      _assert_specials(part(a), part(e))
    finite = np.isfinite(a) & np.isfinite(e)
    error, allowed = np.abs(a - e)[finite], atol + rtol * np.abs(e)[finite]
    assert np.all(error <= allowed), f"values differ: {a[finite][error > allowed]} != {e[finite][error > allowed]}"
    return
  a64, e64 = a.astype(np.float64), e.astype(np.float64)
  _assert_specials(a64, e64)
  np.testing.assert_allclose(a64, e64, rtol=rtol, atol=atol, equal_nan=True)


def _assert_specials(a64, e64):
  """NaN and infinities where JAX has them; a zero both computed has JAX's sign, whatever the tolerance."""
  np.testing.assert_array_equal(np.isnan(a64), np.isnan(e64), err_msg="NaN positions differ")
  # NB: an infinity either side counts: tinyjax's inf where JAX's value is finite is a difference, not skipped as a
  # non-finite value
  np.testing.assert_array_equal(np.where(np.isinf(a64), a64, 0), np.where(np.isinf(e64), e64, 0),
                                err_msg="infinities differ")
  zeros = (e64 == 0) & (a64 == 0)
  np.testing.assert_array_equal(np.signbit(a64[zeros]), np.signbit(e64[zeros]), err_msg="signs of zeros differ")


def runs_on_xla_as_listed(jax_fn, *args) -> bool:
  """Whether JAX's program for jax_fn(*args) has an equation tinygrad has no rule for yet, each listed with its
  reason: a primitive of tinyjax.backends.tinygrad.not_native, or one on complex numbers that has no complex rule. A call primitive
  (jit, closed_call, custom_jvp_call, ...) is looked through: tinyjax inlines its body (tinyjax.ir.program), so only
  the body's equations need rules, whatever the dtypes of the call's own values."""
  from tinyjax.backends.tinygrad.not_native import NOT_YET_NATIVE
  from tinyjax.backends.tinygrad.table import takes_complex
  from tinyjax.ir.program import CALL_PARAMS

  def listed(jaxpr) -> bool:
    for eqn in jaxpr.eqns:
      if any(map(listed, jax.extend.core.jaxprs_in_params(eqn.params))):
        return True
      if eqn.primitive.name in CALL_PARAMS:
        continue
      dtypes = [v.aval.dtype for v in eqn.invars + eqn.outvars if hasattr(v.aval, "dtype")]
      complex_ = any(jnp.issubdtype(d, jnp.complexfloating) for d in dtypes)
      if eqn.primitive.name in NOT_YET_NATIVE or complex_ and not takes_complex(eqn.primitive.name):
        return True
    return False
  try:
    closed = jax.make_jaxpr(jax_fn)(*args)
  except (jax.errors.JAXTypeError, jax.errors.JAXIndexError, TypeError):
    return False  # a shape set by the data (nonzero, x[x > 0]): tinyjax runs it call by call, each must be native
  return listed(closed.jaxpr)


def check(fn, *args, native_only=True, rtol=None, atol=None, **kwargs):
  """fn(namespace, *args, **kwargs) on jax.numpy and on tinyjax.numpy; with native_only, nothing may fall back."""
  expected = fn(jnp, *args, **kwargs)
  with native() if native_only else contextlib.nullcontext():
    actual = fn(tnp, *args, **kwargs)
    tinyjax.flush()
  assert_like_jax(actual, expected, rtol, atol)
  return actual


@contextlib.contextmanager
def x64():
  """jax_enable_x64 on inside (float64 arrays and float64 defaults), as it was afterwards."""
  previous = jax.config.jax_enable_x64
  jax.config.update("jax_enable_x64", True)
  try:
    yield
  finally:
    jax.config.update("jax_enable_x64", previous)


# A result whose conditioning amplifies rounding (a pseudo-inverse, an eigenvector's gradient, a trained model's
# step) is as good as XLA's when its error from the float64 truth is of the size of XLA's own error: computed in
# another order (sums, rotations, fused formulas) the error differs by a small factor, not by orders of magnitude.
ACCURACY_FACTOR = 8


def check_accuracy(fn, *args):
  """fn(namespace, *args) on tinyjax (natively) against the truth: fn on XLA in float64 (jax_enable_x64, the float32
  arguments widened). Each leaf has JAX's shape, dtype, weak type, NaN, infinities and signs of zero (as check's);
  integers equal; a float leaf's largest error from the truth is at most ACCURACY_FACTOR times the larger of XLA's
  float32 error and one ulp of the truth's largest magnitude. The tolerance is the one the problem's conditioning
  allows, measured on XLA's result rather than guessed."""
  expected = fn(jnp, *args)
  with native():
    actual = fn(tnp, *args)
    tinyjax.flush()
  assert_like_jax(actual, expected, values=False)
  widen = {np.dtype(np.float32): np.float64, np.dtype(np.complex64): np.complex128}
  with x64():
    truth = jax.tree_util.tree_map(np.asarray, fn(jnp, *jax.tree_util.tree_map(
        lambda x: np.asarray(x).astype(widen.get(np.asarray(x).dtype, np.asarray(x).dtype)), args)))
  leaves = zip(jax.tree_util.tree_leaves(actual, is_leaf=lambda x: isinstance(x, tinyjax.Array)),
               jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(truth), strict=True)
  for i, (a, e, t) in enumerate(leaves):
    a, e = np.asarray(a), np.asarray(e)
    if not jnp.issubdtype(e.dtype, jnp.inexact):
      continue
    finite = np.isfinite(e) & np.isfinite(t)
    error = lambda r: np.abs(r.astype(t.dtype) - t)[finite].max(initial=0.0)
    ulp = np.finfo(e.dtype).eps * np.abs(t[finite]).max(initial=0.0)
    allowed = ACCURACY_FACTOR * max(error(e), ulp)
    assert error(a) <= allowed, f"leaf {i}: error {error(a):.3g} from the float64 truth, XLA's {error(e):.3g}"
  return actual


def check_lax(name, *args, native_only=True, rtol=None, atol=None, **params):
  """jax.lax.<name>(*args, **params) against tinyjax.lax.<name>; with native_only, nothing may fall back."""
  expected = getattr(jax.lax, name)(*args, **params)
  with native() if native_only else contextlib.nullcontext():
    actual = getattr(tinyjax.lax, name)(*args, **params)
    tinyjax.flush()
  assert_like_jax(actual, expected, rtol, atol)
  return actual


def check_traced(fn, *args, jax_jit=False, **kwargs):
  """fn, written against JAX (lax calls with static arguments, flax), run by JAX (eagerly, or under jax.jit with
  `jax_jit`) and traced whole by tinyjax."""
  from tinyjax.core.mirror import wrap
  reference = jax.jit(fn) if jax_jit else fn
  return check(lambda np_, *xs: reference(*xs) if np_ is jnp else wrap(fn)(*xs), *args, **kwargs)
