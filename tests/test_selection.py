"""Choosing the backend (tinyjax/choosing/selection.py) and its settings: the backend and device (environment,
config.update, default_device), reading the settings at first use, device_put / device_get, the errors for bad
settings and unknown devices, results that agree across backends, and the mixed fallback (segments, the
TINYJAX_FALLBACK policy, explain and report). The rescue, the kernel options and the replays are in tests/backends/.

The fallback tests force equations onto XLA with primitives from NOT_YET_NATIVE (tridiagonal_solve, schur).
"""
import os
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
import tinyjax.scipy.linalg
from helpers import default_settings  # noqa: F401  (the fixture, for every test here)
from oracle import assert_like_jax
from tinyjax.choosing import selection
from tinyjax.backends.tinygrad.not_native import NOT_YET_NATIVE

_FILE = os.path.abspath(__file__)
_SETTINGS = ["TINYJAX_BACKEND", "TINYJAX_DEVICE", "TINYJAX_FALLBACK"]
pytestmark = pytest.mark.usefixtures("default_settings")


def program(m, x, w):
  """A little of everything: elementwise, promotion with weak scalars, matmul, reductions, indexing, where."""
  h = m.tanh(x @ w + 0.5)
  return {"h": h, "sum": h.sum(axis=0), "max": m.max(h, axis=1, keepdims=True), "rows": h[::2, 1:],
          "where": m.where(h > 0, h, -1.0), "ints": (m.arange(6).reshape(2, 3) * 3) % 4}


_X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
_W = np.linspace(-2, 2, 6, dtype=np.float32).reshape(3, 2)


def _platform(array):
  return array.device.platform


# --- choosing the backend

@pytest.mark.parametrize("backend", ["tinygrad", "xla"])
def test_backends_agree_with_jax(monkeypatch, backend):
  monkeypatch.setenv("TINYJAX_BACKEND", backend)
  actual = program(tnp, _X, _W)
  tinyjax.flush()
  assert {_platform(a) for a in actual.values()} == {backend}
  assert_like_jax(actual, program(jnp, _X, _W), rtol=1e-5)


def test_config_update_selects_the_backend(monkeypatch):
  monkeypatch.setenv("TINYJAX_BACKEND", "tinygrad")
  tinyjax.config.update("backend", "xla")  # update wins over the environment
  x = tnp.arange(4.0) * 2
  assert _platform(x.block_until_ready()) == "xla"
  tinyjax.config.update("backend", "tinygrad")
  y = x + 1  # x is on XLA: it moves to tinygrad for this flush
  assert _platform(y.block_until_ready()) == "tinygrad"
  assert_like_jax([x, y], [jnp.arange(4.0) * 2, jnp.arange(4.0) * 2 + 1])


def test_config_update_of_none_unsets(monkeypatch):
  """update(name, None) gives the setting back to the environment (or the default); updated() lists what is set."""
  monkeypatch.setenv("TINYJAX_FALLBACK", "warn")
  tinyjax.config.update("fallback", "error")
  assert tinyjax.config.get("fallback") == "error" and tinyjax.config.updated()["fallback"] == "error"
  tinyjax.config.update("fallback", None)
  assert tinyjax.config.get("fallback") == "warn" and "fallback" not in tinyjax.config.updated()
  with pytest.raises(ValueError, match="unknown tinyjax setting"):
    tinyjax.config.update("no_such_setting", None)


def test_setting_applies_at_the_flush(monkeypatch):
  """The backend is the one in effect when the value is computed, not when the call was made."""
  x = tnp.arange(3) * 5
  monkeypatch.setenv("TINYJAX_BACKEND", "xla")
  assert _platform(x.block_until_ready()) == "xla"


