"""`tinyjax.export`: a jitted function as a standalone program, which runs without Python, JAX or tinygrad.

    exported = tinyjax.export(predict, params, images, target="c")
    exported.save("out/")        # out/predict.c, out/predict.h

Targets: "c" (C source and header: c.py) and "webgpu" (an ES module with the WGSL kernels, and a page that runs it:
webgpu.py). Both are written from one Graph (capture.py): the kernels tinygrad makes for the function on the
target's device, rendered by that target's renderer. (The package is `standalone`, not `export`: `tinyjax.export`
is the function.)
"""
import dataclasses
import os
import pathlib

from tinyjax.standalone.capture import ExportError, Graph

__all__ = ["ExportError", "Exported", "export"]

TARGETS = {"c": "CPU", "webgpu": "WEBGPU"}  # target -> the tinygrad device whose rules and dtypes it follows


@dataclasses.dataclass
class Exported:
  name: str
  target: str
  files: dict[str, str]  # file name -> text
  graph: Graph  # what the files encode: buffers and steps

  def save(self, directory) -> list[pathlib.Path]:
    """Write the files into `directory` (made if missing); returns their paths."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in self.files.items():
      (path := directory / name).write_text(text)
      paths.append(path)
    return paths


def _backend(target: str):
  from tinyjax.ir.backend import DeviceNotFoundError
  from tinyjax.backends.tinygrad import TinygradBackend
  try:
    return TinygradBackend(TARGETS[target])
  except DeviceNotFoundError as error:
    hint = (" (WebGPU needs Dawn: `pip install dawn-python` and a Vulkan driver; see docs/export.md)"
            if target == "webgpu" else "")
    raise ExportError(f"the {target} target renders kernels for tinygrad's {TARGETS[target]} device, which is not "
                      f"available here: {error}{hint}") from None


def export(fn, *example_args, target: str = "c", name: str | None = None) -> Exported:
  """Trace `fn` as jax.jit would for the example arguments (arrays, jax.ShapeDtypeStructs, or pytrees of them:
  they fix the shapes and dtypes) and write it as a standalone program for `target` ("c" or "webgpu").

  Every primitive must run natively on tinygrad: an ExportError names each one that cannot, with the user's line
  that made it. `name` (default: fn's name) names the files and the exported function.
  """
  import importlib

  from tinyjax.core.pending import flush_lock
  from tinyjax.standalone.capture import capture, identifier, trace
  if target not in TARGETS:
    raise ExportError(f"unknown export target {target!r}; choose one of {', '.join(TARGETS)}")
  name = identifier(name or getattr(fn, "__name__", "exported"))
  closed, in_names, out_names = trace(fn, example_args)
  backend = _backend(target)
  writer = importlib.import_module(f"tinyjax.standalone.{target}")  # c.py, webgpu.py: renderer() and write()
  # NB: tinygrad's scheduler is not thread-safe and its capture hook is global: other threads' flushes wait
  with flush_lock:
    graph = capture(name, closed, in_names, out_names, backend, writer.renderer())
  source = getattr(getattr(fn, "__code__", None), "co_filename", "")
  summary = f"{getattr(fn, '__qualname__', name)}" + (f" from {os.path.basename(source)}" if source else "") + \
    ", exported by tinyjax"
  return Exported(name, target, writer.write(graph, summary), graph)
