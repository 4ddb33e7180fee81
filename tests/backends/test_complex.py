"""Complex numbers on tinygrad (as (real, imaginary) pairs), against JAX on XLA, natively only: arithmetic and
functions on a grid of values with zeros of both signs, infinities and NaN in either part; casts; contractions,
reductions, indexing, sorting and control flow on complex operands; constants closed over as well as arguments;
jit, grad, vmap nested; transfers of 0-d, empty and strided complex arrays."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
from oracle import assert_like_jax, check, native

INF, NAN = np.inf, np.nan
_PARTS = [0.0, -0.0, 1.0, -2.5, 0.3, 1e-30, 100.0, -1e30, INF, -INF, NAN]
# every pair of parts: zeros of both signs, tiny, large (e**100 overflows float32), huge, infinite, NaN in either part
EDGE = np.array([complex(re, im) for re, im in itertools.product(_PARTS, _PARTS)], np.complex64)
# no zero part: the signs of zero parts are EDGE's
FINITE = np.array([1 + 2j, -3.5 + 0.25j, 0.5 - 1j, -0.75 - 0.5j, 0.1 + 2j, -1.5 - 0.1j, 0.125 + 3j, 4 - 4j],
                  np.complex64)


def rng_complex(shape, seed=0, dtype=np.complex64):
  rng = np.random.default_rng(seed)
  return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


# on finite values, a few ulp of the parts' magnitude
FUNCTIONS = ["exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh", "expm1", "log1p", "abs", "sign",
             "conj", "real", "imag", "square", "negative", "reciprocal"]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_functions_on_finite_values(name):
  check(lambda np_, z: getattr(np_, name)(np_.asarray(z)), FINITE, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_functions_on_edge_values(name):
  """Each part's NaN, infinities and signs of zero as XLA's (the formulas of its CPU emitter or of JAX's lowering,
  their corner cases included: cos(0 + inf j) is inf + 0j, tanh(100 + inf j) nan + nan j)."""
  check(lambda np_, z: getattr(np_, name)(np_.asarray(z)), EDGE, rtol=2e-5, atol=1e-30)


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "equal", "not_equal"])
def test_binary_on_finite_values(name):
  check(lambda np_, z, w: getattr(np_, name)(np_.asarray(z), np_.asarray(w)), FINITE, FINITE[::-1] * 0.5,
        rtol=2e-6, atol=1e-7)


def test_division_edges():
  """Smith's quotient with C99's recovery, as XLA: 1/0j is inf + nan j, x/inf is zero, inf/x is infinite, and an
  infinite numerator over zero is the zero divisor's case (inf/0j is inf + nan j): every numerator over every divisor."""
  numerators = np.array([1, 1 + 1j, INF + 0j, complex(0, INF), complex(-INF, INF), complex(NAN, 1), 3 + 4j, 0j,
                         1e30 + 1e30j], np.complex64)
  divisors = np.array([0j, complex(0, -0.0), complex(-0.0, 0), INF, 2 + 1j, 1 + 1j, complex(INF, 1), complex(NAN, 0),
                       1e-30 + 1e-30j], np.complex64)
  check(lambda np_, z, w: np_.asarray(z)[:, None] / np_.asarray(w), numerators, divisors, rtol=2e-6)


def test_power():
  z, w = FINITE, np.array([0.5, 2, -1 + 0.5j, 0j, 1j, 3, -2, 0.25 + 0.25j], np.complex64)
  check(lambda np_, a, b: np_.power(np_.asarray(a), np_.asarray(b)), z, w, rtol=5e-5, atol=1e-6)
  check(lambda np_, a: np_.asarray(a) ** 3, z, rtol=2e-6)  # integer_pow
  check(lambda np_, a: np_.asarray(a) ** -2, z, rtol=2e-6)


def test_power_on_edge_values():
  """Every base of a grid of special values to every exponent of it: each part's NaN, infinities and zeros as XLA's
  CPU gives them, the corner cases its formula alone would miss included (1 ** w is 1 + 0j for every w, inf ** c for a
  real c is inf or 0)."""
  parts = [0.0, -0.0, 1.0, -1.0, 0.5, -3.0, INF, -INF, NAN]
  grid = np.array([complex(re, im) for re, im in itertools.product(parts, parts)], np.complex64)
  check(lambda np_, z, w: np_.power(np_.asarray(z)[:, None], np_.asarray(w)), grid, grid, rtol=5e-5, atol=1e-30)


@pytest.mark.parametrize("dtype", [np.uint32, np.int32])
def test_power_with_an_integer_array_exponent(dtype):
  """lax.pow(complex, int): JAX converts the exponent to the base's dtype."""
  exponents = np.array([0, 1, 2, 3, 0, 5, 1, 2], dtype)
  check(lambda np_, a, n: np_.power(np_.asarray(a), np_.asarray(n)), FINITE, exponents, rtol=5e-5, atol=1e-6)


def test_weak_scalars_and_promotion():
  """Python complex and float scalars are weak; a float32 operand promotes to complex64."""
  x = np.array([1.0, -2.0, 0.5], np.float32)
  check(lambda np_, z, r: (np_.asarray(z) * 2 + 1j, np_.asarray(r) * (1 - 1j), np_.asarray(r) + np_.asarray(z)[:3]),
        FINITE, x, rtol=2e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_, np.uint8])
