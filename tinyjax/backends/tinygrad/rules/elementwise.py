"""Elementwise primitives: arithmetic, math functions, comparisons, bitwise ops and shifts, selection, casts and
bit-level conversions. Complex numbers are not supported (real, imag, conj and complex fall back to XLA).

Results are XLA's on CPU: exact ops give its bits, float functions come from `floatmath` (within an ulp or two,
or XLA's own expansion replayed). `# NB:` marks where tinygrad's obvious op gives something else.
XLA's CPU backend flushes denormal floats to zero; tinygrad keeps them (tests/xfail.py has that difference).
"""
import math
import operator

from tinygrad import dtypes
from tinygrad.dtype import can_lossless_cast
from tinygrad.uop.ops import Ops

from tinyjax.backends.tinygrad.numerics import floatbits as fb
from tinyjax.backends.tinygrad.numerics import floatmath as fm
from tinyjax.backends.tinygrad.numerics import xla_formulas as xf
from tinyjax.backends.tinygrad.table import register, tg_dtype


def _is_float(x) -> bool:
  return dtypes.is_float(x.dtype)


def _wrapping(op, float_op=None):
  """op on integers with two's-complement wraparound at the operands' width, on floats (as `float_op` if given)
  rounded to their dtype.

  NB: tinygrad's C kernels promote narrow integers without narrowing them again, and clang assumes that signed
  integers never overflow; XLA wraps every op. Unsigned 32/64-bit arithmetic, narrowed explicitly, does the same.
  """
  rounded = fm.rounded_op(float_op or op)

  def apply(*xs):
    dtype = xs[0].dtype
    if dtypes.is_float(dtype):
      guarded = _constant_operand(op, *xs)
      return rounded(*xs) if guarded is None else guarded
    unsigned = fb.UINT[dtype.itemsize]
    return _wrap(op(*(x.bitcast(unsigned).cast(fb.UINT[max(dtype.itemsize, 4)]) for x in xs)), unsigned).bitcast(dtype)
  return apply


def _wrap(x, unsigned):
  """Unsigned x cast to the unsigned dtype `unsigned` (as wide or narrower), modulo 2**bits.

  NB: tinygrad folds constant integer expressions without wrapping: 65536 * 65536 stays 2**32 in uint32, and 300
  cast to uint8 stays 300, which is wrong once another op uses them ((65536 * 65536) % 7). A mask wraps them.
  """
  return (x & fb.typed(x, (1 << (8 * unsigned.itemsize)) - 1)).cast(unsigned)


add, mul = _wrapping(operator.add), _wrapping(operator.mul)
sub = _wrapping(operator.sub, float_op=lambda x, y: x + fb.minus(y))


def _float_constant(x):
  """The value of a Tensor that is a broadcast float constant; None for anything else."""
  base = x.uop.base
  return base.arg if base.op is Ops.CONST and isinstance(base.arg, float) else None


def _zero_constant(x):
  """For a Tensor that is a broadcast constant zero: -1.0 or 1.0 (its sign); None for anything else."""
  value = _float_constant(x)
  return math.copysign(1.0, value) if value == 0.0 else None


def _constant_operand(op, x, y):
  """x op y when one side is a constant zero (or, for *, minus one), without tinygrad's simplifier (None when
  neither is).

  NB: IEEE (and XLA) give inf * 0 = NaN, NaN * 0 = NaN, -x * 0 = -0.0 and -0.0 + 0.0 = +0.0, which folding x * 0 -> 0
  and x + 0 -> x loses. tinygrad's own folds of floats are amended (amendments.py); a zero that is a constant in the
  kernel's code is still folded by WGSL's compilers, which may assume no NaN: such a zero never reaches the code.
  tinygrad also merges x * -1 with other terms in x (see floatbits.minus).
  """
  zx, zy = _zero_constant(x), _zero_constant(y)
  minus_one = op is operator.mul and -1.0 in (_float_constant(x), _float_constant(y))
  if zx is None and zy is None and not minus_one:
    return None
  # a jaxpr literal is a scalar beside an array operand (and a broadcast constant may be unexpanded): bring both
  # to the result's shape
  ndim = max(x.ndim, y.ndim)
  x, y = (t.reshape((1,) * (ndim - t.ndim) + t.shape) for t in (x, y))
  shape = tuple(b if a == 1 else a for a, b in zip(x.shape, y.shape))  # NB: not max: a size-0 dim stays empty
  x, y = x.expand(shape), y.expand(shape)
  if minus_one:
    return fb.minus(y if _float_constant(x) == -1.0 else x)
  if op is operator.mul:
    other, zero = (y, zx) if zx is not None else (x, zy)
    signed_zero = fb.with_sign(other.const_like(0), other if zero > 0 else -other)
    return (fb.isnan(other) | fb.fabs(other).eq(math.inf)).where(math.nan, signed_zero)
  if op is operator.sub:  # x - y is x + (-y), exactly
    return _constant_operand(operator.add, x, y.const_like(-zy * 0.0) if zy is not None else fb.minus(y))
  zero, other = (zx, y) if zx is not None else (zy, x)
  if zero < 0:  # x + (-0.0) is x, exactly
    return other
  return (other.eq(0) & ~fb.isnan(other)).where(other.const_like(0.0), other)  # x + 0.0 is x, -0.0 + 0.0 is +0.0


