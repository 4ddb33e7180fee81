"""A profile (tinyjax.profile, `tinyjax run --profile`, jax.profiler.trace under patch mode): Chrome's trace-event JSON
with every kernel tinygrad ran, on its device, with its compile, load and runs, and tinyjax's programs, XLA segments
and transfers around them."""
import collections
import glob
import gzip
import json
import textwrap

import numpy as np
import pytest
from typer.testing import CliRunner

import tinyjax
import tinyjax.numpy as tnp
from tinyjax.choosing.selection import current_backend
from tinyjax.cli.main import app
from tinyjax.core.report import collecting
from tinyjax.ir import profile

# shapes no other test computes with: every kernel of the profiled work is compiled (and loaded) inside the profile
ROWS, COLUMNS = 3, 37


def complete_events(path) -> list[dict]:
  """The trace's complete events, checked to be Chrome's trace-event JSON, with their row's name as `row`."""
  with (gzip.open if str(path).endswith(".gz") else open)(path, "rt") as file:
    trace = json.load(file)
  assert isinstance(trace["traceEvents"], list)
  rows = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
  events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
  for event in events:
    assert {"name", "ph", "ts", "dur", "pid", "tid"} <= event.keys(), event
    assert event["dur"] >= 0 and event["tid"] in rows, event
    event["row"] = rows[event["tid"]]
  return events


def named(events, category: str, name: str | None = None) -> list[dict]:
  return [e for e in events if e["cat"] == category and (name is None or e["name"] == name)]


def inside(event, span) -> bool:
  return span["ts"] <= event["ts"] and event["ts"] + event["dur"] <= span["ts"] + span["dur"] + 1e-3


def kernel_runs_tinygrad_reported(first: int) -> list[str]:
  """The kernels tinygrad ran itself since its event `first`, by name, as its own profiling (PROFILE) records them."""
  from tinygrad.helpers import ProfilePointEvent, cpu_events
  from tinygrad.uop.ops import to_function_name
  names = [to_function_name(e.arg["name"]) for e in cpu_events[first:]
           if isinstance(e, ProfilePointEvent) and e.name == "exec"]
  return [name for name in names if not name.startswith("copy")]  # a copy in or out: a transfer


def test_every_kernel_tinygrad_runs_is_in_the_profile(tmp_path):
  from tinygrad.helpers import Context, cpu_events
  device = current_backend().tg_device
  x = tnp.asarray(np.linspace(-1, 1, ROWS * COLUMNS, dtype=np.float32).reshape(ROWS, COLUMNS))
  step = tinyjax.jit(lambda a: (tnp.sin(a) * 2).sum(0) + tnp.cos(a).max())  # an elementwise kernel, reductions
  np.asarray(x * 2)  # the backend made (with the kernels probing its dtypes) before the profile
  path = tmp_path / "profile.json"
  with collecting() as ran, tinyjax.profile(path):
    with Context(PROFILE=1):
      first = len(cpu_events)
      eager = tnp.exp(x) * 2 + 1
      np.asarray(eager)
      for _ in range(2):  # a plain run, then the capture
        np.asarray(step(x))
      reported = kernel_runs_tinygrad_reported(first)
    for _ in range(2):  # replays by tinyjax's own launcher, which tinygrad's profiling does not see
      np.asarray(step(x))
  events = complete_events(path)

  runs = named(events, "run")
  ran_names = [e["name"] for e in runs]
  assert reported and set(ran_names) == set(reported)
  assert not collections.Counter(reported) - collections.Counter(ran_names)
  assert len(set(reported)) >= 2
  kernel_events = [e for e in events if e["cat"] in ("compile", "load", "run")]
  assert {e["args"]["device"] for e in kernel_events} == {device} and {e["row"] for e in kernel_events} == {device}
  for name in set(ran_names):
    assert [e for e in named(events, "compile", f"compile {name}") if e["dur"] > 0], name
    assert named(events, "load", f"load {name}"), name

  programs = named(events, "program", "run program")  # the eager calls' program(s), then the jitted calls'
  assert len(programs) == ran.flushes >= 5 and {p["args"]["backend"] for p in programs} == {"tinygrad"}
  assert len(named(events, "program", "compile program")) == ran.compiles >= 2
  assert all(any(inside(run, p) for p in programs) for run in runs)
  plain, _, *replays = programs[-4:]
  for replay in replays:  # the same kernels as the plain run, each waited for and timed
    assert [e["name"] for e in runs if inside(e, replay)] == [e["name"] for e in runs if inside(e, plain)]
  assert {e["args"]["timed_by"] for e in runs} <= {"device", "host"}
  reads = named(events, "transfer", "get")
  assert len(reads) == 5 and reads[0]["args"]["bytes"] == ROWS * COLUMNS * 4 and reads[0]["row"] == device


