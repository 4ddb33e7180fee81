"""Indexing primitives: gather, the scatter family (scatter, scatter-add, scatter-mul, scatter-min, scatter-max),
dynamic_slice, dynamic_update_slice, and the max-pool pair select_and_scatter_add / select_and_gather_add.

Shapes are static and indices are data, so each rule compares positions against an arange and reduces: a gather
picks, for each output element, the one operand element at its position; a scatter reduces, for each operand
element, the updates that land on it. Picked values travel as integers of the same width (`to_bits`), so NaN
payloads and signed zeros move exactly; min and max compare `order_key`s, integers in XLA's order of the values.
"""
import math

import numpy as np
from jax.extend.core import ClosedJaxpr
from jax.lax import GatherScatterMode
from tinygrad import Tensor, dtypes
from tinygrad.uop.ops import Ops

from tinyjax.backends.tinygrad.numerics import floatbits as fb
from tinyjax.backends.tinygrad.rules.contraction import window_views, dtype_limit
from tinyjax.backends.tinygrad.table import register, tg_dtype


def arange(n: int, dtype=dtypes.int32):
  """0..n-1 as a constant expression, which has no device of its own: it lands on the device of the operands it
  meets (a rule's result made of constants alone is placed on the backend's device when realized)."""
  return Tensor.arange(n, dtype=dtype)


def to_bits(x, dtype):
  """`x` as integers of the same width (booleans as uint8): a sum with at most one nonzero term moves them exactly."""
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return x.cast(dtypes.uint8)
  return x.bitcast(fb.SINT[dtype.itemsize]) if fb.is_float(dtype) else x


def from_bits(bits, dtype):
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return bits != 0
  if fb.is_float(dtype):
    return bits.cast(fb.SINT[dtype.itemsize]).bitcast(tg_dtype(dtype))
  return bits.cast(tg_dtype(dtype))


def pick(mask, values, axis: int, dtype):
  """The element of `values` where `mask` holds along `axis` (at most one does; zero bits where none does)."""
  bits = to_bits(values, dtype)
  return from_bits(mask.where(bits, 0).sum(axis, dtype=bits.dtype), dtype)


def _literal_start(start, high: int) -> int | None:
  """A start known when the rule runs (a literal), clamped to [0, high] as XLA clamps it; else None.

  NB: shifting by a known offset with shrink and pad also keeps tinygrad's rewriter out of a loop it falls into on a
  one-hot sum over constant-folded data (dynamic_update_slice of jnp.eye at a literal start)."""
  base = start.uop.base
  return min(max(int(base.arg), 0), high) if base.op is Ops.CONST else None


def _clamped_start(start, dtype, high: int):
  """An integer start clamped to [0, high] as XLA clamps it (int32), and whether it was in that range already."""
  info = np.iinfo(dtype)
  inside, clamped = Tensor.full(start.shape, True, buffer=False), start
  if info.min < 0:
    inside, clamped = inside & (start >= 0), clamped.maximum(0)
  if high < info.max:  # a bound the index dtype cannot hold would wrap when made a constant of it
    inside, clamped = inside & (start <= high), clamped.minimum(high)
  return clamped.cast(dtypes.int32), inside


def _targets(device, indices, index_dtype, shape, window, index_map, index_batching):
  """Where the elements of each gathered or scattered slice are, for XLA's index layout (index vector last).

  The index batch dims are permuted to (index_batching..., the others...), so that the first ones line up with the
  operand's batching dims. Returns `flat` (batch..., window of the indexed dims...): the int32 position of each
  slice element among the operand's indexed dims (sorted, flattened), its start clamped so that the slice fits;
  and `inside` (batch...): whether every start of the slice was in range.
  """
  n_batch = indices.ndim - 1
  indices = indices.permute((*index_batching, *[d for d in range(n_batch) if d not in index_batching], n_batch))
  indexed = sorted(index_map)
  flat = Tensor.zeros(*indices.shape[:-1], *[window[d] for d in indexed], dtype=dtypes.int32, device=device)
  inside = Tensor.full(indices.shape[:-1], True, device=device)
  for k, d in enumerate(index_map):
    start, ok = _clamped_start(indices[..., k], index_dtype, shape[d] - window[d])
    inside = inside & ok
    axis = indexed.index(d)
    offsets = arange(window[d]).reshape(
      [window[d] if a == axis else 1 for a in range(len(indexed))])
    stride = math.prod(shape[e] for e in indexed[axis + 1:])
    flat = flat + (start.reshape((*start.shape, *[1] * len(indexed))) + offsets) * stride
  return flat, inside


