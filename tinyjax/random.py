"""`tinyjax.random`: jax.random on the tinyjax backend. Typed keys (`key<fry>`) and raw uint32 keys both work;
the bits are JAX's own (threefry2x32), never tinygrad's RNG."""
import jax.random as _random

from tinyjax.core.mirror import mirror as _mirror

# Helpers that take or return no arrays.
PASSTHROUGH = frozenset({"key_impl", "default_prng_impl"})

__getattr__, __dir__ = _mirror(globals(), _random, PASSTHROUGH)
