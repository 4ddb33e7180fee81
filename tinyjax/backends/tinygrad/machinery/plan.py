"""What runs where: which equations the tinygrad backend runs natively (`why_not`, read by the fallback policy,
checking mode, the coverage table and export alike), and a program's plan: its segments, maximal runs of equations
that run natively or on XLA, as steps on the slot environment. Data crosses between backends only at segment
boundaries."""
import collections
import dataclasses
import functools

import numpy as np
from jax.extend.core import ClosedJaxpr

from tinyjax.backends import xla
from tinyjax.backends.tinygrad.numerics import carried
from tinyjax.backends.tinygrad.machinery.replay import distinct_buffers
from tinyjax.backends.tinygrad.table import (CARRIED_AS_IS, COMPLEX_RULES, EXPANSIONS, LAYOUTS, RULES,
                                             holds_stepped_loops, takes_complex, uses_host_sync)
from tinyjax.ir import keys, profile
from tinyjax.ir.program import program_of, subprogram


def missing_rule(name: str) -> str | None:
  """Why the primitive `name` never runs natively (None if it has a rule; not_native.py says why it has none)."""
  return None if name in RULES or name in COMPLEX_RULES else "no tinygrad rule"


def why_not(eqn, supports_dtype, exporting: bool = False) -> str | None:
  """Why the equation does not run natively on a device whose dtypes `supports_dtype` tells (None if it does).
  `exporting`: also refuse what cannot be captured into an export (a rule that reads values on the host)."""
  if (missing := missing_rule(eqn.name)) is not None:
    return missing
  takes_carried = eqn.name in CARRIED_AS_IS or eqn.name in LAYOUTS
  def lacks(dtype) -> bool:
    if keys.is_key(dtype):
      return not (takes_carried and keys.is_threefry(dtype))
    return not supports_dtype(dtype)
  # NB: checked per buffered call (the fallback policy): the message is built only for an equation that fails
  if any(lacks(a.dtype) for a in eqn.in_avals + eqn.out_avals):
    lacking = {str(a.dtype) for a in eqn.in_avals + eqn.out_avals if lacks(a.dtype)}
    return f"{', '.join(sorted(lacking))}: a dtype the device lacks"
  if not (takes_complex(eqn.name) if carried.carries(eqn) else eqn.name in RULES):
    dtypes = {str(a.dtype) for a in eqn.in_avals + eqn.out_avals if carried.is_complex(a.dtype)}
    return f"no tinygrad rule for {', '.join(sorted(dtypes)) or 'real'} operands"
  # a control-flow rule runs its sub-jaxprs here, an expanded primitive its expansion: unless they are wholly
  # native, XLA runs the whole primitive
  subs = closed_jaxprs_in(eqn.params)
  if eqn.name in EXPANSIONS:
    subs.append(EXPANSIONS[eqn.name](eqn.in_avals, **eqn.params))
  for sub in subs:
    for inner in cached_program_of(sub).eqns:
      if (reason := why_not(inner, supports_dtype, exporting)) is not None:
        return f"its {inner.name}: {reason}"
  if exporting and uses_host_sync([eqn]):
    return "reads values on the host while it runs: a data-dependent loop"
  return None


@dataclasses.dataclass(frozen=True)
class Segment:
  native: bool
  eqns: tuple
  inputs: tuple[int, ...]  # slots the segment reads that earlier segments (or the program inputs) wrote
  outputs: tuple[int, ...]  # slots the segment writes that later segments or the program outputs read


def partition(program, native, alone=lambda eqn: False) -> list[Segment]:
  """The program's equations in maximal runs of those `native(eqn)` holds for and those it does not; a native
  equation `alone(eqn)` holds for is a run by itself."""
  runs: list[tuple[bool, list]] = []
  for eqn in program.eqns:
    here = native(eqn)
    if here and (alone(eqn) or runs and runs[-1][0] and alone(runs[-1][1][-1])):
      runs.append((here, [eqn]))
      continue
    if runs and runs[-1][0] == here:
      runs[-1][1].append(eqn)
    else:
      runs.append((here, [eqn]))
  read_later: set[int] = {a for a in program.outputs if isinstance(a, int)}
  segments = []
  for here, eqns in reversed(runs):
    written = {s for e in eqns for s in e.outputs}
    read = {a for e in eqns for a in e.inputs if isinstance(a, int)}
    segments.append(Segment(here, tuple(eqns), tuple(sorted(read - written)), tuple(sorted(written & read_later))))
    read_later = (read_later - written) | (read - written)
  return segments[::-1]


