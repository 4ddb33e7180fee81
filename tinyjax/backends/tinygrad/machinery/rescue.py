"""A safety net for tinygrad's code generation: a program with a kernel tinygrad fails to compile (e.g. clang
rejecting a generated kernel) runs on XLA from then on, and says so; under TINYJAX_FALLBACK=error it raises.

NB: the result is still JAX's, and the report counts the program's equations as XLA's.
"""
import collections
import subprocess
import warnings

import numpy as np

from tinyjax import config
from tinyjax.backends import xla
from tinyjax.backends.tinygrad.machinery.amendments import kernel_context
from tinyjax.backends.tinygrad.machinery.plan import Segment, crossing_bytes
from tinyjax.backends.tinygrad.machinery.replay import Replayed
from tinyjax.ir import profile
from tinyjax.ir.backend import FallbackError, FallbackWarning, Placement


class KernelCompileError(FallbackError):
  """tinygrad failed to compile a kernel of a flushed program, and TINYJAX_FALLBACK=error (otherwise XLA runs it)."""


def _compile_failures() -> tuple:
  from tinygrad.device import CompileError
  return (CompileError, subprocess.CalledProcessError)


_COMPILE_FAILURES = _compile_failures()
# the RuntimeErrors by which tinygrad's code generation gives up on a kernel (seen in JAX's own numpy tests: a median
# and a masked reduction failed its UOp verification, intersect1d and setxor1d looped in its graph rewrite)
_CODEGEN_FAILURES = ("UOp verification failed", "infinite loop in graph_rewrite")


class Rescuable:
  """Runs `runner` under the backend's kernel context, or, once tinygrad failed to compile a kernel of the
  program, the program on XLA. `placement` is what a run executes where now."""

  def __init__(self, backend, runner, program, placement: Placement):
    self.backend, self.runner, self.program, self.placement = backend, runner, program, placement
    self.on_xla = None  # the program compiled by XLA, once rescued
    self.in_recorded_run = False  # this run is being recorded in a profile (`_recorded_run`)

  def __call__(self, inputs):
    if profile.active is not None and not self.in_recorded_run:
      return self._recorded_run(profile.active, inputs)
    runner = self.runner
    if self.on_xla is None and isinstance(runner, Replayed) and runner.kernels is not None:
      # NB: a replay by the launcher makes no kernel: no kernel context (entering tinygrad's parses its DEV setting).
      # One whose kernels all run in this thread is done when it returns: the backend stays idle (a wait for its
      # outputs has nothing to wait for)
      if not runner.synchronous:
        self.backend.idle = False
      if (outs := runner.launched(inputs)) is not None:
        return outs
    self.backend.idle = False
    if self.on_xla is not None:
      return self._run_on_xla(inputs)
    try:
      with kernel_context(**self.backend.contexts):
        return self.runner(inputs)
    except (*_COMPILE_FAILURES, RuntimeError) as error:
      if isinstance(error, RuntimeError) and not str(error).startswith(_CODEGEN_FAILURES):
        raise
      self._rescue(error)
      return self._run_on_xla(inputs)

  def _recorded_run(self, recording, inputs):
    """A run while a profile records: this same run (its kernels waited for and timed), as a span of the calling
    thread. NB: the run's code stays in __call__, which this calls again: a run pays one check of `profile.active`
    when no profile records."""
    self.in_recorded_run = True
    try:
      with recording.span("run program", "program", backend=self.backend.name, device=self.backend.device.name,
                          equations=len(self.program.eqns), on_xla=self.on_xla is not None):
        return self(inputs)
    finally:
      self.in_recorded_run = False

  def _rescue(self, error):
    program = self.program
    message = (f"tinygrad could not compile a kernel of a program of {len(program.eqns)} equations "
               f"({_summary(program.eqns)}; {type(error).__name__}: {_first_line(error)})")
    if config.validated("fallback") == "error":
      raise KernelCompileError(message + " (TINYJAX_FALLBACK=error)") from error
    n_inputs = len(program.in_avals)
    self.on_xla = xla.compile_eqns(program.eqns, range(n_inputs), program.in_avals, program.outputs, program.n_slots)
    source = program.eqns[-1].source if program.eqns else "<unknown>"
    filename, _, line = source.rpartition(":")
    warnings.warn_explicit(message + "; XLA runs that program instead", FallbackWarning, filename,
                           int(line) if line.isdigit() else 0)
    crossed = crossing_bytes(Segment(False, program.eqns, tuple(range(n_inputs)), ()), dict(enumerate(program.in_avals)))
    self.placement = Placement(collections.Counter(("xla", e.name) for e in program.eqns), ("xla",), crossed)

  def _run_on_xla(self, inputs):
    backend = self.backend
    return [backend.put(np.asarray(x)) for x in self.on_xla(*[backend.get(t) for t in inputs])]


def _summary(eqns, most: int = 5) -> str:
  """The primitives of `eqns` and the user's lines that made them, for an error message."""
  names = collections.Counter(e.name for e in eqns)
  sources = list(dict.fromkeys(e.source for e in eqns if e.source))
  return (", ".join(f"{name} x{n}" for name, n in names.most_common(most)) + (", ..." if len(names) > most else "")
          + "; called at " + (", ".join(sources[:most]) + (", ..." if len(sources) > most else "") or "<unknown>"))


def _first_line(error) -> str:
  text = str(error).strip() or getattr(error, "stderr", None) or ""
  return (text.decode(errors="replace") if isinstance(text, bytes) else str(text)).strip().partition("\n")[0]
