"""Contractions and windowed reductions: dot_general, conv_general_dilated, and the reduce_window family
(reduce_window_sum / _max / _min, and the generic reduce_window with a jaxpr body).

Contractions accumulate in a dtype chosen from the output dtype (`_accumulator`), so that integer results wrap
like XLA's and float16 sums keep float32 precision, and are cast to the jaxpr's output dtype at the end.
Windows are tinygrad's pooling view over a base-dilated and padded operand: (*output shape, *window shape).
"""
import functools
import math
import operator

import numpy as np
from jax.extend.core import ClosedJaxpr
from tinygrad import Tensor, dtypes

from tinyjax.backends.tinygrad.machinery.kernel_opts import SMALL_KERNEL
from tinyjax.backends.tinygrad.numerics import floatbits as fb
from tinyjax.backends.tinygrad.table import register, tg_dtype


def _accumulator(out_dtype):
  """The tinygrad dtype products and sums are computed in, for a result of `out_dtype`."""
  out_dtype = np.dtype(out_dtype)
  if out_dtype.kind in "biu":
    # NB: XLA's integer sums wrap; C's signed overflow is undefined, so sum in unsigned of at least 32 bits
    # (which also avoids C's promotion of small unsigned products to int) and cast down: the same bits mod 2**n
    return dtypes.uint64 if out_dtype.itemsize == 8 else dtypes.uint32
  if out_dtype.itemsize < 4:
    return dtypes.float32  # float16/bfloat16 dots and convs accumulate in float32 and round once, as XLA does on CPU
  return tg_dtype(out_dtype)


def _from_plus_zero(result, terms: int):
  """A float sum of `terms` terms as XLA computes it: a sum of -0.0s is +0.0 when it adds more than one term.

  NB: XLA adds from +0.0 (a one-term sum is its term); tinygrad's sum starts from the first term, and folds an
  explicit `+ 0.0` away, so zeros are made +0.0 with a select.
  """
  if not dtypes.is_float(result.dtype) or terms <= 1:
    return result
  return fb.positive_zero(result)


def _to_output(ctx, result):
  out_dtype = np.dtype(ctx.out_aval.dtype)
  if out_dtype == np.bool_:
    return result != 0  # a boolean contraction is an OR of ANDs
  return result.cast(tg_dtype(out_dtype))


def _stored(ctx, result):
  """A contraction's result, made a buffer of its own on CHUNKED_ON's devices when its kernel is large enough for
  tinygrad's register blocking (kernel_opts.SMALL_KERNEL elements and more).

  NB: fused, what follows it (a bias and an activation) is computed in the contraction's kernel, once per copy of its
  upcast register block: on clang, scalar copies of silu's exp that nothing vectorizes, 41 of the benchmark CNN's first
  convolution's 44.6 ms. Apart, the contraction is 3.0 ms and the activation joins the next kernel (a pooling, left to
  clang's vectorizer: kernel_opts.py), one more store and load of the result."""
  return _computed_once(result) if _on_cpus(ctx.device) and math.prod(result.shape) >= SMALL_KERNEL else result


# --- dot_general

