"""dot_general, conv_general_dilated and the reduce_window family on tinygrad, against JAX on XLA."""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from helpers import values
from oracle import check, check_lax, check_traced
from tinyjax.core.report import collecting
from xfail import param

# float32 (and float16) sums of products run in another order than XLA's: allow a few ulp of the sum's terms.
TOLERANCE = {np.float32: dict(rtol=1e-5, atol=1e-5), np.float16: dict(rtol=2e-3, atol=2e-3)}


def data(shape, dtype, seed=0):
  """Random values of a dtype: normal floats, integers in [-100, 100] (clipped to the dtype), fair booleans."""
  return values(shape, dtype, seed, small_ints=True)


# --- dot_general

DOT_CASES = {  # id: (lhs shape, rhs shape, dimension_numbers)
  "matmul": ((3, 4), (4, 5), (((1,), (0,)), ((), ()))),
  "vector": ((4,), (4,), (((0,), (0,)), ((), ()))),
  "transposed": ((4, 3), (5, 4), (((0,), (1,)), ((), ()))),
  "batched": ((2, 3, 4), (2, 4, 5), (((2,), (1,)), ((0,), (0,)))),
  "batch_inside": ((3, 2, 4), (4, 5, 2), (((2,), (0,)), ((1,), (2,)))),
  "two_contracted": ((2, 3, 4), (3, 4, 5), (((1, 2), (0, 1)), ((), ()))),
  "outer": ((3,), (4,), (((), ()), ((), ()))),
  "empty_contraction": ((3, 0), (0, 4), (((1,), (0,)), ((), ()))),
  "free_dims": ((2, 3, 4), (4, 5, 2), (((2,), (0,)), ((), ()))),
  "two_batch": ((2, 3, 4, 5), (3, 2, 5, 2), (((3,), (2,)), ((0, 1), (1, 0)))),
}
DTYPES = [np.float32, np.float16, np.int32, np.int8, np.bool_]


@pytest.mark.parametrize("dtype,case", [param(d, c, name="dot_general", dtype=d, id=f"{c}-{d.__name__}")
                                        for d in DTYPES
                                        for c in (DOT_CASES if d == np.float32 else ("matmul", "batch_inside"))])
def test_dot_general(dtype, case):
  lhs_shape, rhs_shape, dimension_numbers = DOT_CASES[case]
  check_lax("dot_general", data(lhs_shape, dtype, 1), data(rhs_shape, dtype, 2), dimension_numbers=dimension_numbers,
            **TOLERANCE.get(dtype, {}))


MATMUL = (((1,), (0,)), ((), ()))
I8, I32 = np.iinfo(np.int8), np.iinfo(np.int32)


@pytest.mark.parametrize("lhs,rhs,preferred", [
  param(data((3, 4), np.int8, 1), data((4, 5), np.int8, 2), np.int32, name="dot_general", id="int8-to-int32"),
  param(np.full((2, 64), I8.min, np.int8), np.full((64, 2), I8.min, np.int8), np.int32, name="dot_general",
        id="int8-extremes-to-int32"),
  param(np.full((2, 3), I8.max, np.int8), np.full((3, 2), I8.min, np.int8), None, name="dot_general",
        id="int8-wraps"),
  param(np.array([[I32.max, I32.min, 2**30]], np.int32), np.array([[3], [-1], [7]], np.int32), None,
        name="dot_general", id="int32-wraps"),
  param(data((3, 4), np.float16, 1), data((4, 5), np.float16, 2), np.float32, name="dot_general", id="f16-to-f32"),
  param(data((3, 4), np.int8, 1), data((4, 5), np.int8, 2), np.float32, name="dot_general", id="int8-to-f32"),
])
def test_dot_general_preferred_element_type(lhs, rhs, preferred):
  check_lax("dot_general", lhs, rhs, dimension_numbers=MATMUL, preferred_element_type=preferred,
            **TOLERANCE[np.float32] if preferred == np.float32 else {})


