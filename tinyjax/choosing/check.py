"""Checking mode, TINYJAX_CHECK=1: each flushed program (a `tinyjax.jit` call is one) also runs on XLA, and a result
that differs is blamed on the first equation, in program order, that makes it differ.

The program's outputs are compared with XLA's. When one differs, the program runs again one equation at a time, each
equation alone on the backend and on XLA, both fed the backend's own values for its inputs: the blame falls on the
equation whose rule differs, not on the ones downstream of it. If every equation alone agrees, the difference is made
by running them together (fusion): the first 1, 2, 3, ... equations run together on both, and the first equation whose
result differs there is blamed. Nothing here is fast; nothing runs when the mode is off.

What differs: integers, booleans and PRNG key data unequal; NaN where the other has none; infinities unequal; finite
floats beyond RTOL of the element plus RTOL of the output's largest finite magnitude (so that rounding in a result
that cancels to about zero is no difference) plus the dtype's smallest normal number.
NB: -0.0 and 0.0 are equal here: XLA's own simplifications do not keep the sign of zeros consistently, and the
oracle tests check signs of zeros rule by rule. NB: subnormals XLA flushes to zero (tinygrad keeps them) are within
the smallest-normal term.
"""
import dataclasses
import functools

import jax.numpy as jnp
import numpy as np
from jax.extend.core import ClosedJaxpr

from tinyjax import config
from tinyjax.ir import float64
from tinyjax.choosing.selection import backend_for
from tinyjax.ir.backend import Backend, Compiled
from tinyjax.ir.program import Program

# Relative tolerance by dtype: looser than the oracle tests' per rule, since a program accumulates the per-rule
# differences (tinygrad's transcendental functions, reassociated sums, fused multiply-adds).
RTOL = {np.dtype(np.float16): 1e-2, np.dtype(jnp.bfloat16): 5e-2, np.dtype(np.float32): 1e-4,
        np.dtype(np.float64): 1e-10, np.dtype(np.complex64): 1e-4, np.dtype(np.complex128): 1e-10}
_SAMPLES = 4


class CheckError(AssertionError):
  """TINYJAX_CHECK=1 found a result that differs from XLA's.

  An AssertionError: it reports a failed self-check of tinyjax (a rule disagrees with its reference), not a condition
  of the user's program to recover from, so test runners report it as a failed assertion and the `except
  RuntimeError` handlers that deal with device errors do not swallow it.
  """


def checked(backend: Backend) -> Backend:
  """The backend a flush runs on: `backend` itself, or with TINYJAX_CHECK=1 the same checked against XLA."""
  if config.validated("check") == "0" or backend.name == "xla":  # NB: XLA is the reference; nothing to check
    return backend
  return _checking(backend)


@functools.cache
def _checking(backend: Backend) -> "Checking":
  return Checking(backend)


class Checking(Backend):
  """`inner`, with every compiled program's outputs compared with XLA's at each run.

  NB: a backend of its own (buffers and compiled programs cached apart from `inner`'s), so that programs compiled
  with the mode off are never replayed unchecked.
  """

  def __init__(self, inner: Backend):
    self.inner, self.name, self.device = inner, inner.name, inner.device
    self.cuts_long_flushes = inner.cuts_long_flushes

  def put(self, host):
    return self.inner.put(host)

  def get(self, buffer):
    return self.inner.get(buffer)

  def wait(self, buffer):
    self.inner.wait(buffer)

  def address(self, buffer):
    return self.inner.address(buffer)

  def why_not(self, eqn) -> str | None:
    return self.inner.why_not(eqn)

  def supports_dtype(self, dtype) -> bool:
    return self.inner.supports_dtype(dtype)

  def compile(self, program: Program):
    return Checked(self, program)

  def rtol(self, dtype) -> float:
    if np.dtype(dtype) in float64.NARROWER and float64.downcasting(self.inner):
      dtype = float64.NARROWER[np.dtype(dtype)]  # NB: TINYJAX_F64=downcast computes float64 in float32: judged so
    return RTOL.get(np.dtype(dtype), 1e-6)

  def blame(self, program: Program, hosts: list) -> CheckError | None:
    """The error naming the first equation whose result differs from XLA's, given the backend's values."""
    env = hosts + [None] * (program.n_slots - len(hosts))
    for eqn in program.eqns:
      alone, slots = _alone(eqn)
      inputs = [env[s] for s in slots]
      ours = _run(self.inner, alone, inputs)
      for index, (mine, theirs) in enumerate(zip(ours, _run(_xla(), alone, inputs), strict=True)):
        if (what := _difference(mine, theirs, self.rtol)) is not None:
          return self._error(eqn, index, what)
      for slot, value in zip(eqn.outputs, ours):
        env[slot] = value
    return None

  def blame_together(self, program: Program, hosts: list) -> CheckError | None:
    """When every equation alone agrees: the error naming the first equation whose result differs when it runs
    together with the equations before it (a difference made by fusing them)."""
    for k, eqn in enumerate(program.eqns):
      prefix = Program(program.in_avals, program.eqns[:k + 1], eqn.outputs, program.n_slots)
      for index, (mine, theirs) in enumerate(zip(_run(self.inner, prefix, hosts), _run(_xla(), prefix, hosts))):
        if (what := _difference(mine, theirs, self.rtol)) is not None:
          return self._error(eqn, index, what, f"alone it agrees, but not run together with the equations before "
                                               f"it ({k}): the way they are fused makes the difference")
    return None

  def _error(self, eqn, index: int, what: str, why: str = "") -> CheckError:
    return CheckError(
      f"{eqn.name} differs from XLA on {self.name} ({self.device}){': ' + why if why else ''}\n"
      f"  created at {eqn.source}\n  params: {_brief(eqn.params)}\n"
      f"  inputs: {', '.join(a.str_short() for a in eqn.in_avals)}\n"
      f"  output {index} ({eqn.out_avals[index].str_short()}): {what}")


