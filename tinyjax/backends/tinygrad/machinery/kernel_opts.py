"""How tinyjax amends tinygrad's hand-coded kernel optimizations and its kernel search: a small kernel is left as it
is, long elementwise loops on the CPU device are left to clang's vectorizer, no kernel's upcasts and unrolls copy its
body beyond a budget, and a search's kernel is kept only where it runs faster than the heuristic's.

NB: a kernel of fewer than SMALL_KERNEL elements of work (its output's and its reduction's together) takes no
optimization: it runs in a few microseconds either way, and what the heuristic would give it (upcasts, unrolls, local
and grouped axes) is most of the cost of lowering it. Its upcasts copy the body of the kernel, and tinygrad's
devectorizer and the compiler then work through each copy: 22 small kernels (sin, exp, tanh, cumsum, sort ... on a
(3, 4) float32) lowered cold in 4.8 s with the heuristic, 2.4 s without (docs/performance.md).

NB: tinygrad's hand-coded heuristic upcasts every elementwise kernel by 4 (one float4 load, then four scalar copies of
the body), which clang cannot vectorize; without the upcast its loop vectorizer makes SIMD code of the plain loop
(float32 sin of 256 elements: 6.3 -> 1.2 us, its cold compile no slower); so is a reduction that the heuristic
unrolls whole (a pooling window). Other kernels with a reduction keep tinygrad's
choice: their upcasts are register blocking that clang does not do by itself.

NB: that register blocking (4x4 upcasts, a reduction of up to 32 unrolled whole) is made for a matmul's multiply-add;
on a fused body of a few hundred ops (attention's masked softmax and its gradient) it makes kernels of tens of
thousands of ops that take seconds each to lower and compile. A kernel over the budget keeps tinygrad's choices with
smaller amounts (4, then 2), or without them. The measurements behind both are in docs/performance.md.

NB: on clang that 4x4 block leaves the registers of an AVX machine idle: a matmul's block widened to 16 (one of its
two axes upcast by 16 where the heuristic upcasts it by 4) runs 1.4-2.5x faster, and lowers in ~0.4 s more. The axis
widened is the inner of those along which an operand is read contiguously, else the outer (512x256 by 256x256, 2
threads: plain 1.54 -> 1.06 ms, the columns; left operand transposed 2.83 -> 1.10 ms, the columns; right operand
transposed 1.58 -> 1.18 ms, the rows, where the columns took 1.77). A convolution's block (NHWC by HWIO) is widened
along its output channels, whose weights are read contiguously, and its other upcast (the batch) dropped to keep the
copies of its body within the budget: the benchmark CNN's second convolution 60.8 -> 42.2 ms, lowered and compiled
cold in 0.55 s instead of 0.85 (its batch upcast kept: 31.4 ms, but 1.57 s to lower; its batch widened: 77 ms).
"""
import dataclasses
import math

from tinygrad.codegen import to_program
from tinygrad.codegen.opt import KernelOptError, Opt, OptOps, heuristic, search
from tinygrad.device import Device
from tinygrad.helpers import diskcache_get, diskcache_put
from tinygrad.uop.ops import AxisType, Ops

SMALL_KERNEL = 1 << 10  # elements of work (output and reduction together): below this no optimization pays its lowering
EXPANDED_BODY = 1 << 14  # a kernel's AST nodes times the copies its upcasts and unrolls make of them
WIDE_BLOCK = 16  # rows of a matmul's register block on clang
TIMED_RUNS = 5  # runs of the search's kernel and the heuristic's, the fastest of each compared
FASTER_TABLE = "tinyjax_search_or_heuristic"  # tinygrad's disk cache table of the comparisons' outcomes


def _small(kernel) -> bool:
  return all(isinstance(size, int) for size in kernel.full_shape) and math.prod(kernel.full_shape) < SMALL_KERNEL


def _elementwise_on_clang(kernel) -> bool:
  return kernel.ren.target.device == "CPU" and not kernel.axes_of(AxisType.REDUCE, AxisType.GROUP_REDUCE)


