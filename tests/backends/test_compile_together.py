"""A schedule's new kernels compiled together (tinyjax/backends/tinygrad/machinery/compile_together.py): one clang for
the CPU device's kernels, one OpenCL program for CL's; each kernel's results as JAX's on XLA, also where the unit
fails to compile or a kernel fails to lower."""
import collections
import ctypes
import os
import re

import numpy as np
import pytest
from tinygrad import codegen
from tinygrad.device import CompileError, Device

from oracle import check
from tinyjax.backends.tinygrad.machinery import compile_together

DEVICE = os.environ["TINYJAX_DEVICE"]
COMPILES_UNITS = DEVICE.split(":")[0] in ("CPU", "CL")
EDGES = np.array([[np.nan, -0.0, 0.0, np.inf], [-np.inf, 3.5, -2.0, 0.5], [1e30, -1e-30, 7.0, -7.0]], np.float32)


def _sort_scaled(np_, x):
  # a sort of rows: two kernels of one schedule that tinygrad names alike (r_3_4_4)
  return np_.sort(x * 1.5, axis=1)


@pytest.fixture(autouse=True)
def cold(monkeypatch):
  """Every kernel is new: tinygrad's programs lowered in this process are set aside while the test runs, and
  compile_together finds no binary in CACHEDB (its stores still go there: CL's runtime reads them)."""
  lowered = dict(codegen.to_program_cache)
  codegen.to_program_cache.clear()
  monkeypatch.setattr(compile_together, "diskcache_get", lambda *_: None)
  yield
  codegen.to_program_cache.update(lowered)


@pytest.fixture
def units(monkeypatch):
  """The units compiled while the test runs: each a list of its kernels' function names."""
  compiled = []
  compile_unit = compile_together.compile_unit

  def recorded(device, compiler, sources):
    compiled.append([re.search(r"void (\w+)\(", source).group(1) for source in sources])
    return compile_unit(device, compiler, sources)
  monkeypatch.setattr(compile_together, "compile_unit", recorded)
  return compiled


def test_new_kernels_of_a_schedule_compile_as_one_unit(units):
  """The sort's two new kernels (one name) compile as one unit, the second renamed (CPU, CL); elsewhere one by one."""
  before = compile_together.COUNTS["units"]
  check(_sort_scaled, EDGES)
  if not COMPILES_UNITS:
    assert compile_together.COUNTS["units"] == before
    return
  assert compile_together.COUNTS["units"] > before
  assert any(len(unit) > 1 for unit in units), units
  for unit in units:
    assert len(set(unit)) == len(unit), f"a unit holds two functions of one name: {unit}"
  renamed = [name for unit in units for name in unit if re.fullmatch(r"\w+_[0-9a-f]{8}", name)]
  assert renamed, units
  if DEVICE.startswith("CL"):  # the unit's kernels hold one program built from its binary (amendments.py)
    from tinygrad.engine import realize
    unit = next(unit for unit in units if renamed[0] in unit)
    handles = collections.Counter(ctypes.addressof(program.program.contents) for program in realize.runtime_cache.values()
                                  if program.tinyjax_kernel[1] in unit)
    shared = next(ctypes.addressof(program.program.contents) for program in realize.runtime_cache.values()
                  if program.tinyjax_kernel[1] == renamed[0])
    assert handles[shared] >= 2, handles


@pytest.mark.skipif(not COMPILES_UNITS, reason="the device compiles its kernels one by one")
def test_a_unit_that_fails_to_compile_compiles_kernel_by_kernel(monkeypatch):
  """A unit the compiler rejects is compiled again one kernel at a time: every kernel still runs, as JAX's."""
  compiler = compile_together._unit_compiler(Device.canonicalize(DEVICE))[0]
  compile_source = type(compiler).compile

  def rejecting_units(self, source):
    if len(re.findall(r"void \w+\(", source)) > 1:
      raise CompileError("a unit rejected by the test")
    return compile_source(self, source)
  monkeypatch.setattr(type(compiler), "compile", rejecting_units)
  before = compile_together.COUNTS["compiled again one by one"]
  check(_sort_scaled, EDGES)
  assert compile_together.COUNTS["compiled again one by one"] > before


@pytest.mark.skipif(not COMPILES_UNITS, reason="the device compiles its kernels one by one")
def test_a_kernel_that_fails_to_lower_leaves_no_placeholder(monkeypatch):
  """The second kernel of a group fails to lower: the first, lowered with its compile set aside, is not left in
  tinygrad's cache of programs without its binary; the same program then runs as JAX's."""
  import tinyjax.numpy as tnp
  to_program, lowered = codegen.to_program, []

  def failing_second(ast, renderer):
    lowered.append(ast)
    if len(lowered) == 2:
      raise RuntimeError("the test's failing lowering")
    return to_program(ast, renderer)
  monkeypatch.setattr(codegen, "to_program", failing_second)
  with pytest.raises(Exception):
    np.asarray(_sort_scaled(tnp, tnp.asarray(EDGES)))
  monkeypatch.setattr(codegen, "to_program", to_program)
  assert len(lowered) >= 2
  assert not [key for key, program in codegen.to_program_cache.items()
              if program.src[-1].arg == compile_together._PENDING]
  check(_sort_scaled, EDGES)