@pytest.mark.parametrize("device", ["CPU", "cpu", "CLANG", "clang"])
def test_device_setting(monkeypatch, device):
  monkeypatch.setenv("TINYJAX_DEVICE", device)
  x = (tnp.arange(4) + 1).block_until_ready()
  assert x.device == tinyjax.Device("tinygrad", "CPU") and str(x.device) == "CPU"
  assert_like_jax(x, jnp.arange(4) + 1)
  tinyjax.config.update("device", device.lower())
  assert str((tnp.arange(4) + 2).block_until_ready().device) == "CPU"


def test_devices():
  devices = tinyjax.devices()
  assert devices and all(isinstance(d, tinyjax.Device) and d.platform == "tinygrad" for d in devices)
  assert "CPU" in {d.name for d in devices}
  assert repr(tinyjax.Device("tinygrad", "CPU")) == "TinygradDevice(CPU)"
  xla_devices = tinyjax.devices("xla")
  assert [d.name for d in xla_devices] == [f"{d.platform}:{d.id}" for d in jax.devices()]
  tinyjax.config.update("backend", "xla")
  assert tinyjax.devices() == xla_devices


def test_default_device():
  cpu = next(d for d in tinyjax.devices() if d.name == "CPU")
  with tinyjax.default_device(cpu):
    a = (tnp.arange(3) + 1).block_until_ready()
  assert a.device == cpu
  xla = tinyjax.devices("xla")[0]
  with tinyjax.default_device(xla):  # a device of another backend selects that backend
    b = (tnp.arange(3) + 2).block_until_ready()
    with tinyjax.default_device("cpu"):  # a device string keeps the backend in effect
      c = (tnp.arange(3) + 3).block_until_ready()
    with tinyjax.default_device("CLANG"):  # not an XLA device
      with pytest.raises(tinyjax.DeviceNotFoundError):
        (tnp.arange(3) + 4).block_until_ready()
  with tinyjax.default_device("clang"):
    d = (tnp.arange(3) + 5).block_until_ready()
  e = (tnp.arange(3) + 6).block_until_ready()  # back to the defaults
  assert [x.device for x in (b, c)] == [xla, xla] and str(d.device) == "CPU" and _platform(e) == "tinygrad"
  assert_like_jax([a, b, c, d, e], [jnp.arange(3) + k for k in (1, 2, 3, 5, 6)])


# --- device_put / device_get

@pytest.mark.parametrize("value", [np.arange(6, dtype=np.int16).reshape(2, 3), np.float32(2.5), 2.0, 3, True,
                                   [1, 2.0], {"a": np.ones(2), "b": (np.zeros(3, np.uint8),)}],
                         ids=["ndarray", "np_scalar", "float", "int", "bool", "list", "tree"])
def test_device_put_like_jax(value):
  placed = tinyjax.device_put(value)
  leaves = jax.tree_util.tree_leaves(placed, is_leaf=lambda x: isinstance(x, tinyjax.Array))
  assert all(isinstance(x, tinyjax.Array) and x.is_ready() for x in leaves)
  assert_like_jax(placed, jax.device_put(value))
  back = tinyjax.device_get(placed)
  assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(jax.device_get(jax.device_put(value)))
  for got, want in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(jax.device_get(jax.device_put(value)))):
    assert isinstance(got, np.ndarray) and got.dtype == np.asarray(want).dtype
    np.testing.assert_array_equal(got, want)


def test_device_put_to_a_device():
  xla = tinyjax.devices("xla")[0]
  on_xla = tinyjax.device_put(np.arange(3.0, dtype=np.float32), xla)
  assert on_xla.device == xla
  on_cpu = tinyjax.device_put(on_xla * 2, "CPU")  # a pending Array: computed, then moved
  assert on_cpu.device == tinyjax.Device("tinygrad", "CPU")
  again = tinyjax.device_put(on_cpu, tinyjax.devices()[0])
  assert_like_jax([on_xla, on_cpu, again, on_cpu + on_xla], [jnp.arange(3.0), jnp.arange(3.0) * 2,
                                                              jnp.arange(3.0) * 2, jnp.arange(3.0) * 3])
  assert tinyjax.device_get(3) == 3  # non-arrays pass through


