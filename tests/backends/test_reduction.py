"""Reductions (reduce_*, argmax, argmin) and cumulative ops (cum*) on tinygrad, against JAX on XLA: every dtype each
primitive takes on an array of edge values (NaN, +-inf, -0.0, INT_MIN/INT_MAX), and per primitive the awkward
shapes (0-d, size-1 axes, empty axes, long axes).

Each distinct kernel costs a clang compile, so a test reduces one array over several axes in one check, and the
shape cases run on one dtype per primitive.
"""
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from helpers import dtype_name, values
from oracle import check, check_lax, check_traced
from xfail import param

FLOATS = [np.float32, np.float16]
INTS = [np.int8, np.int32, np.uint8, np.uint32]
NUMBERS = FLOATS + INTS
BITS = INTS + [np.bool_]
ALL = NUMBERS + [np.bool_]


def edges(dtype):
  """A (3, 4) array of edge values: floats have a row with NaN, one mixing +-0.0 and inf, one of -0.0."""
  if dtype == np.bool_:
    return np.array([[True, False, True, True], [False] * 4, [True] * 4])
  if np.issubdtype(dtype, np.integer):
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    return np.array([[low, high, 0, high // 2], [1, 2, 3, high], [low, low, 5, 7]], dtype)
  nan, inf = np.nan, np.inf
  return np.array([[nan, 1, -inf, nan], [0.0, -0.0, inf, -2.5], [-0.0, -0.0, -0.0, -0.0]], dtype)


def sample(shape, dtype, seed=0):
  """Values with ties: small floats including +-0.0; ints over the whole range, with both extremes."""
  return values(shape, dtype, seed, int_extremes=True,
                float_choices=[-2.0, -1.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 1.5, 3.0])



def params(dtypes_by_prim: dict):
  return [param(prim, dtype, name=prim, dtype=dtype, id=f"{prim}-{dtype_name(dtype)}")
          for prim, dtypes in dtypes_by_prim.items() for dtype in dtypes]


# --- reductions over axes

REDUCE_DTYPES = {"reduce_sum": NUMBERS, "reduce_prod": NUMBERS, "reduce_max": ALL, "reduce_min": ALL,
                 "reduce_and": BITS, "reduce_or": BITS, "reduce_xor": BITS}


def reduce(prim, x, axes):
  return getattr(lax, prim + "_p").bind(x, axes=axes, **({"out_sharding": None} if prim == "reduce_sum" else {}))


@pytest.mark.parametrize("prim, dtype", params(REDUCE_DTYPES))
def test_reduce(prim, dtype):
  check_traced(lambda x: [reduce(prim, x, (0,)), reduce(prim, x, (1,))], edges(dtype))


@pytest.mark.parametrize("prim", list(REDUCE_DTYPES))
def test_reduce_shapes(prim):
  """0-d, all axes, no axes, size-1 axes (XLA passes a single element through: -0.0 stays), empty axes."""
  dtype = REDUCE_DTYPES[prim][0]
  check_traced(lambda scalar, x, empty: [reduce(prim, scalar, ()), reduce(prim, x, ()), reduce(prim, x, (1,)),
                                         reduce(prim, x, (0, 2)), reduce(prim, x, (0, 1, 2)),
                                         reduce(prim, empty, (0, 1)), reduce(prim, empty, (0,))],
               sample((), dtype), sample((2, 1, 3), dtype, seed=1), sample((2, 0), dtype))


@pytest.mark.parametrize("prim", list(REDUCE_DTYPES))
def test_reduce_empty_axes_give_the_identity(prim):
  """-inf or the integer minimum for max, all ones for and, ... in each dtype."""
  dtypes = REDUCE_DTYPES[prim]
  check_traced(lambda *xs: [reduce(prim, x, (1,)) for x in xs], *[sample((2, 0), dtype) for dtype in dtypes])


def test_reduce_public_functions():
  check_traced(lambda x: [lax.reduce_sum(x, (1,)), lax.reduce_max(x, (1,)), lax.reduce_min(x, (0, 1))],
               edges(np.float32))


def test_sum_of_negative_zeros():
  """XLA adds its +0.0 init value unless a single element is reduced."""
  check_traced(lambda x: [lax.reduce_sum(x, axes) for axes in [(0,), (1,), (0, 1)]], -np.zeros((3, 1), np.float32))


@pytest.mark.parametrize("dtype", INTS, ids=dtype_name)
def test_integer_sums_and_products_wrap_in_the_operand_dtype(dtype):
  check_traced(lambda x: [lax.reduce_sum(x, (0,)), lax.reduce_prod(x, (0,))],
               np.full((5, 2), np.iinfo(dtype).max, dtype))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=dtype_name)
def test_16_bit_partial_results_round_as_xlas(dtype):
  """XLA's CPU rounds each partial sum (product) to the dtype, left to right: 60000 + 60000 - 60000 overflows in
  float16, 1 + 2**-8 + 2**-8 + ... stays 1 in bfloat16 where 2**-8 * 5 + 1 does not."""
  big = float(ml_dtypes.finfo(dtype).max) * 0.6
  eps = float(ml_dtypes.finfo(dtype).eps)
  rows = np.array([[big, big, -big, 0], [1, eps / 2, eps / 2, eps / 2], [eps / 2, eps / 2, eps / 2, 1]], dtype)
  factors = np.array([[big, 2, 0.5], [1 + eps, 1 + eps, 1 - eps / 2], [2, 0.5, big]], dtype)
  check_traced(lambda x, y: [lax.reduce_sum(x, (1,)), lax.reduce_prod(y, (1,))], rows, factors, rtol=0)


@pytest.mark.parametrize("shape, axes", [((100,), (0,)), ((1100,), (0,)), ((3, 64, 5), (1,)), ((2, 33, 3), (0, 1)),
                                         ((7, 5), (0, 1))], ids=str)
def test_16_bit_sums_fold_in_xlas_windows(shape, axes):
  """XLA's CPU sums a reduced axis of 32 or more in windows of 32 (padded evenly at both ends), then sums the
  windows: bit for bit the same, in float16 and bfloat16, over one axis or several."""
  x = np.random.default_rng(0).normal(size=shape) * 8
  check_traced(lambda a, b, c: [lax.reduce_sum(a, axes), lax.reduce_sum(b, axes), lax.reduce_prod(c, axes)],
               x.astype(np.float16), x.astype(ml_dtypes.bfloat16), (x / 256 + 1).astype(np.float16), rtol=0)


# --- argmax, argmin

@pytest.mark.parametrize("prim, dtype", params({"argmax": ALL, "argmin": ALL}))
def test_arg_extreme(prim, dtype):
  fn = getattr(lax, prim)
  check_traced(lambda x, y: [fn(x, 0, np.int32), fn(x, 1, np.int32), fn(y, 1, np.int32)],
               edges(dtype), sample((2, 1, 3), dtype))


def test_arg_extreme_ties_and_nan():
  """The first NaN wins, else the first extreme; -0.0 and +0.0 tie."""
  nan, inf = np.nan, np.inf
  rows = np.array([[1, nan, 3, nan], [-0.0, 0.0, -0.0, 0.0], [0.0, -0.0, 0.0, -0.0], [inf, inf, -inf, -inf],
                   [2, 5, 5, -1], [-1, -1, nan, 7]], np.float32)
  check_traced(lambda x: [lax.argmax(x, 1, np.int32), lax.argmin(x, 1, np.int32)], rows)


def test_arg_extreme_index_dtype():
  check_traced(lambda x: [lax.argmax(x, 1, np.int8), lax.argmin(x, 0, np.uint8)], sample((3, 5), np.float32))


# --- cumulative ops

CUM_DTYPES = {"cumsum": NUMBERS, "cumprod": NUMBERS, "cummax": NUMBERS, "cummin": NUMBERS, "cumlogsumexp": FLOATS}


def log_edges(dtype):
  """Rows for cumlogsumexp: infinities and NaN propagate, a tiny addend still counts (log1p), far-apart values do
  not overflow, ties."""
  nan, inf = np.nan, np.inf
  return np.array([[-inf, -inf, 1, inf, nan, 0], [0, -20, -40, 30, 30, -inf], [-0.0, 1000, -1000, 1e-3, 0, 0],
                   [-1, -1, -1, -1, -1, -1]], dtype)


@pytest.mark.parametrize("prim, dtype", params(CUM_DTYPES))
def test_cumulative(prim, dtype):
  fn = getattr(lax, prim)
  if prim == "cumlogsumexp":  # its steps are kernels of their own: one operand, one axis
    # XLA rounds each float16 operation of each step (log(3) - 1 comes out 2 ulp from the nearest float16)
    check_traced(lambda x: [fn(x, 1), fn(x, 1, reverse=True)], log_edges(dtype))
  else:
    check_traced(lambda x: [fn(x, 1), fn(x, 1, reverse=True), fn(x, 0)], edges(dtype))


@pytest.mark.parametrize("prim", list(CUM_DTYPES))
def test_cumulative_shapes(prim):
  """A length-1 axis (XLA passes it through), an empty one, and a long one (tinygrad scans it in two stages)."""
  fn = getattr(lax, prim)
  long = np.random.default_rng(0).uniform(0.999, 1.001, (2, 700)).astype(np.float32)
  check_traced(lambda x, empty, long: [fn(x, 1), fn(x, 2, reverse=True), fn(empty, 0), fn(empty, 1), fn(long, 1)],
               sample((2, 1, 3), np.float32), sample((0, 3), np.float32), long, rtol=1e-5)


def test_cumulative_signed_zeros():
  """XLA's cumsum adds its +0.0 init value (except along a length-1 axis); logaddexp never gives -0.0."""
  x = -np.zeros((2, 3), np.float32)
  check_traced(lambda x: [lax.cumsum(x, 1), lax.cumsum(x, 1, reverse=True), lax.cumsum(x[:1], 0),
                          lax.cumlogsumexp(x[:1], 0), lax.cumprod(x, 1)], x)


def test_cumprod_reverse_multiplies_from_the_front():
  """XLA's reverse cumprod multiplies each suffix from its first element: a 0 before a product that overflows
  later (0 * 0 * -2 * -big is 0, not inf * 0), an overflow before a 0 (NaN), along either axis, an empty one and a
  long one. (float32: tinygrad's C computes float16 products in float, tests/xfail.py's overflowing partial sum.)"""
  big = np.finfo(np.float32).max / 2
  rows = np.array([[0.0, 0.0, -2.0, -big, 3.0], [big, 4.0, 0.0, -0.0, np.nan], [-1.0, big, big, 0.0, 2.0]],
                  np.float32)
  long = np.random.default_rng(1).uniform(0.9, 1.1, (2, 600)).astype(np.float32)
  check_traced(lambda x, empty, long: [lax.cumprod(x, 1, reverse=True), lax.cumprod(x, 0, reverse=True),
                                       lax.cumprod(empty, 0, reverse=True), lax.cumprod(long, 1, reverse=True)],
               rows, np.zeros((0, 3), np.float32), long, rtol=1e-5)


# --- jax.numpy functions built from these primitives

NUMPY_FUNCTIONS = {
  "argmax": lambda np, x: np.argmax(x, axis=1), "argmin": lambda np, x: np.argmin(x),
  "nanargmax": lambda np, x: np.nanargmax(x, axis=0), "max": lambda np, x: np.max(x, axis=0),
  "min-keepdims": lambda np, x: np.min(x, axis=1, keepdims=True), "sum": lambda np, x: np.sum(x),
  "prod": lambda np, x: np.prod(x, axis=0), "cumsum": lambda np, x: np.cumsum(x, axis=1),
  "cumprod": lambda np, x: np.cumprod(x), "any": lambda np, x: np.any(x > 1, axis=0),
  "all": lambda np, x: np.all(x < 5), "max-initial": lambda np, x: np.max(x[:, :0], axis=1, initial=-3.0),
}


@pytest.mark.parametrize("fn", NUMPY_FUNCTIONS.values(), ids=NUMPY_FUNCTIONS.keys())
def test_numpy_functions(fn):
  check(fn, edges(np.float32))


# --- reduce with a custom body

def first_largest(a, b):
  """An associative body on (value, index) pairs: the larger value, the smaller index among equal ones."""
  (a_value, a_index), (b_value, b_index) = a, b
  pick_a = (a_value > b_value) | ((a_value == b_value) & (a_index < b_index))
  return lax.select(pick_a, a_value, b_value), lax.select(pick_a, a_index, b_index)


@pytest.mark.parametrize("shape, axes", [((3, 5), (1,)), ((3, 5), (0, 1)), ((4, 2), (0,)), ((2, 0), (1,)),
                                         ((0, 0), (0,)), ((3,), ())], ids=str)
def test_reduce_custom_body(shape, axes):
  """Sizes that are not powers of two, empty and no axes; one operand (wrapping int32 sums) and two."""
  values, ints = sample(shape, np.float32), sample(shape, np.int32)
  indices = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
  check_traced(lambda v, i, n: [lax.reduce(n, np.int32(0), lambda a, b: a + b + 0, axes),
                                *lax.reduce((v, i), (np.float32(-np.inf), np.int32(0)), first_largest, axes)],
               values, indices, ints)