def _unary(fn):
  def rule(ctx, x, *, accuracy=None):  # `accuracy` asks for a precision mode; XLA on CPU ignores it, as do we
    return fn(x)
  return rule


def _binary(fn):
  def rule(ctx, x, y):
    return fn(x, y)
  return rule


# --- arithmetic
def _neg(x):
  return fb.minus(x) if _is_float(x) else sub(x.const_like(0), x)


def _abs(x):
  return fb.fabs(x) if _is_float(x) else (x < 0).where(_neg(x), x)  # NB: tinygrad's x * sign(x) keeps -0.0


def _sign(x):
  if dtypes.is_unsigned(x.dtype):
    return x.ne(0).cast(x.dtype)
  if not _is_float(x):
    return (x > 0).where(1, (x < 0).where(-1, 0)).cast(x.dtype)
  return (x > 0).where(1.0, (x < 0).where(-1.0, x))  # NB: tinygrad's sign gives 1 for NaN and 0.0 for -0.0


def _safe_divisor(x, y):
  """y where integer x / y is defined, 1 elsewhere.

  NB: tinygrad kills the process with SIGFPE on an integer division by zero or INT_MIN / -1.
  """
  undefined = y.eq(0)
  if dtypes.is_int(x.dtype) and not dtypes.is_unsigned(x.dtype):
    undefined = undefined | (x.eq(x.dtype.min) & y.eq(-1))  # XLA: INT_MIN / -1 = INT_MIN, % -1 = 0
  return undefined.where(1, y)


def _integer_quotient(x, y, op):
  """op (C division or remainder) on integers widened to 32 bits, so that the result is narrowed explicitly."""
  wide = dtypes.int32 if x.dtype.itemsize < 4 else x.dtype
  return op(x.cast(wide), _safe_divisor(x, y).cast(wide)).cast(x.dtype)


def _div(x, y, broadcast_divisor=False):
  if _is_float(x):
    if broadcast_divisor:
      # NB: XLA divides by a broadcast operand as a multiplication by its reciprocal; tinygrad turns x * (1 / y)
      # back into x / y, but not -(x * (-1 / y))
      return -fm.rounded_op(operator.mul)(x, fm.rounded_op(fm.div)(y.const_like(-1), y))
    return fm.rounded_op(fm.div)(x, y)
  quotient = _integer_quotient(x, y, lambda a, b: a.div(b, rounding_mode="trunc"))
  return y.eq(0).where(-1 if not dtypes.is_unsigned(x.dtype) else x.dtype.max, quotient)  # XLA: x / 0 = -1


def _rem(x, y):
  if _is_float(x):
    return fm.fmod(x, y)  # NB: tinygrad's x - trunc(x / y) * y is inexact for large quotients
  return y.eq(0).where(x, _integer_quotient(x, y, lambda a, b: a.fmod(b)))  # XLA: x % 0 = x


def _max(x, y):
  if x.dtype == dtypes.bool:
    return x | y
  if not _is_float(x):
    return x.maximum(y)
  # NB: tinygrad's maximum drops NaN and may return -0.0 for max(-0.0, 0.0); XLA propagates NaN, orders -0.0 < 0.0
  # NB: NaN first, by its bits: WGSL compilers may assume that comparisons never see NaN
  tie = (fb.bits(x) & fb.bits(y)).bitcast(x.dtype)
  return _either_nan(x, y).where(_nan_of(x, y), (x > y).where(x, (y > x).where(y, tie)))


