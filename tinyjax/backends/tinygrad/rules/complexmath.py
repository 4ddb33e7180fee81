"""Complex numbers on tinygrad: the primitives whose complex form is not their real rule applied to the pairs
(carried.py runs those): products, quotients, functions, comparisons, casts, contractions, sorts.

An operand is its pairs, float[..., 2] ((real, imaginary) last); the real arithmetic is elementwise.py's and
floatmath's (XLA's roundings, no folding of x * 0), and the complex formulas are XLA's, op for op: its elemental IR
emitter's (the textbook product, Smith's quotient with C99's recovery of infinities (1 / 0j is inf + nan j), abs and
log without overflow of a*a + b*b, the square root from the real part's sign, tanh and tan = -i tanh(iz) with their
corner cases, expm1 with cosm1), its expansions of exp, cosh and sinh, and JAX's lowerings of sin, cos and square;
products over axes fold in the order of XLA's CPU.

So the edge values (zeros of both signs, infinities, NaN in either part) are XLA's: tests/backends/test_complex.py
checks every function on every pair of them. Transcendental parts may differ from XLA's in the last bits (floatmath),
and products where a device's compiler contracts a*b - c*d into a fused multiply-add.
"""
import math

import jax
import numpy as np
from tinygrad import Tensor

from tinyjax.backends.tinygrad.rules import elementwise as ew
from tinyjax.backends.tinygrad.rules.reduction import tree_fold
from tinyjax.backends.tinygrad.numerics import floatbits as fb
from tinyjax.backends.tinygrad.numerics import floatmath as fm
from tinyjax.backends.tinygrad.numerics.carried import is_complex, real_dtype
from tinyjax.backends.tinygrad.table import RULES, RuleContext, register_complex, tg_dtype


def parts(z):
  return z[..., 0], z[..., 1]


def paired(re, im):
  if re.shape != im.shape:
    shape = np.broadcast_shapes(re.shape, im.shape)
    re, im = re.expand(shape), im.expand(shape)
  return re.unsqueeze(-1).cat(im.unsqueeze(-1), dim=-1)


def _real_aval(aval):
  return jax.core.ShapedArray(aval.shape, real_dtype(aval.dtype)) if is_complex(aval.dtype) else aval


def _real_ctx(ctx, in_avals=None, out_avals=None) -> RuleContext:
  """ctx with each complex aval as its parts' aval (or the avals given)."""
  return RuleContext(tuple(map(_real_aval, ctx.in_avals if in_avals is None else in_avals)),
                     tuple(map(_real_aval, ctx.out_avals if out_avals is None else out_avals)), ctx.device,
                     ctx.backend)


add, sub, mul, div = ew.add, ew.sub, ew.mul, fm.div
exp, log, log1p, expm1 = fm.exp, fm.log, fm.log1p, fm.expm1
sin, cos = fm.sin, fm.cos
sqrt = ew.FLOAT_FUNCTIONS["sqrt"]
minus = fb.minus


def _zero(x):
  """NB: NaN told by its bits: WGSL's compilers may take NaN == 0 as True."""
  return x.eq(0) & ~fb.isnan(x)


def _isinf(x):
  """NB: NaN told by its bits, as in _zero (WGSL's compilers took NaN == inf as True: tanh(nan + 0j) was 1 + 0j)."""
  return fb.fabs(x).eq(math.inf) & ~fb.isnan(x)


def _copysign(magnitude, sign):
  return fb.with_sign(fb.fabs(magnitude), sign)


def product_parts(a, b, c, d):
  """The parts of (a + bi)(c + di), the textbook product (as XLA's)."""
  return sub(mul(a, c), mul(b, d)), add(mul(a, d), mul(b, c))


def times(z, w):
  return paired(*product_parts(*parts(z), *parts(w)))


