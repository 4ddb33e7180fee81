"""pmap and shard_map under patch mode against JAX on a mesh of its CPU devices (conftest asks JAX for 8): the body runs
on tinygrad over the shards side by side (tinyjax/ir/spmd.py), every equation native, with JAX's shapes, dtypes,
weak types and values, edge values included."""
import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn
from jax import lax
from jax._src import api as jax_api  # NB: pmap's device_put_replicated, which JAX's tests call
from jax.sharding import AxisType, PartitionSpec as P

import tinyjax
from oracle import assert_like_jax, on_tinygrad
from tinyjax.choosing.selection import current_backend


def _mesh(shape, names):
  return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape))


LINE = _mesh((4,), ("i",))
GRID = _mesh((2, 4), ("x", "y"))
EDGES = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -3.5, 3e38], np.float32)
X = np.arange(32, dtype=np.float32).reshape(8, 4) - 9.5
WIDE = np.arange(128, dtype=np.float32).reshape(16, 8) / 7
INTS = (np.arange(32, dtype=np.int32).reshape(8, 4) - 5) * 2**27  # sums that wrap around


def smap(body, mesh, in_specs, out_specs, **options):
  return jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, **options)


def ring(n, shift=1):
  return [(j, (j + shift) % n) for j in range(n)]


# each case makes its function and arguments
CASES = {
  "pmap psum of sin": lambda: (jax.pmap(lambda v: lax.psum(jnp.sin(v) * 2, "i"), axis_name="i"), X[:4]),
  "pmap pmean, axis_index": lambda: (jax.pmap(lambda v: lax.pmean(v, "i") + lax.axis_index("i"), axis_name="i"), X[:4]),
  "pmap ppermute ring": lambda: (jax.pmap(lambda v: lax.ppermute(v, "i", ring(4)), axis_name="i"), X[:4]),
  "pmap all_gather": lambda: (jax.pmap(lambda v: lax.all_gather(v, "i"), axis_name="i"), X[:4]),
  "pmap of a closed-over constant": lambda: (jax.pmap(lambda v: v * jnp.linspace(-1.5, 2.5, 4), axis_name="i"), X[:4]),
  "pmap of edge values": lambda: (jax.pmap(lambda v: (lax.psum(v, "i"), lax.pmax(v, "i"), lax.pmin(v, "i")), axis_name="i"),
                          EDGES.reshape(4, 2)),
  "psum wraps int32": lambda: (smap(lambda v: lax.psum(v, "i"), LINE, P("i"), P()), INTS),
  "psum": lambda: (smap(lambda v: lax.psum(v, "i"), LINE, P("i"), P()), X),
  "pmax": lambda: (smap(lambda v: lax.pmax(v, "i"), LINE, P("i"), P()), X),
  "psum over a local axis too": lambda: (smap(lambda v: lax.psum(v, ("i", 0)), LINE, P("i"), P(), check_vma=False), X),
  "split along the second dimension": lambda: (smap(lambda v: lax.psum(v, "i"), LINE, P(None, "i"), P(None)), X),
  "replicated input": lambda: (smap(lambda v: v * (lax.axis_index("i") + 1), LINE, P(), P("i")), X),
  "all_gather": lambda: (smap(lambda v: lax.all_gather(v, "i"), LINE, P("i"), P("i")), X),
  "all_gather tiled on axis 1": lambda: (smap(lambda v: lax.all_gather(v, "i", axis=1, tiled=True), LINE, P("i"), P("i")), X),
  "ppermute partial": lambda: (smap(lambda v: lax.ppermute(v, "i", [(0, 1), (1, 2), (2, 3)]), LINE, P("i"), P("i")), X),
  "psum_scatter tiled": lambda: (smap(lambda v: lax.psum_scatter(v, "i", tiled=True), LINE, P(None), P("i")), X),
  "psum_scatter": lambda: (smap(lambda v: lax.psum_scatter(v[:4], "i"), LINE, P("i"), P("i")), WIDE),
  "all_to_all": lambda: (smap(lambda v: lax.all_to_all(v, "i", 0, 1, tiled=True), LINE, P("i"), P("i")), WIDE),
  "all_to_all on one axis": lambda: (smap(lambda v: lax.all_to_all(v, "i", 1, 1, tiled=True), LINE, P("i"), P("i")), WIDE),
  "grid: psum over x": lambda: (smap(lambda v: lax.psum(v, "x"), GRID, P("x", "y"), P(None, "y")), X),
  "grid: psum over both": lambda: (smap(lambda v: lax.psum(v, ("x", "y")), GRID, P("x", "y"), P()), X),
  "grid: both axes on one dimension": lambda: (smap(lambda v: v * 2 + lax.axis_index("y"), GRID, P(("x", "y")),
                                            P(("x", "y"))), X),
  "grid: all_gather over y": lambda: (smap(lambda v: lax.all_gather(v, "y", tiled=True), GRID, P("y", "x"), P(None, "x"),
                                   check_vma=False), X),
  "grid: ppermute over y": lambda: (smap(lambda v: lax.ppermute(v, "y", ring(4)), GRID, P("x", "y"), P("x", "y")), X),
  "jit of shard_map": lambda: (jax.jit(smap(lambda v: lax.psum(jnp.exp(v / 10), "i"), LINE, P("i"), P())), X),
  "jit inside the body": lambda: (smap(jax.jit(lambda v: lax.pmean(v, "i")), LINE, P("i"), P()), X),
  "scan inside the body": lambda: (smap(lambda v: lax.scan(lambda c, r: (c + r, c), jnp.zeros(4), v)[0], LINE, P("i"), P("i"),
                                check_vma=False), X),
  "grad through shard_map": lambda: (jax.grad(lambda w: smap(lambda v: lax.pmean(jnp.sum(jnp.exp(v * w)), "i"), LINE,
                                                     P("i"), P())(jnp.asarray(X))), np.float32(0.03)),
  "vmap of shard_map": lambda: (jax.vmap(smap(lambda v: lax.psum(v, "i"), LINE, P("i"), P())), WIDE.reshape(2, 8, 8)),
  "shard_map of vmap": lambda: (smap(jax.vmap(lambda r: lax.psum(r, "i")), LINE, P(None, "i"), P(None)), X),
  # a body manual over x only, its y auto: a constraint of the value's place on y, then work
  "grid: x manual, a constraint on y": lambda: (jax.jit(smap(
    lambda v: lax.with_sharding_constraint(v, P(None, "y")) * v, GRID, P("x", None),
    P("x", None), axis_names=frozenset({"x"}))), WIDE),
  "pmap of expm (a solve in a cond)": lambda: (jax.pmap(jax.scipy.linalg.expm), X.reshape(2, 4, 4) / 40),
}