@pytest.mark.parametrize("lhs,rhs", [
  param(np.array([[np.inf, 1, 0], [np.nan, 1, 2], [-np.inf, 0, 1], [1e30, 1e30, 0], [-0.0, -0.0, -0.0]], np.float32),
        np.array([[0, 1, 2], [1, np.inf, -1], [3, -np.inf, 1]], np.float32), name="dot_general", id="sums"),
  param(np.array([[-0.0], [2.0]], np.float32), np.array([[1.0, -0.0]], np.float32), name="dot_general",
        id="one-term"),
])
def test_dot_general_edge_values(lhs, rhs):
  """inf * 0 is NaN, NaN spreads, sums overflow to inf; a sum of -0.0s is +0.0 unless it has one term."""
  check_lax("dot_general", lhs, rhs, dimension_numbers=MATMUL, precision=lax.Precision.HIGHEST)



def _long_rows(shape, dtype, seed):
  """Small whole numbers (exact products, exact sums in any order), as `dtype`."""
  return np.round(np.random.default_rng(seed).normal(size=shape) * 4).astype(dtype)


LONG_TERMS = 8201  # odd: the chunks' terms are padded


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_long_contractions_summed_in_chunks(dtype):
  """A contraction too long for a CPU's cache is summed in chunks on the CPU and CL devices (contraction.py): JAX's
  values, with the edge values spread over the chunks (inf in the first and -inf in the last: NaN; NaN; a row of
  -0.0s: +0.0; int32 sums that wrap), batched and not. On other devices (WEBGPU) the same values in one sum."""
  from tinyjax.backends.tinygrad.rules.contraction import _cache_chunks
  lhs, rhs = _long_rows((16, LONG_TERMS), dtype, 1), _long_rows((LONG_TERMS, 16), dtype, 2)
  assert _cache_chunks("CPU", 16, 16, LONG_TERMS, 4) >= 2  # the premise: split on the CPU device
  if dtype == np.int32:
    lhs[0] = np.iinfo(np.int32).max
  else:
    lhs[1, 10], lhs[1, -10], lhs[2, 4000], lhs[3] = np.inf, -np.inf, np.nan, -0.0
    rhs[:, 0], rhs[:, 1] = -0.0, 1.0
  check_lax("dot_general", lhs, rhs, dimension_numbers=MATMUL)
  batched = (((2,), (1,)), ((0,), (0,)))
  check_lax("dot_general", np.stack([lhs, lhs[::-1]]), np.stack([rhs, -rhs]), dimension_numbers=batched)


# --- conv_general_dilated

CONV_CASES = {  # id: (lhs shape, rhs shape, params)
  "strided_same": ((2, 3, 7, 6), (4, 3, 3, 3), dict(window_strides=(2, 3), padding="SAME")),
  "pads": ((1, 2, 5, 5), (3, 2, 2, 3), dict(window_strides=(1, 1), padding=((2, 1), (0, 3)))),
  "negative_pads": ((1, 2, 7, 6), (3, 2, 2, 2), dict(window_strides=(1, 2), padding=((-1, 2), (1, -2)))),
  "lhs_dilation": ((1, 2, 4, 5), (3, 2, 3, 2), dict(window_strides=(1, 1), padding=((2, 2), (1, 1)),
                                                    lhs_dilation=(2, 3))),
  "rhs_dilation": ((2, 2, 7, 7), (3, 2, 3, 2), dict(window_strides=(1, 2), padding="SAME", rhs_dilation=(2, 3))),
  "feature_groups": ((2, 4, 5, 5), (6, 2, 3, 3), dict(window_strides=(1, 1), padding="SAME", feature_group_count=2)),
  "batch_groups": ((4, 3, 5, 5), (6, 3, 2, 2), dict(window_strides=(1, 1), padding="VALID", batch_group_count=2)),
  "nhwc_hwio": ((2, 6, 5, 3), (3, 2, 3, 4), dict(window_strides=(2, 1), padding="SAME",
                                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))),
  "mixed_layouts": ((5, 2, 6, 3), (3, 4, 2, 2), dict(window_strides=(1, 1), padding=((1, 0), (0, 1)),
                                                     dimension_numbers=("HNWC", "IOWH", "CWNH"))),
  "1d": ((2, 3, 9), (4, 3, 3), dict(window_strides=(2,), padding=((1, 2),), rhs_dilation=(2,))),
  "1d_nwc": ((2, 9, 3), (3, 3, 4), dict(window_strides=(1,), padding="SAME", dimension_numbers=("NWC", "WIO", "NWC"))),
  "3d": ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), dict(window_strides=(1, 2, 1), padding=((1, 0), (1, 1), (0, 2)),
                                                lhs_dilation=(1, 1, 2))),
  "3d_ndhwc": ((1, 4, 4, 3, 2), (2, 2, 2, 2, 3), dict(window_strides=(2, 1, 1), padding="VALID",
                                                      dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))),
  "empty_output": ((1, 1, 2, 2), (1, 1, 3, 3), dict(window_strides=(1, 1), padding="VALID")),
  # no spatial dimension: a product of features (JAX's own tests draw these)
  "no_spatial": ((2, 3), (4, 3), dict(window_strides=(), padding=())),
  "no_spatial_groups": ((2, 4), (6, 2), dict(window_strides=(), padding=(), feature_group_count=2,
                                             dimension_numbers=("NC", "OI", "CN"))),
}


