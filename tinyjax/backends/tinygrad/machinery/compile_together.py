"""A schedule's new kernels compiled together: one clang for the CPU device's, one OpenCL program for CL's.

tinygrad 0.14 lowers and compiles a schedule's kernels one by one (`realize.lower_and_compile`): a clang process per
CPU kernel (33 ms of its ~45 ms is the process starting), an OpenCL program per CL kernel (POCL spends ~0.2 s on a
program before its kernels). `lowered_together(lower_and_compile)` (installed by amendments.py) lowers first the kernels
of a schedule that no schedule before it lowered, then compiles those whose source tinygrad's CACHEDB does not hold as
one unit, and stores that unit's binary in CACHEDB under each kernel's source; tinygrad's own `lower_and_compile` then
finds every kernel lowered. Helper processes lower the group's last kernels while this one lowers its first
(lowering_helpers.py). Measured in docs/performance.md.

- CPU device (clang): the compile is the last step of lowering (`codegen.do_compile` calls `compile_cached`). While a
  schedule's kernels lower, their compiles are set aside and each program gets a placeholder binary, replaced by
  CACHEDB's or the unit's object once all are lowered. Every kernel of the unit holds the whole object; the CPU
  runtime enters a program at its kernel's symbol (amendments.py, `_enter_cpu_programs_at_their_symbol`).
- CL: the compile happens when the runtime loads a program (`CLProgram` calls `compile_cached` on its source): the
  unit's binary is in CACHEDB before that, under each of its kernels' sources, and the runtime finds its kernel in it
  by name; the kernels of one binary share the program built from it (amendments.py,
  `_share_cl_programs_of_one_binary`). Without CACHEDB (CCACHE=0, CACHELEVEL=0) CL's kernels are compiled one by
  one, as tinygrad does.

NB: tinygrad names a kernel by its shape (E_12, r_3_4_4): kernels of one schedule often share a name, and one unit
cannot hold two functions of one name. While a group lowers, a kernel whose name a kernel lowered before it in the
group has is renamed `<name>_<its AST's key, 8 hex digits>`, in its program and its source (`named_apart`, around
tinygrad's `do_to_program`, so that a profile's compile event has the name the kernel runs under, as DEBUG shows it).

NB: a unit that does not compile (a kernel clang or OpenCL C rejects) is compiled again kernel by kernel, so that the
error raised is the failing kernel's own, as tinygrad raises it; a kernel search (BEAM) compiles and times its
candidates itself, and its schedule is lowered as tinygrad lowers it.
"""
import collections
import contextlib
import dataclasses
import functools
import sys
import threading

from tinygrad import codegen
from tinygrad.device import CompileError, Device
from tinygrad.engine import realize
from tinygrad.helpers import diskcache_get, diskcache_put
from tinygrad.runtime.support.compiler_cpu import ClangCompiler
from tinygrad.uop.ops import KernelInfo, Ops, UOp

from tinyjax.backends.tinygrad.machinery import lowering_helpers

_PENDING = b"tinyjax: compiled with the other kernels of its schedule"  # a deferred kernel's binary until then
_group = threading.local()  # .names: the kernel names lowered so far in the group lowering on this thread, or None

COUNTS: collections.Counter = collections.Counter()  # units compiled, kernels in them, units compiled again one by one


def _lowering_group() -> bool:
  return getattr(_group, "names", None) is not None


def compile_cached_or_defer(self, source: str) -> bytes:
  """ClangCompiler's `compile_cached` (Compiler's, which it inherits), which, while a group of kernels lowers, answers
  with the placeholder `_PENDING`: the group's sources are looked up in CACHEDB and compiled once they are all lowered
  (and named apart)."""
  return _PENDING if _lowering_group() else super(ClangCompiler, self).compile_cached(source)


def named_apart(lower):
  """tinygrad's `do_to_program(ast, renderer)`, which, while a group of kernels lowers, names its program apart."""
  @functools.wraps(lower)
  def lower_named_apart(ast: UOp, renderer) -> UOp:
    program = lower(ast, renderer)
    return name_apart(program, ast, renderer) if _lowering_group() else program
  return lower_named_apart


