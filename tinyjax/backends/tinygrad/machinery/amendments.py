"""Every amendment tinyjax makes to tinygrad 0.14, installed by `amend()` once, before tinygrad rewrites any kernel:
IEEE division on every renderer, its simplifier, its C-style, OpenCL C and WGSL renderers, its float16 emulation's
conversions, its buffer views, its gated loads, its compile cache shared across threads, a schedule's new kernels
compiled together (compile_together.py), its CL runtime's arguments, programs (one per binary), devices and compiles
on POCL, its CPU device's synchronize, kernel entries and calls, its CUDA device's graphs, its launches over several
devices, its TinyJit captures' buffers on CL and WEBGPU, its kernel heuristic and search (a policy of its own:
kernel_opts.py), and its lowered programs kept on disk (program_cache.py).
While a profile records (tinyjax.ir.profile), `kernels_timed` also times each kernel's compile, load and runs.
`kernel_context()` is the one set of tinygrad settings every kernel tinyjax compiles is made under (a flush, an
export). tests/backends/test_amendments.py checks each against JAX, and the tinygrad version they are written for.

NB: tinygrad 0.14's simplifier folds x + 0 -> x and x * 0 -> 0 for every dtype, whenever one operand is the constant
zero, also one it computed itself (`x > x` is False, a sum over nothing is 0, an upcast loop's first index is 0).
For floats IEEE (and XLA) gives -0.0 + 0.0 = +0.0, NaN * 0 = inf * 0 = NaN and -x * 0 = -0.0: the two rules keep
their folds for integers and bools only. (x + -0.0 is x exactly, left as an addition all the same.)

NB: tinygrad 0.14's C-style renderers (clang, OpenCL, Metal, CUDA, WGSL) drop the parentheses of an operand of
+ or * that is itself a + or *, the right one too: x * (y * z) became `x*y*z`, which C and WGSL compute as
(x * y) * z. Integer + and * wrap the same in any order; float ones round differently (x ** 5 is x * (x2 * x2), as
XLA multiplies it, not (x * x2) * x2). For floats only the left operand's parentheses go.

NB: tinygrad 0.14's WGSL renderer keeps arrays of 8- and 16-bit integers and bools packed four (two) to a u32 word.
A gated load of one with an alternative value (`where(gate, x[i], y)`, which tinygrad folds into the load) loaded the
word with y as its alternative and then extracted the field from the result: where the gate was false, y itself was
shifted and masked (a concatenation of bool arrays on WEBGPU came out wrong after its first piece). The fixed load
extracts the field from the loaded word, then selects the alternative.

NB: the same renderer's NaN literal, `nan()`, was the bits 0xffffffff: a NaN with the sign bit set, which XLA's
total order (sort, searchsorted, the `*_to` comparisons) puts below -inf, and signbit reads as negative. XLA's NaN
literal is 0x7fc00000.

NB: the same renderer writes a float32 -0.0 constant as `-0.0f`, which Dawn (on lavapipe) made +0.0
(`floor(-sqrt(x > x))` of NaNs stored +0.0): it is written `bitcast<f32>(0x80000000u)`, which keeps its sign. And it
casts a negative integer constant to u32 as `bitcast<u32>(value)`, which WGSL refuses where the value is no i32 (a
shader with `bitcast<u32>(-4294967295)`, from `jnp.diagflat(v, k=-1)`, failed to compile): the constant is written
as its u32, the value modulo 2**32, as the cast makes it.

NB: where a renderer lacks float16 (POCL has no cl_khr_fp16), tinygrad 0.14 computes it in float32 and converts at
each load and store: it flushed float16's subnormals to zero both ways and made 65504 < |x| < 65520 infinite, where
XLA keeps the subnormals and rounds those to 65504. The conversions between float16 and float32 are IEEE's now.

NB: tinygrad 0.14 makes a contiguous range of a buffer (`x[2:10]` made contiguous) a view of that buffer at an
offset, not a copy, on every device but CL and WEBGPU. Its kernels load and store vectors as if every buffer began on
a 16-byte boundary (clang's `int4` is `aligned(16)`, CUDA's loads of four floats need it too): a kernel reading
`x[2:10]` of an int32 buffer through the view read from 8 bytes past a boundary, and the CPU died of a segmentation
fault. A view is made only where its offset is a multiple of 16 bytes; elsewhere the range is copied by a kernel.

NB: tinygrad 0.14 folds `where(gate, cast(load(gated by gate)), y)` into a load whose alternative is y, cast to the
load's dtype (codegen/late/gater.py, move_where_load): where y is not exact in that dtype, it was truncated. A float
array concatenated with four int32 scalars converted to float32 (`jnp.r_[-1:1:6j, [0] * 3, 5, 6]`) came out with
the float piece cut to integers (0.2 -> 0). The fold is kept where the alternative is exact in the load's dtype.
"""
import atexit
import collections
import ctypes
import functools
import inspect
import linecache
import math
import struct
import subprocess
import sys
import threading
import time
import weakref

from tinygrad import codegen, tensor
from tinygrad.codegen.decomp import dtype as decomp_dtype
from tinygrad.codegen.late import gater
from tinygrad.device import Compiled, Device, MultiBuffer
from tinygrad.dtype import dtypes
from tinygrad.engine import jit, realize
from tinygrad.helpers import PARALLEL, strip_parens
from tinygrad.renderer import cstyle, ptx, wgsl
from tinygrad.runtime import ops_cpu, ops_cuda
from tinygrad.runtime.autogen import libc
from tinygrad.runtime.support import elf
from tinygrad.runtime.support.compiler_cpu import ClangCompiler
from tinygrad.schedule import memory
from tinygrad.uop import symbolic
from tinygrad.uop.ops import AxisType, Ops, PatternMatcher, UPat, graph_rewrite, python_alu

from tinyjax.backends.tinygrad.machinery import compile_together, kernel_opts, program_cache

# The folds of `x <op> 0` (tinygrad.uop.symbolic.symbolic_simple), as they are for integers and bools.
# NB: lambdas without closures in symbolic's names (dtypes): tinygrad compiles a rule from its function's code and
# the globals it names, at the rule's first use; each is the new code of tinygrad's own function, which every
# matcher built from symbolic_simple shares.
_ADD_ZERO = lambda x: None if dtypes.is_float(x.dtype) else x  # noqa: E731
_MUL_ZERO = lambda x: None if dtypes.is_float(x.dtype) else x.const_like(0)  # noqa: E731
_ZERO_FOLDS = {frozenset({Ops.ADD, Ops.XOR, Ops.OR}): _ADD_ZERO, frozenset({Ops.MUL}): _MUL_ZERO}