def crossing_bytes(segment: Segment, avals: dict[int, object]) -> int:
  """Bytes a fallback segment moves: its inputs in and its outputs out. NB: a value of one of JAX's custom element
  types (an extended dtype: no itemsize) stays on XLA, and is counted as nothing."""
  return sum(int(np.prod(avals[s].shape, dtype=np.int64)) * getattr(avals[s].dtype, "itemsize", 0)
             for s in segment.inputs + segment.outputs)


@dataclasses.dataclass(frozen=True)
class Plan:
  steps: tuple  # step(env) for each segment, in order
  counts: collections.Counter  # (backend name, primitive name) -> equations per run
  segments: tuple  # backend name of each segment
  bytes_crossed: int
  jittable: bool  # wholly native and no host reads: TinyJit can capture it
  stepped: bool  # it runs loops of replayed steps (table.STEPPED), which a capture schedules step by step


def plan(program, backend) -> Plan:
  """The program's segments on `backend` (a TinygradBackend) as steps on the slot environment."""
  avals = dict(enumerate(program.in_avals))
  avals.update((s, a) for e in program.eqns for s, a in zip(e.outputs, e.out_avals))
  segments = partition(program, backend.supports)
  host_sync = uses_host_sync(program.eqns)
  steps = []
  # a program that reads values on the host while it runs (a loop, a loop's body holding a loop) is not captured
  # whole: the runs of native equations between those that read are each replayed by a TinyJit of their own, so
  # that a loop body run again and again is not scheduled afresh at each step
  for segment in partition(program, backend.supports, alone=_host_sync) if host_sync else segments:
    if not segment.native:
      steps.append(_fallback_step(backend, segment, [avals[s] for s in segment.inputs], program.n_slots))
    elif host_sync and not _host_sync(segment.eqns[0]):
      steps.append(_replayed_step(backend, segment, [avals[s] for s in segment.inputs]))
    else:
      steps.append(functools.partial(backend.interpret, segment.eqns))
  counts = collections.Counter(("tinygrad" if s.native else "xla", e.name) for s in segments for e in s.eqns)
  crossed = sum(crossing_bytes(s, avals) for s in segments if not s.native)
  return Plan(tuple(steps), counts, tuple("tinygrad" if s.native else "xla" for s in segments), crossed,
              len(segments) == 1 and segments[0].native and not host_sync, holds_stepped_loops(program.eqns))


def _host_sync(eqn) -> bool:
  return uses_host_sync([eqn])


def _replayed_step(backend, segment, in_avals):
  runner = backend.runner(subprogram(segment.eqns, segment.inputs, segment.outputs, in_avals))

  def step(env):
    inputs = distinct_buffers(backend.tg_device, [env[s] for s in segment.inputs])
    for slot, value in zip(segment.outputs, runner(inputs)):
      env[slot] = value
  return step


def _fallback_step(backend, segment, in_avals, n_slots):
  fn = xla.compile_eqns(segment.eqns, segment.inputs, in_avals, segment.outputs, n_slots)
  primitives = ", ".join(sorted({e.name for e in segment.eqns}))  # what a profile says the segment ran

  def step(env):
    if profile.active is not None:
      with profile.active.span("XLA segment", "segment", equations=len(segment.eqns), primitives=primitives):
        return run(env)
    return run(env)

  def run(env):
    results = fn(*[backend.get(carried.wrapped(env[s], a)) for s, a in zip(segment.inputs, in_avals)])
    for slot, value in zip(segment.outputs, results):
      env[slot] = carried.unwrapped(backend.put(np.asarray(value)))
  return step


@functools.lru_cache(maxsize=1024)
def cached_program_of(closed_jaxpr):
  return program_of(closed_jaxpr)


def closed_jaxprs_in(params) -> list:
  """The ClosedJaxprs among an equation's params (cond branches, loop bodies, ...)."""
  return [v for value in params.values() for v in (value if isinstance(value, tuple) else (value,))
          if isinstance(v, ClosedJaxpr)]
