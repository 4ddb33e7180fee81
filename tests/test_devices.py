"""Devices: every tensor a rule makes lands on the backend's device whatever tinygrad's default device is, host
arrays of every kind move to every device, and bfloat16 and float16 programs run natively with XLA's results.

Each test runs on the devices this machine has (CPU always; CL with an OpenCL driver, WEBGPU with Dawn), JAX the
oracle. Placement runs each device while another is tinygrad's default (tinygrad's DEV, set with its Context).
"""
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import optax
import pytest

import tinyjax
import tinyjax.lax
import tinyjax.numpy as tnp
import tinyjax.random
import xfail
from oracle import assert_like_jax, check, check_traced, native
from tinyjax.choosing import selection
from tinyjax.core import report

# NB: a device missing here fails its cases, not skips them: the README's test command installs CL (POCL) and WEBGPU
# (Dawn on lavapipe)
DEVICES = ["CPU", "CL", "WEBGPU"]


@pytest.fixture
def on_device(request):
  """Flushes run on the device given as the test's `device` parameter."""
  tinyjax.flush()
  tinyjax.config.update("device", request.getfixturevalue("device"))
  yield
  tinyjax.flush()


@pytest.fixture(params=[("CPU", "CL"), ("CL", "CPU"), ("CPU:1", "CPU")],
                ids=["CPU-while-CL-is-default", "CL-while-CPU-is-default", "CPU:1-while-CPU-is-default"])
def off_default(request):
  """Flushes run on one device while tinygrad's default device is another: yields the device."""
  from tinygrad.helpers import Context
  device, default = request.param
  tinyjax.flush()
  with Context(DEV=default):
    tinyjax.config.update("device", device)
    yield device
    tinyjax.flush()


def _assert_on(device: str, results):
  """Every tinygrad buffer of the results is on `device`."""
  for leaf in jax.tree_util.tree_leaves(results, is_leaf=lambda x: isinstance(x, tinyjax.Array)):
    leaf.block_until_ready()
    for backend, buffer in leaf._value.buffers.items():
      if backend.name == "tinygrad" and not isinstance(buffer, np.ndarray):
        assert buffer.device == device, f"a result on {buffer.device}, not {device}"


# --- placement: programs whose rules make tensors of their own (constants, iota, scratch, random bits, loop state)

_RNG = np.random.default_rng(0)
_X = _RNG.normal(size=(4, 5)).astype(np.float32)
_SPD = (lambda a: a @ a.T + 4 * np.eye(4, dtype=np.float32))(_RNG.normal(size=(4, 4)).astype(np.float32))
_INDEX = np.int32(2)


def _constants(m, x):
  x = m.asarray(x)
  return m.arange(5), m.ones((2, 3)), m.eye(3), x + 1, x * 0.0, x ** 0, -m.arange(3)


def _indexing(m, x, i):
  x = m.asarray(x)
  return (x[i], x[:, i], x[1:3], x.at[i].set(7.0), x.at[2, 1].add(1.0), m.take(x, m.array([0, 3]), axis=1),
          x.at[m.array([0, 0, 3])].add(2.0), m.roll(x, i, axis=0))


def _dynamic_slices(m, x, i):
  return jax.lax.dynamic_slice(x, (i, 1), (2, 3)), jax.lax.dynamic_update_slice(x, x[:1, :2] * 2, (i, i))


def _reductions(m, x):
  x = m.asarray(x)
  return (x.sum(), m.argmax(x, axis=1), m.max(x, axis=0), m.cumsum(x, axis=1), m.zeros((0, 3)).sum(0),
          m.sort(x, axis=1), m.argsort(x[0]), m.any(x > 1))


def _linalg(m, a):
  return m.linalg.cholesky(a), m.linalg.solve(a, a[:, :2] + 1), m.linalg.qr(a), m.linalg.det(a), m.linalg.inv(a)


def _loops(m, x):
  def body(carry):
    i, y = carry
    return i + 1, y * 1.5 + i
  count, grown = jax.lax.while_loop(lambda c: c[0] < 5, body, (0, x))
  return count, grown, jax.lax.fori_loop(0, 3, lambda i, y: y + i, x), jax.lax.cond(x.sum() > 0, m.sin, m.cos, x)