@register("dot_general")
def _dot_general(ctx, lhs, rhs, *, dimension_numbers, precision, preferred_element_type, out_sharding=None):
  """Batch dims, then lhs free dims, then rhs free dims (XLA's layout): the operands are permuted to
  (batch, lhs free, 1.., contract) and (batch, 1.., rhs free, contract), multiplied, and summed over contract,
  which is how tinygrad's own matmul works, generalized to any number of each kind of dimension.
  The result dtype (preferred_element_type when given) is the output aval's.
  NB: `precision` is ignored: tinygrad computes in the accumulator dtype whatever precision asks for.
  """
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
  lhs_free = [d for d in range(lhs.ndim) if d not in lhs_contract and d not in lhs_batch]
  rhs_free = [d for d in range(rhs.ndim) if d not in rhs_contract and d not in rhs_batch]
  batch_shape = [lhs.shape[d] for d in lhs_batch]
  contract_shape = [lhs.shape[d] for d in lhs_contract]
  lhs_free_shape, rhs_free_shape = [lhs.shape[d] for d in lhs_free], [rhs.shape[d] for d in rhs_free]
  acc = _accumulator(ctx.out_aval.dtype)
  lhs, rhs = _computed_once(lhs), _computed_once(rhs)
  terms = math.prod(contract_shape)  # NB: 1 without contracted dimensions: a product, no sum
  chunks = _cache_chunks(ctx.device, math.prod(lhs_free_shape), math.prod(rhs_free_shape), terms, acc.itemsize)
  lhs = _chunked(lhs.cast(acc).permute((*lhs_batch, *lhs_free, *lhs_contract)).reshape(
    (*batch_shape, *lhs_free_shape, *[1] * len(rhs_free), terms)), chunks)
  rhs = _chunked(rhs.cast(acc).permute((*rhs_batch, *rhs_free, *rhs_contract)).reshape(
    (*batch_shape, *[1] * len(lhs_free), *rhs_free_shape, terms)), chunks)
  if not contract_shape:
    return _to_output(ctx, (lhs * rhs)[..., 0])
  result = (lhs * rhs).sum(axis=-1, dtype=acc)
  if chunks > 1:  # NB: the chunks' partial sums added elementwise: as a reduction, the kernel that takes the
    partial = result.contiguous()  # contraction's epilogue (a bias, an activation) took 0.47 s to lower
    result = functools.reduce(operator.add, (partial[chunk] for chunk in range(chunks)))
  return _stored(ctx, _to_output(ctx, _from_plus_zero(result, terms)))


CACHE_BLOCK = 1 << 20  # bytes of both operands' rows that one chunk of a contraction on the CPU device reads
# NB: the devices measured: clang's CPU device, and CL on POCL (the CNN's Dense 24.6 -> 6.3 ms); OpenCL on a GPU too,
# where splitting a long contraction is the usual remedy for few outputs, not measured
CHUNKED_ON = ("CPU", "CL")
SMALLEST_CHUNK = 256  # terms


def _on_cpus(device: str | tuple) -> bool:
  """Whether a rule's device is one of CHUNKED_ON's. NB: a tuple is Arrays split over several devices: no chunks
  (they would cross the devices) and no buffer of its own."""
  return isinstance(device, str) and device.split(":")[0] in CHUNKED_ON


