"""`tinyjax.scipy.stats`: jax.scipy.stats on the tinyjax backend; its distributions (`norm`, `beta`, ...) are
mirrored submodules (`tinyjax.scipy.stats.norm.logpdf`)."""
import jax.scipy.stats as _stats

from tinyjax.core.mirror import mirror as _mirror

__getattr__, __dir__ = _mirror(globals(), _stats)