def _min(x, y):
  if x.dtype == dtypes.bool:
    return x & y
  if not _is_float(x):
    return x.minimum(y)
  tie = (fb.bits(x) | fb.bits(y)).bitcast(x.dtype)
  return _either_nan(x, y).where(_nan_of(x, y), (x < y).where(x, (y < x).where(y, tie)))


def _either_nan(x, y):
  return fb.isnan(x) | fb.isnan(y)


def _nan_of(x, y):
  """The NaN among x and y (where either is NaN).

  NB: not x + y, which tinygrad may fold: with y = x * -1, x + x * -1 -> x * 0 -> 0."""
  return fb.isnan(x).where(x, y)


def _round(x, away_from_zero: bool):
  whole = x.trunc()
  fraction = fb.fabs(x - whole)
  odd = (whole * 0.5).trunc().ne(whole * 0.5)
  # NB: tinygrad's round is half-to-even only, and loses the sign of -0.0
  half = fraction.eq(0.5)
  up = (fraction > 0.5) | (half if away_from_zero else half & odd)
  return up.where(whole + (x > 0).where(1.0, -1.0), whole)


def integer_power(x, y: int, times, one, divide):
  """x ** y by repeated squaring with the product `times`, the multiplications in JAX's order (XLA rounds each);
  `one` for y = 0, and 1 / x ** -y by `divide` for a negative y. (complexmath uses it with complex products.)"""
  result, base, n = None, x, abs(y)
  while n:
    if n & 1:
      result = base if result is None else times(result, base)
    n >>= 1
    if n:
      base = times(base, base)
  if result is None:
    return one
  return divide(one, result) if y < 0 else result


def _integer_pow(x, y: int):
  return integer_power(x, y, mul, x.const_like(1), _div)


def _power(x, y):
  return fm.power(x, y.cast(x.dtype))  # XLA converts an integer exponent to the base's dtype


def _signed_like(rounded, x):
  """floor(x) or ceil(x), with the sign of x as IEEE gives it (floor(-0.0) and ceil(-0.5) are -0.0).

  NB: tinygrad folds them on constants with Python's math.floor and math.ceil, whose integer results lose -0.0."""
  return fb.with_sign(rounded, x)


FLOAT_FUNCTIONS = {
  "exp": fm.exp, "exp2": xf.exp2, "log": fm.log, "log1p": fm.log1p, "expm1": fm.expm1, "tanh": xf.tanh,
  "logistic": xf.logistic, "sin": fm.sin, "cos": fm.cos, "tan": fm.tan, "asin": xf.asin, "acos": xf.acos,
  "atan": fm.atan, "sinh": xf.sinh, "cosh": xf.cosh, "asinh": fm.asinh, "acosh": fm.acosh, "atanh": fm.atanh,
  "sqrt": fm.rounded_op(lambda x: x.sqrt()), "rsqrt": fm.rsqrt, "cbrt": fm.cbrt, "erf": xf.erf, "erfc": xf.erfc,
  "erf_inv": xf.erf_inv, "lgamma": xf.lgamma, "digamma": xf.digamma,
  "floor": lambda x: _signed_like(x.floor(), x), "ceil": lambda x: _signed_like(x.ceil(), x),
  "is_finite": lambda x: fb.fabs(x) < math.inf,
}
for _name, _fn in {**FLOAT_FUNCTIONS, "neg": _neg, "abs": _abs, "sign": _sign, "not": lambda x: ~x,
                   "square": lambda x: mul(x, x)}.items():
  register(_name)(_unary(_fn))


@register("div")
def _div_rule(ctx, x, y):
  return _div(x, y, broadcast_divisor=ctx.in_avals[1].shape != ctx.out_aval.shape)


for _name, _fn in {"add": add, "add_any": add, "sub": sub, "rem": _rem, "max": _max, "min": _min,
                   "pow": _power, "atan2": fm.atan2, "and": operator.and_, "or": operator.or_,
                   "xor": operator.xor}.items():
  register(_name)(_binary(_fn))


@register("mul")
def _mul(ctx, x, y, *, out_dtype=None):
  return mul(x, y).cast(tg_dtype(ctx.out_aval.dtype))


@register("integer_pow")
def _integer_pow_rule(ctx, x, *, y):
  return _integer_pow(x, y)


@register("round")
def _round_rule(ctx, x, *, rounding_method):
  return _round(x, away_from_zero=int(rounding_method) == 0)


# --- comparisons
def _le(x, y):
  return (x < y) | x.eq(y)  # NB: tinygrad's x <= y is not(x > y), True when either is NaN


