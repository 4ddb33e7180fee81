"""The backend interface: what every backend implements, and the errors of the fallback policy.

A backend has a name and a device, moves host arrays in and out (`put`, `get`), says whether it can run an
equation (`why_not`, `supports`) and compiles a flushed Program into a Compiled, which runs it and says what each run
executed where (`compile`). Which backend is in effect, and the fallback policy, are in tinyjax.choosing.selection
(above the concrete backends, which import this module).
"""
import abc
import dataclasses
from typing import Mapping

import numpy as np



@dataclasses.dataclass(frozen=True)
class Device:
  """A device as tinyjax names it: the backend that drives it and the device string (`CPU`, `CL`, `cpu:0`)."""
  platform: str
  name: str

  def __str__(self):
    return self.name

  def __repr__(self):
    return f"{self.platform.capitalize()}Device({self.name})"


@dataclasses.dataclass(frozen=True)
class Placement:
  """What one run of a compiled program executes where."""
  counts: Mapping  # (backend name, primitive name) -> equations per run
  segments: tuple  # backend name of each segment, in order
  bytes_crossed: int  # bytes moved between backends per run
  reason: str = ""  # why it runs where it does, when a choice was made (TINYJAX_BACKEND=auto)


class Compiled(abc.ABC):
  """A program ready to run. `run(input buffers) -> (output buffers, placement)`: the placement says what that run
  executed where (fixed when compiled, except where a run decides it: tinygrad's rescue of a kernel it cannot
  compile, auto's choice of a backend at its first run). `target`: the backend whose buffers it takes and makes
  (at its next run), where that is not the backend that compiled it (auto's)."""
  target: "Backend | None" = None

  @abc.abstractmethod
  def run(self, inputs: list) -> tuple[list, Placement]:
    """The outputs computed from `inputs`, and what this run executed where."""


class Backend(abc.ABC):
  name: str
  device: Device
  # Whether a flush that costs much is cut into programs of bounded cost for this backend (core.pending._cut): the
  # time to build one program grows faster than its size. NB: not for XLA, which compiles a long program in time about
  # proportional to it, and to which each cut adds a dispatch.
  cuts_long_flushes = False
  # The kind of device (tinygrad's CPU, CL, ...; None for a backend that has no such kinds), and whether this backend
  # runs over a set of devices of that kind (a mesh's), its buffers split over them: core.pending runs a program where
  # an input of it lives split, when that is a set of the kind the flush would run on.
  kind: str | None = None
  spans_devices = False

  @abc.abstractmethod
  def put(self, host: np.ndarray):
    """A host array as this backend's buffer (a backend that spans devices also takes a NamedSharding: how to split
    it over them)."""

  @abc.abstractmethod
  def get(self, buffer) -> np.ndarray:
    """A buffer of this backend as a host array."""

  @abc.abstractmethod
  def why_not(self, eqn) -> str | None:
    """Why this backend does not run the equation natively (no rule, a dtype its device lacks, ...); None if it
    does."""

  def supports(self, eqn) -> bool:
    return self.why_not(eqn) is None

  @abc.abstractmethod
  def compile(self, program) -> Compiled:
    """A runner for the Program."""

  def chain(self, steps: list, n_inputs: int, outputs: tuple, released: list):
    """A flush cut into programs (core.pending.Sequence: `steps` of (compiled, where its inputs are, its output
    avals)) as one runner, `run(input buffers) -> output buffers or None`, where the backend runs them together
    faster than one by one (each program then executing where its last run did); None where it does not (yet)."""
    return None

  def is_split(self, buffer) -> bool:
    """Whether a buffer of a backend that spans devices is split over them (not a copy on each)."""
    return False

  def supports_dtype(self, dtype) -> bool:
    """Whether the device computes this dtype."""
    return True

  def wait(self, buffer) -> None:
    """Block until the computation of `buffer` is done (backends that run asynchronously override this)."""

  def address(self, buffer) -> int:
    """The device address of `buffer`'s memory (jax.Array.unsafe_buffer_pointer)."""
    raise NotImplementedError(f"{self!r} does not give the address of its buffers")

  def __repr__(self):
    return f"<{self.name} backend on {self.device}>"


class DeviceNotFoundError(RuntimeError):
  """Raised when the requested device is unknown or unusable here; the message lists the devices that work."""


class FallbackWarning(RuntimeWarning):
  """tinyjax's warning that work meant for tinygrad runs on XLA: an equation without a native rule under
  TINYJAX_FALLBACK=warn, or a program whose kernel tinygrad could not compile."""


class FallbackError(NotImplementedError):
  """An equation has no native rule on the chosen device, and TINYJAX_FALLBACK=error."""


class Float64Error(FallbackError):
  """An equation computes in float64 (jax_enable_x64) on a device without float64, and TINYJAX_F64=error.

  A FallbackError: the equation cannot run natively as asked; the message says how to run it anyway."""
