"""gather, the scatter family, dynamic_slice / dynamic_update_slice and the max-pool pair on tinygrad, against JAX
on XLA: every dimension-number layout, every out-of-range mode, edge values, and the jnp functions built on them."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import tinyjax
from helpers import values
from oracle import check, check_lax, check_traced as traced
from xfail import param

M = lax.GatherScatterMode
GDN, SDN = lax.GatherDimensionNumbers, lax.ScatterDimensionNumbers


def data(shape, dtype, seed=0):
  """Random values; floats lead with NaN, +-inf and both zeros, integers span their whole range."""
  return values(shape, dtype, seed, float_edges=(np.nan, -0.0, 0.0, np.inf, -np.inf))


def small(shape, dtype, seed=1):
  """Updates whose sums and products are exact in any order (small integers), with -0.0, inf and NaN for floats."""
  if not np.issubdtype(dtype, np.floating):
    return data(shape, dtype, seed)
  x = np.random.default_rng(seed).integers(-3, 4, shape).astype(dtype).reshape(-1)
  edges = np.array([-0.0, np.inf, np.nan, 0.0], dtype)[:x.size]
  x[-len(edges):] = edges
  return x.reshape(shape)


# --- gather

GATHER_CASES = {  # id: (operand shape, indices (some out of range), dimension numbers, slice sizes)
  "rows": ((5, 4), [[1], [-1], [7], [4], [0]], GDN((1,), (0,), (0,)), (1, 4)),
  "columns": ((5, 4), [[3], [9], [-2]], GDN((0,), (1,), (1,)), (5, 1)),
  "points": ((3, 4, 5), [[0, 4], [2, 0], [3, 1], [-1, 5]], GDN((1,), (0, 2), (0, 2)), (1, 4, 1)),
  "windows": ((6, 5), [[0, 0], [4, 3], [5, -1], [2, 1]], GDN((1, 2), (), (0, 1)), (2, 3)),
  "map_reversed": ((4, 5), [[1, 3], [0, 4], [6, 0]], GDN((1,), (1,), (1, 0)), (2, 1)),
  "offset_first": ((5, 4), [[2], [0], [5]], GDN((0,), (0,), (0,)), (1, 4)),
  "single": ((5, 4), [2], GDN((0, 1), (), (0,)), (2, 4)),
  "batched": ((4, 5), [[[1], [4]], [[5], [0]], [[-1], [2]], [[3], [3]]], GDN((), (1,), (1,), (0,), (0,)), (1, 1)),
  "batched_inner": ((5, 3), [[[0], [4], [2]], [[6], [1], [-3]]], GDN((), (0,), (0,), (1,), (1,)), (1, 1)),
}


def _gather_case(case, dtype, index_dtype=np.int32):
  shape, indices, dnums, slice_sizes = GATHER_CASES[case]
  return (data(shape, dtype), np.array(indices).astype(index_dtype)), dict(dimension_numbers=dnums,
                                                                            slice_sizes=slice_sizes)


@pytest.mark.parametrize("case,mode", [param(c, m, name="gather", dtype=np.float32, id=f"{c}-{m.name}")
                                       for c in GATHER_CASES for m in (M.FILL_OR_DROP, M.CLIP)] +
                         [param(c, M.PROMISE_IN_BOUNDS, name="gather", dtype=np.float32, id=f"{c}-PROMISE")
                          for c in ("rows", "windows", "batched")])
def test_gather(case, mode):
  args, params = _gather_case(case, np.float32)
  check_lax("gather", *args, **params, mode=mode)


@pytest.mark.parametrize("dtype,case,mode", [param(d, c, m, name="gather", dtype=d, id=f"{c}-{m.name}-{d.__name__}")
                                             for d in (np.int32, np.uint8, np.bool_)
                                             for c, m in (("rows", M.FILL_OR_DROP), ("points", M.CLIP))])
def test_gather_dtypes(dtype, case, mode):
  args, params = _gather_case(case, dtype)
  check_lax("gather", *args, **params, mode=mode)


@pytest.mark.parametrize("index_dtype,indices,mode", [
  param(np.uint8, [[1], [255], [4], [200]], M.FILL_OR_DROP, name="gather", dtype=np.uint8, id="uint8-fill"),
  param(np.uint8, [[1], [255], [4], [200]], M.CLIP, name="gather", dtype=np.uint8, id="uint8-clip"),
  param(np.int8, [[-128], [127], [3]], M.PROMISE_IN_BOUNDS, name="gather", dtype=np.int8, id="int8-promise"),
  param(np.uint32, [[4294967295], [2147483648], [3]], M.FILL_OR_DROP, name="gather", dtype=np.uint32, id="uint32"),
])
def test_gather_index_dtypes(index_dtype, indices, mode):
  check_lax("gather", data((300, 2), np.float32), np.array(indices, index_dtype),
            dimension_numbers=GDN((1, 2), (), (0,)), slice_sizes=(2, 2), mode=mode)


def test_gather_fill_value():
  args, params = _gather_case("windows", np.int32)
  check_lax("gather", *args, **params, mode=M.FILL_OR_DROP, fill_value=-7)


# --- scatter family

SCATTER_CASES = {  # id: (operand shape, indices (duplicates, out of range), dimension numbers, updates shape)
  "rows": ((5, 4), [[1], [-1], [7], [1], [4], [1]], SDN((1,), (0,), (0,)), (6, 4)),
  "elements": ((6,), [[0], [2], [2], [5], [6], [-1], [2]], SDN((), (0,), (0,)), (7,)),
  "points": ((3, 4, 5), [[0, 4], [2, 0], [0, 4], [3, 0]], SDN((1,), (0, 2), (0, 2)), (4, 4)),
  "windows": ((6, 5), [[0, 0], [4, 2], [5, -1], [3, 1], [4, 3]], SDN((1, 2), (), (0, 1)), (5, 2, 3)),
  "batched": ((4, 5), [[[1], [1]], [[5], [0]], [[-1], [2]], [[3], [3]]], SDN((), (1,), (1,), (0,), (0,)), (4, 2)),
  "batched_inner": ((5, 3), [[[0], [4], [2]], [[0], [1], [-3]]], SDN((), (0,), (0,), (1,), (1,)), (2, 3)),
  "window_first": ((5, 4), [[2], [0], [2]], SDN((0,), (0,), (0,)), (4, 3)),
  "part_of_rows": ((5, 4), [[1], [3], [1]], SDN((1,), (0,), (0,)), (3, 2)),
}
SCATTERS = ["scatter", "scatter_add", "scatter_mul", "scatter_min", "scatter_max"]
PRIMITIVE = {"scatter": "scatter", "scatter_add": "scatter-add", "scatter_mul": "scatter-mul",
             "scatter_min": "scatter-min", "scatter_max": "scatter-max"}


def _scatter_case(case, dtype):
  shape, indices, dnums, updates_shape = SCATTER_CASES[case]
  return (data(shape, dtype), np.array(indices, np.int32), small(updates_shape, dtype)), dict(dimension_numbers=dnums)


@pytest.mark.parametrize("fn,case", [param(f, c, name=PRIMITIVE[f], dtype=np.float32, id=f"{f}-{c}")
                                     for f in SCATTERS for c in ("rows", "points", "windows", "batched")] +
                         [param(f, c, name=PRIMITIVE[f], dtype=np.float32, id=f"{f}-{c}")
                          for f, c in (("scatter_add", "elements"), ("scatter_add", "window_first"),
                                       ("scatter", "batched_inner"), ("scatter_add", "batched_inner"),
                                       ("scatter_max", "elements"), ("scatter", "part_of_rows"),
                                       ("scatter_add", "part_of_rows"))])
def test_scatter(fn, case):
  args, params = _scatter_case(case, np.float32)
  check_lax(fn, *args, **params, mode=M.FILL_OR_DROP)


@pytest.mark.parametrize("fn,mode", [param(f, m, name=PRIMITIVE[f], dtype=np.float32, id=f"{f}-{m.name}")
                                     for f in ("scatter", "scatter_add") for m in (M.CLIP, M.PROMISE_IN_BOUNDS)])
def test_scatter_modes(fn, mode):
  args, params = _scatter_case("windows", np.float32)
  check_lax(fn, *args, **params, mode=mode)


@pytest.mark.parametrize("fn,dtype", [param(f, d, name=PRIMITIVE[f], dtype=d, id=f"{f}-{d.__name__}")
                                      for d in (np.int32, np.uint8, np.bool_) for f in SCATTERS
                                      if d == np.int32 or (d == np.uint8) == (f in ("scatter_add", "scatter_mul"))])
def test_scatter_dtypes(fn, dtype):
  args, params = _scatter_case("rows", dtype)
  check_lax(fn, *args, **params, mode=M.FILL_OR_DROP)


def test_scatter_extremes_of_zeros_and_nan():
  operand = np.array([-0.0, 0.0, 0.0, -0.0, 1.0, np.nan, 2.0, -0.0], np.float32)
  indices = np.arange(8, dtype=np.int32)[:, None]
  updates = np.array([0.0, -0.0, -0.0, 0.0, np.nan, 1.0, -np.inf, -0.0], np.float32)
  for fn in ("scatter_max", "scatter_min", "scatter_add", "scatter_mul"):
    check_lax(fn, operand, indices, updates, dimension_numbers=SDN((), (0,), (0,)), mode=M.FILL_OR_DROP)


def test_scatter_into_a_zero_dimensional_operand():
  for method in ("set", "min", "max", "add"):
    check(lambda np_, x: getattr(np_.asarray(x).at[()], method)(1.0), np.float32(-3))


def test_scatter_extremes_where_no_update_lands():
  """Where nothing lands the operand stays, negative values too (on WEBGPU a fill key beside the key of a constant
  1.0 came out 0: indexing._limit)."""
  x = np.array([[-1.0, 2.0, -3.0], [-4.0, -5.0, 6.0]], np.float32)
  for method in ("max", "min"):
    check(lambda np_, x: getattr(np_.asarray(x).at[:, np.array([0, 0])], method)(np_.ones(2)[:, None]), x)


def test_scatter_apply():
  traced(lambda x, i: jnp.asarray(x).at[i].apply(lambda v: v * 2 + 1), np.arange(6, dtype=np.float32),
         np.array([1, 4, 1, 9]))


# --- dynamic slices

@pytest.mark.parametrize("dtype,starts", [
  param(np.float32, (np.int32(3), np.int32(-7)), name="dynamic_slice", dtype=np.float32, id="float32"),
  param(np.int32, (np.int32(9), np.int32(1)), name="dynamic_slice", dtype=np.int32, id="int32-beyond"),
  param(np.bool_, (np.uint8(250), np.uint8(1)), name="dynamic_slice", dtype=np.bool_, id="bool-uint8-starts"),
])
def test_dynamic_slice(dtype, starts):
  check_lax("dynamic_slice", data((5, 4), dtype), starts, (3, 2))


@pytest.mark.parametrize("dtype,starts", [
  param(np.float32, (np.int32(4), np.int32(2)), name="dynamic_update_slice", dtype=np.float32, id="float32"),
  param(np.uint8, (np.int32(-9), np.int32(1)), name="dynamic_update_slice", dtype=np.uint8, id="uint8-before"),
  param(np.bool_, (np.int16(-300), np.int16(0)), name="dynamic_update_slice", dtype=np.bool_, id="bool-int16-starts"),
])
def test_dynamic_update_slice(dtype, starts):
  update = data((2, 4 if dtype == np.bool_ else 3), dtype, seed=5)
  check_lax("dynamic_update_slice", data((5, 4), dtype), update, starts)


# --- the max-pool pair, through the gradient and the jvp of max pooling

def _pool(x, padding, strides=(1, 2, 2, 1), reducer=lax.max):
  identity = -jnp.inf if reducer is lax.max else jnp.inf
  return lax.reduce_window(x, identity, reducer, (1, 2, 2, 1), strides, padding)


def _weighted_sum(y):
  """A sum with a distinct weight per element, so that each gradient entry says which windows picked it."""
  return jnp.sum(y * jnp.arange(1.0, y.size + 1.0).reshape(y.shape))


POOL_INPUTS = {
  "distinct": np.where(np.eye(4, 5, 1) == 1, -np.inf, np.random.default_rng(6).permutation(20).reshape(4, 5))
  .astype(np.float32),
  "ties": np.array([[1, 1, 0, 2, 2], [1, 0, 2, 2, 1], [3, 3, 3, 0, 0], [0, 3, 1, 1, 1]], np.float32),
  "edges": np.array([[np.nan, 1, 1, np.nan, 3], [-np.inf, -np.inf, 0, -0.0, 0], [2, np.inf, 0, 0, -1],
                     [-np.inf, -np.inf, -np.inf, -np.inf, 5]], np.float32),
}


@pytest.mark.parametrize("values,padding,strides", [
  param(v, p, s, name="select_and_scatter_add", dtype=np.float32, id=f"{v}-{p}-{s[1]}")
  for v in POOL_INPUTS for p, s in (("VALID", (1, 2, 2, 1)), ("SAME", (1, 1, 1, 1)), ("SAME", (1, 2, 2, 1)))])
def test_max_pool_gradient(values, padding, strides):
  x = POOL_INPUTS[values].reshape(1, 4, 5, 1)
  traced(lambda x: jax.grad(lambda x: _weighted_sum(_pool(x, padding, strides)))(x), x)


@pytest.mark.parametrize("values,padding", [
  *[param(v, p, name="select_and_gather_add", dtype=np.float32, id=f"{v}-{p}")
    for v, p in (("ties", "VALID"), ("edges", "VALID"), ("distinct", "VALID"), ("distinct", "SAME"), ("ties", "SAME"))]])
def test_max_pool_jvp(values, padding):
  x = POOL_INPUTS[values].reshape(1, 4, 5, 1)
  traced(lambda x, t: jax.jvp(lambda x: _pool(x, padding), (x,), (t,))[1], x, np.arange(20.0, dtype=np.float32)
         .reshape(x.shape))


# Windows whose maxima tie, as XLA's CPU reduce_window walks them (row-major, but the last window index of some padded
# dimensions last): (shape, window, strides, padding), each branch of the measured rule and its neighbours
TIED_WINDOWS = [
  ((4, 5), (2, 2), (1, 1), ((0, 0), (0, 0))),  # unpadded: row-major
  ((4, 5), (2, 2), (1, 1), ((0, 1), (0, 1))),  # SAME, stride 1: the last column last (column-major)
  ((4, 5), (2, 2), (1, 1), ((0, 0), (1, 0))),  # 2 wide, padded before
  ((4, 5), (2, 2), (1, 1), ((0, 1), (0, 0))),  # the first dimension padded only: row-major
  ((5, 6), (3, 3), (1, 1), ((0, 0), (0, 1))),  # 3 wide, (0, 1): the last column last
  ((5, 6), (3, 3), (1, 1), ((1, 1), (1, 0))),  # 3 wide otherwise padded: row-major
  ((4, 6), (2, 2), (2, 2), ((0, 0), (0, 1))),  # the padding no window reaches: row-major
  ((4, 6), (2, 2), (2, 2), ((0, 0), (0, 2))),  # reached by a window wholly padding only: row-major
  ((3, 4, 5), (2, 2, 2), (1, 1, 1), ((0, 0), (0, 1), (0, 0))),  # a middle dimension
  ((3, 4, 5), (2, 2, 2), (1, 1, 1), ((0, 0), (0, 1), (0, 1))),  # two: the last one's index last
  ((1, 4, 5, 2), (1, 2, 2, 1), (1, 1, 1, 1), ((0, 0), (0, 1), (0, 1), (0, 1))),  # NHWC: a padded window of 1
]


@pytest.mark.parametrize("reducer", [lax.max, lax.min], ids=["max", "min"])
@pytest.mark.parametrize("shape,window,strides,padding", TIED_WINDOWS, ids=[str(i) for i in range(len(TIED_WINDOWS))])
def test_pool_jvp_ties(shape, window, strides, padding, reducer):
  """Which of several equal extremes a window's tangent comes from."""
  x = np.random.default_rng(len(shape) + sum(window)).integers(0, 2, shape).astype(np.float32)
  t = np.arange(x.size, dtype=np.float32).reshape(shape)
  identity = -np.inf if reducer is lax.max else np.inf
  pool = lambda x: lax.reduce_window(x, identity, reducer, window, strides, padding)
  traced(lambda x, t: jax.jvp(pool, (x,), (t,))[1], x, t)


