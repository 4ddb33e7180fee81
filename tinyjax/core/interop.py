"""Let JAX's own functions and transformations accept tinyjax Arrays (`jax.jit(f)(x)`, `jnp.sin(x)`, flax's
`model.apply(params, x)`): JAX sees an Array's aval, and converts it to a jax.Array where it needs the data.

NB: jax.extend has no public hook for this; these two registrations use jax._src, pinned to jax 0.10.
JAX no longer accepts `__jax_array__` objects in abstractification, so without them JAX raises ValueError.
"""
from jax._src import core as _core
from jax._src import dtypes as _dtypes

from tinyjax.core.array import Array
from tinyjax.core.tracing import to_jax

_core.pytype_aval_mappings[Array] = lambda x: x.aval
_dtypes.register_canonicalize_value_handler(Array, to_jax)