@pytest.mark.parametrize("fn,args", [(_constants, (_X,)), (_indexing, (_X, _INDEX)), (_dynamic_slices, (_X, _INDEX)),
                                     (_reductions, (_X,)), (_linalg, (_SPD,)), (_loops, (_X,))],
                         ids=["constants", "indexing", "dynamic_slices", "reductions", "linalg", "loops"])
def test_rules_place_their_tensors_on_the_backends_device(off_default, fn, args):
  if fn in (_dynamic_slices, _loops):  # lax calls with static arguments: traced whole
    actual = check_traced(lambda *xs: fn(jnp, *xs), *args, rtol=1e-5)
  else:  # NB: linalg's results round differently from LAPACK's, and some are near zero: compared absolutely too
    actual = check(fn, *args, rtol=1e-5, atol=1e-5 if fn is _linalg else None)
  _assert_on(off_default, actual)


def _rnn_loss(w, xs):
  def step(h, x):
    h = jnp.tanh(w @ h + x)
    return h, h.sum()
  h, ys = jax.lax.scan(step, jnp.zeros(3, jnp.float32), xs)
  return ys.sum() + h.sum()


@pytest.mark.parametrize("length", [5, 40], ids=["lazy_scan", "replayed_scan"])
def test_scan_gradient_off_the_default_device(off_default, length):
  w = _RNG.normal(size=(3, 3)).astype(np.float32) * 0.5
  xs = _RNG.normal(size=(length, 3)).astype(np.float32)
  with native():
    actual = tinyjax.jit(jax.value_and_grad(_rnn_loss))(w, xs)
  assert_like_jax(actual, jax.jit(jax.value_and_grad(_rnn_loss))(w, xs), rtol=1e-4, atol=1e-5)
  _assert_on(off_default, actual)


def test_random_bits_off_the_default_device(off_default):
  def sample(r):
    key = r.key(7)
    first, second = r.split(key)
    return (r.normal(first, (3, 2)), r.uniform(r.fold_in(second, 3), (4,)), r.randint(key, (5,), 0, 9),
            r.key_data(r.split(second, 3)))
  with native():
    actual = sample(tinyjax.random)
  assert_like_jax(actual, sample(jax.random), rtol=1e-6)
  _assert_on(off_default, actual)


def test_optax_training_off_the_default_device(off_default):
  def init(key):
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (4, 16)) * 0.5, "b1": jnp.zeros(16), "w2": jax.random.normal(k2, (16, 1)),
            "b2": jnp.zeros(1)}

  def loss(params, x, y):
    hidden = jax.nn.relu(x @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] + params["b2"] - y) ** 2)

  optimizer = optax.adam(1e-2)

  def step(params, state, x, y):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    updates, state = optimizer.update(grads, state, params)
    return optax.apply_updates(params, updates), state, value

  x = _RNG.normal(size=(32, 4)).astype(np.float32)
  y = np.cos(x).sum(1, keepdims=True).astype(np.float32)
  results = {}
  for name, jit in (("jax", jax.jit), ("tinyjax", tinyjax.jit)):
    params = init(jax.random.key(0))
    state, run = optimizer.init(params), jit(step)
    for _ in range(3):
      params, state, value = run(params, state, x, y)
    results[name] = (params, value)
  assert_like_jax(results["tinyjax"], results["jax"], rtol=2e-4, atol=2e-5)
  _assert_on(off_default, results["tinyjax"])


@pytest.mark.parametrize("names", [("CPU", "cpu", "CLANG", "cpu:0"), ("CL", "cl", "GPU")], ids=["CPU", "CL"])
def test_one_backend_per_device(names):
  backends = {selection.backend_for("tinygrad", name) for name in names}
  assert len(backends) == 1 and str(backends.pop().device) == names[0]


# --- transfers: any host array to any device

