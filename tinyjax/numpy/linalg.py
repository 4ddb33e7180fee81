"""`tinyjax.numpy.linalg`: jax.numpy.linalg, lazily computed on the tinyjax backend."""
import jax.numpy.linalg as _linalg

from tinyjax.core.mirror import mirror as _mirror

__getattr__, __dir__ = _mirror(globals(), _linalg)