def test_min_pool_gradient():
  x = POOL_INPUTS["ties"].reshape(1, 4, 5, 1)
  traced(lambda x: jax.grad(lambda x: _weighted_sum(_pool(x, "SAME", (1, 1, 1, 1), lax.min)))(x), x)


# --- the jnp functions built on them

X = data((5, 4), np.float32)
INDEX = np.array([3, -1, 0, 3, -5], np.int32)
OUT_OF_RANGE = np.array([1, 7, -9, 4], np.int32)


@pytest.mark.parametrize("fn,args", [
  param(lambda np_, x, i: np_.asarray(x)[i], (X, INDEX), name="gather", id="x[i]"),
  param(lambda np_, x, i: np_.asarray(x)[i, :, i], (data((5, 3, 5), np.float32), INDEX), name="gather", id="x[i,:,i]"),
  param(lambda np_, x, i: np_.asarray(x)[1:, i[:2]], (X, np.array([2, -4], np.int32)), name="gather", id="x[1:,i]"),
  param(lambda np_, x, i: np_.take(x, i, axis=1, mode="fill", fill_value=-1.0), (X, OUT_OF_RANGE), name="gather",
        id="take-fill"),
  param(lambda np_, x, i: np_.take(x, i, axis=0, mode="clip"), (X, OUT_OF_RANGE), name="gather", id="take-clip"),
  param(lambda np_, x, i: np_.take(x, i, mode="wrap"), (X, OUT_OF_RANGE * 3), name="gather", id="take-wrap"),
  param(lambda np_, x, i: np_.take_along_axis(x, np_.asarray(i).reshape(5, 1) % 4, axis=1), (X, INDEX),
        name="gather", id="take_along_axis"),
  param(lambda np_, x, i: np_.asarray(x).at[i].set(np_.arange(20.0).reshape(5, 4)), (X, INDEX), name="scatter",
        id="at-set"),
  param(lambda np_, x, i: np_.asarray(x).at[i, 1].add(1.5), (X, INDEX), name="scatter-add", id="at-add"),
  param(lambda np_, x, i: np_.asarray(x).at[i].min(0.0), (X, OUT_OF_RANGE), name="scatter-min", id="at-min"),
  param(lambda np_, x, i: np_.asarray(x).at[:, i % 4].max(np_.ones(5)[:, None]), (X, OUT_OF_RANGE), name="scatter-max",
        id="at-max"),
  param(lambda np_, x, i: np_.asarray(x).at[i].multiply(-2.0, mode="clip"), (X, OUT_OF_RANGE), name="scatter-mul",
        id="at-multiply-clip"),
  param(lambda np_, x, i: np_.asarray(x).at[i].get(mode="fill", fill_value=5.0), (X, OUT_OF_RANGE), name="gather",
        id="at-get-fill"),
  param(lambda np_, x, i: np_.asarray(i).astype(np_.int32).at[i % 2].add(np_.asarray(i)), (X, INDEX),
        name="scatter-add", id="at-add-int"),
])
def test_jnp(fn, args):
  check(fn, *args)