def _host_arrays() -> dict:
  read_only = np.arange(6, dtype=np.float32).reshape(2, 3)
  read_only.flags.writeable = False
  return {
    "read_only": read_only,
    "non_contiguous": np.arange(24, dtype=np.int32).reshape(4, 6)[::2, 1::2],
    "transposed": np.arange(6, dtype=np.float32).reshape(2, 3).T,
    "0-d": np.array(-2.5, np.float32),
    "jax_array": np.asarray(jnp.arange(5, dtype=jnp.int32) * 3),  # a read-only view of XLA's buffer
    "zero_size": np.zeros((0, 3), np.float32),
    "bool": np.array([True, False, True]),
    "uint8": np.array([0, 7, 255], np.uint8),
    "float16": np.array([1.5, -0.0, np.inf, 6e-8], np.float16),
    "bfloat16": np.array([1.5, -0.0, np.nan, 3e-39], ml_dtypes.bfloat16),  # and a subnormal
    "bfloat16_0-d": np.array(-1.25, ml_dtypes.bfloat16),
    "bfloat16_zero_size": np.zeros((2, 0), ml_dtypes.bfloat16),
  }


@pytest.mark.parametrize("kind", list(_host_arrays()))
@pytest.mark.parametrize("device", DEVICES)
def test_host_arrays_move_to_the_device_and_back(device, kind):
  host = _host_arrays()[kind]
  backend = selection.backend_for("tinygrad", device)
  buffer = backend.put(host)
  back = backend.get(buffer)
  assert back.dtype == host.dtype and back.shape == host.shape
  assert _bits(back) == _bits(host)
  if backend.supports_dtype(host.dtype):
    assert buffer.device == device
  placed = tinyjax.device_put(host, device)
  assert placed.device == backend.device and _bits(np.asarray(placed)) == _bits(host)


@pytest.mark.parametrize("kind", [kind for kind, host in _host_arrays().items() if host.size])
@pytest.mark.parametrize("device", DEVICES)
def test_host_arrays_move_without_a_schedule(device, kind, monkeypatch):
  """A copy in or out is the device allocator's copy, as tinygrad's copy kernel makes it, with no schedule of
  tinygrad's (one cost ~1 ms: an eager loop that reads a value and computes on it again paid two a step)."""
  from tinygrad import Tensor
  host = _host_arrays()[kind]
  backend = selection.backend_for("tinygrad", device)
  backend.get(backend.put(host))  # the device's probes of what it computes (kernels of their own) made first
  realized = []
  realize = Tensor.realize
  monkeypatch.setattr(Tensor, "realize", lambda self, *a, **k: realized.append(self) or realize(self, *a, **k))
  back = backend.get(backend.put(host))
  assert _bits(back) == _bits(host)
  assert realized == []


def _bits(host: np.ndarray) -> bytes:
  return np.array(host, copy=True).tobytes()  # C order, whatever the layout


@pytest.mark.parametrize("device", DEVICES)
def test_a_jax_array_moves_to_the_device(device):
  placed = tinyjax.device_put({"a": jnp.arange(4.0), "s": jnp.float32(2)}, device)
  assert_like_jax(placed, {"a": jnp.arange(4.0), "s": jnp.float32(2)})
  _assert_on(device, placed)


@pytest.mark.parametrize("device", DEVICES)
def test_fallback_results_move_to_the_device(device, on_device):
  """A primitive without a tinygrad rule (not_native.py: tridiagonal_solve) runs on XLA; what follows it runs on the
  device, from XLA's result moved there."""
  x = _RNG.normal(size=(8,)).astype(np.float32)

  def solved(m, v):
    lax = tinyjax.lax if m is tnp else jax.lax
    return lax.linalg.tridiagonal_solve(v * 0.5, v * 0 + 4, v * 0.5, v[:, None])[:, 0] * 2 + v
  with report.collecting() as ran:
    actual = check(solved, x, native_only=False, rtol=1e-5)
  assert ran.fallback_primitives == {"tridiagonal_solve": 1} and ran.primitives["tinygrad", "add"], str(ran)
  _assert_on(device, actual)


# --- 16-bit floats: stored in 16 bits, each operation computed in float32 and rounded to nearest even (XLA's CPU)

def _sixteen_bit(dtype, *shape):
  """Values over a range of magnitudes whose products stay normal, with NaN, infinities, signed zeros and the largest
  finite value (which overflows)."""
  info = jnp.finfo(dtype)
  magnitudes = _RNG.uniform(0.5, 2, size=shape) * np.exp2(_RNG.integers(-2, 3, size=shape))
  values = _RNG.choice([-1, 1], size=shape) * magnitudes
  values.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, -0.0, float(info.max), -float(info.max)]
  return values.astype(dtype)