def zero_folds() -> list:
  """tinygrad's rules `x <op> 0` (op ADD/XOR/OR, or MUL), as (pattern, function)."""
  return [(p, fxn) for p, fxn in symbolic.symbolic_simple.patterns
          if p.op is not None and frozenset(p.op) in _ZERO_FOLDS
          and [(s.op, s.arg, s.name) for s in p.src[0]] == [(None, None, "x"), ((Ops.CONST,), 0, None)]]


def _keep_float_zeros() -> None:
  folds = zero_folds()
  assert len(folds) == 2, f"tinygrad's x + 0 and x * 0 rules have changed: {folds}"
  for pattern, fxn in folds:
    fxn.__code__ = _ZERO_FOLDS[frozenset(pattern.op)].__code__


# tinygrad's rules that regroup float arithmetic where XLA does not, or cancel a float operand (tinygrad.uop.symbolic),
# by the text of the rule's function, each with its count, and that function declining where the result is a float.
# NB: as _ADD_ZERO's, lambdas without closures in symbolic's names. XLA's own regroupings are kept: its simplifier
# folds (x op c1) op c2 into x op (c1 op c2) for + and *, and (x / y) / z into x / (y * z), as tinygrad does.
_FLOAT_INEXACT_RULES = {
  "lambda x,c0,c1: x*(c0+c1)": (1, lambda x,c0,c1: None if dtypes.is_float(x.dtype) else x*(c0+c1)),  # noqa: E231
  "lambda x,y,c0,c1: y+x*(c0+c1)": (1, lambda x,y,c0,c1: None if dtypes.is_float(x.dtype) else y+x*(c0+c1)),  # noqa
  "lambda x,c: x*(c+1)": (1, lambda x,c: None if dtypes.is_float(x.dtype) else x*(c+1)),  # noqa: E231
  "lambda x,y,c: y+x*(c+1)": (2, lambda x,y,c: None if dtypes.is_float(x.dtype) else y+x*(c+1)),  # noqa: E231
  "lambda y,x: y+x*2": (1, lambda y,x: None if dtypes.is_float(x.dtype) else y+x*2),  # noqa: E231
  "lambda y,c,t,tt,f,ff: y+c.where(t+tt, f+ff)":
    (1, lambda y,c,t,tt,f,ff: None if dtypes.is_float(y.dtype) else  # noqa: E231
     y+c.where(t+tt, f+ff) if t.op == tt.op == Ops.CONST or f.op == ff.op == Ops.CONST else None),
  "lambda x,c1,y: (x+y)+c1": (1, lambda x,c1,y: None if dtypes.is_float(x.dtype) or y.op is Ops.CONST else (x+y)+c1),
  "lambda x,c1,y: (x*y)*c1": (1, lambda x,c1,y: None if dtypes.is_float(x.dtype) or y.op is Ops.CONST else (x*y)*c1),
  ") / UPat.var(\"x\"), lambda x: x.const_like(1)": (1, lambda x: None if dtypes.is_float(x.dtype) else x.const_like(1)),
  "lambda x,x2: x), # (x*x2)/x2": (1, lambda x,x2: None if dtypes.is_float(x.dtype) else x),  # noqa: E231
}


def float_inexact_rules() -> dict[str, list]:
  """tinygrad's symbolic rules in _FLOAT_INEXACT_RULES: {text: [function, ...]}."""
  found: dict[str, list] = {text: [] for text in _FLOAT_INEXACT_RULES}
  for _, fxn in symbolic.symbolic.patterns:
    line = linecache.getline(fxn.__code__.co_filename, fxn.__code__.co_firstlineno)
    for text in found:
      # NB: an amended rule's code is tinyjax's (its line is here): the rule says which it was
      if (text in line or getattr(fxn, "tinyjax_rule", None) == text) and fxn not in found[text]:
        found[text].append(fxn)
  return found


def _keep_float_arithmetic() -> None:
  """Decline tinygrad's rules that regroup float arithmetic where XLA does not ((x + c1) + y -> (x + y) + c1,
  x*c0 + x*c1 -> x*(c0 + c1), x + x*c -> x*(c + 1), (y + x) + x -> y + x*2, ...) or cancel a float operand (x / x -> 1,
  (x*x2)/x2 -> x) where the result is a float: integer and index arithmetic keeps them.

  NB: tinygrad 0.14 applies them to every dtype. XLA computes a float x*c0 + x*c1 as written (a fused multiply-add
  of one product into the other, as clang contracts it) and sums in the order written, so each regrouping rounded
  differently: lgamma's Lanczos sum, 1 + a + b computed as (a + b) + 1, differed from XLA's in a quarter of float32
  inputs. x / x is NaN for 0, inf and NaN.
  """
  for text, fxns in float_inexact_rules().items():
    count, replacement = _FLOAT_INEXACT_RULES[text]
    assert len(fxns) == count, f"tinygrad's rule {text!r} has changed: found {len(fxns)}, expected {count}"
    for fxn in fxns:
      fxn.__code__, fxn.tinyjax_rule = replacement.__code__, text


# tinygrad's simplify_valid, kept for the ANDs of bools it is for (symbolic's names: its code runs there)
_VALIDS_ONLY = lambda valid: tinyjax_simplify_valid(valid) if valid.dtype == dtypes.bool else None  # noqa


def _simplify_only_bool_valids() -> None:
  """NB: tinygrad 0.14's rule that simplifies a gate (`valid`, an AND of conditions) matches every AND, also integer
  masks, and each match first walks the operand's whole graph (`op_in_backward_slice_with_self`): the integer masks
  of a chain of float16 roundings (a 16-bit sum folded as XLA folds it) made a kernel's rewrite quadratic in its
  length (seconds for a hundred additions). On an integer AND the rule finds no condition and changes nothing."""
  original = symbolic.simplify_valid
  symbolic.tinyjax_simplify_valid = type(original)(original.__code__, vars(symbolic), "tinyjax_simplify_valid")
  original.__code__ = _VALIDS_ONLY.__code__


def c_style_renderers() -> list:
  """tinygrad's C-style renderer classes (OpenCL C, WGSL, Metal, CUDA, HIP, clang), each subclass of CStyleLanguage."""
  renderers, pending = [], [cstyle.CStyleLanguage]
  while pending:
    renderers.append(pending.pop())
    pending.extend(renderers[-1].__subclasses__())
  return renderers


