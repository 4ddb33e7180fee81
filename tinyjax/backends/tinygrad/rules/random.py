"""Random bits: random_seed, random_bits, random_split, random_fold_in, random_wrap, random_unwrap, random_clone
and threefry2x32, bit-identical to JAX's threefry2x32 PRNG. (Layout primitives on typed keys: carried.py.)

A typed threefry key array (`key<fry>[*K]`) is, on tinygrad, its raw data: uint32[*K, 2] (tinyjax.ir.keys).
The hashes follow JAX's partitionable scheme (jax_threefry_partitionable, on by default): random_bits and
random_split hash the 64-bit iota of the output shape, split into two uint32 counters.
"""
import math

from tinygrad import Tensor, dtypes

from tinyjax.backends.tinygrad.table import register, tg_dtype

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA  # the key schedule's third word is k1 ^ k2 ^ this


def _rotate_left(x: Tensor, bits: int) -> Tensor:
  return (x << bits) | (x >> (32 - bits))


def _threefry(k1: Tensor, k2: Tensor, x1: Tensor, x2: Tensor) -> tuple[Tensor, Tensor]:
  """Threefry-2x32 with 20 rounds on uint32 Tensors (broadcast together): the two hashed words."""
  schedule = (k1, k2, k1 ^ k2 ^ _PARITY)
  x1, x2 = x1 + schedule[0], x2 + schedule[1]
  for group in range(5):
    for rotation in _ROTATIONS[group % 2]:
      x1 = x1 + x2
      x2 = x1 ^ _rotate_left(x2, rotation)
    x1 = x1 + schedule[(group + 1) % 3]
    x2 = x2 + schedule[(group + 2) % 3] + (group + 1)
  return x1, x2


def _key_words(data: Tensor, n_trailing: int = 0) -> tuple[Tensor, Tensor]:
  """The two words of raw keys uint32[*K, 2], each shaped [*K] and `n_trailing` ones, to broadcast over samples."""
  shape = data.shape[:-1] + (1,) * n_trailing
  return data[..., 0].reshape(shape), data[..., 1].reshape(shape)


def _hash_iota(data: Tensor, shape: tuple) -> tuple[Tensor, Tensor]:
  """Each key hashed with the counters 0, 1, ... laid out in `shape`: two uint32[*K, *shape]."""
  # NB: JAX counts in 64 bits (high word, low word); the high word is 0 below 2**32 elements
  assert math.prod(shape) < 2 ** 32, "random bits of more than 2**32 elements per key"
  low = Tensor.arange(math.prod(shape), dtype=dtypes.uint32).reshape(shape)
  k1, k2 = _key_words(data, len(shape))
  return _threefry(k1, k2, low.const_like(0), low)


@register("threefry2x32")
def _threefry2x32(ctx, k1, k2, x1, x2):
  return list(_threefry(k1, k2, x1, x2))


@register("random_seed", carried=True)
def _random_seed(ctx, seeds, *, impl):
  # JAX's threefry_seed: the seed's high 32 bits (0 unless it has 64), then its low 32 bits (two's complement)
  if seeds.dtype.itemsize == 8:
    high = (seeds.bitcast(dtypes.uint64) >> 32).cast(dtypes.uint32)
  else:
    high = seeds.const_like(0, dtypes.uint32)
  return high.stack(seeds.cast(dtypes.uint32), dim=-1)


@register("random_bits", carried=True)
def _random_bits(ctx, keys, *, bit_width, shape):
  bits1, bits2 = _hash_iota(keys, tuple(shape))
  out = tg_dtype(ctx.out_aval.dtype)
  if bit_width == 64:
    return (bits1.cast(out) << 32) | bits2.cast(out)
  return (bits1 ^ bits2).cast(out)  # 8 and 16 bits: the low bits, as JAX's wrapping convert_element_type


@register("random_split", carried=True)
def _random_split(ctx, keys, *, shape):
  return Tensor.stack(*_hash_iota(keys, tuple(shape)), dim=-1)


@register("random_fold_in", carried=True)
def _random_fold_in(ctx, keys, msgs):
  # JAX's threefry_fold_in hashes the counter pair (0, msg) with each key; msgs wrap to uint32
  k1, k2 = _key_words(keys)
  low = msgs.cast(dtypes.uint32)
  return Tensor.stack(*_threefry(k1, k2, low.const_like(0), low), dim=-1)


@register("random_wrap", carried=True)
def _random_wrap(ctx, data, *, impl):
  return data  # the raw data is the representation of typed keys here


@register("random_unwrap", "random_clone", carried=True)
def _random_unwrap(ctx, keys):
  return keys