class Checked(Compiled):
  """A program of the checked backend: its outputs compared with XLA's at each run (the blame, if they differ)."""

  def __init__(self, checking: Checking, program: Program):
    self.checking, self.program = checking, program
    self.compiled, self.reference = checking.inner.compile(program), _xla().compile(program)

  def run(self, inputs):
    checking, program = self.checking, self.program
    hosts = [np.asarray(checking.inner.get(x)) for x in inputs]
    outs, placement = self.compiled.run(inputs)
    expected, _ = self.reference.run(hosts)
    for index, (ours, theirs) in enumerate(zip(outs, expected, strict=True)):
      if (what := _difference(np.asarray(checking.inner.get(ours)), np.asarray(theirs), checking.rtol)) is not None:
        raise checking.blame(program, hosts) or checking.blame_together(program, hosts) or CheckError(
          f"output {index} of a program of {len(program.eqns)} equations differs from XLA on {checking.name} "
          f"({checking.device}): {what}\n  no equation's result differs, alone or run with those before it: the "
          f"difference appears only when the whole program runs (fusion with later equations), or it is not "
          f"reproducible")
    return outs, placement


@functools.cache

def _xla() -> Backend:
  return backend_for("xla", "")


def _alone(eqn):
  """A Program of the one equation, and the slots (of the whole program) its inputs come from."""
  slots = list(dict.fromkeys(a for a in eqn.inputs if isinstance(a, int)))
  avals = {a: aval for a, aval in zip(eqn.inputs, eqn.in_avals) if isinstance(a, int)}
  position = {s: i for i, s in enumerate(slots)}
  outputs = tuple(range(len(slots), len(slots) + len(eqn.outputs)))
  single = dataclasses.replace(eqn, inputs=tuple(position[a] if isinstance(a, int) else a for a in eqn.inputs),
                               outputs=outputs)
  return Program(tuple(avals[s] for s in slots), (single,), outputs, len(slots) + len(outputs)), slots


def _run(backend: Backend, program: Program, hosts: list) -> list[np.ndarray]:
  outs, _ = backend.compile(program).run([backend.put(h) for h in hosts])
  return [np.asarray(backend.get(x)) for x in outs]


def _difference(ours: np.ndarray, theirs: np.ndarray, rtol) -> str | None:
  """How `ours` differs from XLA's `theirs` (count, max abs/rel difference, samples), or None if it does not."""
  if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
    return f"{ours.dtype}{list(ours.shape)} where XLA has {theirs.dtype}{list(theirs.shape)}"
  a, e = _components(ours), _components(theirs)  # float64, complex numbers as (real, imaginary) on a last axis
  finite = np.isfinite(a) & np.isfinite(e)
  with np.errstate(invalid="ignore", over="ignore"):
    diff = np.abs(a - e)
  if jnp.issubdtype(theirs.dtype, jnp.inexact):
    scale = np.abs(e[np.isfinite(e)]).max(initial=0.0)
    tolerance = rtol(theirs.dtype) * (np.abs(e) + scale) + float(jnp.finfo(theirs.dtype).tiny)
    nan = np.isnan(a) | np.isnan(e)
    bad = (np.isnan(a) != np.isnan(e)) | (~finite & ~nan & (a != e)) | (finite & (diff > tolerance))
  else:
    bad = a != e
  bad = bad.any(axis=-1)
  if not bad.any():
    return None
  pairs = bad[..., None] & finite
  diff, reference = diff[pairs], np.abs(e[pairs])
  rel = diff[reference > 0] / reference[reference > 0]
  at = [tuple(int(i) for i in index) for index in np.argwhere(bad)[:_SAMPLES]]
  samples = "; ".join(f"at {list(i)}: {ours[i]!s} where XLA has {theirs[i]!s}" for i in at)
  extent = (f"max abs diff {diff.max():.3g}" + (f", max rel diff {rel.max():.3g}" if rel.size else "")
            if diff.size else "NaN or infinities differ")
  return f"{int(bad.sum())} of {bad.size} elements differ ({extent}); {samples}"


def _components(x: np.ndarray) -> np.ndarray:
  if jnp.issubdtype(x.dtype, jnp.complexfloating):
    return np.stack([x.real, x.imag], axis=-1).astype(np.float64)
  return x.astype(np.float64)[..., None]


def _brief(params: dict) -> str:
  """The params on one line, each cut to 60 characters (a jaxpr shown by its size)."""
  def short(value) -> str:
    text = (f"<jaxpr of {len(value.eqns)} equations>" if isinstance(value, ClosedJaxpr)
            else " ".join(repr(value).split()))
    return text if len(text) <= 60 else text[:57] + "..."
  return ", ".join(f"{k}={short(v)}" for k, v in params.items()) or "none"