def test_casts_to_and_from_complex(dtype):
  values = np.array([0, 1, 3, 255], dtype) if dtype is not np.float32 else np.array([-0.0, 1.5, INF, NAN], dtype)
  check(lambda np_, x: np_.asarray(x).astype(np.complex64), values)


@pytest.mark.filterwarnings("ignore:Casting from complex to real:DeprecationWarning")
def test_complex_to_real_takes_the_real_part():
  edges = np.array([0j, complex(0, -0.0), 1j, 2.5, NAN, complex(0, NAN), -3 + 4j], np.complex64)
  check(lambda np_, z: (np_.asarray(z).astype(np.float32), np_.asarray(z).astype(np.int32),
                        np_.asarray(z).astype(bool)), edges)


@pytest.mark.float64
def test_complex128(x64):
  z = rng_complex((4, 3), dtype=np.complex128)
  check(lambda np_, a: (np_.exp(np_.asarray(a)) @ np_.asarray(a).T, np_.asarray(a).astype(np.complex64),
                        np_.asarray(a.astype(np.complex64)).astype(np.complex128)), z, rtol=1e-12)


def test_contractions():
  a, b = rng_complex((3, 4)), rng_complex((4, 5), seed=1)
  check(lambda np_, x, y: (np_.asarray(x) @ np_.asarray(y), np_.einsum("ij,jk->ik", x, y),
                           np_.vdot(np_.asarray(x), np_.asarray(x)), np_.dot(np_.asarray(y[:, 0]), np_.asarray(y[:, 1]))),
        a, b, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_contractions_with_a_real_operand(dtype):
  """Mixed precision (jnp.einsum under standard promotion): one operand complex, the other real.

  Not bool: XLA's simplifier makes some products with a converted bool selects (x * False is +0.0 in an elementwise
  einsum, -0.0 in an outer product or in float16): a sign of zero that depends on XLA's rewrites of the moment."""
  z, r = FINITE, np.array([1, 0, 1, 1, 0, 1, 1, 0]).astype(dtype)
  check(lambda np_, x, y: (np_.einsum("a,a->a", x, y), np_.einsum("a,a->a", y, x), np_.einsum("a,a->", x, y)),
        z, r, rtol=2e-6)

  x, k = rng_complex((1, 2, 9)), rng_complex((3, 2, 3), seed=2)
  check(lambda np_, a, b: tinyjax.lax.conv(a, b, (1,), "SAME") if np_ is tnp else jax.lax.conv(a, b, (1,), "SAME"),
        x, k, rtol=2e-5, atol=1e-6)


def test_reductions():
  z = rng_complex((3, 5))
  check(lambda np_, x: (np_.sum(np_.asarray(x), axis=1), np_.prod(np_.asarray(x), axis=0), np_.mean(np_.asarray(x)),
                        np_.cumsum(np_.asarray(x), axis=1)), z, rtol=2e-5, atol=1e-6)


def test_products_in_xlas_order():
  """reduce_prod of infinities, NaN and signed zeros in XLA's order: folded left to right from 1 + 0j with the
  textbook product ((1 + 0j)(inf + 0j) is inf + nan j), in windows of 32 padded with ones for 33 or more elements;
  one element is itself."""
  rng = np.random.default_rng(5)

  def with_specials(z, share):
    for part in (z.real, z.imag):
      mask = rng.random(z.shape) < share
      part[mask] = rng.choice(np.array([0.0, -0.0, INF, -INF, NAN, 1.0], np.float32), mask.sum())
    return z
  short, long = with_specials(rng_complex((4, 3, 5), seed=5), 0.2), with_specials(rng_complex((4, 40), seed=6), 0.015)
  check(lambda np_, x, y: (np_.prod(np_.asarray(x), axis=-1), np_.prod(np_.asarray(x), axis=(0, 2)),
                           np_.prod(np_.asarray(x)[:, :1, :1], axis=(1, 2)), np_.prod(np_.asarray(y), axis=-1)),
        short, long, rtol=2e-5)


def test_reductions_over_nothing_and_with_an_initial_value():
  z = rng_complex((3, 5))
  check(lambda np_, x: (np_.prod(np_.asarray(x)[:, :0], axis=1), np_.sum(np_.asarray(x)[:0], axis=0),
                        np_.prod(np_.asarray(x), axis=1, initial=2 - 1j), np_.sum(np_.asarray(x), axis=0, initial=1j)),
        z, rtol=2e-5, atol=1e-6)


def test_layouts_and_indexing():
  z = rng_complex((4, 6))
  idx = np.array([3, 0, 0, 2], np.int32)

  def fn(np_, x, i):
    x = np_.asarray(x)
    return (x.T, x.reshape(3, 8), x[1:3, ::2], x[::-1], np_.concatenate([x, x[:1]]), x[i], x[:, i],
            np_.pad(x, ((1, 0), (0, 2)), constant_values=1 - 2j), np_.broadcast_to(x[0], (2, 6)),
            x.at[i, 1].set(7j), x.at[i].add(1 + 1j), np_.where(x.real > 0, x, 0j), np_.stack([x, x * 1j]),
            np_.roll(x, 2, axis=1), np_.tile(x[0], 2), np_.squeeze(x[None]), np_.flip(x, 1))
  check(fn, z, idx)


def test_dynamic_slices():
  z = rng_complex((6,))
  check(lambda np_, x, s: ((tinyjax.lax if np_ is tnp else jax.lax).dynamic_slice(x, (s,), (3,)),
                           (tinyjax.lax if np_ is tnp else jax.lax).dynamic_update_slice(x, x[:2] * 2, (s,))),
        z, np.int32(2))


def test_sorting_in_jaxs_order():
  """By real part, then imaginary part (NaN last)."""
  z = np.array([1 + 2j, 1 - 1j, -3 + 0j, NAN + 1j, 0.5j, 1 + 2j, complex(0, NAN), -3 - 1j], np.complex64)
  check(lambda np_, x: (np_.sort(np_.asarray(x)), np_.sort_complex(np_.asarray(x)), np_.argsort(np_.asarray(x))), z)


def test_control_flow_carries_complex():
  z = rng_complex((3,))

  def fn(np_, x):
    lax = tinyjax.lax if np_ is tnp else jax.lax
    scanned = lax.scan(lambda c, y: (c * y + 1j, c), np_.asarray(x[0]), np_.asarray(x))
    looped = lax.fori_loop(0, 4, lambda i, c: c * (0.5 + 0.5j), np_.asarray(x))
    chosen = lax.cond(True, lambda c: c * 2, lambda c: c.conj(), np_.asarray(x))
    return scanned, looped, chosen
  check(fn, z, rtol=2e-5, atol=1e-6)


CONSTANT = rng_complex((5,), seed=3)


def _rotated(np_, x):
  """A function closing over a complex constant (a NumPy array and a Python complex)."""
  return np_.abs(np_.exp(1j * x) * CONSTANT + (0.5 - 0.25j)).sum()


@pytest.mark.parametrize("transform", ["plain", "jit", "grad", "jit_of_grad", "grad_of_jit", "vmap_of_grad"])
def test_transforms_with_closed_over_constants(transform):
  x = np.linspace(-1, 1, 5, dtype=np.float32)

  def fn(np_, x):
    tj = tinyjax if np_ is tnp else jax
    f = lambda v: _rotated(np_, v)  # noqa: E731
    return {"plain": f, "jit": tj.jit(f), "grad": tj.grad(f), "jit_of_grad": tj.jit(tj.grad(f)),
            "grad_of_jit": tj.grad(tj.jit(f)),
            "vmap_of_grad": tj.vmap(tj.grad(lambda v: f(v * 2)))}[transform](x if transform != "vmap_of_grad"
                                                                                else np.stack([x, -x]))
  check(fn, x, rtol=2e-5, atol=1e-6)


def test_holomorphic_grad_and_complex_cotangents():
  z = FINITE[:4]
  check(lambda np_, x: (tinyjax if np_ is tnp else jax).grad(lambda v: (v * v * np_.exp(v)).sum(), holomorphic=True)(
    np_.asarray(x)), z, rtol=2e-5, atol=1e-6)
  check(lambda np_, x: (tinyjax if np_ is tnp else jax).vjp(np_.sin, np_.asarray(x))[1](np_.asarray(x) * 1j), z,
        rtol=2e-5, atol=1e-6)


def test_rotary_embedding_as_complex_rotation():
  """Rotary position embedding written with complex numbers (pairs of features as one complex number)."""
  rng = np.random.default_rng(4)
  x = rng.standard_normal((2, 6, 8)).astype(np.float32)  # (batch, positions, features)

  def rope(np_, x):
    x = np_.asarray(x)
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    z = (pairs[..., 0] + 1j * pairs[..., 1]).astype(np.complex64)
    freqs = 1.0 / (10000 ** (np_.arange(0, x.shape[-1], 2, dtype=np.float32) / x.shape[-1]))
    angles = np_.arange(x.shape[1], dtype=np.float32)[:, None] * freqs[None]
    rotated = z * np_.exp(1j * angles)
    return np_.stack([rotated.real, rotated.imag], axis=-1).reshape(x.shape)
  check(rope, x, rtol=2e-5, atol=1e-5)
  check(lambda np_, x: (tinyjax if np_ is tnp else jax).grad(lambda v: (rope(np_, v) ** 2).sum())(x), x, rtol=2e-5,
        atol=1e-5)


def test_transfers():
  """0-d, empty and strided complex arrays travel to the device and back as they are."""
  values = [np.complex64(1 - 2j), np.zeros((0, 3), np.complex64), rng_complex((4, 6))[:, ::2],
            np.array(-0.0 + 1j * np.inf, np.complex64)]
  for value in values:
    with native():
      array = tnp.asarray(value)
      tinyjax.flush()
    assert_like_jax(array + 0, jnp.asarray(value) + 0)
    np.testing.assert_array_equal(np.asarray(array), np.asarray(value))