@pytest.mark.parametrize("dtype,case", [param(np.float32, c, name="conv_general_dilated", dtype=np.float32, id=c)
                                        for c in CONV_CASES] +
                         [param(d, c, name="conv_general_dilated", dtype=d, id=f"{c}-{d.__name__}")
                          for d in (np.float16, np.int32) for c in ("strided_same", "batch_groups")])
def test_conv_general_dilated(dtype, case):
  lhs_shape, rhs_shape, params = CONV_CASES[case]
  check_lax("conv_general_dilated", data(lhs_shape, dtype, 1), data(rhs_shape, dtype, 2), **params,
            **TOLERANCE.get(dtype, {}))


@pytest.mark.parametrize("lhs_dtype,preferred", [
  param(np.int8, np.int32, name="conv_general_dilated", dtype=np.int8, id="int8-to-int32"),
  param(np.float16, np.float32, name="conv_general_dilated", dtype=np.float16, id="f16-to-f32"),
])
def test_conv_preferred_element_type(lhs_dtype, preferred):
  check_lax("conv_general_dilated", data((2, 3, 5, 5), lhs_dtype, 1), data((4, 3, 3, 3), lhs_dtype, 2),
            window_strides=(1, 1), padding="SAME", preferred_element_type=preferred, **TOLERANCE[np.float32])


def test_conv_edge_values():
  lhs = np.zeros((1, 1, 4, 4), np.float32)
  lhs[0, 0] = [[np.nan, 1, 2, 0], [np.inf, -np.inf, 0, 1], [-0.0, -0.0, 3, 1e30], [-0.0, -0.0, 0, 2e38]]
  check_lax("conv_general_dilated", lhs, np.ones((1, 1, 2, 2), np.float32), window_strides=(1, 1), padding="SAME")


# The convs of jax.grad of a conv loss, w.r.t. the input and the kernel: their params as JAX's transpose rules make
# them (lhs_dilation for strides, swapped dimension numbers, feature/batch group counts for grouped convs).
GRAD_CASES = {  # id: (lhs shape, rhs shape, params of the forward conv)
  "nhwc_strided": ((2, 6, 6, 3), (3, 3, 3, 4), dict(window_strides=(2, 2), padding="SAME",
                                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))),
  "nchw_dilated": ((2, 2, 7, 6), (3, 2, 3, 2), dict(window_strides=(1, 2), padding=((1, 1), (2, 0)),
                                                    rhs_dilation=(2, 1))),
  "grouped": ((2, 6, 6, 4), (3, 3, 2, 6), dict(window_strides=(1, 1), padding="SAME", feature_group_count=2,
                                               dimension_numbers=("NHWC", "HWIO", "NHWC"))),
  "depthwise_strided": ((2, 3, 7, 7), (3, 1, 3, 3), dict(window_strides=(2, 2), padding="VALID",
                                                         feature_group_count=3)),
  "1d": ((3, 2, 8), (4, 2, 3), dict(window_strides=(2,), padding="SAME")),
}