# --- bad settings and unknown devices

@pytest.mark.parametrize("env,value", [("TINYJAX_BACKEND", "torch"), ("TINYJAX_FALLBACK", "ignore"),
                                       ("TINYJAX_BACKEND", "")])
def test_bad_setting_values_name_the_variable(monkeypatch, env, value):
  monkeypatch.setenv(env, value)
  with pytest.raises(ValueError, match=env):
    np.asarray(tnp.arange(3) + 1)
  name = env.removeprefix("TINYJAX_").lower()
  with pytest.raises(ValueError, match=env):
    tinyjax.config.update(name, value)


def test_unknown_setting_name():
  with pytest.raises(ValueError, match="unknown tinyjax setting"):
    tinyjax.config.update("bakend", "xla")


@pytest.mark.parametrize("backend,device", [("tinygrad", "NOPE"), ("tinygrad", "CUDA"), ("tinygrad", "METAL"),
                                            ("xla", "tpu")])
def test_unknown_or_unavailable_device(monkeypatch, backend, device):
  monkeypatch.setenv("TINYJAX_BACKEND", backend)
  monkeypatch.setenv("TINYJAX_DEVICE", device)
  x = tnp.arange(3) + 1
  if device in {d.name for d in tinyjax.devices(backend)}:  # a machine that has it (a GPU's): it computes there
    assert_like_jax(x, jnp.arange(3) + 1)
    assert x.device == tinyjax.Device(backend, device)
    return
  with pytest.raises(tinyjax.DeviceNotFoundError) as info:
    np.asarray(x)
  assert isinstance(info.value, RuntimeError)
  message = str(info.value)
  assert repr(device) in message and "available" in message
  assert all(d.name in message for d in tinyjax.devices(backend))
  monkeypatch.delenv("TINYJAX_DEVICE")
  assert_like_jax(x, jnp.arange(3) + 1)  # the value survived the failed flush
  with pytest.raises(tinyjax.DeviceNotFoundError, match=repr(device)):
    tinyjax.device_put(np.ones(2), device)


def test_a_device_failing_without_a_message_names_the_error(monkeypatch):
  """tinygrad's NV device, finding no GPU it can drive, raises a StopIteration with no message: the error says so."""
  from tinygrad import Device as TgDevice
  from tinyjax.backends.tinygrad.machinery import device
  def refuse(self, name):
    raise StopIteration
  monkeypatch.setattr(type(TgDevice), "__getitem__", refuse)
  monkeypatch.setattr(device, "available_devices", lambda: [])
  with pytest.raises(tinyjax.DeviceNotFoundError, match=r"'NV' is not available here \(StopIteration\); available: none"):
    device.opened("NV")


def _run_script(code: str, env: dict) -> str:
  env = {**{k: v for k, v in os.environ.items() if k not in _SETTINGS}, **env}
  result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=300)
  assert result.returncode == 0, result.stderr
  return result.stdout


def test_settings_are_read_at_first_use_not_at_import():
  out = _run_script("""
    import os
    import tinyjax, tinyjax.numpy as jnp, tinyjax.scipy.linalg
    os.environ["TINYJAX_BACKEND"] = "xla"  # after the import
    x = jnp.arange(3) + 1
    print(x.block_until_ready().device.platform)
    os.environ["TINYJAX_BACKEND"] = "tinygrad"
    os.environ["TINYJAX_DEVICE"] = "CLANG"
    print(str((x * 2).block_until_ready().device))
    os.environ["TINYJAX_FALLBACK"] = "error"
    try:
      tinyjax.scipy.linalg.schur(jnp.eye(2))
    except tinyjax.FallbackError as error:
      print("FallbackError", "schur" in str(error))
  """, {"TINYJAX_BACKEND": "tinygrad"})
  assert out.split() == ["xla", "CPU", "FallbackError", "True"]


