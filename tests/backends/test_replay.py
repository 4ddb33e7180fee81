"""Replays (tinyjax/backends/tinygrad/machinery/replay.py): a jitted program run plainly, captured by TinyJit,
then launched by tinyjax's own launcher."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
from helpers import default_settings  # noqa: F401  (the fixture, for every test here)
from oracle import assert_like_jax

pytestmark = pytest.mark.usefixtures("default_settings")


def test_replays_launch_the_captured_kernels_with_jaxs_results(monkeypatch):
  """A jitted program is run plainly, captured, then replayed by tinyjax's launcher (backends/tinygrad/replay.py):
  every call, with new inputs each time, gives jax.jit's outputs (a reshaped one, a reduction, an input passed
  through), and the replays go through the launcher, not tinygrad's run_linear (which a capture of anything but
  plain kernels would fall back to)."""
  from tinyjax.backends.tinygrad.machinery import replay

  def f(x, y):
    return (x * y + 1.0).reshape(2, 4), jnp.sin(x).sum(), x
  jitted = tinyjax.jit(f)
  y = np.full(8, 2.0, np.float32)
  replayed_by_tinygrad = []
  for step in range(5):
    if step == 2:  # captured at the second call: the later calls are replays
      run_linear = replay.run_linear
      monkeypatch.setattr(replay, "run_linear", lambda *a, **k: replayed_by_tinygrad.append(a) or run_linear(*a, **k))
    x = np.arange(8, dtype=np.float32) - step
    for ours, theirs in zip(jitted(tnp.asarray(x), tnp.asarray(y)), jax.jit(f)(x, y), strict=True):
      assert_like_jax(ours, theirs, rtol=1e-6)
  assert not replayed_by_tinygrad, "the replays ran through tinygrad's run_linear, not the launcher"