def _ordered(compare):
  """A float comparison that is False where either operand is NaN (IEEE's ordered comparisons, XLA's).

  NB: WGSL compilers may assume that no value is NaN: x != x and comparisons with NaN came out either way on WebGPU.
  NaN is told by its bits."""
  def apply(x, y):
    if not _is_float(x):
      return compare(x, y)
    if x.uop is y.uop and compare in (_equal, _le):  # NB: jnp.isnan is x != x: see fb.isnan
      return ~fb.isnan(x)
    return compare(x, y) & ~_either_nan(x, y)
  return apply


def _equal(x, y):
  return x.eq(y)


def _ne(x, y):
  return ~_ordered(_equal)(x, y)


for _name, _fn in {"eq": _ordered(_equal), "ne": _ne, "lt": _ordered(operator.lt), "gt": _ordered(operator.gt),
                   "le": _ordered(_le), "ge": _ordered(lambda x, y: _le(y, x))}.items():
  register(_name)(_binary(_fn))
  if _name in ("eq", "lt", "le"):
    register(f"{_name}_to")(_binary(lambda x, y, fn=_fn: fn(fb.order_key(x), fb.order_key(y))))


# --- shifts and bit counting: on unsigned or signed 32/64-bit views, narrowed explicitly
def _bit_shift(x, y, kind: str):
  width = fb.width(x)
  view = (fb.SINT if kind == "shift_right_arithmetic" else fb.UINT)[x.dtype.itemsize]
  wide = (fb.SINT if kind == "shift_right_arithmetic" else fb.UINT)[max(x.dtype.itemsize, 4)]
  amount = fb.bits(y)  # negative amounts are out of range too
  out_of_range = amount >= width
  if kind == "shift_right_arithmetic":  # NB: C shifts by >= the width are undefined; XLA fills with the sign
    amount = out_of_range.where(width - 1, amount)
  else:
    amount = out_of_range.where(0, amount)
  value = x.bitcast(view).cast(wide)
  shifted = value << amount.cast(wide) if kind == "shift_left" else value >> amount.cast(wide)
  shifted = _wrap(shifted.bitcast(fb.UINT[wide.itemsize]), fb.UINT[view.itemsize]).bitcast(x.dtype)
  return shifted if kind == "shift_right_arithmetic" else out_of_range.where(0, shifted)


for _kind in ("shift_left", "shift_right_logical", "shift_right_arithmetic"):
  register(_kind)(_binary(lambda x, y, kind=_kind: _bit_shift(x, y, kind)))