def _arithmetic(m, x, y, z):
  x, y, z = m.asarray(x), m.asarray(y), m.asarray(z)
  return x * y + z, (x - y) * 3, x * y * z * x, (x + 1) * 3 - y, (x.astype(m.float32) * 1.001).astype(x.dtype)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("device", DEVICES)
def test_sixteen_bit_arithmetic_rounds_each_operation_like_xla(device, dtype, on_device):
  operands = [_sixteen_bit(dtype, 4, 64) for _ in range(3)]
  actual = check(_arithmetic, *operands, rtol=0)  # bit for bit: one rounding per operation, as XLA
  _assert_on(device, actual)


def _programs(m, x, w):
  x, w = m.asarray(x), m.asarray(w)
  return {"math": (m.exp(x), m.tanh(x), m.sqrt(m.abs(x)), m.where(x > 0, x, 0.5 * x), m.maximum(x, -1)),
          "matmul": x @ w, "sums": (x.sum(axis=1), x.max(axis=0), m.mean(x)),
          "casts": (x.astype(m.float32), x.astype(m.int32), (x * 7).astype(m.float16 if x.dtype == m.bfloat16 else
                                                                            m.bfloat16))}


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("device", DEVICES)
def test_sixteen_bit_programs_run_natively(device, dtype, on_device):
  x = (_RNG.normal(size=(8, 16)) * 2).astype(dtype)
  w = _RNG.normal(size=(16, 4)).astype(dtype)
  actual = check(_programs, x, w)
  _assert_on(device, actual)
  backend = selection.backend_for("tinygrad", device)
  assert all(isinstance(backend.get(leaf._value.buffers[backend]), np.ndarray) and not
             isinstance(leaf._value.buffers[backend], np.ndarray) for leaf in jax.tree_util.tree_leaves(
               actual, is_leaf=lambda a: isinstance(a, tinyjax.Array)))  # device buffers, not host arrays


@pytest.mark.parametrize("device", DEVICES)
def test_tinygrads_own_dtypes_are_told_without_a_kernel(device, monkeypatch):
  """bool, int32 and float32: every device's renderer has them and computes them, so the backend tells them without
  a probe kernel (each ~0.1 s of a cold process's first call)."""
  from tinygrad import Device
  from tinyjax.backends.tinygrad import EVERY_DEVICE_COMPUTES, TinygradBackend
  from tinyjax.backends.tinygrad.machinery import device as machinery
  from tinyjax.backends.tinygrad.table import tg_dtype
  backend = selection.backend_for("tinygrad", device)
  assert {np.dtype(np.bool_), np.dtype(np.int32), np.dtype(np.float32)} == EVERY_DEVICE_COMPUTES
  for dtype in EVERY_DEVICE_COMPUTES:
    assert tg_dtype(dtype) in Device[device].renderer.supported_dtypes()
    assert machinery.runs_kernel_in(tg_dtype(dtype), backend.tg_device)
  monkeypatch.setattr(machinery, "runs_kernel_in", lambda *args, **context: pytest.fail("a probe kernel ran"))
  uncached = TinygradBackend.supports_dtype.__wrapped__
  assert all(uncached(backend, dtype) for dtype in EVERY_DEVICE_COMPUTES)
  with pytest.raises(pytest.fail.Exception, match="a probe kernel ran"):  # the others are probed
    uncached(backend, np.dtype(np.uint8))


def _emulates(device: str, dtype) -> bool:
  """Whether tinygrad emulates the 16-bit float on the device (its renderer lacks it)."""
  from tinygrad import Device
  from tinyjax.backends.tinygrad.table import tg_dtype
  backend = selection.backend_for("tinygrad", device)
  backend.supports_dtype(dtype)  # a device whose compiler rejects the dtype computes it by emulation (backend.contexts)
  emulated = backend.contexts.get("EMULATED_DTYPES", "").split(",")
  return tg_dtype(dtype) not in Device[device].renderer.supported_dtypes() or jnp.dtype(dtype).name in emulated


def _subnormal_cases():
  """XLA keeps float16's subnormals (normal float32 values) and flushes bfloat16's (float32 denormals); tinygrad's
  emulation of bfloat16 flushes them, its rendering of one keeps them. float16's, rendered or emulated (amendments.py
  keeps them in the emulation), are kept as XLA keeps them."""
  for dtype in (jnp.bfloat16, jnp.float16):
    for name in DEVICES:
      differs = dtype == jnp.bfloat16 and not _emulates(name, dtype)
      yield xfail.param(name, dtype, dtype=dtype, id=f"{name}-{jnp.dtype(dtype).name}",
                        name="denormals" if differs else "")


