"""TINYJAX_BACKEND=auto: each program runs on the backend measured faster for it, the choice is remembered on disk
and said in the report, and values made by one backend feed programs the other runs.
"""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
from oracle import assert_like_jax
from tinyjax.choosing import auto, selection


@pytest.fixture
def auto_backend(tmp_path, monkeypatch):
  """TINYJAX_BACKEND=auto with its own choices file; returns the file's path."""
  tinyjax.flush()
  path = tmp_path / "auto.json"
  monkeypatch.setenv("TINYJAX_AUTO_CACHE", str(path))
  tinyjax.config.update("backend", "auto")
  monkeypatch.setattr(selection, "_backends", {})  # fresh backends: no program compiled or choice read before
  yield path
  tinyjax.flush()


def force(monkeypatch, *backends: str):
  """Make the trials choose `backends` in turn, the last one from then on (their outputs are those of a real run on
  the chosen backend)."""
  real, turns = auto.AutoProgram._trial, iter(backends)

  def trial(self, inputs):
    choice, _, _ = real(self, inputs)
    backend = next(turns, backends[-1])
    outs, placement = self.candidates[backend].run(self.auto.moved(inputs, getattr(self.auto, backend)))
    return dict(choice, backend=backend), outs, placement
  monkeypatch.setattr(auto.AutoProgram, "_trial", trial)


def program(np_, x, y):
  return np_.tanh(x @ y).sum(0) / 3.0 + np_.float32(1)


X = np.random.default_rng(0).normal(size=(8, 5)).astype(np.float32)
Y = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)


def test_auto_measures_both_and_remembers(auto_backend):
  result = tinyjax.explain(lambda: program(tnp, tnp.asarray(X), tnp.asarray(Y)))()
  entries = json.loads(auto_backend.read_text())
  assert len(entries) == 1
  (choice,) = entries.values()
  assert choice["backend"] in ("tinygrad", "xla") and choice["tinygrad_ms"] > 0 and choice["xla_ms"] > 0
  faster = min(("tinygrad", "xla"), key=lambda b: choice[f"{b}_ms"])
  assert choice["backend"] == faster
  (reason,) = result.choices
  assert f"on {faster}" in reason and "TINYJAX_AUTO_CACHE" in reason
  assert set(result.segments) == {faster}


@pytest.mark.parametrize("backend", ["tinygrad", "xla"])
def test_auto_results_match_jax(auto_backend, monkeypatch, backend):
  force(monkeypatch, backend)
  expected = program(jnp, X, Y)
  assert_like_jax(program(tnp, tnp.asarray(X), tnp.asarray(Y)), expected)
  assert_like_jax(program(tnp, tnp.asarray(X), tnp.asarray(Y)), expected)  # the second run: no trial


def test_a_remembered_choice_skips_the_trial(auto_backend, monkeypatch):
  force(monkeypatch, "xla")
  program(tnp, tnp.asarray(X), tnp.asarray(Y)).block_until_ready()
  # a new process: a new backend reads the file, and must not measure again
  monkeypatch.setattr(selection, "_backends", {})
  monkeypatch.setattr(auto.AutoProgram, "_trial", lambda *a: pytest.fail("measured a remembered program again"))
  result = tinyjax.explain(lambda: program(tnp, tnp.asarray(X), tnp.asarray(Y)))()
  assert set(result.segments) == {"xla"}


def test_values_cross_between_backends(auto_backend, monkeypatch):
  """A value made on XLA feeds a program run on tinygrad, and back, with JAX's results."""
  force(monkeypatch, "xla", "tinygrad", "xla")
  x = tnp.asarray(X)
  a = tnp.sin(x) * 2.0
  a.block_until_ready()
  b = (a @ tnp.asarray(Y)).astype(jnp.int32)
  b.block_until_ready()
  c = b.sum(0) - 7
  expected_a = jnp.sin(X) * 2.0
  expected_b = (expected_a @ Y).astype(jnp.int32)
  assert_like_jax((a, b, c), (expected_a, expected_b, expected_b.sum(0) - 7))


def test_unwritable_cache_still_runs(tmp_path, monkeypatch):
  blocker = tmp_path / "file"
  blocker.write_text("")
  monkeypatch.setenv("TINYJAX_AUTO_CACHE", str(blocker / "auto.json"))  # a path under a file: cannot be made
  monkeypatch.setattr(selection, "_backends", {})
  tinyjax.config.update("backend", "auto")
  assert_like_jax(program(tnp, tnp.asarray(X), tnp.asarray(Y)), program(jnp, X, Y))
  assert blocker.read_text() == ""
