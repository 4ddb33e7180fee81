"""Patch mode: unmodified JAX programs run on tinygrad under `tinyjax run`, and tinyjax.patch() restores JAX exactly.

The programs in tests/programs/ are plain JAX (they never import tinyjax). Each runs twice in a subprocess, as
`python PROGRAM` and as `tinyjax run PROGRAM --device DEVICE --report` on the run's device: the same stdout, and the
report shows (nearly) all equation runs on tinygrad.
"""
import importlib
import os
import pathlib
import re
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax._src import api as jax_api
from jax._src import core as jax_core
from jax._src import dispatch as jax_dispatch

import tinyjax
from tinyjax import patching as patch_module
from tinyjax.cli.main import app
from tinyjax.core.report import collecting
from oracle import assert_like_jax

PROGRAMS = pathlib.Path(__file__).parent / "programs"
# NB: the first is the one every device leg runs (conftest.py keeps a test function's first case)
NAMES = ("flax_optax_cnn", "jitted_loop", "eager_numpy", "random_vmap_scan")
NATIVE_SHARE = re.compile(r"^(\d+) of (\d+) equation runs native", re.MULTILINE)


@pytest.fixture(scope="module")
def runs(request):
  """program -> (by python, by tinyjax on the run's device), for the programs this run selected, all started at once:
  each pays for importing JAX (and tinygrad)."""
  device = os.environ["TINYJAX_DEVICE"]  # the run's (tests/conftest.py)
  names = [item.callspec.params["name"] for item in request.session.items
           if item.parent is request.node and item.originalname == "test_unmodified_program_runs_on_tinygrad"]
  commands = {(name, "python"): [sys.executable, str(PROGRAMS / f"{name}.py")] for name in names}
  commands.update({(name, "tinyjax"): [sys.executable, "-m", "tinyjax.cli.main", "run", str(PROGRAMS / f"{name}.py"),
                                       "--device", device, "--report"] for name in names})
  started = {case: subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for case, command in commands.items()}
  done = {}
  for case, process in started.items():
    stdout, stderr = process.communicate(timeout=900)
    done[case] = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
  return done


def _native_share(stderr: str) -> float:
  found = NATIVE_SHARE.search(stderr)
  assert found, stderr
  native, total = map(int, found.groups())
  assert total > 0
  return native / total


@pytest.mark.parametrize("name", NAMES)
def test_unmodified_program_runs_on_tinygrad(runs, name):
  by_python, by_tinyjax = runs[name, "python"], runs[name, "tinyjax"]
  assert by_python.returncode == 0, by_python.stderr
  assert by_tinyjax.returncode == 0, by_tinyjax.stderr
  assert by_tinyjax.stdout == by_python.stdout
  assert "tinyjax report: " in by_tinyjax.stderr, by_tinyjax.stderr  # NB: POCL prints its compiler warnings
  assert _native_share(by_tinyjax.stderr) >= 0.95, by_tinyjax.stderr


# --- tinyjax.patch() in this process


def _jax_state() -> dict:
  """Every public attribute of JAX's modules that the patch could touch, and jax.Array's own attributes."""
  modules = [importlib.import_module(f"jax.{name}") for name in patch_module._computing_modules()]  # imported first
  state = {("jax", name): getattr(jax, name) for name in dir(jax) if not name.startswith("_")}
  for name, module in zip(patch_module._computing_modules(), modules):
    state.update({(name, attr): value for attr, value in vars(module).items() if not attr.startswith("_")})
  state.update({("jax.Array", attr): value for attr, value in vars(jax.Array).items()})
  state["jax._src.api", "jit"] = jax_api.jit
  return state


def _loss(w, x):
  return jnp.sum(jnp.tanh(x @ w) ** 2)