def test_one_hot():
  traced(lambda i: jax.nn.one_hot(i, 4), np.array([0, 3, -1, 4, 2], np.int32))


def test_dynamic_slice_functions():
  traced(lambda x, i: [lax.dynamic_slice_in_dim(x, i, 3, axis=1), lax.dynamic_index_in_dim(x, i + 9, keepdims=False),
                       lax.dynamic_update_index_in_dim(x, jnp.zeros(4), -i, 0)], X, np.int32(2))


def _cross_entropy(logits, labels):
  log_probabilities = jax.nn.log_softmax(logits)
  return -jnp.sum(jnp.take_along_axis(log_probabilities, labels[:, None], axis=1))


def test_cross_entropy_gradient():
  logits, labels = data((512, 10), np.float32)[5:], np.random.default_rng(3).integers(0, 10, 507).astype(np.int32)
  check(lambda np_, x, y: (tinyjax.grad if np_ is not jnp else jax.grad)(_cross_entropy)(x, y), logits, labels,
        rtol=1e-5)


def test_embedding_lookup_and_gradient():
  table = np.random.default_rng(4).standard_normal((1000, 64)).astype(np.float32)
  tokens = np.random.default_rng(5).integers(0, 1000, (4, 8)).astype(np.int32)
  tokens[0, :3] = 17  # a repeated token: its gradient rows add up
  traced(lambda w, t: [jnp.asarray(w)[t], jax.grad(lambda w: jnp.sum(jnp.sin(w[t])))(w)], table, tokens, rtol=1e-5)