def quotient(z, w):
  """Smith's algorithm, then C99 Annex G's recovery where it gives NaN + NaN j (as XLA)."""
  (a, b), (c, d) = parts(z), parts(w)
  c_larger = fb.fabs(c) >= fb.fabs(d)
  # |c| >= |d|: r = d / c, t = c + d r: ((a + b r) / t, (b - a r) / t); else r = c / d, t = d + c r:
  # ((a r + b) / t, (b r - a) / t)
  r = c_larger.where(div(d, c), div(c, d))
  t = c_larger.where(add(c, mul(d, r)), add(d, mul(c, r)))
  re = c_larger.where(div(add(a, mul(b, r)), t), div(add(mul(a, r), b), t))
  im = c_larger.where(div(sub(b, mul(a, r)), t), div(sub(mul(b, r), a), t))
  nan = fb.isnan(re) & fb.isnan(im)
  # a nonzero (or infinite) over zero: infinity with the numerator's directions
  zero_divisor = nan & _zero(c) & _zero(d) & ~(fb.isnan(a) & fb.isnan(b))
  infinity = _copysign(Tensor.full_like(c, math.inf), c)
  re, im = zero_divisor.where(mul(infinity, a), re), zero_divisor.where(mul(infinity, b), im)
  finite_cd = ~_isinf(c) & ~fb.isnan(c) & ~_isinf(d) & ~fb.isnan(d)
  finite_ab = ~_isinf(a) & ~fb.isnan(a) & ~_isinf(b) & ~fb.isnan(b)
  # an infinite numerator over a finite divisor (other than zero, whose case comes first in XLA's): infinity
  big = nan & (_isinf(a) | _isinf(b)) & finite_cd & ~zero_divisor
  a1, b1 = _copysign(_isinf(a).cast(a.dtype), a), _copysign(_isinf(b).cast(b.dtype), b)
  inf = Tensor.full_like(a, math.inf)
  re = big.where(mul(inf, add(mul(a1, c), mul(b1, d))), re)
  im = big.where(mul(inf, sub(mul(b1, c), mul(a1, d))), im)
  # a finite numerator over an infinite divisor: zero
  small = nan & (_isinf(c) | _isinf(d)) & finite_ab
  c1, d1 = _copysign(_isinf(c).cast(c.dtype), c), _copysign(_isinf(d).cast(d.dtype), d)
  zero = Tensor.zeros_like(a)
  re = small.where(mul(zero, add(mul(a, c1), mul(b, d1))), re)
  im = small.where(mul(zero, sub(mul(b, c1), mul(a, d1))), im)
  return paired(re, im)


def magnitude(z):
  """|z| as max * sqrt(1 + (min / max)**2): no overflow or underflow of a*a + b*b."""
  a, b = fb.fabs(z[..., 0]), fb.fabs(z[..., 1])
  nan = fb.isnan(a) | fb.isnan(b)
  large, small = (a > b).where(a, b), (a > b).where(b, a)
  ratio = div(small, large)
  result = mul(large, sqrt(mul(ratio, ratio) + 1.0))
  result = small.eq(large).where(large * math.sqrt(2.0), result)  # NB: also two infinities
  result = _zero(large).where(0.0, result)
  return nan.where(math.nan, (_isinf(a) | _isinf(b)).where(math.inf, result))  # NB: XLA's: NaN wins over inf


def _exp(z):
  """e**a (cos b + i sin b), as XLA expands it: where e**a overflows, e**(a/2) twice (so exp(100 + 1e-30j) has a
  finite imaginary part); a zero imaginary part of either sign gives +0.0 (no NaN from inf * 0)."""
  a, b = parts(z)
  scale, half = exp(a), exp(a * 0.5)
  overflows = _isinf(scale)

  def scaled(t):
    return overflows.where(mul(mul(half, t), half), mul(scale, t))
  return paired(scaled(cos(b)), _zero(b).where(0.0, scaled(sin(b))))


def _log(z):
  a, b = parts(z)
  large = (fb.fabs(a) > fb.fabs(b)).where(fb.fabs(a), fb.fabs(b))
  small = (fb.fabs(a) > fb.fabs(b)).where(fb.fabs(b), fb.fabs(a))
  ratio = div(small, large)
  re = add(log(large), (log1p(mul(ratio, ratio))) * 0.5)
  re = _zero(large).where(-math.inf, re)
  re = (fb.isnan(a) | fb.isnan(b)).where(math.nan, (_isinf(a) | _isinf(b)).where(math.inf, re))
  return paired(re, fm.atan2(b, a))


