"""Values tinygrad has no dtype for, carried with a trailing dimension of 2: a typed threefry key array (`key<fry>`)
as its raw uint32 data (tinyjax.ir.keys), a complex array as its (real, imaginary) pairs of floats — the layout of
complex numbers in memory, so that a transfer to or from the host is a plain copy of the interleaved pairs.

Inside the backend a carried value is the Tensor of its data (float32[..., 2] for complex64); outside it (the
buffers of the Arrays a user holds, the data crossing to XLA) a complex value is a `PairBuffer`, which knows its
dtype. Layout primitives, and those that act on each part alike (add, reduce_sum, cumsum, ...), run their real
rule on the data with the trailing dimension added to their params; complexmath.py has the rest.
"""
import dataclasses

import jax
import numpy as np

from tinyjax.backends.tinygrad.table import layout
from tinyjax.ir import keys


def is_complex(dtype) -> bool:
  return jax.dtypes.issubdtype(dtype, np.complexfloating)  # NB: np.issubdtype refuses key<fry>


def real_dtype(dtype) -> np.dtype:
  """The dtype of a complex dtype's parts (float32 for complex64)."""
  return np.finfo(dtype).dtype


def carries(eqn) -> bool:
  """Whether an equation takes or gives a carried value."""
  return any(keys.is_key(a.dtype) or is_complex(a.dtype) for a in eqn.in_avals + eqn.out_avals)


def carried_aval(aval):
  """The aval of what the backend computes with: a key's raw data, a complex array's pairs, anything else itself."""
  if keys.is_key(aval.dtype):
    return keys.physical_aval(aval)
  if is_complex(aval.dtype):
    return jax.core.ShapedArray(aval.shape + (2,), real_dtype(aval.dtype))
  return aval


@dataclasses.dataclass(frozen=True)
class PairBuffer:
  """A complex array on the device, as the backend hands it out: its pairs (a Tensor, float[*shape, 2])."""
  pairs: object
  dtype: np.dtype


def to_pairs(host: np.ndarray) -> np.ndarray:
  """A complex host array's (real, imaginary) pairs: a view, float[*shape, 2]."""
  flat = np.ascontiguousarray(host).reshape(-1)  # NB: NumPy views no 0-d array as another itemsize
  return flat.view(real_dtype(host.dtype)).reshape(host.shape + (2,))


def from_pairs(pairs: np.ndarray, dtype) -> np.ndarray:
  return np.require(pairs, requirements=["C"]).view(dtype).reshape(pairs.shape[:-1])


def wrapped(value, aval):
  """What the backend computes with (`value`) as the buffer it hands out for `aval`."""
  return PairBuffer(value, np.dtype(aval.dtype)) if is_complex(aval.dtype) and not isinstance(value, np.ndarray) \
    else value


def unwrapped(buffer):
  return buffer.pairs if isinstance(buffer, PairBuffer) else buffer


def at_boundary(runner, program):
  """`runner` (inputs -> outputs, as the backend computes with them) taking and giving the buffers it hands out;
  `runner` itself when the program has no complex input or output."""
  avals = dict(enumerate(program.in_avals))
  avals.update((s, a) for e in program.eqns for s, a in zip(e.outputs, e.out_avals))
  out_avals = [avals[a] if isinstance(a, int) else a.aval for a in program.outputs]
  if not any(is_complex(a.dtype) for a in [*program.in_avals, *out_avals]):
    return runner

  def run(inputs):
    return [wrapped(x, aval) for x, aval in zip(runner([unwrapped(x) for x in inputs]), out_avals)]
  return run


# --- layout primitives and the primitives that act on each part alike: their real rule on the carried data, with
# the trailing dimension added to the params that name every dimension (those that name some need no change)
layout("squeeze", "rev", "concatenate", "split", "stack", "unstack", "copy", "copy_p", "sharding_constraint", "reshard",
       "dynamic_update_slice",
       "add", "add_any", "sub", "neg", "reduce_sum", "cumsum")(lambda in_avals, out_avals, **params: params)


@layout("slice")
def _slice(in_avals, out_avals, *, start_indices, limit_indices, strides):
  return dict(start_indices=(*start_indices, 0), limit_indices=(*limit_indices, 2),
              strides=None if strides is None else (*strides, 1))


@layout("reshape")
def _reshape(in_avals, out_avals, *, new_sizes, dimensions, sharding):
  return dict(new_sizes=(*new_sizes, 2), dimensions=None if dimensions is None else (*dimensions, len(dimensions)),
              sharding=sharding)


@layout("broadcast_in_dim")
def _broadcast(in_avals, out_avals, *, shape, broadcast_dimensions, sharding):
  return dict(shape=(*shape, 2), broadcast_dimensions=(*broadcast_dimensions, len(shape)), sharding=sharding)


@layout("transpose")
def _transpose(in_avals, out_avals, *, permutation):
  return dict(permutation=(*permutation, len(permutation)))


@layout("tile")
def _tile(in_avals, out_avals, *, reps):
  return dict(reps=(*reps, 1))


@layout("dynamic_slice")
def _dynamic_slice(in_avals, out_avals, *, slice_sizes):
  return dict(slice_sizes=(*slice_sizes, 2))  # the trailing dimension has no start operand: taken whole


@layout("gather")
def _gather(in_avals, out_avals, *, dimension_numbers, slice_sizes, **params):
  # the trailing dimension is one more window dimension, taken whole, last in the output
  return dict(params, slice_sizes=(*slice_sizes, 2), dimension_numbers=dimension_numbers._replace(
    offset_dims=(*dimension_numbers.offset_dims, out_avals[0].ndim)))


@layout("scatter", "scatter-add", "scatter-sub")
def _scatter(in_avals, out_avals, *, dimension_numbers, **params):
  # the trailing dimension is one more update window dimension, last in the updates
  return dict(params, dimension_numbers=dimension_numbers._replace(
    update_window_dims=(*dimension_numbers.update_window_dims, in_avals[2].ndim)))
