"""`tinyjax.numpy.fft`: jax.numpy.fft, lazily computed on the tinyjax backend."""
import jax.numpy.fft as _fft

from tinyjax.core.mirror import mirror as _mirror

__getattr__, __dir__ = _mirror(globals(), _fft)
