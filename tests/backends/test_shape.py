"""Shape primitives on tinygrad, against JAX on XLA: each primitive in every dtype, with 0-d operands, size-0
dimensions and the awkward parameters (negative and interior padding, strided and empty slices, permuting
reshapes), and the jax.numpy functions built from them."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from helpers import values
from oracle import check, check_traced
from xfail import param

DTYPES = [np.float32, np.float16, np.int8, np.int32, np.uint8, np.uint32, np.bool_]


def data(shape, dtype, seed=0):
  """Distinct-looking values with the dtype's edge values mixed in (NaN, +-inf, -0.0; the integer extremes)."""
  return values(shape, dtype, seed, int_extremes=True, float_edges=(np.nan, np.inf, -np.inf, -0.0))


def edge_value(dtype):
  """A padding value that stands out: NaN, the integer minimum, True."""
  if dtype == np.bool_:
    return np.bool_(True)
  return dtype(np.iinfo(dtype).min) if np.issubdtype(dtype, np.integer) else dtype(np.nan)


# Each case: fn(x, scalar, empty, padding) -> list of results; x is (3, 4), scalar 0-d, empty (0, 3).
CASES = {
  "broadcast_in_dim": lambda x, s, e, p: [lax.broadcast_in_dim(x, (2, 3, 4), (1, 2)),
                                          lax.broadcast_in_dim(x[:, :1], (3, 2, 4), (0, 2)),
                                          lax.broadcast_in_dim(s, (2, 3), ()),
                                          lax.broadcast_in_dim(e, (2, 0, 3), (1, 2))],
  "reshape": lambda x, s, e, p: [lax.reshape(x, (4, 3)), lax.reshape(x, (2, 6), (1, 0)), lax.reshape(s, (1, 1)),
                                 lax.reshape(e, (3, 0, 1))],
  "transpose": lambda x, s, e, p: [lax.transpose(x, (1, 0)), lax.transpose(lax.reshape(x, (2, 2, 3)), (2, 0, 1)),
                                   lax.transpose(e, (1, 0)), lax.transpose(s, ())],
  "squeeze": lambda x, s, e, p: [lax.squeeze(lax.reshape(x, (1, 3, 1, 4)), (0, 2)),
                                 lax.squeeze(lax.reshape(s, (1, 1)), (0, 1)),
                                 lax.squeeze(lax.reshape(e, (0, 1, 3)), (1,))],
  "concatenate": lambda x, s, e, p: [lax.concatenate([x, x[1:]], 0), lax.concatenate([x[:, :1], x, x[:, 2:]], 1),
                                     lax.concatenate([e, x[:, :3], e], 0), lax.concatenate([x], 1)],
  "pad": lambda x, s, e, p: [lax.pad(x, p, [(1, 2, 0), (0, 1, 1)]), lax.pad(x, p, [(-1, 1, 0), (2, -3, 2)]),
                             lax.pad(x, p, [(-2, -1, 1), (0, 0, 0)]), lax.pad(e, p, [(1, 1, 2), (0, -1, 1)]),
                             lax.pad(s, p, [])],
  "slice": lambda x, s, e, p: [lax.slice(x, (0, 1), (3, 4), (2, 2)), lax.slice(x, (1, 0), (3, 4)),
                               lax.slice(x, (1, 1), (1, 3)), lax.slice(x, (0, 0), (3, 4), (5, 3)),
                               lax.slice(e, (0, 1), (0, 3), (1, 2))],
  "rev": lambda x, s, e, p: [lax.rev(x, (0,)), lax.rev(x, (0, 1)), lax.rev(e, (1,)), lax.rev(s, ())],
  "split": lambda x, s, e, p: [*lax.split(x, (1, 3), axis=1), *lax.split(x, (0, 3), axis=0),
                               *lax.split(e, (2, 1), 1)],
  "stack": lambda x, s, e, p: [lax.stack([x, x], 1), lax.stack([s, s, s]), lax.stack([e], 2)],
  "unstack": lambda x, s, e, p: [*lax.unstack(x, 1), *lax.unstack(e, 0), *lax.unstack(e, 1)],
  "tile": lambda x, s, e, p: [lax.tile(x, (2, 3)), lax.tile(x, (1, 0)), lax.tile(e, (2, 1)),
                              lax.tile(lax.reshape(s, (1,)), (3,))],
  "copy": lambda x, s, e, p: [jnp.array(x, copy=True), jnp.array(s, copy=True), jnp.array(e, copy=True)],
}


