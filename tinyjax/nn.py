"""`tinyjax.nn`: jax.nn (activations, softmax, one_hot, initializers, ...) on the tinyjax backend."""
import jax.nn as _nn

from tinyjax.core.mirror import mirror as _mirror

__getattr__, __dir__ = _mirror(globals(), _nn, passthrough=frozenset({"initializers"}))
