"""A schedule's new kernels lowered over the cores: helper processes lower its last kernels while this one lowers its
first.

tinygrad 0.14 lowers a schedule's kernels one after another in Python (its graph rewrites: 0.1-0.4 s a kernel); its own
pool of spawned workers imports tinygrad alone, without tinyjax's amendments, so amendments.py turns it off
(PARALLEL=0). A new program of many kernels then waits on one core: the CNN's first call lowers 14 of them
(docs/performance.md). Here, while `compile_together` lowers a group of kernels, helper processes (started once per
process, each with tinyjax's amendments) take kernels from the group's end while the process lowers from its
start. A thread of the process alone hands kernels out, one or two at a time to each helper that said it is ready, also
while the process is inside a long lowering, so no kernel is lowered twice and no helper waits on the process; the
process takes the helpers' programs in the group's order, so the kernels are named apart as if it had lowered every one
(compile_together.name_apart). A kernel a helper could not lower (an error, a helper gone) is
lowered by the process, which raises its error as tinygrad would.

TINYJAX_LOWERING_HELPERS: how many helpers (default: the cores but one, shared among pytest-xdist's workers, at most
4); 0: none.
NB: a helper takes ~0.3 s to start (tinygrad and this folder's modules, not JAX): the helpers start at the first group
of SMALLEST_GROUP kernels or more, help with its end once ready, and with every such group after.
NB: a profile (tinyjax.profile) times lowering in this process: while one records, the process lowers every kernel.
NB: a helper that is gone is not replaced.
"""
import atexit
import collections
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection, wait

from tinygrad import codegen
from tinygrad.helpers import Context, ContextVar
from tinygrad.uop.ops import UOp

from tinyjax import config
from tinyjax.backends.tinygrad.machinery.program_cache import KEYED
from tinyjax.ir import profile

DEFAULT_MOST = 4  # helpers by default, at most (each ~50 MB: tinygrad and this folder)
SMALLEST_GROUP = 4  # kernels: a smaller group lowers here (handing small kernels over saved less than it cost)
IN_FLIGHT = 2  # kernels handed to a helper at a time: the next is there when it is done with one
_helpers: list["_Helper"] = []
_started = threading.Lock()
_in_use = threading.Lock()  # NB: one group at a time talks to the helpers; another thread's lowers by itself meanwhile
_groups = itertools.count()  # a group's number in each message: a result of an abandoned group is dropped
COUNTS: collections.Counter = collections.Counter()  # kernels lowered by helpers, and by this process in their stead


