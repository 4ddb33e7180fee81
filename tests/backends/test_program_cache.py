"""The disk cache of tinygrad's lowered programs (tinyjax/backends/tinygrad/machinery/program_cache.py): a warm start computes
what a cold one does, entries that cannot be trusted are rewritten, concurrent writers leave whole entries, and its
key holds every tinygrad setting that changes a program."""
import ast as python_ast
import collections
import dataclasses
import inspect
import io
import json
import os
import pathlib
import pickle
import platform
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tinygrad
from tinygrad import Device, Tensor, codegen
from tinygrad.helpers import Context, ContextVar
from tinygrad.renderer.isa.x86 import X86Renderer
from tinygrad.uop import Ops
from tinygrad.uop.ops import UOp

from tinyjax import config
from tinyjax.choosing import selection
from tinyjax.backends.tinygrad.machinery import program_cache
from oracle import check

ROOT = pathlib.Path(__file__).parent.parent.parent

# A program of several kernels (a matmul, reductions, a scan), checked against JAX by the oracle in a new process;
# it prints the cache's counts
PROGRAM = textwrap.dedent("""
  import json, sys
  sys.path[:0] = ["tests"]
  import numpy as np
  from oracle import check
  from tinyjax.backends.tinygrad.machinery import program_cache
  x = np.random.default_rng(0).random((6, 5), np.float32)
  check(lambda np_, x: [np_.tanh(x @ x.T).sum(0), np_.argmax(x, 1), np_.cumsum(x * 3 - 1, 0)], x)
  print(json.dumps(program_cache.COUNTS))
""")


def start(cache: pathlib.Path) -> subprocess.Popen:
  env = {**os.environ, "TINYJAX_PROGRAM_CACHE": str(cache), "CACHEDB": str(cache.parent / "cache.db")}
  return subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def counts(process: subprocess.Popen) -> dict[str, int]:
  """The counts a run of PROGRAM printed (its results matched JAX's)."""
  out, err = process.communicate(timeout=600)
  assert process.returncode == 0, out[-1000:] + err[-3000:]
  return json.loads(out.splitlines()[-1])


def entries(cache: pathlib.Path) -> list[pathlib.Path]:
  return sorted(cache.glob("*.program"))


def test_a_warm_start_reads_what_a_cold_one_wrote(tmp_path):
  cache = tmp_path / "programs"
  cold = counts(start(cache))
  # NB: a program that does not read back as itself is not stored (one of WEBGPU's): lowered again when warm
  assert cold["misses"] >= cold["written"] == len(entries(cache)) > 0 and "hits" not in cold, cold
  warm = counts(start(cache))
  assert warm["hits"] == cold["written"] and warm.get("misses", 0) == cold["misses"] - cold["written"], warm
  assert "rejected" not in warm, warm


def test_concurrent_writers_leave_whole_entries(tmp_path):
  """Two cold processes lower the same kernels at once into one directory: both compute JAX's results, and every
  entry left reads back (no temporary file is left either)."""
  cache = tmp_path / "programs"
  first, second = start(cache), start(cache)
  both = [counts(first), counts(second)]
  assert set(os.listdir(cache)) == {path.name for path in entries(cache)}
  # each process read or wrote each of its kernels: none found an entry it could not trust (a part of one).
  # NB: a process that starts late finds every entry written (CI met it): it writes none
  assert all(c.get("hits", 0) + c.get("written", 0) == len(entries(cache)) > 0 and "rejected" not in c
             for c in both), both
  for path in entries(cache):
    key = json.loads(path.read_bytes().partition(b"\n")[0])["key"]
    assert program_cache.read_entry(str(path), key) is not None, path.name


@pytest.fixture
def kernel():
  """A kernel's AST and the renderer of the device under test, and tinygrad's own lowering of it."""
  device = selection.current_backend().tg_device
  x = Tensor(np.linspace(-2, 2, 12, dtype=np.float32), device=device).realize()
  ast = next(call.src[0] for call in (x * 3 + 1).exp2().schedule_linear().src if call.src[0].op is Ops.SINK)
  renderer = Device[device].renderer
  lower = inspect.unwrap(codegen.do_to_program)  # tinygrad's function, without the cache amendments.py put in front
  return ast, renderer, lower(ast, renderer)


@pytest.fixture
def cache(tmp_path, monkeypatch):
  """A cache in a directory of the test's own, and a lowering through it; the counts start at zero."""
  config.update("program_cache", str(tmp_path))
  monkeypatch.setattr(program_cache, "COUNTS", collections.Counter())
  return program_cache.cached(inspect.unwrap(codegen.do_to_program))


def entry_of(kernel) -> tuple[pathlib.Path, str]:
  ast, renderer, _ = kernel
  key = program_cache.entry_key(ast, renderer)
  return pathlib.Path(program_cache.entry_path(config.get("program_cache"), key)), key