def _fold_division(x, y):
  if y != 0:
    return x / y
  return math.nan if x == 0 or math.isnan(x) else math.copysign(math.inf, x) * math.copysign(1.0, y)


def _c_division(a, b, dtype):
  return f"({a}/{b})"


def _ptx_division(d, a, b, dtype, name):
  return f"div.rn.{name} {d}, {a}, {b};"


def _half_division(a, b):
  return a.cast(dtypes.float32).alu(Ops.FDIV, b.cast(dtypes.float32)).cast(dtypes.half)


def _teach_division() -> None:
  """Make Ops.FDIV an operation of every tinygrad renderer, and foldable on constants.

  NB: tinygrad 0.14 has the FDIV op but only its clang, LLVM, NIR and x86 renderers emit it: OpenCL, WGSL, Metal, CUDA,
  HIP and PTX failed with KeyError: Ops.FDIV, and its python_alu (constant folding, the PYTHON device) lacks it.
  `a / b` is IEEE division in every C-style language (OpenCL C, WGSL, Metal, CUDA, HIP), PTX's is div.rn (which
  divides float16 as float32). A renderer that knows FDIV also turns tinygrad's own reciprocals into divisions
  (decomp/op.py), as clang's already does.
  """
  # NB: kernels compile in the process that learned this, not in tinygrad's pool of spawned workers, which import
  # tinygrad alone (a `tiny` function's Tensors, realized by the user, failed with KeyError: Ops.FDIV on CL); tinyjax's
  # own helpers, which make these amendments, lower over the cores instead (lowering_helpers.py)
  PARALLEL.value = 0
  python_alu.setdefault(Ops.FDIV, _fold_division)
  for renderer in c_style_renderers():
    if Ops.FDIV not in renderer.code_for_op:
      renderer.code_for_op = {**renderer.code_for_op, Ops.FDIV: _c_division}
  ptx.asm_for_op.setdefault(Ops.FDIV, _ptx_division)
  half = PatternMatcher([(UPat(Ops.FDIV, dtype=dtypes.half, src=(UPat.var("a"), UPat.var("b"))), _half_division)])
  ptx.PTXRenderer.extra_matcher = half + ptx.PTXRenderer.extra_matcher


def _logical_on_bools(bitwise: str):
  """C's `a&b` (`a|b`) as tinygrad renders it, but `a&&b` (`a||b`) where the operands are bools."""
  return lambda a, b, dtype: f"({a}{bitwise * 2 if dtype == dtypes.bool else bitwise}{b})"


def _bool_logic_as_logical_on_opencl() -> None:
  """NB: tinygrad's OpenCL C renders the AND of two bools as C's bitwise `a&b`. POCL 5 / LLVM on x86 vectorizes a
  kernel with many of them (a gradient of svd's singular values: r_4_6_2_2, 48 bool ANDs) into an i8 vector
  broadcast that its instruction selection cannot lower ("LLVM ERROR: Cannot select: v16i8 = X86ISD::VBROADCAST"),
  and aborts the whole process in the compiler. `&&` / `||` of two bool values is the same value (both operands are
  computed already), and compiles."""
  for renderer in [cstyle.OpenCLRenderer, *cstyle.OpenCLRenderer.__subclasses__()]:
    renderer.code_for_op = {**renderer.code_for_op, Ops.AND: _logical_on_bools("&"), Ops.OR: _logical_on_bools("|")}


def _float_chain(ctx, x):
  """A float x + y or x * y as C-style code that keeps its order: only the left operand's parentheses dropped."""
  if not dtypes.is_float(x.dtype):
    return None  # tinygrad's own rendering
  left, right = x.src
  return ctx.code_for_op[x.op](strip_parens(ctx[left]) if left.op is x.op else ctx[left], ctx[right], x.dtype)


def _keep_float_order() -> None:
  order = PatternMatcher([(UPat((Ops.ADD, Ops.MUL), name="x"), _float_chain)])
  for renderer in c_style_renderers():
    if "string_rewrite" in vars(renderer):  # the others inherit an amended one
      renderer.string_rewrite = order + renderer.string_rewrite


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


_WGSL_CONSTANTS = PatternMatcher([
  (UPat.cvar("c").cast(dtypes.float),
   lambda c: "bitcast<f32>(0x80000000u)" if c.val == 0 and math.copysign(1, c.val) < 0 else None),
  (UPat.cvar("c").cast((dtypes.uchar, dtypes.ushort, dtypes.uint32)),
   lambda c: f"{c.val & 0xFFFFFFFF}u" if isinstance(c.val, int) else None),
])


_FLOAT16_SMALLEST_NORMAL_BITS = 0x38800000  # 2**-14 as float32 bits: below it, float16 is subnormal


def _float16_subnormals_kept(convert):
  """tinygrad's `f2f(bits, fr, to)` (codegen/decomp/dtype.py), which converts an emulated float at each load and store,
  with float16's subnormals kept between float16 and float32, where tinygrad flushes them to zero."""
  @functools.wraps(convert)
  def f2f(v, fr, to, sat=True):
    converted = convert(v, fr, to, sat)
    if (fr, to) == (dtypes.half, dtypes.float):  # v: float16 bits; a subnormal is its mantissa times 2**-24, exactly
      mantissa = v & 0x3FF
      magnitude = mantissa.cast(dtypes.float) * 2.0 ** -24
      subnormal = (v & 0x7C00).eq(0) & mantissa.ne(0)
      return subnormal.where((v & 0x8000).ne(0).where(-magnitude, magnitude), converted)
    if (fr, to) == (dtypes.float, dtypes.half):  # v: float32 bits; the subnormal's mantissa is |x| * 2**24 rounded
      absolute = v & 0x7FFFFFFF
      subnormal = absolute < _FLOAT16_SMALLEST_NORMAL_BITS
      # NB: the products and differences below are exact, so no rounding mode is assumed; only subnormals' magnitudes
      # are scaled (a large one cast to an integer is undefined in C)
      scaled = subnormal.where(absolute, 0).bitcast(dtypes.float) * 2.0 ** 24
      whole = scaled.cast(dtypes.uint)
      fraction = scaled - whole.cast(dtypes.float)
      halfway = fraction.eq(0.5)
      rounded_up = (0.5 < fraction) | (halfway & (whole & 1).ne(0))  # to nearest, ties to even
      bits = ((v >> 16) & 0x8000) | (whole + rounded_up.cast(dtypes.uint))  # 1024 is the smallest normal's bits
      return subnormal.where(bits.cast(dtypes.ushort), converted)
    return converted
  return f2f


