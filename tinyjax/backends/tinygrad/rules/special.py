"""Special functions that XLA computes through a JAX function or an expansion of its own: igamma, igammac,
igamma_grad_a, regularized_incomplete_beta, bessel_i0e, bessel_i1e, zeta, polygamma, and random_gamma.

Each rule runs an *expansion*: a JAX function for the primitive, traced for the equation's avals (and params) into a
jaxpr, which runs here through the other rules (`ctx.backend.run_jaxpr`), so its results are XLA's:
- XLA lowers igamma, igammac, igamma_grad_a, regularized_incomplete_beta, bessel_i0e and random_gamma with
  `mlir.lower_fun` of a Python implementation written with lax: it runs that implementation's jaxpr, and so do we.
- zeta, polygamma and bessel_i1e lower to CHLO ops that XLA expands in C++ (StableHLO's CHLO decompositions):
  the functions below restate those expansions with lax, op for op.
The series and continued fractions (the igamma family, the incomplete beta, random_gamma's rejection loop) are while
loops with data-dependent trip counts, so those rules read on the host (host_sync); the backend runs an expanded
primitive here only when every equation of its expansion has a rule (table.EXPANSIONS).
"""
import functools

import jax
import numpy as np
from jax import lax

# NB: jax.extend exposes none of these implementations: they are reached in jax._src, where XLA's lowerings use them
from jax._src.lax import special as jax_special
from jax._src.random import core as jax_random

from tinyjax.backends.tinygrad.numerics import floatbits as fb
from tinyjax.backends.tinygrad.table import register


# --- CHLO's expansions, restated with lax in XLA's order of operations (checked bit for bit against XLA's own, on
# XLA). Each takes the `dtype` keyword of _up_and_broadcast, which wraps them, and computes in its operands' dtype.
# Euler-Maclaurin's correction terms for the Hurwitz zeta function: (2k)! / B_2k, as in Cephes' zeta.c
ZETA_TERMS = [-7.1661652561756670113e18, 1.8152105401943546773e17, -4.5979787224074726105e15, 1.1646782814350067249e14,
              -2.950130727918164224e12, 7.47242496e10, -1.8924375803183791606e9, 47900160.0, -1209600.0, 30240.0,
              -720.0, 12.0]


def _flushed(x):
  """x, or zero (with x's sign) where x is denormal.

  NB: XLA's CPU backend flushes denormal results to zero; tinygrad keeps them. Where an expansion's terms underflow
  (and flushing cannot change JAX's own results), it flushes them as XLA does.
  """
  return lax.select(abs(x) < np.finfo(x.dtype).tiny, x * 0.0, x)


def _zeta(x, q, *, dtype=None):
  """The Hurwitz zeta function sum_k (q + k)^-x: ten terms of the series, then Euler-Maclaurin's tail."""
  minus_x = -x
  a, head = q, _flushed(lax.pow(q, minus_x))
  for _ in range(9):
    a = a + 1.0
    head = head + _flushed(lax.pow(a, minus_x))
  a = a + 1.0
  term = _flushed(lax.pow(a, minus_x))
  tail = head + term * a / (x - 1.0)
  inverse_square = 1.0 / (a * a)
  horner = lax.full_like(x, 0.0)
  for i in range(11):  # Horner's rule over the correction terms (Cephes sums them naively)
    factor = (x + float(22 - 2 * i)) * (x + float(21 - 2 * i))
    horner = factor * (inverse_square * (horner + 1.0 / ZETA_TERMS[i]))
  result = tail + term * (0.5 + x / a * (1.0 / ZETA_TERMS[11] + horner))
  # NB: Cephes returns the head alone when the next term is below its precision; XLA's test for that multiplies the
  # head by the smallest subnormal, which XLA's CPU backend reads as zero (denormals-are-zero): it never holds
  nan, inf = lax.full_like(x, np.nan), lax.full_like(x, np.inf)
  result = lax.select(x < 1.0, nan, result)  # undefined below 1
  q_not_positive = q <= 0.0
  x_is_integer = x == lax.floor(x)
  result = lax.select(q_not_positive & ~x_is_integer, nan, result)  # q <= 0 needs an integer x
  # poles at the integers q <= 0: +inf where x is an even integer, else undefined
  x_is_even = x_is_integer & (lax.rem(x, lax.full_like(x, 2.0)) == 0.0)
  result = lax.select(q_not_positive & (q == lax.floor(q)), lax.select(x_is_even, inf, nan), result)
  return lax.select(x == 1.0, inf, result)  # the harmonic series diverges


def _polygamma(n, x, *, dtype=None):
  """psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x) for natural n > 0, digamma for n = 0, NaN for other n."""
  sign = 2.0 * lax.rem(n, lax.full_like(n, 2.0)) - 1.0
  n_plus_one = n + 1.0
  result = sign * lax.exp(lax.lgamma(n_plus_one)) * _zeta(n_plus_one, x)
  result = lax.select(n == 0.0, lax.digamma(x), result)
  not_natural = (n != lax.floor(n)) | (n < 0.0)
  return lax.select(not_natural, lax.full_like(x, np.nan), result)


