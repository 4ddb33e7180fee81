"""The pending buffer: what makes it flush, that one flush runs every live pending value, that dead values are
dropped and memory stays flat, that programs are cached by structure, and that a failed flush spoils nothing else.

Flushes, compiles and primitive counts are read from tinyjax.report(); values are compared with JAX.
"""
import gc
import pathlib
import sys
import tracemalloc
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
from oracle import assert_like_jax
from tinyjax.backends.tinygrad.table import RULES
from tinyjax.core import pending


@pytest.fixture(autouse=True)
def empty_buffer():
  tinyjax.flush()
  yield
  tinyjax.flush()


def counting(name):
  """How many `name` equations have run (on any backend) so far."""
  return sum(n for (_, prim), n in tinyjax.report().primitives.items() if prim == name)


# --- when the buffer flushes

TRIGGERS = {
  "__array__": np.asarray, "repr": repr, "str": str, "format": lambda a: f"{a:.2f}", "item": lambda a: a.item(),
  "tolist": lambda a: a.tolist(), "float": float, "int": int, "bool": bool, "block_until_ready":
  lambda a: a.block_until_ready(), "device_get": tinyjax.device_get, "device_put": tinyjax.device_put,
  "to_jax": jnp.asarray, "jax_op": lambda a: jnp.sin(a), "dlpack": np.from_dlpack, "pickle":
  lambda a: a.__reduce__(), "iter": lambda a: list(a.reshape(1)),
}


@pytest.mark.parametrize("trigger", TRIGGERS)
def test_reading_a_value_flushes(trigger):
  x = tnp.asarray(np.float32(1.5)) * 3
  assert not x.is_ready()
  flushes = tinyjax.report().flushes
  TRIGGERS[trigger](x)
  assert x.is_ready()
  assert tinyjax.report().flushes == flushes + 1
  assert_like_jax(x, jnp.asarray(np.float32(1.5)) * 3)


def test_metadata_and_new_calls_do_not_flush():
  flushes = tinyjax.report().flushes
  x = tnp.ones((2, 3)) * 2
  y = (x + 1).sum(axis=0).reshape(3, 1).T
  assert (y.shape, y.dtype, y.ndim, y.size, y.weak_type, len(y)) == ((1, 3), np.float32, 2, 3, False, 1)
  assert tinyjax.report().flushes == flushes and not y.is_ready()
  assert_like_jax(y, ((jnp.ones((2, 3)) * 2 + 1).sum(axis=0).reshape(3, 1).T))


@pytest.mark.parametrize("how", ["env", "config"])
def test_buffer_limit_flushes_a_growing_buffer(monkeypatch, how):
  if how == "env":
    monkeypatch.setenv("TINYJAX_BUFFER_LIMIT", "10")
  else:
    tinyjax.config.update("buffer_limit", 10)  # restored after the test (conftest)
  flushes = tinyjax.report().flushes
  x = tnp.zeros(4)
  first = x = x + 1
  for _ in range(30):
    x = x + 1
  assert tinyjax.report().flushes >= flushes + 2  # flushed without anyone reading
  assert first.is_ready()
  arrays, equations = pending.queued()
  assert arrays <= 12 and equations <= 11
  assert_like_jax(x, jnp.zeros(4) + 31)


def test_a_changed_buffer_limit_holds_from_the_next_call(monkeypatch):
  monkeypatch.setenv("TINYJAX_BUFFER_LIMIT", "1000")
  x = tnp.zeros(4) + 1
  for _ in range(20):
    x = x + 1
  assert pending.queued()[1] >= 21
  monkeypatch.setenv("TINYJAX_BUFFER_LIMIT", "5")
  x = x + 1  # past the new bound: flushed at this call
  assert pending.queued()[1] == 0 and x.is_ready()
  for _ in range(8):
    x = x + 1
  assert pending.queued()[1] <= 6
  tinyjax.config.update("buffer_limit", 3)  # an override, restored after the test (tests/conftest.py)
  for _ in range(8):
    x = x + 1
  assert pending.queued()[1] <= 4
  assert_like_jax(x, jnp.zeros(4) + 38)


