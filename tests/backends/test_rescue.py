"""The rescue (tinyjax/backends/tinygrad/machinery/rescue.py): a program with a kernel tinygrad fails to compile runs
on XLA from then on, with a warning at the user's line, or raises under TINYJAX_FALLBACK=error."""
import os
import sys
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
from helpers import default_settings  # noqa: F401  (the fixture, for every test here)
from oracle import assert_like_jax
from tinyjax.backends.tinygrad.machinery import compile_together
from tinyjax.choosing import selection

_FILE = os.path.abspath(__file__)
pytestmark = pytest.mark.usefixtures("default_settings")


def _failing_compiler(monkeypatch, failure="compile"):
  """Every kernel compiled from now on fails, alone or with others (compile_together): as clang fails on a kernel it
  rejects ("compile"), or as tinygrad's code generation gives up on one ("codegen": its UOp verification), or with
  another RuntimeError ("other")."""
  from tinygrad.device import CompileError, Compiler
  backend = selection.current_backend()
  # probed with a working compiler (the probes' answers are kept for the process). NB: float64's too, which the
  # policies ask of every call: probed with the failing one, the device would lack it for every later test
  assert backend.supports_dtype(np.float32) and backend.supports_dtype(np.int32)
  backend.supports_dtype(np.float64)
  error, message = {"compile": (CompileError, "refused by the test"),
                    "codegen": (RuntimeError, "UOp verification failed at 3 on Ops.AFTER (refused by the test)"),
                    "other": (RuntimeError, "out of memory (refused by the test)")}[failure]

  def refuse(self, src):
    # NB: a new error each time: one raised again keeps the frames of its last raise, and so the arrays they hold
    # (a dead intermediate was then an output of the next program, which compiled and warned again)
    raise error(message)
  monkeypatch.setattr(Compiler, "compile_cached", refuse)
  # kernels a schedule brings together are compiled as one unit (compile_together.py): that compile fails too
  monkeypatch.setattr(compile_together, "compile_unit", lambda device, compiler, sources: refuse(compiler, sources))


@pytest.mark.parametrize("policy,failure,size", [("xla", "compile", 19), ("warn", "compile", 21),
                                                 ("warn", "codegen", 25)])
def test_kernel_compile_failure_is_rescued_by_xla(monkeypatch, policy, failure, size):
  monkeypatch.setenv("TINYJAX_FALLBACK", policy)
  _failing_compiler(monkeypatch, failure)
  # NB: shapes no other test uses: their kernels are not compiled yet (and a rescued program stays rescued)
  x = np.linspace(-2, 2, size, dtype=np.float32)
  before = tinyjax.report().primitives.copy()
  with pytest.warns(RuntimeWarning, match="could not compile a kernel .*sin x1.*XLA runs that program") as caught:
    line = sys._getframe().f_lineno + 1
    y = tnp.sin(x) * 3 + 1.5
    np.asarray(y)
  assert caught[0].filename == _FILE and caught[0].lineno == line
  assert_like_jax(y, jnp.sin(x) * 3 + 1.5)
  # the run that was rescued, and every later run of that program, is counted as XLA's in the report
  z = tnp.sin(x) * 3 + 1.5
  np.asarray(z)
  ran = tinyjax.report().primitives - before
  assert ran[("xla", "sin")] == 2 and not any(backend == "tinygrad" for backend, _ in ran), ran


def test_other_runtime_errors_are_not_rescued(monkeypatch):
  _failing_compiler(monkeypatch, "other")
  y = tnp.tan(np.linspace(-1, 1, 27, dtype=np.float32)) + 2  # NB: a shape no other test uses
  with pytest.raises(RuntimeError, match="out of memory"):
    np.asarray(y)


def test_kernel_compile_failure_raises_under_fallback_error(monkeypatch):
  monkeypatch.setenv("TINYJAX_FALLBACK", "error")
  _failing_compiler(monkeypatch)
  x = np.linspace(-2, 2, 23, dtype=np.float32)  # NB: a shape no other test uses: its kernels are not compiled yet
  flushes = tinyjax.report().primitives.copy()  # NB: a copy: the report counts on
  line = sys._getframe().f_lineno + 1
  y = tnp.cos(x) - 4
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # no rescue, no warning
    with pytest.raises(tinyjax.FallbackError, match="could not compile a kernel") as info:
      np.asarray(y)
  message = str(info.value)
  assert "cos x1" in message and "sub x1" in message and f"{_FILE}:{line}" in message
  assert "refused by the test" in message and "TINYJAX_FALLBACK=error" in message
  assert not any(backend == "xla" for backend, _ in tinyjax.report().primitives - flushes)
  monkeypatch.undo()
  assert_like_jax(y, jnp.cos(x) - 4)  # the value is still pending: with a working compiler, it computes