def _unrolled_whole_on_clang(kernel, tuned) -> bool:
  """A reduction the heuristic unrolls whole (a pooling window, a 3x3 convolution of one channel), on the CPU device:
  elementwise work, left to clang's vectorizer like the elementwise kernels (the benchmark CNN's first pooling, with
  the silu before it: 38.0 ms upcast 4x4, 5.8 ms without)."""
  return kernel.ren.target.device == "CPU" and not tuned.axes_of(AxisType.REDUCE)


def _replayed(kernel, opts, amount):
  """The kernel with `opts` applied, each upcast or unroll by `amount(kernel, opt)` (None leaves it out)."""
  shaped = kernel.copy()
  for opt in opts:
    if opt.op in (OptOps.UPCAST, OptOps.UNROLL):
      if (chosen := amount(shaped, opt)) is None:
        continue
      opt = Opt(opt.op, opt.axis, chosen)
    try:
      shaped.apply_opt(opt)
    except KernelOptError:  # an opt whose axis only existed with a copy left out: the kernel goes without it
      continue
  return shaped


def _read_contiguously(kernel, axis: int) -> bool:
  """Whether a buffer the kernel loads is read contiguously along `axis` (its index has the axis's range as a term)."""
  stored = {node.src[0] for node in kernel.ast.toposort() if node.op is Ops.STORE}
  loads = [buf.src[1].get_idx().split_uop(Ops.ADD) for buf in kernel.bufs if buf not in stored]
  return any(any(term is kernel.rngs[axis] for term in terms) for terms in loads)


def _widened_on_clang(kernel, tuned, body: int):
  """The options of `tuned` with one of its two upcasts of 4 (a matmul's register block) upcast by WIDE_BLOCK, on the
  CPU device and where that axis divides; else None. The axis widened is the inner of those along which a load is
  contiguous (the output channels of a convolution, whose weights are read along them), else the outer; where it is
  read contiguously, the other upcast is narrowed (to 2, then none) so that the block's copies of the body stay within
  EXPANDED_BODY."""
  upcasts = [opt for opt in tuned.applied_opts if opt.op is OptOps.UPCAST]
  if kernel.ren.target.device != "CPU" or len(upcasts) != 2 or any(opt.arg != 4 for opt in upcasts):
    return None
  # NB: an UPCAST's axis indexes the kernel's shape, before and after
  contiguous = [opt for opt in upcasts if _read_contiguously(kernel, opt.axis)]
  wide = max(contiguous, key=lambda opt: opt.axis) if contiguous else min(upcasts, key=lambda opt: opt.axis)
  if kernel.full_shape[wide.axis] % WIDE_BLOCK:
    return None
  other = next(opt for opt in upcasts if opt is not wide)
  # NB: a block narrowed along its other axis pays only where the wide one is read contiguously (a convolution's batch
  # widened alone, where nothing is: 266 ms against tinygrad's 4x4 block's 119)
  for narrowed in (other.arg, 2, None) if contiguous else (other.arg,):
    widened = _replayed(kernel, tuned.applied_opts,
                        lambda shaped, opt: WIDE_BLOCK if opt is wide else narrowed if opt is other else opt.arg)
    if body * widened.upcast_size() <= EXPANDED_BODY:
      return widened if Opt(OptOps.UPCAST, wide.axis, WIDE_BLOCK) in widened.applied_opts else None
  return None


def _contiguous_outputs_on_clang(kernel, tuned):
  """`tuned` with its last output axis upcast by WIDE_BLOCK where tinygrad's heuristic upcasts no output axis of a
  reduction that stays a loop (a sum over rows: each row's WIDE_BLOCK contiguous values summed at once), on the CPU
  device; else None."""
  if kernel.ren.target.device != "CPU" or not tuned.upcastable_dims or not tuned.axes_of(AxisType.REDUCE) \
     or any(opt.op is OptOps.UPCAST for opt in tuned.applied_opts):
    return None  # NB: a reduction unrolled whole (a pooling window) is elementwise work, left to clang's vectorizer
  axis = tuned.upcastable_dims[-1]
  if tuned.full_shape[axis] % WIDE_BLOCK or not _read_contiguously(tuned, axis):
    return None  # no load is contiguous along the axis: nothing would be read WIDE_BLOCK values at once
  widened = tuned.copy()
  try:
    widened.apply_opt(Opt(OptOps.UPCAST, axis, WIDE_BLOCK))
  except KernelOptError:
    return None
  return widened


