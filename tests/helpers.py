"""What many test files need: seeded random inputs for the rule tests, a dtype's name for test ids, and the fixture
that starts a test from the default backend, device and fallback policy."""
import numpy as np
import pytest


@pytest.fixture
def default_settings(monkeypatch):
  """The test starts from the defaults (no TINYJAX_BACKEND, _DEVICE or _FALLBACK in the environment, none of them
  set by config.update) and an empty buffer. A test file takes it for all its tests with
  `pytestmark = pytest.mark.usefixtures("default_settings")` (and imports it)."""
  import tinyjax
  tinyjax.flush()
  for env in ("TINYJAX_BACKEND", "TINYJAX_DEVICE", "TINYJAX_FALLBACK"):
    monkeypatch.delenv(env, raising=False)
  for name in ("backend", "device", "fallback"):
    tinyjax.config.update(name, None)  # restored after the test (conftest)
  yield
  tinyjax.flush()


def dtype_name(dtype) -> str:
  """A dtype as a test id names it ("float32")."""
  return np.dtype(dtype).name


def values(shape, dtype, seed=0, *, small_ints=False, int_choices=None, int_extremes=False, float_choices=None,
           float_edges=()):
  """Seeded random values of `dtype` and `shape`.

  Booleans are fair coins. Integers span the dtype's range (within [-100, 100] with `small_ints`; or are drawn from
  `int_choices(np.iinfo(dtype))`), led by the dtype's minimum and maximum with `int_extremes`. Floats are standard
  normal (or drawn from `float_choices`), led by `float_edges` (NaN, infinities, -0.0: the values rules get wrong).
  """
  rng = np.random.default_rng(seed)
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return rng.random(shape) < 0.5
  if np.issubdtype(dtype, np.integer):
    info = np.iinfo(dtype)
    if int_choices is not None:
      return rng.choice(np.array(int_choices(info), dtype), shape)
    if small_ints:
      return rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True).astype(dtype)
    drawn = np.asarray(rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype))
    if int_extremes:
      drawn.flat[:2] = [info.min, info.max][:drawn.size]
    return drawn
  if float_choices is not None:
    return rng.choice(float_choices, shape).astype(dtype)
  drawn = np.asarray(rng.standard_normal(shape).astype(dtype))
  drawn.flat[:len(float_edges)] = list(float_edges)[:drawn.size]
  return drawn