@pytest.mark.parametrize("name", CASES)
def test_like_jax_on_tinygrad(name):
  fn, *args = CASES[name]()  # NB: made again under patch mode, where JAX's jit and pmap make tinyjax's
  expected = fn(*args)
  with tinyjax.patch(), on_tinygrad():
    fn, *args = CASES[name]()
    actual = fn(*args)
  assert_like_jax(actual, expected)


# --- Arrays placed on a mesh of explicit axes: their types hold the sharding, as JAX's do

EXPLICIT = jax.make_mesh((4,), ("d",))


def _placed_programs():
  """What a user does with arrays placed on a mesh, each step's results and types."""
  x = jax.device_put(X, jax.NamedSharding(EXPLICIT, P("d")))
  total = smap(lambda v: lax.psum(v * 2, "d"), EXPLICIT, P("d"), P())
  jitted = jax.jit(lambda a: jnp.tanh(a) * 2 + 1)(x)
  with jax.set_mesh(EXPLICIT):
    y = jax.device_put(X, P(None, "d"))
    reduced = jnp.sum(y * y, axis=0)
  return {"placed": x, "jit of shard_map": jax.jit(total)(x), "shard_map": total(x), "jit": jitted,
          "eager": x * 3 - 1, "placed under set_mesh": y, "eager under set_mesh": reduced}