def _within_budget(body: int):
  """The amount of an upcast or unroll that keeps `body` AST nodes' copies within EXPANDED_BODY: tinygrad's, 4 or 2."""
  def amount(kernel, opt) -> int | None:
    size = kernel.full_shape[kernel.real_axis(opt.op, opt.axis)]
    fitting = [a for a in (opt.arg or size, 4, 2) if size % a == 0 and body * kernel.upcast_size() * a <= EXPANDED_BODY]
    return fitting[0] if fitting else None
  return amount


def _amended(hand_coded):
  def optimize(kernel):
    if _small(kernel):
      return kernel
    tuned = hand_coded(kernel)
    if _elementwise_on_clang(kernel) or _unrolled_whole_on_clang(kernel, tuned):
      return _replayed(kernel, tuned.applied_opts, lambda k, opt: None if opt.op is OptOps.UPCAST else opt.arg)
    body = len(kernel.ast.toposort())
    if any(opt.op is OptOps.TC for opt in tuned.applied_opts):
      return tuned
    if body * tuned.upcast_size() <= EXPANDED_BODY:
      widened = _widened_on_clang(kernel, tuned, body) or _contiguous_outputs_on_clang(kernel, tuned)
      return widened if widened is not None and body * widened.upcast_size() <= EXPANDED_BODY else tuned
    return _replayed(kernel, tuned.applied_opts, _within_budget(body))
  optimize.__wrapped__ = hand_coded
  return optimize


def _run_time(kernel, rawbufs, var_vals, allow_test_size: bool) -> float:
  """The fastest of TIMED_RUNS runs of `kernel` on `rawbufs`, as tinygrad's search times a candidate."""
  ast = kernel.copy().get_optimized_ast(name_override="test")
  device = kernel.ren.target.device
  params = {p: p.replace(arg=dataclasses.replace(p.arg, device=device)) for p in ast.toposort() if p.op is Ops.PARAM}
  program = to_program(ast.substitute(params), kernel.ren)
  return min(search._time_program(program, var_vals, rawbufs, allow_test_size=allow_test_size, cnt=TIMED_RUNS,
                                  clear_l2=hasattr(Device[device], "invalidate_caches")))


def _faster_of_search_and_heuristic(beam_search):
  def searched(kernel, rawbufs, var_vals, amt, allow_test_size=True, disable_cache=search.IGNORE_BEAM_CACHE.value):
    found = beam_search(kernel, rawbufs, var_vals, amt, allow_test_size, disable_cache)
    if any(node.op is Ops.STAGE for node in kernel.ast.backward_slice):
      return found  # NB: a kernel of several blocks, which tinygrad's heuristic leaves as it is (its apply_opts)
    chosen = heuristic.hand_coded_optimizations(kernel.copy())
    if found.applied_opts == chosen.applied_opts:
      return found
    key = {"ast": kernel.ast.key, "amt": amt, "allow_test_size": allow_test_size, "device": kernel.ren.target.device,
           "suffix": kernel.ren.suffix, "searched": repr(found.applied_opts), "chosen": repr(chosen.applied_opts)}
    if (search_won := None if disable_cache else diskcache_get(FASTER_TABLE, key)) is None:
      search._ensure_buffer_alloc(rawbufs)
      search_won = _run_time(found, rawbufs, var_vals, allow_test_size) <= \
          _run_time(chosen, rawbufs, var_vals, allow_test_size)
      diskcache_put(FASTER_TABLE, key, search_won)
    return found if search_won else chosen
  searched.__wrapped__ = beam_search
  return searched


def amend_kernel_optimizations() -> None:
  if not hasattr(heuristic.hand_coded_optimizations, "__wrapped__"):
    heuristic.hand_coded_optimizations = _amended(heuristic.hand_coded_optimizations)
  if not hasattr(search.beam_search, "__wrapped__"):
    search.beam_search = _faster_of_search_and_heuristic(search.beam_search)
