"""Threads: each thread has its own pending buffer and flushes are serialised, so threads computing at once get JAX's
results; an Array made (pending) in one thread can be read or used in another; `tinyjax.config.update` is
process-wide and `tinyjax.default_device` holds in its own thread only.

Each test runs its threads to the end and re-raises the first error any of them hit, with the thread's name.
"""
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
from tinyjax.choosing import selection
from oracle import assert_like_jax

THREADS = 4


def run_threads(*targets, timeout=300):
  """Start one thread per target at once (a barrier), wait for all, and raise the first error of any."""
  start = threading.Barrier(len(targets))
  errors = []

  def wrapped(target):
    try:
      start.wait()
      target()
    except BaseException as error:  # noqa: BLE001  (re-raised in the main thread)
      errors.append((threading.current_thread().name, error))
  threads = [threading.Thread(target=wrapped, args=(t,), name=f"worker-{i}") for i, t in enumerate(targets)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join(timeout)
  assert not any(thread.is_alive() for thread in threads), "a thread hangs"
  if errors:
    name, error = errors[0]
    raise AssertionError(f"{name} failed: {type(error).__name__}: {error}") from error


def _chain(np_, x, scale):
  """A chain of eager calls whose every step depends on the thread's own data."""
  y = np_.tanh(x * scale) + np_.sin(x) / (1.0 + np_.abs(x))
  z = np_.where(y > 0, y, -0.0) - x.mean(axis=0, keepdims=True)
  return [y, z, np_.floor_divide(np_.arange(12).reshape(3, 4), np_.maximum(np_.round(x * scale), 1).astype(int))]


@jax.jit
def _jitted_step(w, x):
  return w - 0.1 * jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(w)


def test_threads_computing_at_once_get_jax_results():
  """4 threads, each with its own data: eager chains (flushed by reading), tinyjax.jit calls, buffer-limit flushes."""
  step = tinyjax.jit(_jitted_step.__wrapped__)

  def worker(seed):
    def run():
      rng = np.random.default_rng(seed)
      x_host = rng.normal(size=(3, 4)).astype(np.float32)
      w_host = rng.normal(size=(4, 2)).astype(np.float32)
      x, w, w_jax = tnp.asarray(x_host), tnp.asarray(w_host), jnp.asarray(w_host)
      for i in range(10):
        scale = float(seed + i)
        # z subtracts values near 1 to results near 0: an ulp of tanh or sin is compared absolutely there
        assert_like_jax(_chain(tnp, x, scale), _chain(jnp, jnp.asarray(x_host), scale), atol=1e-6)
        w, w_jax = step(w, x), _jitted_step(w_jax, x_host)
        assert_like_jax(w, w_jax, rtol=1e-5, atol=1e-5)  # ten steps of float32 rounding
    return run
  run_threads(*(worker(seed) for seed in range(THREADS)))


def test_a_thread_flushing_while_others_build():
  """Threads that only build (flushed by the buffer limit, never by a read) beside threads that flush."""
  tinyjax.config.update("buffer_limit", 100)  # restored after the test (tests/conftest.py)

  def builder(offset):
    def run():
      x = tnp.full((5,), float(offset))
      for _ in range(600):
        x = x * 0.5 + 1.0  # converges to 2.0, through the buffer limit's flushes
      assert_like_jax(x, jnp.full((5,), 2.0))
    return run

  def flusher():
    for i in range(60):
      value = tnp.arange(6.0) + i
      np.testing.assert_array_equal(np.asarray(value), np.arange(6.0, dtype=np.float32) + i)
  run_threads(builder(0), builder(100), flusher, flusher)


def test_an_array_pending_in_one_thread_is_read_in_another():
  made = threading.Event()
  arrays = {}

  def maker():
    x = tnp.arange(8.0)
    arrays["x"], arrays["y"] = x, tnp.cos(x) * 2  # pending in this thread's buffer
    made.set()
    assert not arrays["y"].is_ready()
    done_reading.wait(60)
    assert_like_jax(arrays["y"], jnp.cos(jnp.arange(8.0)) * 2)  # read here too, after the other thread

  done_reading = threading.Event()

  def reader():
    assert made.wait(60)
    y = arrays["y"]
    assert_like_jax(y, jnp.cos(jnp.arange(8.0)) * 2)  # flushes it from this thread
    assert y.is_ready()
    z = y + arrays["x"]  # a new value on another thread's array
    assert_like_jax(z, jnp.cos(jnp.arange(8.0)) * 2 + jnp.arange(8.0))
    done_reading.set()
  run_threads(maker, reader)


def test_threads_reading_one_pending_array_at_once():
  shared = tnp.exp(tnp.linspace(-1.0, 1.0, 7)) * 3  # pending in the main thread's buffer
  expected = jnp.exp(jnp.linspace(-1.0, 1.0, 7)) * 3

  def reader():
    for _ in range(20):
      assert_like_jax(shared, expected)
      assert_like_jax(shared + 1, expected + 1)
  run_threads(*(reader for _ in range(THREADS)))


def test_reads_and_transfers_during_another_threads_flushes():
  """Host reads and device_put in some threads while others run (and TinyJit captures) programs."""
  def computer(seed):
    def run():
      x = tnp.asarray(np.full(9, seed, np.float32))
      for i in range(30):
        x = tnp.sqrt(x * x + 1.0)
        x.block_until_ready()
      assert_like_jax(x, jnp.sqrt(jnp.full(9, float(seed) ** 2 + 30, jnp.float32)), rtol=1e-5)
    return run

  def mover():
    for i in range(60):
      placed = tinyjax.device_put(np.full(4, i, np.int32))
      np.testing.assert_array_equal(tinyjax.device_get(placed), np.full(4, i, np.int32))
  run_threads(computer(1), computer(2), mover, mover)


# --- settings

def test_default_device_holds_in_its_own_thread_only():
  xla = tinyjax.devices("xla")[0]
  inside = threading.Event()
  left = threading.Event()
  seen = {}

  def on_xla():
    with tinyjax.default_device(xla):
      seen["xla"] = (tnp.arange(3.0) * 2).block_until_ready().device
      inside.set()
      assert left.wait(60)

  def on_default():
    assert inside.wait(60)  # while the other thread is inside its `with` block
    seen["default"] = (tnp.arange(3.0) * 2).block_until_ready().device
    left.set()
  run_threads(on_xla, on_default)
  assert seen["xla"] == xla
  assert seen["default"] == selection.current_backend().device


def test_a_thread_started_inside_default_device_does_not_inherit_it():
  """NB: contextvars are per thread; a new thread starts from the process settings, as with JAX's own contexts."""
  seen = {}
  with tinyjax.default_device(tinyjax.devices("xla")[0]):
    run_threads(lambda: seen.setdefault("device", (tnp.ones(2) + 1).block_until_ready().device))
  assert seen["device"] == selection.current_backend().device


def test_config_update_is_process_wide():
  from tinyjax.core import pending
  tinyjax.config.update("buffer_limit", 7)  # restored after the test (tests/conftest.py)
  lengths = []

  def worker():
    x = tnp.zeros(3)
    for _ in range(40):
      x = x + 1
      lengths.append(pending.queued()[1])
    assert_like_jax(x, jnp.zeros(3) + 40)
  run_threads(worker, worker)
  assert max(lengths) <= 8


@pytest.fixture(autouse=True)
def _empty_buffer():
  tinyjax.flush()
  yield
  tinyjax.flush()