def _one_hot(flat, size: int, trailing: int):
  """flat[..., None] == arange(size), with `trailing` unit axes after the new one."""
  positions = arange(size).reshape(size, *[1] * trailing)
  return flat.reshape((*flat.shape, 1, *[1] * trailing)) == positions


def _batch_order(n_batch: int, index_batching) -> list:
  return [*index_batching, *[d for d in range(n_batch) if d not in index_batching]]


# --- gather

def _fill_value(dtype, fill_value):
  """FILL_OR_DROP's value for out-of-range slices: JAX's default is NaN, the lowest int, the highest uint, True."""
  if fill_value is not None:
    return np.asarray(fill_value).item()
  dtype = np.dtype(dtype)
  return math.nan if fb.is_float(dtype) else dtype_limit(dtype, largest=dtype.kind in "ub")


@register("gather")
def _gather(ctx, operand, indices, *, dimension_numbers, slice_sizes, mode, fill_value, indices_are_sorted,
            unique_indices):
  """The operand as (batching..., indexed dims flattened, other dims cut to the slice...) against `flat`'s
  (batch..., window of the indexed dims...): a one-hot pick over the flattened dims, then XLA's output layout.
  NB: XLA clamps out-of-range starts (PROMISE_IN_BOUNDS and CLIP alike); FILL_OR_DROP fills those slices instead.
  """
  dnums, out, dtype = dimension_numbers, ctx.out_aval, ctx.in_avals[0].dtype
  batching, indexed = list(dnums.operand_batching_dims), sorted(dnums.start_index_map)
  others = [d for d in range(operand.ndim) if d not in batching and d not in indexed]
  flat, inside = _targets(ctx.device, indices, ctx.in_avals[1].dtype, operand.shape, slice_sizes, dnums.start_index_map,
                          dnums.start_indices_batching_dims)
  n_indexed = math.prod(operand.shape[d] for d in indexed)
  source = operand.shrink(tuple((0, slice_sizes[d]) if d in others else None for d in range(operand.ndim)))
  source = source.permute((*batching, *indexed, *others)).reshape(
    *[operand.shape[d] for d in batching], *[1] * (flat.ndim - len(batching)), n_indexed,
    *[slice_sizes[d] for d in others])
  result = pick(_one_hot(flat, n_indexed, len(others)), source, flat.ndim, dtype)
  if GatherScatterMode.from_any(mode) == GatherScatterMode.FILL_OR_DROP:
    inside = inside.reshape((*inside.shape, *[1] * (len(indexed) + len(others))))
    result = inside.where(result, _fill_value(dtype, fill_value))
  # result's axes: the index batch dims in _targets' order, then the window of the indexed and the other dims
  n_batch = indices.ndim - 1
  labels = [("batch", d) for d in _batch_order(n_batch, dnums.start_indices_batching_dims)]
  labels += [("window", d) for d in (*indexed, *others)]
  kept = [label for label in labels if label[0] == "batch" or label[1] not in dnums.collapsed_slice_dims]
  windows = iter(d for d in range(operand.ndim) if d not in dnums.collapsed_slice_dims and d not in batching)
  batches = iter(range(n_batch))
  wanted = [("window", next(windows)) if axis in dnums.offset_dims else ("batch", next(batches))
            for axis in range(out.ndim)]
  result = result.reshape([size for label, size in zip(labels, result.shape) if label in kept])
  return result.permute([kept.index(label) for label in wanted])


# --- scatter family: combine(ctx, base, hits, updates, axis) reduces the updates that hit each operand element