def test_a_hit_is_the_program_tinygrad_lowers(kernel, cache):
  ast, renderer, program = kernel
  assert cache(ast, renderer) is program and cache(ast, renderer) is program
  assert program_cache.COUNTS == {"misses": 1, "written": 1, "hits": 1}


def searched(ast: UOp, width: int) -> UOp:
  """`ast` as a lowering with a kernel search of `width` asks for it (tinygrad's BEAM puts it in the AST)."""
  return ast.replace(arg=dataclasses.replace(ast.arg, beam=width))


def test_a_tuned_program_serves_later_lowerings(kernel, cache):
  """A kernel lowered with a search (BEAM) is kept under the key of its lowering without one: the later lowerings
  without a search take it, and so does one searched no wider; an entry searched less is searched again."""
  ast, renderer, untuned = kernel
  assert cache(ast, renderer) is untuned
  tuned = cache(searched(ast, 1), renderer)  # the entry was searched less (not at all): searched now, and kept
  path, key = entry_of(kernel)
  assert json.loads(path.read_bytes().partition(b"\n")[0])["searched"] == 1
  program_cache.COUNTS.clear()
  assert cache(ast, renderer) is tuned and cache(searched(ast, 1), renderer) is tuned
  assert program_cache.COUNTS == {"hits": 2}


def test_a_tuned_program_computes_what_jax_does(cache, tmp_path):
  """A program whose kernels tinygrad searched (BEAM=1), then the same program lowered anew without a search (another
  function: another trace): JAX's results both times, the second from the tuned entries alone."""
  x = np.random.default_rng(1).random((7, 9), np.float32)
  with Context(BEAM=1):
    check(lambda np_, x: (np_.tanh(x @ x.T) * 3).sum(1), x)
  # NB: the search's candidates are lowered too (on CL and WEBGPU through this cache, without a search of their own)
  assert any(json.loads(path.read_bytes().partition(b"\n")[0])["searched"] == 1 for path in entries(tmp_path))
  program_cache.COUNTS.clear()
  check(lambda np_, x: (np_.tanh(x @ x.T) * 3).sum(1), x)
  assert set(program_cache.COUNTS) == {"hits"}


@pytest.mark.skipif(platform.machine() != "x86_64", reason="tinygrad's x86 renderer")
def test_an_assembled_program_keeps_its_binary(cache):
  """An ISA renderer assembles the binary itself (no compiler, no CACHEDB): the entry keeps it."""
  x = Tensor(np.linspace(-2, 2, 12, dtype=np.float32), device="CPU").realize()
  ast = next(call.src[0] for call in (x * 3 + 1).exp2().schedule_linear().src if call.src[0].op is Ops.SINK)
  renderer = X86Renderer(dataclasses.replace(Device["CPU"].renderer.target, renderer="X86"))
  program = inspect.unwrap(codegen.do_to_program)(ast, renderer)
  program_cache.COUNTS.clear()  # opening the CPU device (on another device's leg) lowered its helpers
  assert cache(ast, renderer) is program and cache(ast, renderer) is program
  path, key = entry_of((ast, renderer, program))
  assert program_cache.read_entry(str(path), key) is program and program.src[-1].op is Ops.BINARY
  assert program_cache.COUNTS == {"misses": 1, "written": 1, "hits": 2}


class _Opens:
  """A pickle that, unpickled without restriction, creates a file (it calls `open`)."""

  def __init__(self, path):
    self.path = path

  def __reduce__(self):
    return open, (self.path, "w")


