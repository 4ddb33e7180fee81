"""Special functions on tinygrad against JAX on XLA: igamma, igammac, igamma_grad_a, betainc, bessel_i0e,
bessel_i1e, zeta, polygamma and random_gamma, all native (nothing falls back), over edge values (NaN, +-inf, 0, -0.0,
negative, tiny, huge, x on either side of a), and the jax.scipy.special and jax.random functions built on them.

Their rules run expansions (tinyjax.backends.tinygrad.rules.special): the results are XLA's up to the few ulp by which
tinygrad's float ops differ from XLA's (tinygrad reassociates sums with constants, and some functions are an ulp or two
from XLA's); ill-conditioned spots widen that. Results XLA flushes to zero (denormals) must be zeros here too.
Each distinct shape and dtype compiles its kernels anew (seconds each), so the cases share shapes where they can.
"""
import os
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import tinyjax
import tinyjax.lax
import tinyjax.scipy.special
from helpers import dtype_name
from oracle import check, check_lax, check_traced, native
from tinyjax.core.mirror import wrap
from xfail import param

F32, F16 = np.float32, np.float16
INF, NAN = np.inf, np.nan



def grid(*axes, dtype=F32):
  """Every combination of the axes' values, as flat arrays of `dtype` (where huge values may become inf)."""
  with np.errstate(over="ignore"):
    return [g.ravel().astype(dtype) for g in np.meshgrid(*[np.asarray(axis, np.float64) for axis in axes])]


# --- the incomplete gamma functions: a x x over edges, and x just below, at and above a (where igamma switches
# between its series and its continued fraction)
GAMMA_A = [0.0, -0.0, -1.0, 1e-3, 0.1, 0.5, 1.0, 2.5, 7.0, 30.0, 150.0, INF, NAN]
GAMMA_X = [0.0, -0.0, -2.0, 1e-4, 0.3, 1.0, 2.5, 6.99, 7.0, 7.01, 40.0, 100.0, 300.0, 1e30, INF, NAN]
# Tolerances beyond the oracle's where the expansions are ill-conditioned: a few ulp of log(x) or lgamma(a) become a
# relative error of a few ulp times a in exp(a log x - x - lgamma(a)); igammac and betainc take some results as 1 - r
# (an ulp of 1 is then the error); zeta and polygamma sum terms of both signs for q < 0
TOLERANCE = {"igamma": dict(rtol=1e-5), "igammac": dict(rtol=1e-5, atol=2e-7), "igamma_grad_a": dict(rtol=2e-5),
             # XLA's float32 betainc is off by up to 1.4e-3 (1.1e-5 absolute) at b = 1e-3: betainc(0.5, 1e-3, 0.6) is
             # 0.00205992 (float64, scipy), 0.00206274 by XLA on this grid and 0.00205892 on 4 elements; tinyjax's
             # 0.00205994
             "betainc": dict(rtol=1e-5, atol=1.5e-5), "zeta": dict(rtol=1e-5), "polygamma": dict(rtol=1e-5)}
# float16 once per way of evaluating it in float32: XLA's _up_and_broadcast (igamma here; the igamma family and
# betainc share it, and so do zeta, polygamma and bessel_i1e, which restate CHLO's upcast with it) and bessel_i0e's
IGAMMA_CASES = [("igamma", F32), ("igammac", F32), ("igamma_grad_a", F32), ("igamma", F16)]


@pytest.mark.parametrize("prim, dtype", [param(p, d, name=p, dtype=d, id=f"{p}-{dtype_name(d)}") for p, d in IGAMMA_CASES])
def test_incomplete_gamma(prim, dtype):
  check_lax(prim, *grid(GAMMA_A, GAMMA_X, dtype=dtype), **TOLERANCE[prim] if dtype == F32 else {})


@pytest.mark.parametrize("dtype", [param(F32, name="igamma(a = x = 1e4)", dtype=F32, id="float32")])
def test_incomplete_gamma_of_large_a(dtype):
  # exp(a log x - x - lgamma(a)) at a = x = 1e4 subtracts numbers near 9e4, whose ulp (0.008) is the result's error:
  # lgamma's result one ulp from XLA's (its fused multiply-add not fused) is 0.8% here
  a, x = grid(GAMMA_A, GAMMA_X, dtype=dtype)  # the grid's shape, whose kernels are compiled already
  a[0], x[0] = 1e4, 1e4
  check_lax("igamma", a, x, **TOLERANCE["igamma"])


# --- the incomplete beta function: a x b x x, x on either side of (a + 1) / (a + b + 2), where it switches to the
# symmetric fraction
BETA_AB = [0.0, -1.0, 1e-3, 0.5, 1.0, 3.0, 40.0, INF, NAN]
BETA_X = [0.0, -0.0, -0.1, 1e-5, 0.1, 0.5, 0.6, 0.99, 1.0, 1.5, NAN]


