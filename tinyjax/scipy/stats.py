"""`tinyjax.scipy.stats`: jax.scipy.stats on the tinyjax backend; its distributions are submodules
(`tinyjax.scipy.stats.norm.logpdf`), mirrored the same way on first use."""
import types as _types

import jax.scipy.stats as _stats

from tinyjax.core.mirror import mirror as _mirror

_getattr, __dir__ = _mirror(globals(), _stats)


def __getattr__(name):
  value = _getattr(name)
  if isinstance(value, _types.ModuleType):  # a distribution: mirror its functions too
    namespace = {"__name__": f"{__name__}.{name}"}
    module = _types.ModuleType(namespace["__name__"])
    module.__getattr__, module.__dir__ = _mirror(module.__dict__, value)
    globals()[name] = module
    return module
  return value
