"""tinyjax: JAX's API on tinygrad's devices, with XLA for what tinygrad cannot run yet.

Every public name of `jax` is here (tinyjax.identity): tinyjax's own where it computes differently (the
transformations, devices, device_put, Array, config) and JAX's own object otherwise. `tinyjax.numpy`,
`tinyjax.lax`, `tinyjax.random`, `tinyjax.nn`, ... are made from JAX's modules on first use.
"""
import jax as _jax

from tinyjax import config
from tinyjax import identity as _identity
from tinyjax.choosing.check import CheckError
from tinyjax.choosing.selection import devices
from tinyjax.config import default_device
from tinyjax.core.array import Array
from tinyjax.core.pending import flush
from tinyjax.core.mirror import mirror as _mirror
from tinyjax.core.report import report
from tinyjax.decorator import tiny
from tinyjax.ir.backend import Device, DeviceNotFoundError, FallbackError, FallbackWarning, Float64Error
from tinyjax.patching import patch
from tinyjax.profiling import profile
from tinyjax.standalone import ExportError, export
from tinyjax.transfer import device_get, device_put
from tinyjax.transforms import (checkpoint, custom_jvp, custom_vjp, eval_shape, explain, grad, hessian, jacfwd,
                                jacobian, jacrev, jit, jvp, linearize, make_jaxpr, remat, value_and_grad, vjp, vmap)

# tinyjax's own names: they differ from JAX's where they are JAX's (tests/test_identity.py says why)
OWN = ["Array", "CheckError", "Device", "DeviceNotFoundError", "ExportError", "FallbackError", "FallbackWarning",
       "Float64Error", "config", "default_device", "devices", "device_get", "device_put", "explain", "export",
       "flush", "profile", "report", "checkpoint", "custom_jvp", "custom_vjp", "eval_shape", "grad", "hessian",
       "jacfwd", "jacobian", "jacrev", "jit", "jvp", "linearize", "make_jaxpr", "patch", "remat", "tiny",
       "value_and_grad", "vjp", "vmap"]
__all__ = sorted(set(OWN) | {name for name in dir(_jax) if not name.startswith("_")})

# every other public name of jax: its submodules as tinyjax modules, the rest JAX's own objects
__getattr__, __dir__ = _mirror(globals(), _jax, computing=False)
