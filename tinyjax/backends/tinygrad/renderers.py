"""Fixes to tinygrad's renderers that tinyjax's rules need (FDIV on every renderer is floatmath.teach_division).

NB: tinygrad 0.14's WGSL renderer keeps arrays of 8- and 16-bit integers and bools packed four (two) to a u32 word.
A gated load of one with an alternative value (`where(gate, x[i], y)`, which tinygrad folds into the load) loaded the
word with y as its alternative and then extracted the field from the result: where the gate was false, y itself was
shifted and masked (a concatenation of bool arrays on WEBGPU came out wrong after its first piece). The fixed load
extracts the field from the loaded word, then selects the alternative.

NB: the same renderer's NaN literal, `nan()`, was the bits 0xffffffff: a NaN with the sign bit set, which XLA's
total order (sort, searchsorted, the `*_to` comparisons) puts below -inf, and signbit reads as negative. XLA's NaN
literal is 0x7fc00000.
"""
from tinygrad.dtype import dtypes
from tinygrad.renderer import wgsl
from tinygrad.uop.ops import Ops, PatternMatcher, UPat


def _packed_load_then_alternative(load):
  if not wgsl.is_packed(load) or len(load.src) < 3:
    return None
  index, alternative, gate = load.src[:3]
  word_load = load.replace(src=(index, alternative.const_like(0), gate))
  return gate.where(wgsl.packed_load(word_load), alternative)


def _with_positive_nan(render_kernel):
  def render(self, *args, **kwargs):
    return render_kernel(self, *args, **kwargs).replace("let bits = 0xffffffffu;", "let bits = 0x7fc00000u;")
  return render


def fix_wgsl() -> None:
  renderer = wgsl.WGSLRenderer
  if not getattr(renderer, "_tinyjax_fixed", False):
    fix = PatternMatcher([(UPat(Ops.LOAD, name="load"), _packed_load_then_alternative)])
    renderer.extra_matcher = fix + renderer.extra_matcher
    renderer.render_kernel = _with_positive_nan(renderer.render_kernel)
    renderer._tinyjax_fixed = True
