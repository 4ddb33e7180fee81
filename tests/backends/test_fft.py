"""fft on tinygrad (a mixed-radix plan, Bluestein's for large prime factors), against jax.numpy.fft on XLA, natively
only: fft, ifft, rfft, irfft and their 2-d and n-d forms, every length kind (powers of two, small primes, products,
large primes), batched; n= padding and cropping, norm modes, NaN and infinities, constants closed over, tinyjax.jit,
gradients through JAX's own rules, an FFT-based convolution, complex128.

Values: within TOLERANCE of the largest magnitude of JAX's result (two FFTs round differently; JAX's own tests allow
1e-4 relative in float32), shape, dtype and weak type as JAX's.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
from oracle import check

TOLERANCE = {np.float32: 2e-6, np.float64: 1e-13}
# powers of two, small primes (a DFT matrix), products of both, large primes (Bluestein's), one after a radix stage
LENGTHS = [1, 2, 3, 5, 7, 8, 12, 16, 17, 64, 100, 128, 1000, 1024, 67, 134]


def random(shape, seed=0, dtype=np.float32):
  rng = np.random.default_rng(seed)
  if np.issubdtype(dtype, np.complexfloating):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
  return rng.standard_normal(shape).astype(dtype)


def check_fft(fn, *args, precision=np.float32, tol=None):
  """fn(np_, *args) on both; values within tol (TOLERANCE) of the largest magnitude of each of JAX's outputs."""
  expected = jax.tree_util.tree_leaves(fn(jnp, *args))
  scale = max([float(np.abs(np.asarray(e)).max(initial=0, where=np.isfinite(np.asarray(e)))) for e in expected] + [1])
  tol = TOLERANCE[precision] if tol is None else tol
  return check(fn, *args, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("n", LENGTHS)
def test_lengths(n):
  x, z = random((3, n), seed=n), random((3, n), seed=n + 1, dtype=np.complex64)
  check_fft(lambda np_, x, z: (np_.fft.fft(z), np_.fft.ifft(z), np_.fft.rfft(x), np_.fft.irfft(z, n)), x, z)


@pytest.mark.parametrize("name,shape,kwargs", [
  ("fft2", (2, 4, 6), {}), ("ifft2", (4, 5), {}), ("rfft2", (3, 8, 6), {}), ("irfft2", (3, 8, 5), {}),
  ("fftn", (2, 3, 5, 8), {}), ("ifftn", (4, 3, 16), {}), ("rfftn", (2, 6, 4, 7), {}), ("irfftn", (6, 4, 5), {}),
  ("fftn", (4, 6, 3), {"axes": (0, 2)}), ("rfftn", (5, 4, 6), {"axes": (0, 1)}), ("irfftn", (6, 4, 5), {"s": (5, 7)}),
  ("fftn", (3, 4, 5), {"axes": (2, 0)}), ("fft", (4, 6, 3), {"axis": 1}), ("rfft", (5, 8), {"axis": 0}),
  ("irfft", (5, 8), {"axis": 0, "n": 9}),
], ids=lambda v: str(v).replace(" ", ""))
def test_multidimensional(name, shape, kwargs):
  dtype = np.float32 if name.startswith("rfft") else np.complex64
  check_fft(lambda np_, x: getattr(np_.fft, name)(x, **kwargs), random(shape, seed=len(shape), dtype=dtype))


@pytest.mark.parametrize("name,n", [("fft", 12), ("fft", 5), ("ifft", 20), ("rfft", 12), ("rfft", 6), ("irfft", 11),
                                    ("irfft", 4), ("hfft", 9), ("ihfft", 6)])
def test_padding_and_cropping(name, n):
  dtype = np.float32 if name in ("rfft", "ihfft") else np.complex64
  check_fft(lambda np_, x: getattr(np_.fft, name)(x, n=n), random((2, 8), seed=n, dtype=dtype))


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_norm_modes(norm):
  x, z = random((2, 12), seed=5), random((2, 6, 10), seed=6, dtype=np.complex64)
  check_fft(lambda np_, x, z: (np_.fft.fft(z, norm=norm), np_.fft.ifft(z, norm=norm), np_.fft.rfft(x, norm=norm),
                               np_.fft.irfftn(z, norm=norm), np_.fft.fft2(z, norm=norm)), x, z)


@pytest.mark.parametrize("n", [8, 12, 16, 17, 64, 67, 100, 128])
def test_nan_spreads(n):
  """A NaN (in both parts): NaN in both parts of every frequency it reaches, as XLA's. A real NaN (rfft): XLA's plans
  for real signals are other than its complex ones: lengths with a factor 5 (100) leave zero some real parts ours
  make NaN (a NaN times a twiddle's zero part)."""
  z = random((2, n), seed=n, dtype=np.complex64)
  z[0, n // 3] = complex(np.nan, np.nan)
  z[1, -1] = complex(np.nan, np.nan)
  x = z.real.copy()
  x[1, 0] = np.nan
  check_fft(lambda np_, z, x: (np_.fft.fft(z), np_.fft.ifft(z), np_.fft.irfft(z), np_.fft.rfft(x) if n != 100 else 0),
            z, x)


@pytest.mark.parametrize("n", [2, 4, 8, 3, 5, 17, 100])
@pytest.mark.parametrize("value", [complex(np.nan, 0), complex(0, np.nan), np.inf, complex(0, -np.inf)], ids=str)
def test_nonfinite_in_one_part(n, value):
  """NaN or an infinity in one part: which parts of which frequencies are NaN or infinite, as XLA's, where its
  butterflies and ours are alike (rotations by quarter turns exact, no products by a twiddle of 1); other lengths'
  XLA plans (radix 8, 16) order their sums and products otherwise."""
  z = np.tile(np.arange(n, dtype=np.complex64), (n, 1))
  z[np.arange(n), np.arange(n)] = value  # the value at each position in turn
  check_fft(lambda np_, z: (np_.fft.fft(z), np_.fft.ifft(z)), z)


def test_irfft_ignores_the_imaginary_parts_of_zero_and_nyquist():
  z = random((2, 5), seed=7, dtype=np.complex64)
  check_fft(lambda np_, z: (np_.fft.irfft(z), np_.fft.irfft(z, 9), np_.fft.irfft2(z[None].repeat(3, 0))), z)


CONSTANT = random((16,), seed=8, dtype=np.complex64)


def test_closed_over_constants_and_arguments_under_jit():
  def fn(np_, x, z):
    tj = tinyjax if np_ is tnp else jax
    spectrum = tj.jit(lambda x, z: np_.fft.fft(x * CONSTANT + z) * np_.fft.fft(CONSTANT))
    return spectrum(x, z), np_.fft.ifft(spectrum(x, z)), tj.jit(np_.fft.rfftn)(x)
  check_fft(fn, random((3, 16), seed=9), random((16,), seed=10, dtype=np.complex64))


def test_under_jit_replays():
  f = tinyjax.jit(lambda z: tnp.fft.ifft(tnp.fft.fft(z) * 2))
  for seed in range(3):  # NB: the third call replays what TinyJit captured in the second
    z = random((4, 24), seed=seed, dtype=np.complex64)
    check_fft(lambda np_, z: (f if np_ is tnp else jax.jit(lambda z: jnp.fft.ifft(jnp.fft.fft(z) * 2)))(z), z)


def test_empty_batch():
  check_fft(lambda np_, x: (np_.fft.fft(x.astype(np.complex64)), np_.fft.rfft(x)), np.zeros((0, 8), np.float32))


def test_convolution_by_fft():
  """irfft(rfft(a) * rfft(b)) with both padded to the full length: jnp.convolve's result."""
  a, b = random((50,), seed=11), random((13,), seed=12)

  def conv(np_, a, b):
    n = a.shape[-1] + b.shape[-1] - 1
    return np_.fft.irfft(np_.fft.rfft(a, n) * np_.fft.rfft(b, n), n)
  check_fft(conv, a, b, tol=1e-5)
  np.testing.assert_allclose(np.asarray(conv(tnp, a, b)), np.asarray(jnp.convolve(a, b)), rtol=1e-5, atol=1e-5)


def _loss(np_, x):
  spectrum = np_.fft.rfft(x)
  weights = np_.arange(spectrum.shape[-1], dtype=np.float32)
  smoothed = np_.fft.irfft(spectrum * np_.exp(-weights / 4), x.shape[-1])
  return (np_.abs(spectrum) ** 2 * weights).sum() + (smoothed * x).sum() + np_.abs(np_.fft.fft2(x)).sum()


def test_gradients():
  """d/dx of a loss with rfft, irfft and fft2: JAX's transpose rules of fft are ffts."""
  grad = lambda np_: (jax.grad if np_ is jnp else tinyjax.grad)(functools.partial(_loss, np_))  # noqa: E731
  check_fft(lambda np_, x: grad(np_)(x), random((4, 12), seed=13), tol=2e-5)


def test_vjp_of_complex_fft():
  z, cotangent = random((3, 10), seed=14, dtype=np.complex64), random((3, 10), seed=15, dtype=np.complex64)
  vjp = lambda np_: jax.vjp if np_ is jnp else tinyjax.vjp  # noqa: E731
  check_fft(lambda np_, z, c: vjp(np_)(np_.fft.fftn, z)[1](c), z, cotangent)


@pytest.mark.float64
@pytest.mark.parametrize("n", [8, 12, 67])
def test_complex128(x64, n):
  x, z = random((2, n), seed=n, dtype=np.float64), random((2, n), seed=n + 1, dtype=np.complex128)
  check_fft(lambda np_, x, z: (np_.fft.fft(z), np_.fft.ifft(z), np_.fft.rfft(x), np_.fft.irfft(z, n),
                               np_.fft.fft2(z)), x, z, precision=np.float64)