def _sqrt(z):
  """NB: XLA's: a zero imaginary part counts as +0.0 (sqrt(-1 - 0j) is +1j), and NaN in either part gives NaN + NaN j."""
  a, b = parts(z)
  b = fb.positive_zero(b)
  t = sqrt(add(fb.fabs(a), magnitude(z)) * 0.5)
  twice = add(t, t)
  re = (a >= 0).where(t, div(fb.fabs(b), twice))
  im = (a >= 0).where(div(b, twice), _copysign(t, b))
  zero = _zero(a) & _zero(b)
  re, im = zero.where(0.0, re), zero.where(b, im)
  re, im = _isinf(b).where(math.inf, re), _isinf(b).where(b, im)
  nan = fb.isnan(a) | fb.isnan(b)
  return paired(nan.where(math.nan, re), nan.where(math.nan, im))


def _integer_pow(z, y: int):
  return ew.integer_power(z, y, times, _one_like(z), quotient)


def _power(z, w):
  """z ** w = |z|**c e**(-d t) (cos q + i sin q), t = arg z, q = c t + d log|z| (XLA's); z ** 0 is 1; 0 ** w: 0 for
  a positive real w, NaN otherwise. As XLA's CPU computes them (measured on the grid of special values; its formula
  alone gives NaN there): 1 ** w is 1 + 0j for every w, and inf ** c for a real nonzero c (inf too) is inf (c > 0) or 0
  (c < 0), + 0j."""
  (a, b), (c, d) = parts(z), parts(w)
  result = _power_by_the_formula(z, w)
  real_one = (a.eq(1) & ~fb.isnan(a)) & _zero(b)
  real_infinity = (a.eq(math.inf) & ~fb.isnan(a)) & _zero(b) & _zero(d) & ~_zero(c) & ~fb.isnan(c)
  re, im = parts(result)
  re = real_one.where(1.0, real_infinity.where((c > 0).where(math.inf, 0.0), re))
  return paired(re, (real_one | real_infinity).where(0.0, im))


def _power_by_the_formula(z, w):
  (a, b), (c, d) = parts(z), parts(w)
  t = fm.atan2(b, a)
  log_abs = log(magnitude(z))
  scale = exp(sub(mul(c, log_abs), mul(d, t)))
  q = add(mul(c, t), mul(d, log_abs))
  re, im = mul(scale, cos(q)), mul(scale, sin(q))
  zero_base, zero_exponent = _zero(a) & _zero(b), _zero(c) & _zero(d)
  re = zero_base.where(((c > 0) & _zero(d)).where(0.0, math.nan), re)
  im = zero_base.where(((c > 0) & _zero(d)).where(0.0, math.nan), im)
  return paired(zero_exponent.where(1.0, re), zero_exponent.where(0.0, im))  # NB: z ** 0 is 1 + 0j, as XLA


def _sin_cos(z, want_sin: bool):
  """JAX's lowering of complex sin and cos (lax's _sin_complex, _cos_complex): sinh b and cosh b from expm1 (accurate
  near zero); where a is zero, sin's real part and cos's imaginary part are +0.0 (no NaN from 0 * inf)."""
  a, b = parts(z)
  up, down = expm1(b), expm1(minus(b))
  sinh_b, cosh_b = sub(up, down) * 0.5, (add(up, down) + 2.0) * 0.5
  zero = _zero(a)
  if want_sin:
    return paired(zero.where(0.0, mul(sin(a), cosh_b)), mul(cos(a), sinh_b))
  return paired(mul(cos(a), cosh_b), zero.where(0.0, mul(minus(sin(a)), sinh_b)))


def _cosh_sinh(z, want_cosh: bool):
  """XLA's expansion, as for a real operand (xla_formulas): e**(z + log 1/2) + e**(log 1/2 - z) for cosh, their
  difference for sinh; log 1/2 is a complex constant, so the imaginary parts are b + 0 and 0 - b (no -0.0)."""
  a, b = parts(z)
  log_half, zero = Tensor.full_like(a, math.log(0.5)), Tensor.zeros_like(b)
  up_re, up_im = parts(_exp(paired(add(a, log_half), add(b, zero))))
  down_re, down_im = parts(_exp(paired(sub(log_half, a), sub(zero, b))))
  combine = add if want_cosh else sub
  return paired(combine(up_re, down_re), combine(up_im, down_im))


