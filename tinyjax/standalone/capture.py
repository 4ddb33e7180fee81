"""Trace a function as jax.jit would and capture what tinygrad would run for it, without running it.

The result is a `Graph`, the same for every target: the buffers (inputs, outputs, constants with their contents,
scratch) and the steps (kernels rendered by the target's renderer, with their launch sizes and buffer arguments,
and copies). The targets (c.py, webgpu.py) only write it out as text.

How: the function's jaxpr goes through the tinygrad backend's rules on the target's device, with empty input
buffers; the outputs are realized while tinygrad's schedule capture hook (what TinyJit uses) is installed, so
tinygrad hands over its list of kernel calls instead of running them. Each kernel's AST is then rendered with
the target's renderer.
"""
import dataclasses
import inspect
import os
import re

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr

from tinyjax.ir.program import Eqn, called_jaxpr, program_of


class ExportError(ValueError):
  """The function cannot be exported: the message names the primitive and the user's line where there is one."""


ROLES = ("input", "output", "const", "scratch")


@dataclasses.dataclass
class Buffer:
  name: str  # a C identifier: the argument's pytree path for inputs and outputs
  dtype: np.dtype
  shape: tuple
  role: str  # one of ROLES
  data: np.ndarray | None = None  # the contents of a constant, flat
  path: str = ""  # the pytree path in the user's terms, e.g. params['params']['Conv_0']['kernel']
  pairs_of: str | None = None  # a complex argument's dtype (complex64): its (real, imaginary) pairs, interleaved

  @property
  def size(self) -> int:
    return int(np.prod(self.shape, dtype=np.int64))

  @property
  def nbytes(self) -> int:
    return self.size * self.dtype.itemsize


@dataclasses.dataclass(frozen=True)
class Kernel:
  name: str
  source: str  # the kernel as the target's renderer wrote it
  args: tuple[tuple[int, int], ...]  # (buffer index, element offset) per kernel parameter, in the kernel's order
  global_size: tuple[int, ...]
  local_size: tuple[int, ...] | None


@dataclasses.dataclass(frozen=True)
class Copy:
  dest: int  # buffer index (whole buffer)
  src: tuple[int, int]  # (buffer index, element offset)


@dataclasses.dataclass
class Graph:
  name: str
  buffers: list[Buffer]
  steps: list[Kernel | Copy]

  def of_role(self, role: str) -> list[int]:
    return [i for i, b in enumerate(self.buffers) if b.role == role]

  @property
  def inputs(self) -> list[int]:
    return self.of_role("input")

  @property
  def outputs(self) -> list[int]:
    return self.of_role("output")


# --- tracing

def _spec(leaf) -> jax.ShapeDtypeStruct:
  """The shape and dtype an example argument fixes (jax.ShapeDtypeStruct leaves give them directly)."""
  if isinstance(leaf, jax.ShapeDtypeStruct):
    return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype)
  aval = jax.typeof(leaf)
  return jax.ShapeDtypeStruct(aval.shape, aval.dtype)


# names a C argument cannot take (C99 keywords, and what <stdbool.h> and <stdint.h> define)
C_RESERVED = frozenset("auto bool break case char const continue default do double else enum extern false float for "
                       "goto if inline int long register restrict return short signed sizeof static struct switch "
                       "true typedef union unsigned void volatile while".split())


def identifier(text: str) -> str:
  """A C identifier made of text's letters, digits and underscores."""
  name = re.sub(r"__+", "_", re.sub(r"\W+", "_", text).strip("_"))
  return f"_{name}" if not name or name[0].isdigit() else name


def _distinct(names: list[tuple[str, str]]) -> list[tuple[str, str]]:
  """NB: a Python name can be a C keyword (`float`) or look like the export's own names (tj_...), and two pytree
  paths can make one identifier (keys 'a-b' and 'a_b'): such names are prefixed or numbered."""
  seen: set[str] = set()
  distinct = []
  for name, path in names:
    base = f"arg_{name}" if name in C_RESERVED or name.startswith("tj_") else name
    unique, number = base, 1
    while unique in seen:
      unique, number = f"{base}_{number}", number + 1
    seen.add(unique)
    distinct.append((unique, path))
  return distinct