def corrupt(case: str, path: pathlib.Path, key: str) -> None:
  data = path.read_bytes()
  line, _, payload = data.partition(b"\n")
  foreign = {"not a program": pickle.dumps([Ops.PROGRAM, "source"]),
             "a pickle that runs code": pickle.dumps(_Opens(str(path.parent / "opened")))}
  damaged = {
    "garbage": os.urandom(len(data)),
    "empty": b"",
    "truncated": data[:len(data) // 2],
    "payload altered": line + b"\n" + payload[:-9] + b"\x00" + payload[-8:],
    "header without payload": line + b"\n",
    "another format": json.dumps({**json.loads(line), "format": program_cache.FORMAT + 1}).encode() + b"\n" + payload,
    "another key": program_cache.header(key + " ", payload) + payload,
  }
  # the two foreign pickles come with a header that matches them: only the unpickler stands in their way
  path.write_bytes(damaged[case] if case in damaged else program_cache.header(key, foreign[case]) + foreign[case])


@pytest.mark.parametrize("case", ["garbage", "empty", "truncated", "payload altered", "header without payload",
                                  "another format", "another key", "not a program", "a pickle that runs code"])
def test_an_entry_not_trusted_is_rewritten(kernel, cache, case):
  ast, renderer, program = kernel
  cache(ast, renderer)
  path, key = entry_of(kernel)
  corrupt(case, path, key)
  assert cache(ast, renderer) is program
  assert program_cache.COUNTS == {"misses": 1, "written": 2, "rejected": 1}
  assert program_cache.read_entry(str(path), key) is not None and not (path.parent / "opened").exists()


@pytest.mark.parametrize("stamp", ["tinygrad_version", "_amendments_digest"])
def test_another_tinygrad_makes_entries_stale(kernel, cache, monkeypatch, stamp):
  """An entry written by another tinygrad (or another version of tinyjax's amendments) is rewritten, not used."""
  ast, renderer, program = kernel
  cache(ast, renderer)
  path, key = entry_of(kernel)
  monkeypatch.setattr(program_cache, stamp, lambda: "another")
  assert cache(ast, renderer) is program
  assert program_cache.COUNTS == {"misses": 1, "written": 2, "rejected": 1}
  assert json.loads(path.read_bytes().partition(b"\n")[0])[{"tinygrad_version": "tinygrad"}.get(stamp, "tinyjax")] \
    == "another"


def test_off_writes_nothing(kernel, cache, tmp_path, monkeypatch):
  """TINYJAX_PROGRAM_CACHE= (empty): nothing written, in the home directory (the default's) or anywhere."""
  config.update("program_cache", None)
  monkeypatch.setenv("TINYJAX_PROGRAM_CACHE", "")
  monkeypatch.setenv("HOME", str(tmp_path))
  ast, renderer, program = kernel
  assert cache(ast, renderer) is program
  assert not any(tmp_path.rglob("*")) and not program_cache.COUNTS


def test_the_key_changes_with_a_setting_that_changes_the_program(kernel):
  ast, renderer, _ = kernel
  with Context(TUPLE_ORDER=0, DEBUG=0):
    key = program_cache.entry_key(ast, renderer)
  with Context(TUPLE_ORDER=1, DEBUG=0):
    assert program_cache.entry_key(ast, renderer) != key
  with Context(TUPLE_ORDER=0, DEBUG=1):
    assert program_cache.entry_key(ast, renderer) == key


def settings_read_by_lowering() -> set[str]:
  """The tinygrad settings its codegen, renderers and UOps read: ContextVars named in the code, `getenv("NAME")`."""
  by_name = {**{key: key for key in ContextVar._cache},
             **{name: var.key for name, var in vars(tinygrad.helpers).items() if isinstance(var, ContextVar)}}
  found = set()
  for folder in ("codegen", "renderer", "uop"):
    for path in (pathlib.Path(tinygrad.__file__).parent / folder).rglob("*.py"):
      for node in python_ast.walk(python_ast.parse(path.read_text())):
        name = node.id if isinstance(node, python_ast.Name) else node.name if isinstance(node, python_ast.alias) else None
        if name in by_name:
          found.add(by_name[name])
        elif (isinstance(node, python_ast.Call) and getattr(node.func, "id", None) == "getenv" and node.args
              and isinstance(node.args[0], python_ast.Constant)):
          found.add(node.args[0].value)
  return found


def test_every_setting_lowering_reads_is_keyed_or_says_why_not():
  keyed, unkeyed = set(program_cache.KEYED), set(program_cache.UNKEYED)
  assert not keyed & unkeyed and {var.key for var in codegen.to_program_config} <= keyed
  assert not settings_read_by_lowering() - keyed - unkeyed, "a setting tinygrad's lowering reads is in neither list"


class _Reduced:
  """Pickles as `getattr(owner, name)`, the form some Python versions give enum members (3.11.2 does for Ops)."""

  def __init__(self, owner, name):
    self.owner, self.name = owner, name

  def __reduce__(self):
    return getattr, (self.owner, self.name)


def test_enum_members_pickled_by_name_are_read_and_nothing_else():
  def load(owner, name):
    return program_cache._ProgramUnpickler(io.BytesIO(pickle.dumps(_Reduced(owner, name)))).load()
  assert load(Ops, "PROGRAM") is Ops.PROGRAM
  for owner, name in ((UOp, "new_buffer"), (Ops, "__class__"), (Ops, "_member_map_")):
    with pytest.raises(pickle.UnpicklingError):
      load(owner, name)


def test_distinct_buffers_of_one_lazy_value_twice():
  """One lazy Tensor passed twice (a complex zero's two parts) becomes two buffers: TinyJit refuses one buffer as two
  of its inputs."""
  from tinyjax.backends.tinygrad.machinery.replay import distinct_buffers
  zeros = Tensor.zeros(1, 3, device=Device.DEFAULT)
  first, second = distinct_buffers(Device.DEFAULT, [zeros, zeros])
  assert first.uop.base is not second.uop.base
  assert first.tolist() == second.tolist() == [[0.0, 0.0, 0.0]]