@pytest.mark.parametrize("value", ["many", "-1", "1.5", ""])
def test_bad_buffer_limit_names_the_variable(monkeypatch, value):
  monkeypatch.setenv("TINYJAX_BUFFER_LIMIT", value)
  with pytest.raises(ValueError, match="TINYJAX_BUFFER_LIMIT"):
    tnp.ones(3) + 1
  with pytest.raises(ValueError, match="TINYJAX_BUFFER_LIMIT"):
    tinyjax.config.update("buffer_limit", value)


def test_one_flush_computes_every_live_pending_value():
  x = tnp.arange(6.0)
  a, b, c = x * 2, x + 1, tnp.sin(x)
  flushes = tinyjax.report().flushes
  np.asarray(a)  # reading one...
  assert tinyjax.report().flushes == flushes + 1
  assert a.is_ready() and b.is_ready() and c.is_ready()  # ...computed them all
  assert_like_jax([a, b, c], [jnp.arange(6.0) * 2, jnp.arange(6.0) + 1, jnp.sin(jnp.arange(6.0))])
  assert tinyjax.report().flushes == flushes + 1


def test_explicit_flush():
  a = tnp.arange(3) * 3
  tinyjax.flush()
  assert a.is_ready()
  flushes = tinyjax.report().flushes
  tinyjax.flush()  # nothing pending: nothing runs
  assert tinyjax.report().flushes == flushes


def test_values_no_array_refers_to_are_dropped():
  x = tnp.arange(5.0)
  dropped = tnp.cos(x)
  kept = x * 4
  del dropped
  cosines = counting("cos")
  np.asarray(kept)
  assert counting("cos") == cosines  # never computed
  intermediate = tnp.cos(x)
  result = intermediate + 2
  del intermediate  # still needed by `result`: computed inside its program, never stored
  assert_like_jax(result, jnp.cos(jnp.arange(5.0)) + 2)
  assert counting("cos") == cosines + 1


@pytest.fixture
def heap_of_this_test():
  """gc.collect and gc.get_objects see only the objects made during the test: the older ones (in a worker of the whole
  suite, millions: every kernel compiled before) are frozen (gc.freeze), so each count below takes milliseconds
  instead of seconds there, and the growth it measures is the same."""
  gc.collect()
  gc.freeze()
  yield
  gc.unfreeze()


def memory_in_use() -> dict:
  """What a long loop must not accumulate: live buffered calls and Values, and tinygrad's device bytes."""
  from tinygrad.helpers import GlobalCounters
  gc.collect()
  objects = gc.get_objects()
  return {"nodes": sum(isinstance(o, pending.Node) for o in objects),
          "values": sum(isinstance(o, pending.Value) for o in objects),
          "device bytes": GlobalCounters.mem_used}


def python_blocks() -> int:
  """The Python heap's live small objects (pymalloc's blocks): cheap to count, unlike tracemalloc's bytes."""
  gc.collect()
  return sys.getallocatedblocks()


def heap_growth_sites(run, most: int = 6) -> list[str]:
  """Where the Python heap grows while `run()` runs: bytes, blocks, the allocation's frames (the innermost first)."""
  own = [tracemalloc.Filter(False, tracemalloc.__file__)]
  tracemalloc.start(8)  # NB: it makes Python 8-30 times slower: only to name the places once a count has grown
  try:
    gc.collect()
    before = tracemalloc.take_snapshot().filter_traces(own)
    run()
    gc.collect()
    after = tracemalloc.take_snapshot().filter_traces(own)
  finally:
    tracemalloc.stop()
  return [f"{diff.size_diff:+} B in {diff.count_diff:+} blocks at " + " <- ".join(
    f"{pathlib.Path(frame.filename).name}:{frame.lineno}" for frame in reversed(diff.traceback))
          for diff in after.compare_to(before, "traceback")[:most]]


