"""tinyjax is JAX to everything that touches it (tinyjax/identity.py): every public name of jax and of its modules,
tinyjax Arrays that JAX's own code accepts as jax.Arrays, and JAX's errors for the same call."""
import importlib
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
from tinyjax import identity

# The deliberate differences: names of jax whose tinyjax counterpart is not JAX's own object, and why.
DIFFERENCES = {
  "Array": "the class of tinyjax's lazy arrays, a subclass of jax.Array: isinstance(x, tinyjax.Array) tells which "
           "side made x (jax.numpy.ndarray, for annotations and checks, is jax.Array itself)",
  "config": "tinyjax's settings (TINYJAX_*); config.update passes jax_* names on to jax.config",
  "Device": "a device of the tinyjax backend (platform and tinygrad device string), not an XLA device",
  "devices": "the devices of the tinyjax backend (tinygrad's CPU, CL, ...), not XLA's",
  "default_device": "selects the tinyjax device (config.default_device), not XLA's",
  "device_put": "puts on a tinyjax device and returns a tinyjax Array",
  "device_get": "reads tinyjax Arrays without copying them to XLA first",
  "export": "a function written as a standalone C library or WebGPU module (tinyjax.standalone, issue 15), not JAX's "
            "serialization module, which stays jax.export",
  **{name: "JAX's transformation, run on the tinyjax backend (tinyjax.transforms)" for name in (
    "jit", "grad", "value_and_grad", "vmap", "jvp", "vjp", "linearize", "jacfwd", "jacrev", "jacobian",
    "hessian", "checkpoint", "remat", "custom_jvp", "custom_vjp", "make_jaxpr", "eval_shape")},
}


def jax_modules():
  """jax and every module reachable as an attribute of it (jax.numpy.linalg, jax.scipy.stats.norm, ...)."""
  found, todo = {}, [jax]
  while todo:
    module = todo.pop()
    found[module.__name__] = module
    for name in (n for n in dir(module) if not n.startswith("_")):
      value = getattr(module, name, None)
      if isinstance(value, types.ModuleType) and value.__name__ == f"{module.__name__}.{name}" \
         and value.__name__ not in found:
        todo.append(value)
  return found


JAX_MODULES = jax_modules()


def test_done_when_one_liner():
  code = ("import tinyjax; tinyjax.random.normal(tinyjax.random.key(0), (3,)); "
          "tinyjax.nn.relu(tinyjax.numpy.ones(2)); tinyjax.lax.div(tinyjax.numpy.arange(4), 2)")
  subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("jax_name", sorted(JAX_MODULES))
def test_every_public_name(jax_name):
  """tinyjax.<module> has each public name of jax.<module>: JAX's own object unless it computes (then a lazy
  function wrapping JAX's) or is a listed difference."""
  jax_module = JAX_MODULES[jax_name]
  name = jax_name.removeprefix("jax").removeprefix(".")
  if name.split(".")[0] in DIFFERENCES:  # tinyjax's own name (tinyjax.export, a function): no module of JAX's
    with pytest.raises(ModuleNotFoundError):
      importlib.import_module(f"tinyjax.{name}")
    assert getattr(tinyjax, name.split(".")[0]) is not jax_module
    return
  module = importlib.import_module(f"tinyjax.{name}" if name else "tinyjax")
  computing = name.split(".")[0] in identity.COMPUTING
  for attr in (a for a in dir(jax_module) if not a.startswith("_")):
    ours, theirs = getattr(module, attr), getattr(jax_module, attr)
    if not name and attr in DIFFERENCES:
      assert ours is not theirs, f"{attr} is listed as a difference but is JAX's own"
    elif isinstance(theirs, types.ModuleType) and theirs.__name__ == f"{jax_name}.{attr}":
      assert ours.__name__ == f"tinyjax.{name}.{attr}".replace("..", "."), attr
    elif ours is not theirs:
      assert computing, f"tinyjax.{name}.{attr} is not JAX's own"
      # a lazy function (or ufunc, index trick, initializer factory) that calls JAX's own
      assert getattr(ours, "__wrapped__", None) is theirs or getattr(ours, "_ufunc", None) is theirs \
          or getattr(ours, "_trick", None) is theirs, attr


def test_differences_are_jax_names():
  assert not set(DIFFERENCES) - set(dir(jax))
  assert set(tinyjax.OWN) & set(dir(jax)) == set(DIFFERENCES)