def _float16_overflow_rounded(clamp):
  """tinygrad's `f2f_clamp(value, dt, sat)`, which bounds a float32 value about to become an emulated float: for
  float16 the bound is 65520, where rounding to nearest reaches infinity, not 65504, the largest float16 (tinygrad
  made 65504 < |x| < 65520 infinite, where a float16 store rounds it to 65504)."""
  @functools.wraps(clamp)
  def f2f_clamp(val, dt, sat=True):
    if dt != dtypes.half:
      return clamp(val, dt, sat)
    bound, infinity = val.const_like(65520.0), val.const_like(math.inf)
    return val.ne(val).where(val, (val < bound).where((-bound < val).where(val, -infinity), infinity))
  return f2f_clamp


def _register_of_an_emulated_float(ctx, x):
  """AFTER (a register's value once stored) of an emulated float: of the register's storage, as the register is."""
  if x.dtype != ctx[0]:
    return None
  storage = graph_rewrite(x.src[0], decomp_dtype.pm_float_decomp, ctx=ctx, bottom_up=True)
  return x.replace(dtype=storage.dtype, src=(storage, *x.src[1:]), tag=ctx[0])


def _emulate_floats_as_ieee() -> None:
  """NB: tinygrad 0.14's emulation of a float its renderer lacks (float16 on POCL) made the AFTER of an accumulator
  register (a product's running value) an AFTER of a cast, which its verifier refused (cumprod and prod of float16
  did not compile on CL): AFTER follows its register into the storage dtype."""
  decomp_dtype.f2f = _float16_subnormals_kept(decomp_dtype.f2f)
  decomp_dtype.f2f_clamp = _float16_overflow_rounded(decomp_dtype.f2f_clamp)
  decomp_dtype.pm_float_decomp = PatternMatcher([(UPat(Ops.AFTER, name="x"), _register_of_an_emulated_float)]) + \
    decomp_dtype.pm_float_decomp


def _fix_wgsl() -> None:
  renderer = wgsl.WGSLRenderer
  fix = PatternMatcher([(UPat(Ops.LOAD, name="load"), _packed_load_then_alternative)])
  renderer.extra_matcher = fix + renderer.extra_matcher
  renderer.render_kernel = _with_positive_nan(renderer.render_kernel)
  renderer.string_rewrite = _WGSL_CONSTANTS + renderer.string_rewrite


# tinygrad's move_where_load, kept where the alternative `a` is the same in the load's dtype: invalid, of that dtype,
# a cast from it, or a constant that survives the round trip. NB: a lambda without closures in gater's names, as
# _ADD_ZERO above: it becomes the code of tinygrad's function, which both of gater's rules call
_MOVE_WHERE_LOAD = lambda gate, l, a, w: l.replace(src=(  # noqa: E731
  l.src[0], l.vconst_like(0) if a.is_invalid else l.const_like(a.val) if a.op is Ops.CONST else
  a.src[0] if a.op is Ops.CAST and a.src[0].dtype == l.dtype else a.cast(l.dtype), l.src[2])).cast(w.dtype) if (
    a.is_invalid or l.dtype == w.dtype or a.op is Ops.CAST and a.src[0].dtype == l.dtype
    or a.op is Ops.CONST and w.dtype.const(l.dtype.const(a.val)) == a.val) else None


def _keep_exact_alternatives() -> None:
  gater.move_where_load.__code__ = _MOVE_WHERE_LOAD.__code__


VIEW_ALIGNMENT = 16  # bytes: the widest vector tinygrad's kernels load from a buffer's start


def _aligned_view(make_view):
  def make_aligned_view(src):
    view = make_view(src)
    if view is None:
      return None
    buffer, offset = src.contiguous_view()
    return view if offset * buffer.element_size() % VIEW_ALIGNMENT == 0 else None
  return make_aligned_view


def _align_views() -> None:
  tensor._make_buffer_view = _aligned_view(tensor._make_buffer_view)


def _share_compile_cache_across_threads() -> None:
  """Reopen tinygrad's compile cache (one SQLite connection) usable from any thread.

  NB: by default only the thread that opened it may use it: a flush from another thread failed with
  sqlite3.ProgrammingError. Flushes are serialised by a lock (core/pending.py), so one shared connection is safe.
  """
  import sqlite3
  from unittest import mock

  from tinygrad import helpers
  if helpers.CACHELEVEL < 1:
    return
  helpers._db_connection = None
  with mock.patch.object(helpers.sqlite3, "connect", functools.partial(sqlite3.connect, check_same_thread=False)):
    helpers.db_connection()


def _keep_lowered_programs() -> None:
  """Lower each kernel through tinyjax's disk cache of lowered programs (program_cache.py).

  NB: tinygrad 0.14 lowers every kernel again in every process (its CACHEDB keeps binaries only), and its CPU device
  lowers its four helper programs each time it opens. Both go through `codegen.do_to_program`; the CPU device imported
  it by name, so an already imported ops_cpu gets the cached one too.
  """
  lower = program_cache.cached(codegen.do_to_program)
  codegen.do_to_program = lower
  if (ops_cpu := sys.modules.get("tinygrad.runtime.ops_cpu")) is not None:
    ops_cpu.do_to_program = lower


def _compile_new_kernels_together() -> None:
  """Compile the kernels a schedule lowers for the first time together, one clang for the CPU device's, one OpenCL
  program for CL's (compile_together.py).

  NB: tinygrad 0.14 calls `lower_and_compile` by its name in `realize` (compile_linear), and ClangCompiler inherits
  `compile_cached` from Compiler: both are replaced there. Lowering (`do_to_program`, around the program cache's)
  names a group's kernels apart; the CPU device imported it by name.
  """
  realize.lower_and_compile = compile_together.lowered_together(realize.lower_and_compile)
  ClangCompiler.compile_cached = compile_together.compile_cached_or_defer
  codegen.do_to_program = ops_cpu.do_to_program = compile_together.named_apart(codegen.do_to_program)