def test_arrays_placed_on_a_mesh_like_jax():
  expected = _placed_programs()
  with tinyjax.patch(), on_tinygrad():
    actual = _placed_programs()
  assert_like_jax(actual, expected)
  for name, value in expected.items():
    assert jax.typeof(actual[name]) == jax.typeof(value), name
    # NB: P() and P(None, None) are one sharding (JAX's eager shard_map names its out_specs; its type the latter)
    assert actual[name].sharding.is_equivalent_to(value.sharding, value.ndim), name
    assert (actual[name].committed, actual[name].is_fully_replicated) == (value.committed,
                                                                          value.is_fully_replicated), name
    np.testing.assert_allclose(actual[name].addressable_data(1), value.addressable_data(1), rtol=1e-6, err_msg=name)
    assert np.shape(actual[name].addressable_data(1)) == value.addressable_data(1).shape, name
  placed, expected_placed = actual["placed"], expected["placed"]
  assert placed.devices() == expected_placed.devices() and not placed.is_fully_replicated
  assert [(s.device, s.index) for s in placed.addressable_shards] == [(s.device, s.index)
                                                                      for s in expected_placed.addressable_shards]
  np.testing.assert_array_equal(placed.addressable_shards[1].data, expected_placed.addressable_shards[1].data)


def _partial_programs():
  """Arrays whose shards are parts of a sum (unreduced) or each the whole (reduced): JAX's shard_map tests and its
  parallel page. Their calls are JAX's own (the report's "run by JAX itself"); the rest stays tinyjax's."""
  grid = jax.make_mesh((4, 2), ("X", "Y"), axis_types=(AxisType.Explicit,) * 2)
  with jax.set_mesh(EXPLICIT):
    made = jnp.arange(8.)  # made under set_mesh: on its devices, replicated, committed
    unreduced = jax.reshard(made, P(unreduced={"d"}))
    scattered = smap(lambda v: lax.psum_scatter(v, "d", tiled=True), EXPLICIT, P(unreduced={"d"}), P("d"))
    gradient = jax.grad(lambda v: scattered(v).sum())(unreduced)
    out = {"made": made, "unreduced": unreduced, "scattered": scattered(unreduced), "gradient": gradient,
           "after": scattered(unreduced) * 2}
  with jax.set_mesh(grid):
    out["placed unreduced"] = jax.device_put(jnp.asarray(X), P("X", None, unreduced={"Y"}))
  return out


def test_partial_sums_over_a_mesh_are_jaxs():
  expected = _partial_programs()
  before = tinyjax.report().eager.copy()
  with tinyjax.patch(), on_tinygrad():
    actual = _partial_programs()
  for name, value in expected.items():
    assert jax.typeof(actual[name]) == jax.typeof(value), name
    assert actual[name].sharding == value.sharding, name
    assert actual[name].committed == value.committed, name
    for ours, theirs in zip(actual[name].addressable_shards, value.addressable_shards, strict=True):
      assert ours.device == theirs.device, name  # NB: JAX has no index for a shard of an unreduced array
      np.testing.assert_array_equal(ours.data, theirs.data, err_msg=name)
  assert tinyjax.report().eager - before, "the calls on unreduced values are not in the report as JAX's"
  assert_like_jax(actual["after"], expected["after"])  # a plain result again: tinyjax's


def _as_jaxs_tests_use_them():
  """What JAX's shard_map and pmap tests do beyond a user's programs: typed keys placed on a mesh, JAX's eager
  shard_map (its argmax's parameters NumPy integers; a mesh axis of size 1), a body with no batching rule."""
  one_by_four = _mesh((1, 4), ("a", "b"))
  keys = jax.device_put(jax.random.split(jax.random.key(0), 8), jax.NamedSharding(EXPLICIT, P("d")))
  with jax.set_mesh(EXPLICIT):
    key_blocks = jax.shard_map(lambda k: k, in_specs=P("d"), out_specs=P("d"))(keys)
  callback = jax.shard_map(lambda v: jax.pure_callback(np.sin, jax.ShapeDtypeStruct(v.shape, v.dtype), v) * 2,
                           mesh=LINE, in_specs=P("i"), out_specs=P("i"))
  return {"keys": keys, "keys' blocks": key_blocks,
          "eager argmax": jax.shard_map(lambda v: v.argmax(axis=-1, keepdims=True), mesh=GRID, in_specs=P("x", "y"),
                                        out_specs=P("x", "y"))(WIDE),
          "an axis of size 1": jax.shard_map(lambda v: v * v + 2, mesh=one_by_four, in_specs=P("a", "b"),
                                             out_specs=P("a", "b"))(X),
          "jit's out_shardings": jax.jit(lambda v: v * 2, out_shardings=jax.NamedSharding(one_by_four, P("a", "b")))(X),
          "pure_callback in a body": callback(X)}


