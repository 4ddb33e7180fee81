"""Models end to end: flax + optax under tinyjax.jit against jax.jit, steady-state memory and compiles, and the
examples (the seed notebook's cells among them) run as scripts."""
import pathlib
import re
import runpy

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

import tinyjax
import tinyjax.numpy as tnp

EXAMPLES = pathlib.Path(__file__).parent.parent / "examples"


class MLP(nn.Module):
  @nn.compact
  def __call__(self, x):
    return nn.Dense(1)(nn.relu(nn.Dense(16)(x)))


def _training(jit):
  model, optimizer = MLP(), optax.adam(1e-2)
  rng = np.random.default_rng(0)
  x = rng.normal(size=(32, 4)).astype(np.float32)
  y = np.cos(x).sum(1, keepdims=True).astype(np.float32)
  params = model.init(jax.random.key(0), x[:1])

  @jit
  def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((model.apply(p, x) - y) ** 2))(params)
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, loss
  return train_step, params, optimizer.init(params), x, y


def test_flax_optax_training_matches_jax_jit():
  results = {}
  for name, jit in (("jax", jax.jit), ("tinyjax", tinyjax.jit)):
    step, params, opt_state, x, y = _training(jit)
    for _ in range(30):
      params, opt_state, loss = step(params, opt_state, x, y)
    results[name] = (params, loss)
  for actual, expected in zip(jax.tree_util.tree_leaves(results["tinyjax"]), jax.tree_util.tree_leaves(results["jax"])):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=2e-4, atol=2e-5)


def test_training_loop_compiles_once_and_keeps_memory_flat():
  from tinygrad.helpers import GlobalCounters
  step, params, opt_state, x, y = _training(tinyjax.jit)
  x, y = tnp.asarray(x), tnp.asarray(y)
  for _ in range(5):
    params, opt_state, loss = step(params, opt_state, x, y)
  compiles, memory = tinyjax.report().compiles, GlobalCounters.mem_used
  for _ in range(95):
    params, opt_state, loss = step(params, opt_state, x, y)
  float(loss)
  assert tinyjax.report().compiles == compiles
  assert GlobalCounters.mem_used <= memory * 1.05 + 4096, (memory, GlobalCounters.mem_used)


def test_model_apply_accepts_tinyjax_arrays_in_eager_mode():
  model = MLP()
  x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
  params = model.init(jax.random.key(0), x)
  tinyjax_params = jax.tree_util.tree_map(tnp.asarray, params)
  np.testing.assert_allclose(np.asarray(model.apply(tinyjax_params, tnp.asarray(x))), model.apply(params, x),
                             rtol=1e-6)


@pytest.mark.parametrize("script", ["quickstart.py", "seed_notebook.py", "mlp_optax.py", "transformer_block.py"])
def test_example_runs(script, monkeypatch, capsys):
  """Each example as `tinyjax run` runs it (patch mode on): the plain-JAX ones compute on tinygrad and print the
  numbers they print on JAX, to the digits they print."""
  from tinyjax.core.report import collecting
  monkeypatch.setenv("TINYJAX_SEED_BATCH", "16")
  monkeypatch.setenv("TINYJAX_EXAMPLE_STEPS", "10")
  if script != "seed_notebook.py":  # the seed prints its timings; it compares its outputs with jax.jit's itself
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    expected = _printed_numbers(capsys.readouterr().out)
  with tinyjax.patch(), collecting() as ran:
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")
  out = capsys.readouterr().out
  assert out.strip()
  if script != "seed_notebook.py":  # the seed's `tiny` runs on tinygrad Tensors directly, outside the report
    native, total = ran.native_share
    assert total and native >= 0.95 * total, str(ran)
    actual = _printed_numbers(out)
    assert len(actual) == len(expected) > 0 and np.allclose(actual, expected, rtol=1e-5, atol=1e-4), (out, expected)


def _printed_numbers(text: str) -> list[float]:
  """The numbers printed, but on the line that names what computed them (tinyjax or jaxlib)."""
  return [float(n) for line in text.splitlines() if not line.startswith("computed by")
          for n in re.findall(r"-?\d+(?:\.\d*)?(?:e[-+]?\d+)?", line)]