def _argument_names(fn, count: int) -> list[str]:
  """The names of the first `count` positional parameters of fn, or arg0, arg1, ... where it has none."""
  try:
    params = [p.name for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  except (TypeError, ValueError):
    params = []
  return [params[i] if i < len(params) else f"arg{i}" for i in range(count)]


def _leaf_names(prefixes: list[str], tree) -> list[tuple[str, str]]:
  """(C identifier, pytree path) of every leaf of the tuple `tree`, named after the argument it belongs to."""
  named = []
  for prefix, subtree in zip(prefixes, tree):
    for path, _ in jax.tree_util.tree_flatten_with_path(subtree)[0]:
      keys = jax.tree_util.keystr(path)
      named.append((identifier(prefix + "_" + keys) if keys else prefix, prefix + keys))
  return named


def trace(fn, example_args):
  """fn's ClosedJaxpr for the example arguments, and the (C identifier, pytree path) of each input and output."""
  specs = jax.tree_util.tree_map(_spec, tuple(example_args))
  flat_specs, in_tree = jax.tree_util.tree_flatten(specs)

  def flat_fn(*leaves):
    return fn(*jax.tree_util.tree_unflatten(in_tree, leaves))

  closed, out_shapes = jax.make_jaxpr(flat_fn, return_shape=True)(*flat_specs)
  in_names = _leaf_names(_argument_names(fn, len(example_args)), specs)
  out_leaves, out_tree = jax.tree_util.tree_flatten(out_shapes)
  if isinstance(out_shapes, (tuple, list)) and len(out_shapes) == len(out_leaves):
    out_names = [(f"out{i}", f"out[{i}]") for i in range(len(out_leaves))]  # the common case: a tuple of arrays
  elif len(out_leaves) == 1 and out_tree.num_nodes == 1:
    out_names = [("out", "out")]
  else:
    out_names = _leaf_names(["out"], (out_shapes,))
  names = _distinct(in_names + out_names)
  return closed, names[:len(in_names)], names[len(in_names):]


# --- refusing what cannot be exported

_LIBRARY_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (jax, __import__("jaxlib"),
                                                                      __import__("tinyjax")))


def user_line(eqn) -> str | None:
  """file:line where the user's code made the equation (innermost frame outside jax, jaxlib and tinyjax;
  outside installed packages where there is one, so a flax model points at the user's call, not flax)."""
  traceback = eqn.source_info.traceback
  frames = [f for f in traceback.frames if not f.file_name.startswith(_LIBRARY_DIRS)] if traceback else []
  own = [f for f in frames if "-packages" + os.sep not in f.file_name]
  frame = (own or frames or [None])[0]
  return f"{frame.file_name}:{frame.line_num}" if frame else None


def _equations(jaxpr, line: str = "<unknown>"):
  """(equation, user's line) of a jaxpr with the call primitives (jit, custom_jvp_call, ...) opened, as tinyjax
  runs them. NB: equations traced inside a jit have only the jit's own frames: they take the call's line."""
  for eqn in jaxpr.eqns:
    eqn_line = user_line(eqn) or line
    if (called := called_jaxpr(eqn)) is not None:
      yield from _equations(called[0], eqn_line)
    else:
      yield eqn, eqn_line


def _why_not_native(eqn, backend) -> str | None:
  from tinyjax.backends.tinygrad.machinery.plan import why_not
  as_run = Eqn(eqn.primitive, dict(eqn.params), (), (), tuple(v.aval for v in eqn.invars),
               tuple(v.aval for v in eqn.outvars), "")
  return why_not(as_run, backend.supports_dtype, exporting=True)


def check_native(name: str, closed: ClosedJaxpr, backend) -> None:
  """Raise ExportError naming every primitive the backend cannot run natively, with the user's line that made it:
  an export never falls back to XLA."""
  problems: dict[str, str] = {}
  for eqn, line in _equations(closed.jaxpr):
    if eqn.primitive.name not in problems and (reason := _why_not_native(eqn, backend)):
      problems[eqn.primitive.name] = f"{eqn.primitive.name} ({reason}) at {line}"
  if problems:
    raise ExportError(f"{name} cannot be exported: an export runs every primitive on tinygrad's "
                      f"{backend.tg_device} device, never on XLA, and these cannot run there: "
                      + "; ".join(problems.values()))


# --- capturing tinygrad's kernels

