"""Eager calls remembered (tinyjax/core/tracing.py `CallSite`): a call of a function on the same kinds of inputs (avals,
weak types, kinds of Python scalars, static values) appends the trace the general way made, without flattening or
looking the trace up again. Results match JAX's eager calls, and errors, report counts and the Arrays returned are
those of the general way (the memory off)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
from oracle import assert_like_jax
from tinyjax.core import tracing

F32 = np.linspace(-1, 1, 6, dtype=np.float32)
I8 = np.arange(6, dtype=np.int8)


def _steps(m, A):
  """A sequence of eager calls; m is jax.numpy or tinyjax.numpy, A makes an array."""
  x, y, i, w = A(F32), A(F32[:3]), A(I8), A(np.float32(2.0))
  out = []
  for _ in range(3):
    out += [x * 1.01, x * 2, x * 0.0, x * -0.0, x * float("nan"), x + -0.0, x * -0.0j, y * 3.5, i * 2, i * 2.5, i + 100, x + w, w * 2, w * 2.0,
            m.sin(x) * 1.01 + 0.5 - x * 0.1, m.sum(x, axis=0), m.sum(x.reshape(2, 3), axis=1),
            m.sum(x.reshape(3, 2), axis=1, keepdims=True), x.reshape(2, 3).T, m.where(x > 0, x, 0.0),
            x ** 2, x ** 3, x ** 0.5, 2 ** x, m.maximum(x, 0.25), x.astype("float16") * 3, i.astype(m.float32) / 2,
            m.asarray(x), -x, abs(i), i // 3, i % 4]
  return out


def test_results_match_jax_eager():
  for actual, expected in zip(_steps(tnp, tnp.asarray), _steps(jnp, jnp.asarray), strict=True):
    assert_like_jax(actual, expected, rtol=1e-5)  # NB: sin within tinygrad's float32 rounding


def _counts():
  r = tinyjax.report()
  return r.flushes, r.compiles, dict(r.primitives), dict(r.eager)


def test_report_and_arrays_are_those_of_the_general_way(monkeypatch):
  def run():
    x = tnp.asarray(F32)
    before = _counts()
    results = [np.asarray(r) for r in _steps(tnp, lambda a: x if a is F32 else tnp.asarray(a))]
    after = _counts()
    same = tnp.asarray(x) is x
    return results, (after[0] - before[0], after[1] - before[1],
                     {k: v - before[2].get(k, 0) for k, v in after[2].items()}), same
  run()
  remembered = run()
  with monkeypatch.context() as m:
    m.setattr(tracing, "_call_key", lambda *args: None)
    general = run()
  assert remembered[1] == general[1] and remembered[2] == general[2]
  for a, b in zip(remembered[0], general[0], strict=True):
    np.testing.assert_array_equal(a, b)


def test_remembered_calls_skip_the_trace_lookup(monkeypatch):
  x = tnp.asarray(F32)
  x * 1.5
  monkeypatch.setattr(tracing, "_trace", lambda *args: pytest.fail("traced again"))
  np.testing.assert_allclose(np.asarray(x * 2.5), F32 * 2.5, rtol=1e-6)


def test_ints_that_do_not_fit_stay_static_as_in_jax():
  i = tnp.asarray(I8)
  for _ in range(3):
    i + 3
  with pytest.raises(OverflowError):
    jnp.array(300, jnp.uint8)
  with pytest.raises(OverflowError):
    tnp.array(300, tnp.uint8)
  for _ in range(3):
    tnp.array(3, tnp.uint8)
  with pytest.raises(OverflowError):
    tnp.array(300, tnp.uint8)
  x = tnp.asarray(F32)
  for _ in range(2):
    x * 3
  for m, a in ((jnp, jnp.asarray(F32)), (tnp, x)):
    with pytest.raises(OverflowError):
      a * 2 ** 40
  assert_like_jax(x * 3, jnp.asarray(F32) * 3)


def test_scalars_a_function_needs_static():
  x = tnp.asarray(F32)
  for shape in ((2, 3), (3, 2), (6, 1), (2, 3)):
    assert tnp.reshape(x, shape).shape == shape
    assert x.reshape(*shape).shape == shape
  for axis in (0, 1, 0):
    assert_like_jax(tnp.sum(x.reshape(2, 3), axis), jnp.sum(jnp.asarray(F32).reshape(2, 3), axis))


def test_a_deleted_input_raises_jax_error():
  x = tnp.asarray(F32)
  for _ in range(3):
    x * 2.0
  y = tnp.asarray(F32)
  y.delete()
  with pytest.raises(RuntimeError, match="Array has been deleted"):
    y * 2.0


def test_inside_a_transformation_jax_stages_the_call():
  def f(v):
    return jnp.sum(tnp.sin(v) * 2.0)
  x = tnp.asarray(F32)
  for _ in range(3):
    tnp.sin(x) * 2.0
  assert_like_jax(tinyjax.grad(f)(x), jax.grad(lambda v: jnp.sum(jnp.sin(v) * 2.0))(jnp.asarray(F32)), rtol=1e-6)
  # NB: a sum near zero: within float32's rounding of its terms, not relative to itself
  assert_like_jax(tinyjax.jit(f)(x), jax.jit(lambda v: jnp.sum(jnp.sin(v) * 2.0))(jnp.asarray(F32)), rtol=1e-6,
                  atol=1e-6)
  np.testing.assert_allclose(jax.jit(f)(x), jax.jit(lambda v: jnp.sum(jnp.sin(v) * 2.0))(jnp.asarray(F32)), rtol=1e-6)


def test_fallback_policy_applies_at_each_call(monkeypatch):
  from tinyjax.choosing import selection
  x = tnp.asarray(F32)

  def solve():
    return tinyjax.lax.linalg.tridiagonal_solve(x * 0, x + 3, x * 0, x[:, None])  # no native rule
  for _ in range(3):
    solve()
  monkeypatch.setattr(selection, "_warned", set())
  monkeypatch.setenv("TINYJAX_FALLBACK", "error")
  with pytest.raises(tinyjax.FallbackError):
    solve()


@pytest.mark.parametrize("setting, error", [(lambda: jax.numpy_rank_promotion("raise"), ValueError),
                                            (lambda: jax.numpy_dtype_promotion("strict"), jax.dtypes.TypePromotionError)],
                         ids=["rank_promotion", "dtype_promotion"])
def test_a_change_of_jaxs_trace_context_is_honoured(setting, error):
  """A remembered call is not recalled under another trace context (JAX's settings that change what a function
  traces to): under jax.numpy_rank_promotion("raise") and jax.numpy_dtype_promotion("strict") the calls that ran
  before raise as JAX's do, and run again after the block."""
  x, y, i = tnp.asarray(np.ones((2, 3), np.float32)), tnp.asarray(F32[:3]), tnp.asarray(I8[:3])
  calls = [lambda m, x, y, i: m.add(x, y), lambda m, x, y, i: x + y, lambda m, x, y, i: y * i]
  jx, jy, ji = (jnp.asarray(np.asarray(a)) for a in (x, y, i))
  for _ in range(2):
    before = [f(tnp, x, y, i) for f in calls]
  with setting():
    for f in calls:
      try:
        expected = f(jnp, jx, jy, ji)
      except error:
        with pytest.raises(error):
          f(tnp, x, y, i)
      else:
        assert_like_jax(f(tnp, x, y, i), expected)
  assert_like_jax(before + [f(tnp, x, y, i) for f in calls], [f(jnp, jx, jy, ji) for f in calls] * 2)


