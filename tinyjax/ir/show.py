"""A Program as text, in the manner of `jax.make_jaxpr`, and a checker of its types.

    { lambda ; a:f32[3] b:f32[3,3]. let
        c:f32[3] = mul a 2.0:f32[]
        d:c64[3] e:c64[3,3] = eig[...] b  # elsewhere: no tinygrad rule
      in (c, d) }

Slots are named as a jaxpr names its variables (a, b, ..., z, ba, ...); `where` names, for an equation, why the
compiling backend does not run it (TINYJAX_LOG_COMPILES=1 prints each compiled program so).
"""
from typing import Callable

import numpy as np

from tinyjax.ir.program import Const, Program


def _slot_name(slot: int) -> str:
  """JAX's variable names: the slot's number in base 26, written with the letters a..z (26 is 'ba')."""
  letters = chr(ord("a") + slot % 26)
  return letters if slot < 26 else _slot_name(slot // 26) + letters


def _typed(name: str, aval) -> str:
  return f"{name}:{aval.str_short(short_dtypes=True)}" if hasattr(aval, "str_short") else f"{name}:{aval}"


def _atom(atom) -> str:
  if isinstance(atom, Const):  # a literal as JAX prints one; an array constant by its type (JAX's constvars)
    return _typed("const" if np.ndim(atom.value) else str(atom.value), atom.aval)
  return _slot_name(atom)


def _params(params: dict) -> str:
  shown = [f"{k}={{...}}" if hasattr(v, "eqns") or hasattr(v, "jaxpr") else f"{k}={v}"  # a body: not inlined here
           for k, v in sorted(params.items())]
  return f"[{' '.join(shown)}]" if shown else ""


def show(program: Program, where: Callable | None = None) -> str:
  """The program as text; `where(eqn)`, if given, says why an equation runs elsewhere (None where it does not)."""
  ins = " ".join(_typed(_slot_name(i), aval) for i, aval in enumerate(program.in_avals))
  lines = [f"{{ lambda ; {ins}. let"]
  for eqn in program.eqns:
    outs = " ".join(_typed(_slot_name(s), aval) for s, aval in zip(eqn.outputs, eqn.out_avals))
    line = f"    {outs} = {eqn.name}{_params(eqn.params)} {' '.join(map(_atom, eqn.inputs))}".rstrip()
    elsewhere = where(eqn) if where is not None else None
    lines.append(f"{line}  # elsewhere: {elsewhere}" if elsewhere else line)
  outputs = ", ".join(map(_atom, program.outputs))
  lines.append(f"  in ({outputs}{',' if len(program.outputs) == 1 else ''}) }}")
  return "\n".join(lines)


def check_types(program: Program) -> None:
  """Raise TypeError where the program's types disagree: an equation reading a slot not yet written, or of another
  shape or dtype than the one it was traced with; a slot written twice; outputs that are not written."""
  written = dict(enumerate(program.in_avals))
  for eqn in program.eqns:
    for atom, aval in zip(eqn.inputs, eqn.in_avals, strict=True):
      have = atom.aval if isinstance(atom, Const) else written.get(atom)
      if have is None:
        raise TypeError(f"{eqn.name} reads slot {_slot_name(atom)}, which nothing wrote before it")
      if (have.shape, have.dtype) != (aval.shape, aval.dtype):
        raise TypeError(f"{eqn.name} reads {_typed(_atom(atom), have)} where it was traced with {aval.str_short()}")
    for slot, aval in zip(eqn.outputs, eqn.out_avals, strict=True):
      if slot in written:
        raise TypeError(f"{eqn.name} writes slot {_slot_name(slot)} a second time")
      written[slot] = aval
  for atom in program.outputs:
    if not isinstance(atom, Const) and atom not in written:
      raise TypeError(f"the output {_slot_name(atom)} is written by no equation")