def _grad_convs(case):
  """The conv_general_dilated equations of jax.grad(loss) w.r.t. both operands: {operand: (lhs, rhs avals, params)}."""
  lhs_shape, rhs_shape, params = GRAD_CASES[case]
  def loss(x, w):
    return jnp.sum(jnp.sin(lax.conv_general_dilated(x, w, **params)))
  closed = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(np.ones(lhs_shape, np.float32),
                                                          np.ones(rhs_shape, np.float32))
  operand_of = {lhs_shape: "input", rhs_shape: "kernel"}
  return {operand_of.get(e.outvars[0].aval.shape, "forward"): (e.invars[0].aval, e.invars[1].aval, e.params)
          for e in closed.jaxpr.eqns if e.primitive.name == "conv_general_dilated"}


@pytest.mark.parametrize("case,operand", [param(c, o, name="conv_general_dilated", id=f"{c}-d_{o}")
                                          for c in GRAD_CASES for o in ("kernel", "input")])
def test_conv_gradient_convs(case, operand):
  convs = _grad_convs(case)
  assert set(convs) == {"forward", "kernel", "input"}
  lhs_aval, rhs_aval, params = convs[operand]
  grouped = GRAD_CASES[case][2].get("feature_group_count", 1) > 1
  assert (params["batch_group_count"] > 1) == (grouped and operand == "kernel")
  check_lax("conv_general_dilated", data(lhs_aval.shape, np.float32, 1), data(rhs_aval.shape, np.float32, 2),
            **params, **TOLERANCE[np.float32])


@pytest.mark.parametrize("mode", ["full", "same"])
def test_convolve(mode):
  check(lambda np_, x, y: np_.convolve(x, y, mode=mode), data((9,), np.float32, 1), data((4,), np.float32, 2),
        **TOLERANCE[np.float32])


# --- reduce_window family

WINDOW_CASES = {  # id: (shape, window_dimensions, window_strides, padding, base_dilation, window_dilation)
  "pool": ((2, 6, 4, 3), (1, 2, 2, 1), (1, 2, 2, 1), "VALID", None, None),
  "same": ((2, 5, 5, 2), (1, 3, 3, 1), (1, 2, 2, 1), "SAME", None, None),
  "pads": ((5, 6), (2, 3), (1, 2), ((1, 2), (3, 0)), None, None),
  "negative_pads": ((6, 7), (2, 2), (1, 1), ((-1, 1), (2, -3)), None, None),
  "base_dilation": ((4, 5), (2, 3), (1, 1), ((1, 0), (0, 1)), (2, 3), None),
  "window_dilation": ((7, 8), (2, 3), (2, 1), ((0, 0), (1, 1)), None, (3, 2)),
  "1d_cumulative": ((6,), (6,), (1,), ((5, 0),), None, None),
  "3d": ((3, 4, 5), (2, 2, 3), (1, 2, 1), "SAME", None, None),
}
REDUCERS = {"sum": (lax.add, 0), "max": (lax.max, -np.inf), "min": (lax.min, np.inf)}
WINDOW_DTYPES = [np.float32, np.float16, np.int32, np.int8]


def _window_fn(reducer, dtype, window):
  """lax.reduce_window with a constant identity init, which JAX turns into reduce_window_<reducer>."""
  _, dims, strides, padding, base_dilation, window_dilation = window
  computation, init = REDUCERS[reducer]
  if np.issubdtype(dtype, np.integer) and reducer != "sum":
    init = np.iinfo(dtype).min if reducer == "max" else np.iinfo(dtype).max
  return functools.partial(lax.reduce_window, init_value=np.array(init, dtype), computation=computation,
                           window_dimensions=dims, window_strides=strides, padding=padding,
                           base_dilation=base_dilation, window_dilation=window_dilation)


