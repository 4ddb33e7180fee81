"""Float functions on tinygrad Tensors that agree with XLA on CPU, for the elementwise rules.

Each function takes and returns Tensors of one float dtype. Two kinds:
- functions XLA computes to an ulp or two (exp, log, sin, pow, atan2, ...) are evaluated in float64 and rounded;
- functions XLA expands into a formula in the operand's dtype (exp2, logistic, sinh, cosh, erf, erfc, erf_inv,
  lgamma, digamma) replay that formula with the same roundings, so they share XLA's errors.
`# NB:` marks where tinygrad's own function, or its optimizer's rewriting of float expressions, differs from XLA.
"""
import math
import operator

from tinygrad import Tensor, dtypes
from tinygrad.uop.ops import Ops, python_alu

F32, F64 = dtypes.float32, dtypes.float64
UINT = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
INF, NAN = math.inf, math.nan


# --- bits
def width(x) -> int:
  return x.dtype.itemsize * 8


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
  return bits(x) >= 1 << (width(x) - 1)


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


def div(x, y):
  """x / y, one IEEE division (Ops.FDIV, which every renderer is taught below).

  NB: tinygrad's `/` is x * (1 / y), which its optimizer rewrites further: x / x -> 1, x / (1 + x) -> 1 - 1 / (1 + x).
  """
  x = x if isinstance(x, Tensor) else y.const_like(x)
  x, y = x._broadcasted(y)
  return x.alu(Ops.FDIV, y)


def _fold_division(x, y):
  if y != 0:
    return x / y
  return math.nan if x == 0 or math.isnan(x) else math.copysign(math.inf, x) * math.copysign(1.0, y)


def _c_division(a, b, dtype):
  return f"({a}/{b})"


def _ptx_division(d, a, b, dtype, name):
  return f"div.rn.{name} {d}, {a}, {b};"


def teach_division():
  """Make Ops.FDIV an operation of every tinygrad renderer, and foldable on constants.

  NB: tinygrad 0.14 has the FDIV op but only its clang, LLVM, NIR and x86 renderers emit it: OpenCL, WGSL, Metal, CUDA,
  HIP and PTX failed with KeyError: Ops.FDIV, and its python_alu (constant folding, the PYTHON device) lacks it.
  `a / b` is IEEE division in every C-style language (OpenCL C, WGSL, Metal, CUDA, HIP), PTX's is div.rn. A renderer
  that knows FDIV also turns tinygrad's own reciprocals into divisions (decomp/op.py), as clang's already does.
  """
  from tinygrad.renderer import cstyle, ptx, wgsl  # noqa: F401  (defines the C-style renderer classes)
  python_alu.setdefault(Ops.FDIV, _fold_division)
  pending = [cstyle.CStyleLanguage]
  while pending:
    renderer = pending.pop()
    pending.extend(renderer.__subclasses__())
    if Ops.FDIV not in renderer.code_for_op:
      renderer.code_for_op = {**renderer.code_for_op, Ops.FDIV: _c_division}
  ptx.asm_for_op.setdefault(Ops.FDIV, _ptx_division)
  if not getattr(ptx.PTXRenderer, "_tinyjax_half_division", False):  # PTX divides float16 as float32
    from tinygrad.uop.ops import PatternMatcher, UPat
    half = PatternMatcher([(UPat(Ops.FDIV, dtype=dtypes.half, src=(UPat.var("a"), UPat.var("b"))),
                            lambda a, b: a.cast(F32).alu(Ops.FDIV, b.cast(F32)).cast(dtypes.half))])
    ptx.PTXRenderer.extra_matcher = half + ptx.PTXRenderer.extra_matcher
    ptx.PTXRenderer._tinyjax_half_division = True


teach_division()


def poly(x, coefficients):
  """Horner's rule, highest power first (the evaluation order of XLA's expansions)."""
  result = coefficients[0]
  for c in coefficients[1:]:
    result = result * x + c
  return result


def narrow(x, dtype):
  """x cast to `dtype`, and really rounded to it.

  NB: within a kernel, tinygrad drops a cast to float16 that is cast back to float32 (the C code keeps float
  precision); flipping the sign bit of the float16 bits and negating back keeps the rounding.
  """
  if dtype != dtypes.float16 or x.dtype == dtype:
    return x.cast(dtype)
  b = bits(x.cast(dtype))
  return -((b ^ typed(b, 0x8000)).bitcast(dtype))


