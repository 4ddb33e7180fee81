"""Differential tests of the whole public jax.numpy API: each call gives JAX's exact result through tinyjax.numpy.

The calls are in numpy_cases.py. Each runs under TINYJAX_FALLBACK=error unless JAX's program for it has an equation
tinygrad has no rule for yet (oracle.runs_on_xla_as_listed: the primitives of not_native.py, each with its reason).
"""
import jax.numpy as jnp
import pytest

import tinyjax
import tinyjax.numpy as tnp
from tinyjax import identity
from numpy_cases import CASES, NOT_ARRAY_FUNCTIONS, SUBMODULES
from oracle import check, runs_on_xla_as_listed
from xfail import XFAIL, XFAIL_ON_DEVICE, device_under_test, param

# JAX's own warnings for inputs chosen on purpose: float64 values beyond float32, complex cast to real
pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:Casting from complex to real:DeprecationWarning")]


def xfail_name(case) -> str:
  """The name of a case in the expected-failure table: "jnp.<case id>" when that one call is listed, else
  "jnp.<function>" (the prefix keeps jax.numpy functions apart from primitives of the same name)."""
  listed = (f"jnp.{case.id}", None) in XFAIL or (device_under_test(), f"jnp.{case.id}", None) in XFAIL_ON_DEVICE
  return f"jnp.{case.id}" if listed else f"jnp.{case.name}"


def _message(error: BaseException) -> str:
  """An error's message without the note JAX's traceback filtering appends where an error leaves its API."""
  return str(error).partition("\n--------------------\n")[0]


def public_names() -> set[str]:
  """jax.numpy's public names, with "linalg.<name>" and "fft.<name>" for its submodules."""
  names = {n for n in dir(jnp) if not n.startswith("_")} - set(SUBMODULES)
  for module in SUBMODULES:
    names |= {f"{module}.{n}" for n in dir(getattr(jnp, module)) if not n.startswith("_")}
  return names


@pytest.mark.parametrize("name,case", [param(case.function, case, name=xfail_name(case), dtype=case.dtype, id=case.id)
                                       for case in CASES])
def test_function(name, case):
  """The call on tinyjax.numpy gives jax.numpy's result (tree, shape, dtype, weak type, values), or its error (type and message)."""
  arrays = [x.make() for x in case.inputs]
  if case.raises is not None:
    with pytest.raises(case.raises) as jax_raised:
      case.run(jnp, *arrays)
    with pytest.raises(case.raises) as raised:
      case.run(tnp, *arrays)
      tinyjax.flush()
    assert _message(raised.value) == _message(jax_raised.value)
    return
  rtol, atol = case.tolerance(arrays, case.run(jnp, *arrays))
  native_only = not runs_on_xla_as_listed(lambda *xs: case.run(jnp, *xs), *arrays)
  check(case.run, *arrays, native_only=native_only, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", sorted(set(NOT_ARRAY_FUNCTIONS) | identity.PASSTHROUGH["numpy"]))
def test_passed_through_is_jax_own(name):
  """Names that are no array functions, and helpers tinyjax.numpy passes through, are jax.numpy's own objects."""
  assert getattr(tnp, name) is getattr(jnp, name)


def test_every_public_name_is_accounted_for():
  """No public name of jax.numpy is silently missing: each is called, or listed with its reason."""
  public = public_names()
  covered = {case.function for case in CASES} & public
  xfailed = {name.removeprefix("jnp.").partition("(")[0] for name, _ in XFAIL if name.startswith("jnp.")}
  missing = public - covered - set(NOT_ARRAY_FUNCTIONS) - xfailed
  assert not missing, f"public jax.numpy names with no case, no reason and no expected failure: {sorted(missing)}"
  unknown = {case.function for case in CASES if case.function != "operator"} - public
  assert not unknown, f"cases for names jax.numpy does not have: {sorted(unknown)}"
  assert not set(NOT_ARRAY_FUNCTIONS) - public, "NOT_ARRAY_FUNCTIONS lists names jax.numpy does not have"
  assert not set(NOT_ARRAY_FUNCTIONS) & covered, "a name is both called by cases and listed as no array function"