def _window_params():
  """float32 sums over the window cases, max and min over pooling and dilations, one case for the other dtypes."""
  for reducer in REDUCERS:
    for dtype in WINDOW_DTYPES:
      if dtype != np.float32:
        cases = ("pads",)
      elif reducer == "sum":
        cases = [case for case in WINDOW_CASES if case != "same"]
      else:
        cases = ("pool", "same", "base_dilation", "window_dilation")
      for case in cases:
        yield param(reducer, dtype, case, name=f"reduce_window_{reducer}", dtype=dtype,
                    id=f"{reducer}-{case}-{dtype.__name__}")


@pytest.mark.parametrize("reducer,dtype,case", list(_window_params()))
def test_reduce_window_monoid(reducer, dtype, case):
  fn = _window_fn(reducer, dtype, WINDOW_CASES[case])
  shape = WINDOW_CASES[case][0]
  assert f"reduce_window_{reducer}[" in str(jax.make_jaxpr(fn)(np.zeros(shape, dtype)))
  check_traced(fn, data(shape, dtype), **TOLERANCE.get(dtype, {}))


EDGE_WINDOWS = {  # a 1-D operand and the windows that make its edge cases meet
  np.float32: np.array([np.nan, 1.0, -0.0, 0.0, -0.0, -np.inf, np.inf, 2.0, 0.0, -0.0, -0.0, 3e38, 3e38],
                       np.float32),
  np.float16: np.array([1.0, np.nan, -0.0, 0.0, 0.0, -0.0, np.inf, 60000, 60000, -np.inf], np.float16),
  np.int32: np.array([I32.min, I32.max, I32.max, 1, I32.min, I32.min, -1, 0], np.int32),
  np.int8: np.array([I8.min, I8.max, 5, I8.max, I8.min, I8.min, 0], np.int8),
}


@pytest.mark.parametrize("reducer,dtype", [param(r, d, name=f"reduce_window_{r}", dtype=d, id=f"{r}-{d.__name__}")
                                           for r in REDUCERS for d in EDGE_WINDOWS])
def test_reduce_window_edge_values(reducer, dtype):
  """NaN propagates, -0.0 < +0.0, sums overflow to inf or wrap, and padding never wins."""
  window = (EDGE_WINDOWS[dtype].shape, (2,), (1,), ((1, 1),), None, None)
  check_traced(_window_fn(reducer, dtype, window), EDGE_WINDOWS[dtype])


@pytest.mark.parametrize("reducer", [param(r, name=f"reduce_window_{r}", id=r) for r in REDUCERS])
def test_reduce_window_of_a_scalar(reducer):
  """A 0-d operand has one window, of no dimensions: the scalar (with the init, through the generic primitive)."""
  check_traced(_window_fn(reducer, np.float32, ((), (), (), (), None, None)), np.float32(-0.0))
  computation, init = REDUCERS[reducer]
  check_lax("reduce_window", np.float32(2.5), np.array(init, np.float32), computation, (), (), ())


GENERIC_CASES = {  # id: (dtype, init, computation)
  "add_init": (np.float32, 10.0, lax.add),
  "mul": (np.float32, 1.0, lax.mul),
  "max_init": (np.float32, 0.0, lax.max),
  "min_inf": (np.float32, np.inf, lax.min),
  "int_add": (np.int32, 3, lax.add),
  "int_max": (np.int8, -5, lax.max),
  "bool_and": (np.bool_, True, lax.bitwise_and),
  "bool_or": (np.bool_, False, lax.bitwise_or),
  "not_a_monoid": (np.float32, 0.5, lambda a, b: a * 0.5 + b),
}


@pytest.mark.parametrize("case", [param(c, name="reduce_window", dtype=GENERIC_CASES[c][0], id=c)
                                  for c in GENERIC_CASES])