def in_f64(fn):
  """fn evaluated in float64 and rounded to the first operand's dtype."""
  return lambda *xs: narrow(fn(*(x.cast(F64) for x in xs)), xs[0].dtype)


def in_f32(fn):
  """fn evaluated in float32 at least, as XLA evaluates its expansions for float16."""
  return lambda x: narrow(fn(x.cast(F32)), x.dtype) if x.dtype.itemsize < 4 else fn(x)


# --- float64 kernels (operands are float64)
def _log1p(x):
  # NB: tinygrad has no log1p (and simplifies away the (1 + x) - 1 of Goldberg's formula): a series near 0
  series = x * poly(x, [1 / 9, -1 / 8, 1 / 7, -1 / 6, 1 / 5, -1 / 4, 1 / 3, -1 / 2, 1.0])
  return (fabs(x) < 2 ** -7).where(series, (1 + x).log())


def _expm1(x):
  # NB: tinygrad has no expm1: a series near 0, where exp(x) - 1 cancels
  series = x * poly(x, [1 / math.factorial(n) for n in range(10, 0, -1)])
  return (fabs(x) < 2 ** -7).where(series, x.exp() - 1)


def _sin_cos(x, wide: bool):
  """(sin x, cos x) of float64 x; `wide` when x may have more than float32's 24 significant bits.

  NB: tinygrad computes cos(x) as sin(pi/2 - x), which loses the argument for large |x|: 1 - 2 sin(x/2)^2 here.
  NB: tinygrad's sin reduces arguments exactly only when they have at most 24 significant bits (its float64 error
  is 1e-8 at |x| = 100): wider ones are split in three such parts, recombined by the angle sums (good to 1e-15
  below |x| = 1e30, 1e-9 at 1e38; XLA stays exact beyond).
  """
  half = (x * 0.5).sin()
  sin, cos = x.sin(), 1 - 2 * half * half
  if not wide:
    return sin, cos
  rest, sum_sin, sum_cos = x, None, None
  for last in (False, False, True):
    rest_bits = bits(rest)
    top_24 = typed(rest_bits, ((1 << 64) - 1) ^ ((1 << 29) - 1))
    part = rest if last else (rest_bits & top_24).bitcast(F64)  # the top 24 bits
    rest = rest - part
    s, c = _sin_cos(part, False)
    sum_sin, sum_cos = (s, c) if sum_sin is None else (sum_sin * c + sum_cos * s, sum_cos * c - sum_sin * s)
  near = fabs(x) < 8  # exact enough unsplit, and keeps the sign of -0.0
  return near.where(sin, sum_sin), near.where(cos, sum_cos)


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


def _atan2(y, x):
  ay, ax = fabs(y), fabs(x)
  hi, lo = ay.maximum(ax), ay.minimum(ax)
  t = hi.eq(0).where(0.0, lo.eq(INF).where(1.0, div(lo, hi)))  # atan2(0, 0) and atan2(inf, inf) are exact angles
  angle = (ay > ax).where(math.pi / 2 - _atan_unit(t), _atan_unit(t))
  angle = sign_bit(x).where(math.pi - angle, angle)
  return (isnan(x) | isnan(y)).where(NAN, with_sign(angle, y))


def _asinh(x):
  a = fabs(x)
  # NB: tinygrad's log(x + sqrt(x^2 + 1)) loses small arguments and overflows for large ones
  small = _log1p(a + div(a * a, 1 + (1 + a * a).sqrt()))
  return with_sign((a > 2 ** 28).where(a.log() + math.log(2), small), x)


def _acosh(x):
  # an identity without x + sqrt(x^2 - 1): tinygrad reassociates (x - 1) + y into (x + y) - 1, losing x - 1
  return 2 * _asinh(((x - 1) * 0.5).sqrt())


def _tanh(x):
  t = _expm1(2 * x)
  # NB: tinygrad's tanh is 2 * sigmoid(2x) - 1, which loses small arguments
  return (x > 20).where(1.0, (x < -20).where(-1.0, div(t, t + 2)))


