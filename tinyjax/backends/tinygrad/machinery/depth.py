"""Bounding the depth of the expressions a native segment builds, so that every kernel compiles.

tinygrad renders an operation used once inline, inside its user's expression: a chain of N elementwise operations
with no buffer between them becomes one C expression nested N deep (two levels per cast). clang refuses more than
256 levels of brackets ("bracket nesting level exceeded maximum of 256"), and a long eager loop with no read in
between (`x = x * 1.0001 + 0.5`, 20,000 times) builds such a chain. So each equation's outputs are measured as
they are built: an output deeper than `MAX_DEPTH` is rebuilt from its inputs deeper than half that made
contiguous (a kernel boundary: a buffer is written there), so no kernel nests deeper than about `MAX_DEPTH` plus
one equation's own depth. An equation deep by itself (a float64 polynomial) is left whole: cutting its shallow
inputs would not make it shallower, and would keep tinygrad from folding the constants it computes from.
"""
from tinygrad import Tensor
from tinygrad.uop.ops import GroupOp, Ops

# NB: in elementwise operations; 2 levels of brackets per operation at most (a cast), plus what one equation adds
MAX_DEPTH = 64
_NESTING = GroupOp.Elementwise | {Ops.REDUCE}
# A kernel reads these from memory (or as a literal): nothing nests below them.
_LEAVES = {Ops.BUFFER, Ops.CONST, Ops.CONTIGUOUS, Ops.COPY}


class Bounded:
  """`apply` for one run of a native segment: applies each rule, cutting inputs where an output grows too deep."""

  def __init__(self, apply):
    self.apply = apply
    self.depths: dict = {}  # UOp -> depth; UOps are interned, so a subexpression is measured once per run

  def __call__(self, eqn, inputs):
    outs = self.apply(eqn, inputs)
    if max((self.depth(t.uop) for t in outs if isinstance(t, Tensor)), default=0) <= MAX_DEPTH:
      return outs
    deep = [isinstance(t, Tensor) and self.depth(t.uop) > MAX_DEPTH // 2 for t in inputs]
    if not any(deep):
      return outs
    return self.apply(eqn, [t.contiguous() if cut else t for t, cut in zip(inputs, deep)])

  def depth(self, root) -> int:
    """The nesting of the expression that computes `root` inside one kernel (iteratively: chains are deep)."""
    depths = self.depths
    stack = [root]
    while stack:
      uop = stack[-1]
      if uop in depths:
        stack.pop()
      elif uop.op in _LEAVES or not uop.src:
        depths[uop] = 0
        stack.pop()
      elif pending := [s for s in uop.src if s not in depths]:
        stack.extend(pending)
      else:
        depths[uop] = (uop.op in _NESTING) + max(depths[s] for s in uop.src)
        stack.pop()
    return depths[root]
