"""Checking mode (TINYJAX_CHECK=1): each flushed program also runs on XLA; a difference is blamed on the first
equation that makes it, named with the user's line."""
import inspect
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
from tinyjax.choosing import check
from tinyjax.choosing import selection
from tinyjax.backends.tinygrad import TinygradBackend
from tinyjax.backends.tinygrad.table import RULES
from tinyjax.backends.xla import XlaBackend

EDGES = np.array([0.5, np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, 1e-30, -3.0, 2.5], np.float32)


def next_line() -> int:
  return inspect.currentframe().f_back.f_lineno + 1


@pytest.fixture(autouse=True)
def own_backend(monkeypatch, request):
  """A tinygrad CPU backend of the test's own, so that no program compiled (and captured by TinyJit) by another
  test replays here, with or without a patched rule."""
  name = f"check:{request.node.name}"
  monkeypatch.setitem(selection._backends, ("tinygrad", name), TinygradBackend("CPU"))
  with tinyjax.default_device(name):
    yield


@pytest.fixture
def sin_is_cos(monkeypatch):
  monkeypatch.setitem(RULES, "sin", lambda ctx, x, **params: x.cos())


@pytest.fixture
def compiles(monkeypatch) -> dict:
  """How many programs Checking and XLA compiled during the test."""
  counts = {"checking": 0, "xla": 0}
  for key, cls in (("checking", check.Checking), ("xla", XlaBackend)):
    def counted(self, program, compile=cls.compile, key=key):
      counts[key] += 1
      return compile(self, program)
    monkeypatch.setattr(cls, "compile", counted)
  return counts


def program(np_, a):
  """Elementwise, integer and reduction work on edge values."""
  wave = np_.where(a > 0, np_.sin(a) * 2.0, np_.exp(a)) + np_.sqrt(np_.abs(a))
  whole = np_.nan_to_num(a, posinf=7.0, neginf=-7.0).astype(np_.int32) // 3
  return wave, whole, np_.sum(np_.nan_to_num(wave, nan=0.0, posinf=0.0, neginf=0.0))


def test_a_correct_program_passes_silently_with_results_unchanged(compiles):
  unchecked = [np.asarray(r) for r in program(tnp, EDGES)]
  assert compiles == {"checking": 0, "xla": 0}
  tinyjax.config.update("check", "1")
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    checked = [np.asarray(r) for r in program(tnp, EDGES)]
  assert compiles["checking"] == 1 and compiles["xla"] == 1  # the check did run, against XLA
  for ours, before in zip(checked, unchecked, strict=True):
    np.testing.assert_array_equal(ours, before)


def test_a_broken_rule_in_an_eager_chain_is_named_with_the_users_line(sin_is_cos):
  tinyjax.config.update("check", "1")
  x = np.linspace(0.5, 3.0, 6, dtype=np.float32)
  upstream = tnp.cos(x) + 1.0  # agrees with XLA: not blamed
  line = next_line()
  wrong = tnp.sin(upstream)
  downstream = tnp.exp(wrong) * 2.0  # differs too, but only because its input does
  with pytest.raises(tinyjax.CheckError) as info:
    np.asarray(downstream)
  message = str(info.value)
  assert message.startswith("sin differs from XLA on tinygrad"), message
  assert f"created at {__file__}:{line}\n" in message
  assert "6 of 6 elements differ (max abs diff" in message and "where XLA has" in message
  assert "params: accuracy=None" in message and "inputs: float32[6]" in message


def test_a_broken_rule_in_a_jitted_function_is_named_with_the_call(sin_is_cos):
  tinyjax.config.update("check", "1")
  jitted = tinyjax.jit(lambda a: jnp.sum(jnp.sin(a) * 2.0 + 1.0))
  with pytest.raises(tinyjax.CheckError) as info:
    line = next_line()
    jitted(np.linspace(0.5, 3.0, 6, dtype=np.float32))
  assert str(info.value).startswith("sin differs") and f"created at {__file__}:{line}\n" in str(info.value)


def test_with_check_off_nothing_extra_runs(sin_is_cos, compiles):
  x = np.linspace(0.5, 3.0, 6, dtype=np.float32)
  np.testing.assert_allclose(np.asarray(tnp.sin(x) + tinyjax.jit(jnp.sin)(x)), 2 * np.cos(x), rtol=1e-6)  # unchecked
  assert compiles == {"checking": 0, "xla": 0}


def test_a_difference_made_by_running_equations_together_is_blamed_on_the_first_it_shows_in(monkeypatch):
  """A rule wrong only on an unrealized input, like a fusion bug: right alone, wrong after the equations before it."""
  monkeypatch.setitem(RULES, "sin", lambda ctx, x, **params: x.sin() if x.uop.is_realized else x.cos())
  tinyjax.config.update("check", "1")
  x = np.linspace(0.5, 3.0, 6, dtype=np.float32)
  doubled = tnp.multiply(x, 2.0)
  line = next_line()
  wrong = tnp.sin(doubled)
  with pytest.raises(tinyjax.CheckError) as info:
    np.asarray(tnp.exp(wrong))
  assert str(info.value).startswith("sin differs from XLA on tinygrad (CPU): alone it agrees, but not run together "
                                    "with the equations before it")
  assert f"created at {__file__}:{line}\n" in str(info.value)


@pytest.mark.parametrize("ours, theirs, differs", [
  ([np.nan, 1.0], [np.nan, 1.0], False),
  ([np.nan], [1.0], True),
  ([1.0], [np.nan], True),
  ([np.inf, -np.inf], [np.inf, -np.inf], False),
  ([np.inf], [-np.inf], True),
  ([np.inf], [3e38], True),
  ([-0.0], [0.0], False),  # NB: the sign of zeros is not checked (see tinyjax/choosing/check.py)
  ([1.0 + 1e-5], [1.0], False),
  ([1.0 + 1e-3], [1.0], True),
  ([1e-40, 1.0], [0.0, 1.0], False),  # a subnormal XLA flushes to zero
  ([1000.0, 1e-3], [1000.0, 0.0], False),  # rounding in a result that cancels, at the output's scale
  ([1000.0, 1.0], [1000.0, 0.0], True),
])
def test_what_counts_as_a_difference_in_floats(ours, theirs, differs):
  found = check._difference(np.array(ours, np.float32), np.array(theirs, np.float32), lambda dtype: 1e-4)
  assert (found is not None) == differs, found


def test_what_counts_as_a_difference_in_integers_complex_and_shapes():
  rtol = check.RTOL.get
  assert check._difference(np.array([1, 2], np.int32), np.array([1, 2], np.int32), rtol) is None
  assert "1 of 2 elements differ" in check._difference(np.array([1, 3], np.int32), np.array([1, 2], np.int32), rtol)
  assert check._difference(np.array([True]), np.array([False]), rtol) is not None
  assert check._difference(np.array([1 + 1j], np.complex64), np.array([1 + 1.5j], np.complex64), rtol) is not None
  assert check._difference(np.zeros(2, np.float32), np.zeros(3, np.float32), rtol) == (
    "float32[2] where XLA has float32[3]")