def _pow(x, y):
  is_int = y.eq(y.trunc())  # infinities count as even integers
  is_odd = is_int & (y * 0.5).trunc().ne(y * 0.5)
  magnitude = (y * fabs(x).log2()).exp2()
  result = (sign_bit(x) & is_odd).where(-magnitude, magnitude)
  result = ((x < 0) & (x > -INF) & is_int.logical_not()).where(NAN, result)
  # C99 and XLA: x ** 0 = 1 and 1 ** y = 1 even for NaN, (-1) ** +-inf = 1
  return (y.eq(0) | x.eq(1) | (x.eq(-1) & fabs(y).eq(INF))).where(1.0, result)


def fmod(x, y):
  """C fmod (XLA's rem), exact: long division in float64, 25 quotient bits a step, each step's q * b split in
  two exact products. Enough steps to cross float16's and float32's exponent ranges.

  NB: float64 operands get 4 steps, so their remainders are exact for quotients below 2^100 only.
  """
  steps = {2: 2, 4: 12, 8: 4}[x.dtype.itemsize]
  x, y = x.cast(F64), y.cast(F64)
  a, b = fabs(x), fabs(y)
  undefined = isnan(x) | isnan(y) | a.eq(INF) | b.eq(0)
  keep_x = b.eq(INF) & undefined.logical_not()
  r, b = (undefined | keep_x).where(0.0, a), (undefined | keep_x).where(1.0, b)
  for _ in range(steps):
    exponent_gap = (bits(r) >> 52).cast(dtypes.int32) - (bits(b) >> 52).cast(dtypes.int32)
    scaled = (bits(b) + ((exponent_gap - 25).maximum(0).cast(dtypes.uint64) << 52)).bitcast(F64)
    scaled_bits = bits(scaled)
    high = (scaled_bits & typed(scaled_bits, ((1 << 64) - 1) ^ ((1 << 26) - 1))).bitcast(F64)  # its top 27 bits
    quotient = div(r, scaled).trunc()  # below 2^26, so both products below are exact
    r = (r - quotient * high) - quotient * (scaled - high)
    r = (r < 0).where(r + scaled, r)  # the rounded quotient was one too large
  return undefined.where(NAN, keep_x.where(x, with_sign(r, x)))


def _trig(pick):
  """A function of (sin x, cos x), evaluated in float64 and rounded."""
  return lambda x: in_f64(lambda v: pick(*_sin_cos(v, x.dtype == F64)))(x)


sin, cos, tan = _trig(lambda s, c: s), _trig(lambda s, c: c), _trig(div)
exp, log, log1p, expm1 = in_f64(lambda x: x.exp()), in_f64(lambda x: x.log()), in_f64(_log1p), in_f64(_expm1)
tanh, atan, atan2 = in_f64(_tanh), in_f64(_atan), in_f64(_atan2)
asin = in_f64(lambda x: _atan2(x, ((1 - x) * (1 + x)).sqrt()))
acos = in_f64(lambda x: _atan2(((1 - x) * (1 + x)).sqrt(), x))
asinh, acosh = in_f64(_asinh), in_f64(_acosh)
atanh = in_f64(lambda x: 0.5 * _log1p(div(2 * x, 1 - x)))
rsqrt = in_f64(lambda x: div(1, x.sqrt()))
cbrt = in_f64(lambda x: with_sign((fabs(x).log2() * (1 / 3)).exp2(), x))
power = in_f64(_pow)


# --- XLA's expansions, replayed in the operand's dtype
def rounded(op):
  """op rounded to the operands' dtype, as XLA rounds each op.

  NB: tinygrad's C kernels keep float16 intermediates in float precision; compute in float32 and round.
  """
  def apply(*xs):
    if xs[0].dtype.itemsize < 4:
      return narrow(op(*(x.cast(F32) for x in xs)), xs[0].dtype)
    return op(*xs)
  return apply


def exp2(x):
  return exp(rounded(operator.mul)(x, x.const_like(math.log(2))))  # jax: exp(log(2) * x), rounded like XLA


def logistic(x):
  denominator = rounded(operator.add)(x.const_like(1), exp(-x))  # jax: 1 / (1 + exp(-x))
  return rounded(div)(x.const_like(1), denominator)


def _sinh(x):
  e = expm1(x)
  small = 0.5 * (e + div(e, e + 1))
  return (fabs(x) < 1).where(small, exp(x + math.log(0.5)) - exp(math.log(0.5) - x))


sinh = in_f32(_sinh)
cosh = in_f32(lambda x: exp(x + math.log(0.5)) + exp(math.log(0.5) - x))


