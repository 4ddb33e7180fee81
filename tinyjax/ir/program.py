"""A flushed program: the pending equations flattened into one straight list over numbered slots.

Slots 0..n_inputs-1 hold the inputs; every equation writes new slots. Call primitives (jit, custom_jvp_call,
custom_vjp_call, remat) are inlined, so that each primitive can run where it is supported and the fallback
segments are as small as they can be. `interpret` is the one loop every backend uses to run equations.
"""
import dataclasses
from typing import Any, Callable

import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal, Var

from tinyjax.ir import keys, spmd

# The call primitives inlined by `flatten`, and the parameter that holds the called jaxpr.
CALL_PARAMS = {"jit": "jaxpr", "closed_call": "call_jaxpr", "call": "call_jaxpr",
               "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "remat2": "jaxpr"}


@dataclasses.dataclass(frozen=True, eq=False)
class Const:
  """A value known when the program is built: a jaxpr literal or a closed-over constant."""
  value: Any
  aval: Any


Atom = int | Const


@dataclasses.dataclass(frozen=True, eq=False)
class Eqn:
  primitive: Any
  params: dict
  inputs: tuple[Atom, ...]
  outputs: tuple[int, ...]
  in_avals: tuple
  out_avals: tuple
  source: str  # the user's file:line that created the value
  effects: frozenset = frozenset()  # the jaxpr equation's (a print, a callback), for a backend that runs it as JAX

  @property
  def name(self) -> str:
    return self.primitive.name


@dataclasses.dataclass(frozen=True, eq=False)
class Program:
  in_avals: tuple
  eqns: tuple[Eqn, ...]
  outputs: tuple[Atom, ...]
  n_slots: int


class Builder:
  """Appends jaxprs into one flat equation list, renaming their variables to slots."""

  def __init__(self, in_avals):
    self.in_avals = tuple(in_avals)
    self.n_slots = len(self.in_avals)
    self.eqns: list[Eqn] = []

  def new_slot(self) -> int:
    self.n_slots += 1
    return self.n_slots - 1

  def inline(self, jaxpr: Jaxpr, consts, args: list[Atom], source: str) -> list[Atom]:
    env: dict[Var, Atom] = {}

    def read(atom) -> Atom:
      return Const(atom.val, atom.aval) if isinstance(atom, Literal) else env[atom]

    for var, value in zip(jaxpr.constvars, consts, strict=True):
      env[var] = Const(value if keys.is_key(var.aval.dtype) else np.asarray(value), var.aval)  # keys stay typed
    for var, atom in zip(jaxpr.invars, args, strict=True):
      env[var] = atom
    for eqn in jaxpr.eqns:
      inputs = [read(v) for v in eqn.invars]
      if (called := called_jaxpr(eqn)) is not None:
        outs = self.inline(*called, inputs, source)
      else:
        outs = [self.new_slot() for _ in eqn.outvars]
        self.eqns.append(Eqn(eqn.primitive, dict(eqn.params), tuple(inputs), tuple(outs),
                             tuple(v.aval for v in eqn.invars), tuple(v.aval for v in eqn.outvars), source,
                             eqn.effects))
      for var, atom in zip(eqn.outvars, outs, strict=True):
        env[var] = atom
    return [read(v) for v in jaxpr.outvars]

  def build(self, outputs) -> Program:
    return Program(self.in_avals, tuple(self.eqns), tuple(outputs), self.n_slots)


def called_jaxpr(eqn) -> tuple | None:
  """(jaxpr, consts) that a call primitive's equation (jit, closed_call, custom_jvp_call, ...) runs in place; None for
  any other equation."""
  if eqn.primitive.name == "shard_map":  # and pmap, a jit of one: the shards side by side (spmd.py)
    closed = spmd.stacked(tuple(sorted(eqn.params.items())), called_jaxpr)
    return None if closed is None else (closed.jaxpr, closed.consts)
  if eqn.primitive.name not in CALL_PARAMS:
    return None
  callee = eqn.params[CALL_PARAMS[eqn.primitive.name]]
  return (callee.jaxpr, callee.consts) if isinstance(callee, ClosedJaxpr) else (callee, ())


def program_of(closed: ClosedJaxpr, source: str = "") -> Program:
  """A whole ClosedJaxpr as a Program (used for the bodies of control-flow primitives)."""
  builder = Builder([v.aval for v in closed.jaxpr.invars])
  outs = builder.inline(closed.jaxpr, closed.consts, list(range(len(closed.jaxpr.invars))), source)
  return builder.build(outs)


def subprogram(eqns, inputs: tuple[int, ...], outputs: tuple[int, ...], in_avals) -> Program:
  """A run of a program's equations as a program of its own: the slots `inputs` (of avals `in_avals`) become its
  inputs and the slots `outputs` its outputs, every slot renumbered."""
  slots = {s: i for i, s in enumerate(inputs)}
  renumbered = []
  for eqn in eqns:
    ins = tuple(slots[a] if isinstance(a, int) else a for a in eqn.inputs)
    for slot in eqn.outputs:
      slots[slot] = len(slots)
    renumbered.append(dataclasses.replace(eqn, inputs=ins, outputs=tuple(slots[s] for s in eqn.outputs)))
  return Program(tuple(in_avals), tuple(renumbered), tuple(slots[s] for s in outputs), len(slots))


def interpret(eqns, env: list, apply: Callable[[Eqn, list], list], const: Callable[[Const], Any]) -> None:
  """The flush loop: read each equation's inputs from `env`, apply its rule, write its outputs."""
  for eqn in eqns:
    ins = [env[a] if isinstance(a, int) else const(a) for a in eqn.inputs]
    try:
      outs = apply(eqn, ins)
    except Exception as error:
      if eqn.source:  # the error keeps its type; the note names the equation and the user's line that made it
        error.add_note(f"tinyjax: while running {eqn.name}, called at {eqn.source}")
      raise
    for slot, value in zip(eqn.outputs, outs, strict=True):
      env[slot] = value


def read_outputs(program: Program, env: list, const: Callable[[Const], Any]) -> list:
  return [env[a] if isinstance(a, int) else const(a) for a in program.outputs]