@pytest.mark.parametrize("checking", [jax.debug_nans, jax.debug_infs], ids=["debug_nans", "debug_infs"])
def test_jaxs_value_checks_raise_as_jaxs_calls_do(checking):
  """Under jax_debug_nans / jax_debug_infs (not part of JAX's trace context) JAX checks each operation's result: the
  calls made before with the flag off (remembered, and jitted) raise JAX's FloatingPointError, naming the operation,
  at the call; a call whose results are clean computes; the calls compute again after the block."""
  x = np.array([-1.0, 0.0, 2.0], np.float32)
  calls = [lambda m, jit, x: m.log(x), lambda m, jit, x: x / 0.0 * 0.0, lambda m, jit, x: jit(lambda v: m.log(v) * 2)(x),
           lambda m, jit, x: m.exp(x) + 1, lambda m, jit, x: jit(lambda v: v * 3)(x)]
  tx, jx = tnp.asarray(x), jnp.asarray(x)
  jitted = {}
  tiny_jit = lambda f: jitted.setdefault(f.__code__, tinyjax.jit(f))  # noqa: E731 (one jitted function per call site)
  for _ in range(2):
    before = [f(tnp, tiny_jit, tx) for f in calls]
  with checking(True):
    for f in calls:
      try:
        expected = f(jnp, jax.jit, jx)
      except FloatingPointError as error:
        with pytest.raises(FloatingPointError) as actual:
          f(tnp, tiny_jit, tx)
        assert str(actual.value) == str(error)
      else:
        assert_like_jax(f(tnp, tiny_jit, tx), expected)
  assert_like_jax(before + [f(tnp, tiny_jit, tx) for f in calls], [f(jnp, jax.jit, jx) for f in calls] * 2)
