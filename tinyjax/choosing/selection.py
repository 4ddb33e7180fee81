"""Which backend runs: the backend and device in effect (chosen at each flush from tinyjax.config, so a setting
changed at run time is honoured), the devices that work here, and the fallback policy applied at each call.

The layers: base (the interface) < xla, tinygrad, auto (the backends) < this module < core's tracing and buffer.
"""
import threading
import warnings

import jax

from tinyjax import config
from tinyjax.ir import float64
from tinyjax.ir.backend import Backend, Device, DeviceNotFoundError, FallbackError, FallbackWarning, Float64Error

_backends: dict[tuple[str, str], Backend] = {}
_lock = threading.RLock()  # NB: reentrant: the auto backend makes its tinygrad and XLA backends while made


def current_backend() -> Backend:
  """The backend and device in effect now (TINYJAX_BACKEND / TINYJAX_DEVICE / config.update / default_device)."""
  return current_choice()[1]


def current_choice() -> tuple[tuple[str, str], Backend]:
  """((backend name, device) as the settings say, the backend): current_backend with its key in the registry."""
  key = (config.validated("backend"), config.get("device"))
  return key, backend_for(*key)


def still_chosen(choice: tuple) -> bool:
  """Whether a choice current_choice made is still the registry's backend for its name and device."""
  return _backends.get(choice[0]) is choice[1]


def backend_for(name: str, device: str) -> Backend:
  """The one backend `name` of `device`: names of the same device ("CLANG", "cpu", "CPU"; "" for the default) share
  it, keyed by the device name the backend resolves them to, so that buffers made under one name serve the others."""
  key = (name, device)
  backend = _backends.get(key)
  if backend is None:
    with _lock:
      backend = _backends.get(key)
      if backend is None:
        made = _make(name, device)
        backend = _backends[key] = _backends.setdefault((name, made.device.name), made)
  return backend


_unsplittable: set[str] = set()  # device sets that did not open (CL lists one device; a WEBGPU adapter refused one)


def backend_over(backend: Backend, mesh) -> Backend:
  """The backend of `backend`'s device kind over the devices of a mesh, tinygrad's instances of the numbers of JAX's
  devices (CPU:0..CPU:3 for a mesh of 4 of JAX's CPU devices), so that arrays placed on it are split over them; or
  `backend` itself: under TINYJAX_SPLIT=0, for XLA (JAX places the arrays of its own runtime), for a mesh of one
  device or of another process's devices, and where the device kind has fewer instances."""
  devices = list(mesh.devices.flat)
  if (backend.name != "tinygrad" or backend.spans_devices or config.validated("split") == "0" or len(devices) < 2
          or any(d.process_index != jax.process_index() for d in devices)):
    return backend
  from tinyjax.backends.tinygrad.machinery.device import instances
  device_set = instances(backend.kind, [d.id for d in devices])
  if device_set in _unsplittable:
    return backend
  try:
    return backend_for("tinygrad", device_set)
  except DeviceNotFoundError:
    _unsplittable.add(device_set)
    return backend


def _make(name: str, device: str) -> Backend:
  if name == "xla":
    from tinyjax.backends.xla import XlaBackend
    return XlaBackend(device)
  if name == "auto":
    from tinyjax.choosing.auto import AutoBackend
    return AutoBackend(backend_for("tinygrad", device), backend_for("xla", ""))
  from tinyjax.backends.tinygrad import TinygradBackend
  return TinygradBackend(device)


def devices(backend: str | None = None) -> list[Device]:
  """The devices of a backend that work on this machine (the backend in effect by default; auto: tinygrad's)."""
  name = backend or config.validated("backend")
  if name == "xla":
    from tinyjax.backends.xla import available_devices
  else:
    from tinyjax.backends.tinygrad.machinery.device import available_devices
  return available_devices()


# --- the fallback policy

_warned: set[str] = set()


def check_fallback(backend: Backend, eqns, source: str) -> None:
  """Apply TINYJAX_F64 and TINYJAX_FALLBACK to equations about to be buffered: raise or warn at the user's call."""
  policy = config.validated("fallback")
  f64_policy = config.validated("f64") if float64.lacks_float64(backend) else None
  if policy == "xla" and f64_policy != "error" or backend.name == "xla":
    return
  for eqn in eqns:
    if f64_policy is not None and float64.uses_float64(eqn):
      if f64_policy == "error":
        raise Float64Error(f"{eqn.name} computes in float64, which {backend.device!r} lacks. Called at {source}. "
                           "Set TINYJAX_F64=downcast to compute it in float32 (arrays stay float64), disable "
                           "jax_enable_x64, or run it on XLA (TINYJAX_BACKEND=xla)")
      eqn = float64.narrow_eqn(eqn) or eqn  # downcast: the float32 equation is what runs
    if (reason := backend.why_not(eqn)) is None:
      continue
    dtypes = ", ".join(sorted({str(a.dtype) for a in eqn.in_avals + eqn.out_avals}))
    message = (f"{eqn.name} ({dtypes}) does not run natively on {backend.device!r} ({reason}); it would run on "
               f"XLA. Called at {source}")
    if policy == "error":
      raise FallbackError(message + " (TINYJAX_FALLBACK=error)")
    if eqn.name not in _warned:
      _warned.add(eqn.name)
      filename, _, line = source.rpartition(":")
      warnings.warn_explicit(message, FallbackWarning, filename, int(line) if line.isdigit() else 0)