def _combine_replace(body=None, apply_once=False):
  """Plain scatter: the last update in order wins, as on XLA's CPU. With a body (lax.scatter_apply), XLA applies it
  once per update that lands: a loop over the number of updates, or one step when indices are unique."""
  def combine(ctx, base, hits, updates, axis):
    positions = arange(hits.shape[axis]).reshape(-1, *[1] * (hits.ndim - axis - 1))
    last = hits.where(positions, -1).max(axis, keepdim=True)
    value = pick(positions == last, updates, axis, ctx.out_aval.dtype)
    if body is None:
      return (last.squeeze(axis) >= 0).where(value, base)
    count = hits.sum(axis, dtype=dtypes.int32)
    for times in range(1 if apply_once else hits.shape[axis]):
      base = (count > times).where(ctx.backend.run_jaxpr(body, base, value)[0], base)
    return base
  return combine


def _combine_sum(ctx, base, hits, updates, axis):
  dtype = np.dtype(ctx.out_aval.dtype)
  if not fb.is_float(dtype):
    # NB: XLA's integer sums wrap; C's signed overflow is undefined, so add as unsigned and cast back
    wide = dtypes.uint64 if dtype.itemsize == 8 else dtypes.uint32
    return (base.cast(wide) + hits.where(updates.cast(wide), 0).sum(axis, dtype=wide)).cast(base.dtype)
  acc = dtypes.float32 if dtype.itemsize < 4 else base.dtype
  total = hits.where(updates.cast(acc), 0.0).sum(axis, dtype=acc)
  # NB: adding -0.0 leaves every value as it is, but a tinygrad sum starts from +0.0: keep the operand element
  # unless an update other than -0.0 (whose bits are the sign bit alone) lands on it
  update_bits = fb.bits(updates)
  moves = (hits & (update_bits != fb.typed(update_bits, 1 << (fb.width(updates) - 1)))).any(axis)
  return moves.where((base.cast(acc) + total).cast(base.dtype), base)


def _combine_product(ctx, base, hits, updates, axis):
  dtype = np.dtype(ctx.out_aval.dtype)
  # NB: integer products wrap as unsigned ones do (signed overflow is undefined in C); small floats use float32
  if not fb.is_float(dtype):
    acc = dtypes.uint64 if dtype.itemsize == 8 else dtypes.uint32
  else:
    acc = dtypes.float32 if dtype.itemsize < 4 else base.dtype
  return (base.cast(acc) * hits.where(updates.cast(acc), 1).prod(axis, dtype=acc)).cast(base.dtype)


def _limit(keys, largest: bool, floats: bool) -> int:
  """A key beyond every key of a value: the largest or smallest `keys`' dtype holds; for floats one short of it
  (still beyond infinity's key, and NaN's keys are the extremes themselves).

  NB: not the int32 minimum for floats: Mesa's lavapipe (WEBGPU here) turned the int32 minimum of
  `select(c, 0x3f800000, 0x80000000)` (the bits of 1.0 and -0.0) into 0: scatter-max of ones gave 0.0 where no
  update landed on a negative operand."""
  limit = keys.dtype.max if largest else keys.dtype.min
  return limit - (1 if largest else -1) * floats


def _combine_max_or_min(largest: bool):
  """scatter-max / scatter-min on order keys: -0.0 < 0.0 as in XLA, and NaN wins either way (XLA propagates it)."""
  def combine(ctx, base, hits, updates, axis):
    dtype = ctx.out_aval.dtype

    def key(x):
      return fb.order_key(x, nan_largest=largest)
    keyed = key(updates)
    chosen = hits.where(keyed, _limit(keyed, not largest, fb.is_float(dtype)))
    if largest:
      return fb.from_order_key(key(base).maximum(chosen.max(axis)), tg_dtype(dtype))
    return fb.from_order_key(key(base).minimum(chosen.min(axis)), tg_dtype(dtype))
  return combine


