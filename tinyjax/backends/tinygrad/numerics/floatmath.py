"""Float functions on tinygrad Tensors that XLA computes to an ulp or two (exp, log, sin, pow, atan2, ...), agreeing
with XLA on CPU, for the elementwise rules.

Each function takes and returns Tensors of one float dtype. float32 (and float16 and bfloat16, computed in float32
and rounded) by range reduction and polynomials in float32 and integer bit manipulation, as XLA expands them, within
a few ulp on every device (no float64, which WebGPU and Metal lack; but sin and cos, in float64 on the host's CPU as
glibc computes them for XLA); float64 by tinygrad's float64 functions. The
functions XLA expands into a formula of these (erf, lgamma, logistic, ...) are in xla_formulas.py; the bit-level
helpers in floatbits.py.
`# NB:` marks where tinygrad's own function, or its optimizer's rewriting of float expressions, differs from XLA.
Division is Ops.FDIV, which tinyjax makes an operation of every tinygrad renderer (amendments.py).
"""
import ctypes
import functools
import math

import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.uop.ops import Ops

from tinyjax.backends.tinygrad.numerics.floatbits import (F32, F64, bits, fabs, isnan, minus, nonzero, sign_bit, typed,
                                                          width, with_sign)
from tinyjax.backends.tinygrad.numerics.rounding import ROUNDED, rounded

INF, NAN = math.inf, math.nan


def div(x, y):
  """x / y, one IEEE division (Ops.FDIV, which every renderer is taught: amendments.py).

  NB: tinygrad's `/` is x * (1 / y), which its optimizer rewrites further: x / x -> 1, x / (1 + x) -> 1 - 1 / (1 + x).
  """
  x = x if isinstance(x, Tensor) else y.const_like(x)
  x, y = x._broadcasted(y)
  if (zero := y.uop.base).op is Ops.CONST and zero.arg == 0:
    return _over_zero(x, negative=math.copysign(1.0, zero.arg) < 0)
  return x.alu(Ops.FDIV, y)


def _over_zero(x, negative: bool):
  """x / 0.0 (-0.0 when `negative`) as IEEE gives it: NaN for 0 and NaN, else an infinity of the two signs' product.

  NB: written out, not divided: a WGSL shader divides by a literal zero as its compilers fold it (0 / 0.0 was 0.0
  on WebGPU: the mean of an empty array, jnp.nanmean's of an all-NaN row)."""
  infinity = with_sign(x.const_like(INF), x)
  infinity = minus(infinity) if negative else infinity
  return (isnan(x) | ~nonzero(x)).where(x.const_like(NAN), infinity)


def poly(x, coefficients, fused=True):
  """Horner's rule, highest power first (the evaluation order of XLA's expansions). With `fused=False` each product
  is rounded before its sum, as code compiled without fused multiply-adds computes it (clang and POCL fuse a product
  and a sum written together)."""
  result = coefficients[0]
  for c in coefficients[1:]:
    result = (result * x if fused else _opaque(result * x)) + c
  return result


def narrow(x, dtype):
  """x cast to `dtype`, and really rounded to it (float32 to a 16-bit float: to nearest even, by its bits: see
  rounding.py)."""
  return rounded(x.cast(F32).cast(dtype)) if dtype in ROUNDED and x.dtype != dtype else x.cast(dtype)


def in_f32(fn):
  """fn evaluated in float32 at least, as XLA evaluates its expansions for float16; a function of one operand
  returns NaN for NaN.

  NB: WGSL compilers may assume that no value is NaN, and select the wrong branch of a comparison with one: NaN is
  passed through by its bits.
  """
  def apply(*xs):
    result = narrow(fn(*(x.cast(F32) for x in xs)), xs[0].dtype) if xs[0].dtype.itemsize < 4 else fn(*xs)
    return isnan(xs[0]).where(xs[0], result) if len(xs) == 1 else result
  return apply


def rounded_op(op):
  """op rounded to the operands' dtype, as XLA rounds each op.

  NB: tinygrad's C kernels keep float16 intermediates in float precision; compute in float32 and round.
  """
  def apply(*xs):
    if xs[0].dtype.itemsize < 4:
      return narrow(op(*(x.cast(F32) for x in xs)), xs[0].dtype)
    return op(*xs)
  return apply


def by_dtype(f32, f64):
  """A function whose float64 kernel is `f64` and whose float32 kernel is `f32` (narrower floats run in float32).

  Float32 math stays in float32: devices without float64 (WebGPU, Metal) run it, and it is faster where float64 exists.
  """
  return in_f32(lambda *xs: f64(*xs) if xs[0].dtype == F64 else f32(*xs))


def _split(x):
  """x = high + low, high with the top 12 of float32's 24 significant bits (so products of highs are exact)."""
  b = bits(x)
  high = (b & typed(b, 0xFFFFF000)).bitcast(F32)
  return high, x + minus(high)


def _opaque(x):
  """x, behind an operation tinygrad does not see through (an all-ones mask of its bits).

  NB: tinygrad reassociates chains of additions ((a + b) + c -> (a + c) + b, constants last); an error-free sum
  needs its operands to be the values it rounded, so each is made a value of its own.
  """
  b = bits(x)
  return (b & typed(b, (1 << width(x)) - 1)).bitcast(x.dtype)