def test_environment_before_start():
  out = _run_script("""
    import tinyjax.numpy as jnp
    print((jnp.arange(3) + 1).block_until_ready().device.platform)
  """, {"TINYJAX_BACKEND": "xla"})
  assert out.split() == ["xla"]


# --- the mixed fallback

def test_forced_fallbacks_are_not_native():
  """The primitives these tests use to force a fallback are in NOT_YET_NATIVE (and not in the rule table)."""
  from tinyjax.backends.tinygrad.table import RULES
  for name in ("tridiagonal_solve", "schur"):
    assert name in NOT_YET_NATIVE and name not in RULES


def _spectrum(m, x):
  return _tridiagonal(m, x) * 2  # a tridiagonal solve (one fallback equation), then a native mul


def _tridiagonal(m, x):
  lax = tinyjax.lax if m is tnp else jax.lax
  return lax.linalg.tridiagonal_solve(x * 0, x + 3, x * 0, x[:, None])[:, 0]


def test_consecutive_fallback_equations_form_one_segment():
  x = np.linspace(0, 1, 8, dtype=np.float32)
  report = tinyjax.explain(lambda: _spectrum(tnp, x))()
  assert report.segments == {"xla": 1, "tinygrad": 1}  # x's own operations are folded into the solve's inputs
  assert report.fallback_primitives == {"tridiagonal_solve": 1}
  assert report.bytes_crossed == 8 * 4 * 5  # the three diagonals and the right-hand side in, the solution out
  assert report.flushes == 1
  assert_like_jax(_spectrum(tnp, x), _spectrum(jnp, x), rtol=1e-5, atol=1e-6)


def test_segments_around_a_fallback():
  a = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]], np.float32)

  def fn(m):
    t, z = (tinyjax.scipy.linalg if m is tnp else jax.scipy.linalg).schur(m.asarray(a) * 2)
    return t + 1, m.abs(z)
  report = tinyjax.explain(lambda: fn(tnp))()
  # mul natively; schur on XLA; add and abs natively
  assert report.segments == {"tinygrad": 2, "xla": 1}
  assert report.fallback_primitives == {"schur": 1}
  assert report.bytes_crossed == 9 * 4 + (9 + 9) * 4
  assert "schur" in str(report) and "segments" in str(report)
  assert_like_jax(fn(tnp), fn(jnp), rtol=1e-5, atol=1e-5)


def _multiply_add_primitive(seen: list):
  """A user's primitive with no tinygrad rule (JAX's "JAX primitives" page): its abstract evaluation and lowering
  note what they are given in `seen`."""
  from jax.extend import core
  from jax.interpreters import mlir
  from jax._src.lib.mlir.dialects import hlo  # NB: as the page writes its lowering
  primitive = core.Primitive("multiply_add")
  primitive.def_impl(lambda x, y, z: x * y + z)

  def abstract_eval(x, y, z):
    seen.append(("abstract_eval", x.weak_type, y.weak_type, z.weak_type))
    return jax.core.ShapedArray(x.shape, x.dtype)

  def lowering(ctx, x, y, z):
    met = tuple((str(a.dtype), a.weak_type) for a in ctx.module_context.aval_to_ir_types_cache)  # in order
    seen.append(("lowering", *(a.weak_type for a in ctx.avals_in), met))
    return [hlo.AddOp(hlo.MulOp(x, y), z).result]
  primitive.def_abstract_eval(abstract_eval)
  mlir.register_lowering(primitive, lowering)
  return primitive