def test_arrays_like_jaxs_in_its_own_tests():
  expected = _as_jaxs_tests_use_them()
  key_made_by_jax = jax.random.key(3)
  def data(results):
    return {name: jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
            for name, x in results.items()}
  with tinyjax.patch():
    actual = _as_jaxs_tests_use_them()
    placed_key = jax.device_put(key_made_by_jax, jax.NamedSharding(EXPLICIT, P()))
    actual_data = data(actual)
    # pmap's own placement (no longer in JAX's namespace), whose conversions are tinyjax's: JAX's array
    replicated = jax_api.device_put_replicated(1, jax.devices()[:2])
    # arrays put on JAX's devices are committed there, as JAX's: assembled with no transfer JAX's guard refuses
    on_devices = [jax.device_put(np.int32(i), d) for i, d in enumerate(jax.devices()[:4])]
    with jax.transfer_guard("disallow_explicit"):
      sharded = jax_api.device_put_sharded(on_devices, jax.devices()[:4])
  expected_replicated = jax_api.device_put_replicated(1, jax.devices()[:2])
  assert replicated.sharding == expected_replicated.sharding
  np.testing.assert_array_equal(replicated, expected_replicated)
  assert [(x.sharding, x.committed) for x in on_devices] == [(jax.sharding.SingleDeviceSharding(d), True)
                                                               for d in jax.devices()[:4]]
  np.testing.assert_array_equal(sharded, np.arange(4, dtype=np.int32))
  assert_like_jax(actual_data, data(expected))
  for name, value in expected.items():
    assert actual[name].sharding == value.sharding, name
  np.testing.assert_array_equal(jax.random.key_data(placed_key), jax.random.key_data(key_made_by_jax))
  assert placed_key.sharding == jax.NamedSharding(EXPLICIT, P())


AUTO = _mesh((4, 2), ("X", "Y"))


def _auto_mesh_programs():
  """JAX's parallel page: arrays placed on a mesh of Auto axes, where XLA's propagation places the results."""
  with jax.set_mesh(AUTO):
    x = jax.device_put(X, P(None, "X"))
    y = jax.device_put(X.T, P("X", None))
    line = jax.device_put(X[:, 0], P("X"))

    @jax.jit
    def constrained(a, b):
      return jax.lax.with_sharding_constraint(jnp.dot(a, b), P("X", None))
    return {"eager sin": jnp.sin(line), "jit": jax.jit(lambda a: a * 2 + 1)(line), "dot": jnp.dot(x, y),
            "constrained": constrained(x, y), "reduced": jnp.sum(x, axis=1)}


def test_arrays_on_an_auto_mesh_are_placed_as_jax_places_them():
  expected = _auto_mesh_programs()
  with tinyjax.patch(), on_tinygrad():
    actual = _auto_mesh_programs()
  assert_like_jax(actual, expected, rtol=1e-6)
  for name, value in expected.items():
    assert actual[name].sharding.is_equivalent_to(value.sharding, value.ndim), (name, actual[name].sharding)


def _pmapped(steps=3):
  """pmap's results, called again on its own results: placed on its mesh, one shard per device, as JAX places them."""
  step = jax.pmap(lambda v: jnp.sin(v) * 2 + lax.psum(v, "i"), axis_name="i")
  out = [step(X[:4])]
  for _ in range(steps - 1):
    out.append(step(out[-1]))
  return out


def test_pmap_results_are_placed_like_jaxs():
  expected = _pmapped()
  with tinyjax.patch(), on_tinygrad():
    actual = _pmapped()
  assert_like_jax(actual, expected, rtol=1e-6)
  for ours, theirs in zip(actual, expected):
    assert ours.sharding.is_equivalent_to(theirs.sharding, theirs.ndim), ours.sharding
    assert (ours.devices(), ours.committed, ours.is_fully_replicated) == (theirs.devices(), theirs.committed,
                                                                           theirs.is_fully_replicated)
    assert [(s.device, s.index) for s in ours.addressable_shards] == [(s.device, s.index)
                                                                      for s in theirs.addressable_shards]


def _pmap_of_computed_inputs():
  """pmap of inputs computed just before the call (pending there: tinyjax computes them first, as JAX does)."""
  step = jax.pmap(lambda v: jnp.cos(v) - lax.pmax(v, "i"), axis_name="i")
  first = step(jnp.asarray(EDGES.reshape(4, 2)) * 3)
  return [first, step(first + 1)]


