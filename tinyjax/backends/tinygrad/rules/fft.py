"""fft (FFT, IFFT, RFFT, IRFFT over the trailing 1 to 3 dimensions) on tinygrad, for every length: a mixed-radix
Cooley-Tukey plan of whole-tensor stages, each one kernel, with constants computed on the host in float64.

A transform of length n along the last axis splits n = r * m (index j = m j1 + j2, frequency k = k1 + r k2): a
radix-r butterfly over j1 (radix 4 and 2 as sums, exact; a small prime p as a product with its p x p DFT matrix),
the twiddles W_n^(j2 k1), then the length-m transform of each k1 row, down to m = 1; the stages leave the frequency's
digits in reverse order, and one permutation at the end puts them in place. A factor of n with no prime below
DIRECT (a large prime) is Bluestein's chirp-z transform: a circular convolution by power-of-two transforms, with the
chirp's transform computed on the host.

RFFT is the complex transform of the real operand, cut to n // 2 + 1; IRFFT extends its operand's last axis to the
full Hermitian spectrum (X[n - k] = conj X[k]) without the imaginary parts of the zero and Nyquist frequencies (as
XLA's, which never reads them) and keeps the real part. The inverses scale by 1 / prod(fft_lengths), as XLA's.
"""
import functools
import math

import numpy as np
from tinygrad import Tensor
from tinygrad.dtype import _to_np_dtype

from tinyjax.backends.tinygrad.machinery import device
from tinyjax.backends.tinygrad.numerics.carried import is_complex
from tinyjax.backends.tinygrad.rules.complexmath import paired, parts
from tinyjax.backends.tinygrad.table import register_complex

DIRECT = 64  # primes up to this are radices (a DFT matrix product); a larger prime factor is Bluestein's
FORWARD, INVERSE = -1, 1  # the sign of the exponent


def _factors(n: int) -> list[int]:
  """The radices of a length-n transform, first to last (the last may be a Bluestein length)."""
  radices = []
  while n % 4 == 0:
    radices.append(4)
    n //= 4
  if n % 2 == 0:
    radices.append(2)
    n //= 2
  p = 3
  while n > 1 and p <= DIRECT:
    while n % p == 0:
      radices.append(p)
      n //= p
    p += 2
  return radices + ([n] if n > 1 else [])


def _constant(*key):
  """NB: a constant made while a capture (TinyJit's, an export's) is installed is not kept: its copy to the device
  is captured, not run, and its buffer stays empty outside that capture."""
  from tinygrad.engine.realize import capturing
  return _computed.__wrapped__(*key) if capturing else _computed(*key)


@functools.lru_cache(maxsize=256)
def _computed(kind: str, n: int, m: int, sign: int, dtype: np.dtype, tg_device: str):
  """A realized constant of the plan, as (real, imaginary) Tensors of the dtype: `twiddles` W_(n m)^(j2 k1) [n, m]
  (a radix-n stage), `matrix` the length-n DFT matrix less its first row and column [n - 1, n - 1], `chirp`
  Bluestein's w_j [n], `kernel` the transform of its conj w_(k - j) on a circle of m, divided by m [m]."""
  if kind == "twiddles":
    exponent = np.arange(n)[:, None] * np.arange(m)[None, :] % (n * m) / (n * m)
  elif kind == "matrix":
    exponent = np.arange(1, n)[:, None] * np.arange(1, n)[None, :] % n / n
  else:  # w_j = e^(sign pi i j^2 / n): j^2 mod 2n keeps the angle exact
    exponent = np.arange(n, dtype=np.int64) ** 2 % (2 * n) / (2 * n)
  value = np.exp(sign * 2j * np.pi * exponent)
  if kind == "kernel":  # conj w at offsets 0..n-1 and -(n-1)..-1 of the circle
    circle = np.zeros(m, np.complex128)
    circle[:n] = value.conj()
    circle[m - n + 1:] = circle[1:n][::-1]
    value = np.fft.fft(circle) / m
  return _realized(value, dtype, tg_device)