def _repeated_bytes(byte: int, width: int) -> int:
  return int.from_bytes(bytes([byte]) * (width // 8), "little")


@register("population_count")
def _population_count(ctx, x):
  width = max(fb.width(x), 32)
  v = fb.bits(x).cast(fb.UINT[width // 8])
  v = v - ((v >> 1) & _repeated_bytes(0x55, width))
  v = (v & _repeated_bytes(0x33, width)) + ((v >> 2) & _repeated_bytes(0x33, width))
  v = (v + (v >> 4)) & _repeated_bytes(0x0F, width)
  return ((v * _repeated_bytes(0x01, width)) >> (width - 8)).cast(x.dtype)


@register("clz")
def _clz(ctx, x):
  width = max(fb.width(x), 32)
  v = fb.bits(x).cast(fb.UINT[width // 8])
  count = v.eq(0).cast(v.dtype)
  step = width // 2
  while step:  # binary search for the highest set bit
    empty = (v >> (width - step)).eq(0)
    count = count + empty.where(step, 0).cast(v.dtype)
    v = empty.where(v << step, v)
    step //= 2
  return (count - (width - fb.width(x))).cast(x.dtype)


# --- selection
@register("select_n")
def _select_n(ctx, which, *cases):
  if len(cases) == 1:
    return cases[0]
  if which.dtype == dtypes.bool:
    return which.where(cases[1], cases[0])

  def pick(offset, cases):  # the binary tree of selects XLA lowers to (out-of-range `which` clamps to the ends)
    if len(cases) == 1:
      return cases[0]
    middle = len(cases) // 2
    return (which < offset + middle).where(pick(offset, cases[:middle]), pick(offset + middle, cases[middle:]))
  return pick(0, cases)


@register("clamp")
def _clamp(ctx, low, x, high):
  return _min(_max(x, low), high)


# --- casts and bit-level conversions
@register("convert_element_type")
def _convert_element_type(ctx, x, *, new_dtype, weak_type, sharding):
  dtype = tg_dtype(new_dtype)
  if dtype == dtypes.bool:
    return fb.nonzero(x)  # NaN is True (told by its bits: see _ordered)
  if dtypes.is_int(x.dtype) and dtypes.is_int(dtype):
    return _convert_integer(x, dtype)
  if not (_is_float(x) and dtypes.is_int(dtype)):
    return fm.narrow(x, dtype)
  # NB: C casts of NaN and out-of-range floats are undefined (tinygrad gives INT_MIN); XLA saturates, NaN -> 0
  low, high = dtype.min, dtype.max
  ordered = ~fb.isnan(x)  # NB: tinygrad's >= is True for NaN, and WGSL may take any comparison with NaN as True
  too_low, too_high = ordered & ((x < low) | x.eq(low)), ordered & ((x > high + 1) | x.eq(high + 1))
  # NB: x.trunc() (what the cast does anyway) stops tinygrad pushing the cast into a select inside x, where it
  # would cast a NaN constant branch to an integer (a ValueError at the flush: jnp.arcsin(x).astype(int))
  in_range = (too_low | too_high | ~ordered).where(0, x.trunc()).cast(dtype)
  return too_high.where(high, too_low.where(low, in_range))


def _convert_integer(x, dtype):
  """x cast to another integer dtype, wrapping modulo 2**bits as XLA does.

  NB: tinygrad's range analysis takes a cast to keep the values it can: uint8 236 cast to int8 (-20) was "never
  negative", so x < 0 folded to False and abs gave -20. A cast that may wrap goes through unsigned bits instead.
  """
  if can_lossless_cast(x.dtype, dtype):
    return x.cast(dtype)
  if dtype.itemsize > x.dtype.itemsize:  # widening to unsigned: sign-extend first, then reinterpret
    return x.cast((fb.UINT if dtypes.is_unsigned(x.dtype) else fb.SINT)[dtype.itemsize]).bitcast(dtype)
  return _wrap(fb.bits(x), fb.UINT[dtype.itemsize]).bitcast(dtype)


@register("bitcast_convert_type")
def _bitcast_convert_type(ctx, x, *, new_dtype):
  dtype, shape = tg_dtype(new_dtype), ctx.out_aval.shape
  if dtype.itemsize > x.dtype.itemsize:  # the last axis of x holds the pieces of one element
    x = x.reshape(shape[:-1] + (-1,)) if shape else x.reshape(-1)
  return x.bitcast(dtype).reshape(shape)


@register("reduce_precision")
def _reduce_precision(ctx, x, *, exponent_bits, mantissa_bits):
  """XLA's rounding to a float with fewer bits: mantissa to nearest even, then exponent overflow and underflow."""
  exponent_width, mantissa_width = {2: (5, 10), 4: (8, 23), 8: (11, 52)}[x.dtype.itemsize]
  width, v = fb.width(x), fb.bits(x)
  if mantissa_bits < mantissa_width:
    dropped = mantissa_width - mantissa_bits
    v = v + (((v >> dropped) & 1) + ((1 << (dropped - 1)) - 1))
    v = v & (((1 << width) - 1) ^ ((1 << dropped) - 1))
  if exponent_bits < exponent_width:
    exponent_mask = ((1 << exponent_width) - 1) << mantissa_width
    bias, new_bias = (1 << (exponent_width - 1)) - 1, (1 << (exponent_bits - 1)) - 1
    exponent, sign = v & exponent_mask, v & (1 << (width - 1))
    v = (exponent > (bias + new_bias) << mantissa_width).where(
      sign | exponent_mask, (exponent <= (bias - new_bias) << mantissa_width).where(sign, v))
  return fb.isnan(x).where(x, v.bitcast(x.dtype))


@register("nextafter")
def _nextafter(ctx, x, y):
  top = 1 << (fb.width(x) - 1)
  bx, by = fb.bits(x), fb.bits(y)
  magnitude_x, magnitude_y = bx & (top - 1), by & (top - 1)
  toward_zero = (magnitude_x > magnitude_y) | ((bx ^ by) >= top)
  step = toward_zero.where(bx - 1, bx + 1)
  from_zero = magnitude_y.eq(0).where(by, (by & top) | 1)  # the smallest denormal, signed like y
  result = x.eq(y).where(by, magnitude_x.eq(0).where(from_zero, step))
  return (fb.isnan(x) | fb.isnan(y)).where(math.nan, result.bitcast(x.dtype))
