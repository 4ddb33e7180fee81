"""Typed PRNG keys (`key<fry>`) between backends: a key array travels as its raw uint32 data (trailing dim 2 for
threefry), the representation tinygrad rules work on, and is wrapped back into a typed key where JAX needs one."""
import jax
import numpy as np


def is_key(dtype) -> bool:
  """A PRNG key's dtype (not every extended dtype is one: JAX's custom element types are too)."""
  return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def key_data(x):
  """The raw data of a typed key array (anything else unchanged)."""
  return jax.random.key_data(x) if is_key(getattr(x, "dtype", np.float32)) else x


def wrap(data, aval):
  """`data` as a value of `aval`: typed keys are rewrapped from their raw data."""
  return jax.random.wrap_key_data(data, impl=aval.dtype._impl) if is_key(aval.dtype) else data


def is_threefry(dtype) -> bool:
  """Whether `dtype` is the threefry key type (`key<fry>`), the one the tinygrad backend computes with."""
  return is_key(dtype) and dtype._impl.name == "threefry2x32"


def physical_aval(aval):
  """The aval of a key array's raw data: the key's own shape appended (uint32[..., 2] for threefry)."""
  return jax.core.ShapedArray(aval.shape + tuple(aval.dtype._impl.key_shape), np.dtype(np.uint32))