def test_betainc():
  check_lax("betainc", *grid(BETA_AB, BETA_AB, BETA_X), **TOLERANCE["betainc"])


# --- zeta and polygamma: q <= 0 (poles at the integers, NaN for other x), x < 1, x = 1, non-integer n, terms
# (q + k)^-x that are denormal (x = 10, q = 1e4), which XLA flushes to zero
ZETA_X = [-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 7.5, 10.0, 30.0, 200.0, INF, NAN]
ZETA_Q = [-3.0, -2.5, -1.0, -0.0, 0.0, 1e-3, 0.5, 1.0, 2.0, 9.5, 1e4, 1e20, INF, -INF, NAN]
POLYGAMMA_N = [-1.0, 0.0, -0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 7.0, 12.0, INF, NAN]


@pytest.mark.parametrize("dtype", [param(d, name="zeta", dtype=d, id=dtype_name(d)) for d in (F32, F16)])
def test_zeta(dtype):
  check_lax("zeta", *grid(ZETA_X, ZETA_Q, dtype=dtype), **TOLERANCE["zeta"] if dtype == F32 else {})


def test_polygamma():
  check_lax("polygamma", *grid(POLYGAMMA_N, ZETA_Q), **TOLERANCE["polygamma"])


# --- the Bessel functions: both Chebyshev ranges (|x| <= 8 and beyond), their border, signs, huge and tiny x
def bessel_values(dtype):
  big = 6e4 if dtype == F16 else 1e30
  edges = [0.0, -0.0, 1e-4, -1e-4, 7.999, 8.0, 8.001, -8.0, big, -big, INF, -INF, NAN]
  return np.concatenate([edges, np.linspace(-40, 40, 161)]).astype(dtype)


@pytest.mark.parametrize("dtype, prim", [param(d, p, name=p, dtype=d, id=f"{dtype_name(d)}-{p}")
                                         for p in ("bessel_i0e", "bessel_i1e") for d in (F32, F16)])
def test_bessel(prim, dtype):
  check_lax(prim, bessel_values(dtype))


# --- jax.scipy.special on these primitives (the same shapes as above, so the compiled kernels are reused)
def special_of(np_):
  return tinyjax.scipy.special if np_ is not jnp else jax.scipy.special


def test_scipy_special():
  # one function a program, the same programs as the primitives' above but for scipy's argument handling
  a, x = grid(GAMMA_A, GAMMA_X)
  check(lambda np_, a, x: special_of(np_).gammainc(a, x), a, x, **TOLERANCE["igamma"])
  check(lambda np_, a, x: special_of(np_).gammaincc(a, x), a, x, **TOLERANCE["igammac"])
  check(lambda np_, a, b, x: special_of(np_).betainc(a, b, x), *grid(BETA_AB, BETA_AB, BETA_X), **TOLERANCE["betainc"])
  check(lambda np_, x, q: special_of(np_).zeta(x, q), *grid(ZETA_X, ZETA_Q), **TOLERANCE["zeta"])
  n, x = grid(POLYGAMMA_N[:7], ZETA_Q)  # scipy's polygamma takes integer orders
  check(lambda np_, n, x: special_of(np_).polygamma(n, x), n.astype(np.int32), x, **TOLERANCE["polygamma"])
  x = bessel_values(F32)
  check(lambda np_, x: [special_of(np_).i0(x), special_of(np_).i1(x)], x)


def test_gradients():
  # on the grids above, so that the primitives' kernels compiled there serve here too
  grad = lambda np_, f: (tinyjax if np_ is not jnp else jax).grad(lambda v: f(v).sum())  # noqa: E731
  # d gammainc / da is igamma_grad_a
  a, x = grid(GAMMA_A, GAMMA_X)
  check(lambda np_, a: grad(np_, lambda a: special_of(np_).gammainc(a, x))(a), a, **TOLERANCE["igamma_grad_a"])
  # d betainc / dx is exp of a sum of lgammas and logs, whose ulp differences from XLA's add up (1.2e-5 seen)
  a, b, x = grid(BETA_AB, BETA_AB, BETA_X)
  check(lambda np_, x: grad(np_, lambda x: special_of(np_).betainc(a, b, x))(x), x, rtol=3e-5, atol=2e-6)
  # digamma' is polygamma(1, x)
  check(lambda np_, x: grad(np_, special_of(np_).digamma)(x), bessel_values(F32), **TOLERANCE["polygamma"])


