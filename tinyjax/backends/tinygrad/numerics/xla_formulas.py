"""Functions XLA expands into a formula in the operand's dtype (asin, acos, exp2, logistic, tanh, sinh, cosh, erf, erfc,
erf_inv, lgamma, digamma), replayed with the same roundings so that they share XLA's errors, on floatmath's exp, log,
sin and atan2.
"""
import math
import operator

from tinygrad import Tensor

from tinyjax.backends.tinygrad.numerics.floatbits import F64, fabs
from tinyjax.backends.tinygrad.numerics.floatmath import (INF, NAN, atan2, by_dtype, cos, div, exp, expm1, in_f32, log,
                                                 log1p, poly, rounded_op, sin)
from tinyjax.backends.tinygrad.numerics.floatmath import tanh as floatmath_tanh


def _root_of_one_minus_square(x):  # jax: sqrt((1 - x) (1 + x)), each operation in x's dtype
  one = x.const_like(1)
  product = rounded_op(operator.mul)(rounded_op(operator.sub)(one, x), rounded_op(operator.add)(one, x))
  return rounded_op(Tensor.sqrt)(product)


def asin(x):  # jax: 2 atan2(x, 1 + sqrt((1 - x) (1 + x)))
  return rounded_op(operator.mul)(x.const_like(2), atan2(x, rounded_op(operator.add)(_root_of_one_minus_square(x),
                                                                                      x.const_like(1))))


def acos(x):  # jax: atan2(sqrt((1 - x) (1 + x)), x)
  return atan2(_root_of_one_minus_square(x), x)


def exp2(x):
  return exp(rounded_op(operator.mul)(x, x.const_like(math.log(2))))  # jax: exp(log(2) * x), rounded like XLA


def logistic(x):
  denominator = rounded_op(operator.add)(x.const_like(1), exp(-x))  # jax: 1 / (1 + exp(-x))
  return rounded_op(div)(x.const_like(1), denominator)


# tanh of float32: XLA's CPU expansion (llvm_ir::EmitFastTanh, with fused multiply-adds: Eigen's rational
# approximation), x itself where |x| < 0.0004, elsewhere of x clamped where the approximation reaches exactly 1
TANH_NUMERATOR = [-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
                  1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03]
TANH_DENOMINATOR = [1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03]
TANH_CLAMP = 7.99881172180175781


def _tanh_f32(x):
  clamped = x.maximum(-TANH_CLAMP).minimum(TANH_CLAMP)
  squared = clamped * clamped
  ratio = div(clamped * poly(squared, TANH_NUMERATOR), poly(squared, TANH_DENOMINATOR))
  return (fabs(x) < 0.0004).where(x, ratio)


tanh = by_dtype(_tanh_f32, floatmath_tanh)  # NB: float64's is floatmath's (expm1's)


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
  # NB: (log(pi) - log_sin) - result written as sign * result + offset: selecting between the result and a difference
  # of it let tinygrad distribute the subtraction over the result's sum, which then rendered its product on a line of
  # its own, where no compiler contracts it into the fused multiply-add that XLA's is (lgamma(1e4) 1 ulp off)
  sign, offset = reflect.where(-1.0, 1.0), reflect.where(math.log(math.pi) - log_sin, -0.0)
  reflected = (~reflect | (fabs(log_sin) < INF)).where(sign * result + offset, -log_sin)
  return fabs(x).eq(INF).where(INF, reflected)


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
