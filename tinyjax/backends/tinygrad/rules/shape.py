"""Shape primitives: broadcast_in_dim, reshape, transpose, squeeze, concatenate, pad, slice, rev, iota, split,
stack, unstack, tile, copy, empty2. (jnp.expand_dims traces to broadcast_in_dim: there is no expand_dims primitive.)

All of them are movement ops on tinygrad's lazy Tensors, except concatenate and pad (selects between padded
pieces), iota (an arange) and copy (a contiguous tensor).
"""
from tinygrad import Tensor, dtypes

from tinyjax.backends.tinygrad.table import register, tg_dtype


def _along(axis: int, ndim: int, value, default=None) -> tuple:
  """A per-dimension argument that is `value` on `axis` and `default` elsewhere (tinygrad's pad/shrink style)."""
  return tuple(value if d == axis else default for d in range(ndim))


@register("broadcast_in_dim")
def _broadcast_in_dim(ctx, x, *dyn_shape, shape, broadcast_dimensions, sharding):
  kept = [1] * len(shape)
  for axis, size in zip(broadcast_dimensions, x.shape):
    kept[axis] = size
  return x.reshape(kept).expand(shape)


@register("reshape")
def _reshape(ctx, x, *dyn_shape, new_sizes, dimensions, sharding):
  # `dimensions` (lax.reshape's optional permutation) transposes the operand before reshaping it
  return (x if dimensions is None else x.permute(dimensions)).reshape(new_sizes)


@register("transpose")
def _transpose(ctx, x, *, permutation):
  return x.permute(permutation)


@register("squeeze")
def _squeeze(ctx, x, *, dimensions):
  return x.reshape(ctx.out_aval.shape)


@register("concatenate")
def _concatenate(ctx, *operands, dimension):
  # NB: tinygrad's cat adds up zero-padded pieces, which turns -0.0 into +0.0: select each piece in instead
  pieces = [x for x in operands if x.shape[dimension]] or operands[:1]
  total, start, joined = sum(x.shape[dimension] for x in pieces), 0, None
  for x in pieces:
    size = x.shape[dimension]
    edges = _along(dimension, x.ndim, (start, total - start - size))
    inside = Tensor.full(x.shape, True, buffer=False).pad(edges)
    joined = x.pad(edges) if joined is None else inside.where(x.pad(edges), joined)
    start += size
  return joined


@register("split")
def _split(ctx, x, *, sizes, axis):
  return list(x.split([int(size) for size in sizes], dim=axis))


@register("stack")
def _stack(ctx, first, *rest, axis):
  return first.stack(*rest, dim=axis)


@register("unstack")
def _unstack(ctx, x, *, axis):
  return [x.shrink(_along(axis, x.ndim, (i, i + 1))).squeeze(axis) for i in range(x.shape[axis])]


@register("tile")
def _tile(ctx, x, *, reps):
  return x.repeat(reps)


@register("rev")
def _rev(ctx, x, *, dimensions):
  return x.flip(dimensions)


@register("slice")
def _slice(ctx, x, *, start_indices, limit_indices, strides):
  steps = strides or (1,) * x.ndim
  # NB: ints, as tinygrad takes them: JAX's own rules (fft's transpose) slice with NumPy integers
  return x[tuple(slice(int(start), int(limit), int(step))
                 for start, limit, step in zip(start_indices, limit_indices, steps))]


def _dilate(x, axis: int, interior: int):
  """`interior` zeros (False for bool) between neighbours along `axis`: [a, b] -> [a, 0, 0, b]."""
  size = x.shape[axis]
  spread = x.unsqueeze(axis + 1).pad(_along(axis + 1, x.ndim + 1, (0, interior))).flatten(axis, axis + 1)
  return spread.shrink(_along(axis, x.ndim, (0, max(size * (1 + interior) - interior, 0))))


@register("pad")
def _pad(ctx, x, padding_value, *, padding_config):
  # XLA's order: interior padding first, then low/high edges, where a negative edge crops (tinygrad's pad does too).
  # The padding value is an operand, not a constant: pad with zeros and select it in through a mask of x's cells.
  inside = Tensor.full(x.shape, True, buffer=False)
  if any(interior for _, _, interior in padding_config):
    # NB: x is computed into a buffer of its own first: else tinygrad fuses its producer (a convolution, in the
    # gradient of avg_pool after conv) into the dilated index space, computing it at every cell, zeros included
    x = x.contiguous()
  for axis, (_, _, interior) in enumerate(padding_config):
    if interior:
      x, inside = _dilate(x, axis, interior), _dilate(inside, axis, interior)
  edges = tuple((int(low), int(high)) for low, high, _ in padding_config)
  return inside.pad(edges).where(x.pad(edges), padding_value)


@register("iota")
def _iota(ctx, *dyn_shape, dtype, shape, dimension, sharding):
  # counting in int32 then casting gives XLA's values: small ints wrap, float16 rounds to nearest even
  count = Tensor.arange(shape[dimension], dtype=dtypes.int32).cast(tg_dtype(dtype))
  return count.reshape(_along(dimension, len(shape), shape[dimension], 1)).expand(shape)


@register("empty2")
def _empty2(ctx, *, dtype, memory_space):
  # NB: an uninitialized scalar (scan's placeholder for a residual a branch does not compute); XLA makes it 0
  return Tensor.zeros((), dtype=tg_dtype(dtype), device=ctx.device)


@register("copy")
def _copy(ctx, x):
  return x.contiguous()


@register("sharding_constraint", "reshard")
def _placed(ctx, x, **_):
  # NB: a program runs on one device, where a value's sharding moves nothing
  return x
