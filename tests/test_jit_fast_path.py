"""tinyjax.jit's fast path (tinyjax/core/tracing.py `CallSite`, pending.run_alone): a call whose program is compiled
already runs it at once.

Each sequence of calls is run twice: the way it runs, and with the fast path off (every call traced, buffered and
flushed); results match jax.jit's call by call, and the report's counts (flushes, compiles, primitives per backend,
segments, bytes crossed) are the same both ways.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
from oracle import assert_like_jax
from tinyjax.core import pending, tracing

CONSTANT = np.linspace(-1, 1, 8, dtype=np.float32)  # closed over: a constant of the trace


def affine(x, y, s):
  return x * y + s


def many_outputs(x, y):
  return {"sum": x + y, "same": x, "twice": (x * 2, x * 2), "constant": jnp.ones(3), "literal": 2.0}


def closed_over(x):
  return jnp.sin(x) + CONSTANT[:x.shape[0]]


def integer_step(x, i):
  return x + i, i * 2


def _counts():
  r = tinyjax.report()
  return (r.flushes, r.compiles, dict(r.primitives), dict(r.segments), r.bytes_crossed, dict(r.eager))


def _delta(before, after):
  flushes, compiles, prims, segs, crossed, eager = (a if not isinstance(a, dict) else
                                                     {k: v - b.get(k, 0) for k, v in a.items() if v != b.get(k, 0)}
                                                     for a, b in zip(after, before))
  return flushes - before[0], compiles - before[1], prims, segs, crossed - before[4], eager


def _powered_sum(x, n, axis):
  return jnp.sum(x ** n, axis=axis)


@functools.cache
def _functions(T):
  """The jitted functions, made once (a new function is a new trace)."""
  return (T.jit(affine), T.jit(many_outputs), T.jit(closed_over), T.jit(integer_step),
          T.jit(_powered_sum, static_argnums=(1,), static_argnames=("axis",)))


def _calls(T, A):
  """(function, args, kwargs) of a sequence of calls; T is jax or tinyjax, A makes an array input."""
  x8, y8 = A(np.linspace(0, 1, 8, dtype=np.float32)), A(np.full(8, 2.0, np.float32))
  x3 = A(np.arange(3, dtype=np.float32))
  i8 = A(np.arange(8, dtype=np.int8))
  f, g, h, k, s = _functions(T)
  calls = []
  for _ in range(3):
    calls += [(f, (x8, y8, 1.0), {}), (f, (x8, y8, 2.5), {}), (f, (x8, x8, 1.0), {}), (f, (x3, x3, 3), {}),
              (f, (x8, y8, x8), {}), (f, (i8, i8, 2), {}), (f, (i8, i8, 2.0), {}), (f, (i8, 3, 7), {}),
              (f, (x8, np.float32(2.0), A(np.float32(1.5))), {}), (f, (np.ones(8, np.float32), y8, 1), {}),
              (f, (x8, y8), {"s": A(np.array(0.5, np.float32))}),
              (g, (x8, y8), {}), (g, (x3, x3), {}), (h, (x8,), {}), (h, (x3,), {}),
              (k, (x8, 3), {}), (k, (i8, 3), {}), (k, (x8, 2**31 - 1), {}),
              (s, (x8, 2), {"axis": 0}), (s, (x8, 3), {"axis": 0}), (s, (A(np.ones((2, 4), np.float32)), 2), {"axis": 1})]
  return calls


def _run_all(A):
  results = []
  for fn, args, kwargs in _calls(tinyjax, A):
    results.append(fn(*args, **kwargs))
  return results


def _expected():
  return [fn(*args, **kwargs) for fn, args, kwargs in _calls(jax, jnp.asarray)]


@pytest.fixture
def general_way(monkeypatch):
  """Every jit call buffered and flushed (the fast path off)."""
  monkeypatch.setattr(pending, "run_alone", lambda *args: None)


def _sequence():
  before = _counts()
  results = _run_all(tnp.asarray)
  return results, _delta(before, _counts())


def test_results_match_jax_call_after_call():
  expected = _expected()
  results, _ = _sequence()
  for actual, wanted in zip(results, expected, strict=True):
    assert_like_jax(actual, wanted, rtol=1e-6)


def test_report_counts_are_those_of_the_general_way(monkeypatch):
  _sequence()  # traced and compiled: the counts below are of replays
  hits = []
  with monkeypatch.context() as m:
    run = pending.run_alone
    m.setattr(pending, "run_alone", lambda *args: hits.append(out := run(*args)) or out)
    fast, fast_counts = _sequence()
  assert None not in hits and len(hits) == len(fast)  # every call took the fast path
  with monkeypatch.context() as m:
    m.setattr(pending, "run_alone", lambda *args: None)
    general, general_counts = _sequence()
  assert fast_counts == general_counts
  assert fast_counts[0] > 0 and fast_counts[1] == 0
  for a, b in zip(fast, general, strict=True):
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), a, b)


def test_the_first_call_compiles_as_before(general_way):
  f = tinyjax.jit(lambda x: jnp.cos(x) * 3)  # a function of its own: nothing cached
  x = tnp.asarray(np.ones(5, np.float32))
  before = _counts()
  f(x)
  general = _delta(before, _counts())
  assert general[:2] == (1, 1)


def test_a_compiled_call_is_not_traced_again(monkeypatch):
  f = tinyjax.jit(lambda x, y: x * y + 1.0)
  x, y = tnp.asarray(np.ones(8, np.float32)), tnp.asarray(np.full(8, 2.0, np.float32))
  for _ in range(3):
    f(x, y).block_until_ready()
  monkeypatch.setattr(tracing, "_trace", lambda *a: pytest.fail("traced again"))
  monkeypatch.setattr(pending, "append", lambda *a: pytest.fail("buffered"))
  out = f(x, y)
  np.testing.assert_array_equal(np.asarray(out), np.full(8, 3.0, np.float32))
  assert out.is_ready()


def test_pending_inputs_give_the_general_way_counts(monkeypatch):
  f = tinyjax.jit(lambda x: x * 2)
  x = tnp.asarray(np.ones(4, np.float32))

  def once():
    before = _counts()
    y = x + 1
    other = x * 5
    out = f(y)
    return np.asarray(out), np.asarray(other), _delta(before, _counts())
  for _ in range(3):
    once()
  fast = once()
  with monkeypatch.context() as m:
    m.setattr(pending, "run_alone", lambda *args: None)
    general = once()
  np.testing.assert_array_equal(fast[0], np.full(4, 4.0, np.float32))
  np.testing.assert_array_equal(fast[1], np.full(4, 5.0, np.float32))
  assert fast[2] == general[2]


def test_outputs_forward_inputs_and_fresh_buffers():
  g = tinyjax.jit(many_outputs)
  x, y = tnp.asarray(np.ones(3, np.float32)), tnp.asarray(np.ones(3, np.float32))
  outs = [g(x, y) for _ in range(4)]
  sums = [o["sum"] for o in outs]
  assert len({id(s._value) for s in sums}) == len(sums)
  assert len({id(next(iter(s._value.buffers.values()))) for s in sums}) == len(sums)


def test_deleted_input_raises_jax_error():
  f = tinyjax.jit(lambda x: x + 1)
  x = tnp.asarray(np.ones(3, np.float32))
  for _ in range(3):
    f(x)
  x.delete()
  with pytest.raises(RuntimeError, match="Array has been deleted"):
    f(x)


def test_errors_are_raised_at_the_call():
  f = tinyjax.jit(lambda x, y: x @ y)
  a = tnp.asarray(np.ones((2, 3), np.float32))
  for _ in range(3):
    f(a, a.T)
  with pytest.raises(TypeError):
    f(a, a)
  np.testing.assert_array_equal(np.asarray(f(a, a.T)), np.full((2, 2), 3.0, np.float32))


def test_a_scalar_the_function_needs_static_is_honoured():
  f = tinyjax.jit(lambda x, n: jnp.reshape(x, (n, -1)))
  traced_shape = r"Shapes must be 1D sequences of concrete values of integer type, got \(JitTracer\(~int32\[\]\), -1\)"
  with pytest.raises(TypeError, match=traced_shape):
    jax.jit(lambda x, n: jnp.reshape(x, (n, -1)))(jnp.ones(4), 2)
  x = tnp.asarray(np.ones(4, np.float32))
  with pytest.raises(TypeError, match=traced_shape):  # as jax.jit: a traced scalar is no shape
    f(x, 2)


def test_settings_changed_between_calls_are_honoured(monkeypatch):
  f = tinyjax.jit(lambda x: jnp.exp(x) + 1)
  x = tnp.asarray(np.linspace(0, 1, 4, dtype=np.float32))
  for _ in range(3):
    f(x)
  device = tinyjax.config.get("device")
  monkeypatch.setenv("TINYJAX_BACKEND", "xla")
  monkeypatch.setenv("TINYJAX_DEVICE", "cpu")
  before = tinyjax.report().primitives["xla", "exp"]
  f(x)
  assert tinyjax.report().primitives["xla", "exp"] == before + 1
  monkeypatch.setenv("TINYJAX_BACKEND", "bogus")
  with pytest.raises(ValueError, match="TINYJAX_BACKEND"):
    f(x)
  monkeypatch.setenv("TINYJAX_BACKEND", "tinygrad")
  monkeypatch.setenv("TINYJAX_DEVICE", device)
  before = tinyjax.report().primitives["xla", "exp"]
  np.testing.assert_allclose(np.asarray(f(x)), np.exp(np.linspace(0, 1, 4, dtype=np.float32)) + 1, rtol=1e-6)
  assert tinyjax.report().primitives["xla", "exp"] == before


def test_fallback_policy_applies_at_each_call(monkeypatch):
  from tinyjax.choosing import selection
  # a tridiagonal solve has no native rule (NOT_YET_NATIVE): XLA runs it
  f = tinyjax.jit(lambda x: jax.lax.linalg.tridiagonal_solve(x * 0, x + 3, x * 0, x[:, None])[:, 0] * 2)
  x = tnp.asarray(np.linspace(0, 1, 4, dtype=np.float32))
  for _ in range(3):
    f(x)
  monkeypatch.setattr(selection, "_warned", set())
  monkeypatch.setenv("TINYJAX_FALLBACK", "warn")
  with pytest.warns(tinyjax.FallbackWarning):
    f(x)
  monkeypatch.setenv("TINYJAX_FALLBACK", "error")
  with pytest.raises(tinyjax.FallbackError):
    f(x)


def test_checking_mode_runs_checked_programs(monkeypatch):
  f = tinyjax.jit(lambda x: jnp.tanh(x) * 2)
  x = tnp.asarray(np.linspace(-1, 1, 6, dtype=np.float32))
  for _ in range(3):
    f(x)
  monkeypatch.setenv("TINYJAX_CHECK", "1")
  before = _counts()
  f(x)
  f(x)
  assert _delta(before, _counts())[1] == 1  # compiled again once, for the checking backend; not replayed unchecked


def test_donated_arguments_are_accepted():
  f = tinyjax.jit(lambda p, g: p - 0.5 * g, donate_argnums=0)
  p, g = tnp.asarray(np.ones(4, np.float32)), tnp.asarray(np.ones(4, np.float32))
  for _ in range(4):
    p = f(p, g)
  np.testing.assert_array_equal(np.asarray(p), np.full(4, -1.0, np.float32))


def test_auto_backend(monkeypatch, tmp_path):
  monkeypatch.setenv("TINYJAX_AUTO_CACHE", str(tmp_path / "auto.json"))
  monkeypatch.setenv("TINYJAX_BACKEND", "auto")
  f = tinyjax.jit(lambda x, y: jnp.sin(x) * y)
  x, y = tnp.asarray(np.linspace(0, 1, 8, dtype=np.float32)), tnp.asarray(np.full(8, 2.0, np.float32))
  expected = np.asarray(jax.jit(lambda x, y: jnp.sin(x) * y)(np.asarray(x), np.asarray(y)))
  for _ in range(6):
    out = f(x, y)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6)
    out = f(out, y)  # an output (on the backend auto chose) as the next input
  assert tinyjax.report().choices


def test_patched_jax_jit_takes_the_fast_path(monkeypatch):
  with tinyjax.patch():
    f = jax.jit(lambda x: x * 3 + 1)
    x = tnp.asarray(np.ones(4, np.float32))
    for _ in range(3):
      f(x)
    monkeypatch.setattr(tracing, "_trace", lambda *a: pytest.fail("traced again"))
    monkeypatch.setattr(pending, "append", lambda *a: pytest.fail("buffered"))
    out = f(x)
  np.testing.assert_array_equal(np.asarray(out), np.full(4, 4.0, np.float32))


def test_threads_share_compiled_programs():
  import threading
  f = tinyjax.jit(lambda x: x * 2 + 1)
  x = tnp.asarray(np.arange(6, dtype=np.float32))
  for _ in range(3):
    f(x)
  errors, results = [], []

  def work():
    try:
      for _ in range(20):
        results.append(np.asarray(f(x)))
    except Exception as error:  # noqa: BLE001
      errors.append(error)
  threads = [threading.Thread(target=work) for _ in range(3)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors
  for r in results:
    np.testing.assert_array_equal(r, np.arange(6, dtype=np.float32) * 2 + 1)


def test_the_general_way_alone_matches_jax(general_way):
  for actual, wanted in zip(_run_all(tnp.asarray), _expected(), strict=True):
    assert_like_jax(actual, wanted, rtol=1e-6)


def test_a_change_of_jaxs_trace_context_traces_again():
  """JAX's settings that change what a function traces to (its trace context) are part of the fast path's key, as of
  jax.jit's: under jax.numpy_rank_promotion("raise") a call that broadcasts a rank raises as JAX's does, after calls
  that ran it, and the calls after the block run it again."""
  f = lambda x, y: x + y  # noqa: E731
  x, y = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)
  ours, theirs = tinyjax.jit(f), jax.jit(f)
  tx, ty = tnp.asarray(x), tnp.asarray(y)
  for _ in range(3):  # traced, then the fast path
    assert_like_jax(ours(tx, ty), theirs(x, y))
  with jax.numpy_rank_promotion("raise"):
    with pytest.raises(ValueError, match="rank_promotion"):
      theirs(x, y)
    with pytest.raises(ValueError, match="rank_promotion"):
      ours(tx, ty)
  assert_like_jax(ours(tx, ty), theirs(x, y))