def _realized(value: np.ndarray, dtype, tg_device: str):
  """The parts of `value` as realized Tensors of the dtype; those within rounding of 0 or 1 in magnitude exactly so
  (the quarter turns: 1, -1, i, -i)."""
  def exact(part):
    return np.where(np.abs(part) < 1e-12, 0.0, np.where(np.abs(np.abs(part) - 1) < 1e-12, np.sign(part), part))
  return tuple(device.copied_in(np.ascontiguousarray(exact(part).astype(dtype)), tg_device).realize()
               for part in (value.real, value.imag))


def _cmul(re, im, wr, wi):
  """(re + i im)(wr + i wi); by a quarter turn (wr or wi zero) exactly, as XLA's butterflies rotate: no products by
  zero, so that a NaN or an infinity in one part stays in one part."""
  re_, im_ = re * wr - im * wi, re * wi + im * wr
  real_w, imaginary_w = wi.eq(0), wr.eq(0)
  return (real_w.where(re * wr, imaginary_w.where(-(im * wi), re_)),
          real_w.where(im * wr, imaginary_w.where(re * wi, im_)))


def _stage(z, r: int, sign: int, tg_device: str):
  """One radix-r stage on the last axis (length r * m) of z = (re, im): [..., r * m] -> [..., r, m]."""
  re, im = z
  m = re.shape[-1] // r
  re, im = re.reshape(*re.shape[:-1], r, m), im.reshape(*im.shape[:-1], r, m)
  dtype = _to_np_dtype(re.dtype)
  row = [(re[..., j, :], im[..., j, :]) for j in range(r)] if r <= 4 else None
  if r == 2:
    (ar, ai), (br, bi) = row
    out = [(ar + br, ai + bi), (ar - br, ai - bi)]
  elif r == 4:
    (ar, ai), (br, bi), (cr, ci), (dr, di) = row
    t0, t1 = (ar + cr, ai + ci), (ar - cr, ai - ci)
    t2 = (br + dr, bi + di)
    # (b - d) times -i (forward) or i (inverse)
    t3 = (bi - di, dr - br) if sign == FORWARD else (di - bi, br - dr)
    out = [(t0[0] + t2[0], t0[1] + t2[1]), (t1[0] + t3[0], t1[1] + t3[1]),
           (t0[0] - t2[0], t0[1] - t2[1]), (t1[0] - t3[0], t1[1] - t3[1])]
  else:  # y_0 = sum_j x_j, y_k = x_0 + sum_(j > 0) F_kj x_j: no products by the matrix's exact 1 and 0
    fr, fi = _constant("matrix", r, 0, sign, dtype, tg_device)
    rest_re, rest_im = re[..., 1:, :], im[..., 1:, :]
    yr, yi = fr.matmul(rest_re) - fi.matmul(rest_im), fr.matmul(rest_im) + fi.matmul(rest_re)
    out = [(re.sum(-2), im.sum(-2))] + [(re[..., 0, :] + yr[..., k, :], im[..., 0, :] + yi[..., k, :])
                                        for k in range(r - 1)]
  if m > 1:  # the twiddles of row k1 > 0 (row 0's are 1: no product, as XLA's)
    wr, wi = _constant("twiddles", r, m, sign, dtype, tg_device)
    out = [out[0]] + [_cmul(*out[k], wr[k], wi[k]) for k in range(1, r)]
  return Tensor.stack(*[o[0] for o in out], dim=-2), Tensor.stack(*[o[1] for o in out], dim=-2)


def _realize(z):
  """One kernel per stage: the pairs made contiguous."""
  return parts(paired(*z).contiguous())


def transform(z, sign: int, tg_device: str):
  """The unscaled DFT sum_j z_j e^(sign 2 pi i j k / n) along the last axis of z = (re, im), each [..., n]."""
  n = z[0].shape[-1]
  if n <= 1:
    return z
  batch = z[0].shape[:-1]
  radices = _factors(n)
  z = _realize(z)  # NB: the operand's own computation is not fused into the first stage's (it reads it r times)
  for i, r in enumerate(radices):
    z = tuple(x.reshape(*batch, *radices[:i], -1) for x in z)
    if r > DIRECT:  # the rest: Bluestein's, each row
      z = _bluestein(z, sign, tg_device)
      z = tuple(x.reshape(*x.shape, 1) for x in z)
    else:
      z = _realize(_stage(z, r, sign, tg_device))
  # digit i of the frequency is on axis len(batch) + i, the first the fastest: reversed, then flattened
  order = (*range(len(batch)), *reversed(range(len(batch), len(batch) + len(radices))))
  return tuple(x.reshape(*batch, *radices).permute(order).reshape(*batch, n) for x in z)