def test_pmap_of_computed_inputs_runs_split_like_jax():
  ran, device_set = _ran_like_jax(_pmap_of_computed_inputs, _pmap_of_computed_inputs())
  # the two steps, and `first + 1` on the first step's split result
  assert dict(ran.choices) == ({f"split over {device_set}": 3} if device_set else {}), str(ran)


def _printed_blocks():
  """JAX's shard_map page: an eager shard_map's body prints its value's block on each device."""
  @jax.shard_map(mesh=EXPLICIT, in_specs=P("d"), out_specs=P("d"))
  def doubled(v):
    print(v)
    return 2 * v
  x = jax.device_put(X[:, 0], jax.NamedSharding(EXPLICIT, P("d")))
  return doubled(x), [jax.typeof(row) for row in x]


def test_an_eager_shard_map_prints_each_block_like_jax(capsys):
  expected, expected_rows = _printed_blocks()
  printed = capsys.readouterr().out
  with tinyjax.patch():
    actual, rows = _printed_blocks()
  assert capsys.readouterr().out == printed
  assert_like_jax(actual, expected)
  assert rows == expected_rows  # a row's type drops the first axis and its place on the mesh


# --- data-parallel training: the batch split over the mesh, the parameters replicated

def _train(parallel: str, devices: int = 4, steps=3, jit=None, device_put=None):
  """Losses of a flax MLP trained with optax's adam, data-parallel: `jit` over a batch placed with
  NamedSharding(mesh, P("data", None)), or `pmap` with the gradients' pmean. `jit` and `device_put`: tinyjax's (the
  explicit API), or JAX's as they are at the call (patched or not)."""
  jit, device_put = jit or jax.jit, device_put or jax.device_put
  class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
      return nn.Dense(1)(nn.relu(nn.Dense(16)(x)))

  model, opt = MLP(), optax.adam(1e-2)
  xs = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
  ys = np.sin(xs).sum(1, keepdims=True)

  def loss_and_grads(params, x, y):
    return jax.value_and_grad(lambda p: jnp.mean((model.apply(p, x) - y) ** 2))(params)

  params = model.init(jax.random.key(0), xs[:1])
  state = opt.init(params)
  losses = []
  if parallel == "jit":
    mesh = jax.make_mesh((devices,), ("data",))
    batch = jax.NamedSharding(mesh, P("data", None))
    params, state = device_put((params, state), jax.NamedSharding(mesh, P()))

    @jit
    def step(params, state, x, y):
      loss, grads = loss_and_grads(params, x, y)
      updates, state = opt.update(grads, state, params)
      return optax.apply_updates(params, updates), state, loss
    for _ in range(steps):
      params, state, loss = step(params, state, device_put(xs, batch), device_put(ys, batch))
      losses.append(loss)
  else:
    @functools.partial(jax.pmap, axis_name="data")
    def step(params, state, x, y):
      loss, grads = lax.pmean(loss_and_grads(params, x, y), "data")
      updates, state = opt.update(grads, state, params)
      return optax.apply_updates(params, updates), state, loss
    params, state = jax.tree.map(lambda leaf: jnp.stack([leaf] * devices), (params, state))
    for _ in range(steps):
      params, state, loss = step(params, state, xs.reshape(devices, -1, 8), ys.reshape(devices, -1, 1))
      losses.append(loss)
  return losses


def _device_set(n: int) -> str | None:
  """tinygrad's names of n instances of the device kind the tests run on ("CPU,CPU:1,CPU:2,CPU:3"), if tinygrad opens
  that many in this process (CPU and WEBGPU do; CL as many devices as OpenCL lists); else None."""
  from tinygrad import Device
  kind = current_backend().kind
  try:
    for i in range(n):
      Device[f"{kind}:{i}"]
  except Exception:  # noqa: BLE001  (each runtime refuses a missing instance its own way)
    return None
  return ",".join([kind, *(f"{kind}:{i}" for i in range(1, n))])


def _ran_like_jax(fn, expected, patched=True, devices=4, rtol=None):
  """The report of fn()'s run on tinygrad (under patch mode, or as it is), once its results were found like
  `expected`, and tinygrad's names of `devices` instances of the device (None where it does not open them)."""
  out = []
  with tinyjax.patch() if patched else contextlib.nullcontext(), on_tinygrad():
    report = tinyjax.explain(lambda: out.append(fn()))()
  assert_like_jax(out[0], expected, rtol=rtol)
  return report, _device_set(devices)