def _tanh_of(a, b):
  """The parts of tanh(a + bi), as XLA's elemental IR emitter computes them:
  (e**2a - e**-2a + 4i cos b sin b) / (e**2a + e**-2a + 4 cos**2 b - 2), the exponentials as expm1.

  Its corner cases: where e**2a + e**-2a - 2 is infinite the real part is sign(a); where sin 2b is NaN (b infinite
  or NaN) the real part is NaN unless a is infinite, when the imaginary part is +0.0; a zero b gives +0.0."""
  twice = add(a, a)
  up, down = expm1(twice), expm1(minus(twice))
  cos_b, sin_b = cos(b), sin(b)
  sum_minus_two = add(up, down)
  denominator = add(sum_minus_two, mul(cos_b, cos_b) * 4.0)
  imaginary_numerator = mul(cos_b, sin_b) * 4.0
  re = _isinf(sum_minus_two).where(_copysign(Tensor.ones_like(a), a), div(sub(up, down), denominator))
  im = div(imaginary_numerator, denominator)
  a_infinite, sin_nan = _isinf(a), fb.isnan(imaginary_numerator)
  re = (sin_nan & ~a_infinite).where(math.nan, re)
  im = (_zero(b) | (a_infinite & sin_nan)).where(0.0, im)
  return re, im


def _tanh(z):
  return paired(*_tanh_of(*parts(z)))


def _tan(z):
  """tan(a + bi) = -i tanh(-b + ai), as XLA computes it: (Im, -Re) of that tanh."""
  a, b = parts(z)
  re, im = _tanh_of(minus(b), a)
  return paired(im, minus(re))


COSM1 = [4.7377507964246204691685E-14, -1.1470284843425359765671E-11, 2.0876754287081521758361E-9,
         -2.7557319214999787979814E-7, 2.4801587301570552304991E-5, -1.3888888888888872993737E-3,
         4.1666666666666666609054E-2]  # Cephes' cosm1: x**4 P(x**2) - x**2 / 2


def _cosm1(x):
  """cos x - 1, as XLA's EmitCosm1: Cephes' polynomial where x**2 <= (pi/4)**2 (0.61685), else cos x - 1."""
  square = mul(x, x)
  near = add(mul(mul(square, square), fm.poly(square, COSM1)), square * -0.5)
  return (square > 0.61685).where(cos(x) - 1.0, near)


def _expm1(z):
  """XLA's: (expm1(a) cos b + cosm1(b)) + i e**a sin b (accurate near zero), e**a as expm1(a) + 1; a zero imaginary
  part of either sign gives +0.0."""
  a, b = parts(z)
  up, cos_b_minus_one = expm1(a), _cosm1(b)
  re = add(mul(up, cos_b_minus_one + 1.0), cos_b_minus_one)
  return paired(re, _zero(b).where(0.0, mul(up + 1.0, sin(b))))


def _square(z):
  """JAX's lowering: (a - b)(a + b) + 2abi, the real part +0.0 where |a| = |b| and a is finite (no rounding error
  from a*a - b*b)."""
  a, b = parts(z)
  # NB: ~isnan(b): WGSL's compilers may take |a| == NaN as True
  equal = ~_isinf(a) & ~fb.isnan(a) & ~fb.isnan(b) & fb.fabs(a).eq(fb.fabs(b))
  return paired(equal.where(0.0, mul(sub(a, b), add(a, b))), mul(a, b) * 2.0)


def _log1p(z):
  """log|1 + z| as log1p(2a + a*a + b*b) / 2 (accurate near zero), then as log(1 + z) where that overflows."""
  a, b = parts(z)
  near = log1p(add(add(a, a), add(mul(a, a), mul(b, b)))) * 0.5
  far = _log(paired(a + 1.0, b))
  small = (fb.fabs(a) < 0.5) & (fb.fabs(b) < 0.5)
  return paired(small.where(near, far[..., 0]), fm.atan2(b, a + 1.0))