def name_apart(program: UOp, ast: UOp, renderer) -> UOp:
  """The program of a kernel lowered in the group on this thread, renamed if a kernel lowered before it in the group
  has its name and its binary is still to be made (set aside, or made from the source when the runtime loads it):
  `<name>_<8 hex digits of its AST's key>`, in its program and its source."""
  name, source, binary = program.arg.function_name, program.src[2].arg, program.src[3].arg
  if name in _group.names and binary in (_PENDING, source.encode()):
    unique = f"{name}_{ast.key.hex()[:8]}"
    source = source.replace(f" {name}(", f" {unique}(", 1)
    binary = binary if binary == _PENDING else renderer.compiler.compile_cached(source)
    program = program.replace(arg=dataclasses.replace(program.arg, name=unique),
                              src=(*program.src[:2], program.src[2].replace(arg=source), UOp(Ops.BINARY, arg=binary)))
  _group.names.add(program.arg.function_name)
  return program


@contextlib.contextmanager
def group_lowering():
  _group.names = set()
  try:
    yield
  finally:
    _group.names = None


def _unit_compiler(device: str):
  """The compiler that compiles the device's kernels as one unit, and whether the compile is part of lowering;
  None where kernels are compiled one by one."""
  renderer = Device[device].renderer
  if isinstance(renderer.compiler, ClangCompiler) and sys.platform != "win32":  # NB: Windows frees a program at its start
    return renderer.compiler, True
  if renderer.target.device == "CL":
    compiler = Device[device].cl_compiler
    return (compiler, False) if compiler.cachekey is not None else None
  return None


def compile_unit(device: str, compiler, sources: list[str]) -> list[bytes]:
  """Each source's binary for `device`: CACHEDB's, else the unit's made of the sources CACHEDB does not hold."""
  binaries = [diskcache_get(compiler.cachekey, source) if compiler.cachekey is not None else None for source in sources]
  missing = [source for source, binary in zip(sources, binaries) if binary is None]
  if len(missing) > 1:
    try:
      unit = compiler.compile("\n".join(missing))
    except CompileError:
      COUNTS["compiled again one by one"] += 1
    else:
      COUNTS["units"] += 1
      COUNTS["kernels in units"] += len(missing)
      if compiler.cachekey is not None:
        for source in missing:
          diskcache_put(compiler.cachekey, source, unit)
      return [binary if binary is not None else unit for binary in binaries]
  return [binary if binary is not None else compiler.compile_cached(source) for source, binary in zip(sources, binaries)]


def _lower_group(device: str, kernels: dict[tuple, UOp]) -> None:
  """Lower the device's `kernels` (their program key: AST) into tinygrad's cache of programs, compiled together."""
  renderer = Device[device].renderer
  compiler, compiled_in_lowering = _unit_compiler(device)
  try:
    with group_lowering():
      programs = lowering_helpers.lowered(kernels, renderer, lambda ast: codegen.to_program(ast, renderer),
                                          lambda program, ast: name_apart(program, ast, renderer))
    # NB: CL's runtime compiles a program's source when it loads it: the unit's binary awaits it in CACHEDB
    binaries = compile_unit(device, compiler, [program.src[2].arg for program in programs.values()])
    if compiled_in_lowering:
      for (key, program), binary in zip(programs.items(), binaries):
        codegen.to_program_cache[key] = program.replace(src=(*program.src[:3], UOp(Ops.BINARY, arg=binary)))
  finally:  # a kernel that failed to lower or compile leaves no placeholder: tinygrad lowers it again and raises
    for key in kernels:
      if (program := codegen.to_program_cache.get(key)) is not None and program.src[-1].arg == _PENDING:
        del codegen.to_program_cache[key]


def lowered_together(lower_and_compile):
  """tinygrad's `realize.lower_and_compile(linear)`, with the kernels no schedule lowered before compiled together
  where their device compiles units (`_unit_compiler`)."""
  def lower_and_compile_together(linear: UOp) -> UOp:
    groups: dict = collections.defaultdict(dict)
    for call in linear.toposort():
      if call.op is Ops.CALL and (lowering := realize._get_call_to_compile(call)) is not None:
        ast, renderer = lowering
        if (key := codegen.to_program_key(ast, renderer)) not in codegen.to_program_cache:
          if isinstance(ast.arg, KernelInfo) and ast.arg.beam:
            return lower_and_compile(linear)
          groups[call.device if isinstance(call.device, str) else call.device[0]][key] = ast
    for device, kernels in groups.items():
      if len(kernels) > 1 and _unit_compiler(device) is not None:
        _lower_group(device, kernels)
    return lower_and_compile(linear)
  return lower_and_compile_together