class _Capture:
  """Installed in tinygrad's capture hook: collects the scheduled kernel calls instead of running them."""

  def __init__(self):
    self.calls = []

  def add_linear(self, linear, var_vals):
    if var_vals:
      raise ExportError(f"tinygrad scheduled kernels with symbolic sizes ({sorted(var_vals)}), which an export "
                        "cannot fix")
    self.calls.extend(linear.src)

  def __enter__(self):
    from tinygrad.engine.realize import capturing
    if capturing:
      raise ExportError("tinyjax.export cannot run inside a TinyJit capture")
    capturing.append(self)
    return self

  def __exit__(self, *_):
    from tinygrad.engine.realize import capturing
    capturing.clear()


def _view_of(uop):
  """(base BUFFER uop, element offset) that a kernel argument or a realized output reads, or None (a constant
  tinygrad folded, which has no buffer). NB: on the CPU device a contiguous slice of a buffer is a view of it,
  with no kernel: an output x[1:] reads the input x at an offset."""
  from tinygrad.uop.ops import Ops
  while uop.op in (Ops.CONTIGUOUS, Ops.RESHAPE, Ops.DETACH):
    uop = uop.src[0]
  if uop.op is Ops.BUFFER:
    return uop, 0
  if uop.base.op is Ops.BUFFER and (view := uop.contiguous_view()) is not None:
    return view[0].base, view[1]
  return None


def _run_lazily(backend, program, inputs):
  """The program's outputs as tinygrad Tensors, realized into buffers while the capture is installed."""
  from tinygrad import Tensor

  from tinyjax.backends.tinygrad.machinery.amendments import kernel_context
  # NB: the rules run under the backend's settings too: DEV is the device of tinygrad's device-less constants
  with kernel_context(**backend.contexts):
    outs = backend.run_lazily(program, list(inputs))
  if any(isinstance(t, np.ndarray) for t in outs):
    raise ExportError(f"an output's dtype is one tinygrad's {backend.tg_device} device lacks")
  outs = [t.contiguous() for t in outs]
  with kernel_context(**backend.contexts):
    Tensor.realize(*outs)
    # NB: an output tinygrad folded into a constant (jnp.ones) has no buffer: a kernel must write it
    folded = [i for i, t in enumerate(outs) if _view_of(t.uop) is None]
    for i in folded:
      outs[i] = outs[i].clone()
    if folded:
      Tensor.realize(*(outs[i] for i in folded))
  return outs


