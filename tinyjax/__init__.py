"""tinyjax: JAX's API on tinygrad's devices, with XLA for what tinygrad cannot run yet."""
from tinyjax import config
from tinyjax.backends.base import Device, DeviceNotFoundError, FallbackError, Float64Error, devices
from tinyjax.check import CheckError
from tinyjax.config import default_device
from tinyjax.core import interop  # noqa: F401  (JAX accepts tinyjax Arrays)
from tinyjax.core.array import Array
from tinyjax.core.buffer import flush
from tinyjax.decorator import tiny
from tinyjax.report import explain, report
from tinyjax.standalone import ExportError, export
from tinyjax.transfer import device_get, device_put
from tinyjax.transforms import (checkpoint, custom_jvp, custom_vjp, eval_shape, grad, hessian, jacfwd, jacobian,
                                jacrev, jit, jvp, linearize, make_jaxpr, remat, value_and_grad, vjp, vmap)
from jax import tree_util  # noqa: E402  (Arrays are pytree leaves; the tree utilities are JAX's own)

__all__ = ["Array", "CheckError", "Device", "DeviceNotFoundError", "ExportError", "FallbackError", "Float64Error", "config",
           "default_device", "devices", "device_get", "device_put", "explain", "flush", "report", "checkpoint", "custom_jvp", "custom_vjp",
           "eval_shape", "export", "grad", "hessian", "jacfwd", "jacobian", "jacrev", "jit", "jvp", "linearize", "make_jaxpr",
           "remat", "tiny", "tree_util", "value_and_grad", "vjp", "vmap"]
