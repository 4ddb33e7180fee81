"""`tinyjax export FILE.py:FUNCTION --to c -o DIR`: write a function as a standalone C library or WebGPU module.

FILE.py defines FUNCTION and `example_args()`, which returns the example arguments (a tuple: arrays, pytrees of
them, or jax.ShapeDtypeStructs) that fix the shapes and dtypes; `--example-args NAME` picks another function.
The file is loaded as a module (not as `__main__`, so its `if __name__ == "__main__":` part does not run).
Exit codes: 0 written; 1 the file's own code raised (its traceback is printed); 2 tinyjax refused (no such file,
function or example arguments, or a primitive tinygrad cannot run: named, with the line that made it).
"""
import enum
import os
import runpy
import sys
import traceback
from typing import Annotated

import typer

from tinyjax.cli import refuse


class Target(str, enum.Enum):
  c = "c"
  webgpu = "webgpu"


def _failed_in_user_code(error: BaseException) -> typer.Exit:
  sys.stdout.flush()
  traceback.print_exception(error, file=sys.stderr)
  return typer.Exit(1)


def _load(path: str) -> dict:
  """The module namespace of the file, imported as Python would with its folder first on sys.path."""
  saved = sys.path[:]
  sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
  try:
    return runpy.run_path(path, run_name=f"__tinyjax_export_{os.path.splitext(os.path.basename(path))[0]}__")
  finally:
    sys.path[:] = saved


def export(
  target: Annotated[str, typer.Argument(
    metavar="FILE.py:FUNCTION", show_default=False, help="The Python file and the function in it to export.")],
  to: Annotated[Target, typer.Option("--to", help="c: NAME.c and NAME.h; webgpu: NAME.js and index.html.")] = Target.c,
  output: Annotated[str, typer.Option(
    "-o", "--output", metavar="DIR", help="Folder to write into (made if missing).")] = ".",
  example_args: Annotated[str, typer.Option(
    "--example-args", metavar="NAME",
    help="The function in FILE.py that returns the example arguments, as a tuple.")] = "example_args",
  name: Annotated[str | None, typer.Option(
    help="Name of the files and of the exported function (default: FUNCTION).", show_default=False)] = None,
):
  """Write FUNCTION of FILE.py as a standalone C library (--to c) or WebGPU module (--to webgpu).

  The example arguments fix the shapes and dtypes. Every primitive runs on tinygrad: one it cannot run is an
  error that names it and the line that made it (exit code 2); nothing falls back to XLA.
  """
  from tinyjax import ExportError
  from tinyjax import export as export_function
  path, sep, function_name = target.rpartition(":")
  if not sep or not path or not function_name:
    raise refuse("export", f"give the function as FILE.py:FUNCTION, not {target!r}")
  if not os.path.isfile(path):
    raise refuse("export", f"can't open file {path!r}: no such file")
  try:
    namespace = _load(path)
  except Exception as error:
    raise _failed_in_user_code(error) from None
  fn = namespace.get(function_name)
  if not callable(fn):
    defined = sorted(k for k, v in namespace.items() if callable(v) and getattr(v, "__module__", None) ==
                     namespace.get("__name__"))
    raise refuse("export", f"{path} defines no function {function_name!r}" +
                  (f" (it defines: {', '.join(defined)})" if defined else ""))
  make_args = namespace.get(example_args)
  if not callable(make_args):
    raise refuse("export", f"{path} defines no {example_args}(): define it to return the example arguments of "
                  f"{function_name} as a tuple (they fix the shapes and dtypes), or pick one with --example-args")
  try:
    args = make_args()
  except Exception as error:
    raise _failed_in_user_code(error) from None
  if not isinstance(args, tuple):
    raise refuse("export", f"{example_args}() returned a {type(args).__name__}; it must return a tuple of arguments")
  try:
    exported = export_function(fn, *args, target=to.value, name=name)
  except ExportError as error:
    raise refuse("export", str(error)) from None
  except Exception as error:  # the function itself raised while it was traced
    raise _failed_in_user_code(error) from None
  for written in exported.save(output):
    typer.echo(str(written))
