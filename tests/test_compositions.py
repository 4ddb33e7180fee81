"""Random compositions of transformations, run by JAX and by tinyjax (explicitly and under patch mode), compared.

A program is a stack of layers over a base function of a vector x (shape (N,)) that returns a vector: each layer
wraps the function below it in a transformation (jit, grad, vmap, jacfwd, jacrev, checkpoint) or a control-flow
primitive (scan, cond, while), and each layer closes over constants of its own, as a NumPy array or as an array of
the namespace under test (`jnp.asarray(data)`: a tinyjax Array on tinyjax). The same recipe is built once with
`jax` (the oracle) and once with tinyjax's namespaces, or with `jax` under `tinyjax.patch()`.

Seeded: the suite runs programs 0..COMPOSITIONS_IN_SUITE-1 per mode; the longer run (docs/guarantees.md) is
`TINYJAX_COMPOSITIONS=N [TINYJAX_COMPOSITIONS_FROM=S] bash scripts/test.sh tests/test_compositions.py`, programs
S..S+N-1 (a failing program's seed is its test id).
"""
import contextlib
import os
import random
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
from oracle import assert_like_jax, native

N = 4
COMPOSITIONS_IN_SUITE = 24
# `*_closure`: the control-flow primitive's operands are constants; the function's input reaches its body only as a
# value the body closes over (inside a transformation: a tracer of an outer trace)
LAYERS = ("jit", "grad", "vmap", "jacfwd", "jacrev", "checkpoint", "scan", "cond", "while", "scan_closure",
          "cond_closure", "while_closure")


def _namespace(module) -> types.SimpleNamespace:
  """What a program is built from: the transformations, numpy and lax of `jax`, or of `tinyjax`."""
  return types.SimpleNamespace(jit=module.jit, grad=module.grad, vmap=module.vmap, jacfwd=module.jacfwd,
                               jacrev=module.jacrev, checkpoint=module.checkpoint, device_put=module.device_put,
                               np=module.numpy, lax=module.lax)


def _constant(T, data: np.ndarray, closed_as: str):
  return data if closed_as == "numpy" else T.np.asarray(data)


def _layer(T, name: str, f, const):
  """`name` applied to the vector function f, closing over `const` (shape (N,) or (3, N))."""
  if name == "jit":
    return T.jit(f)
  if name == "grad":
    return T.grad(lambda x: (f(x) * const[0]).sum())
  if name == "vmap":
    return lambda x: T.vmap(f)(T.np.stack([x, x * const[0]])).sum(0)
  if name == "jacfwd":
    return lambda x: T.jacfwd(f)(x) @ const[0]
  if name == "jacrev":
    return lambda x: const[1] @ T.jacrev(f)(x)
  if name == "checkpoint":
    return T.checkpoint(f)
  if name == "scan":
    return lambda x: T.lax.scan(lambda h, c: (0.5 * f(h) + c * h, (h * c).sum()), x, const)[0]
  if name == "cond":
    return lambda x: T.lax.cond(x.sum() > const[0, 0], f, lambda y: y * const[1], x)
  if name == "while":
    return lambda x: T.lax.fori_loop(0, 2, lambda i, h: 0.5 * f(h) + const[2] * h, x)
  if name == "scan_closure":
    return lambda x: T.lax.scan(lambda h, c: (0.5 * f(h + x) + c, None), T.np.zeros(N), const)[0]
  if name == "cond_closure":
    return lambda x: T.lax.cond(const[0, 0] > 0, lambda c: f(c * x), lambda c: c + x, const[1])
  if name == "while_closure":
    return lambda x: T.lax.fori_loop(0, 2, lambda i, h: 0.5 * f(h * x), const[2])
  raise ValueError(name)


def _recipe(seed: int) -> dict:
  rng = random.Random(seed)
  depth = rng.randint(1, 3)
  return {"layers": [rng.choice(LAYERS) for _ in range(depth)],
          "closed_as": [rng.choice(("numpy", "array")) for _ in range(depth + 1)],
          "seed": seed}


def _program(T, recipe: dict):
  data = np.random.RandomState(recipe["seed"])
  consts = [_constant(T, data.uniform(-1, 1, (3, N)).astype(np.float32), how) for how in recipe["closed_as"]]
  base_const = consts[0]
  f = lambda x: T.np.tanh(x * base_const[0]) + T.np.sin(x) * base_const[1]  # noqa: E731
  for name, const in zip(recipe["layers"], consts[1:]):
    f = _layer(T, name, f, const)
  return f, data.uniform(-1, 1, N).astype(np.float32)


# The programs issue 20 reported wrong or failing, as `build(T)` -> (function, args) over a namespace T
_DATA = np.random.RandomState(20).uniform(-1, 1, (4, 4, 16)).astype(np.float32)
_W = np.linspace(-0.9, 0.8, 16, dtype=np.float32)
_RNN_XS = np.random.RandomState(21).uniform(-1, 1, (5, 3, 8)).astype(np.float32)
_RNN_W = (np.random.RandomState(22).uniform(-1, 1, (2, 8, 8)) * 0.5).astype(np.float32)


def _scan_over_data(T, xs):
  return lambda W: T.lax.scan(lambda h, x: (h * W[0] + x, None), T.np.zeros((4, 16)), xs)[0].sum()


def _rnn_loss(T, W, U, xs):
  def step(h, x):
    h = T.np.tanh(h @ W + x @ U)
    return h, h.sum()
  h, ys = T.lax.scan(step, T.np.zeros((3, 8)), xs)
  return (h ** 2).sum() + ys.sum()


def _sum_logistic(T):
  return lambda x: T.np.sum(1.0 / (1.0 + T.np.exp(-x)))