def assert_flat(before: dict, after: dict, **slack):
  grown = {name: (before[name], after[name]) for name in before if after[name] > before[name] + slack.get(name, 0)}
  assert not grown, f"grew (before, after): {grown}"


def test_long_eager_loop_keeps_memory_flat_and_the_buffer_bounded(monkeypatch, heap_of_this_test):
  """20,000 eager operations (400 flushes): never more than TINYJAX_BUFFER_LIMIT pending equations, and pending calls,
  Values and tinygrad buffers do not accumulate."""
  # NB: short programs: with the default limit (2000) this chain fuses into one kernel nested too deeply for clang,
  # which tinyjax then runs on XLA (a RuntimeWarning)
  limit = 50
  monkeypatch.setenv("TINYJAX_BUFFER_LIMIT", str(limit))
  x = tnp.asarray(np.ones(64, np.float32))
  scale, shift = tnp.asarray(np.full(64, 0.5, np.float32)), tnp.asarray(np.full(64, 0.25, np.float32))
  most_equations = most_arrays = 0

  def steps(n):
    nonlocal x, most_equations, most_arrays
    for _ in range(n // 2):
      x = x * scale + shift
      most_equations = max(most_equations, pending.queued()[1])
      most_arrays = max(most_arrays, pending.queued()[0])
    x.block_until_ready()
  steps(2_000)
  before = memory_in_use()
  steps(20_000)
  assert_flat(before, memory_in_use(), values=2)
  assert most_equations <= limit and most_arrays <= limit
  assert pending.queued()[0] == 0
  assert_like_jax(x, jnp.full(64, 0.5, jnp.float32))  # the fixed point of x * 0.5 + 0.25


def _mlp_loss(params, x, y):
  hidden = jnp.tanh(x @ params["w1"] + params["b1"])
  return jnp.mean((hidden @ params["w2"] + params["b2"] - y) ** 2)


def test_long_jit_training_loop_keeps_memory_flat(heap_of_this_test):
  """180 SGD steps of a small MLP (gradients from tinyjax.jit(tinyjax.grad(loss)), eager updates): after warm-up,
  pending calls, Values, device bytes and the Python heap stay flat, and the weights are JAX's."""
  rng = np.random.default_rng(0)
  init = {"w1": rng.normal(size=(8, 16)).astype(np.float32) * 0.3, "b1": np.zeros(16, np.float32),
          "w2": rng.normal(size=(16, 1)).astype(np.float32) * 0.3, "b2": np.zeros(1, np.float32)}
  x = rng.normal(size=(32, 8)).astype(np.float32)
  y = np.sin(x.sum(1, keepdims=True)).astype(np.float32)

  def steps(grad, params, n):
    for _ in range(n):
      params = jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, grad(params, x, y))
    return params
  grad = tinyjax.jit(tinyjax.grad(_mlp_loss))
  params = steps(grad, jax.tree_util.tree_map(tnp.asarray, init), 60)  # warm-up: compiled, captured, caches filled
  before, blocks = memory_in_use(), [python_blocks()]
  for _ in range(3):
    params = steps(grad, params, 40)
    blocks.append(python_blocks())
  assert_flat(before, memory_in_use(), values=2)
  thirds = [later - earlier for earlier, later in zip(blocks, blocks[1:])]
  # NB: a one-off growth (a dict rebuilt larger, a source file's lines read for a warning) is no leak, which grows in
  # every third. The bound, 10 blocks a step: measured at most 3 on CPU, CL and WEBGPU; one array kept a step, 30
  if min(thirds) > 400:
    pytest.fail(f"the Python heap grew in every third of 40 steps: {thirds} blocks; where it grows in 10 more steps:\n"
                + "\n".join(heap_growth_sites(lambda: steps(grad, params, 10))))
  assert_like_jax(params, steps(jax.jit(jax.grad(_mlp_loss)), init, 180), rtol=1e-4, atol=1e-5)