# erf and erfc: rational approximations from XLA (Eigen's for float32 erf, Cephes' for the rest)
ERF_ALPHA = [-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
             -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02]
ERF_BETA = [-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
            -1.42647390514189e-02]
ERF_T32 = [7.853861353153693e-5, -8.010193625184903e-4, 5.188327685732524e-3, -2.685381193529856e-2,
           1.128358514861418e-1, -3.761262582423300e-1, 1.128379165726710]
ERFC_P32 = [2.326819970068386e-2, -1.387039388740657e-1, 3.687424674597105e-1, -5.824733027278666e-1,
            6.210004621745983e-1, -4.944515323274145e-1, 3.404879937665872e-1, -2.741127028184656e-1,
            5.638259427386472e-1]
ERFC_R32 = [-1.047766399936249e+1, 1.297719955372516e+1, -7.495518717768503, 2.921019019210786,
            -1.015265279202700, 4.218463358204948e-1, -2.820767439740514e-1, 5.641895067754075e-1]
ERF_T64 = [9.60497373987051638749, 9.00260197203842689217e1, 2.23200534594684319226e3, 7.00332514112805075473e3,
           5.55923013010394962768e4]
ERF_U64 = [1.0, 3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
           2.26290000613890934246e4, 4.92673942608635921086e4]
ERFC_P64 = [2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687, 4.86371970985681366614e1,
            1.96520832956077098242e2, 5.26445194995477358631e2, 9.34528527171957607540e2, 1.02755188689515710272e3,
            5.57535335369399327526e2]
ERFC_Q64 = [1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
            9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3, 1.65666309194161350182e3,
            5.57535340817727675546e2]
ERFC_R64 = [5.64189583547755073984e-1, 1.27536670759978104416, 5.01905042251180477414, 6.16021097993053585195,
            7.40974269950448939160, 2.97886665372100240670]
ERFC_S64 = [1.0, 2.26052863220117276590, 9.39603524938001434673, 1.20489539808096656605e1, 1.70814450747565897222e1,
            9.60896809063285878198, 3.36907645100081516050]


def _erf_small(x):
  """erf for |x| < 1 (the float64 and float32 erfc use it)."""
  x2 = x * x
  if x.dtype == F64:
    return div(x * poly(x2, ERF_T64), poly(x2, ERF_U64))
  return x * poly(x2, ERF_T32)


def _erfc_large(x):
  """erfc for |x| >= 1."""
  z, ax = -(x * x), fabs(x)
  if x.dtype == F64:
    e = exp(z)
    approx = (ax < 8).where(div(e * poly(ax, ERFC_P64), poly(ax, ERFC_Q64)),
                            div(e * poly(ax, ERFC_R64), poly(ax, ERFC_S64)))
    max_log = 709.782712893383996843
  else:
    r = div(1, x * x)
    approx = exp(z) * div(1, ax) * (ax < 2).where(poly(r, ERFC_P32), poly(r, ERFC_R32))
    max_log = 88.72283905206835
  approx = (z < -max_log).where(0.0, approx)
  return (x < 0).where(2 - approx, approx)


def _erf(x):
  if x.dtype == F64:
    return (fabs(x) < 1).where(_erf_small(x), 1 - _erfc_large(x))
  x = x.clip(-4, 4)
  x2 = x * x
  return div(x * poly(x2, ERF_ALPHA), poly(x2, ERF_BETA)).clip(-1, 1)


erf = in_f32(_erf)
erfc = in_f32(lambda x: (fabs(x) < 1).where(1 - _erf_small(x), _erfc_large(x)))

# erf_inv: Giles' polynomials in w = -log(1 - x^2), as XLA evaluates them
ERF_INV32 = ([2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941],
             [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682])
