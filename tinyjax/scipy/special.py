"""`tinyjax.scipy.special`: jax.scipy.special on the tinyjax backend."""
import jax.scipy.special as _special

from tinyjax.core.mirror import mirror as _mirror

__getattr__, __dir__ = _mirror(globals(), _special)