@pytest.mark.parametrize("device,dtype", list(_subnormal_cases()))
def test_sixteen_bit_subnormals(device, dtype, on_device):
  tiny = float(jnp.finfo(dtype).tiny)
  x = np.array([tiny / 4, -tiny / 3, tiny * 0.75, tiny, 3.0], dtype)
  check(lambda m, v: (m.asarray(v) * 0.5, m.asarray(v) * 3, m.asarray(v) * 0.25 + 0), x, rtol=0)


def test_tiny_runs_on_its_tensors_device(off_default):
  from tinygrad import Tensor
  other = "CL" if off_default == "CPU" else "CPU"  # tinygrad's default here: the Tensors' device, not the setting's
  fun = tinyjax.tiny(lambda x, i: (jnp.cumsum(x) + jnp.arange(3.0), x[i]))
  sums, picked = fun(Tensor([1.0, 2.0, 3.0]), Tensor(np.int32(1).reshape(1)).reshape(()))
  assert sums.device == picked.device == other
  np.testing.assert_array_equal(sums.numpy(), [1.0, 4.0, 8.0])
  assert picked.numpy() == 2.0


_CREATIONS = {"zeros": lambda np_, device: np_.zeros(3, device=device),
              "ones_like": lambda np_, device: np_.ones_like(np.ones(2, np.int8), device=device),
              "full": lambda np_, device: np_.full(2, 1.5, device=device),
              "asarray": lambda np_, device: np_.asarray([1, 2], device=device),
              "arange": lambda np_, device: np_.arange(3, device=device),
              "eye": lambda np_, device: np_.eye(2, device=device),
              "linspace": lambda np_, device: np_.linspace(0, 1, 3, device=device)}


@pytest.mark.parametrize("name", list(_CREATIONS))
@pytest.mark.parametrize("device", DEVICES)
def test_an_array_made_with_device_is_on_it(device, name):
  """jnp.zeros(..., device=d).devices() == {d}, as in JAX (JAX's value, made for tinyjax's device d); also to_device."""
  target = next(d for d in tinyjax.devices() if d.name == device)
  made = _CREATIONS[name](tnp, target)
  assert made.devices() == {target} and made.device == target
  assert_like_jax(made, _CREATIONS[name](jnp, None))
  moved = tnp.arange(4.0).to_device(target)
  assert moved.devices() == {target}
  assert_like_jax(moved, jnp.arange(4.0))


@pytest.mark.parametrize("device", DEVICES)
def test_a_deleted_array_raises_as_in_jax(device, on_device):
  """delete() / is_deleted(): reading a deleted Array raises JAX's RuntimeError at the call; others keep theirs."""
  errors = {}
  for np_ in (jnp, tnp):
    x = np_.arange(3.0)
    kept = x * 2
    x.delete()
    assert x.is_deleted() and not kept.is_deleted()
    assert x.shape == (3,) and x.dtype == np.float32
    x.delete()  # again: nothing happens
    for name, read in {"add": lambda: x + 1, "asarray": lambda: np.asarray(x), "index": lambda: x[0],
                       "repr": lambda: repr(x)}.items():
      with pytest.raises(RuntimeError) as raised:
        read()
      errors.setdefault(name, []).append(str(raised.value))
    np.testing.assert_array_equal(np.asarray(kept), [0.0, 2.0, 4.0])
  assert all(jax_message == ours for jax_message, ours in errors.values()), errors


@pytest.mark.parametrize("device", DEVICES)
def test_unsafe_buffer_pointer(device, on_device):
  """An int, as JAX's; one buffer, one address (the same Array asked twice), two buffers, two addresses."""
  x, y = tnp.arange(8.0) + 1, tnp.arange(8.0) + 2
  pointer = x.unsafe_buffer_pointer()
  assert type(pointer) is type(jnp.arange(8.0).unsafe_buffer_pointer()) is int
  assert pointer == x.unsafe_buffer_pointer() != y.unsafe_buffer_pointer()
  assert tnp.arange(3.0)._committed is jnp.arange(3.0)._committed is False