ERF_INV64 = ([-3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18,
              1.115787767802518096e-17, -1.333171662854620906e-16, 2.0972767875968561637e-17,
              6.6376381343583238325e-15, -4.0545662729752068639e-14, -8.1519341976054721522e-14,
              2.6335093153082322977e-12, -1.2975133253453532498e-11, -5.4154120542946279317e-11,
              1.051212273321532285e-09, -4.1126339803469836976e-09, -2.9070369957882005086e-08,
              4.2347877827932403518e-07, -1.3654692000834678645e-06, -1.3882523362786468719e-05,
              0.0001867342080340571352, -0.00074070253416626697512, -0.0060336708714301490533,
              0.24015818242558961693, 1.6536545626831027356],
             [2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07,
              1.8239629214389227755e-08, 1.5027403968909827627e-06, -4.013867526981545969e-06,
              2.9234449089955446044e-06, 1.2475304481671778723e-05, -4.7318229009055733981e-05,
              6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
              0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066,
              -0.0037512085075692412107, 0.005370914553590063617, 1.0052589676941592334, 3.0838856104922207635],
             [-2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
              -3.7894654401267369937e-09, 7.6157012080783393804e-09, -1.4960026627149240478e-08,
              2.9147953450901080826e-08, -6.7711997758452339498e-08, 2.2900482228026654717e-07,
              -9.9298272942317002539e-07, 4.5260625972231537039e-06, -1.9681778105531670567e-05,
              7.5995277030017761139e-05, -0.00021503011930044477347, -0.00013871931833623122026,
              1.0103004648645343977, 4.8499064014085844221])


def _erf_inv(x):
  # NB: tinygrad has no erfinv
  w = -log1p(x * -x)
  if x.dtype == F64:  # three ranges of w
    low, middle = w < 6.25, w < 16
    w = low.where(w - 3.125, w.sqrt() - middle.where(3.25, 5.0))
    p = low.where(poly(w, ERF_INV64[0]), middle.where(poly(w, ERF_INV64[1]), poly(w, ERF_INV64[2])))
  else:
    low = w < 5
    w = low.where(w - 2.5, w.sqrt() - 3)
    p = low.where(poly(w, ERF_INV32[0]), poly(w, ERF_INV32[1]))
  return fabs(x).eq(1).where(x * INF, p * x)


erf_inv = in_f32(_erf_inv)

# lgamma and digamma: Lanczos' approximation (g = 7, 9 terms) with Euler's reflection below 1/2, as XLA does
LANCZOS_BASE = 0.99999999999980993227684700473478
LANCZOS = [676.520368121885098567009190444019, -1259.13921672240287047156078755283, 771.3234287776530788486528258894,
           -176.61502916214059906584551354, 12.507343278686904814458936853, -0.13857109526572011689554707,
           9.984369578019570859563e-6, 1.50563273514931155834e-7]


def _lanczos(x):
  """(reflect, z, t, log t) with z = -x when reflecting else x - 1, t = z + g + 1/2."""
  reflect = x < 0.5
  z = reflect.where(-x, x - 1)
  return reflect, z, z + 7.5, math.log(7.5) + log1p(z * (1 / 7.5))  # XLA divides by a constant this way


def _lgamma(x):
  reflect, z, t, log_t = _lanczos(x)
  a = LANCZOS_BASE
  for k, c in enumerate(LANCZOS, 1):
    a = a + div(c, z + k)
  result = (math.log(2) + math.log(math.pi)) / 2 + (z + 0.5 - div(t, log_t)) * log_t + log(a)
  # reflection: log(pi) - lgamma(1 - x) - log|sin(pi x)|, with sin(pi x) from the fraction of |x| nearest 0
  frac = fabs(x) - fabs(x).floor()
  frac = (frac > 0.5).where(1 - frac, frac)
  log_sin = log(sin(math.pi * frac))
  reflected = (fabs(log_sin) < INF).where((math.log(math.pi) - log_sin) - result, -log_sin)
  return fabs(x).eq(INF).where(INF, reflect.where(reflected, result))


def _digamma(x):
  reflect, z, t, log_t = _lanczos(x)
  a, a_prime = LANCZOS_BASE, 0.0
  for k, c in enumerate(LANCZOS, 1):
    a_prime = a_prime - div(c, (z + k) * (z + k))
    a = a + div(c, z + k)
  result = log_t + div(a_prime, a) - div(7, t)
  # reflection: digamma(1 - x) - pi cot(pi x), with x moved into [-1/2, 1/2] first
  reduced = math.pi * (x + fabs((x + 0.5).floor()))
  result = reflect.where(result - div(math.pi * cos(reduced), sin(reduced)), result)
  return (((x < 0) | x.eq(0)) & x.eq(x.floor())).where(NAN, result)  # poles at 0 and the negative integers


lgamma, digamma = in_f32(_lgamma), in_f32(_digamma)
