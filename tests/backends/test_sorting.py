"""sort and top_k on tinygrad, against JAX on XLA: XLA's order of floats (NaN last, -0.0 equal to 0.0 in sort but
below it in top_k), stability, several operands and keys, any dimension, and the jnp functions built on them."""
import jax
import numpy as np
import pytest
from jax import lax

from helpers import values
from oracle import check, check_lax, check_traced as traced
from xfail import param

EDGES = np.array([0.0, -0.0, np.nan, -np.nan, 1.0, -np.inf, np.inf, -0.0, 0.0, 1.0, -1.0, np.nan], np.float32)


def data(shape, dtype, seed=0):
  """Values with many duplicates; floats include the edges (NaN of both signs, +-inf, both zeros)."""
  return values(shape, dtype, seed, int_choices=lambda info: [info.min, info.max, 0, 1, 2, info.max - 1],
                float_choices=EDGES)


@pytest.mark.parametrize("dtype", [param(d, name="sort", dtype=d, id=d.__name__)
                                   for d in (np.float32, np.float16, jax.numpy.bfloat16, np.int32, np.uint8,
                                             np.bool_)])
def test_sort(dtype):
  check_lax("sort", data((3, 12), dtype))


@pytest.mark.parametrize("dimension", [param(d, name="sort", id=f"dimension{d}") for d in (0, 1, 2)])
def test_sort_dimension(dimension):
  check_lax("sort", data((4, 5, 6), np.float32), dimension=dimension)


@pytest.mark.parametrize("num_keys", [param(k, name="sort", id=f"keys{k}") for k in (1, 2, 3)])
def test_sort_operands(num_keys):
  """Several operands sorted together by the first num_keys, stably: the rest follow their keys."""
  operands = (data((2, 16), np.int32, 1) % 3, data((2, 16), np.float32, 2), data((2, 16), np.uint8, 3),
              np.arange(32, dtype=np.int32).reshape(2, 16))
  check_lax("sort", operands, num_keys=num_keys)


def test_sort_long_row():
  check_lax("sort", (np.random.default_rng(4).standard_normal(1000).astype(np.float32),
                     np.arange(1000, dtype=np.int32)))


@pytest.mark.parametrize("dtype,axis", [param(d, a, name="top_k", dtype=d, id=f"{d.__name__}-axis{a}")
                                        for d, a in ((np.float32, 1), (np.float32, 0), (np.int32, 1),
                                                     (np.uint8, 1), (np.float16, 1))])
def test_top_k(dtype, axis):
  check_lax("top_k", data((4, 12), dtype), 3, axis=axis)


def test_top_k_all_edges():
  check_lax("top_k", EDGES, EDGES.size)


@pytest.mark.parametrize("fn", [
  param(lambda np_, x: np_.sort(x), name="sort", id="sort"),
  param(lambda np_, x: np_.sort(x, axis=0, descending=True), name="sort", id="sort-descending"),
  param(lambda np_, x: np_.argsort(x), name="sort", id="argsort"),
  param(lambda np_, x: np_.argsort(x, axis=0, descending=True), name="sort", id="argsort-descending"),
  param(lambda np_, x: np_.lexsort((x[:, 0], np_.round(x[:, 1]))), name="sort", id="lexsort"),
  param(lambda np_, x: np_.partition(x, 3, axis=1), name="top_k", id="partition"),
  param(lambda np_, x: np_.argpartition(x, 2, axis=1), name="top_k", id="argpartition"),
  param(lambda np_, x: np_.median(x, axis=1), name="sort", id="median"),
  param(lambda np_, x: np_.unique(x, size=6, fill_value=0.0), name="sort", id="unique"),
  param(lambda np_, x: np_.searchsorted(np_.sort(x[0]), x[1]), name="sort", id="searchsorted"),
])
def test_jnp(fn):
  check(fn, data((5, 8), np.float32))


def test_lax_top_k():
  traced(lambda x: jax.lax.top_k(x, 3), data((3, 9), np.float32))


def test_sort_key_val():
  traced(lambda k, v: lax.sort_key_val(k, v, dimension=0), data((7, 2), np.float32), data((7, 2), np.int32, 1))
