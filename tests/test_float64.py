"""float64 with jax_enable_x64: computed in float64 where the device has it; elsewhere TINYJAX_F64 decides
(error: raise at the call; downcast: compute in float32, return float64 arrays)."""
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
import tinyjax.random
from tinyjax.choosing import selection
from tinyjax.backends.tinygrad import TinygradBackend

from oracle import check
from xfail import device_under_test

F64_EDGES = np.array([0.1, -0.0, np.nan, np.inf, -np.inf, 1e300, 1e-300, -2.5, 77.25], np.float64)


@pytest.fixture
def no_float64(x64, monkeypatch, request):
  """The device under test without float64, in effect for the test: WEBGPU as it is; a device with float64 (CPU, CL)
  through a backend of its own that says it has none."""
  backend = TinygradBackend(device_under_test() or "CPU")
  if backend.supports_dtype(np.float64):
    has = TinygradBackend.supports_dtype
    monkeypatch.setattr(backend, "supports_dtype", lambda dtype: dtype != np.float64 and has(backend, dtype))
  name = f"no-float64:{request.node.name}"
  monkeypatch.setitem(selection._backends, ("tinygrad", name), backend)
  with tinyjax.default_device(name):
    yield


def ran_on(fn, *args) -> set:
  return {where for where, _ in tinyjax.explain(fn)(*args).primitives}


@pytest.mark.float64
def test_float64_is_computed_in_float64_where_the_device_has_it(x64):
  result = check(lambda np_, a: np_.exp(a) * 3.0 + 0.1, F64_EDGES)  # native only, float64 tolerance (1e-12)
  assert result.dtype == np.float64 and np.asarray(result)[1] == 3.0 + 0.1


def test_error_is_raised_at_the_call_naming_the_op_and_the_ways_out(no_float64):
  assert np.asarray(tnp.sin(np.ones(3, np.float32))).dtype == np.float32  # float32 is not concerned
  with pytest.raises(tinyjax.Float64Error) as info:
    line = inspect.currentframe().f_lineno + 1
    tnp.sin(F64_EDGES)
  message = str(info.value)
  assert message.startswith("sin computes in float64") and f"Called at {__file__}:{line}." in message
  assert "TINYJAX_F64=downcast" in message and "jax_enable_x64" in message and "TINYJAX_BACKEND=xla" in message
  assert isinstance(info.value, tinyjax.FallbackError)


def test_downcast_computes_in_float32_and_returns_float64(no_float64):
  tinyjax.config.update("f64", "downcast")
  tinyjax.config.update("fallback", "error")  # nothing falls back: float32 runs natively
  tripled = tnp.multiply(F64_EDGES, 3.0)
  # NB: float32 values, so 1e300 overflows and 1e-300 underflows; 0.1 * 3 has float32's rounding
  with np.errstate(over="ignore"):
    expected = (F64_EDGES.astype(np.float32) * np.float32(3.0)).astype(np.float64)
  assert tripled.dtype == np.float64 and np.asarray(tripled).dtype == np.float64
  np.testing.assert_array_equal(np.asarray(tripled), expected)
  assert np.asarray(tripled)[0] != 0.1 * 3.0
  again = tripled - 1.0  # a float64 value of one flush feeds the next
  np.testing.assert_array_equal(np.asarray(again), (expected.astype(np.float32) - np.float32(1.0)).astype(np.float64))
  assert ran_on(lambda a: tnp.exp(a) * 2.0, F64_EDGES) == {"tinygrad"}


def test_downcast_computes_complex128_in_complex64(no_float64):
  tinyjax.config.update("f64", "downcast")
  tinyjax.config.update("fallback", "error")
  z = (F64_EDGES[:5] + 1j * F64_EDGES[4:]).astype(np.complex128)
  result = tnp.exp(tnp.asarray(z)) * (2 - 1j)
  expected = jnp.exp(jnp.asarray(z.astype(np.complex64))) * np.complex64(2 - 1j)
  assert result.dtype == np.complex128 and np.asarray(result).dtype == np.complex128
  np.testing.assert_allclose(np.asarray(result), np.asarray(expected).astype(np.complex128), rtol=1e-6)


def test_downcast_runs_control_flow_natively(no_float64):
  tinyjax.config.update("f64", "downcast")
  x = np.linspace(-1.0, 1.0, 5)
  body = lambda i, carry: carry * 1.5 + jnp.float64(0.1)  # noqa: E731
  jitted = tinyjax.jit(lambda a: jax.lax.fori_loop(0, 4, body, a))
  np.testing.assert_allclose(np.asarray(jitted(x)), jax.lax.fori_loop(0, 4, body, x), rtol=1e-6)
  assert jitted(x).dtype == np.float64
  assert ran_on(jitted, x) == {"tinygrad"}


def test_downcast_keeps_float64_bit_patterns_on_xla(no_float64):
  """jax.random's float64 samples are bit patterns of float64: those equations stay float64 and run on XLA."""
  tinyjax.config.update("f64", "downcast")
  samples = tinyjax.random.normal(tinyjax.random.key(7), (64,))
  assert samples.dtype == np.float64
  np.testing.assert_allclose(np.asarray(samples), jax.random.normal(jax.random.key(7), (64,)), rtol=1e-5, atol=1e-6)
  tinyjax.config.update("fallback", "error")
  with pytest.raises(tinyjax.FallbackError, match="^bitcast_convert_type") as info:
    tinyjax.random.normal(tinyjax.random.key(7), (64,))
  assert not isinstance(info.value, tinyjax.Float64Error)


def test_downcast_under_check_mode_is_judged_as_float32(no_float64):
  tinyjax.config.update("f64", "downcast")
  tinyjax.config.update("check", "1")
  x = np.linspace(0.1, 3.0, 7)
  np.testing.assert_allclose(np.asarray(tnp.sum(tnp.sin(x) * tnp.exp(x))), np.sum(np.sin(x) * np.exp(x)), rtol=1e-6)