UNARY = {"exp": _exp, "log": _log, "sqrt": _sqrt, "rsqrt": lambda z: quotient(_one_like(z), _sqrt(z)),
         "sin": lambda z: _sin_cos(z, True), "cos": lambda z: _sin_cos(z, False),
         "cosh": lambda z: _cosh_sinh(z, True), "sinh": lambda z: _cosh_sinh(z, False), "tan": _tan, "tanh": _tanh,
         "expm1": _expm1, "log1p": _log1p, "square": _square}


def _one_like(z):
  return paired(Tensor.ones_like(z[..., 0]), Tensor.zeros_like(z[..., 0]))


for _name, _fn in UNARY.items():
  register_complex(_name)(lambda ctx, z, *, accuracy=None, _fn=_fn: _fn(z))


register_complex("mul")(lambda ctx, z, w, *, out_dtype=None: times(z, w))
register_complex("div")(lambda ctx, z, w: quotient(z, w))
register_complex("integer_pow")(lambda ctx, z, *, y: _integer_pow(z, y))


def _with_zero_imaginary(x, dtype):
  """A real operand as the pairs of a complex value of parts `dtype` (tinygrad's), its imaginary part +0.0, as XLA
  converts it."""
  re = x.cast(dtype)
  return paired(re, Tensor.zeros(re.shape, dtype=dtype, device=re.device))


@register_complex("pow")
def _pow(ctx, z, w):
  """NB: an integer exponent is converted to the base's dtype first, as JAX's lowering does (XLA has no
  complex ** int)."""
  return _power(z, w if is_complex(ctx.in_avals[1].dtype) else _with_zero_imaginary(w, z.dtype))


@register_complex("abs")
def _abs(ctx, z):
  return magnitude(z)


@register_complex("sign")
def _sign(ctx, z):
  size = magnitude(z)
  zero = _zero(size).unsqueeze(-1)
  return zero.where(z, paired(div(z[..., 0], size), div(z[..., 1], size)))


@register_complex("real")
def _real(ctx, z):
  return z[..., 0]


@register_complex("imag")
def _imag(ctx, z):
  return z[..., 1]


@register_complex("conj")
def _conj(ctx, z, *, input_dtype=None):
  if not is_complex(ctx.in_avals[0].dtype):  # NB: lax.conj of a real operand is that operand made complex
    return paired(z.cast(tg_dtype(real_dtype(ctx.out_aval.dtype))), Tensor.zeros_like(z))
  return paired(z[..., 0], minus(z[..., 1]))


@register_complex("complex")
def _complex(ctx, re, im):
  return paired(re, im)


@register_complex("eq")
def _equal(ctx, z, w):
  real_ctx = _real_ctx(ctx)
  return RULES["eq"](real_ctx, z[..., 0], w[..., 0]) & RULES["eq"](real_ctx, z[..., 1], w[..., 1])


@register_complex("ne")
def _not_equal(ctx, z, w):
  return ~_equal(ctx, z, w)


@register_complex("select_n")
def _select_n(ctx, which, *cases):
  return RULES["select_n"](ctx, which.unsqueeze(-1), *cases)


@register_complex("convert_element_type")
def _convert_element_type(ctx, x, *, new_dtype, weak_type, sharding):
  (in_aval,), out_aval = ctx.in_avals, ctx.out_aval
  convert = RULES["convert_element_type"]
  target = real_dtype(new_dtype) if is_complex(new_dtype) else new_dtype
  part_ctx = RuleContext((_real_aval(in_aval),), (jax.core.ShapedArray(out_aval.shape, target),), ctx.device,
                         ctx.backend)
  def part(p):
    return convert(part_ctx, p, new_dtype=target, weak_type=weak_type, sharding=sharding)
  if not is_complex(in_aval.dtype):
    re = part(x)
    return paired(re, Tensor.zeros_like(re))
  if np.dtype(new_dtype) == np.bool_:  # nonzero: either part
    return part(x[..., 0]) | part(x[..., 1])
  if not is_complex(new_dtype):  # NB: as XLA, a complex value converted to a real dtype is its real part
    return part(x[..., 0])
  return paired(part(x[..., 0]), part(x[..., 1]))


