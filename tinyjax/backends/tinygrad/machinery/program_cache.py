"""A disk cache of the programs tinygrad lowers, so that a new process does not rewrite every kernel again.

tinygrad 0.14 lowers a kernel's AST to a PROGRAM (`tinygrad.codegen.do_to_program`: its optimizations, graph rewrites,
linearizer and renderer, then the compile) in every process: its cache of lowered programs lives in memory, and its
CACHEDB keeps only the compiled binaries, by source. `cached(lower)` puts a directory of entries in front of that
function (TINYJAX_PROGRAM_CACHE; amendments.py installs it), one file per kernel:

- the file's name is a hash of the key: the AST's `key` (a sha256 of the graph, the same in every process), the
  renderer's class and target (device, renderer, architecture), and the tinygrad settings that change what lowering
  makes (KEYED);
- the file is a header line, then the PROGRAM pickled. The header names this format, tinygrad's version, a digest of
  tinyjax's own amendments to lowering, the whole key, the width of the kernel search that chose its optimizations
  (tinygrad's BEAM; 0: its hand-coded heuristic) and a sha256 of the pickle. An entry whose header is not the
  one expected (another version, a truncated or altered file, a hash collision) is never unpickled: it is a miss, and
  the freshly lowered program replaces it;
- the pickle is read by an unpickler that knows only the classes a lowered program is made of (UOps and their
  arguments): whatever the file holds, it calls nothing but their constructors. What it reads must be a PROGRAM of the
  shape stored.

Kernels tuned once and kept: a program lowered with a kernel search (`BEAM=2`, `tinyjax run --beam 2 script.py`) is
kept under the key of the same kernel lowered without one, so every later process, test and export that lowers the
kernel, with no search, takes the searched program. A lowering with a search takes an entry only when it was searched
at least as wide; otherwise it searches and replaces the entry. NB: tinygrad keys the programs it keeps in memory by
the AST with the search's width in it (`KernelInfo.beam`), and its own disk cache of searches (CACHEDB) is read only
by a lowering with the same width: without this, a search served only processes run with the same BEAM. A search changes how a kernel computes (the order of a
reduction's terms, what is unrolled), never what: results move within the device's rounding.

NB: the entry holds the program without its BINARY where the renderer's compiler made that from the source: the hit
compiles the source again through `compile_cached`, which tinygrad's CACHEDB answers (CACHELEVEL is honoured). An
ISA renderer (x86) assembles its binary itself, and that binary is kept.

NB: writers write a temporary file beside the entry and rename it over the entry (atomic on POSIX): a reader sees the
old entry or the new one, never part of one, and two processes lowering the same kernel each write a whole entry.
Entries are never deleted; TINYJAX_PROGRAM_CACHE= (empty) turns the cache off.
"""
import collections
import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import io
import json
import os
import pickle
import tempfile

from tinygrad import codegen
from tinygrad.codegen.opt import Opt, OptOps
from tinygrad.dtype import AddrSpace, ConstFloat, DType, InvalidType
from tinygrad.helpers import VIZ, ContextVar, Metadata, Target
from tinygrad.renderer import Estimates
from tinygrad.renderer.isa import ISARenderer, Register
from tinygrad.renderer.isa.x86 import X86Ops
from tinygrad.uop import Ops
from tinygrad.uop.ops import AxisType, KernelInfo, ParamArg, ProgramInfo, UOp

from tinyjax import config

FORMAT = 2  # this module's entry format: a change makes every entry stale

# The tinygrad settings (ContextVars, and variables read by `getenv`) that tinygrad's lowering reads and that change the
# program it makes: each is in the key. tinygrad's own key (codegen.to_program_config) misses TUPLE_ORDER, which
# tinyjax sets (amendments.kernel_context), FLOAT16 and the renderers' and heuristic's environment variables.
KEYED = ("NOOPT", "EMULATED_DTYPES", "NOLOCALS", "TC", "IMAGE", "DISABLE_FAST_IDIV", "TRANSCENDENTAL", "ALLOW_TF32",
         "DEFAULT_FLOAT", "DEFAULT_INT", "NUM_CPU_THREADS", "TC_SELECT", "TC_OPT", "TUPLE_ORDER", "FLOAT16",
         "ALIGNED", "ALLOW_HALF8", "DMC", "EXPAND_SSA", "MV", "MV_BLOCKSIZE", "MV_ROWS_PER_THREAD",
         "MV_THREADS_PER_ROW", "OCCUPANCY_FLOOR", "THREADS")