def test_20000_operation_eager_loop_runs_on_tinygrad(monkeypatch):
  """20,000 eager operations with no read in between: each flushed program is cut into kernels shallow enough to
  compile (before, clang refused one nested past 256 brackets and XLA rescued the program, with a warning)."""
  monkeypatch.setenv("TINYJAX_BACKEND", "tinygrad")
  before = tinyjax.report().primitives.copy()
  start = np.linspace(-1, 1, 6, dtype=np.float32)
  x, expected = tnp.asarray(start), jnp.asarray(start)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # XLA's rescue warns
    for _ in range(10_000):
      x = x * 0.999 + 0.5
    np.asarray(x)
  ran = tinyjax.report().primitives - before
  assert ran[("tinygrad", "mul")] == 10_000 and ran[("tinygrad", "add")] == 10_000
  assert not any(backend == "xla" for backend, _ in ran), ran
  for _ in range(10_000):
    expected = expected * 0.999 + 0.5
  assert_like_jax(x, expected)


# --- compiled programs are cached by structure

def test_eager_loop_compiles_once(monkeypatch):
  traces = []
  make_jaxpr = jax.make_jaxpr
  monkeypatch.setattr(jax, "make_jaxpr", lambda *a, **k: traces.append(1) or make_jaxpr(*a, **k))
  x, expected = tnp.ones(5), jnp.ones(5)
  compiles = []
  for i in range(12):
    x, expected = tnp.tanh(x * 0.9) + 0.1, jnp.tanh(expected * 0.9) + 0.1
    x.block_until_ready()  # a flush each iteration
    compiles.append(tinyjax.report().compiles)
    if i == 1:
      traced = len(traces)
  assert compiles[-1] == compiles[2] and len(traces) == traced
  assert_like_jax(x, expected)


@pytest.mark.parametrize("scalar", [lambda i: i, lambda i: 0.5 * i, lambda i: np.float32(i)],
                         ids=["int", "float", "numpy"])
def test_changing_python_scalars_do_not_retrace_or_recompile(monkeypatch, scalar):
  traces = []
  make_jaxpr = jax.make_jaxpr
  monkeypatch.setattr(jax, "make_jaxpr", lambda *a, **k: traces.append(1) or make_jaxpr(*a, **k))
  x = tnp.arange(4.0)
  results, compiles = [], []
  for i in range(8):
    results.append(x * scalar(i))
    results[-1].block_until_ready()
    compiles.append(tinyjax.report().compiles)
    if i == 1:
      traced = len(traces)
  assert compiles[-1] == compiles[2] and len(traces) == traced
  assert_like_jax(results, [jnp.arange(4.0) * scalar(i) for i in range(8)])


def test_same_structure_from_different_lines_shares_a_program():
  a = tnp.arange(7.0) * 3.0
  a.block_until_ready()
  compiles = tinyjax.report().compiles
  b = tnp.arange(7.0) * 5.0  # another line, another scalar: the same program
  b.block_until_ready()
  assert tinyjax.report().compiles == compiles
  assert_like_jax([a, b], [jnp.arange(7.0) * 3.0, jnp.arange(7.0) * 5.0])


def test_each_call_names_the_users_line():
  """The line a pending value was made at (errors and reports name it): the first call of a kind, traced, and the
  later ones, remembered, through an operator, a jax.numpy function and one called by another."""
  x = tnp.arange(13.0)
  for _ in range(3):
    line = sys._getframe().f_lineno + 1
    made = [x * 0.25, tnp.sin(x), tnp.linalg.norm(x - 1.0)]
    assert [m._value.node.source for m in made] == [f"{__file__}:{line}"] * 3


# --- a long flush is cut into programs of bounded cost, which a loop's steps share

