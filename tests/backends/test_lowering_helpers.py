"""A schedule's new kernels lowered over the cores (tinyjax/backends/tinygrad/machinery/lowering_helpers.py): a helper
process lowers a group's last kernels while the test's process lowers its first; the programs are the ones the process
lowers alone, named apart alike, and each result is JAX's on XLA; a helper that is gone leaves its kernels to the
process."""
import os
import time

import numpy as np
import pytest
from tinygrad import codegen
from tinygrad.device import Device

import tinyjax
from oracle import check
from tinyjax.backends.tinygrad.machinery import compile_together, lowering_helpers

DEVICE = os.environ["TINYJAX_DEVICE"]
EDGES = np.array([[np.nan, -0.0, 0.0, np.inf], [-np.inf, 3.5, -2.0, 0.5], [1e30, -1e-30, 7.0, -7.0]], np.float32)


def _six_results(np_, x):
  # a schedule of about nine new kernels, some named alike (the sorts'): the helper's are named apart here
  x = np_.asarray(x)
  return [np_.sort(x * 1.5, axis=0), np_.sort(x - 2, axis=1), np_.cumsum(x, 0), x @ x.T, np_.argmax(x, 1),
          np_.cumprod(x, 1)]


def _lowered_now() -> dict:
  return {key: (program.arg.function_name, program.src[2].arg) for key, program in codegen.to_program_cache.items()}


@pytest.fixture
def fresh(monkeypatch):
  """No program this process lowered before, none in the disk caches (tinyjax's, CACHEDB): every kernel is lowered."""
  lowered = dict(codegen.to_program_cache)
  codegen.to_program_cache.clear()
  monkeypatch.setattr(compile_together, "diskcache_get", lambda *_: None)
  tinyjax.config.update("program_cache", "")
  yield
  tinyjax.config.update("program_cache", None)
  codegen.to_program_cache.clear()
  codegen.to_program_cache.update(lowered)


@pytest.fixture
def helper(monkeypatch):
  """One helper, ready (it starts in ~2.5 s: the test waits for it, up to two minutes)."""
  monkeypatch.setattr(lowering_helpers, "helper_count", lambda: 1)
  helpers = lowering_helpers._started_helpers()
  deadline = time.monotonic() + 120
  while not helpers[0].ready and time.monotonic() < deadline:
    helpers[0].read({}, -1)
    time.sleep(0.05)
  assert helpers[0].ready
  return helpers[0]


def test_a_helper_lowers_the_programs_this_process_would(fresh, helper):
  """With a helper, nine new kernels compute JAX's values, some lowered by the helper (on the devices whose
  schedules lower as a group: CPU, CL); its programs are the process's own, names apart included."""
  before = lowering_helpers.COUNTS["lowered by helpers"]
  check(_six_results, EDGES)
  with_helper = _lowered_now()
  grouped = compile_together._unit_compiler(Device.canonicalize(DEVICE)) is not None
  assert (lowering_helpers.COUNTS["lowered by helpers"] > before) == grouped
  codegen.to_program_cache.clear()
  helper_count = lowering_helpers.helper_count
  lowering_helpers.helper_count = lambda: 0
  try:
    check(_six_results, EDGES)
  finally:
    lowering_helpers.helper_count = helper_count
  alone = _lowered_now()  # NB: the first run also lowered a probe of a dtype (its answer is kept)
  assert len(alone) >= 6 and alone.items() <= with_helper.items()


def test_a_helper_gone_leaves_its_kernels_to_this_process(fresh, helper, monkeypatch):
  """The helper dies with the kernels it was handed: the process lowers them; the values are JAX's."""
  hand = lowering_helpers._Helper.hand

  def hand_and_die(self, *args):
    handed = hand(self, *args)
    self.process.kill()
    self.process.wait()
    return handed
  monkeypatch.setattr(lowering_helpers._Helper, "hand", hand_and_die)
  before = lowering_helpers.COUNTS["lowered here in a helper's stead"]
  check(_six_results, EDGES.T.copy())  # NB: new shapes, new kernels (the other test's program would be replayed)
  grouped = compile_together._unit_compiler(Device.canonicalize(DEVICE)) is not None
  assert (lowering_helpers.COUNTS["lowered here in a helper's stead"] > before) == grouped
  assert (not lowering_helpers._started_helpers()) == grouped  # the helper is gone where it was handed kernels