# The settings tinygrad's lowering reads that leave the program as it is, and why each is not in the key
# (tests/backends/test_program_cache.py finds every setting tinygrad's codegen, renderers and UOps read in one list)
UNKEYED = {
  **dict.fromkeys(("DEBUG", "DEBUG_LINEARIZE", "PRINT_MATCH_STATS", "PROFILE", "TRACEMETA", "TRACK_MATCH_STATS",
                   "VIZ", "CAPTURE_PROCESS_REPLAY", "BEAM_DEBUG", "BEAM_LOG_SURPASS_MAX"),
                  "what tinygrad prints or records"),
  **dict.fromkeys(("CHECK_OOB", "SPEC", "DISALLOW_BROADCAST", "TEST_PICKLE", "REWRITE_STACK_LIMIT"),
                  "checks: they raise, or the program is the same"),
  "UPAT_COMPILE": "how the rules are matched, not what they make",
  **dict.fromkeys(("CACHELEVEL", "IGNORE_BEAM_CACHE"), "tinygrad's own disk caches"),
  **dict.fromkeys(("BEAM_DEV_TIMEOUT", "BEAM_ESTIMATE", "BEAM_LOCAL_MAX", "BEAM_MIN_PROGRESS", "BEAM_PADTO",
                   "BEAM_STRICT_MODE", "BEAM_TIMEOUT_SEC", "BEAM_UOPS_MAX", "BEAM_UPCAST_MAX"),
                  "the beam search's knobs: its result is a measurement either way, and tinygrad's beam cache keys on "
                  "the AST and the search's width (in the AST) only, as this key does"),
  **dict.fromkeys(("NOSKIP", "SQTT_EVENT"), "AMD's trace decoder, not lowering"),
}

# tinyjax's amendments to lowering (beside this file): their source is in every entry's header, so an edit to either
# makes the entries stale instead of returning programs lowered by the code before it
AMENDED_BY = ("amendments.py", "kernel_opts.py")

# hits, misses (no entry), rejected (an entry not trusted: stale, corrupt, or of another shape), written
COUNTS: collections.Counter = collections.Counter()

_PROGRAM_CLASSES = {(cls.__module__, cls.__qualname__): cls for cls in (
  UOp, Ops, AxisType, KernelInfo, ParamArg, ProgramInfo, DType, AddrSpace, ConstFloat, InvalidType, Target, Metadata,
  Estimates, Opt, OptOps, Register, X86Ops)}


def _enum_member(cls, name: str):
  """`getattr(cls, name)` for an enum member of a program's classes, as some Python versions pickle enum members
  (3.11.2: `getattr(Ops, 'PROGRAM')`; 3.11.7: `Ops('PROGRAM')`), and for nothing else."""
  if cls not in _PROGRAM_CLASSES.values() or not isinstance(cls, enum.EnumMeta) or name not in cls.__members__:
    raise pickle.UnpicklingError(f"{cls!r}.{name} is not an enum member of a lowered program")
  return cls[name]


class _ProgramUnpickler(pickle.Unpickler):
  """Makes only the classes a lowered program is made of, and their enum members; any other name in the pickle is an
  error."""

  def find_class(self, module, name):
    if (module, name) == ("builtins", "getattr"):
      return _enum_member
    if (module, name) not in _PROGRAM_CLASSES:
      raise pickle.UnpicklingError(f"{module}.{name} is not part of a lowered program")
    return _PROGRAM_CLASSES[module, name]


def tinygrad_version() -> str:
  return importlib.metadata.version("tinygrad")


@functools.cache
def _amendments_digest() -> str:
  here = os.path.dirname(__file__)
  digest = hashlib.sha256()
  for name in AMENDED_BY:
    with open(os.path.join(here, name), "rb") as source:
      digest.update(source.read())
  return digest.hexdigest()


def directory() -> str | None:
  """Where entries are kept, or None where the cache is off (TINYJAX_PROGRAM_CACHE empty)."""
  return os.path.expanduser(path) if (path := config.get("program_cache")) else None


def setting(name: str):
  """A tinygrad setting's value in effect: a ContextVar's (Context included), else the environment's."""
  return ContextVar._cache[name].value if name in ContextVar._cache else os.environ.get(name)


def search_width(ast: UOp) -> int:
  """The width of the kernel search a lowering of `ast` asks for (tinygrad's BEAM, in the AST), 0 for none."""
  return ast.arg.beam if isinstance(ast.arg, KernelInfo) else 0


