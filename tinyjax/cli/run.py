"""`tinyjax run`: run a Python script or module as `__main__` with tinyjax's backend, device and fallback chosen.

The options become environment variables before the script starts (tinyjax and tinygrad read their settings
at first use, and child processes inherit them), so the script behaves as if they had been exported. The
exit code is the script's own; a traceback shows the script's frames, not tinyjax's or runpy's. Exit code 2
means tinyjax refused to start the script (unknown device, missing script or module, bad setting).

Patch mode (tinyjax.patch, on unless --no-patch) is in effect before the script starts, so that an ordinary
`import jax` script, and the `@jax.jit` decorators its modules, flax and optax apply on import, run on tinyjax.
"""
import contextlib
import enum
import importlib.util
import os
import runpy
import sys
import traceback
import types
from typing import Annotated

import typer

from tinyjax.cli import refuse
from tinyjax.ir.source import is_tinyjax_file


def _choices(setting: str) -> type[enum.Enum]:
  """The choices of a setting (tinyjax.config.SETTINGS) as the Enum typer takes."""
  from tinyjax.config import SETTINGS
  return enum.Enum(setting.capitalize(), {c: c for c in SETTINGS[setting].choices}, type=str)


BackendName, FallbackPolicy = _choices("backend"), _choices("fallback")


_RUNPY_FILES = {os.path.abspath(runpy.__file__), "<frozen runpy>"}


def _environment(device, backend, fallback, beam, debug) -> dict[str, str]:
  """The variables the options set: tinyjax's own, and tinygrad's (DEV selects its device and renderer)."""
  from tinyjax.backends.tinygrad.machinery.device import canonical
  env = {}
  if backend is not None:
    env["TINYJAX_BACKEND"] = backend.value
  if fallback is not None:
    env["TINYJAX_FALLBACK"] = fallback.value
  if device is not None:
    on_tinygrad = (backend.value if backend else os.environ.get("TINYJAX_BACKEND", "tinygrad")) != "xla"
    env["TINYJAX_DEVICE"] = canonical(device) if on_tinygrad else device
    if on_tinygrad:
      env["DEV"] = env["TINYJAX_DEVICE"]
  if beam is not None:
    env["BEAM"] = str(beam)
  if debug is not None:
    env["DEBUG"] = str(debug)
  return env


class _Environment:
  """Sets variables for the duration of the run, also in tinygrad's settings if tinygrad is already imported."""

  def __init__(self, env: dict[str, str]):
    self.env = env

  def __enter__(self):
    self.saved = {name: os.environ.get(name) for name in self.env}
    os.environ.update(self.env)
    self.apply_to_tinygrad()
    return self

  def apply_to_tinygrad(self):
    """NB: tinygrad reads DEV, BEAM and DEBUG when it is imported; after that its ContextVars hold them."""
    if "tinygrad.helpers" not in sys.modules or hasattr(self, "tinygrad_context"):
      return
    from tinygrad.helpers import Context
    values = {name: int(value) if name != "DEV" else value for name, value in self.env.items()
              if name in ("DEV", "BEAM", "DEBUG")}
    self.tinygrad_context = Context(**values)
    self.tinygrad_context.__enter__()

  def __exit__(self, *_):
    if hasattr(self, "tinygrad_context"):
      self.tinygrad_context.__exit__(None, None, None)
    for name, value in self.saved.items():
      if value is None:
        os.environ.pop(name, None)
      else:
        os.environ[name] = value


def _check_settings() -> None:
  """Check the settings, and open the backend and device if one is asked for, before the script starts.

  NB: with nothing asked for, opening tinygrad's default device is left to the script's first flush: it costs
  about a second, which a script that never flushes should not pay.
  """
  from tinyjax import config
  from tinyjax.ir.backend import DeviceNotFoundError
  from tinyjax.choosing.selection import current_backend
  try:
    for name in config.SETTINGS:
      config.validated(name)
    if any(os.environ.get(name) for name in ("TINYJAX_BACKEND", "TINYJAX_DEVICE", "DEV")):
      current_backend()
  except (DeviceNotFoundError, ValueError) as error:
    raise refuse("run", str(error)) from None


def _is_internal(filename: str, own_file: str) -> bool:
  path = os.path.abspath(filename) if not filename.startswith("<") else filename
  return path != own_file and (path in _RUNPY_FILES or is_tinyjax_file(path))