REPORTED = {
  "scan_grad_numpy_data": lambda T: (T.grad(_scan_over_data(T, _DATA)), (_W,)),
  "scan_grad_array_data": lambda T: (T.grad(_scan_over_data(T, T.np.asarray(_DATA))), (_W,)),
  "scan_jit_grad_array_data": lambda T: (T.jit(T.grad(_scan_over_data(T, T.np.asarray(_DATA)))), (_W,)),
  "rnn_grad_inputs_closed_over": lambda T: (
    T.grad(lambda W, U: _rnn_loss(T, W, U, T.np.asarray(_RNN_XS)), argnums=(0, 1)), tuple(_RNN_W)),
  "rnn_jit_grad_numpy_inputs": lambda T: (
    T.jit(T.grad(lambda W, U: _rnn_loss(T, W, U, _RNN_XS), argnums=(0, 1))), tuple(_RNN_W)),
  "quickstart_grad_jit_grad_jit_grad": lambda T: (
    T.grad(T.jit(T.grad(T.jit(T.grad(_sum_logistic(T)))))), (1.0,)),
  "quickstart_jit_jacfwd_jacrev": lambda T: (T.jit(T.jacfwd(T.jacrev(_sum_logistic(T)))), (np.arange(3.0, dtype=np.float32),)),
  # JAX's testScatterGradSymbolicZeroUpdate: device_put of a tracer
  "grad_of_device_put_then_scatter": lambda T: (
    T.grad(lambda x: (T.device_put(x).at[np.diag_indices(4)].set(np.arange(4.0, dtype=np.float32)) * x).sum()),
    (_RNN_W[0, :4, :4],)),
  "jit_grad_jit_of_jit": lambda T: (T.jit(T.grad(T.jit(_sum_logistic(T)))), (np.float32(0.5),)),
}


@pytest.mark.device  # NB: every case on every device leg (conftest's thinning keeps one in 2k of the others)
@pytest.mark.parametrize("mode", ["explicit", "patch"])
@pytest.mark.parametrize("name", sorted(REPORTED))
def test_reported_programs(name, mode):
  f, args = REPORTED[name](_namespace(jax))
  expected = f(*args)
  with (tinyjax.patch() if mode == "patch" else contextlib.nullcontext()), native():
    f, args = REPORTED[name](_namespace(jax if mode == "patch" else tinyjax))
    actual = f(*args)
  assert_like_jax(actual, expected, rtol=2e-5, atol=1e-6)


def _seeds() -> list[int]:
  first = int(os.environ.get("TINYJAX_COMPOSITIONS_FROM", 0))
  return list(range(first, first + int(os.environ.get("TINYJAX_COMPOSITIONS", COMPOSITIONS_IN_SUITE))))


def _check(recipe, build_tinyjax):
  f, x = _program(_namespace(jax), recipe)
  expected = f(x)
  actual = build_tinyjax(recipe, x)
  # NB: derivatives of derivatives compound float32 rounding; the atol covers values that cancel to near zero
  assert_like_jax(actual, expected, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("seed", _seeds())
def test_explicit_api(seed):
  recipe = _recipe(seed)

  def run(recipe, x):
    f, _ = _program(_namespace(tinyjax), recipe)
    with native():
      return f(tnp.asarray(x))
  _check(recipe, run)


@pytest.mark.parametrize("seed", _seeds())
def test_patch_mode(seed):
  recipe = _recipe(seed)

  def run(recipe, x):
    with tinyjax.patch(), native():
      f, _ = _program(_namespace(jax), recipe)
      out = f(jnp.asarray(x))
    assert isinstance(out, tinyjax.Array), "the patched program did not run on tinyjax"
    return out
  _check(recipe, run)


def test_an_output_that_is_an_input_is_that_array():
  """As in JAX (its test_cond_vmap_forwarding_doesnt_promote): a value passed through unchanged keeps its identity."""
  def f(x, y):
    return jax.lax.cond(x < 3, lambda x, y: (x * 2, y), lambda x, y: (x * 3, y), x, y)
  for T, make in ((tinyjax, tnp.array), (jax, lambda v: jnp.array(v))):  # jnp.array: read while patched
    with tinyjax.patch() if T is jax else contextlib.nullcontext():
      x, y = make(np.arange(3)), make(3.0)
      x2, y2 = T.vmap(f, in_axes=(0, None), out_axes=(0, None))(x, y)
      assert isinstance(y2, tinyjax.Array) and y2 is y and x2 is not x


def test_a_vjp_function_has_jaxs_attributes():
  """JAX's vjp function is a Partial whose `args_res` are the residuals (its test_scan_vjp_forwards_extensive_residuals)."""
  def cumprod(x):
    return jax.lax.scan(lambda s, x: (x * s, s), jnp.ones((2, 3), jnp.float32), x)
  x = tnp.asarray(np.random.RandomState(0).randn(4, 2, 3).astype(np.float32))
  _, vjp_fun = tinyjax.vjp(cumprod, x)
  ext_res, = vjp_fun.args_res
  assert ext_res is x


def test_platform_dependent_takes_the_devices_branch():
  x = np.arange(3, dtype=np.float32)
  f = lambda x: jax.lax.platform_dependent(x, cpu=jnp.sin, default=jnp.cos)  # noqa: E731
  with native():
    actual = tinyjax.jit(f)(tnp.asarray(x))
  # NB: the CPU device is JAX's platform "cpu"; CL and WEBGPU are none of JAX's platforms: the default branch
  expected = jnp.sin(x) if os.environ["TINYJAX_DEVICE"] == "CPU" else jnp.cos(x)
  assert_like_jax(actual, expected)