def capture(name: str, closed: ClosedJaxpr, in_names, out_names, backend, renderer) -> Graph:
  """The Graph of the traced function on the backend's device, its kernels rendered by `renderer`."""
  from tinygrad import Tensor
  from tinygrad.dtype import _to_np_dtype
  from tinygrad.uop.ops import Ops

  from tinyjax.backends.tinygrad.numerics.carried import carried_aval
  from tinyjax.backends.tinygrad.table import tg_dtype
  check_native(name, closed, backend)
  program = program_of(closed)
  for (label, path), aval in zip(in_names + out_names, closed.in_avals + closed.out_avals):
    if 0 in aval.shape:
      raise ExportError(f"{path} has no elements (shape {aval.shape}); an export needs sizes above zero")
  backend.plan_of(program)  # NB: plans (and dtype probes, which run kernels) before the capture, which forbids runs
  device = backend.tg_device
  # NB: a complex value is its interleaved (real, imaginary) pairs, float[..., 2], as the backend carries it
  in_avals, out_avals = ([carried_aval(a) for a in avals] for avals in (closed.in_avals, closed.out_avals))
  inputs = [Tensor.empty(max(a.size, 1), dtype=tg_dtype(a.dtype), device=device).realize().reshape(a.shape)
            for a in in_avals]
  with _Capture() as captured:
    outs = _run_lazily(backend, program, inputs)

  buffers: list[Buffer] = []
  index: dict = {}  # base BUFFER uop -> buffer index

  def add(uop, buffer: Buffer) -> int:
    index[uop] = len(buffers)
    buffers.append(buffer)
    return index[uop]

  for (label, path), aval, user_aval, tensor in zip(in_names, in_avals, closed.in_avals, inputs):
    add(tensor.uop.base, Buffer(label, np.dtype(aval.dtype), tuple(aval.shape), "input", path=path,
                                pairs_of=_pairs_of(user_aval)))

  def buffer_of(uop) -> tuple[int, int]:
    view = _view_of(uop)
    if view is None:
      raise ExportError(f"tinygrad passed a kernel a non-contiguous view ({uop.op}); the export cannot address it")
    base, offset = view
    if base not in index:  # NB: a buffer with contents before anything ran is a constant
      role = "const" if base.is_realized else "scratch"
      add(base, Buffer(f"tj_{role}{len(buffers)}", np.dtype(_to_np_dtype(base.dtype)), (base.max_numel(),), role,
                       data=_contents(base) if role == "const" else None))
    return index[base], offset

  steps: list[Kernel | Copy] = []
  for call in captured.calls:
    ast, args = call.src[0], call.src[1:]
    if ast.op is Ops.COPY:
      (dest, _), (src, src_offset) = buffer_of(args[0]), buffer_of(args[1])
      if buffers[src].role == "const" and buffers[dest].role == "scratch":  # a constant moved to the device
        buffers[dest].role, buffers[dest].data = "const", buffers[src].data[src_offset:src_offset + buffers[dest].size]
      else:
        steps.append(Copy(dest, (src, src_offset)))
    elif ast.op is Ops.SINK:
      steps.append(_render(renderer, ast, [buffer_of(a) for a in args], len(steps)))
    else:
      raise ExportError(f"tinygrad scheduled a {ast.op} step, which the export does not know how to write out")
  # the outputs: a kernel writes straight into the caller's output buffer where it can; otherwise a copy
  results = [buffer_of(t.uop) for t in outs]
  claimed = set()
  for (label, path), aval, user_aval, (source, offset) in zip(out_names, out_avals, closed.out_avals, results):
    buffer = buffers[source]
    output = Buffer(label, np.dtype(aval.dtype), tuple(aval.shape), "output", path=path, pairs_of=_pairs_of(user_aval))
    if buffer.role == "scratch" and offset == 0 and buffer.size == aval.size and source not in claimed:
      claimed.add(source)
      buffers[source] = output
    else:
      buffers.append(output)
      steps.append(Copy(len(buffers) - 1, (source, offset)))
  used = {b for s in steps for b in ([a for a, _ in s.args] if isinstance(s, Kernel) else [s.dest, s.src[0]])}
  out_position = {label: i for i, (label, _) in enumerate(out_names)}

  def position(i: int) -> tuple[int, int]:
    # NB: inputs and outputs in flattened pytree order, whatever order the kernels made them in
    return ROLES.index(buffers[i].role), out_position[buffers[i].name] if buffers[i].role == "output" else i

  # buffers no step uses (a constant's host copy) are left out
  kept = [i for i, b in enumerate(buffers) if i in used or b.role in ("input", "output")]
  return _reordered(Graph(name, buffers, steps), sorted(kept, key=position))


def _pairs_of(aval) -> str | None:
  from tinyjax.backends.tinygrad.numerics.carried import is_complex
  return np.dtype(aval.dtype).name if is_complex(aval.dtype) else None


def _reordered(graph: Graph, order: list[int]) -> Graph:
  new = {old: new for new, old in enumerate(order)}
  steps = [dataclasses.replace(s, args=tuple((new[b], o) for b, o in s.args)) if isinstance(s, Kernel)
           else Copy(new[s.dest], (new[s.src[0]], s.src[1])) for s in graph.steps]
  return Graph(graph.name, [graph.buffers[i] for i in order], steps)


def _contents(base) -> np.ndarray:
  from tinygrad.dtype import _to_np_dtype
  return np.frombuffer(bytes(base.buffer.as_memoryview()), dtype=_to_np_dtype(base.dtype)).copy()


def _render(renderer, ast, args, number: int) -> Kernel:
  """One kernel rendered by the target's renderer, named uniquely (tinygrad names kernels by shape only)."""
  from tinygrad.codegen import to_program
  from tinygrad.uop.ops import Ops
  try:
    program = to_program(ast, renderer)
  except Exception as error:
    raise ExportError(f"tinygrad's {type(renderer).__name__} could not write kernel {number}: "
                      f"{type(error).__name__}: {error}") from error
  info = program.arg
  if info.vars:
    raise ExportError(f"kernel {info.function_name} takes runtime variables ({[v.expr for v in info.vars]}), "
                      "which the export does not pass")
  source = next(s.arg for s in program.src if s.op is Ops.SOURCE)
  name = f"k{number}_{info.function_name}"
  source = re.sub(rf"\b{re.escape(info.function_name)}\b", name, source)
  global_size, local_size = info.launch_dims({})
  return Kernel(name, source, tuple(args[g] for g in info.globals), tuple(int(g) for g in global_size),
                tuple(int(s) for s in local_size) if local_size is not None else None)