def _trim(error: BaseException, own_file: str, seen: set | None = None) -> None:
  """Drop tinyjax's and runpy's frames from the tracebacks of `error` and of the exceptions chained to it."""
  seen = set() if seen is None else seen
  if error is None or id(error) in seen:
    return
  seen.add(id(error))
  frames = []
  tb = error.__traceback__
  while tb is not None:
    if not _is_internal(tb.tb_frame.f_code.co_filename, own_file):
      frames.append(tb)
    tb = tb.tb_next
  trimmed = None
  for frame in reversed(frames):
    trimmed = types.TracebackType(trimmed, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
  error.__traceback__ = trimmed
  for linked in (error.__cause__, error.__context__, *getattr(error, "exceptions", ())):
    _trim(linked, own_file, seen)


def _exit_code(exit: SystemExit) -> int:
  """What the interpreter would exit with for `sys.exit(code)`: None is 0, other non-integers are printed, 1."""
  if exit.code is None:
    return 0
  if isinstance(exit.code, int):
    return exit.code
  print(exit.code, file=sys.stderr)
  return 1


@contextlib.contextmanager
def _as_python_would(argv: list[str], first_path: str):
  """`sys.argv` and `sys.path[0]` as `python script.py` / `python -m module` set them; restored afterwards."""
  saved_argv, saved_path = sys.argv, sys.path[:]
  sys.argv = argv
  sys.path[0:1] = [first_path]
  try:
    yield
  finally:
    sys.argv, sys.path[:] = saved_argv, saved_path


def _execute(script: str | None, module: str | None, own_file: str) -> int:
  """Run the script or module as `__main__`; returns the exit code the script gives."""
  import tinyjax
  try:
    try:
      if module:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
      else:
        runpy.run_path(os.path.abspath(script), run_name="__main__")  # its code names its file as python names it
      code = 0
    except SystemExit as exit:
      code = _exit_code(exit)
    tinyjax.flush()  # computations the script started but never read still run, as with JAX's async dispatch
    return code
  except BaseException as error:
    _trim(error, own_file)
    sys.stdout.flush()
    traceback.print_exception(error, file=sys.stderr)
    return 130 if isinstance(error, KeyboardInterrupt) else 1


def run(
  target: Annotated[list[str] | None, typer.Argument(
    metavar="SCRIPT [ARGS]", show_default=False,
    help="The script and its arguments (with -m: the module's arguments).")] = None,
  module: Annotated[str | None, typer.Option(
    "-m", "--module", metavar="MODULE", help="Run a module, like `python -m MODULE`.")] = None,
  device: Annotated[str | None, typer.Option(
    help="tinygrad device (CPU, CL, METAL, CUDA, ...; CLANG means CPU), or an XLA device with --backend xla. "
         "Sets TINYJAX_DEVICE and DEV.", show_default=False)] = None,
  backend: Annotated[BackendName | None, typer.Option(
    help="Backend that runs flushed programs (auto: each program on the one measured faster). "
         "Sets TINYJAX_BACKEND.", show_default=False)] = None,
  fallback: Annotated[FallbackPolicy | None, typer.Option(
    help="What happens to an operation tinygrad cannot run: run it on XLA, also warn, or raise. "
         "Sets TINYJAX_FALLBACK.", show_default=False)] = None,
  report: Annotated[bool, typer.Option(
    "--report", help="At exit, print to stderr which primitives ran where, the segments and the bytes moved.")] = False,
  profile: Annotated[str | None, typer.Option(
    metavar="PATH", help="Write a profile of the run to PATH as Chrome's trace-event JSON (gzipped if it ends in "
                         ".gz): programs, kernels and transfers on a timeline; open it in ui.perfetto.dev.",
    show_default=False)] = None,
  beam: Annotated[int | None, typer.Option(min=0, help="tinygrad's kernel search width (BEAM); the kernels it "
                                           "tunes are kept for later runs without it.", show_default=False)] = None,
  debug: Annotated[int | None, typer.Option(min=0, help="tinygrad's debug level (DEBUG).", show_default=False)] = None,
  patch: Annotated[bool, typer.Option(
    "--patch/--no-patch", help="Run JAX's own functions (jax.numpy, jax.jit, jax.random, ...) on tinyjax, so that "
                               "a plain `import jax` script runs on the chosen device.")] = True,
):
  """Run a Python script (or -m MODULE) as `__main__` on the chosen backend and device.

  `sys.argv` is the script and its arguments. The options may come before or after the script; everything after
  `--` goes to the script. The exit code is the script's own; 2 means tinyjax could not start it.
  """
  target = list(target or [])
  if module is None and not target:
    raise refuse("run", "give a SCRIPT to run or -m MODULE (see `tinyjax run --help`)")
  script, args = (None, target) if module else (target[0], target[1:])
  if script is not None and not os.path.exists(script):
    # NB: an option tinyjax does not know, before any script, lands here (typer passes unknown options on)
    raise refuse("run", f"no such option: {script}" if script.startswith("-")
                  else f"can't open file {script!r}: no such file")
  if profile is not None and not os.path.isdir(os.path.dirname(os.path.abspath(profile))):
    raise refuse("run", f"can't write the profile to {profile!r}: no such directory")
  from tinyjax.core.report import collecting
  first_path = os.path.dirname(os.path.abspath(script)) if script else os.getcwd()
  with _as_python_would([script or module, *args], first_path):
    own_file = os.path.abspath(script) if script else _module_file(module)
    with _Environment(_environment(device, backend, fallback, beam, debug)) as environment:
      _check_settings()
      environment.apply_to_tinygrad()
      # NB: `ran` is this run's, also inside a longer process
      with collecting() as ran, _patched(patch), _profiled(profile):
        code = _execute(script, module, own_file)
      sys.stdout.flush()
      if report:
        print(str(ran), file=sys.stderr)
      if profile is not None:
        print(f"tinyjax run: profile written to {profile} (open it in https://ui.perfetto.dev)", file=sys.stderr)
      if code == 0 and not ran.flushes and not ran.eager:  # NB: after an error, the error is the news
        print("tinyjax run: the script ran nothing through tinyjax"
              + (" (patch mode is off: --no-patch)" if not patch else
                 " (no jax.numpy, jax.jit, jax.random, ... call of it reached tinyjax)"), file=sys.stderr)
  raise typer.Exit(code)


def _patched(on: bool):
  from tinyjax.patching import patch
  return patch() if on else contextlib.nullcontext()


@contextlib.contextmanager
def _profiled(path: str | None):
  """A profile of the run, written to `path` when the script ends, however it ends.

  NB: not tinyjax.profile, which runs the pending work at the end of its block: _execute runs it when the script ends
  well, and leaves it after an error."""
  if path is None:
    yield
    return
  from tinyjax.ir import profile
  profile.start()
  try:
    yield
  finally:
    profile.stop().write(path)


def _module_file(module: str) -> str:
  try:
    spec = importlib.util.find_spec(module)
  except (ImportError, ValueError):
    spec = None
  if spec is None:
    raise refuse("run", f"no module named {module!r}")
  return os.path.abspath(spec.origin or "")
