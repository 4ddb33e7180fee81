"""Reductions (reduce_*, argmax, argmin) and cumulative ops (cum*) on tinygrad, against JAX on XLA: every dtype each
primitive takes, 0-d operands, size-1 and empty axes, and the edge values (NaN, +-inf, -0.0, INT_MIN/INT_MAX)."""
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from oracle import check, check_lax
from tinyjax.core.mirror import wrap
from xfail import param

FLOATS = [np.float32, np.float16]
INTS = [np.int8, np.int32, np.uint8, np.uint32]
NUMBERS = FLOATS + INTS
BITS = INTS + [np.bool_]
ALL = NUMBERS + [np.bool_]


def edges(dtype):
  """A (3, 4) array of edge values: a row with NaN, a row mixing +-0.0 and inf, a row of -0.0 (floats)."""
  if dtype == np.bool_:
    return np.array([[True, False, True, True], [False] * 4, [True] * 4])
  if np.issubdtype(dtype, np.integer):
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    return np.array([[low, high, 0, high // 2], [1, 2, 3, high], [low, low, 5, 7]], dtype)
  nan, inf = np.nan, np.inf
  return np.array([[nan, 1, -inf, nan], [0.0, -0.0, inf, -2.5], [-0.0, -0.0, -0.0, -0.0]], dtype)


def sample(shape, dtype, seed=0):
  """Values with ties: small floats including +-0.0; ints over the whole range with both extremes."""
  rng = np.random.default_rng(seed)
  if dtype == np.bool_:
    return rng.random(shape) < 0.5
  if np.issubdtype(dtype, np.integer):
    info = np.iinfo(dtype)
    values = np.asarray(rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype))
    values.flat[:2] = [info.min, info.max][:values.size]
    return values
  return rng.choice([-2.0, -1.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 1.5, 3.0], shape).astype(dtype)


def check_traced(fn, *args, **kwargs):
  """fn (a function of lax calls) on JAX, and traced whole by tinyjax, where nothing may fall back."""
  return check(lambda np_, *xs: fn(*xs) if np_ is jnp else wrap(fn)(*xs), *args, **kwargs)


def name(dtype):
  return np.dtype(dtype).name


# --- reductions over axes: one check per (primitive, dtype, shape) covers that shape's axes

REDUCE_CASES = {  # id: (operand, the axes to reduce)
  "0-d": (lambda dtype: sample((), dtype), [()]),
  "vector": (lambda dtype: sample((7,), dtype), [(0,), ()]),
  "edges": (edges, [(0,), (1,), (0, 1)]),
  "size-1 axis": (lambda dtype: sample((2, 1, 3), dtype, seed=1), [(1,), (0, 2), (0, 1, 2)]),
  "empty": (lambda dtype: sample((3, 0), dtype), [(0,), (1,), (0, 1)]),
}
REDUCE_DTYPES = {"reduce_sum": NUMBERS, "reduce_prod": NUMBERS, "reduce_max": ALL, "reduce_min": ALL,
                 "reduce_and": BITS, "reduce_or": BITS, "reduce_xor": BITS}


def _reduce(prim, x, axes):
  return getattr(lax, prim + "_p").bind(x, axes=axes, **({"out_sharding": None} if prim == "reduce_sum" else {}))


@pytest.mark.parametrize("prim, dtype, case", [
  param(prim, dtype, case, name=prim, dtype=dtype, id=f"{prim}-{name(dtype)}-{case}")
  for prim, dtypes in REDUCE_DTYPES.items() for dtype in dtypes for case in REDUCE_CASES])
def test_reduce(prim, dtype, case):
  make, all_axes = REDUCE_CASES[case]
  check_traced(lambda x: [_reduce(prim, x, axes) for axes in all_axes], make(dtype))


@pytest.mark.parametrize("prim", ["reduce_sum", "reduce_max", "reduce_min"])
def test_reduce_public_function(prim):
  check_lax(prim, edges(np.float32), (1,))


def test_sum_of_negative_zeros_is_positive_except_of_one():
  """XLA adds the +0.0 init value unless a single element is reduced."""
  zeros = -np.zeros((3, 1), np.float32)
  check_traced(lambda x: [lax.reduce_sum(x, axes) for axes in [(0,), (1,), (0, 1)]], zeros)


@pytest.mark.parametrize("dtype", NUMBERS, ids=name)
def test_integer_sums_wrap_in_the_operand_dtype(dtype):
  x = np.full((5, 3), np.iinfo(dtype).max if np.issubdtype(dtype, np.integer) else 1000, dtype)
  check_traced(lambda x: [lax.reduce_sum(x, (0,)), lax.reduce_prod(x, (0,))], x)


def test_float16_sum_rounds_partial_sums():
  check_lax("reduce_sum", np.array([60000, 60000, -60000], np.float16), (0,))


# --- argmax, argmin

ARG_CASES = {  # id: (operand, axes)
  "vector": (lambda dtype: sample((9,), dtype), [0]),
  "edges": (edges, [0, 1]),
  "size-1 axis": (lambda dtype: sample((2, 1, 3), dtype), [1, 2]),
}


@pytest.mark.parametrize("prim, dtype, case", [
  param(prim, dtype, case, name=prim, dtype=dtype, id=f"{prim}-{name(dtype)}-{case}")
  for prim in ["argmax", "argmin"] for dtype in ALL for case in ARG_CASES])
def test_arg_extreme(prim, dtype, case):
  make, axes = ARG_CASES[case]
  check_traced(lambda x: [getattr(lax, prim)(x, axis, np.int32) for axis in axes], make(dtype))


@pytest.mark.parametrize("values", [[1.0, np.nan, 3.0, np.nan], [-0.0, 0.0], [0.0, -0.0], [np.inf, np.inf],
                                    [-np.inf, -np.inf], [2.0, 5.0, 5.0, -1.0]], ids=repr)
def test_arg_extreme_ties_and_nan(values):
  """The first NaN wins, else the first extreme; -0.0 and +0.0 tie."""
  check_traced(lambda x: [lax.argmax(x, 0, np.int32), lax.argmin(x, 0, np.int32)], np.array(values, np.float32))


def test_arg_extreme_index_dtype():
  check_traced(lambda x: [lax.argmax(x, 1, np.int8), lax.argmin(x, 0, np.uint8)], sample((3, 5), np.float32))


# --- cumulative ops

CUM_DTYPES = {"cumsum": NUMBERS, "cumprod": NUMBERS, "cummax": NUMBERS, "cummin": NUMBERS, "cumlogsumexp": FLOATS}
CUM_CASES = {  # id: (operand, the axes to scan)
  "vector": (lambda dtype: sample((6,), dtype), [0]),
  "edges": (edges, [0, 1]),
  "size-1 axis": (lambda dtype: sample((2, 1, 3), dtype), [1, 2]),
  "empty": (lambda dtype: sample((0, 3), dtype), [0, 1]),
}


def _cumulative_operand(prim, make, dtype):
  x = make(dtype)
  # float16 products of 4+ values overflow differently when multiplied in another order
  return np.clip(x, -2, 2) if prim == "cumprod" and dtype == np.float16 else x


@pytest.mark.parametrize("prim, dtype, case", [
  param(prim, dtype, case, name=prim, dtype=dtype, id=f"{prim}-{name(dtype)}-{case}")
  for prim, dtypes in CUM_DTYPES.items() for dtype in dtypes for case in CUM_CASES])
def test_cumulative(prim, dtype, case):
  make, axes = CUM_CASES[case]
  fn = getattr(lax, prim)
  check_traced(lambda x: [fn(x, axis, reverse) for axis in axes for reverse in (False, True)],
               _cumulative_operand(prim, make, dtype))


@pytest.mark.parametrize("prim", list(CUM_DTYPES))
def test_cumulative_long_axis(prim):
  """Past 512 elements tinygrad scans in two stages."""
  x = np.random.default_rng(0).uniform(0.999, 1.001, (2, 700)).astype(np.float32)
  check_traced(lambda x: [getattr(lax, prim)(x, 1), getattr(lax, prim)(x, 1, reverse=True)], x, rtol=1e-5)


@pytest.mark.parametrize("values", [[-np.inf, -np.inf, 1.0, np.inf, np.nan, 0.0], [-0.0], [-0.0, -np.inf],
                                    [0.0, -20.0, -40.0, 30.0], [-0.0, 1000.0, -1000.0]], ids=repr)
def test_cumlogsumexp_edges(values):
  check_traced(lambda x: [lax.cumlogsumexp(x), lax.cumlogsumexp(x, reverse=True)], np.array(values, np.float32))


def test_cumsum_of_negative_zeros():
  check_traced(lambda x: [lax.cumsum(x), lax.cumsum(x[:1]), lax.cumsum(x, reverse=True)],
               -np.zeros(3, np.float32))


def test_cumprod_reverse_multiplies_from_the_front():
  """XLA's reverse cumprod multiplies each suffix from its first element: here 0 * 0 before inf."""
  check_lax("cumprod", np.array([0.0, 0.0, -2.0, -3e38], np.float32), reverse=True)


# --- jax.numpy functions built from these primitives

@pytest.mark.parametrize("fn", [
  lambda np, x: np.argmax(x, axis=1), lambda np, x: np.argmin(x), lambda np, x: np.nanargmax(x, axis=0),
  lambda np, x: np.max(x, axis=0), lambda np, x: np.min(x, axis=1, keepdims=True), lambda np, x: np.sum(x),
  lambda np, x: np.prod(x, axis=0), lambda np, x: np.cumsum(x, axis=1), lambda np, x: np.cumprod(x),
  lambda np, x: np.any(x > 1, axis=0), lambda np, x: np.all(x < 5), lambda np, x: np.max(x[:, :0], axis=1, initial=-3.0),
], ids=["argmax", "argmin", "nanargmax", "max", "min-keepdims", "sum", "prod", "cumsum", "cumprod", "any", "all",
        "max-initial"])
def test_numpy_functions(fn):
  check(fn, edges(np.float32), native_only=False)