@pytest.mark.parametrize("parallel, devices", [("jit", 4), ("jit", 2), ("pmap", 4)])
def test_data_parallel_training_like_jax(parallel, devices):
  ran, device_set = _ran_like_jax(lambda: _train(parallel, devices), _train(parallel, devices), devices=devices,
                                  rtol=1e-5)
  # each step ran split over the instances of the device, its batch split, where the device has them
  assert dict(ran.choices) == ({f"split over {device_set}": 3} if device_set else {}), str(ran)


def test_data_parallel_training_with_the_explicit_api_like_jax():
  ran, device_set = _ran_like_jax(lambda: _train("jit", jit=tinyjax.jit, device_put=tinyjax.device_put), _train("jit"),
                                  patched=False, rtol=1e-5)
  assert dict(ran.choices) == ({f"split over {device_set}": 3} if device_set else {}), str(ran)


DATA_PARALLEL_SCRIPT = """
import sys
import jax, jax.numpy as jnp, numpy as np, optax
from flax import linen as nn
from jax.sharding import NamedSharding, PartitionSpec as P

class MLP(nn.Module):
  @nn.compact
  def __call__(self, x):
    return nn.Dense(1)(nn.relu(nn.Dense(16)(x)))

model, opt = MLP(), optax.sgd(0.05)
xs = np.random.default_rng(1).standard_normal((32, 8)).astype(np.float32)
ys = np.cos(xs).sum(1, keepdims=True)
mesh = jax.make_mesh((4,), ("data",))
params = model.init(jax.random.key(1), xs[:1])
params, state = jax.device_put((params, opt.init(params)), NamedSharding(mesh, P()))

@jax.jit
def step(params, state, x, y):
  loss, grads = jax.value_and_grad(lambda p: jnp.mean((model.apply(p, x) - y) ** 2))(params)
  updates, state = opt.update(grads, state, params)
  return optax.apply_updates(params, updates), state, loss

losses = []
for _ in range(3):
  params, state, loss = step(params, state, jax.device_put(xs, NamedSharding(mesh, P("data"))), ys)
  losses.append(float(loss))
print(repr(losses))
"""


def test_a_data_parallel_script_under_tinyjax_run_like_jax(tmp_path):
  """A plain JAX script (a flax MLP trained data-parallel on a mesh of 4 of JAX's CPU devices) under `tinyjax run
  --report` with TINYJAX_FALLBACK=error: JAX's losses, every equation on tinygrad, each step split."""
  import ast
  import os
  import subprocess
  import sys
  script = tmp_path / "train.py"
  script.write_text(DATA_PARALLEL_SCRIPT)
  env = {**os.environ, "JAX_NUM_CPU_DEVICES": "4", "TINYJAX_FALLBACK": "error"}
  jax_run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
  device = current_backend().device.name
  ours = subprocess.run([sys.executable, "-m", "tinyjax.cli.main", "run", "--device", device, "--report", str(script)],
                        env=env, capture_output=True, text=True, timeout=600)
  assert jax_run.returncode == 0 and ours.returncode == 0, ours.stderr[-3000:]
  np.testing.assert_allclose(ast.literal_eval(ours.stdout), ast.literal_eval(jax_run.stdout), rtol=1e-5)
  assert "equation runs native (100.0%)" in ours.stderr, ours.stderr
  device_set = _device_set(4)
  if device_set:
    assert f"split over {device_set}: 3 runs" in ours.stderr, ours.stderr