def _scatter_with(ctx, combine, operand, indices, updates, dnums, mode):
  """The operand as (batching..., indexed dims flattened, other dims...) and the updates as (batching...,
  positions, other window dims...): `hits` (batching..., positions, indexed, 1...) says which update lands where.
  NB: a slice with a start out of range is dropped whole (XLA, FILL_OR_DROP and PROMISE_IN_BOUNDS); CLIP clamps it.
  """
  if operand.numel() == 0 or updates.numel() == 0:
    return operand
  batching, indexed = list(dnums.operand_batching_dims), sorted(dnums.scatter_dims_to_operand_dims)
  others = [d for d in range(operand.ndim) if d not in batching and d not in indexed]
  window_dims = [d for d in range(operand.ndim) if d not in dnums.inserted_window_dims and d not in batching]
  window_axis = dict(zip(window_dims, dnums.update_window_dims))
  window = [updates.shape[window_axis[d]] if d in window_axis else 1 for d in range(operand.ndim)]
  flat, inside = _targets(ctx.device, indices, ctx.in_avals[1].dtype, operand.shape, window,
                          dnums.scatter_dims_to_operand_dims, dnums.scatter_indices_batching_dims)
  scatter_axes = [a for a in range(updates.ndim) if a not in dnums.update_window_dims]
  order = [scatter_axes[d] for d in _batch_order(indices.ndim - 1, dnums.scatter_indices_batching_dims)]
  order += [window_axis[d] for d in (*indexed, *others) if d in window_axis]
  batch_shape = [operand.shape[d] for d in batching]
  other_window = [window[d] for d in others]
  positions = math.prod(flat.shape[len(batching):])
  updates = updates.permute(order).reshape((*batch_shape, positions, 1, *other_window))
  if GatherScatterMode.from_any(mode) != GatherScatterMode.CLIP:
    flat = (inside.reshape((*inside.shape, *[1] * (flat.ndim - inside.ndim)))).where(flat, -1)  # -1 hits nothing
  n_indexed = math.prod(operand.shape[d] for d in indexed)
  hits = _one_hot(flat.reshape((*batch_shape, positions)), n_indexed, len(others))
  other_shape = [operand.shape[d] for d in others]
  base = operand.permute((*batching, *indexed, *others)).reshape((*batch_shape, n_indexed, *other_shape))
  unchanged = (None,) * (len(batch_shape) + 1)
  result = combine(ctx, base.shrink(unchanged + tuple((0, w) for w in other_window)), hits, updates, len(batch_shape))
  if other_window != other_shape:  # the updates cover part of the other dims: the rest of the operand stays
    pads = unchanged + tuple((0, full - w) for full, w in zip(other_shape, other_window))
    result = Tensor.full(result.shape, True, buffer=False).pad(pads).where(result.pad(pads), base)
  result = result.reshape((*batch_shape, *[operand.shape[d] for d in indexed], *other_shape))
  return result.permute(np.argsort([*batching, *indexed, *others]).tolist())


def _scatter_rule(combine):
  def rule(ctx, operand, indices, updates, *, dimension_numbers, mode, update_jaxpr, update_consts,
           indices_are_sorted, unique_indices):
    # update_jaxpr is the combination the primitive's name already says
    return _scatter_with(ctx, combine, operand, indices, updates, dimension_numbers, mode)
  return rule


for _name, _combine in {"scatter-add": _combine_sum, "scatter-mul": _combine_product,
                        "scatter-max": _combine_max_or_min(True), "scatter-min": _combine_max_or_min(False)}.items():
  register(_name)(_scatter_rule(_combine))


@register("scatter")
def _scatter(ctx, operand, indices, updates, *, dimension_numbers, mode, update_jaxpr, update_consts,
             indices_are_sorted, unique_indices):
  body = None if update_jaxpr is None else ClosedJaxpr(update_jaxpr, update_consts)
  return _scatter_with(ctx, _combine_replace(body, unique_indices), operand, indices, updates, dimension_numbers,
                       mode)


# --- dynamic slices: a one-hot shift along each axis whose size changes

