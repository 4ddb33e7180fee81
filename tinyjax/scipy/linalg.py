"""`tinyjax.scipy.linalg`: jax.scipy.linalg on the tinyjax backend."""
import jax.scipy.linalg as _linalg

from tinyjax.core.mirror import mirror as _mirror

__getattr__, __dir__ = _mirror(globals(), _linalg)
