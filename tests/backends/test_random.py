"""jax.random on tinygrad: the same bits as JAX (threefry2x32), for typed keys (`key<fry>`) and raw uint32 keys,
and the samplers built on them, all native (nothing falls back to XLA)."""
import functools
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import tinyjax
import tinyjax.random
import oracle
from oracle import check, native

SEEDS = [0, -1, 42, 2**31 - 1, -2**31]
KEY_KINDS = ["typed", "raw"]


def random_of(np_):
  return tinyjax.random if np_ is not jnp else jax.random


def make_key(np_, kind, seed=42):
  random = random_of(np_)
  return random.key(seed) if kind == "typed" else random.PRNGKey(seed)


check_traced = functools.partial(oracle.check_traced, jax_jit=True)  # JAX's side traced whole too (jax.jit)


def data_of(np_, keys):
  """Keys as comparable data: a typed key's raw uint32 data (raw keys already are)."""
  random = random_of(np_)
  return random.key_data(keys) if jax.dtypes.issubdtype(keys.dtype, jax.dtypes.extended) else keys


# --- keys

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", KEY_KINDS)
def test_seed(kind, seed):
  # the seed as an array (random_seed runs on data) and as a Python int (a literal in the jaxpr)
  check(lambda np_, s: data_of(np_, make_key(np_, kind, s)), np.int32(seed))
  check(lambda np_: data_of(np_, make_key(np_, kind, seed)))


@pytest.mark.parametrize("shape", [2, 3, (2, 3), (0,)])
@pytest.mark.parametrize("kind", KEY_KINDS)
def test_split(kind, shape):
  check(lambda np_, s: data_of(np_, random_of(np_).split(make_key(np_, kind, s), shape)), np.int32(7))


@pytest.mark.parametrize("kind", KEY_KINDS)
def test_split_unpacked(kind):
  def fn(np_, s):
    first, second = random_of(np_).split(make_key(np_, kind, s))
    return data_of(np_, first), data_of(np_, second), data_of(np_, random_of(np_).split(second, 3)[1])
  check(fn, np.int32(3))


@pytest.mark.parametrize("data", [0, 1, 7, -1, 2**31 - 1])
@pytest.mark.parametrize("kind", KEY_KINDS)
def test_fold_in(kind, data):
  check(lambda np_, s, d: data_of(np_, random_of(np_).fold_in(make_key(np_, kind, s), d)), np.int32(5),
        np.int32(data))


def test_fold_in_batched_keys():
  check_traced(lambda s: jax.random.key_data(jax.vmap(jax.random.fold_in, (0, None))(
    jax.random.split(jax.random.key(s), 3), 9)), np.int32(1))


@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (0, 2), (1, 7, 3)])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
def test_bits(dtype, shape):
  check(lambda np_, s: random_of(np_).bits(make_key(np_, "typed", s), shape, dtype), np.int32(11))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32])
def test_bits_of_a_raw_key(dtype):
  check(lambda np_, s: random_of(np_).bits(make_key(np_, "raw", s), (2, 3), dtype), np.int32(11))


def test_bits_of_a_batch_of_keys():
  bits = jax.vmap(jax.vmap(lambda k: jax.random.bits(k, (4,))))
  check_traced(lambda s: bits(jax.random.split(jax.random.key(s), (2, 3))), np.int32(2))


def test_threefry2x32_primitive():
  from jax.extend.random import threefry_2x32
  keypair = (np.uint32(0x12345678), np.uint32(0x9ABCDEF0))
  count = np.arange(10, dtype=np.uint32) * np.uint32(0x01000193)
  check_traced(lambda k1, k2, c: threefry_2x32((k1, k2), c), *keypair, count)


# --- layout primitives on typed keys

