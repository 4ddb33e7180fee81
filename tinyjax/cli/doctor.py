"""`tinyjax doctor`: what tinyjax runs with here — versions, the C compiler tinygrad uses, the kernel cache, the
devices in effect and every setting (tinyjax's TINYJAX_*, tinygrad's, JAX's) with where its value comes from."""
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from typing import Annotated

import typer

PACKAGES = ("tinyjax", "jax", "jaxlib", "tinygrad", "numpy", "typer")
# tinygrad variables shown even when unset: the ones docs/settings.md says pass through, and the cache level
TINYGRAD_SHOWN = ("DEV", "DEBUG", "BEAM", "JIT", "CACHELEVEL")


def versions() -> dict[str, str]:
  found = {"python": f"{platform.python_implementation()} {platform.python_version()} ({sys.executable})"}
  for package in PACKAGES:
    try:
      found[package] = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
      found[package] = "not installed"
  found["platform"] = f"{platform.system()} {platform.machine()}"
  return found


def c_compiler() -> dict[str, str]:
  """The compiler the CPU device's CLANG renderer runs: $CC, else clang (tinygrad's ClangCompiler)."""
  command = os.environ.get("CC", "clang")
  path = shutil.which(command)
  if path is None:
    return {"command": command, "path": "", "version": f"not found: the CPU device cannot compile with {command}"}
  try:
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout.splitlines()[0]
  except (OSError, subprocess.SubprocessError, IndexError) as error:
    version = f"unknown ({error})"
  return {"command": command, "path": path, "version": version}


def kernel_cache() -> dict[str, str | int]:
  from tinygrad.helpers import CACHEDB, CACHELEVEL
  size = os.path.getsize(CACHEDB) if os.path.exists(CACHEDB) else 0
  return {"path": CACHEDB, "bytes": size, "size": _human(size) if size else "empty (no file yet)",
          "enabled": "yes" if CACHELEVEL.value >= 1 else "no (CACHELEVEL=0)"}


def _human(size: int) -> str:
  for unit in ("B", "KiB", "MiB", "GiB"):
    if size < 1024 or unit == "GiB":
      return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
    size /= 1024


def settings(environ: dict[str, str]) -> dict[str, dict[str, str]]:
  """Each setting's value in effect and where it comes from, given the environment the command started with.

  NB: `environ` is taken before tinygrad picks its default device, which writes DEV into os.environ.
  """
  from tinygrad.helpers import ContextVar
  from tinyjax import config

  def origin(name):
    return "environment" if name in environ else "default"
  tinyjax_settings = {s.env: {"value": config.get(name), "from": origin(s.env)} for name, s in config.SETTINGS.items()}
  tinygrad_names = [n for n in ContextVar._cache if n in TINYGRAD_SHOWN or n in environ]
  tinygrad_settings = {n: {"value": repr(ContextVar._cache[n]) if n == "DEV" else str(ContextVar._cache[n].value),
                           "from": origin(n)} for n in tinygrad_names}
  tinygrad_settings["CACHEDB"] = {"value": kernel_cache()["path"], "from": origin("CACHEDB")}
  jax_settings = {n: {"value": v, "from": "environment"} for n, v in sorted(environ.items())
                  if n.startswith("JAX_") or n == "XLA_FLAGS"}
  return {"tinyjax": tinyjax_settings, "tinygrad": tinygrad_settings, "jax": jax_settings}


def in_effect() -> dict[str, str]:
  from tinyjax.choosing.selection import current_backend
  try:
    backend = current_backend()
  except Exception as error:  # the doctor reports a broken setting rather than failing on it
    return {"backend": "", "device": "", "problem": str(error)}
  found = {"backend": backend.name, "device": backend.device.name}
  if backend.name == "tinygrad":
    from tinygrad import Device
    device = Device[backend.tg_device]
    found["renderer"] = device._renderer_name(type(device.renderer))
  return found


def report() -> dict:
  environ = dict(os.environ)
  return {"versions": versions(), "runs on": in_effect(), "C compiler": c_compiler(), "kernel cache": kernel_cache(),
          "settings": settings(environ)}


def doctor(
  as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
):
  """Show versions (Python, jax, jaxlib, tinygrad), the C compiler, the kernel cache and every setting in effect.

  Paste its output into bug reports.
  """
  found = report()
  if as_json:
    typer.echo(json.dumps(found, indent=2))
    return
  for section in ("versions", "runs on", "C compiler", "kernel cache"):
    typer.echo(f"{section}:")
    for key, value in found[section].items():
      if key != "bytes":  # NB: the human-readable size says it; JSON keeps the exact count
        typer.echo(f"  {key:10} {value}")
  for group, values in found["settings"].items():
    typer.echo(f"{group} settings:")
    if not values:
      typer.echo("  (none set)")
    for name, setting in values.items():
      typer.echo(f"  {name:22}{setting['value'] or '(empty)':32}{setting['from']}")
