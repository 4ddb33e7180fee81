"""The replay's output pool (tinyjax/backends/tinygrad/machinery/replay.py): a replayed program's small outputs are written
into the memory of earlier outputs that nobody holds any more.

Many repeated calls where the user keeps some outputs and drops others: every kept output must keep the value
jax.jit gave for its call (a pooled buffer is never written while an Array, a Value, a pending call or a view can
still read it), with outputs of carried dtypes (complex), zero-size outputs, outputs that are inputs, and outputs
passed back as inputs.
"""
import jax
import jax.numpy as jnp
import numpy as np

import tinyjax
import tinyjax.numpy as tnp
from tinyjax.backends.tinygrad.machinery import replay


def _several(x, y):
  return x * y + 1, x - y, (x * y)[:0].reshape(0, 1), x


def _complex(z, w):
  return z * w + 1j, jnp.conj(z)


def _complex_layouts(z, w):  # NB: kernels the launcher replays (the products above are replayed by tinygrad)
  return z + w, -z, z[::-1]


def _device_read(a) -> np.ndarray:
  """What an Array's buffer holds now, read from the device (a read through the Array caches it on the host)."""
  backend, buffer = next(iter(a._value.buffers.items()))
  return np.array(backend.get(buffer))


def _same(got, want):
  # NB: a device may round differently from XLA's (WEBGPU's sin by an ulp; complex products): not the pool's concern,
  # whose failure is another call's values
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def _run(fn, make_args, calls=40, seed=0):
  """Call `fn` under tinyjax.jit and jax.jit `calls` times on new inputs; keep every output of some calls, one output
  of others and none of the rest; along the way and at the end, every kept output's buffer holds what it held when
  it was made (read from the device each time), and that is jax.jit's value."""
  rng = np.random.default_rng(seed)
  tf, jf = tinyjax.jit(fn), jax.jit(fn)
  kept = []
  for i in range(calls):
    args = make_args(rng)
    got = tf(*(tnp.asarray(a) for a in args))
    want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jf(*args))]
    leaves = jax.tree_util.tree_leaves(got)
    made = [_device_read(g) for g in leaves]
    for m, w in zip(made, want):
      _same(m, w)
    if i % 4 == 0:
      kept.append((leaves, made))
    elif i % 4 == 1:
      kept.append((leaves[:1], made[:1]))
    if i % 7 == 3:
      del kept[len(kept) // 2]  # an output dropped long after its call: its memory goes back to the pool
    for leaves_kept, made_kept in kept:
      for g, m in zip(leaves_kept, made_kept):
        np.testing.assert_array_equal(_device_read(g), m)
  for leaves_kept, made_kept in kept:
    for g, m in zip(leaves_kept, made_kept):
      assert g.shape == m.shape and g.dtype == m.dtype
      np.testing.assert_array_equal(np.asarray(g), m)


def _reals(rng):
  return [rng.standard_normal(8).astype(np.float32) for _ in range(2)]


def test_kept_outputs_never_change():
  _run(_several, _reals)


def test_complex_outputs_never_change():
  def pairs(rng):
    return [(rng.standard_normal(5) + 1j * rng.standard_normal(5)).astype(np.complex64) for _ in range(2)]
  _run(_complex, pairs)
  _run(_complex_layouts, pairs)


def test_outputs_fed_back_as_inputs():
  step = lambda x, y: (x * 0.5 + y, y + 1)  # noqa: E731
  tf, jf = tinyjax.jit(step), jax.jit(step)
  x0, y0 = np.arange(6, dtype=np.float32), np.ones(6, np.float32)
  tx, ty, jx, jy = tnp.asarray(x0), tnp.asarray(y0), x0, y0
  history = []
  for i in range(30):
    tx, ty = tf(tx, ty)
    jx, jy = jf(jx, jy)
    if i % 5 == 0:
      history.append((tx, np.asarray(jx)))
    np.testing.assert_array_equal(_device_read(tx), np.asarray(jx))
    for t, j in history:
      np.testing.assert_array_equal(_device_read(t), j)


def test_outputs_read_by_pending_work_are_not_reused():
  """An output dropped by the user but read by a pending eager call keeps its value until that call runs."""
  tf = tinyjax.jit(lambda x: x * 2)
  x = tnp.arange(4, dtype=jnp.float32)
  later = []
  for i in range(10):
    y = tf(x + i)
    later.append(y + 0)  # pending: y's Value is the only thing holding its buffer once y is dropped
    del y
    tf(x).block_until_ready()  # replays that would reuse y's memory, were it free
    tf(x).block_until_ready()
  for i, z in enumerate(later):
    np.testing.assert_array_equal(np.asarray(z), (np.arange(4, dtype=np.float32) + i) * 2)


def test_dropped_outputs_are_reused():
  """The pool's point: a loop that drops its outputs allocates no new output after the first few calls."""
  made = []
  original = replay.Replayed._new_slot

  def counted(self):
    made.append(self)
    return original(self)
  tf = tinyjax.jit(lambda x: jnp.tanh(x) + 1)
  x = tnp.ones(16)
  replay.Replayed._new_slot = counted
  try:
    for _ in range(50):
      tf(x).block_until_ready()
  finally:
    replay.Replayed._new_slot = original
  assert len(made) <= replay._POOL_SLOTS
  np.testing.assert_allclose(np.asarray(tf(x)), np.tanh(1.0) + 1, rtol=1e-6)


def test_large_outputs_are_not_pooled():
  tf = tinyjax.jit(lambda x: x + 1)
  x = tnp.zeros(replay._POOLED_BYTES // 4 + 1)
  for _ in range(4):
    y = tf(x)
  np.testing.assert_array_equal(np.asarray(y), 1)
  runners = [r for r in _replayed() if r.specs and r.specs[0][1] == replay._POOLED_BYTES // 4 + 1]
  assert runners and all(r.pool is None for r in runners)


def _replayed():
  import gc
  return [o for o in gc.get_objects() if isinstance(o, replay.Replayed)]