def _sin_affine(np_, y, steps):
  """An eager update loop of the kind simulations and samplers are written as (a transcendental in every step)."""
  for _ in range(steps):
    y = np_.sin(y) * 0.5 + y * 0.5
    y = y * 0.999 + 0.001
  return y


def _compiled_sizes(capsys) -> list[int]:
  """The equations of each program compiled since the last call, as TINYJAX_LOG_COMPILES prints them."""
  return [int(line.split()[5]) for line in capsys.readouterr().err.splitlines()
          if line.startswith("tinyjax: compiling a program of")]


def test_a_long_eager_loop_compiles_what_one_step_needs(monkeypatch, capsys):
  """A loop of 50 steps read once, then one of 400: the longer loop compiles no program the shorter one did not (its
  cost grows with its steps, not faster), and every program is a few steps long. Before, each flush was one program
  of every pending step: 400 chained sines took minutes to build. Flushed by the buffer bound on the way (ending
  anywhere in a step), the programs stay as short."""
  monkeypatch.setenv("TINYJAX_LOG_COMPILES", "1")
  monkeypatch.setenv("TINYJAX_BUFFER_LIMIT", "100000")
  start = np.linspace(-3, 3, 40, dtype=np.float32)  # NB: a shape of its own: the programs are new to this test
  assert_like_jax(_sin_affine(tnp, tnp.asarray(start), 50), _sin_affine(jnp, jnp.asarray(start), 50))
  first = _compiled_sizes(capsys)
  assert first and max(first) <= 4 * pending.CHUNK_COST
  assert_like_jax(_sin_affine(tnp, tnp.asarray(start), 400), _sin_affine(jnp, jnp.asarray(start), 400))
  assert _compiled_sizes(capsys) == []
  monkeypatch.setenv("TINYJAX_BUFFER_LIMIT", "500")
  assert_like_jax(_sin_affine(tnp, tnp.asarray(start), 400), _sin_affine(jnp, jnp.asarray(start), 400))
  assert max(_compiled_sizes(capsys), default=0) <= 4 * pending.CHUNK_COST


def test_a_loop_that_begins_at_its_first_call_is_cut_into_whole_steps(monkeypatch, capsys):
  """A loop whose step begins with the call traced first (the sine) is cut before each of those calls: every chunk,
  the first and the last too, is one whole step, so the loop compiles one program. Cut after the sine, the first
  chunk was the sine alone and the last a step without it: three programs, three kernels to build."""
  monkeypatch.setenv("TINYJAX_LOG_COMPILES", "1")
  start = np.linspace(-3, 3, 41, dtype=np.float32)  # NB: a shape of its own: the programs are new to this test
  assert_like_jax(_sin_affine(tnp, tnp.asarray(start), 30), _sin_affine(jnp, jnp.asarray(start), 30))
  assert len(_compiled_sizes(capsys)) == 1  # one step's program


def test_values_kept_across_the_cuts_are_jaxs():
  """Random eager programs (seeded) of cheap and costly calls, which read values made long before and keep some:
  every kept value, computed in whichever chunk, is JAX's, and reading one mid-way cuts nothing wrong."""
  ops = [lambda np_, a, b: np_.sin(a) + b, lambda np_, a, b: np_.exp(-a * a) * b, lambda np_, a, b: a * 0.75 - b,
         lambda np_, a, b: np_.tanh(a - b), lambda np_, a, b: a + np_.cumsum(b) * 0.01,
         lambda np_, a, b: np_.where(a > b, a, -b), lambda np_, a, b: a / (1.0 + b * b)]
  for seed in range(3):
    rng = np.random.default_rng(seed)
    start = rng.standard_normal(24).astype(np.float32)
    kept = {}
    for np_ in (tnp, jnp):
      values = [np_.asarray(start)]
      out = []
      for step in range(120):
        op, a, b = rng.integers(len(ops)), rng.integers(len(values)), rng.integers(len(values))
        values.append(ops[op](np_, values[a], values[b]))
        if step % 17 == 0:
          out.append(values[-1])
        if np_ is tnp and step == 60:
          values[-1].block_until_ready()
      kept[np_] = out + values[-3:]
      rng = np.random.default_rng(seed)  # the same program again for JAX
      rng.standard_normal(24)
    # NB: the differences may cancel a value to near zero, where an ulp of its O(1) operands is a large part of it: XLA
    # and tinygrad contract other products into fused multiply-adds (each its own rounding), so the bound is absolute
    assert_like_jax(kept[tnp], kept[jnp], atol=1e-6)


