"""The backend interface, the choice of backend and device, and the fallback policy.

A backend has a name and a device, moves host arrays in and out (`put`, `get`), says whether it can run an
equation (`supports`) and compiles a flushed Program into a runner (`compile`). The backend in effect is
chosen at each flush from the settings (tinyjax.config), so a setting changed at run time is honoured.
"""
import abc
import dataclasses
import threading
import warnings
from typing import Callable

import numpy as np

from tinyjax import config
from tinyjax.backends import float64


@dataclasses.dataclass(frozen=True)
class Device:
  """A device as tinyjax names it: the backend that drives it and the device string (`CPU`, `CL`, `cpu:0`)."""
  platform: str
  name: str

  def __str__(self):
    return self.name

  def __repr__(self):
    return f"{self.platform.capitalize()}Device({self.name})"


@dataclasses.dataclass
class Compiled:
  """A program ready to run: `run(input buffers) -> output buffers`, and what one run executes where."""
  run: Callable[[list], list]
  counts: dict  # (backend name, primitive name) -> equations per run
  segments: list  # backend name of each segment, in order
  bytes_crossed: int  # bytes moved between backends per run
  reason: str = ""  # why it runs where it does, when a choice was made (TINYJAX_BACKEND=auto)
  target: "Backend | None" = None  # the backend whose buffers `run` takes and returns, if not the compiling one


class Backend(abc.ABC):
  name: str
  device: Device

  @abc.abstractmethod
  def put(self, host: np.ndarray):
    """A host array as this backend's buffer."""

  @abc.abstractmethod
  def get(self, buffer) -> np.ndarray:
    """A buffer of this backend as a host array."""

  @abc.abstractmethod
  def supports(self, eqn) -> bool:
    """Whether this backend runs the equation natively (rule and dtypes)."""

  @abc.abstractmethod
  def compile(self, program) -> Compiled:
    """A runner for the Program."""

  def supports_dtype(self, dtype) -> bool:
    """Whether the device computes this dtype."""
    return True

  def wait(self, buffer) -> None:
    """Block until the computation of `buffer` is done (backends that run asynchronously override this)."""

  def __repr__(self):
    return f"<{self.name} backend on {self.device}>"


def wrap_compiled(inner: Compiled, run: Callable[[list], list]) -> Compiled:
  """A Compiled that runs `run` (which calls `inner.run`) and reports what `inner` executes: read after each run,
  since a rescue (tinygrad's `_run_or_rescue`) changes it."""
  outer = Compiled(None, inner.counts, inner.segments, inner.bytes_crossed, inner.reason, inner.target)

  def run_and_report(inputs):
    outs = run(inputs)
    outer.counts, outer.segments, outer.bytes_crossed = inner.counts, inner.segments, inner.bytes_crossed
    outer.reason, outer.target = inner.reason, inner.target
    return outs
  outer.run = run_and_report
  return outer


class DeviceNotFoundError(RuntimeError):
  """Raised when the requested device is unknown or unusable here; the message lists the devices that work."""


_backends: dict[tuple[str, str], Backend] = {}
_lock = threading.RLock()  # NB: reentrant: the auto backend makes its tinygrad and XLA backends while made


def current_backend() -> Backend:
  """The backend and device in effect now (TINYJAX_BACKEND / TINYJAX_DEVICE / config.update / default_device)."""
  return backend_for(config.validated("backend"), config.get("device"))


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


def _make(name: str, device: str) -> Backend:
  if name == "xla":
    from tinyjax.backends.xla import XlaBackend
    return XlaBackend(device)
  if name == "auto":
    from tinyjax.backends.auto import AutoBackend
    return AutoBackend(device)
  from tinyjax.backends.tinygrad import TinygradBackend
  return TinygradBackend(device)


def devices(backend: str | None = None) -> list[Device]:
  """The devices of a backend that work on this machine (the backend in effect by default; auto: tinygrad's)."""
  name = backend or config.validated("backend")
  if name == "xla":
    from tinyjax.backends.xla import available_devices
  else:
    from tinyjax.backends.tinygrad import available_devices
  return available_devices()


# --- the fallback policy

class FallbackError(NotImplementedError):
  """An equation has no native rule on the chosen device, and TINYJAX_FALLBACK=error."""


class Float64Error(FallbackError):
  """An equation computes in float64 (jax_enable_x64) on a device without float64, and TINYJAX_F64=error.

  A FallbackError: the equation cannot run natively as asked; the message says how to run it anyway."""


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
    if backend.supports(eqn):
      continue
    dtypes = ", ".join(sorted({str(a.dtype) for a in eqn.in_avals + eqn.out_avals}))
    message = (f"{eqn.name} ({dtypes}) has no native rule on {backend.device!r}; it would run on XLA. "
               f"Called at {source}")
    if policy == "error":
      raise FallbackError(message + " (TINYJAX_FALLBACK=error)")
    if eqn.name not in _warned:
      _warned.add(eqn.name)
      filename, _, line = source.rpartition(":")
      warnings.warn_explicit(message, RuntimeWarning, filename, int(line) if line.isdigit() else 0)