def _bluestein(z, sign: int, tg_device: str):
  """The length-n DFT as w_k sum_j (z_j w_j) conj w_(k - j), w_j = e^(sign pi i j^2 / n): a circular convolution of
  power-of-two length m >= 2n - 1, by transforms."""
  re, im = z
  n = re.shape[-1]
  m = 1 << (2 * n - 2).bit_length()
  dtype = _to_np_dtype(re.dtype)
  wr, wi = _constant("chirp", n, 0, sign, dtype, tg_device)
  br, bi = _constant("kernel", n, m, sign, dtype, tg_device)
  ar, ai = _cmul(re, im, wr, wi)
  padding = ((0, 0),) * (re.ndim - 1) + ((0, m - n),)
  a = _realize((ar.pad(padding), ai.pad(padding)))
  a = _realize(_cmul(*transform(a, FORWARD, tg_device), br, bi))
  cr, ci = transform(a, INVERSE, tg_device)
  return _realize(_cmul(cr[..., :n], ci[..., :n], wr, wi))


def _along(z, axis: int, fn):
  """fn applied along `axis` of z = (re, im): that axis moved last and back."""
  last = z[0].ndim - 1
  if axis == last:
    return fn(z)
  order = [d for d in range(last + 1) if d != axis] + [axis]
  back = list(np.argsort(order))
  return tuple(x.permute(back) for x in fn(tuple(x.permute(order) for x in z)))


@register_complex("fft")
def _fft(ctx, x, *, fft_type, fft_lengths):
  (in_aval,), out_aval = ctx.in_avals, ctx.out_aval
  kind, fft_lengths = int(fft_type), tuple(map(int, fft_lengths))  # kind: FFT, IFFT, RFFT, IRFFT
  if 0 in in_aval.shape or 0 in out_aval.shape:
    zeros = Tensor.zeros(*out_aval.shape, dtype=x.dtype, device=x.device)
    return paired(zeros, zeros) if is_complex(out_aval.dtype) else zeros
  z = parts(x) if is_complex(in_aval.dtype) else (x, x.zeros_like())
  ndim = len(in_aval.shape)
  *leading, last = range(ndim - len(fft_lengths), ndim)
  each = functools.partial(transform, sign=INVERSE if kind in (1, 3) else FORWARD, tg_device=ctx.device)
  if kind == 2:  # RFFT: the last axis first, cut to its n // 2 + 1 frequencies; then the others
    z = _real_spectrum(_along(z, last, each), fft_lengths[-1])
    for axis in leading:
      z = _along(z, axis, each)
  elif kind == 3:  # IRFFT: the others first; then the last, as the real signal of its Hermitian half
    for axis in leading:
      z = _along(z, axis, each)
    z = each(_hermitian(z, fft_lengths[-1]))
  else:
    for axis in (*leading, last):
      z = _along(z, axis, each)
  re, im = z
  if kind in (1, 3):
    scale = 1.0 / math.prod(fft_lengths)
    re, im = re * scale, im * scale
  return re if kind == 3 else paired(re, im)


def _real_spectrum(z, n: int):
  """The first n // 2 + 1 frequencies of a real signal's spectrum (the last axis), the imaginary parts of X[0] and (n
  even) X[n / 2] exactly zero, as XLA's, which never computes them."""
  re, im = (p[..., :n // 2 + 1] for p in z)
  zero = Tensor.zeros_like(im[..., :1])
  return re, zero.cat(*([im[..., 1:(n + 1) // 2]] if n > 2 else []), *([zero] if n % 2 == 0 and n > 1 else []),
                      dim=-1)


def _hermitian(z, n: int):
  """The full length-n spectrum of a real signal from its first n // 2 + 1 frequencies (the last axis): X[n - k] =
  conj X[k], and the imaginary parts of X[0] and (n even) X[n / 2] zero."""
  re, im = _real_spectrum(z, n)
  if n < 3:
    return re, im
  mirrored = slice(1, (n - 1) // 2 + 1)
  return re.cat(re[..., mirrored].flip(-1), dim=-1), im.cat(-im[..., mirrored].flip(-1), dim=-1)