# Cephes' i1e: Chebyshev coefficients on [0, 8] (of i1e(x) / x in x / 2 - 2) and on (8, inf) (of i1e(x) sqrt(x) in
# 32 / x - 2); float32 takes the last 17 and 7 of them, as XLA does
I1E_SMALL = [2.77791411276104639959e-18, -2.11142121435816608115e-17, 1.55363195773620046921e-16,
             -1.10559694773538630805e-15, 7.60068429473540693410e-15, -5.04218550472791168711e-14,
             3.22379336594557470981e-13, -1.98397439776494371520e-12, 1.17361862988909016308e-11,
             -6.66348972350202774223e-11, 3.62559028155211703701e-10, -1.88724975172282928790e-9,
             9.38153738649577178388e-9, -4.44505912879632808065e-8, 2.00329475355213526229e-7,
             -8.56872026469545474066e-7, 3.47025130813767847674e-6, -1.32731636560394358279e-5,
             4.78156510755005422638e-5, -1.61760815825896745588e-4, 5.12285956168575772895e-4,
             -1.51357245063125314899e-3, 4.15642294431288815669e-3, -1.05640848946261981558e-2,
             2.47264490306265168283e-2, -5.29459812080949914269e-2, 1.02643658689847095384e-1,
             -1.76416518357834055153e-1, 2.52587186443633654823e-1]
I1E_LARGE = [7.51729631084210481353e-18, 4.41434832307170791151e-18, -4.65030536848935832153e-17,
             -3.20952592199342395980e-17, 2.96262899764595013876e-16, 3.30820231092092828324e-16,
             -1.88035477551078244854e-15, -3.81440307243700780478e-15, 1.04202769841288027642e-14,
             4.27244001671195135429e-14, -2.10154184277266431302e-14, -4.08355111109219731823e-13,
             -7.19855177624590851209e-13, 2.03562854414708950722e-12, 1.41258074366137813316e-11,
             3.25260358301548823856e-11, -1.89749581235054123450e-11, -5.58974346219658380687e-10,
             -3.83538038596423702205e-9, -2.63146884688951950684e-8, -2.51223623787020892529e-7,
             -3.88256480887769039346e-6, -1.10588938762623716291e-4, -9.76109749136146840777e-3,
             7.78576235018280120474e-1]


def _bessel_i1e(x, *, dtype=None):
  """e^-|x| I1(x): Cephes' Chebyshev expansions, in x / 2 - 2 up to 8 and in 32 / x - 2 beyond."""
  wide = x.dtype == np.float64
  small, large = (I1E_SMALL, I1E_LARGE) if wide else (I1E_SMALL[-17:], I1E_LARGE[-7:])
  z = abs(x)
  # NB: JAX's own Clenshaw recurrence (the one its i0e uses) is XLA's, op for op
  near = z * jax_special.evaluate_chebyshev_polynomial(0.5 * z - 2.0, small)
  far = jax_special.evaluate_chebyshev_polynomial(32.0 / z - 2.0, large) / lax.sqrt(z)
  return lax.sign(x) * lax.select(z <= 8.0, near, far)


# --- the expansions
# name -> (the JAX function the primitive computes, called with its operands and params; whether it loops on data)
JAX_FUNCTIONS = {
  "igamma": (jax_special._up_and_broadcast(jax_special.igamma_impl), True),
  "igammac": (jax_special._up_and_broadcast(jax_special.igammac_impl), True),
  "igamma_grad_a": (jax_special._up_and_broadcast(jax_special.igamma_grad_a_impl), True),
  "regularized_incomplete_beta": (jax_special._up_and_broadcast(jax_special.regularized_incomplete_beta_impl), True),
  "bessel_i0e": (jax_special.bessel_i0e_impl, False),
  # XLA's lowering of random_gamma on every platform: the batched (vmap) rejection loop for threefry keys
  "random_gamma": (functools.partial(jax_random._gamma_impl, use_vmap=True), True),
  # CHLO's ops broadcast their operands and upcast narrower floats to float32, as _up_and_broadcast does
  "zeta": (jax_special._up_and_broadcast(_zeta), False),
  "polygamma": (jax_special._up_and_broadcast(_polygamma), False),
  "bessel_i1e": (jax_special._up_and_broadcast(_bessel_i1e), False),
}


@functools.lru_cache(maxsize=256)
def _traced(name: str, in_avals: tuple, params: tuple):
  fn, _ = JAX_FUNCTIONS[name]
  return jax.make_jaxpr(functools.partial(fn, **dict(params)))(*in_avals)


def expansion(name: str, in_avals: tuple, **params):
  """The ClosedJaxpr the primitive `name` runs for operands of `in_avals` (cached)."""
  return _traced(name, tuple(in_avals), tuple(sorted(params.items())))


def _run_expansion(name, ctx, *operands, **params):
  (result,) = ctx.backend.run_jaxpr(expansion(name, ctx.in_avals, **params), *operands)
  if np.dtype(ctx.out_aval.dtype).itemsize < 4:
    return result  # XLA computes float16 in float32 and rounds it, and the rounding keeps denormals
  # NB: XLA's CPU backend flushes denormal results to zero, keeping their sign (e^-100 in igammac(1, 100));
  # tinygrad keeps them. The expansion's result is flushed (its intermediate values are not)
  tiny = float(np.finfo(ctx.out_aval.dtype).tiny)
  return (fb.fabs(result) < tiny).where(fb.with_sign(result.const_like(0), result), result)


for _name, (_, _loops) in JAX_FUNCTIONS.items():
  # random_gamma takes typed keys: its expansion splits them and draws bits with the key rules
  register(_name, host_sync=_loops, carried=_name == "random_gamma", expansion=functools.partial(expansion, _name))(
    functools.partial(_run_expansion, _name))