def _four_products(ctx, name, lhs, rhs, params):
  """A bilinear primitive (dot_general, conv) of complex operands as four of real ones: (a + bi)(c + di).

  NB: a real operand (mixed precision) is made complex first, with a zero imaginary part, as XLA converts it: its
  products with zero give the zeros' signs XLA gives."""
  part_dtype = real_dtype(ctx.out_aval.dtype)
  lhs, rhs = (x if is_complex(aval.dtype) else _with_zero_imaginary(x, tg_dtype(part_dtype))
              for x, aval in zip((lhs, rhs), ctx.in_avals))
  real_ctx = _real_ctx(ctx, [jax.core.ShapedArray(aval.shape, part_dtype) for aval in ctx.in_avals])
  params = dict(params, preferred_element_type=None if params.get("preferred_element_type") is None else part_dtype)
  (a, b), (c, d) = parts(lhs), parts(rhs)
  def product(x, y):
    return RULES[name](real_ctx, x, y, **params)
  return paired(sub(product(a, c), product(b, d)), add(product(a, d), product(b, c)))


for _name in ("dot_general", "conv_general_dilated"):
  register_complex(_name)(lambda ctx, lhs, rhs, _name=_name, **params: _four_products(ctx, _name, lhs, rhs, params))


@register_complex("pad")
def _pad(ctx, x, padding_value, *, padding_config):
  real_ctx = _real_ctx(ctx)
  return paired(*(RULES["pad"](real_ctx, x[..., i], padding_value[..., i], padding_config=padding_config)
                  for i in range(2)))


_CHAIN = 64  # products per kernel in a fold


@register_complex("reduce_prod")
def _reduce_prod(ctx, z, *, axes, out_sharding=None):
  """The product over `axes` in XLA's CPU order (reduction.tree_fold): each window folded left to right from 1 + 0j
  with the textbook product (1 * (inf + 0j) is inf + nan j), the padding's ones multiplied in too.

  NB: a fold is sequential, a product per step: one over several axes (up to 32 * 32 elements a window) takes
  seconds to schedule (about 10 ms a product on CPU)."""
  if math.prod(z.shape[a] for a in axes) == 0:
    return _with_zero_imaginary(Tensor.ones(ctx.out_aval.shape, dtype=z.dtype, device=z.device), z.dtype)

  def pad(z, padding):
    return paired(z[..., 0].pad(padding[:-1], value=1.0), z[..., 1].pad(padding[:-1], value=0.0))

  def fold(windows):  # windows: (..., 2, elements)
    if windows.shape[-1] == 1:  # XLA's simplifier drops a reduction of one element: no product with 1 + 0j
      return windows[..., 0]
    re, im = windows[..., 0, :], windows[..., 1, :]
    total = Tensor.ones_like(re[..., 0]), Tensor.zeros_like(im[..., 0])
    for i in range(windows.shape[-1]):  # the parts apart: a pairing per product made long folds slow to schedule
      total = product_parts(*total, re[..., i], im[..., i])
      if i % _CHAIN == _CHAIN - 1:  # NB: a kernel per _CHAIN products: one kernel of hundreds takes long to build
        total = tuple(t.contiguous() for t in total)
    return paired(*total)
  return tree_fold(z, tuple(axes), pad, fold)


@register_complex("sort")
def _sort(ctx, *operands, dimension, is_stable, num_keys):
  """Complex keys in JAX's order: by real part, then imaginary part; each complex operand sorted as its two parts."""
  split, avals, keys = [], [], 0
  for i, (x, aval) in enumerate(zip(operands, ctx.in_avals)):
    pieces = [x[..., 0], x[..., 1]] if is_complex(aval.dtype) else [x]
    split += pieces
    avals += [_real_aval(aval)] * len(pieces)
    keys += len(pieces) if i < num_keys else 0
  real_ctx = RuleContext(tuple(avals), tuple(avals), ctx.device, ctx.backend)
  out = iter(RULES["sort"](real_ctx, *split, dimension=dimension, is_stable=is_stable, num_keys=keys))
  return [paired(next(out), next(out)) if is_complex(aval.dtype) else next(out) for aval in ctx.in_avals]