def test_reduce_window_generic(case):
  """An init value passed as an array keeps JAX from recognizing the monoid: the reduce_window primitive."""
  dtype, init, computation = GENERIC_CASES[case]
  shape, dims, strides, padding, base_dilation, window_dilation = WINDOW_CASES["base_dilation"]
  check_lax("reduce_window", data(shape, dtype), np.array(init, dtype), computation, dims, strides, padding,
            base_dilation, window_dilation, **TOLERANCE.get(dtype, {}))


def test_reduce_window_variadic():
  """A window argmax: two operands reduced together by a comparing body."""
  def argmax_body(a, b):
    a_value, a_index = a
    b_value, b_index = b
    take_a = (a_value > b_value) | ((a_value == b_value) & (a_index < b_index))
    return lax.select(take_a, a_value, b_value), lax.select(take_a, a_index, b_index)
  values = data((5, 6), np.float32)
  indices = np.arange(30, dtype=np.int32).reshape(5, 6)
  check_lax("reduce_window", (values, indices), (np.array(-np.inf, np.float32), np.array(-1, np.int32)), argmax_body,
            (2, 3), (1, 2), ((1, 0), (0, 1)))


# --- flax layers through tinyjax
# flax given tinyjax Arrays converts them with __jax_array__ and runs on XLA; `check_traced` traces the flax call
# instead (tinyjax's mirror wrapper), so its jaxpr runs on tinygrad.

POOLS = {
  "avg_pool": functools.partial(nn.avg_pool, window_shape=(2, 2), strides=(2, 2)),
  "avg_pool_same_exclude_pad": functools.partial(nn.avg_pool, window_shape=(3, 3), strides=(2, 2), padding="SAME",
                                                 count_include_pad=False),
  "max_pool": functools.partial(nn.max_pool, window_shape=(2, 2), strides=(2, 2)),
  "max_pool_same": functools.partial(nn.max_pool, window_shape=(3, 3), strides=(1, 1), padding="SAME"),
  "min_pool": functools.partial(nn.pooling.min_pool, window_shape=(2, 3), padding=((1, 0), (0, 1))),
}


@pytest.mark.parametrize("pool", POOLS)
def test_flax_pooling(pool):
  check_traced(POOLS[pool], data((2, 6, 6, 3), np.float32), **TOLERANCE[np.float32])


class SeedCNN(nn.Module):
  """The flax CNN of the seed notebook (shared/seeds/000_*.txt), on 8x8 images."""
  @nn.compact
  def __call__(self, x):
    x = nn.avg_pool(nn.silu(nn.Conv(features=8, kernel_size=(3, 3))(x)), window_shape=(2, 2), strides=(2, 2))
    x = nn.avg_pool(nn.silu(nn.Conv(features=16, kernel_size=(3, 3))(x)), window_shape=(2, 2), strides=(2, 2))
    x = nn.silu(nn.Dense(features=32)(x.reshape((x.shape[0], -1))))
    return nn.Dense(features=10)(x)


def test_flax_seed_cnn():
  """The seed's conv, pool and dense layers (with silu between) run on tinygrad and match XLA."""
  images = data((2, 8, 8, 1), np.float32)
  cnn = SeedCNN()
  params = cnn.init(jax.random.key(0), images)
  with collecting() as report:
    check_traced(lambda x: cnn.apply(params, x), images, **TOLERANCE[np.float32])
  ran_natively = {p for backend, p in report.primitives if backend == "tinygrad"}
  assert {"conv_general_dilated", "reduce_window_sum", "dot_general"} <= ran_natively, report


def test_dot_general_of_zero_dimensional_operands():
  """Operands with no axes at all (a product of scalars; an einsum whose operands all contract away)."""
  two, three = np.float32(2), np.float32(3)
  check(lambda np_, a, b: np_.einsum(",->", a, b), two, three)
  check(lambda np_, a, b, c: np_.einsum("ab,ab,c->c", a, b, c), np.ones((2, 2), np.int32), np.ones((2, 2), np.int32),
        np.ones(0, np.int32))