def test_an_equation_without_a_rule_is_evaluated_and_lowered_as_jaxs_jit_does_it():
  """The XLA segment is the jaxpr as traced: the primitive's abstract evaluation runs once (at the trace, as under
  JAX's jit; it ran again when the segment was traced a second time) and its lowering sees the traced avals, weak
  types included (it saw the buffers' strong types). Python scalars as jit's arguments are weakly typed, and are the
  segment's arguments, as they are jit's: the lowering meets their types before the result's (JAX's documentation
  prints that order: its primitives page)."""
  def run(jit, seen):
    primitive = _multiply_add_primitive(seen)
    return jit(lambda a, b: primitive.bind(a, a, b))(2.0, 10.0)

  jax_seen, tinyjax_seen = [], []
  expected = run(jax.jit, jax_seen)
  actual = run(tinyjax.jit, tinyjax_seen)
  assert_like_jax(actual, expected)
  assert jax_seen == [("abstract_eval", True, True, True),
                      ("lowering", True, True, True, (("float32", True), ("float32", False), ("int32", False)))]
  assert tinyjax_seen == jax_seen


def test_python_scalars_are_an_xla_segments_arguments_as_they_are_jits():
  """jit of a jvp of the primitive (with the page's JVP rule) at Python scalars: tinyjax folds the scalars into its
  program as constants; the XLA segment takes them as arguments, as JAX's jit does, so its lowering meets their weak
  types before the results' strong ones (the page prints that order; it met the strong type first)."""
  from jax.interpreters import ad

  def run(jit, seen):
    primitive = _multiply_add_primitive(seen)

    def value_and_jvp(values, tangents):
      x, y, z = values
      xt, yt, zt = (jax.lax.zeros_like_array(x) if type(t) is ad.Zero else t for t in tangents)
      return primitive.bind(x, y, z), primitive.bind(xt, y, primitive.bind(x, yt, zt))
    ad.primitive_jvps[primitive] = value_and_jvp
    return jit(lambda values, tangents: jax.jvp(lambda a, b: primitive.bind(a, a, b), values, tangents))(
      (2.0, 10.0), (1.0, 1.0))

  jax_seen, tinyjax_seen = [], []
  expected = run(jax.jit, jax_seen)
  actual = run(tinyjax.jit, tinyjax_seen)
  assert_like_jax(actual, expected)
  lowered = [entry[-1] for entry in jax_seen if entry[0] == "lowering"]
  assert lowered and all(met[0] == ("float32", True) for met in lowered), jax_seen
  assert tinyjax_seen == jax_seen


def test_report_accumulates_over_the_process():
  before = tinyjax.report().primitives[("xla", "tridiagonal_solve")]
  for _ in range(2):
    np.asarray(_spectrum(tnp, np.ones(8, np.float32)))
  assert tinyjax.report().primitives[("xla", "tridiagonal_solve")] == before + 2


def test_report_counts_every_run_when_read_now_and_then():
  """Runs are counted by placement and added up when the report is read: reads between runs, a scope open over some
  of them, and more distinct placements than are kept between two reads all give each run's counts."""
  from tinyjax.core import report as report_module
  step = tinyjax.jit(lambda x: tnp.sin(x) * 2 + 1)
  x = tnp.ones(4)
  step(x).block_until_ready()
  start = tinyjax.report()
  flushes, sines = start.flushes, start.primitives[("tinygrad", "sin")]
  with report_module.collecting() as scope:
    for i in range(5):
      step(x).block_until_ready()
      assert tinyjax.report().flushes == flushes + i + 1
  for _ in range(3):
    step(x).block_until_ready()
  assert tinyjax.report().primitives[("tinygrad", "sin")] == sines + 8 and scope.flushes == 5
  assert scope.primitives[("tinygrad", "sin")] == 5 and scope.primitives[("tinygrad", "mul")] == 5
  many = report_module.Report()
  from tinyjax.ir.backend import Placement
  for i in range(report_module._RUNS_KEPT * 2 + 3):  # a new placement at each run, as auto's
    many.record(Placement({("tinygrad", "add"): 2}, ("tinygrad",), 4, reason="chosen"))
  assert len(many._runs) <= report_module._RUNS_KEPT + 1
  total = report_module._RUNS_KEPT * 2 + 3
  assert (many.flushes, many.primitives, many.segments, many.bytes_crossed, many.choices) == (
    total, {("tinygrad", "add"): 2 * total}, {"tinygrad": total}, 4 * total, {"chosen": total})