def _moved_along(bits, axis: int, offset, size: int):
  """out[j] = bits[j - offset] along `axis`, for j < size; zero where j - offset falls outside `bits`."""
  if isinstance(offset, int):  # a literal start: a static shrink and pad, no one-hot sum
    low, high = max(offset, 0), min(size, bits.shape[axis] + offset)  # the j that have a source
    if high <= low:  # nothing overlaps: all zeros
      low = high = min(low, size)
    span, padding = [(0, d) for d in bits.shape], [(0, 0)] * bits.ndim
    span[axis], padding[axis] = (low - offset, high - offset) if high > low else (0, 0), (low, size - high)
    return bits.shrink(tuple(span)).pad(tuple(padding))
  trailing = [1] * (bits.ndim - axis - 1)
  source = arange(bits.shape[axis]).reshape(-1, *trailing)
  target = arange(size).reshape(size, 1, *trailing)
  return (source + offset == target).where(bits.unsqueeze(axis), 0).sum(axis + 1, dtype=bits.dtype)


@register("dynamic_slice")
def _dynamic_slice(ctx, operand, *starts, slice_sizes):
  """NB: XLA clamps each start so that the slice fits in the operand."""
  dtype = ctx.in_avals[0].dtype
  bits = to_bits(operand, dtype)
  for axis, (start, size) in enumerate(zip(starts, slice_sizes)):
    if size != operand.shape[axis]:
      high = operand.shape[axis] - size
      known = _literal_start(start, high)
      start = known if known is not None else _clamped_start(start, ctx.in_avals[1 + axis].dtype, high)[0]
      bits = _moved_along(bits, axis, -start, size)
  return from_bits(bits, dtype)


@register("dynamic_update_slice")
def _dynamic_update_slice(ctx, operand, update, *starts):
  """NB: XLA clamps each start so that the update fits in the operand."""
  dtype = ctx.in_avals[0].dtype
  if update.numel() == 0:
    return operand
  bits, covered = to_bits(update, dtype), None
  for axis, start in enumerate(starts):
    size, full = update.shape[axis], operand.shape[axis]
    if size != full:
      known = _literal_start(start, full - size)
      start = known if known is not None else _clamped_start(start, ctx.in_avals[2 + axis].dtype, full - size)[0]
      bits = _moved_along(bits, axis, start, full)
      positions = arange(full).reshape(full, *[1] * (operand.ndim - axis - 1))
      along = (positions >= start) & (positions < start + size)
      covered = along if covered is None else covered & along
  return from_bits(bits, dtype) if covered is None else covered.where(from_bits(bits, dtype), operand)


# --- the max-pool pair

_SELECT = {"ge": lambda a, b: (a > b) | (a == b), "le": lambda a, b: (a < b) | (a == b)}  # NB: tinygrad's a >= b
# is not(a < b), true where a or b is NaN; XLA's comparisons are false there


def _walk(keys, values, select, key, value, order=None):
  """XLA's pass through each window (the last axis) in `order` (row-major by default): the pick moves on wherever
  select(pick, next) fails."""
  for p in order or range(keys.shape[-1]):
    moves = select(key, keys[..., p]).logical_not()
    key, value = moves.where(keys[..., p], key), moves.where(values[..., p], value)
  return value


def _spread(x, strides, offsets, shape):
  """A zero tensor of `shape` with x[i, ...] at (offsets + strides * i, ...)."""
  sizes = x.shape
  x = x.reshape([n for size in sizes for n in (size, 1)]).pad(
    tuple(p for stride in strides for p in ((0, 0), (0, stride - 1))))
  x = x.reshape([size * stride for size, stride in zip(sizes, strides)])
  return x.pad(tuple((o, max(0, full - o - size)) for o, full, size in zip(offsets, shape, x.shape))).shrink(
    tuple((0, full) for full in shape))