def test_an_xla_segment_is_in_its_program(tmp_path):
  d, b = tnp.asarray(np.full(COLUMNS, 4.0, np.float32)), tnp.asarray(np.ones((COLUMNS, 2), np.float32))
  off = tnp.ones(COLUMNS)
  path = tmp_path / "profile.json"
  with tinyjax.profile(path):
    solved = tinyjax.lax.linalg.tridiagonal_solve(off.at[0].set(0), d * 2, off.at[-1].set(0), b) + 1
  np.testing.assert_allclose(np.asarray(solved)[0], np.asarray(solved)[-1], rtol=1e-6)
  events = complete_events(path)
  segment, = named(events, "segment", "XLA segment")
  assert segment["args"]["primitives"] == "tridiagonal_solve" and segment["row"] == "tinyjax (MainThread)"
  program, = named(events, "program", "run program")
  assert inside(segment, program) and program["args"]["backend"] == "tinygrad"
  assert [e for e in named(events, "run") if inside(e, program) and e["ts"] > segment["ts"] + segment["dur"]]


def test_programs_on_xla(tmp_path, xla):
  path = tmp_path / "profile.json.gz"
  with tinyjax.profile(path):
    np.asarray(tnp.sin(tnp.asarray(np.ones((ROWS, COLUMNS), np.float32))) * 3)
  events = complete_events(path)
  programs = named(events, "program", "run program")
  assert programs and {p["args"]["backend"] for p in programs} == {"xla"} and not named(events, "run")
  transfers = named(events, "transfer")
  assert {e["name"] for e in transfers} == {"put", "get"} and {e["row"] for e in transfers} == {"XLA cpu:0"}
  assert named(events, "transfer", "get")[-1]["args"]["bytes"] == ROWS * COLUMNS * 4


def test_nothing_is_timed_outside_a_profile(tmp_path):
  from tinygrad import codegen
  from tinygrad.device import Compiled
  from tinygrad.engine import realize
  np.asarray(tnp.ones(ROWS) * 2)  # a kernel run: its program's class is among those timed while a profile records
  replaced = [(codegen, "do_to_program"), (Compiled, "runtime"),
              *((cls, "__call__") for cls in {type(p) for p in realize.runtime_cache.values()})]
  tinygrads = [owner.__dict__.get(name) for owner, name in replaced]
  with pytest.raises(ValueError, match="raised in the block"):
    with tinyjax.profile(tmp_path / "profile.json"):
      assert profile.active is not None
      assert all(owner.__dict__.get(name) is not own for (owner, name), own in zip(replaced, tinygrads))
      with pytest.raises(RuntimeError, match="one profile"):
        with tinyjax.profile(tmp_path / "another.json"):
          pass
      raise ValueError("raised in the block")
  assert profile.active is None
  assert [owner.__dict__.get(name) for owner, name in replaced] == tinygrads
  assert isinstance(complete_events(tmp_path / "profile.json"), list)  # written all the same


SCRIPT = f"""
import numpy as np
import tinyjax, tinyjax.numpy as jnp
x = jnp.asarray(np.ones(({ROWS}, {COLUMNS}), np.float32))
step = tinyjax.jit(lambda a: jnp.tanh(a).sum(1) * 2)
for _ in range(3):
  print(np.asarray(step(x))[:2])
"""


def test_run_writes_a_profile(tmp_path):
  script = tmp_path / "script.py"
  script.write_text(textwrap.dedent(SCRIPT))
  path = tmp_path / "run.json"
  device = current_backend().tg_device
  result = CliRunner().invoke(app, ["run", "--device", device, "--profile", str(path), str(script)])
  assert result.exit_code == 0, result.output
  assert f"profile written to {path}" in result.stderr
  events = complete_events(path)
  assert len(named(events, "program", "run program")) == 3
  assert named(events, "run") and {e["args"]["device"] for e in named(events, "run")} == {device}
  script.write_text(textwrap.dedent(SCRIPT) + "raise ValueError('after the work')\n")
  path.unlink()
  failed = CliRunner().invoke(app, ["run", "--device", device, "--profile", str(path), str(script)])
  assert failed.exit_code == 1 and "ValueError: after the work" in failed.stderr
  assert named(complete_events(path), "program", "run program")  # written all the same
  refused = CliRunner().invoke(app, ["run", "--profile", str(tmp_path / "missing" / "run.json"), str(script)])
  assert refused.exit_code == 2 and "no such directory" in refused.stderr


def test_jax_profiler_trace_under_patch_mode(tmp_path):
  import jax
  import jax.numpy as jnp
  with tinyjax.patch():
    with jax.profiler.trace(str(tmp_path)):
      np.asarray(jax.jit(lambda a: jnp.cos(a).sum(0))(jnp.ones((ROWS, COLUMNS))))
    with pytest.raises(RuntimeError, match="No profile started"):
      jax.profiler.stop_trace()
  written, = glob.glob(str(tmp_path / "plugins" / "profile" / "*" / "perfetto_trace.json.gz"))
  events = complete_events(written)
  assert named(events, "program", "run program") and named(events, "run")
