"""Elementwise primitives: unary and binary math, comparisons, bitwise ops and shifts, selection, casts.

Where tinygrad's obvious op differs from XLA (see shared/BRIEF.md), the rule says so with `# NB:`.
"""
import operator

from tinyjax.backends.tinygrad.table import register


def _binary(op):
  def rule(ctx, x, y, **params):
    return op(x, y)
  return rule


register("add")(_binary(operator.add))
register("mul")(_binary(operator.mul))


@register("sin")
def _sin(ctx, x, *, accuracy=None):
  return x.sin()


@register("neg")
def _neg(ctx, x):
  return -x