def rounded_product(x, y):
  """x * y rounded as a value of its own: no compiler fuses it with a sum it meets into a multiply-add."""
  return _opaque(x * y)


def reciprocal(x):
  """1 / x (one IEEE division) as a value of its own. NB: tinygrad's optimizer turns x * (1 / y) into x / y."""
  return _opaque(div(1.0, x))


def _two_sum(a, b):
  """(s, e) with s = fl(a + b) and s + e = a + b exactly (Knuth)."""
  a, b = _opaque(a), _opaque(b)
  s = a + b
  b_virtual = s + minus(a)
  a_virtual = s + minus(b_virtual)
  return s, _opaque(a + minus(a_virtual)) + _opaque(b + minus(b_virtual))


def _two_product(a, b):
  """(p, e) with p = fl(a b) and p + e = a b exactly (Dekker), for float32: partial sums in Dekker's order."""
  p = a * b
  (ah, al), (bh, bl) = _split(_opaque(a)), _split(_opaque(b))
  error = _opaque(ah * bh + minus(p))
  error = _opaque(error + ah * bl)
  return p, _opaque(error + al * bh) + al * bl


def _power_of_two(n):
  """2**n for int32 n in [-126, 127], as a float32 built from its bits."""
  return ((n + 127).cast(dtypes.uint32) << 23).bitcast(F32)


def _scale(x, n):
  """x * 2**n for float32 x and int32 n in [-252, 254], rounded once (gradual underflow, overflow to inf)."""
  half = n >> 1
  return x * _power_of_two(half) * _power_of_two(n - half)


# --- float32 kernels: range reduction and polynomials in float32 (Cephes' single-precision coefficients, as
# XLA's CPU backend expands exp and log), good to a few ulp
LN2_HIGH, LN2_LOW = 0.693359375, -2.12194440e-4  # ln 2 = LN2_HIGH + LN2_LOW; n * LN2_HIGH is exact for |n| < 2**15
EXP32 = [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1]
LOG32 = [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
         2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1]


def _exp32(x):
  nan = isnan(x)
  x = nan.where(0.0, (x > 89.0).where(89.0, (x < -104.0).where(-104.0, x)))  # beyond: inf and 0 (and no NaN)
  n = (x * (1 / math.log(2)) + 0.5).floor()
  r = (x + minus(n * LN2_HIGH)) + minus(n * LN2_LOW)  # Cody and Waite: x - n ln 2, |r| <= ln 2 / 2
  return nan.where(math.nan, _scale((r * r * poly(r, EXP32) + r) + 1.0, n.cast(dtypes.int32)))


def _expm1_32(x):
  # NB: tinygrad has no expm1: a Taylor series where exp(x) - 1 would cancel (|x| < ln 2 / 2: 1e-11 relative)
  series = x + x * x * poly(x, [1 / math.factorial(n) for n in range(10, 1, -1)])
  return (fabs(x) < 0.35).where(series, _exp32(x) + -1.0)


def _frexp32(x):
  """(f, e) with x = (1 + f) 2**e, 1 + f in [sqrt(1/2), sqrt(2)), f exact, for positive finite float32 x.

  NB: f comes from the mantissa's integer bits, not as m - 1: written when tinygrad moved an added constant past
  later terms, (m - 1) + y -> (m + y) - 1, rounding m + y (a rule amendments.py now declines for floats); the bits
  give the same exact f.
  """
  denormal = x < 2.0 ** -126
  b = bits(denormal.where(x * 2.0 ** 23, x))
  e = (b >> 23).cast(dtypes.int32) - denormal.where(150, 127)
  mantissa = (b & typed(b, 0x7FFFFF)).cast(dtypes.int32)  # m = 1 + mantissa 2**-23, in [1, 2)
  high = mantissa > round((math.sqrt(2) - 1) * 2 ** 23)  # then m / 2 = 1 + (mantissa - 2**23) 2**-24
  f = high.where((mantissa - (1 << 23)).cast(F32) * 2.0 ** -24, mantissa.cast(F32) * 2.0 ** -23)
  return f, (e + high.cast(dtypes.int32)).cast(F32)


def _log_parts(f, e):
  """log((1 + f) 2**e) for f in [sqrt(1/2) - 1, sqrt(2) - 1] (exact), in Cephes' order of additions."""
  z = f * f
  y = (f * z * poly(f, LOG32) + e * LN2_LOW) + z * -0.5
  return (f + y) + e * LN2_HIGH


def _log_specials(x, result):
  """log's values at 0 (-inf), inf (inf), negatives and NaN (NaN)."""
  result = x.eq(math.inf).where(math.inf, x.eq(0).where(-math.inf, result))
  return ((x < 0) | isnan(x)).where(math.nan, result)


def _log32(x):
  return _log_specials(x, _log_parts(*_frexp32(x)))


# log1p near 0 as XLA's CPU backend expands it (its elemental emitter's EmitLog1p): Cephes' rational approximation,
# x - x**2 / 2 + x**3 P(x) / Q(x) for |x| < sqrt(2) - 1, log(1 + x) beyond (measured: XLA's float32 bits on 200,000
# draws)
LOG1P_P = [4.5270000862445199635215e-5, 4.9854102823193375972212e-1, 6.5787325942061044846969,
           2.9911919328553073277375e1, 6.0949667980987787057556e1, 5.7112963590585538103336e1,
           2.0039553499201281259648e1]