def test_a_cut_flush_run_again_is_one_list_of_launches_with_jaxs_values(monkeypatch):
  """A flush cut into chunks, run again with the same structure, runs its chunks' captured kernels as one list of
  launches (replay.Chained): no chunk's program is run by itself, every run gives JAX's values (the edge values
  among them), and the report counts every chunk's run as the runs before did."""
  def chain(m, x):
    for _ in range(100):  # 300 calls: cut into chunks (pending.CHUNK_COST); products alone, rounded alike everywhere
      x = -(x * 1.25)
      x = x * 0.8
    return x
  data = np.array([0.0, -0.0, 1.0, -2.5, 3e38, -3e38, np.inf, -np.inf, np.nan, 1e-3, 7.0], np.float32)
  expected = chain(jnp, jnp.asarray(data))
  counted = []
  for run in range(4):
    if run == 3:  # NB: by then each chunk's program was replayed by the launcher (twice run), and the chain made
      monkeypatch.setattr(pending, "execute", lambda *args: pytest.fail("a chunk's program ran by itself"))
    report = tinyjax.report()
    before = report.flushes, dict(report.primitives)
    assert_like_jax(chain(tnp, tnp.asarray(data)), expected, rtol=0)
    counted.append((report.flushes - before[0],
                    {k: n - before[1].get(k, 0) for k, n in report.primitives.items() if n != before[1].get(k, 0)}))
  assert counted[1][0] > 1 and counted[1] == counted[2] == counted[3]


def test_a_long_loop_cut_into_chunks_keeps_memory_flat(monkeypatch, heap_of_this_test):
  """An eager loop with a sine in every step, flushed by the buffer bound: each flush cut into chunks (the last left
  pending), whose values are let go once read. Pending calls, Values and device bytes do not accumulate, neither
  between flushes nor during one (a flush of 400 equations runs some 80 chunks here)."""
  from tinygrad.helpers import GlobalCounters
  monkeypatch.setenv("TINYJAX_BUFFER_LIMIT", "400")
  x = tnp.asarray(np.linspace(-1, 1, 4096, dtype=np.float32))
  most_bytes = 0
  execute = pending.execute

  def measured(*args):
    nonlocal most_bytes
    placement = execute(*args)
    most_bytes = max(most_bytes, GlobalCounters.mem_used)
    return placement
  monkeypatch.setattr(pending, "execute", measured)

  def steps(n):
    nonlocal x
    for _ in range(n):
      x = tnp.sin(x) * 0.5 + 0.25
    x.block_until_ready()
  for _ in range(2):  # NB: warm-up: the programs compiled, and the pools of outputs their replays write into filled
    steps(600)
  before = memory_in_use()
  most_bytes = 0
  steps(600)
  assert_flat(before, memory_in_use(), values=2)
  assert most_bytes <= before["device bytes"] + 8 * x.nbytes  # a chunk's inputs and outputs, not a flush's
  expected = jnp.asarray(np.linspace(-1, 1, 4096, dtype=np.float32))
  for _ in range(1_800):
    expected = jnp.sin(expected) * 0.5 + 0.25
  assert_like_jax(x, expected)