def _split_programs():
  """Work on arrays split over a mesh's devices that tinygrad 0.14's multi-device Tensors cannot split (a pad and a
  cumulative sum along the split axis, a gather of rows from across the blocks), and work they can, edge values in
  the blocks."""
  edges = np.where(np.abs(EDGES) == np.float32(1e-45), np.float32(2.5), EDGES)  # NB: XLA flushes denormals
  x = jax.device_put(edges.reshape(4, 2) * np.float32([[1], [-2], [3], [0.5]]), jax.NamedSharding(LINE, P("i")))
  ints = jax.device_put(INTS[:4], jax.NamedSharding(LINE, P("i")))
  # NB: a 16-bit float the device's compiler lacks (bfloat16 under clang before 17): split by an emulated kernel
  halves = jax.device_put(X[:4].astype(jnp.bfloat16), jax.NamedSharding(LINE, P("i")))
  programs = {"bfloat16": lambda: halves * 3, "padded": lambda: jnp.pad(x, ((1, 1), (0, 0))),
              "cumsum": lambda: jnp.cumsum(x, axis=0), "rows across blocks": lambda: x[jnp.array([3, 0, -1, 7])],
              "sum": lambda: x.sum(0),
              "ints wrap": lambda: ints.sum(0), "elementwise": lambda: jnp.sin(x) * 2, "product": lambda: x @ x.T}
  return {name: jax.block_until_ready(program()) for name, program in programs.items()}  # one program each


def test_what_tinygrad_cannot_split_runs_gathered_like_jax():
  ran, device_set = _ran_like_jax(_split_programs, _split_programs())
  if device_set is None:
    assert not ran.choices
    return
  ways = {reason.partition(" (")[0] for reason in ran.choices}
  assert ways == {f"split over {device_set}", f"gathered on {device_set.partition(',')[0]} from {device_set}"}, str(ran)


def _unsplit_programs():
  """Arrays on a mesh of 4 devices that tinygrad 0.14 cannot split as JAX does (two dimensions split, one split over
  2 of the 4 devices), and work on them and on a split array together, edge values included."""
  square = _mesh((2, 2), ("a", "b"))
  two_d = jax.device_put(X[:4], jax.NamedSharding(square, P("a", "b")))
  half = jax.device_put(EDGES.reshape(2, 4), jax.NamedSharding(square, P("a")))
  split = jax.device_put(X[:4], jax.NamedSharding(square, P(("a", "b"))))
  return {"two dimensions": jax.block_until_ready(jnp.sin(two_d) * 2 + split),
          "half": jax.block_until_ready((half * 3).sum(0))}


def test_what_tinygrad_cannot_split_is_placed_whole_like_jax():
  ran, device_set = _ran_like_jax(_unsplit_programs, _unsplit_programs())
  if device_set is None:
    assert not ran.copies
    return
  whys = {"P('a', 'b') splits 2 dimensions", "P('a',) splits over 2 of the mesh's 4 devices"}
  assert dict(ran.copies) == {f"placed whole on each of {device_set}, not split ({why}; tinygrad splits one "
                              "dimension evenly over all the devices)": 1 for why in whys}, str(ran)


def _gathered_calls():
  """A jitted shard_map whose result is its split input gathered (a view of it, to tinygrad), called on new inputs:
  from the third call on, a split program is replayed by TinyJit."""
  f = jax.jit(smap(lambda v: lax.all_gather(v, "i", tiled=True, to="invarying"), LINE, P("i"), P()))
  return [f(X[:, 0] * k) for k in (1.0, -2.0, 0.5, 3.0)]


def test_a_replayed_split_program_reads_its_new_inputs():
  ran, device_set = _ran_like_jax(_gathered_calls, _gathered_calls())
  assert dict(ran.choices) == ({f"split over {device_set}": 4} if device_set else {}), str(ran)


def test_split_can_be_turned_off():
  tinyjax.config.update("split", "0")
  ran, _ = _ran_like_jax(_split_programs, _split_programs())
  assert not ran.choices


def _lowerings_of_a_second_backward():
  """JAX's lowerings (jit and pmap) while a pmap's vjp is taken again and both backward functions are called, after
  one warm-up: JAX's caches see one program (its pmap_test's test_grad_of_pmap_compilation_caching)."""
  from jax._src import test_util as jtu
  f = jax.pmap(jnp.sin)
  x = jnp.ones(2)
  _, backward = jax.vjp(f, x)
  backward(x)
  with jtu.count_jit_and_pmap_lowerings() as count:
    _, again = jax.vjp(f, x)
    results = [backward(x), again(x)]
  return count(), results


def test_a_second_backward_lowers_nothing_as_in_jax():
  lowerings, expected = _lowerings_of_a_second_backward()
  with tinyjax.patch(), on_tinygrad():
    ours, actual = _lowerings_of_a_second_backward()
  assert (ours, lowerings) == (0, 0)
  assert_like_jax(actual, expected)