def test_fallback_policy_xla_runs_silently(monkeypatch):
  monkeypatch.setattr(selection, "_warned", set())
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    result = _spectrum(tnp, np.ones(8, np.float32))
    np.asarray(result)


def test_fallback_policy_warn(monkeypatch):
  monkeypatch.setenv("TINYJAX_FALLBACK", "warn")
  monkeypatch.setattr(selection, "_warned", set())
  x = np.ones(8, np.float32)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result = _spectrum(tnp, x)
    again = _spectrum(tnp, x)  # once per primitive: no new warnings
  solve = [w for w in caught if "tridiagonal_solve" in str(w.message) and issubclass(w.category, RuntimeWarning)]
  assert len(solve) == 1
  assert solve[0].filename == _FILE and solve[0].lineno == _tridiagonal_line()  # the user's line, not tinyjax's
  assert "float32" in str(solve[0].message) and repr(selection.current_backend().device) in str(solve[0].message)
  assert len(caught) == len({str(w.message).split(" ")[0] for w in caught})  # one warning per primitive
  assert_like_jax([result, again], [_spectrum(jnp, x)] * 2, rtol=1e-5, atol=1e-6)


def _tridiagonal_line():
  return _tridiagonal.__code__.co_firstlineno + 2


def test_fallback_policy_warn_points_at_the_callers_line(monkeypatch):
  monkeypatch.setenv("TINYJAX_FALLBACK", "warn")
  monkeypatch.setattr(selection, "_warned", set())
  a = tnp.eye(3)
  with pytest.warns(RuntimeWarning, match="schur") as caught:
    line = sys._getframe().f_lineno + 1
    t, _ = tinyjax.scipy.linalg.schur(a)
  schur = [w for w in caught if str(w.message).startswith("schur")]
  assert len(schur) == 1 and schur[0].filename == _FILE and schur[0].lineno == line
  assert f"{_FILE}:{line}" in str(schur[0].message)
  assert_like_jax(t, jax.scipy.linalg.schur(jnp.eye(3))[0])


@pytest.mark.parametrize("how", ["env", "config"])
def test_fallback_policy_error(monkeypatch, how):
  if how == "env":
    monkeypatch.setenv("TINYJAX_FALLBACK", "error")
  else:
    tinyjax.config.update("fallback", "error")
  a = tnp.eye(3)
  flushes = tinyjax.report().flushes
  line = sys._getframe().f_lineno + 2
  with pytest.raises(tinyjax.FallbackError) as info:
    tinyjax.scipy.linalg.schur(a)
  message = str(info.value)
  assert isinstance(info.value, NotImplementedError)
  assert "schur" in message and "float32" in message and f"{_FILE}:{line}" in message
  assert repr(selection.current_backend().device) in message
  assert tinyjax.report().flushes == flushes  # raised at the call, before anything ran
  assert_like_jax(tnp.sin(a), jnp.sin(jnp.eye(3)))  # native calls still work


def test_fallback_policy_does_not_apply_on_xla(monkeypatch):
  monkeypatch.setenv("TINYJAX_FALLBACK", "error")
  monkeypatch.setenv("TINYJAX_BACKEND", "xla")
  w, _ = tnp.linalg.eigh(tnp.eye(2) * 3)
  report = tinyjax.explain(lambda: _spectrum(tnp, np.ones(8, np.float32)))()
  assert set(report.segments) == {"xla"} and report.bytes_crossed == 0
  assert_like_jax(w, jnp.linalg.eigh(jnp.eye(2) * 3)[0])