def test_a_value_no_tracked_array_holds_survives_a_cut():
  """A pending value held by an Array made for one of JAX's devices (not in the queue) and read inside a chunk is
  not computed by the flush that cuts it: read afterwards, it still computes, from inputs that were kept for it."""
  start = np.linspace(-2, 2, 44, dtype=np.float32)
  y = tnp.asarray(start) * 2
  held = tnp.asarray(y, dtype=np.float16, device=jax.devices()[0])
  z = held.astype(np.float32)
  for _ in range(12):
    z = tnp.sin(z) + 1
  del y
  expected = jnp.asarray(jnp.asarray(start) * 2, dtype=np.float16)
  expected_z = expected.astype(np.float32)
  for _ in range(12):
    expected_z = jnp.sin(expected_z) + 1
  assert_like_jax(z, expected_z)
  assert not held.is_ready()  # computed inside the chunk, never stored
  assert_like_jax(held, expected)


# --- a failed flush

def test_failed_flush_leaves_other_arrays_valid(monkeypatch):
  def broken(ctx, x, **params):
    raise RuntimeError("broken sin rule")
  monkeypatch.setitem(RULES, "sin", broken)
  x = tnp.arange(11.0)  # NB: a shape no other test uses, so no captured (replayed) program skips the rule
  bad_line = sys._getframe().f_lineno + 1
  bad, good, other = tnp.sin(x), x * 2, tnp.cos(x)
  with pytest.raises(RuntimeError, match="broken sin rule") as raised:
    np.asarray(bad)
  assert f"while running sin, called at {__file__}:{bad_line}" in raised.value.__notes__[0]  # the op, the user's line
  assert_like_jax([good, other], [jnp.arange(11.0) * 2, jnp.cos(jnp.arange(11.0))])
  with pytest.raises(RuntimeError, match="broken sin rule"):  # again, with the same error
    np.asarray(bad)
  with pytest.raises(RuntimeError, match="broken sin rule"):
    np.asarray(bad + 1)  # what depends on it fails the same way
  later = x - 1  # the buffer still works
  assert_like_jax(later, jnp.arange(11.0) - 1)
  monkeypatch.undo()
  assert_like_jax(bad, jnp.sin(jnp.arange(11.0)))  # nothing was poisoned: with the rule fixed, it computes


def test_keyboard_interrupt_during_a_flush_loses_nothing(monkeypatch):
  interrupts = iter([KeyboardInterrupt()])

  def interrupted(ctx, x, **params):  # Ctrl-C while tinygrad builds the program: once, then the rule works
    if (interrupt := next(interrupts, None)) is not None:
      raise interrupt
    return x.exp()
  monkeypatch.setitem(RULES, "exp", interrupted)
  x = tnp.arange(13.0)  # NB: a shape no other test uses, so no captured (replayed) program skips the rule
  first, second = tnp.exp(x), x * 3
  with pytest.raises(KeyboardInterrupt):
    tinyjax.flush()
  assert_like_jax([first, second], [jnp.exp(jnp.arange(13.0)), jnp.arange(13.0) * 3])  # both still computable
  assert_like_jax(x + 1, jnp.arange(13.0) + 1)  # and the buffer still works


def test_failed_flush_of_another_array_does_not_fail_the_one_read(monkeypatch):
  def broken(ctx, x, **params):
    raise RuntimeError("broken exp rule")
  monkeypatch.setitem(RULES, "exp", broken)
  x = tnp.arange(13.0)
  bad, good = tnp.exp(x), x * 3  # noqa: F841  (bad is alive and pending when good is read)
  assert_like_jax(good, jnp.arange(13.0) * 3)
  with pytest.raises(RuntimeError, match="broken exp rule"):
    bad.block_until_ready()


def test_flush_with_a_bad_setting_keeps_values_pending(monkeypatch):
  a = tnp.arange(4) + 2
  monkeypatch.setenv("TINYJAX_BACKEND", "bogus")
  with pytest.raises(ValueError, match="TINYJAX_BACKEND"):
    np.asarray(a)
  assert not a.is_ready()
  monkeypatch.delenv("TINYJAX_BACKEND")
  assert_like_jax(a, jnp.arange(4) + 2)