KEY_LAYOUTS = {
  "slice": lambda keys: keys[1:5:2],
  "reshape": lambda keys: keys.reshape(2, 3),
  "transpose": lambda keys: keys.reshape(2, 3).T,
  "broadcast": lambda keys: jnp.broadcast_to(keys[None, :2], (3, 2)),
  "concatenate": lambda keys: jnp.concatenate([keys[:2], keys[4:]]),
  "rev": lambda keys: keys[::-1],
  "squeeze": lambda keys: keys[3],
  "tile": lambda keys: jnp.tile(keys[:2], 2),
  "gather": lambda keys: keys[jnp.array([4, 0, 5])],
  "dynamic_slice": lambda keys: lax.dynamic_slice_in_dim(keys, jnp.int32(3), 2),
  "dynamic_update_slice": lambda keys: lax.dynamic_update_slice_in_dim(keys, keys[:2], jnp.int32(1), 0),
  "unstack": lambda keys: list(keys[:3]),
}


@pytest.mark.parametrize("layout", KEY_LAYOUTS)
def test_key_layouts(layout):
  def fn(s):
    moved = KEY_LAYOUTS[layout](jax.random.split(jax.random.key(s), 6))
    moved = jnp.stack(moved) if isinstance(moved, list) else moved
    return jax.random.key_data(moved), jax.vmap(lambda k: jax.random.bits(k, (2,)))(moved.reshape(-1))
  check_traced(fn, np.int32(4))


# --- samplers

SAMPLERS = {
  "uniform": lambda r, k: r.uniform(k, (3, 4)),
  "uniform_f16": lambda r, k: r.uniform(k, (5,), jnp.float16, -2.0, 3.0),
  "uniform_range": lambda r, k: r.uniform(k, (6,), minval=-1.5, maxval=0.25),
  "normal": lambda r, k: r.normal(k, (4, 3)),
  "randint": lambda r, k: r.randint(k, (8,), 0, 10),
  "randint_wide": lambda r, k: r.randint(k, (8,), -2**31, 2**31 - 1),
  "randint_uint8": lambda r, k: r.randint(k, (8,), 3, 200, jnp.uint8),
  "bernoulli": lambda r, k: r.bernoulli(k, 0.3, (10,)),
  "permutation": lambda r, k: r.permutation(k, 7),
  "permutation_array": lambda r, k: r.permutation(k, jnp.arange(12.0).reshape(4, 3), axis=0),
  "choice": lambda r, k: r.choice(k, 9, (4,)),
  "choice_no_replace": lambda r, k: r.choice(k, 9, (4,), replace=False),
  "choice_p": lambda r, k: r.choice(k, 4, (6,), p=jnp.array([0.1, 0.2, 0.3, 0.4])),
  "categorical": lambda r, k: r.categorical(k, jnp.log(jnp.array([[0.2, 0.5, 0.3], [0.6, 0.3, 0.1]])), axis=-1),
  "truncated_normal": lambda r, k: r.truncated_normal(k, -1.0, 2.0, (5,)),
  "gumbel": lambda r, k: r.gumbel(k, (6,)),
  "exponential": lambda r, k: r.exponential(k, (6,)),
}


@pytest.mark.parametrize("kind,sampler", [("typed", s) for s in SAMPLERS] +
                         [("raw", s) for s in ("uniform", "normal", "randint", "permutation")])
def test_sampler(kind, sampler):
  check_traced(lambda s: SAMPLERS[sampler](jax.random, make_key(jnp, kind, s)), np.int32(13))


@pytest.mark.parametrize("kind", KEY_KINDS)
def test_mirror_samplers(kind):
  # the same through tinyjax.random's own functions, key made lazily on tinygrad
  check(lambda np_, s: (random_of(np_).uniform(make_key(np_, kind, s), (4,)),
                        random_of(np_).normal(make_key(np_, kind, s), (2, 2)),
                        random_of(np_).randint(make_key(np_, kind, s), (3,), 0, 5)), np.int32(21))


# --- keys through control flow

def test_keys_through_scan_and_cond():
  def draws(key):
    def step(key, _):
      key, sub = jax.random.split(key)
      return key, jax.random.uniform(sub, (2,))
    key, samples = lax.scan(step, key, None, length=4)
    chosen = lax.cond(samples.sum() > 4.0, lambda k: jax.random.split(k)[0], lambda k: k, key)
    return jax.random.key_data(chosen), samples
  check_traced(lambda s: draws(jax.random.key(s)), np.int32(8))


