"""`import tinyjax.numpy as jnp`: every public name of jax.numpy, lazily computed on the tinyjax backend.

Functions are JAX's own, traced and buffered (see tinyjax.core.tracing); dtypes, constants and helpers that
return no array are jax.numpy's own objects.
"""
import jax.numpy as _jnp

from tinyjax.core.array import Array as _Array
from tinyjax.core.mirror import mirror as _mirror
from tinyjax.numpy import fft, linalg  # noqa: F401

# Helpers of jax.numpy that take or return no arrays (or read only an array's shape and dtype).
PASSTHROUGH = frozenset({
  "shape", "ndim", "size", "result_type", "promote_types", "issubdtype", "isdtype", "can_cast", "iscomplexobj",
  "isrealobj", "isscalar", "iterable", "load", "save", "savez", "get_printoptions", "printoptions",
  "set_printoptions", "array_repr", "array_str", "broadcast_shapes", "dtype", "finfo", "iinfo", "frompyfunc",
  "vectorize", "s_", "index_exp", "ndarray", "einsum_path",
})

__getattr__, __dir__ = _mirror(globals(), _jnp, PASSTHROUGH, overrides={"ndarray": _Array})
