"""Shape primitives: broadcast_in_dim, reshape, transpose, squeeze, expand_dims, concatenate, pad, slice, rev,
iota, split."""
from tinyjax.backends.tinygrad.table import register


@register("broadcast_in_dim")
def _broadcast_in_dim(ctx, x, *dyn_shape, shape, broadcast_dimensions, sharding):
  kept = [1] * len(shape)
  for axis, size in zip(broadcast_dimensions, x.shape):
    kept[axis] = size
  return x.reshape(kept).expand(shape)


@register("reshape")
def _reshape(ctx, x, *dyn_shape, new_sizes, dimensions, sharding=None):
  return x.reshape(new_sizes)