def test_modules_import_by_name():
  import tinyjax.lax.linalg
  import tinyjax.nn.initializers
  import tinyjax.scipy.stats.norm
  assert tinyjax.lax.linalg.cholesky.__wrapped__ is jax.lax.linalg.cholesky
  assert tinyjax.scipy.stats.norm.logpdf.__wrapped__ is jax.scipy.stats.norm.logpdf
  assert tinyjax.tree_util.tree_map is jax.tree_util.tree_map
  assert tnp.__array_api_version__ == jnp.__array_api_version__
  assert tnp.ndarray is jax.Array and tnp.float32 is jnp.float32


def test_computing_functions_are_lazy():
  for result in (tinyjax.image.resize(tnp.ones((2, 2)), (4, 4), "linear"), tinyjax.ops.segment_sum(
                 tnp.ones(4), tnp.array([0, 0, 1, 1]), 2), tinyjax.scipy.special.xlogy(tnp.ones(2), 2.0)):
    assert isinstance(result, tinyjax.Array)
  init = tinyjax.nn.initializers.constant(0.5)  # a factory: the initializer it makes is lazy
  np.testing.assert_array_equal(init(jax.random.key(0), (2,)), np.full(2, 0.5, np.float32))
  assert isinstance(init(jax.random.key(0), (2,)), tinyjax.Array)


# --- a tinyjax Array is a jax.Array

JAX_CALLS = {
  "jnp.sin": jnp.sin,
  "jnp.matmul": lambda x: jnp.matmul(x, x.T),
  "lax.add": lambda x: jax.lax.add(x, x),
  "jit": jax.jit(lambda x: x * 2 + 1),
  "grad": jax.grad(lambda x: (x ** 2).sum()),
  "vmap": jax.vmap(jnp.sum),
  "softmax": jax.nn.softmax,
  "device_put": jax.device_put,
  "device_get": jax.device_get,
  "block_until_ready": jax.block_until_ready,
  "tree_map": lambda x: jax.tree_util.tree_map(lambda a: a + 1, {"a": x}),
  "asarray": np.asarray,
}


@pytest.mark.parametrize("name", JAX_CALLS)
def test_jax_accepts_tinyjax_arrays(name):
  host = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
  fn = JAX_CALLS[name]
  expected, actual = fn(jnp.asarray(host)), fn(tnp.asarray(host))
  jax.tree_util.tree_map(lambda a, e: np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-6), actual,
                         expected)
  assert jax.tree_util.tree_map(lambda a: np.shape(a), actual) == jax.tree_util.tree_map(np.shape, expected)


def test_is_a_jax_array():
  x = tnp.ones(3)
  assert isinstance(x, jax.Array) and isinstance(x, tnp.ndarray)
  assert jax.typeof(x) == jax.typeof(jnp.ones(3))
  assert jax.typeof(tnp.asarray(2.0)).weak_type


def test_value_crosses_to_jax_once():
  """JAX's functions on the same tinyjax Array find it on JAX's device: no second host-to-device transfer."""
  x = tnp.arange(4.0) * 2
  jnp.sin(x)
  flushes = tinyjax.report().flushes
  with jax.transfer_guard_host_to_device("disallow"):
    np.testing.assert_allclose(jnp.sin(x), np.sin(np.arange(4.0) * 2), rtol=1e-6)
    jax.jit(jnp.cos)(x)
  assert tinyjax.report().flushes == flushes


# --- JAX's errors

ERROR_CALLS = {
  "reshape of a NumPy array": lambda m: m.reshape(np.ones(6), (4, 2)),
  "reshape of an array": lambda m: m.reshape(m.ones(6), (4, 2)),
  "incompatible shapes": lambda m: m.add(m.ones(2), m.ones(3)),
  "operator": lambda m: m.ones(2) + m.ones(3),
  "axis out of range": lambda m: m.sum(m.ones(2), axis=3),
}


@pytest.mark.parametrize("name", ERROR_CALLS)
def test_errors_are_jax_errors(name):
  with pytest.raises(Exception) as expected:
    ERROR_CALLS[name](jnp)
  with pytest.raises(Exception) as actual:
    ERROR_CALLS[name](tnp)
    tinyjax.flush()
  assert type(actual.value) is type(expected.value)
  assert str(actual.value) == str(expected.value)
  assert "tinyjax" not in str(actual.value) and "_apply_method" not in str(actual.value)