def entry_key(ast: UOp, renderer) -> str:
  """The key of `ast`'s entry: the same whatever the width of the search its lowering asks for."""
  if search_width(ast):
    ast = ast.replace(arg=dataclasses.replace(ast.arg, beam=0))
  # NB: UOp.key hashes each node's op, dtype and arg, not its tag; the root's tag decides whether tinygrad optimizes
  return repr((ast.key.hex(), ast.tag, f"{type(renderer).__module__}.{type(renderer).__qualname__}",
               dataclasses.astuple(renderer.target), tuple(setting(name) for name in KEYED)))


def entry_path(folder: str, key: str) -> str:
  return os.path.join(folder, hashlib.sha256(key.encode()).hexdigest() + ".program")


def header(key: str, payload: bytes, searched: int = 0) -> bytes:
  return json.dumps({"format": FORMAT, "tinygrad": tinygrad_version(), "tinyjax": _amendments_digest(), "key": key,
                     "searched": searched, "sha256": hashlib.sha256(payload).hexdigest()}).encode() + b"\n"


def _stored_shape(program: UOp) -> bool:
  return (isinstance(program, UOp) and program.op is Ops.PROGRAM and isinstance(program.arg, ProgramInfo)
          and [s.op for s in program.src[:3]] == [Ops.SINK, Ops.LINEAR, Ops.SOURCE]
          and isinstance(program.src[2].arg, str)
          and (len(program.src) == 3 or len(program.src) == 4 and isinstance(program.src[3].arg, bytes)))


def _unpickled(payload: bytes) -> UOp | None:
  # NB: anything may fail on bytes that are not a program (a pickle error, EOFError, TypeError from a constructor
  # given the wrong arguments, ...): every failure is an entry not trusted
  try:
    program = _ProgramUnpickler(io.BytesIO(payload)).load()
  except Exception:
    return None
  return program if _stored_shape(program) else None


def read_entry(path: str, key: str, searched: int = 0) -> UOp | None:
  """The program stored at `path` for `key`, lowered with a search at least `searched` wide, or None where there is
  none that can be trusted (or it was searched less: a miss)."""
  try:
    with open(path, "rb") as entry:
      data = entry.read()
  except OSError:
    COUNTS["misses"] += 1
    return None
  line, _, payload = data.partition(b"\n")
  try:
    stored = json.loads(line).get("searched")
  except (ValueError, AttributeError):  # not JSON, or not an object
    stored = None
  trusted = isinstance(stored, int) and line + b"\n" == header(key, payload, stored)
  program = _unpickled(payload) if trusted else None
  if program is not None and stored < searched:
    COUNTS["misses"] += 1
    return None
  COUNTS["hits" if program is not None else "rejected"] += 1
  return program


def write_entry(path: str, key: str, program: UOp, renderer, searched: int = 0) -> None:
  """Store `program` (lowered for `key`) at `path`, if it reads back as itself; a failure to write is not an error."""
  kept = program if isinstance(renderer, ISARenderer) else program.replace(src=program.src[:3])
  try:
    payload = pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL)
  except Exception:  # NB: an argument that does not pickle (a function), or a graph deeper than the recursion limit
    return
  # NB: UOps are interned, so a faithful copy read back in this process is the very same object
  if _unpickled(payload) is not kept:
    return
  folder = os.path.dirname(path)
  try:
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".", suffix=".tmp")
    try:
      with os.fdopen(handle, "wb") as entry:
        entry.write(header(key, payload, searched) + payload)
      os.replace(temporary, path)
    except OSError:
      os.unlink(temporary)
      raise
  except OSError:  # a full disk or a read-only directory costs the next process the lowering, nothing else
    return
  COUNTS["written"] += 1


def _compiled(program: UOp, renderer) -> UOp:
  return program if program.src[-1].op is Ops.BINARY else codegen.do_compile(renderer, program, program.src[-1])


def cached(lower):
  """`lower` (tinygrad's `do_to_program(ast, renderer) -> PROGRAM`) with the disk cache in front of it."""
  @functools.wraps(lower)
  def lower_cached(ast: UOp, renderer) -> UOp:
    # NB: VIZ shows the rewrites of each lowering, which a hit would skip
    if (folder := directory()) is None or VIZ:
      return lower(ast, renderer)
    key, searched = entry_key(ast, renderer), search_width(ast)
    if (program := read_entry(path := entry_path(folder, key), key, searched)) is not None:
      return _compiled(program, renderer)
    program = lower(ast, renderer)
    write_entry(path, key, program, renderer, searched)
    return program
  return lower_cached