def _entered_at_its_symbol(program_init):
  def init(self, device, obj):
    program_init(self, device, obj)
    if not self.lvp and obj.lib[:4] == b"\x7fELF":
      _, sections, _ = elf.elf_loader(obj.lib, link_libs=[self.libm, self.rt_lib])
      symbols = next(section for section in sections if section.header.sh_type == libc.SHT_SYMTAB)
      strings = sections[symbols.header.sh_link].content
      for symbol in (libc.Elf64_Sym * (len(symbols.content) // ctypes.sizeof(libc.Elf64_Sym))).from_buffer_copy(
          symbols.content):
        if strings[symbol.st_name:strings.index(b"\0", symbol.st_name)] == obj.name.encode():
          self.addr += sections[symbol.st_shndx].header.sh_addr + symbol.st_value
          break
  return init


def _enter_cpu_programs_at_their_symbol() -> None:
  """Call a CPU kernel at its function's symbol in its object, not at the start of the object.

  NB: tinygrad 0.14's CPU runtime enters a program at the start of its loaded object, where the one function of a
  kernel compiled alone is; a kernel compiled with others (compile_together.py) is one function of several. Both
  tinyjax's calls (`cpu_function`) and tinygrad's CPU queues call `program.addr`: it is moved to the kernel's entry.
  """
  ops_cpu.CPUProgram.__init__ = _entered_at_its_symbol(ops_cpu.CPUProgram.__init__)


def _position(program_init):
  def init(self, *args, **kwargs):
    program_init(self, *args, **kwargs)
    self.signature = tuple((name, position, dtype, shape)
                           for position, (name, _, dtype, shape) in enumerate(self.signature))
  return init


def _number_cl_arguments_by_position() -> None:
  """Pass a CL kernel its i-th argument from the i-th buffer (or value) it is called with.

  NB: tinygrad 0.14's CL runtime took argument i from the buffers at the parameter's *slot*, its number among the
  kernel's buffers before some were dropped, while it is called with only the buffers the kernel keeps (in order):
  a kernel that dropped one (a complex cholesky's step on CL: data0..data3, data5..data7) raised IndexError at launch.
  The other runtimes (CUDA, Metal's values) read the signature by position, as this does.
  """
  try:
    from tinygrad.runtime import ops_cl
  except (ImportError, OSError):  # no OpenCL library here: no CL device to amend
    return
  ops_cl.CLProgram.__init__ = _position(ops_cl.CLProgram.__init__)


class _SharedClProgram:
  """An OpenCL program built from one binary, held by every kernel made from that binary; released after the last."""

  def __init__(self, handle, release):
    self.handle, self.release = handle, release

  def __del__(self):
    try:
      self.release(self.handle)
    except (TypeError, AttributeError):  # the interpreter is shutting down (as tinygrad's CLProgram.__del__)
      pass


_cl_programs = weakref.WeakValueDictionary()  # (device, binary) -> _SharedClProgram


def _cl_program(self, device, obj):
  """tinygrad's CLProgram.__init__, with the program built from a binary once for all its kernels."""
  from tinygrad.runtime.autogen import opencl as cl
  from tinygrad.runtime.ops_cl import BP_CB, check, checked, to_char_p_p
  self.dev, self.signature = device, obj.signature
  self.lib = device.cl_compiler.compile_cached(obj.lib.decode())
  if (shared := _cl_programs.get(key := (device.device, self.lib))) is None:
    handle = checked(cl.clCreateProgramWithBinary(device.context, 1, device.cl_dev, (ctypes.c_size_t * 1)(len(self.lib)),
                                                  to_char_p_p([self.lib], ctypes.c_ubyte), binary_status := ctypes.c_int32(),
                                                  error := ctypes.c_int32()), error)
    check(binary_status.value)
    check(cl.clBuildProgram(handle, 1, device.cl_dev, None, BP_CB(), None))
    shared = _cl_programs[key] = _SharedClProgram(handle, cl.clReleaseProgram)
  check(cl.clRetainProgram(shared.handle))  # released by tinygrad's CLProgram.__del__
  self.program, self.shared_program = shared.handle, shared
  self.kernel = checked(cl.clCreateKernel(self.program, obj.name.encode(), status := ctypes.c_int32()), status)


def _share_cl_programs_of_one_binary() -> None:
  """The kernels loaded from one binary (a unit of kernels compiled together, compile_together.py) share the program
  built from it.

  NB: tinygrad 0.14's CL runtime builds a program from its binary for every kernel: a unit of 18 kernels built 18
  times held 875 KB a kernel on POCL, where a kernel compiled alone holds 156 KB (and tinygrad keeps every kernel it
  ran). And on POCL with its kernel cache off, releasing one of two programs built from one binary removes files the
  other still needs ("Final linking of kernel ... failed", and the process aborts). The program's OpenCL reference
  count holds one reference per kernel (tinygrad's CLProgram.__del__ releases it) and one for the shared holder.
  """
  try:
    from tinygrad.runtime import ops_cl
  except (ImportError, OSError):  # no OpenCL library here: no CL device to amend
    return
  ops_cl.CLProgram.__init__ = _cl_program


def _list_every_cl_device() -> None:
  """List every device of the OpenCL platform, not its default one only: `CL:1`, ... name the others.

  NB: tinygrad 0.14 opens the first platform's GPUs, else its CL_DEVICE_TYPE_DEFAULT devices: one, where POCL exposes
  several (POCL_DEVICES="pthread pthread", two CPU devices), so a mesh over CL had one device. GPUs stay first, as
  tinygrad chose them; without a GPU, every device of the platform (CL_DEVICE_TYPE_ALL), the default one first.
  """
  try:
    from tinygrad.runtime import ops_cl
    from tinygrad.runtime.autogen import opencl as cl
  except (ImportError, OSError):  # no OpenCL library here: no CL device to amend
    return
  opened = ops_cl.CLDevice.__init__

  def listing_every_device(self, device: str = ""):
    if ops_cl.CLDevice.device_ids is None:
      ops_cl.CLDevice.device_ids = _cl_devices(cl)
    opened(self, device)
  ops_cl.CLDevice.__init__ = listing_every_device


# The helper process's side: reads (length, OpenCL C source) from stdin, writes (status, length, binary or error)
# on the stdout it was started with; whatever POCL's compiler prints (its warnings) goes to stderr.
def _cl_devices(cl):
  """The first OpenCL platform's GPUs, or else all its devices (the default one first)."""
  count, platform = ctypes.c_uint32(), (cl.cl_platform_id * 1)()
  if cl.clGetPlatformIDs(1, platform, None) != 0:
    return None  # tinygrad's own listing then raises its error
  for device_type in (cl.CL_DEVICE_TYPE_GPU, cl.CL_DEVICE_TYPE_ALL):
    if cl.clGetDeviceIDs(platform[0], device_type, 0, None, ctypes.byref(count)) == 0 and count.value:
      break
  ids = (cl.cl_device_id * count.value)()
  cl.clGetDeviceIDs(platform[0], device_type, count, ids, None)
  default = (cl.cl_device_id * 1)()
  if cl.clGetDeviceIDs(platform[0], cl.CL_DEVICE_TYPE_DEFAULT, 1, default, None) == 0:
    address = lambda device: ctypes.cast(device, ctypes.c_void_p).value
    order = sorted(range(count.value), key=lambda i: address(ids[i]) != address(default[0]))  # the default first
    ids = (cl.cl_device_id * count.value)(*[ids[i] for i in order])
  return ids


_POCL_COMPILE_HELPER = """
import ctypes, os, struct, sys
from tinygrad import Device
from tinygrad.runtime import ops_cl
from tinygrad.runtime.autogen import opencl as cl
""" + inspect.getsource(_cl_devices) + """
ops_cl.CLDevice.device_ids = _cl_devices(cl)  # the devices as the user's process lists them (_list_every_cl_device)
replies = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)
compiler = Device[sys.argv[1]].cl_compiler
while (header := sys.stdin.buffer.read(4)):
  source = sys.stdin.buffer.read(struct.unpack("I", header)[0]).decode()
  try:
    status, payload = 0, compiler.compile(source)
  except Exception as error:
    status, payload = 1, str(error).encode()
  replies.write(struct.pack("<BI", status, len(payload)) + payload)
  replies.flush()
"""


class _PoclCompileHelper:
  """One process per CL device that compiles OpenCL C to POCL binaries; started at the first compile."""

  def __init__(self, device: str):
    self.device, self.process, self.lock = device, None, threading.Lock()

  def compile(self, source: str) -> bytes:
    from tinygrad.device import CompileError
    with self.lock:
      if self.process is None or self.process.poll() is not None:
        self.process = subprocess.Popen([sys.executable, "-c", _POCL_COMPILE_HELPER, self.device],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
      encoded = source.encode()
      try:
        self.process.stdin.write(struct.pack("<I", len(encoded)) + encoded)
        self.process.stdin.flush()
        status, size = struct.unpack("<BI", self.process.stdout.read(5))
        payload = self.process.stdout.read(size)
      except (OSError, struct.error):  # it died compiling this kernel (POCL's LLVM aborted): this kernel fails alone
        self.process.kill()
        raise CompileError(f"POCL's compiler exited compiling this kernel (status {self.process.wait()})") from None
    if status:
      raise CompileError(payload.decode(errors="replace"))
    return payload

  def close(self) -> None:
    if self.process is not None and self.process.poll() is None:
      self.process.stdin.close()  # its loop ends at EOF
      self.process.wait()


_pocl_helpers: dict[str, _PoclCompileHelper] = {}


def _close_pocl_helpers() -> None:
  for helper in _pocl_helpers.values():
    helper.close()


@functools.cache
def _is_pocl(device) -> bool:
  from tinygrad.runtime.autogen import opencl as cl
  platform = cl.cl_platform_id()
  cl.clGetDeviceInfo(device.cl_dev, cl.CL_DEVICE_PLATFORM, ctypes.sizeof(platform), ctypes.byref(platform), None)
  name = ctypes.create_string_buffer(256)
  cl.clGetPlatformInfo(platform, cl.CL_PLATFORM_NAME, 256, name, None)
  return name.value.decode() == "Portable Computing Language"


def _compiled_by_a_helper(compile_source):
  def compile(self, source: str) -> bytes:
    if not _is_pocl(self.dev):
      return compile_source(self, source)
    if self.dev.device not in _pocl_helpers:
      _pocl_helpers.setdefault(self.dev.device, _PoclCompileHelper(self.dev.device))
    return _pocl_helpers[self.dev.device].compile(source)
  return compile


def _compile_pocl_kernels_in_a_helper_process() -> None:
  """Compile OpenCL C for POCL's devices in a helper process, then build the binary here as tinygrad does.

  NB: a POCL 3.1 program built in the process that compiled its source holds ~2 MB for as long as it lives (built
  from a binary another process compiled: ~0.15 MB), and tinygrad keeps every kernel it ran: JAX's linalg tests on CL
  grew a process by 1.2 GB in 67 tests. tinygrad's disk cache of binaries hides this after a first run. The helper
  also keeps POCL's LLVM from aborting the user's process on a kernel it cannot compile: that kernel fails alone.
  """
  try:
    from tinygrad.runtime import ops_cl
  except (ImportError, OSError):  # no OpenCL library here: no CL device to amend
    return
  ops_cl.CLCompiler.compile = _compiled_by_a_helper(ops_cl.CLCompiler.compile)
  atexit.register(_close_pocl_helpers)


def _synchronize(self, timeout=None):
  from tinygrad.device import Device
  from tinygrad.runtime.support import hcq2
  if hcq2.HCQ_RUNTIME_DEV.value != self.device:
    Device[hcq2.HCQ_RUNTIME_DEV.value].synchronize()
  views = self.__dict__.get("_tinyjax_signal_views")
  if views is None:  # NB: `signal` is cached per device: its buffers live as long as the device
    views = self._tinyjax_signal_views = (self.signal("timeline")._buf.cpu_view().view(fmt="Q"),
                                          self.signal("value", 1, device="CPU")._buf.cpu_view().view(fmt="Q"))
  timeline, value = views
  self._wait_signal(timeline, value[0] - 1, timeout)
  if self.prof_ents:
    self.collect_prof()


def _synchronize_with_views_made_once() -> None:
  """Wait for an HCQ device (tinygrad's CPU device) through views of its two signals made once.

  NB: tinygrad 0.14 made both views again at every synchronize: 4 of its 4.5 us, more than the launch of a small
  program (every block_until_ready of a jitted call's result waits so).
  """
  from tinygrad.runtime.support import hcq2
  hcq2.HCQ2Compiled.synchronize = _synchronize


_CPU_PROGRAM_CALL = ops_cpu.CPUProgram.__call__  # tinygrad's own


def cpu_function(program, n_args: int):
  """A tinygrad CPU program's kernel as a ctypes function of `n_args` uint64 arguments (each buffer's address, then
  each variable's value), made once per program; None for lavapipe's programs (their arguments are packed in
  memory)."""
  if program.lvp:
    return None
  typed = program.__dict__.get("_tinyjax_typed")
  if typed is None or typed[0] != n_args:
    assert n_args <= ops_cpu.MAX_ARGS, f"CPU programs support at most {ops_cpu.MAX_ARGS} arguments, got {n_args}"
    typed = program._tinyjax_typed = (n_args, ctypes.CFUNCTYPE(None, *[ctypes.c_uint64] * n_args)(program.addr))
  return typed[1]


def _call_cpu_program(self, *bufs, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=(), wait=False, timeout=None):
  function = cpu_function(self, len(bufs) + len(vals))
  if function is None:
    return _CPU_PROGRAM_CALL(self, *bufs, global_size=global_size, local_size=local_size, vals=vals, wait=wait,
                             timeout=timeout)
  start = time.perf_counter() if wait else 0.0
  args = [b.va_addr for b in bufs]
  args.extend(vals)
  core = self.runtimevars.get("core_id")
  for tid in range(global_size[0]):
    if core is not None:
      args[core] = tid
    function(*args)
  return time.perf_counter() - start if wait else None


def _call_cpu_programs_with_typed_arguments() -> None:
  """Call a CPU kernel through a function pointer declared with its arguments' C type (uint64, each a buffer's
  address or a variable's value), made once per program: ctypes converts the Python ints itself.

  NB: tinygrad 0.14's CPUProgram.__call__ converted each argument to a ctypes.c_uint64 object at every call, after
  casts and a list per call: 1.5 us a launch, 0.35 us through the typed pointer (an eager chain of 200 small
  operations launches about 130 kernels; a jitted call of a small function, one).
  """
  ops_cpu.CPUProgram.__call__ = _call_cpu_program


def _launch_captured_cuda_kernels_one_by_one() -> None:
  """tinygrad's CUDA device has no graph runtime for TinyJit to batch a capture's kernels into: the captured kernels
  are launched one by one (tinyjax's replay launches them itself, replay.py, as on CPU, CL and WEBGPU).

  NB: tinygrad 0.14's CUDA graph (runtime/graph/cuda.py) was refused by the driver while it was being built, at
  cuGraphAddKernelNode ("CUDA Error 1, invalid argument"), for captures whose kernels launch plainly: the complex
  eigh of 2x2 matrices and the pivoted QR of a 3x3 matrix with a zero column (H200, driver 580, CUDA 13.0; with
  JIT=2, no graphs, both passed). `graph` is a property of the class, which CUDADevice's own __init__ cannot set.
  """
  ops_cuda.CUDADevice.graph = property(lambda self: None, lambda self, graph: None)


# whether a kernel binds the number of the device it runs on (its DEVICE range, or `_device_num` after codegen)
_BINDS_DEVICE_NUMBER: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _binds_device_number(kernel) -> bool:
  if (bound := _BINDS_DEVICE_NUMBER.get(kernel)) is None:
    bound = _BINDS_DEVICE_NUMBER[kernel] = any(
      (node.op is Ops.RANGE and node.arg[-1] is AxisType.DEVICE)
      or (node.op is Ops.PARAM and node.arg.name == "_device_num") for node in kernel.toposort())
  return bound


def _per_device(call, resolved):
  """tinygrad's `unwrap_multi`: a call's buffers, and the variables bound, for each device the call runs on."""
  buffers = [b.buffer for b in resolved]
  if not any(isinstance(b, MultiBuffer) for b in buffers):
    yield buffers, {}
    return
  bound = _binds_device_number(call.src[0])
  for number, on_device in enumerate(zip(*[b.bufs for b in buffers])):
    yield list(on_device), {"_device_num": number} if bound else {}


def _find_device_number_bindings_once() -> None:
  """NB: tinygrad 0.14's `unwrap_multi` walks the whole of a kernel's program (its toposort: thousands of nodes) at
  every launch over several devices, to find whether the program binds the device's number: the data-parallel MLP
  step over 2 CPU devices spent most of its 24 ms there (its kernels: 3 ms per device). The answer is found once per
  program. `jit` imported the function by name."""
  realize.unwrap_multi = jit.unwrap_multi = _per_device


def _whole_buffers_shared(plan):
  """tinygrad's memory plan of a TinyJit capture, then on CL and WEBGPU (which it leaves alone) the capture's
  intermediate buffers shared whole: each takes the buffer of an earlier one of its device, dtype and size whose last
  kernel ran before its first. Buffers of copies and those live Tensors hold keep their own."""
  def planned(linear, held_bufs=None):
    linear = plan(linear, held_bufs)
    held = held_bufs or set()
    first, last, copied = {}, {}, set()
    for i, call in enumerate(linear.src):
      bufs = [b for src in call.src[1:] for b in memory._collect_bufs(src)
              if b not in held and isinstance(b.device, str) and b.device.startswith(("CL", "WEBGPU"))]
      for b in bufs:
        first.setdefault(b, i)
        last[b] = i
      if call.src[0].op is Ops.COPY:
        copied.update(bufs)
    free, replace, ending = collections.defaultdict(list), {}, collections.defaultdict(list)
    for b, i in first.items():
      if b in copied:
        continue
      for done in [k for k in ending if k < i]:  # those whose last kernel ran before this buffer's first
        for shared in ending.pop(done):
          free[shared.device, shared.dtype, shared.nbytes()].append(shared)
      pool = free[b.device, b.dtype, b.nbytes()]
      shared = pool.pop() if pool else b
      if shared is not b:
        replace[b] = shared
      ending[last[b]].append(shared)
    return linear.substitute(replace, name="whole buffers shared", walk=True) if replace else linear
  return planned


def _share_captured_buffers_on_cl_and_webgpu() -> None:
  """NB: tinygrad 0.14's memory planner (schedule/memory.py) suballocates a TinyJit capture's intermediates from one
  arena of views, and skips CL and WEBGPU, which have no views: there every intermediate kept a buffer of its own for
  as long as the capture lived. A capture of a loop of n steps (cholesky's, lu's, a factorization's column steps)
  held n buffers: a jitted 200 x 200 cholesky kept 30 MB on CL (0.5 MB on the CPU device), and a process that
  compiled many such programs grew by gigabytes (a pytest worker of JAX's linalg tests to 15.5 GB)."""
  jit.memory_plan_rewrite = _whole_buffers_shared(jit.memory_plan_rewrite)


def _named(make_program):
  def runtime(self, obj):
    program = make_program(self, obj)
    program.tinyjax_kernel = (self.device, obj.name, obj.profile_key)
    return program
  return runtime


def _name_kernel_programs() -> None:
  """Each kernel's runtime program knows its device, its name and its key in tinygrad's cache of runtime programs
  (`program.tinyjax_kernel`), which a profile reads (`kernels_timed`).

  NB: tinygrad 0.14's programs do not all keep their kernel's name (the CL runtime's does not), nor their device's in
  one place. Every program is made by `Compiled.runtime(obj)`, once per kernel and device, from a TinyELF whose
  profile_key is the PROGRAM's key, as `realize.get_runtime` keys its cache."""
  Compiled.runtime = _named(Compiled.runtime)


_ABSENT = object()


class _KernelTiming:
  """What `kernels_timed` replaces while a profile records, and the timed versions."""

  def __init__(self, recording):
    self.recording = recording
    self.replaced: list[tuple[object, str, object]] = []  # (owner, name, what its own __dict__ held, or _ABSENT)
    self.timed_classes: set[type] = set()
    self.in_run = False  # NB: NV's and AMD's programs call their parent's __call__: one run, recorded once

  def replace(self, owner, name: str, value) -> None:
    self.replaced.append((owner, name, owner.__dict__.get(name, _ABSENT)))
    setattr(owner, name, value)

  def end(self) -> None:
    for owner, name, value in reversed(self.replaced):
      if value is _ABSENT:
        delattr(owner, name)  # the class inherits its parent's again
      else:
        setattr(owner, name, value)

  def time_runs_of(self, cls: type) -> None:
    if cls not in self.timed_classes:
      self.timed_classes.add(cls)
      self.replace(cls, "__call__", self.timed_run(cls.__call__))

  def timed_run(self, call):
    def run(program, *bufs, wait=False, **launch):
      kernel = getattr(program, "tinyjax_kernel", None)
      # NB: a program outside tinygrad's cache of runtime programs is a search's candidate (BEAM, the local size),
      # which tinygrad makes with cache=False: it runs as part of a compile, not as a kernel run
      if self.in_run or kernel is None or realize.runtime_cache.get((kernel[2], kernel[0])) is not program:
        return call(program, *bufs, wait=wait, **launch)
      self.in_run = True
      try:
        start = time.perf_counter_ns()
        measured = call(program, *bufs, wait=True, **launch)
        if measured is None:
          Device[kernel[0]].synchronize()
          end, timed_by = time.perf_counter_ns(), "host"
        else:
          end, timed_by = start + round(measured * 1e9), "device"
      finally:
        self.in_run = False
      self.recording.on_device(kernel[0], kernel[1], "run", start, end, kernel=kernel[1], timed_by=timed_by)
      return measured
    return run

  def timed_load(self, make_program):
    def runtime(device, obj):
      start = time.perf_counter_ns()
      program = make_program(device, obj)
      self.recording.on_device(device.device, f"load {obj.name}", "load", start, time.perf_counter_ns(),
                               kernel=obj.name)
      self.time_runs_of(type(program))
      return program
    return runtime

  def timed_lowering(self, lower):
    def lowered(ast, renderer):
      start = time.perf_counter_ns()
      program = lower(ast, renderer)
      name = program.arg.function_name
      self.recording.on_device(renderer.target.device, f"compile {name}", "compile", start, time.perf_counter_ns(),
                               kernel=name)
      return program
    return lowered

  def timed_unit(self, compile_unit):
    def compiled(device, compiler, sources):
      start = time.perf_counter_ns()
      binaries = compile_unit(device, compiler, sources)
      self.recording.on_device(device, f"compile {len(sources)} kernels together", "compile", start,
                               time.perf_counter_ns(), kernels=len(sources))
      return binaries
    return compiled


def kernels_timed(recording):
  """While the profile `recording` (tinyjax.ir.profile) is on, on the device's row: each kernel's compile (lowering,
  rendering and compiling it, a BEAM search included; kernels compiled together, compile_together.py, have one event
  for that unit), its load by the device's runtime, and each of its runs (also those of tinyjax's launcher,
  replay.py), waited for; returns the function that ends it.

  NB: a run is timed by the device where its runtime measures it (OpenCL's and WebGPU's timestamps, the CPU device's
  own clock around its synchronous call), otherwise from its launch to the end of a synchronize of the device.

  NB: tinygrad 0.14's own profiling (PROFILE) records a run as a point in time without its duration, but on the HCQ
  devices and Metal, and never sees the kernels tinyjax's launcher replays. Every kernel is lowered by
  `codegen.do_to_program` (the CPU device imported it by name), loaded by `Compiled.runtime` and run by a call of its
  runtime program. Those are replaced here, not functions tinygrad's pattern matchers call (`get_runtime` in
  `exec_kernel`): a matcher keeps the globals its functions named when it first ran. A kernel lowered or loaded before
  the recording started (tinygrad keeps both for the process) has no compile or load event.
  """
  timing = _KernelTiming(recording)
  timing.replace(codegen, "do_to_program", timing.timed_lowering(codegen.do_to_program))
  timing.replace(ops_cpu, "do_to_program", timing.timed_lowering(ops_cpu.do_to_program))
  timing.replace(compile_together, "compile_unit", timing.timed_unit(compile_together.compile_unit))
  timing.replace(Compiled, "runtime", timing.timed_load(Compiled.runtime))
  for program in list(realize.runtime_cache.values()):
    timing.time_runs_of(type(program))
  return timing.end


def kernel_context(**settings):
  """The tinygrad settings every kernel tinyjax compiles is made under (a flush, an export), with `settings` (a
  device's EMULATED_DTYPES).

  NB: TUPLE_ORDER=0: tinygrad's linearizer otherwise breaks priority ties by comparing whole expression trees
  (UOp.tuplize), which is exponential in the depth of an expression that reuses its operands.
  """
  from tinygrad.helpers import Context
  return Context(TUPLE_ORDER=0, **settings)


_amended = False


def amend() -> None:
  """Make tinyjax's amendments to tinygrad (once per process)."""
  global _amended
  if not _amended:
    _teach_division()
    _bool_logic_as_logical_on_opencl()
    _keep_float_zeros()
    _keep_float_arithmetic()
    _keep_float_order()
    _emulate_floats_as_ieee()
    _simplify_only_bool_valids()
    _fix_wgsl()
    _align_views()
    _keep_exact_alternatives()
    _share_compile_cache_across_threads()
    _keep_lowered_programs()
    _compile_new_kernels_together()
    _enter_cpu_programs_at_their_symbol()
    _share_cl_programs_of_one_binary()  # NB: before the arguments' numbering, which wraps the CLProgram.__init__ it finds
    _number_cl_arguments_by_position()
    _list_every_cl_device()
    _compile_pocl_kernels_in_a_helper_process()
    _synchronize_with_views_made_once()
    _call_cpu_programs_with_typed_arguments()
    _launch_captured_cuda_kernels_one_by_one()
    _find_device_number_bindings_once()
    _share_captured_buffers_on_cl_and_webgpu()
    _name_kernel_programs()
    kernel_opts.amend_kernel_optimizations()
    _amended = True