@pytest.mark.parametrize("prim, dtype", [param(prim, dtype, name=prim, dtype=dtype, id=f"{prim}-{np.dtype(dtype).name}")
                                         for prim in CASES for dtype in DTYPES])
def test_shape(prim, dtype):
  check_traced(CASES[prim], data((3, 4), dtype), data((), dtype, seed=1), data((0, 3), dtype), edge_value(dtype))


@pytest.mark.parametrize("dtype", [param(dtype, name="iota", dtype=dtype, id=np.dtype(dtype).name)
                                   for dtype in DTYPES if dtype != np.bool_])
def test_iota(dtype):
  check_traced(lambda: [lax.iota(dtype, 5), lax.broadcasted_iota(dtype, (2, 3), 1),
                        lax.broadcasted_iota(dtype, (2, 3), 0), lax.iota(dtype, 0)])


def test_iota_wraps_and_rounds():
  """int8 counts wrap past 127; float16 rounds odd counts past 2048 to even."""
  check_traced(lambda: [lax.iota(np.int8, 300), lax.iota(np.uint8, 300), lax.iota(np.float16, 2100)])


def test_shape_ops_on_a_computed_value():
  """Movement ops applied to a lazy result, not only to a program input."""
  check_traced(lambda x: [lax.pad(x * 2, np.float32(-1), [(1, 0, 1), (0, 2, 0)]), lax.rev(x + 1, (1,))[::2],
                          lax.concatenate([x * 3, lax.transpose(x, (1, 0))[:3]], 1)], data((3, 4), np.float32))


# --- jax.numpy functions built from these primitives

NUMPY_FUNCTIONS = {
  "concatenate": lambda np, x: np.concatenate([x, x[:1], x[:0]], axis=0),
  "pad-constant": lambda np, x: np.pad(x, ((1, 2), (0, 1)), constant_values=-7),
  "pad-edge": lambda np, x: np.pad(x, ((2, 1), (1, 3)), mode="edge"),
  "pad-reflect": lambda np, x: np.pad(x, ((2, 1), (1, 3)), mode="reflect"),
  "pad-wrap": lambda np, x: np.pad(x, ((1, 1), (2, 2)), mode="wrap"),
  "strided-index": lambda np, x: x[::2, 1::-1],
  "negative-step": lambda np, x: x[::-2, ::-3],
  "flip": lambda np, x: np.flip(x),
  "transpose": lambda np, x: np.transpose(x),
  "moveaxis": lambda np, x: np.moveaxis(x[None], 0, 2),
  "split": lambda np, x: np.split(x, [1, 3], axis=1),
  "array_split": lambda np, x: np.array_split(x, 3, axis=0),
  "expand_dims": lambda np, x: np.expand_dims(x, (0, 2)),
  "squeeze": lambda np, x: np.squeeze(x[:1, None]),
  "stack": lambda np, x: np.stack([x, x + 1], axis=-1),
  "tile": lambda np, x: np.tile(x, (2, 1, 2)),
  "repeat": lambda np, x: np.repeat(x, 2, axis=1),
  "broadcast_to": lambda np, x: np.broadcast_to(x[:, :1], (2, 3, 4)),
  "reshape": lambda np, x: np.reshape(x * 2, (2, -1)),
  "ravel": lambda np, x: np.ravel(x.T),
  "arange": lambda np, x: np.arange(3, 11, 2, dtype=np.float32) + x[0, 0],
  "unstack": lambda np, x: np.unstack(x, axis=1),
  "copy": lambda np, x: np.copy(x),
}


@pytest.mark.parametrize("fn", NUMPY_FUNCTIONS.values(), ids=NUMPY_FUNCTIONS.keys())
def test_numpy_functions(fn):
  check(lambda np, x: fn(np, np.asarray(x)), data((3, 4), np.float32))