def _cache_chunks(device: str | tuple, lhs_rows: int, rhs_rows: int, terms: int, itemsize: int) -> int:
  """How many chunks a contraction of `terms` terms is summed in on `device`: on CHUNKED_ON's devices, enough that one
  chunk of both operands' rows fits CACHE_BLOCK, with at least SMALLEST_CHUNK terms each, and no more partial sums
  than the operands hold elements; elsewhere one.

  NB: tinygrad's kernel for a contraction walks the whole of the contracted axis for each block of outputs, and on the
  CPU device nothing else blocks it for the cache: a 256x3136 by 3136x256 product (the benchmark CNN's Dense) read
  its operands from memory again for every block, 5.5 GFLOP/s; summed in 4 chunks of 784 terms (partial products
  first, then their sum), 28 GFLOP/s. XLA's order of additions is not tinyjax's either way."""
  if not _on_cpus(device):
    return 1
  wanted = -(-(lhs_rows + rhs_rows) * terms * itemsize // CACHE_BLOCK)
  return max(1, min(wanted, terms // SMALLEST_CHUNK, (lhs_rows + rhs_rows) * terms // max(1, lhs_rows * rhs_rows)))


def _chunked(operand, chunks: int):
  """(..., terms) as (chunks, ..., terms / chunks), its terms padded with zeros to a multiple of `chunks` (a padded
  term is 0 * 0 on both sides: +0.0, which changes no sum of more than one term)."""
  if chunks == 1:
    return operand
  terms = operand.shape[-1]
  size = -(-terms // chunks)
  padded = operand.pad((*[(0, 0)] * (operand.ndim - 1), (0, size * chunks - terms)))
  parted = padded.reshape((*operand.shape[:-1], chunks, size))
  return parted.permute((operand.ndim - 1, *range(operand.ndim - 1), operand.ndim))


def _computed_once(operand):
  """A contraction's operand, made a buffer of its own when it is computed (not a buffer, a view of one or a constant).

  NB: otherwise tinygrad fuses the operand's expression into the contraction's kernel, where it is computed again for
  every element of the other operand's free dimensions: the transformer block's gelu before its last Dense was
  evaluated 64 times per element, 37 of the forward's 56 ms (4 ms with the operands computed once)."""
  from tinygrad.uop.ops import Ops
  return operand if operand.uop.base.op in (Ops.BUFFER, Ops.CONST) else operand.contiguous()


# --- conv_general_dilated

def _dilate(x, factors, fill, first_axis=0):
  """Insert factor-1 copies of `fill` between neighbours along the axes from `first_axis` (XLA's dilation)."""
  for axis, factor in enumerate(factors, start=first_axis):
    size = x.shape[axis]
    if factor == 1 or size == 0:
      continue
    spread = x.reshape((*x.shape[:axis + 1], 1, *x.shape[axis + 1:]))
    spread = spread.pad([(0, 0)] * (axis + 1) + [(0, factor - 1)] + [(0, 0)] * (x.ndim - axis - 1), value=fill)
    x = spread.reshape((*x.shape[:axis], size * factor, *x.shape[axis + 1:])).shrink_to(
      *x.shape[:axis], (size - 1) * factor + 1, *x.shape[axis + 1:])
  return x


@register("conv_general_dilated")
def _conv_general_dilated(ctx, lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
                          feature_group_count, batch_group_count, precision, preferred_element_type,
                          out_sharding=None):
  """Brought to (N, C, *spatial) and (O, I, *window) layouts, then tinygrad's N-d conv2d (groups, strides,
  rhs dilation); lhs dilation and padding (negative pads crop) are applied to the operand first.
  NB: `precision` is ignored, as in dot_general.
  """
  lhs_spec, rhs_spec, out_spec = dimension_numbers
  acc = _accumulator(ctx.out_aval.dtype)
  x = _dilate(lhs.cast(acc).permute(tuple(lhs_spec)), lhs_dilation, 0, first_axis=2)
  x = x.pad(((0, 0), (0, 0), *padding))
  kernel = rhs.cast(acc).permute(tuple(rhs_spec))
  if not window_strides:  # NB: tinygrad's conv needs a spatial dimension: a product of features, over one of size 1
    x, kernel, window_strides, rhs_dilation = x.unsqueeze(-1), kernel.unsqueeze(-1), (1,), (1,)
  groups = feature_group_count
  if batch_group_count > 1:
    # Batch group g (the major part of the batch dim) meets output feature group g: move the batch groups into
    # the feature dim (major) and convolve with that many feature groups.
    n, c, *spatial = x.shape
    x = x.reshape(batch_group_count, n // batch_group_count, c, *spatial).transpose(0, 1).reshape(
      n // batch_group_count, batch_group_count * c, *spatial)
    groups = batch_group_count
  result = x.conv2d(kernel, groups=groups, stride=tuple(window_strides), dilation=tuple(rhs_dilation), dtype=acc)
  result = _from_plus_zero(result, int(np.prod(kernel.shape[1:])))
  result = result.reshape(result.shape[:len(out_spec)])  # the size-1 dimension a conv without spatial ones took
  return _stored(ctx, _to_output(ctx, result.permute(tuple(np.argsort(out_spec)))))


# --- reduce_window family

def window_views(x, fill, window: dict):
  """The windows of `x` as (*output shape, *window shape); base-dilation holes and padding hold `fill`.

  The view is tinygrad's `_pool`, the strided-window view its conv2d and max_pool2d are built on.
  """
  if x.ndim == 0:
    return x  # NB: tinygrad's view needs a dimension; a scalar's one window, of no dimensions, is the scalar
  x = _dilate(x, window["base_dilation"], fill).pad(tuple(window["padding"]), value=fill)
  return x._pool(tuple(window["window_dimensions"]), tuple(window["window_strides"]), tuple(window["window_dilation"]))


def dtype_limit(dtype, largest: bool):
  """The largest or smallest value of `dtype` (infinities for floats): what pads a window for min or max."""
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return bool(largest)
  if fb.is_float(dtype):
    return math.inf if largest else -math.inf
  info = np.iinfo(dtype)
  return int(info.max if largest else info.min)


def _reduce_windows(ctx, x, monoid: str, window: dict):
  """Each window of `x` reduced by `monoid` (add, mul, max or min); holes and padding take no part."""
  dtype = np.dtype(ctx.out_avals[0].dtype)
  axes = tuple(range(x.ndim, 2 * x.ndim))
  if monoid == "add":
    # NB: XLA sums float16 windows in float16, in an order of its own; a float32 sum differs from it by rounding
    acc = _accumulator(dtype)
    result = window_views(x.cast(acc), 0, window).sum(axes, dtype=acc)
    return _to_output(ctx, _from_plus_zero(result, int(np.prod(window["window_dimensions"]))))
  if monoid == "mul":
    acc = _accumulator(dtype)
    return _to_output(ctx, window_views(x.cast(acc), 1, window).prod(axes, dtype=acc))
  largest = monoid == "max"
  windows = window_views(x, dtype_limit(dtype, not largest), window)
  if dtype == np.bool_:
    return windows.any(axes) if largest else windows.all(axes)
  if fb.is_float(dtype):
    return fb.max_or_min(windows, axes, largest)
  return windows.max(axes) if largest else windows.min(axes)


def _reduce_window(monoid: str):
  def rule(ctx, x, *, window_dimensions, window_strides, padding, base_dilation, window_dilation):
    window = dict(window_dimensions=window_dimensions, window_strides=window_strides, padding=padding,
                  base_dilation=base_dilation, window_dilation=window_dilation)
    return _reduce_windows(ctx, x, monoid, window)
  return rule


for _name, _monoid in {"reduce_window_sum": "add", "reduce_window_max": "max", "reduce_window_min": "min"}.items():
  register(_name)(_reduce_window(_monoid))


def _monoid_of(jaxpr, dtype) -> str | None:
  """The monoid a reduce_window body computes, when it is one add/mul/max/min (and/or on booleans)."""
  if len(jaxpr.eqns) != 1 or len(jaxpr.invars) != 2:
    return None
  eqn, = jaxpr.eqns
  if set(eqn.invars) != set(jaxpr.invars) or eqn.invars[0] is eqn.invars[1] or eqn.outvars != jaxpr.outvars:
    return None
  name = eqn.primitive.name
  if np.dtype(dtype) == np.bool_:
    return {"and": "min", "or": "max"}.get(name)
  return name if name in ("add", "mul", "max", "min") else None


@register("reduce_window")
def _reduce_window_generic(ctx, *operands_and_inits, jaxpr, consts, window_dimensions, window_strides, padding,
                           base_dilation, window_dilation):
  """A monoid body reduces the windows natively and meets the initial value once, through the body itself;
  any other body (e.g. variadic) is folded over the window positions, skipping holes and padding.
  """
  window = dict(window_dimensions=window_dimensions, window_strides=window_strides, padding=padding,
                base_dilation=base_dilation, window_dilation=window_dilation)
  body = ClosedJaxpr(jaxpr, consts)
  n = len(operands_and_inits) // 2
  operands, inits = operands_and_inits[:n], operands_and_inits[n:]
  shape = ctx.out_aval.shape
  inits = [init.reshape((1,) * len(shape)).expand(shape) for init in inits]
  if n == 1 and (monoid := _monoid_of(jaxpr, ctx.out_aval.dtype)):
    return ctx.backend.run_jaxpr(body, inits[0], _reduce_windows(ctx, operands[0], monoid, window))
  valid = window_views(Tensor.ones(operands[0].shape, dtype=dtypes.bool, device=ctx.device), False, window)
  valid = valid.reshape((*shape, -1))
  windows = [window_views(x, 0, window).reshape((*shape, -1)) for x in operands]
  accumulated = inits
  for position in range(valid.shape[-1]):
    combined = ctx.backend.run_jaxpr(body, *accumulated, *[w[..., position] for w in windows])
    accumulated = [valid[..., position].where(new, old) for new, old in zip(combined, accumulated)]
  return accumulated