LOG1P_Q = [1.0, 1.5062909083469192043167e1, 8.3047565967967209469434e1, 2.2176239823732856465394e2,
           3.0909872225312059774938e2, 2.1642788614495947685003e2, 6.0118660497603843919306e1]


def _log1p_near_zero(x):
  squared = x * x
  return x + (squared * -0.5 + x * squared * div(poly(x, LOG1P_P), poly(x, LOG1P_Q)))


def _log1p32(x):
  # NB: tinygrad has no log1p
  return (fabs(x) < math.sqrt(2) - 1).where(_log1p_near_zero(x), _log32(x + 1.0))


# Payne and Hanek's reduction: x 2/pi modulo 4 from the bits of 2/pi, in 16-bit words of integer arithmetic (exact on
# every device: no float64, no 64-bit integers)
def _bits_of_two_over_pi(count: int) -> int:
  """floor(2/pi 2**count), by Machin's formula in integers."""
  guard = count + 64

  def arctan_inverse(n):  # arctan(1/n) 2**guard
    total, term, k = 0, (1 << guard) // n, 0
    while term:
      total += term // (2 * k + 1) if k % 2 == 0 else -(term // (2 * k + 1))
      term //= n * n
      k += 1
    return total
  pi = 16 * arctan_inverse(5) - 4 * arctan_inverse(239)
  return (1 << (count + 1 + guard)) // pi


# enough words for a float64's 24-bit part of exponent up to 1000 (the float32 kernels read the first 13)
TWO_OVER_PI_WORDS = [(_bits_of_two_over_pi(16 * 76) >> (16 * (75 - w))) & 0xFFFF for w in range(76)]
# The polynomials of sin and cos on |r| <= pi/4, r + r^3 P(r^2) and 1 + c r^2 + r^4 Q(r^2), by the dtype they are
# evaluated in: in float64 glibc's sinf and cosf (XLA's CPU code calls them for float32), in float32 Cephes' (which
# keep float16 results XLA's: glibc's in float32 do not); highest power first, P's then c, Q's
SIN_ODD = {F64: [float.fromhex(h) for h in ("-0x1.994eb3774cf24p-13", "0x1.1107605230bc4p-7", "-0x1.555545995a603p-3")],
           F32: [-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1]}
COS_EVEN = {F64: [float.fromhex(h) for h in ("0x1.99343027bf8c3p-16", "-0x1.6c087e89a359dp-10", "0x1.55553e1068f19p-5",
                                             "-0x1.ffffffd0c621cp-2")],
            F32: [2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2, -0.5]}


def _selected(index, values: list, first: int, like):
  """values[index - first] as a constant of `like`'s dtype, for an integer tensor index in [first, first + len(values)):
  a balanced tree of selects, nested log2 n deep in a kernel's expression where a chain of them nests n deep (which
  depth.py bounds by cutting the kernel)."""
  if len(values) == 1:
    return like.const_like(values[0])
  half = len(values) // 2
  return (index < first + half).where(_selected(index, values[:half], first, like),
                                      _selected(index, values[half:], first + half, like))