def test_keys_through_fori_loop():
  def walk(seed, n):
    return jax.random.key_data(lax.fori_loop(0, n, lambda i, k: jax.random.fold_in(k, i), jax.random.key(seed)))
  check_traced(walk, np.int32(3), np.int32(5))


def test_closed_over_key():
  key = jax.random.key(99)  # a constant of the traced jaxpr
  check_traced(lambda x: x + jax.random.uniform(key, (3,)), np.ones(3, np.float32))


def test_other_implementations_run_on_xla():
  # only threefry keys are computed natively; rbg keys (XLA's RngBitGenerator) fall back, with JAX's results
  with pytest.raises(tinyjax.FallbackError), native():
    tinyjax.random.key(0, impl="rbg")
  check(lambda np_, s: random_of(np_).uniform(random_of(np_).key(s, impl="rbg"), (3,)), np.int32(5),
        native_only=False)


@pytest.mark.parametrize("partitionable", [False, True])
def test_threefry_scheme_of_the_moment(partitionable):
  """Under jax.threefry_partitionable(False), the legacy scheme JAX draws by then, eager calls and jitted ones (a
  split, samples, keys through a scan) give JAX's bits, also after the same calls ran under the other scheme, and
  read after the block (a flush outside it); calls that draw under the legacy scheme run as JAX's eager calls."""
  def draws(key):
    key, sub = jax.random.split(key)
    _, samples = lax.scan(lambda k, _: (jax.random.split(k)[0], jax.random.uniform(k, (2,))), sub, None, length=3)
    return jax.random.key_data(key), samples, jax.random.normal(key, (5,))
  tkey, key = tinyjax.random.key(7), jax.random.key(7)
  jitted = tinyjax.jit(draws)
  with jax.threefry_partitionable(not partitionable):  # the same calls, cached under the other scheme first
    for _ in range(2):
      tinyjax.random.normal(tkey, (5,)), jitted(tkey)
  eager_before = tinyjax.report().eager.total()
  with jax.threefry_partitionable(partitionable):
    ours = [tinyjax.random.normal(tkey, (5,)), tinyjax.random.key_data(tinyjax.random.split(tkey, 3))] + \
        [jitted(tkey) for _ in range(2)]
    theirs = [jax.random.normal(key, (5,)), jax.random.key_data(jax.random.split(key, 3))] + \
        [jax.jit(draws)(key) for _ in range(2)]
  for a, e in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(e))  # read here, after the block
  assert (tinyjax.report().eager.total() > eager_before) == (not partitionable)


# --- 64 bits

@pytest.mark.float64
def test_x64_in_a_subprocess():
  """64-bit seeds and bits need jax_enable_x64, which is global: checked in a process of their own."""
  code = textwrap.dedent("""
    import sys
    sys.path.insert(0, "tests")
    import jax, jax.numpy as jnp, numpy as np
    import tinyjax.random
    from oracle import check
    for seed in (np.int64(2**40 + 5), np.int64(-2**40), np.int64(2**63 - 1), np.uint64(2**64 - 1), np.int8(-3)):
      check(lambda np_, s: (tinyjax.random if np_ is not jnp else jax.random).key_data(
        (tinyjax.random if np_ is not jnp else jax.random).key(s)), seed)
    for dtype in (np.uint64, np.uint32, np.uint8):
      check(lambda np_, s: (tinyjax.random if np_ is not jnp else jax.random).bits(
        (tinyjax.random if np_ is not jnp else jax.random).key(s), (3, 5), dtype), np.int64(9))
    check(lambda np_, s: (tinyjax.random if np_ is not jnp else jax.random).uniform(
      (tinyjax.random if np_ is not jnp else jax.random).key(s), (4,), jnp.float64), np.int64(9))
    print("x64 ok")
    """)
  env = dict(os.environ, JAX_ENABLE_X64="1", TINYJAX_FALLBACK="error")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
  assert result.returncode == 0 and "x64 ok" in result.stdout, result.stdout[-1000:] + result.stderr[-3000:]
