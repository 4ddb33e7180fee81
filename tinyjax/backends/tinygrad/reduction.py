"""Reductions: sum, max, min, prod, and, or, xor, argmax, argmin; and the cumulative ops."""
from tinyjax.backends.tinygrad.table import register


@register("reduce_sum")
def _reduce_sum(ctx, x, *, axes, out_sharding=None):
  return x.sum(axis=tuple(axes)) if axes else x