def _times_two_over_pi(mantissa, exponent, max_exponent: int, n: int) -> list:
  """M 2**E 2/pi mod 4 as n 16-bit digits (uint32 tensors, least significant first): 2 integer bits, then 16 n - 2
  bits of fraction, exact to 2**(26 - 16 n), for a 24-bit integer M (uint32) and E (int32) in [-24, max_exponent].

  Bit j of 2/pi (2/pi = 0.b1 b2 ...) counts M 2**(E - j), a multiple of 4 for j <= E - 2: the 16 n bits from E - 1
  on (W) give M 2**E 2/pi mod 4 = M W 2**(2 - 16 n).
  """
  u32 = dtypes.uint32
  shifted = exponent + 30  # = 16 (q + 2) + rho: the window starts at bit rho of word q
  q, rho = (shifted >> 4) - 2, (shifted & 15).cast(u32)

  def word(offset):  # word q + offset of 2/pi's bits (0 before the point)
    indices = [value + offset for value in range(-2, (max_exponent + 30) // 16 - 1)]
    return _selected(q, [TWO_OVER_PI_WORDS[i] if 0 <= i < len(TWO_OVER_PI_WORDS) else 0 for i in indices], -2,
                     mantissa)
  words = [word(i) for i in range(n + 1)]
  # W's n 16-bit limbs, least significant first
  limbs = [((words[i] << rho) | (words[i + 1] >> (16 - rho))) & 0xFFFF for i in range(n - 1, -1, -1)]
  low, high = mantissa & 0xFFFF, mantissa >> 16
  columns = [mantissa.const_like(0) for _ in range(n)]
  for i, limb in enumerate(limbs):
    for k, m in ((0, low), (1, high)):
      if i + k < n:
        product = m * limb  # below 2**32
        columns[i + k] = columns[i + k] + (product & 0xFFFF)
        if i + k + 1 < n:
          columns[i + k + 1] = columns[i + k + 1] + (product >> 16)
  return _carried(columns)


def _carried(columns: list) -> list:
  """Columns of 16-bit digits with sums below 2**32 as digits, the carry out of the top one dropped (mod 4)."""
  digits, carry = [], 0
  for column in columns:
    total = column + carry
    digits.append(total & 0xFFFF)
    carry = total >> 16
  return digits


def _nearest_quadrant(digits, dtype):
  """(r, j) with digits (a 2/pi mod 4, as _times_two_over_pi gives it) = j + r 2/pi, |r| <= pi/4, j an int32 in
  [0, 4); r in `dtype`, from the digits that are exact (those above 2**(26 - 16 n))."""
  u32 = dtypes.uint32
  exact = (16 * len(digits) - 40) // 16 + 1
  # the top digit: 2 integer bits, then 14 bits of fraction; round to the nearest quadrant
  top = digits[-1]
  quadrant, fraction = top >> 14, digits[-exact:-1] + [top & 0x3FFF]
  up = (top & 0x2000).ne(0)
  negated, carry = [], 1
  for i, digit in enumerate(fraction):  # 1 - fraction, in the same bits
    last = i == len(fraction) - 1
    total = (digit ^ (0x3FFF if last else 0xFFFF)) + carry
    negated.append(total & (0x3FFF if last else 0xFFFF))
    carry = total >> (14 if last else 16)
  fraction = [up.where(n, d) for n, d in zip(negated, fraction)]
  magnitude = fraction[0].const_like(0).cast(dtype)
  for i, digit in enumerate(fraction):  # positive terms, smallest first
    magnitude = magnitude + digit.cast(dtype) * 2.0 ** (-14 - 16 * (len(fraction) - 1 - i))
  r = magnitude * (math.pi / 2)
  return up.where(minus(r), r), ((quadrant + up.cast(u32)) & 3).cast(dtypes.int32)


def _reduce_pi_over_2(a):
  """(r, j) with a = r + j pi/2 (mod 2 pi), |r| <= pi/4 (r in float32), j an int32 in [0, 4), for float32
  a >= pi/4 (finite): Payne and Hanek's reduction of a = M 2**E, E in [-24, 104]."""
  b = bits(a)
  exponent = (b >> 23).cast(dtypes.int32) - 150
  mantissa = (b & typed(b, 0x7FFFFF)) | typed(b, 0x800000)
  return _nearest_quadrant(_times_two_over_pi(mantissa, exponent, 104, 6), F32)


def _reduce_pi_over_2_64(a):
  """(r, j) with a = r + j pi/2 (mod 2 pi), j an int32 in [0, 4), |r| < pi/4 + 1, for float64 a >= 1 (finite).

  a's 53-bit significand is split in parts of 24, 24 and 5 bits, M_k 2**E_k: those of E_k >= -24 are reduced
  together (their 2/pi multiples summed mod 4 in integers), the others (below 1) added to r as they are.
  """
  u32, i32 = dtypes.uint32, dtypes.int32
  b = bits(a)
  exponent = (b >> 52).cast(i32) - 1075
  significand = (b & typed(b, (1 << 52) - 1)) | typed(b, 1 << 52)
  columns, rest = [a.const_like(0).cast(u32) for _ in range(10)], a.const_like(0.0)
  for shift, part_width in ((29, 24), (5, 24), (0, 5)):
    mantissa = ((significand >> shift) & typed(significand, (1 << part_width) - 1)).cast(u32)
    part_exponent = exponent + shift
    reduced = part_exponent >= -24
    digits = _times_two_over_pi(mantissa, reduced.where(part_exponent, 0), 1000, 10)
    columns = [c + reduced.where(d, 0).cast(u32) for c, d in zip(columns, digits)]
    # NB: 2**E_k as a float64 from its bits (E_k >= -1075 + 0 here: a >= 1)
    scale = ((part_exponent + 1023).cast(dtypes.int64).cast(dtypes.uint64) << 52).bitcast(F64)
    rest = rest + reduced.where(0.0, mantissa.cast(F64) * scale)
  r, quadrant = _nearest_quadrant(_carried(columns), F64)
  return r + rest, quadrant


# 2/pi in overlapping 32-bit words a byte apart: word k is floor(2/pi 2**(8 k + 8)) mod 2**32
TWO_OVER_PI_BYTE_WINDOWS = [_bits_of_two_over_pi(8 * k + 8) & 0xFFFFFFFF for k in range(24)]


def _reduce_pi_over_2_in_64_bits(a):
  """(r, j) with a = r + j pi/2 (mod 2 pi), |r| <= pi/4 in float64, j an int32 in [0, 4), for float32 a >= 2 (finite;
  other a give values, unused): glibc's reduction in sinf and cosf, whose bits XLA's CPU code has. a 2/pi mod 4 as a
  2.62 fixed-point number: a's significand (shifted by the low 3 bits of its exponent) times the three words of 2/pi
  that the exponent's high bits pick, 32 by 96 bits, the product's bits above the 64 kept dropped (multiples of 4)."""
  u64 = dtypes.uint64
  b = bits(a)
  index = (b >> 26) & 15
  significand = ((b & typed(b, 0xFFFFFF)) | typed(b, 0x800000)) << ((b >> 23) & 7)  # below 2**31

  def word(offset):  # TWO_OVER_PI_BYTE_WINDOWS[index + offset]
    return _selected(index, TWO_OVER_PI_BYTE_WINDOWS[offset:offset + 16], 0, b)
  wide = significand.cast(u64)
  top = (significand * word(0)).cast(u64) << 32  # NB: a uint32 product: its bits from 2**32 on are whole turns
  fixed = (((wide * word(8).cast(u64)) >> 32) | top) + wide * word(4).cast(u64)
  quadrant = (fixed + (1 << 61)) >> 62
  fraction = (fixed - (quadrant << 62)).bitcast(dtypes.int64).cast(F64)
  return fraction * (math.pi / 2 * 2.0 ** -62), (quadrant & 3).cast(dtypes.int32)


@functools.cache
def computes_on_the_host(device) -> bool:
  """Whether tinygrad's `device` computes on the host's CPU: its CPU device, or an OpenCL device of CPU type (POCL).
  Not for None, the device of tinygrad's constants, which may yet meet any device."""
  name = device[0] if isinstance(device, tuple) else device
  if name is None or name.split(":")[0] != "CL":
    return name is not None and name.split(":")[0] == "CPU"
  from tinygrad import Device
  from tinygrad.runtime.autogen import opencl as cl
  kind = cl.cl_device_type()
  cl.clGetDeviceInfo(Device[name].cl_dev, cl.CL_DEVICE_TYPE, ctypes.sizeof(kind), ctypes.byref(kind), None)
  return bool(kind.value & cl.CL_DEVICE_TYPE_CPU)


def _sin_cos32(x):
  """(sin x, cos x) for float32 x, as glibc's sinf and cosf compute them: r = |x| - j pi/2, |r| <= pi/4 (from 120 on
  in 64-bit integers), the polynomials in r of sin and cos, chosen and signed by the quadrant j, in float64, rounded
  once to float32.

  NB: in float64 only on the host's CPU (tinygrad's CPU device, POCL), where XLA runs those functions and where
  float64 is fast: there each result is XLA's to the bit. Elsewhere (WebGPU and Metal have no float64, most GPUs a
  slow one) the same steps run in float32 (the reduction in 16-bit words), within an ulp or two of XLA's.
  """
  wide = F64 if computes_on_the_host(x.device) else F32
  a = fabs(x)
  small, finite = a < math.pi / 4, a < math.inf
  if wide == F64:  # glibc's reduction: below 120 j the nearest integer to |x| 2/pi and r one fused multiply-add
    near = a.cast(F64)
    j = (near * (2 / math.pi) + 0.5).floor()
    r, quadrant = _reduce_pi_over_2_in_64_bits(a)
    below = a < 120
    r, quadrant = below.where(minus(j) * (math.pi / 2) + near, r), below.where(j.cast(dtypes.int32) & 3, quadrant)
  else:
    r, quadrant = _reduce_pi_over_2((small | ~finite).where(1.0, a))
  r = small.where(a.cast(wide), r)
  quadrant = small.where(0, quadrant)
  z = r * r
  # NB: with r's sign: on a constant r = 0, tinygrad folds (0 * z * p) + 0 to the product, whose sign is p's
  sin_r = with_sign(r * z * poly(z, SIN_ODD[wide]) + r, r)
  cos_r = (z * z * poly(z, COS_EVEN[wide][:-1]) + z * COS_EVEN[wide][-1]) + 1.0
  return tuple(v.cast(F32) for v in _in_quadrant(x.cast(wide), sin_r, cos_r, quadrant, finite))


def _in_quadrant(x, sin_r, cos_r, quadrant, finite):
  """(sin x, cos x) from those of r, where |x| = r + quadrant pi/2 (mod 2 pi); NaN where x is not finite."""
  swap = (quadrant & 1).eq(1)
  sin_a, cos_a = swap.where(cos_r, sin_r), swap.where(sin_r, cos_r)
  sin_a = (quadrant >= 2).where(minus(sin_a), sin_a)
  cos_a = ((quadrant + 1) & 2).eq(2).where(minus(cos_a), cos_a)  # quadrants 1 and 2
  sin_x = sign_bit(x).where(minus(sin_a), sin_a)
  return finite.where(sin_x, math.nan), finite.where(cos_a, math.nan)


# --- float64 kernels (operands are float64): tinygrad's exp, log and sin, which its float64 decompositions compute to
# an ulp or two
def _log1p64(x):
  # NB: tinygrad has no log1p (and simplifies away the (1 + x) - 1 of Goldberg's formula)
  return (fabs(x) < math.sqrt(2) - 1).where(_log1p_near_zero(x), (1 + x).log())


def _expm1_64(x):
  # NB: tinygrad has no expm1: a series near 0, where exp(x) - 1 cancels
  series = x * poly(x, [1 / math.factorial(n) for n in range(10, 0, -1)])
  return (fabs(x) < 2 ** -7).where(series, x.exp() - 1)


def _sin_cos64(x):
  """(sin x, cos x) of float64 x.

  NB: tinygrad's sin reduces arguments exactly only when they have at most 24 significant bits (its float64 error
  is 1e-8 at |x| = 100): from |x| = 8 on, x is reduced exactly (Payne and Hanek) and tinygrad computes sin and cos
  of the remainder.
  NB: tinygrad computes cos(x) as sin(pi/2 - x), which loses the argument for large |x|: 1 - 2 sin(x/2)^2 here.
  """
  def narrow_sin_cos(v):
    half = (v * 0.5).sin()
    return v.sin(), 1 - 2 * half * half
  a = fabs(x)
  near = a < 8  # exact enough unreduced, and keeps the sign of -0.0
  finite = a < math.inf
  r, quadrant = _reduce_pi_over_2_64((near | ~finite).where(8.0, a))
  far_sin, far_cos = _in_quadrant(x, *narrow_sin_cos(r), quadrant, finite)
  sin, cos = narrow_sin_cos(x)
  return near.where(sin, far_sin), near.where(cos, far_cos)


def _keep_zero(fn):
  """fn, returning zeros (with their sign) as they are: log1p(-0.0) and expm1(-0.0) are -0.0."""
  return lambda x: x.eq(0).where(x, fn(x))


exp = by_dtype(_exp32, lambda x: x.exp())
log = by_dtype(_log32, lambda x: x.log())
log1p = _keep_zero(by_dtype(_log1p32, _log1p64))
expm1 = _keep_zero(by_dtype(_expm1_32, _expm1_64))


# --- functions of those, the same in every dtype
# atan(u) = u + u^3 P(u^2) on |u| <= tan(pi/8): a least-squares fit to the Taylor series (error 3e-16)
ATAN = [0.022776222331137325, -0.04485161256341071, 0.05736862129713694, -0.06649693873491092,
        0.07691061806892993, -0.0909085283916855, 0.1111110964054463, -0.14285714266011582, 0.1999999999989561,
        -0.33333333333333226]


def _atan_unit(t):
  """atan(t) for 0 <= t <= 1."""
  reduced = t > math.tan(math.pi / 8)
  u = reduced.where(div(t - 1, t + 1), t)
  s = u * u
  return reduced.where(math.pi / 4, 0.0) + (u + u * s * poly(s, ATAN))


def _atan(x):
  # NB: tinygrad's atan goes through an asin approximation good to about 1e-7 absolute
  a = fabs(x)
  return with_sign((a > 1).where(math.pi / 2 - _atan_unit(div(1, a)), _atan_unit(a)), x)


# glibc's float32 atanf and atan2f (FreeBSD's, after Sun's fdlibm), which XLA's CPU code calls for atan and atan2:
# atan(x) = atan(c) + atan((x - c) / (1 + c x)) for c the nearest of 0, 0.5, 1, 1.5 and infinity (atan(c) as a high
# and a low float32), by an odd polynomial split in two of x^4; every operation rounded in float32, none fused
ATAN_STEPS = [0.4375, 0.6875, 1.1875, 2.4375]  # the bounds of |x| between the five centres
ATAN_HIGH = [4.6364760399e-01, 7.8539812565e-01, 9.8279368877e-01, 1.5707962513e+00]
ATAN_LOW = [5.0121582440e-09, 3.7748947079e-08, 3.4473217170e-08, 7.5497894159e-08]
ATAN_ODD_F32 = [3.3333334327e-01, -2.0000000298e-01, 1.4285714924e-01, -1.1111110449e-01, 9.0908870101e-02,
                -7.6918758452e-02, 6.6610731184e-02, -5.8335702866e-02, 4.9768779427e-02, -3.6531571299e-02,
                1.6285819933e-02]
ATAN_TINY, ATAN_HUGE = 2.0 ** -29, 2.0 ** 25  # atanf returns x below the one, pi/2 (in float32) from the other
ATAN2_PI, ATAN2_PI_LOW = 3.1415927410e+00, -8.7422776573e-08  # atan2f's pi as a float32, and what it lacks of pi


def _f32(value) -> float:
  return float(np.float32(value))


def _atan32(x):
  """glibc's atanf(x) of float32 x."""
  a = fabs(x)
  near = [a < step for step in ATAN_STEPS]
  reduced = [div(2.0 * a - 1.0, a + 2.0), div(a - 1.0, a + 1.0), div(a - 1.5, _opaque(a * 1.5) + 1.0), div(-1.0, a)]
  t = near[0].where(x, near[1].where(reduced[0], near[2].where(reduced[1], near[3].where(reduced[2], reduced[3]))))
  centre = near[1].where(0, near[2].where(1, near[3].where(2, 3)))

  def at_centre(table):
    value = x.const_like(table[3])
    for i in (2, 1, 0):
      value = centre.eq(i).where(table[i], value)
    return value
  z = t * t
  w = z * z
  odd, even = ATAN_ODD_F32[0::2], ATAN_ODD_F32[1::2]
  series = _opaque(_opaque(z * poly(w, odd[::-1], fused=False)) + _opaque(w * poly(w, even[::-1], fused=False)))
  product = _opaque(t * series)
  small = t + minus(product)
  angle = at_centre(ATAN_HIGH) + minus(_opaque(_opaque(product + minus(at_centre(ATAN_LOW))) + minus(t)))
  huge = x.const_like(_f32(np.float32(ATAN_HIGH[3]) + np.float32(ATAN_LOW[3])))
  # NB: x itself below 2**-29, as atanf returns it (x - x s is +0.0 for x = -0.0)
  small = (a < ATAN_TINY).where(x, small)
  return (a >= ATAN_HUGE).where(with_sign(huge, x), near[0].where(small, sign_bit(x).where(minus(angle), angle)))


def _atan2_32(y, x):
  """glibc's atan2f(y, x) of float32 y and x: atanf(|y / x|), placed in the quadrant of (x, y)."""
  i32 = dtypes.int32
  ay, ax = fabs(y), fabs(x)
  sign_x, sign_y = sign_bit(x), sign_bit(y)
  exponents_apart = (bits(ay).cast(i32) - bits(ax).cast(i32)) >> 23
  z = _atan32(div(ay, ax))
  z = (exponents_apart > 60).where(_f32(np.float32(math.pi / 2) + np.float32(0.5) * np.float32(ATAN2_PI_LOW)), z)
  z = (sign_x & (exponents_apart < -60)).where(0.0, z)
  from_pi = _opaque(z + minus(x.const_like(_f32(ATAN2_PI_LOW))))
  angle = sign_x.where(sign_y.where(from_pi + minus(x.const_like(_f32(ATAN2_PI))), minus(from_pi) + _f32(ATAN2_PI)),
                       sign_y.where(minus(z), z))
  # atan2f's exact angles, the later taking precedence: y infinite; x infinite; x zero; y zero; NaN
  pi, half_pi, quarter_pi = _f32(ATAN2_PI), _f32(math.pi / 2), _f32(math.pi / 4)
  signed = lambda value: sign_y.where(-value, value)  # noqa: E731
  angle = ay.eq(INF).where(signed(half_pi), angle)
  angle = ax.eq(INF).where(ay.eq(INF).where(signed(sign_x.where(_f32(3 * np.float32(quarter_pi)), quarter_pi)),
                                            sign_x.where(signed(pi), with_sign(x.const_like(0.0), y))), angle)
  angle = (ax.eq(0) & ay.ne(0)).where(signed(half_pi), angle)
  angle = ay.eq(0).where(sign_x.where(signed(pi), y), angle)
  return (isnan(x) | isnan(y)).where(NAN, angle)


def _atan2(y, x):
  ay, ax = fabs(y), fabs(x)
  hi, lo = (ay > ax).where(ay, ax), (ay > ax).where(ax, ay)
  t = hi.eq(0).where(0.0, lo.eq(INF).where(1.0, div(lo, hi)))  # atan2(0, 0) and atan2(inf, inf) are exact angles
  angle = (ay > ax).where(math.pi / 2 - _atan_unit(t), _atan_unit(t))
  angle = sign_bit(x).where(math.pi - angle, angle)
  return (isnan(x) | isnan(y)).where(NAN, with_sign(angle, y))


def _asinh(x):
  a = fabs(x)
  # NB: tinygrad's log(x + sqrt(x^2 + 1)) loses small arguments and overflows for large ones
  small = log1p(a + div(a * a, 1 + (1 + a * a).sqrt()))
  return with_sign((a > 2 ** 28).where(log(a) + math.log(2), small), x)


def _acosh(x):
  # an identity without x + sqrt(x^2 - 1): tinygrad reassociates (x - 1) + y into (x + y) - 1, losing x - 1
  return 2 * _asinh(((x - 1) * 0.5).sqrt())


def _tanh(x):
  t = expm1(2 * x)
  # NB: tinygrad's tanh is 2 * sigmoid(2x) - 1, which loses small arguments
  return (x > 20).where(1.0, (x < -20).where(-1.0, div(t, t + 2)))


def _cbrt(x):
  a = fabs(x)
  guess = exp(log(a) * (1 / 3))
  refined = guess + (div(a, guess * guess) + minus(guess)) * (1 / 3)  # one Newton step
  return with_sign((a.eq(0) | a.eq(INF) | isnan(a)).where(a, refined), x)


def _pow_specials(x, y, magnitude):
  """x ** y from |x| ** |y|-free `magnitude` = |x| ** y: signs, NaN for negative x and non-integer y, and C99's
  (XLA's) x ** 0 = 1 and 1 ** y = 1 even for NaN, (-1) ** +-inf = 1."""
  is_int = y.eq(y.trunc())  # infinities count as even integers
  is_odd = is_int & (y * 0.5).trunc().ne(y * 0.5)
  result = (sign_bit(x) & is_odd).where(minus(magnitude), magnitude)
  result = ((x < 0) & (x > -INF) & is_int.logical_not()).where(NAN, result)
  # NB: a NaN operand is ruled out by its bits: WGSL's compilers may take NaN == 1 (nan ** -1.5 was 1.0 on WebGPU)
  ones = ((x.eq(1) | (x.eq(-1) & fabs(y).eq(INF) & ~isnan(y))) & ~isnan(x)) | (y.eq(0) & ~isnan(y))
  return ones.where(1.0, result)


def _pow64(x, y):
  return _pow_specials(x, y, (y * fabs(x).log2()).exp2())


# log(1 + f) - f + f^2 / 2 = f^3 (1/3 - f/4 + ...): Taylor's terms to f^24 (5e-11 of it for |f| <= sqrt(2) - 1)
LOG_TAIL = [(-1) ** (k + 1) / k for k in range(24, 2, -1)]


def _pow32(x, y):
  """|x| ** y = exp(y log|x|) with log|x| and the product in double-float (hi + lo): y log|x| reaches 89, where an
  error of a float32 ulp would be 1e-5 of the result."""
  a = fabs(x)
  f, e = _frexp32((a.eq(0) | (a >= INF) | isnan(a)).where(1.0, a))
  f_high, f_low = _split(f)
  half_square_low = f_low * (f_high + f) * 0.5  # f^2 / 2 = f_high^2 / 2 + this (to 2^-36 of f^2)
  # log|x| = e LN2_HIGH + f - f_high^2 / 2 + (f^3 P(f) - half_square_low + e LN2_LOW)
  s, err1 = _two_sum(e * LN2_HIGH, f)
  s, err2 = _two_sum(s, minus(f_high * f_high * 0.5))
  tail = f * (f * f) * poly(f, LOG_TAIL) + e * LN2_LOW + minus(half_square_low)
  high, low = _two_sum(s, (err1 + err2) + tail)
  product, product_err = _two_product(y, high)
  correction = product_err + y * low
  magnitude = _exp32(product) * (1.0 + (fabs(product) < 150).where(correction, 0.0))
  special = a.eq(0) | a.eq(INF) | isnan(a) | isnan(y) | fabs(y).eq(INF)
  return _pow_specials(x, y, special.where(_pow64_like_specials(a, y), magnitude))


def _pow64_like_specials(a, y):
  """|x| ** y where |x| is 0, inf or NaN, or y is +-inf or NaN (IEEE's values)."""
  grows = (a > 1) == (y > 0)  # |x| ** y -> inf, else 0, for infinite y (|x| = 1 is handled by the caller)
  infinite_y = grows.where(INF, 0.0)
  zero_or_inf = (a.eq(0) == (y > 0)).where(0.0, INF)
  return (isnan(a) | isnan(y)).where(NAN, fabs(y).eq(INF).where(infinite_y, zero_or_inf))


def _fmod32(x, y):
  """C fmod (XLA's rem) of float32, exact: the integer significands' remainder, 8 bits of the exponent gap a step."""
  u32 = dtypes.uint32
  a, b = fabs(x), fabs(y)
  undefined = isnan(x) | isnan(y) | a.eq(INF) | b.eq(0)
  keep_x = (a < b) & undefined.logical_not()  # also b = inf
  ba, bb = bits(undefined.where(1.0, a)), bits(undefined.where(1.0, b))
  exponent_a, exponent_b = (ba >> 23).cast(dtypes.int32), (bb >> 23).cast(dtypes.int32)
  # denormals have no implicit bit, and the exponent of the smallest normals
  mantissa_a = (ba & 0x7FFFFF) | exponent_a.ne(0).where(0x800000, 0).cast(u32)
  mantissa_b = (bb & 0x7FFFFF) | exponent_b.ne(0).where(0x800000, 0).cast(u32)
  exponent_a, exponent_b = exponent_a.maximum(1), exponent_b.maximum(1)
  gap = (exponent_a - exponent_b).maximum(0)
  remainder = ((mantissa_a % mantissa_b) << (gap & 7).cast(u32)) % mantissa_b  # the gap's low 3 bits first
  # then 8 bits a step while any are left (the gap is at most 253: exponents 1 to 254). Each step's shift comes from
  # the gap itself: steps that each took min(gap, 8) off the last one's gap kept clang's constant propagation busy
  # for minutes (issue 40)
  for k in range(1, 32):
    remainder = (remainder << (gap >> 3 >= k).where(8, 0).cast(u32)) % mantissa_b
  # r 2**(exponent_b - 150): exact (a remainder is a multiple of the smaller operand's ulp)
  result = _scale(remainder.cast(F32), exponent_b - 150)
  return undefined.where(NAN, keep_x.where(x, with_sign(result, x)))


def _fmod64(x, y):
  """C fmod of float64, exact: long division in float64, 25 quotient bits a step, each step's q * b split in two
  exact products.

  NB: 4 steps, so remainders are exact for quotients below 2^100 only.
  """
  a, b = fabs(x), fabs(y)
  undefined = isnan(x) | isnan(y) | a.eq(INF) | b.eq(0)
  keep_x = b.eq(INF) & undefined.logical_not()
  r, b = (undefined | keep_x).where(0.0, a), (undefined | keep_x).where(1.0, b)
  for _ in range(4):
    exponent_gap = (bits(r) >> 52).cast(dtypes.int32) - (bits(b) >> 52).cast(dtypes.int32)
    scaled = (bits(b) + ((exponent_gap - 25).maximum(0).cast(dtypes.uint64) << 52)).bitcast(F64)
    scaled_bits = bits(scaled)
    high = (scaled_bits & typed(scaled_bits, ((1 << 64) - 1) ^ ((1 << 26) - 1))).bitcast(F64)  # its top 27 bits
    quotient = div(r, scaled).trunc()  # below 2^26, so both products below are exact
    r = (r - quotient * high) - quotient * (scaled - high)
    r = (r < 0).where(r + scaled, r)  # the rounded quotient was one too large
  return undefined.where(NAN, keep_x.where(x, with_sign(r, x)))




def _trig(pick):
  """A function of (sin x, cos x)."""
  return by_dtype(lambda x: pick(*_sin_cos32(x)), lambda x: pick(*_sin_cos64(x)))


sin, cos, tan = _trig(lambda s, c: s), _trig(lambda s, c: c), _trig(div)
atan, atan2 = by_dtype(_atan32, _atan), by_dtype(_atan2_32, _atan2)
tanh, asinh, acosh, cbrt = in_f32(_tanh), in_f32(_asinh), in_f32(_acosh), in_f32(_cbrt)
atanh = in_f32(lambda x: 0.5 * (log1p(x) + minus(log1p(minus(x)))))  # no rounded 1 - x near x = 1
rsqrt = in_f32(lambda x: div(1, x.sqrt()))
power = by_dtype(_pow32, _pow64)
fmod = by_dtype(_fmod32, _fmod64)
