"""A Program as text (tinyjax/ir/show.py), read against JAX's own printing of the same jaxpr, and the type checker
the suite runs on every flushed program (TINYJAX_CHECK_TYPES=1, tests/conftest.py)."""
import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tinyjax.ir.program import program_of
from tinyjax.ir.show import check_types, show

PROGRAMS = {
  "arithmetic": (lambda x, y: jnp.sin(x) * 2 + y.sum(), (np.ones(3, np.float32), np.ones((2, 2), np.float32))),
  "several outputs": (lambda x: (x + 1, x.astype(np.int32), x > 0), (np.ones((2, 3), np.float32),)),
  "an output that is an input": (lambda x, y: (y, x * y), (np.float32(1), np.ones(2, np.int8))),
  "28 slots": (lambda x: [x := x + i for i in range(27)][-1], (np.ones(2, np.float32),)),
}


def _without_params(line: str) -> str:
  return re.sub(r"\[[^\[\]]*\]", "", re.sub(r"\[[^\[\]]*\]", "", line)).strip()


@pytest.mark.parametrize("name", PROGRAMS)
def test_shown_as_jax_prints_the_jaxpr(name):
  """Where nothing is inlined, the program's text is JAX's jaxpr, line by line: the same names, types, primitives
  and operands (the parameters aside, which JAX prints in its own way)."""
  fn, args = PROGRAMS[name]
  closed = jax.make_jaxpr(fn)(*args)
  ours = show(program_of(closed)).splitlines()
  jaxs = str(closed).splitlines()
  assert len(ours) == len(jaxs), (ours, jaxs)
  for mine, theirs in zip(ours[1:-1], jaxs[1:-1]):
    assert _without_params(mine) == _without_params(theirs)
  assert ours[-1] == jaxs[-1]


def test_an_array_constant_shown_by_its_type():
  closed = jax.make_jaxpr(lambda x: x @ np.arange(6.0, dtype=np.float32).reshape(3, 2))(np.ones((4, 3), np.float32))
  assert show(program_of(closed)).splitlines()[1].endswith("] a const:f32[3,2]")


def test_shown_with_where_each_equation_runs():
  closed = jax.make_jaxpr(lambda x: jnp.linalg.eig(x)[0].real + 1)(np.eye(2, dtype=np.float32))
  text = show(program_of(closed), lambda eqn: "no rule" if eqn.name == "eig" else None)
  assert [line.split(" = ")[1].split("[")[0] for line in text.splitlines() if line.endswith("# elsewhere: no rule")] \
      == ["eig"]


def _program():
  return program_of(jax.make_jaxpr(lambda x, y: jnp.sin(x) + y)(np.ones(3, np.float32), np.ones(3, np.float32)))


def test_types_checked():
  check_types(_program())  # a program JAX traced is consistent


@pytest.mark.parametrize("fault, message", [
  ("input of another dtype", "where it was traced with"),
  ("read before written", "which nothing wrote before it"),
  ("written twice", "a second time"),
  ("output never written", "written by no equation"),
])
def test_type_faults_raise(fault, message):
  program = _program()
  sin, add = program.eqns
  if fault == "input of another dtype":
    program = dataclasses.replace(program, in_avals=(program.in_avals[0].update(dtype=np.int32),) + program.in_avals[1:])
  elif fault == "read before written":
    program = dataclasses.replace(program, eqns=(add, sin))
  elif fault == "written twice":
    program = dataclasses.replace(program, eqns=(sin, dataclasses.replace(add, outputs=sin.outputs)))
  else:
    program = dataclasses.replace(program, outputs=(program.n_slots + 1,))
  with pytest.raises(TypeError, match=message):
    check_types(program)