def test_patch_is_a_context_manager_that_restores_jax_exactly_also_when_the_body_raises():
  before = _jax_state()
  with pytest.raises(ZeroDivisionError):
    with tinyjax.patch():
      assert jax.numpy.sin is not before["numpy", "sin"] and jax.jit is not before["jax", "jit"]
      captured_jit = jax.jit(_loss)
      captured_sin = jnp.sin
      assert isinstance(jnp.ones(3), tinyjax.Array)
      1 / 0
  after = _jax_state()
  assert after.keys() == before.keys()
  assert [key for key in before if after[key] is not before[key]] == []
  assert not patch_module.is_patched()
  # what was made or captured while patched is JAX's own behaviour again
  w, x = np.ones((3, 2), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
  result, expected = captured_jit(w, x), jax.jit(_loss)(w, x)
  assert type(result) is type(expected) and not isinstance(result, tinyjax.Array)
  np.testing.assert_array_equal(result, expected)
  assert type(captured_sin(x)) is type(jnp.sin(x)) and not isinstance(jnp.ones(3), tinyjax.Array)


def test_patch_as_a_function_until_undone_and_nested():
  original_jit = jax.jit
  outer = tinyjax.patch()
  try:
    with tinyjax.patch():
      assert patch_module.is_patched()
    assert patch_module.is_patched() and jax.jit is not original_jit  # the outer patch still holds
  finally:
    outer.undo()
  outer.undo()  # undoing twice changes nothing
  assert not patch_module.is_patched() and jax.jit is original_jit


def test_patched_functions_compute_on_tinyjax_with_jax_results():
  w = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
  x = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
  expected_loss, expected_grad = jax.jit(jax.value_and_grad(_loss))(w, x)
  expected_key = jax.random.normal(jax.random.key(1), (4,))
  with tinyjax.patch():
    loss, grad = jax.jit(jax.value_and_grad(_loss))(jnp.asarray(w), x)
    eager_grad = jax.grad(_loss)(w, x)
    normal = jax.random.normal(jax.random.key(1), (4,))
    put = jax.device_put(w, jax.devices()[0])
    index = jnp.r_[1:3, 7]
    total = jnp.add.reduce(jnp.arange(5.0))
    made = jnp.frompyfunc(jnp.add, 2, 1, identity=0).outer(jnp.arange(2.0), jnp.arange(3.0))  # a made ufunc
  for got in (loss, grad, eager_grad, normal, put, index, total, made):
    assert isinstance(got, tinyjax.Array)
  np.testing.assert_allclose(loss, expected_loss, rtol=1e-6)
  np.testing.assert_allclose(grad, expected_grad, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(eager_grad, expected_grad, rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(normal, expected_key)
  np.testing.assert_array_equal(put, w)
  np.testing.assert_array_equal(index, [1, 2, 7])
  assert float(total) == 10.0
  np.testing.assert_array_equal(made, np.add.outer(np.arange(2.0), np.arange(3.0)))


def _traced(x):
  """grad, vmap, scan and a custom_jvp function (jax.nn.relu) together."""
  def body(carry, row):
    return carry + jax.nn.relu(row).sum(), jnp.sin(row)
  total, rows = jax.lax.scan(body, 0.0, x)
  return jax.vmap(jax.grad(lambda r: jnp.sum(r ** 3)))(rows).sum() + total


def test_transformations_inside_trace_exactly_as_in_jax():
  x = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
  expected = str(jax.make_jaxpr(jax.grad(_traced))(x))
  with tinyjax.patch():
    assert str(jax.make_jaxpr(jax.grad(_traced))(x)) == expected
    got = jax.jit(jax.grad(_traced))(x)
  np.testing.assert_allclose(got, jax.grad(_traced)(x), rtol=1e-6)


def _scoped(x, n=2):
  with jax.named_scope("block"):
    with jax.ensure_compile_time_eval():
      c = jnp.sin(jnp.float32(1.0))  # computed while tracing, a constant of the jaxpr
    return jax.named_call(lambda y: jnp.cos(y) * n, name="inner")(x) * c


# what a patched jax.jit object is asked, as JAX's own is: (name, use of a jitted function `jit`)
_JIT_SURFACE = {
  "call": lambda jit: jit(_scoped)(np.arange(3.0, dtype=np.float32)),
  "static_argnums": lambda jit: jit(_scoped, static_argnums=1)(np.arange(3.0, dtype=np.float32), 3),
  "static_argnames": lambda jit: jit(_scoped, static_argnames="n")(np.arange(3.0, dtype=np.float32), n=3),
  "donate_argnums": lambda jit: jit(lambda a: a + 1, donate_argnums=0)(jnp.arange(3.0)),
  "lower": lambda jit: jit(_scoped).lower(np.arange(3.0, dtype=np.float32)).as_text(),
  "trace": lambda jit: str(jit(_scoped).trace(np.arange(3.0, dtype=np.float32)).jaxpr),
  "eval_shape": lambda jit: jit(_scoped).eval_shape(np.arange(3.0, dtype=np.float32)),
  "name_and_wrapped": lambda jit: (jit(_scoped).__name__, jit(_scoped).__wrapped__ is _scoped),
  "grad_of_jit": lambda jit: jax.grad(lambda x: jit(_scoped)(x).sum())(np.arange(3.0, dtype=np.float32)),
  "lower_of_jit_grad_jit": lambda jit: jit(jax.grad(lambda x: jit(_scoped)(x).sum())).lower(
    np.arange(3.0, dtype=np.float32)).as_text(),
  "vmap_of_jit": lambda jit: jax.vmap(jit(_scoped))(np.ones((2, 3), np.float32)),
  "same_array_twice": lambda jit: [jit(lambda a, b: a * b + 1)(y, y) for y in [jnp.arange(3.0)] * 3][-1],
}


@pytest.mark.parametrize("use", sorted(_JIT_SURFACE))
def test_a_patched_jit_is_jaxs_jit(use):
  """lower, trace, eval_shape, attributes, static and donated arguments, named_call / named_scope /
  ensure_compile_time_eval inside, and the object inside other transformations: as JAX's."""
  expected = _JIT_SURFACE[use](jax.jit)
  with tinyjax.patch():
    actual = _JIT_SURFACE[use](jax.jit)
  if isinstance(expected, jax.Array):
    assert isinstance(actual, tinyjax.Array)
    assert_like_jax(actual, expected, rtol=1e-6)
  else:
    assert actual == expected


def test_jit_where_jax_defines_it_is_patched_and_jaxs_runtime_keeps_its_own():
  """`jax._src.api.jit` (what JAX's test utilities and some libraries call) is patched as `jax.jit` is; JAX's
  runtime, which runs an eager primitive as a jitted call of it, keeps JAX's jit: a primitive without a tinygrad
  rule (tridiagonal_solve) still runs on XLA, eagerly and inside a patched jit, and pmap runs."""
  a = np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3) + 3 * np.eye(3, dtype=np.float32)
  dl, d, du = np.array([0, 1, 1], np.float32), np.array([4, 4, 4], np.float32), np.array([1, 1, 0], np.float32)
  b = np.arange(3, dtype=np.float32).reshape(3, 1)
  expected_inv = jax.jit(jnp.linalg.inv)(a)
  expected_solve = jax.jit(jax.lax.linalg.tridiagonal_solve)(dl, d, du, b)
  original_jit = jax_api.jit
  with tinyjax.patch():
    assert jax_api.jit is not original_jit
    inverse = jax_api.jit(jnp.linalg.inv)(a)
    primitive_callable = jax_dispatch.xla_primitive_callable(jax.lax.sin_p, accuracy=None)
    eager_solve = jax.lax.linalg.tridiagonal_solve(dl, d, du, b)
    jitted_solve = jax_api.jit(lambda *args: jax.lax.linalg.tridiagonal_solve(*args) * 2)(dl, d, du, b)
    mapped = jax.pmap(lambda x: x * 2)(a[None])  # pmap: jitted calls over a mesh, JAX's runtime
  assert jax_api.jit is original_jit
  assert isinstance(inverse, tinyjax.Array) and isinstance(jitted_solve, tinyjax.Array)
  assert_like_jax(inverse, expected_inv, rtol=1e-5, atol=1e-6)
  assert not isinstance(primitive_callable, patch_module._Jitted)
  assert_like_jax(eager_solve, expected_solve, rtol=1e-6)
  assert_like_jax(jitted_solve, expected_solve * 2, rtol=1e-6)
  np.testing.assert_array_equal(mapped, a[None] * 2)


def test_a_primitive_jax_applies_eagerly_runs_on_tinyjax():
  """A JAX function that is not a public name (`jax._src.lax.linalg.geqrf`), a primitive bound by hand, an element
  of a jax.Array made before the patch, on concrete values, run on tinyjax while patched, with JAX's dtype and weak
  type; the same call inside a patched jit gives the same values (JAX's tests compare the two), and the report
  counts it."""
  from jax._src.lax import lax as lax_internal
  from jax._src.lax import linalg as lax_linalg
  rng = np.random.default_rng(0)
  a, c = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
  q_and_c = lambda a, c: lax_linalg.ormqr(*lax_linalg.geqrf(a), c, left=True, transpose=True)
  made_before = jnp.arange(3.0)  # indexed eagerly, JAX binds dynamic_slice with NumPy integers in its parameters
  expected, expected_sum = q_and_c(a, c), lax_internal.add_p.bind(1.0, np.float32(2.0))
  expected_element = made_before[1]
  with collecting() as report, tinyjax.patch():
    eager = q_and_c(a, c)
    eager_sum = lax_internal.add_p.bind(1.0, np.float32(2.0))
    element = made_before[1]
    jitted = jax.jit(q_and_c)(a, c)
  assert all(isinstance(x, tinyjax.Array) for x in (eager, eager_sum, element))
  assert_like_jax(eager, expected, rtol=1e-5, atol=1e-6)
  assert_like_jax(eager_sum, expected_sum)
  assert_like_jax(element, expected_element)
  np.testing.assert_array_equal(eager, jitted)
  assert {"geqrf", "ormqr", "add"} <= {p for (backend, p) in report.primitives if backend != "xla"}
  assert isinstance(lax_internal.add_p.bind(1.0, 2.0), jax.Array)  # JAX's own again once unpatched


def _refs_updated(new_ref_of):
  """JAX's Ref guide: a reference updated by a jitted function that closes over it, twice, read eagerly and inside
  grad; a reference to a value made by a patched function, which must stay readable."""
  start = jnp.arange(3.0)
  ref = new_ref_of(start)

  @jax.jit
  def bump():
    ref[1] += 1.0
  bump()
  bump()

  def through_a_ref(x):
    inner = new_ref_of(0.0)
    inner[...] = jnp.sin(x)
    return inner[...]
  return np.asarray(ref[...]), np.asarray(start), jax.grad(through_a_ref)(1.0)


@pytest.mark.parametrize("new_ref", ["jax.new_ref", "jax.ref.new_ref", "jax._src.core.new_ref"])
def test_a_mutable_reference_is_jaxs_under_the_patch(new_ref):
  """Each spelling of new_ref (JAX's own tests use the core one, beneath jax.new_ref)."""
  of = lambda: {"jax.new_ref": jax.new_ref, "jax.ref.new_ref": jax.ref.new_ref,  # noqa: E731: read while patched
                "jax._src.core.new_ref": jax_core.new_ref}[new_ref]
  expected = _refs_updated(lambda x: of()(x))
  with tinyjax.patch():
    values, start, gradient = _refs_updated(lambda x: of()(x))
  np.testing.assert_array_equal(values, expected[0])
  np.testing.assert_array_equal(start, expected[1])  # the value the reference started from is untouched
  assert_like_jax(tinyjax.numpy.asarray(gradient), expected[2])


def test_reductions_keep_jax_identity_of_their_monoid():
  """lax.reduce_window(x, 0., lax.add, ...) is reduce_window_sum (differentiable) only if lax.add is JAX's own."""
  def pooled(x):
    return jax.lax.reduce_window(x, 0.0, jax.lax.add, (2,), (2,), "VALID").sum()
  with tinyjax.patch():
    np.testing.assert_array_equal(jax.grad(pooled)(jnp.arange(4.0)), np.ones(4, np.float32))


# --- tinyjax run


def _invoke(*args):
  from typer.testing import CliRunner
  return CliRunner().invoke(app, list(args))


PLAIN_JAX = "import jax.numpy as jnp\nprint(float(jnp.sin(jnp.arange(3.0)).sum()))\n"


def test_run_without_patch_says_nothing_ran_through_tinyjax(tmp_path):
  path = tmp_path / "plain.py"
  path.write_text(PLAIN_JAX)
  result = _invoke("run", "--no-patch", "--device", "CPU", str(path))
  assert result.exit_code == 0, result.output
  assert result.stdout == f"{float(jnp.sin(jnp.arange(3.0)).sum())}\n"
  assert "ran nothing through tinyjax (patch mode is off: --no-patch)" in result.stderr


def test_run_with_fallback_error_fails_at_the_users_line(tmp_path):
  path = tmp_path / "solve.py"
  path.write_text("import jax\nimport jax.numpy as jnp\n\nx = jnp.ones(8)\n"
                  "y = jax.lax.linalg.tridiagonal_solve(x * 0, x + 2, x * 0, x[:, None])\nprint(y)\n")
  result = _invoke("run", "--device", "CPU", "--fallback", "error", str(path))
  assert result.exit_code == 1
  assert f'File "{path}", line 5, in <module>' in result.stderr
  assert "FallbackError" in result.stderr and "tridiagonal_solve" in result.stderr
  assert not patch_module.is_patched()
