"""How tinygrad's CPU device (C through clang) shapes long elementwise kernels.

NB: tinygrad's hand-coded heuristic upcasts every elementwise kernel by 4 (one float4 load, then four scalar copies of
the body). On the CPU device clang then cannot vectorize the loop: eager selu on 1e6 floats took 7.3 ms there,
against 2.1 ms for JAX's six separate XLA ops. Without the upcast clang's loop vectorizer turns the same body into
SIMD code (the kernel runs ~4x faster). Only long loops are left to clang: a short one, upcast, has constant indices
that tinygrad folds, and clang spent minutes on one short loop it had to analyse itself (a float exponent's chain of
integer clamps over the loop index). Kernels with a reduction keep tinygrad's choice: their upcasts are register
blocking that clang does not do by itself.
"""
import math

from tinygrad.codegen.opt import KernelOptError, OptOps, heuristic
from tinygrad.uop.ops import AxisType

LONG_LOOP = 1 << 16  # elements: below this the kernel takes microseconds either way


def _long_elementwise_on_clang(kernel) -> bool:
  return (kernel.ren.target.device == "CPU" and not kernel.axes_of(AxisType.REDUCE, AxisType.GROUP_REDUCE)
          and math.prod(kernel.full_shape) >= LONG_LOOP)


def _without_upcasts(hand_coded):
  def optimize(kernel):
    tuned = hand_coded(kernel)
    if not _long_elementwise_on_clang(kernel):
      return tuned
    loop = kernel.copy()
    try:
      for opt in tuned.applied_opts:
        if opt.op is not OptOps.UPCAST:
          loop.apply_opt(opt)
    except KernelOptError:  # an opt whose axis only existed after an upcast: keep tinygrad's kernel
      return tuned
    return loop
  optimize._tinyjax_vectorizable = True
  return optimize


def vectorizable_elementwise_kernels() -> None:
  if not getattr(heuristic.hand_coded_optimizations, "_tinyjax_vectorizable", False):
    heuristic.hand_coded_optimizations = _without_upcasts(heuristic.hand_coded_optimizations)