@register("select_and_scatter_add")
def _select_and_scatter_add(ctx, source, operand, *, select_prim, window_dimensions, window_strides, padding):
  """Each window of the operand picks one element as XLA's SelectAndScatter does, and its source value is added
  there. NB: on CPU, JAX pads the operand with select's identity (-inf for ge), so padding can be picked; what
  lands on it is cut off with the padding."""
  dtype = np.dtype(ctx.out_aval.dtype)
  if source.numel() == 0:  # nothing lands anywhere (tinygrad's pooling view refuses windows larger than the operand)
    return Tensor.zeros(*ctx.out_aval.shape, dtype=tg_dtype(dtype), device=ctx.device)
  padded = operand.pad(tuple(map(tuple, padding)), value=dtype_limit(dtype, largest=select_prim.name == "le"))
  keys = padded._pool(tuple(window_dimensions), tuple(window_strides)).flatten(source.ndim)
  positions = arange(keys.shape[-1]).expand(keys.shape)
  chosen = _walk(keys, positions, _SELECT[select_prim.name], keys[..., 0], 0)
  wide = dtype.kind in "iu"  # NB: integer sums wrap as unsigned ones do (signed overflow is undefined in C)
  if wide:
    source = source.cast(dtypes.uint64 if dtype.itemsize == 8 else dtypes.uint32)
  result = None
  for p, offsets in enumerate(np.ndindex(*window_dimensions)):
    share = _spread((chosen == p).where(source, 0), window_strides, offsets, padded.shape)
    result = share if result is None else result + share  # on booleans, tinygrad's + is XLA's or
  result = result.shrink(tuple((low, low + size) for (low, _), size in zip(padding, operand.shape)))
  return result.cast(tg_dtype(dtype)) if wide else result


@register("select_and_gather_add")
def _select_and_gather_add(ctx, tangents, operand, *, select_prim, window_dimensions, window_strides, padding,
                           base_dilation, window_dilation):
  """The tangent at the element each window selects: JAX lowers it to a reduce_window over (operand, tangent)
  pairs from (-inf, 0) for ge ((inf, 0) for le); base-dilation holes and padding hold that pair too. Among equal
  maxima the first in XLA's order wins (_xla_window_order)."""
  dtype = ctx.out_aval.dtype
  window = dict(window_dimensions=window_dimensions, window_strides=window_strides, padding=padding,
                base_dilation=base_dilation, window_dilation=window_dilation)
  init = dtype_limit(dtype, largest=select_prim.name == "le")
  keys = window_views(operand, init, window).flatten(ctx.out_aval.ndim)
  values = window_views(tangents, 0, window).flatten(ctx.out_aval.ndim)
  order = _xla_window_order(operand.shape, **window)
  return _walk(keys, values, _SELECT[select_prim.name], init, 0, order).cast(tg_dtype(dtype))


def _used_padding(size, window, stride, low, high) -> tuple[int, int]:
  """The padding of one dimension that windows reach which are not wholly padding."""
  starts = [start for start in range(-low, size + high - window + 1, stride) if start + window > 0 and start < size]
  return (max(0, -starts[0]), max(0, starts[-1] + window - size)) if starts else (0, 0)


def _xla_window_order(shape, *, window_dimensions, window_strides, padding, base_dilation, window_dilation):
  """The order in which XLA's CPU reduce_window visits a window's elements (indices of the row-major positions).

  NB: measured, not documented (jax 0.10.2's jaxlib, every pair of tied positions in windows of 1 to 4 dimensions,
  strides 1 and 2): row-major, except that where a dimension after the first has used padding (that windows not
  wholly padding reach) of exactly (0, 1), or is 2 wide with any used padding, the last such dimension's last window
  index comes after all the others: a 2 x 2 max pool with SAME padding and stride 1 is walked column-major. Dilated
  windows or operands are walked row-major, which matches XLA's in some cases and not in others (not measured
  further: a reduce_window's derivative is dilated only where the user dilates it)."""
  def special(d):
    used = _used_padding(shape[d], window_dimensions[d], window_strides[d], *padding[d])
    return window_dimensions[d] > 1 and (used == (0, 1) or window_dimensions[d] == 2 and used != (0, 0))
  positions = list(np.ndindex(*window_dimensions))
  dilated = any(n != 1 for n in (*base_dilation, *window_dilation))
  deferred = [] if dilated else [d for d in range(1, len(shape)) if special(d)]
  if not deferred:
    return list(range(len(positions)))
  d = deferred[-1]
  return sorted(range(len(positions)), key=lambda p: (positions[p][d] == window_dimensions[d] - 1, p))
