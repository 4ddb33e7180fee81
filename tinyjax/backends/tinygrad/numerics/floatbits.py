"""The bits of floats on tinygrad Tensors: widths, sign and magnitude, NaN by its bits, and XLA's total order of
values as integer keys (for min, max, sorting and comparisons).

Everything here moves or compares bits, so it is exact on every renderer; `# NB:` marks where tinygrad's folding of
constants or WGSL's packing of narrow integers forces a form.
"""
import jax
import numpy as np
from tinygrad import dtypes

F32, F64 = dtypes.float32, dtypes.float64
UINT = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
SINT = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}

def width(x) -> int:
  return x.dtype.itemsize * 8


def is_float(dtype) -> bool:
  """Whether a NumPy (or JAX) dtype is a real floating-point type. NB: not `dtype.kind == "f"`: bfloat16's kind is
  "V" (a NumPy extension type), which left its -0.0, NaN and limits to the integer paths."""
  return jax.dtypes.issubdtype(dtype, np.floating)


def bits(x):
  """The bit pattern of x as an unsigned integer of the same width."""
  return x.bitcast(UINT[x.dtype.itemsize])


def typed(u, value):
  """`value` as a constant of the unsigned integer tensor u's dtype, for a bit mask.

  NB: tinygrad folds `0 & c`, `0 ^ c` on a constant zero to the weakly typed constant c, which its C renderer bitcasts
  back to a float as an int of the wrong width (a compile error): masks on bits that may be constants are typed.
  """
  return u.const_like(value)


def sign_bit(x):
  # NB: the bound is typed: folded on a constant, an untyped 2**31 wraps to a negative int32 (then 0 >= it)
  b = bits(x)
  return b >= typed(b, 1 << (width(x) - 1))


def with_sign(magnitude, sign):
  """|magnitude| with the sign bit of `sign` (exact for zeros, infinities and NaN)."""
  top = 1 << (width(magnitude) - 1)
  m, s = bits(magnitude), bits(sign)
  return ((m & typed(m, top - 1)) | (s & typed(s, top))).bitcast(magnitude.dtype)


def fabs(x):
  b = bits(x)
  return (b & typed(b, (1 << (width(x) - 1)) - 1)).bitcast(x.dtype)


def isnan(x):
  """NB: not x != x: tinygrad's constants compare by their bits, so it folds NaN != NaN to False (in
  isnan(where(c, NaN, y)), as in asin's result); the magnitude's bits are above those of inf exactly for NaN."""
  b = bits(x)
  exponent, mantissa = dtypes.finfo(x.dtype)
  return (b & typed(b, (1 << (width(x) - 1)) - 1)) > typed(b, ((1 << exponent) - 1) << mantissa)


def nonzero(x):
  """x != 0 as XLA's: True for NaN. NB: by the magnitude's bits: a WGSL float `!=` with a NaN operand is False (Dawn
  on lavapipe), which turned a NaN column's Householder reflection into none."""
  if not dtypes.is_float(x.dtype):
    return x != 0
  b = bits(x)
  return (b & typed(b, (1 << (width(x) - 1)) - 1)) != typed(b, 0)


def on_wgsl(x) -> bool:
  """Whether x's device renders WGSL (WebGPU), which has no 16-bit integers and packs narrow arrays into words."""
  from tinygrad import Device
  from tinygrad.renderer.wgsl import WGSLRenderer
  return isinstance(Device[x.device].renderer, WGSLRenderer)


def order_key(x, nan_largest: bool | None = None):
  """Integers in XLA's total order of x's values: for floats -NaN < -inf < ... < -0.0 < 0.0 < ... < inf < NaN, or,
  with `nan_largest` True or False, every NaN the largest or the smallest key (NaN told by its bits, not x != x:
  WGSL); integers are their own keys, bools are uint8.

  NB: on WGSL, which has no 16-bit integers (an int16 key reversed max), 16-bit floats are keyed as float32
  (exactly). Elsewhere they keep their own width: tinygrad's folding of a widened inf or NaN constant's bits fails
  (OverflowError in a padded float16 reduce_window)."""
  if x.dtype == dtypes.bool:
    return x.cast(dtypes.uint8)
  if not dtypes.is_float(x.dtype):
    return x
  wide = x.cast(F32) if x.dtype.itemsize == 2 and on_wgsl(x) else x
  key = wide.bitcast(SINT[wide.dtype.itemsize])
  key = (key < 0).where(key ^ (2 ** (width(key) - 1) - 1), key)
  if nan_largest is None:
    return key
  return isnan(x).where(key.dtype.max if nan_largest else key.dtype.min, key)


def packed_on_wgsl(x) -> bool:
  """Whether WGSL packs x's array into 32-bit words (bool, 8- and 16-bit integers), written by read-modify-write."""
  return x.dtype.itemsize < 4 and x.dtype != dtypes.half and on_wgsl(x)


def from_order_key(key, dtype):
  """The value of (tinygrad's) `dtype` whose order_key is `key`: for floats the map of bits is its own inverse, and
  keys past every float's are NaN."""
  if dtype == dtypes.bool:
    return key != 0
  if not dtypes.is_float(dtype):
    return key.cast(dtype)
  wide = dtype if key.dtype.itemsize == 2 else {4: F32, 8: F64}[key.dtype.itemsize]
  return (key < 0).where(key ^ (2 ** (width(key) - 1) - 1), key).bitcast(wide).cast(dtype)


def positive_zero(x):
  """x with -0.0 made +0.0 (integers and bools as they are): XLA's sums start from +0.0, so a sum of -0.0s is +0.0;
  tinygrad's keeps -0.0.

  NB: NaN told by its bits: WGSL compilers may take NaN == 0 as True (a dot product's NaN became 0.0 on WEBGPU)."""
  if not dtypes.is_float(x.dtype):
    return x
  return (x.eq(0) & ~isnan(x)).where(0.0, x)


def max_or_min(x, axes, largest: bool):
  """XLA's max or min of floats over `axes`, on order keys: NaN propagates and -0.0 < +0.0 (tinygrad's skip NaN)."""
  key = order_key(x, nan_largest=largest)
  return from_order_key(key.max(axes) if largest else key.min(axes), x.dtype)


def minus(x):
  """-x as a flip of the sign bit.

  NB: tinygrad's -x is x * -1, which its simplifier merges with other terms: (y + x) - x -> y, (x - n c1) - n c2 ->
  x - n (c1 + c2) (which undoes a Cody-Waite split). Subtractions whose rounding matters add a flipped operand.
  """
  b = bits(x)
  return (b ^ typed(b, 1 << (width(x) - 1))).bitcast(x.dtype)
