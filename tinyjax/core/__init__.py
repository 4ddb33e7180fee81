"""tinyjax's core (the Array, the pending buffer, tracing, the mirror), and, as `tinyjax.core.<name>`, every public
name of `jax.core` as JAX's own object (tinyjax is JAX to code that reads `jax.core`)."""
import jax.core as _jax_core


def __getattr__(name):
  if name.startswith("__"):
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  try:
    return getattr(_jax_core, name)
  except AttributeError:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__():
  return sorted(set(dir(_jax_core)) | set(globals()))
