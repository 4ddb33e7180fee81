"""tinyjax: JAX's API on tinygrad's devices, with XLA for what tinygrad cannot run yet."""
from tinyjax import config
from tinyjax.backends.base import Device, DeviceNotFoundError, FallbackError, devices
from tinyjax.config import default_device
from tinyjax.core.array import Array
from tinyjax.core.buffer import flush
from tinyjax.report import explain, report
from tinyjax.transfer import device_get, device_put

__all__ = ["Array", "Device", "DeviceNotFoundError", "FallbackError", "config", "default_device", "devices",
           "device_get", "device_put", "explain", "flush", "report"]
