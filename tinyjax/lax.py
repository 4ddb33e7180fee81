"""`tinyjax.lax`: every public name of jax.lax, lazily computed on the tinyjax backend."""
import jax.lax as _lax

from tinyjax.core.mirror import mirror as _mirror

__getattr__, __dir__ = _mirror(globals(), _lax)
