"""The C target: NAME.c and NAME.h, plain C99 that needs only the C library and libm (`cc -O2 -c NAME.c`).

The kernels are tinygrad's clang renderer's, with its clang-only parts turned off so any C compiler takes them:
no vector types (`ext_vector_type`; the compiler vectorizes the loops itself) and no threads (tinygrad's CPU
device splits kernels over cores; an exported function runs on the caller's thread).
"""
import math

import numpy as np
from tinygrad import Device
from tinygrad.device import Compiler
from tinygrad.dtype import AddrSpace, _from_np_dtype, dtypes
from tinygrad.renderer.cstyle import ClangRenderer
from tinygrad.uop.ops import Ops, PatternMatcher, UPat

from tinyjax.standalone.capture import Graph, Kernel

C_TYPES = {"float16": "_Float16", "float32": "float", "float64": "double", "bool": "bool",
           "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
           "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t"}


def _bitcast_through_union(ctx, x):
  """NB: __builtin_bit_cast is clang's (gcc has it in C++ only); reading another member of a union is C99."""
  if x.addrspace in (AddrSpace.GLOBAL, AddrSpace.LOCAL):
    return None  # a pointer cast: the base renderer's
  source, target = ctx.render_type(x.src[0]), ctx.render_type(x)
  return f"((union {{ {source} from; {target} to; }}){{ .from = ({ctx[x.src[0]]}) }}).to"


class PortableCRenderer(ClangRenderer):
  """tinygrad's clang renderer, made portable: scalar code, one thread, no clang builtins that gcc lacks, kernels
  `static`, nothing compiled."""
  has_threads = False
  supports_float4 = False
  kernel_typedef = "static void"
  type_map = {**ClangRenderer.type_map, dtypes.half: "_Float16"}  # NB: __fp16 is clang's; C23 names _Float16
  string_rewrite = PatternMatcher([(UPat(Ops.BITCAST, name="x"), _bitcast_through_union)]) + \
    ClangRenderer.string_rewrite

  def __init__(self, target):
    super().__init__(target)
    self.compiler = Compiler()  # NB: the source is the product; tinygrad's compiler would build a binary


def renderer() -> PortableCRenderer:
  return PortableCRenderer(Device["CPU"].renderer.target)


def _literal(value, dtype: np.dtype) -> str:
  if dtype.kind == "f":
    suffix = "f" if dtype.itemsize <= 4 else ""
    if math.isnan(value):
      return "NAN"
    if math.isinf(value):
      return "INFINITY" if value > 0 else "-INFINITY"
    return float(value).hex() + suffix  # NB: hexadecimal floats are exact
  if dtype.kind == "b":
    return "1" if value else "0"
  info = np.iinfo(dtype)
  if dtype.kind == "i" and value == info.min:
    return f"({info.min + 1}{'LL' if dtype.itemsize == 8 else ''}-1)"
  return f"{int(value)}{'U' if dtype.kind == 'u' else ''}{'LL' if dtype.itemsize == 8 else ''}"


def _array_init(data: np.ndarray) -> str:
  values = [_literal(v, data.dtype) for v in data.tolist()]
  return ",\n  ".join(", ".join(values[i:i + 8]) for i in range(0, len(values), 8))


def _describe(buffer) -> str:
  described = f"{buffer.dtype.name}[{', '.join(map(str, buffer.shape))}]"
  return described + (f" ({buffer.pairs_of}: (real, imaginary) pairs)" if buffer.pairs_of else "")


def _signature(graph: Graph) -> str:
  params = [f"const {C_TYPES[graph.buffers[i].dtype.name]} *{graph.buffers[i].name}" for i in graph.inputs]
  params += [f"{C_TYPES[graph.buffers[i].dtype.name]} *{graph.buffers[i].name}" for i in graph.outputs]
  return f"void {graph.name}({', '.join(params)})"


def header(graph: Graph, summary: str) -> str:
  guard = f"{graph.name.upper()}_H"
  lines = [f"/* {graph.name}: {summary}",
           " *",
           " * Arguments: pointers to contiguous row-major buffers, the inputs then the outputs, each in the flattened",
           " * pytree order of the Python function's arguments and results. Outputs must not overlap inputs.",
           " * Scratch memory is static inside the .c file: nothing is allocated per call, and calls must not run",
           " * concurrently (one thread at a time).", " *"]
  width = max(len(graph.buffers[i].name) for i in graph.inputs + graph.outputs)
  for role, indexes in (("input ", graph.inputs), ("output", graph.outputs)):
    for i in indexes:
      b = graph.buffers[i]
      lines.append(f" *   {role} {b.name:<{width}}  {_describe(b):<22} {b.path}")
  lines += [" */", f"#ifndef {guard}", f"#define {guard}", "", "#include <stdbool.h>", "#include <stdint.h>", ""]
  lines += [f"#define {graph.name.upper()}_{graph.buffers[i].name.upper()}_SIZE {graph.buffers[i].size}"
            for i in graph.inputs + graph.outputs]
  lines += ["", "#ifdef __cplusplus", 'extern "C" {', "#endif", "", _signature(graph) + ";", "",
            "#ifdef __cplusplus", "}", "#endif", "", f"#endif  /* {guard} */", ""]
  return "\n".join(lines)


def source(graph: Graph, summary: str, kernel_type) -> str:
  """NAME.c. `kernel_type(dtype)` is the C type the kernels take for a numpy dtype."""
  lines = [f"/* {graph.name}: {summary}", " * Kernels rendered by tinygrad's C renderer. */",
           "#include <math.h>", "#include <stdbool.h>", "#include <stdint.h>", "#include <string.h>", "",
           f'#include "{graph.name}.h"', ""]
  for b in graph.buffers:
    if b.role == "const":
      lines.append(f"static const {C_TYPES[b.dtype.name]} {b.name}[{b.size}] = {{\n  {_array_init(b.data)}\n}};")
    elif b.role == "scratch":
      lines.append(f"static {C_TYPES[b.dtype.name]} {b.name}[{b.size}];  /* scratch */")
  kernels = [s.source.partition("static void ") for s in graph.steps if isinstance(s, Kernel)]
  # what the renderer puts before a kernel (type definitions), once
  defines = dict.fromkeys(line for head, _, _ in kernels for line in head.splitlines() if line.strip())
  lines += ["", *defines, ""]
  lines += ["static void " + body.strip() + "\n" for _, _, body in kernels]

  def pointer(buffer_index: int, offset: int) -> str:
    b = graph.buffers[buffer_index]
    return f"({kernel_type(b.dtype)} *){b.name}" + (f" + {offset}" if offset else "")

  body = []
  for step in graph.steps:
    if isinstance(step, Kernel):
      body.append(f"  {step.name}({', '.join(pointer(b, o) for b, o in step.args)});")
    else:
      dest, (src, offset) = graph.buffers[step.dest], step.src
      body.append(f"  memcpy({dest.name}, {graph.buffers[src].name}" + (f" + {offset}" if offset else "")
                  + f", {dest.nbytes});")
  lines += [_signature(graph) + " {", *body, "}", ""]
  return "\n".join(lines)


def write(graph: Graph, summary: str) -> dict[str, str]:
  render = renderer()

  def kernel_type(dtype) -> str:
    return render.render_dtype(_from_np_dtype(dtype))

  return {f"{graph.name}.c": source(graph, summary, kernel_type), f"{graph.name}.h": header(graph, summary)}