# --- random_gamma: XLA's batched rejection loop; every sampler on it shares one shape (8 samples), so one set of
# kernels serves them all
ALPHAS = np.array([1e-3, 0.1, 0.5, 1.0, 2.5, 10.0, 100.0, 1e4], F32)


def check_sampler(fn, *args, rtol=2 * float(np.finfo(F32).eps), **kwargs):
  """fn, written against JAX's random, traced whole by JAX (jit) and by tinyjax: the samples within two ulp."""
  return check(lambda np_, *xs: jax.jit(fn)(*xs) if np_ is jnp else wrap(fn)(*xs), *args, rtol=rtol, **kwargs)


SAMPLERS = {
  "gamma": lambda k, a: jax.random.gamma(k, a),
  "gamma_batched_keys": lambda k, a: jax.vmap(lambda k, a: jax.random.gamma(k, a))(jax.random.split(k),
                                                                                    a.reshape(2, 4)),
  "loggamma": lambda k, a: jax.random.loggamma(k, a),
  "beta": lambda k, a: jax.random.beta(k, a[:4], a[4:], (2, 4)),
  "dirichlet": lambda k, a: jax.random.dirichlet(k, a[2:6], (2,)),
}
# log-space samples cancel near 0 (log d + log V + log U / a), where an ulp of a term is the result's error
# gamma's tiny samples (2e-9 at a = 0.01) are exp of such sums: 3 ulps apart on WEBGPU, and dirichlet's are gamma's
# divided by their sum (5 ulps apart on WEBGPU, run with every case)
SAMPLER_TOLERANCE = {"loggamma": dict(atol=1e-6), "gamma": dict(rtol=1e-6), "dirichlet": dict(rtol=1e-6)}


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_gamma_samplers(sampler):
  check_sampler(lambda s, a: SAMPLERS[sampler](jax.random.key(s), a), np.int32(13), ALPHAS,
                **SAMPLER_TOLERANCE.get(sampler, {}))


@pytest.mark.parametrize("dtype", [F16, F32], ids=dtype_name)
def test_bit_masks_of_literal_zeros(dtype):
  # floatmath's bit tricks (abs, copysign, float16 rounding) on jaxpr literals: tinygrad's constant folding made
  # kernels clang rejected (betainc's continued fraction takes |0.0|; XLA rescued the program, with a warning)
  x = np.array([1.5, -2.0, NAN], dtype)
  with warnings.catch_warnings():
    warnings.simplefilter("error", RuntimeWarning)
    check_traced(lambda v: [v - lax.abs(dtype(-0.0)), v + lax.abs(dtype(0.0)), lax.abs(dtype(-2.5)) * v], x)


def test_an_expansion_with_an_equation_for_xla_runs_on_xla_whole(monkeypatch):
  # the backend claims an expanded primitive only if every equation of its expansion has a rule here
  from tinyjax.backends.tinygrad.table import RULES
  monkeypatch.delitem(RULES, "sqrt")  # bessel_i0e's expansion takes sqrt(|x|) beyond 8
  x = np.array([-9.0, 0.5, 3.0, 12.0, NAN], F32)  # a shape of its own: no program compiled earlier serves it
  with pytest.raises(tinyjax.FallbackError), native():
    tinyjax.lax.bessel_i0e(x)
    tinyjax.flush()
  check_lax("bessel_i0e", x, native_only=False)


# --- 64 bits
@pytest.mark.float64
def test_x64_in_a_subprocess():
  """float64 needs jax_enable_x64, which is global: checked in a process of its own."""
  code = """
    import sys
    sys.path[:0] = ["tests", "tests/backends"]
    import numpy as np
    from oracle import check_lax
    from test_special import BETA_AB, BETA_X, GAMMA_A, GAMMA_X, POLYGAMMA_N, ZETA_Q, ZETA_X, bessel_values, grid
    F64 = np.float64
    check_lax("igamma", *grid(GAMMA_A, GAMMA_X, dtype=F64), rtol=1e-12)
    check_lax("betainc", *grid(BETA_AB, BETA_AB, BETA_X, dtype=F64), rtol=1e-12, atol=5e-14)
    check_lax("zeta", *grid(ZETA_X, ZETA_Q, dtype=F64), rtol=1e-12)
    check_lax("polygamma", *grid(POLYGAMMA_N, ZETA_Q, dtype=F64), rtol=1e-10)
    for prim in ("bessel_i0e", "bessel_i1e"):
      check_lax(prim, bessel_values(np.float32).astype(F64))
    print("x64 ok")
    """
  result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "JAX_ENABLE_X64": "1"},
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
  assert result.returncode == 0 and "x64 ok" in result.stdout, result.stdout[-1000:] + result.stderr[-3000:]