def helper_count() -> int:
  if sys.platform == "win32":  # NB: a helper's pipes are passed as file descriptors (POSIX)
    return 0
  if value := config.get("lowering_helpers").strip():
    if not value.isdigit():
      raise ValueError(f"TINYJAX_LOWERING_HELPERS={value!r} is not a non-negative integer")
    return int(value)
  cores = (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
  return max(0, min(cores - 1, DEFAULT_MOST))


# A helper's program. NB: tinyjax's packages stand in as empty modules: their __init__s import JAX (~2 s of a helper's
# start), and lowering needs tinygrad and this folder's modules alone
_HELPER = """
import json, sys, types
from multiprocessing.connection import Connection
for name, path in json.loads(sys.argv[1]).items():
  sys.modules[name] = package = types.ModuleType(name)
  package.__path__ = [path]
from tinyjax.backends.tinygrad.machinery import amendments, compile_together, lowering_helpers
amendments.amend()
lowering_helpers.serve(Connection(int(sys.argv[2]), writable=False), Connection(int(sys.argv[3]), readable=False),
                       compile_together.group_lowering)
"""


class _Helper:
  """One helper process and what it was handed."""

  def __init__(self):
    root = os.path.dirname(config.__file__)  # tinyjax's folder
    packages = {name: os.path.join(root, *name.split(".")[1:]) for name in (
      "tinyjax", "tinyjax.backends", "tinyjax.backends.tinygrad", "tinyjax.backends.tinygrad.machinery", "tinyjax.ir")}
    tasks_in, tasks_out = os.pipe()
    programs_in, programs_out = os.pipe()
    self.process = subprocess.Popen([sys.executable, "-c", _HELPER, json.dumps(packages), str(tasks_in),
                                     str(programs_out)], pass_fds=(tasks_in, programs_out), stdin=subprocess.DEVNULL)
    os.close(tasks_in)
    os.close(programs_out)
    self.tasks, self.programs = Connection(tasks_out, readable=False), Connection(programs_in, writable=False)
    self.ready, self.handed = False, set()  # (group, index) handed out and not yet answered

  def alive(self) -> bool:
    return self.process.poll() is None

  def hand(self, group: int, index: int, ast: UOp, renderer) -> bool:
    """Send the helper a kernel to lower; False if it is gone."""
    settings = {name: ContextVar._cache[name].value for name in KEYED if name in ContextVar._cache}
    try:
      self.tasks.send((group, index, ast, renderer, settings, config.get("program_cache")))
    except OSError:
      self.ready = False
      return False
    except Exception:  # noqa: BLE001  (a kernel that does not pickle: nothing was sent, the process lowers it)
      return False
    self.handed.add((group, index))
    return True

  def read(self, results: dict, group: int) -> None:
    """What the helper sent: that it is ready, and programs (None for a kernel it could not lower)."""
    try:
      while self.programs.poll():
        message = self.programs.recv()
        if message == "ready":
          self.ready = True
          continue
        self.handed.discard(message[:2])
        if message[0] == group:
          results[message[1]] = message[2]
    except (EOFError, OSError):  # it is gone: what it had, the process lowers
      self.ready = False
      results.update({index: None for handed_group, index in self.handed if handed_group == group})
      self.handed.clear()


def _started_helpers() -> list[_Helper]:
  with _started:
    if not _helpers:
      _helpers.extend(_Helper() for _ in range(helper_count()))
      atexit.register(_close_helpers)
    return [helper for helper in _helpers if helper.alive()]


def _close_helpers() -> None:
  """At exit: each helper's loop ends after the kernel it lowers; one that takes over 10 s more is killed."""
  for helper in _helpers:
    helper.tasks.close()
  deadline = time.monotonic() + 10
  for helper in _helpers:
    try:
      helper.process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
      helper.process.kill()


def lowered(kernels: dict[tuple, UOp], renderer, lower, name_apart) -> dict[tuple, UOp]:
  """Each kernel's program (`kernels`: program key -> AST), lowered by `lower(ast)` here from the start and by the
  helpers from the end; a helper's program is passed through `name_apart(program, ast)` here, in the group's order."""
  items = list(kernels.items())
  if len(items) < SMALLEST_GROUP or profile.active is not None or not helper_count() \
      or not _in_use.acquire(blocking=False):
    return {key: lower(ast) for key, ast in items}
  try:
    return _lowered_with(_started_helpers(), items, renderer, lower, name_apart)
  finally:
    _in_use.release()


class _Ends:
  """A group's kernels taken from both ends: this process's from the start, the helpers' from the end."""

  def __init__(self, count: int):
    self._lock, self._first, self._last = threading.Lock(), 0, count - 1

  def first(self) -> int | None:
    with self._lock:
      if self._first > self._last:
        return None
      self._first += 1
      return self._first - 1

  def last(self) -> int | None:
    with self._lock:
      if self._first > self._last:
        return None
      self._last -= 1
      return self._last + 1

  def taken(self) -> bool:
    with self._lock:
      return self._first > self._last


def _lowered_with(helpers: list[_Helper], items: list, renderer, lower, name_apart) -> dict[tuple, UOp]:
  """The process lowers from the group's start while a thread hands kernels from its end to each helper that is ready
  (NB: also while the process is inside a long lowering: handing out only between the process's own kernels left a
  helper idle for the length of a convolution's) and takes their programs; then the helpers' programs, in order."""
  group, ends, results, mine = next(_groups), _Ends(len(items)), {}, {}
  handing = threading.Thread(target=_hand_out, args=(helpers, items, renderer, group, ends, results), daemon=True,
                             name="tinyjax lowering helpers")
  handing.start()
  while (index := ends.first()) is not None:
    mine[index] = lower(items[index][1])
  handing.join()
  programs = {}
  for index, (key, ast) in enumerate(items):
    if index in mine:
      programs[key] = mine[index]
      continue
    program = results.get(index)
    COUNTS["lowered by helpers" if program is not None else "lowered here in a helper's stead"] += 1
    programs[key] = lower(ast) if program is None else name_apart(program, ast)
    codegen.to_program_cache[key] = programs[key]
  return programs


def _hand_out(helpers: list[_Helper], items: list, renderer, group: int, ends: _Ends, results: dict) -> None:
  """Hand the group's last kernels to the helpers, IN_FLIGHT at a time each, until none is left and every one handed
  is answered (a kernel not answered, or not handed, is lowered by the process)."""
  while True:
    for helper in helpers:
      helper.read(results, group)
      while helper.ready and len(helper.handed) < IN_FLIGHT and (index := ends.last()) is not None:
        if not helper.hand(group, index, items[index][1], renderer):
          break
    answering = [helper.programs for helper in helpers if helper.handed]
    if not answering and ends.taken():
      return
    wait(answering or [helper.programs for helper in helpers if helper.alive()], timeout=0.05)


def serve(tasks, programs, group_lowering) -> None:
  """A helper's loop: lower what it is handed, as the process would in a group (`group_lowering()`: compiles
  deferred), and send it back."""
  # NB: a thread takes what is handed as it comes, so that the process never waits to hand a kernel over while this
  # helper waits to send a program back (a pipe holds ~64 KB)
  handed: queue.Queue = queue.Queue()
  threading.Thread(target=_receive, args=(tasks, handed), daemon=True).start()
  programs.send("ready")
  while (task := handed.get()) is not None:
    group, index, ast, renderer, settings, cache = task
    try:
      config.update("program_cache", cache or "")
      with Context(**{name: value for name, value in settings.items() if name in ContextVar._cache}), \
          group_lowering():
        program = codegen.do_to_program(ast, renderer)
    except Exception:  # noqa: BLE001  (the process lowers it again, and raises)
      program = None
    try:
      programs.send((group, index, program))
    except OSError:  # the process is gone
      return
    except Exception:  # noqa: BLE001  (a program that does not pickle: the process lowers it)
      programs.send((group, index, None))


def _receive(tasks, handed: queue.Queue) -> None:
  try:
    while True:
      handed.put(tasks.recv())
  except (EOFError, OSError):
    handed.put(None)
