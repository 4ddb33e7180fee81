"""`tinyjax devices`: every tinygrad and XLA device, whether it works on this machine and, if not, why.

A tinygrad device counts as available when it opens and its default renderer computes `[1, 2, 3] * 2`
correctly (the smoke test tinygrad's own `python -m tinygrad.device` runs); the other renderers of an
available device are tried the same way.
"""
import dataclasses
import json
import os
from typing import Annotated

import typer


# NB: tinygrad.device.ALL_DEVICES omits the emulator and the null device, which DEV can still select
EXTRA_TINYGRAD_DEVICES = {"PYTHON": "pure-Python emulator, slow",
                          "NULL": "computes nothing; measures tinygrad's overhead"}
XLA_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
# what makes a device work on a Debian-like machine, said where the device is unavailable
INSTALL_HINTS = {
  "CPU": "install clang (Debian: apt-get install clang)",
  "CL": "install an OpenCL driver: your GPU vendor's, or POCL for the CPU (Debian: apt-get install "
        "pocl-opencl-icd ocl-icd-libopencl1)",
  "WEBGPU": "pip install 'tinyjax[webgpu]' (the Dawn library) and a Vulkan driver (Debian: apt-get install "
            "mesa-vulkan-drivers libvulkan1)",
  "CUDA": "install NVIDIA's driver and CUDA toolkit (libcuda, nvrtc)",
}


@dataclasses.dataclass
class DeviceInfo:
  backend: str
  name: str
  available: bool
  default: bool = False  # the device tinyjax runs on with the settings in effect
  renderer: str = ""
  renderers: dict[str, str] = dataclasses.field(default_factory=dict)  # renderer -> "ok" or why it fails
  kind: str = ""  # why unavailable, in short: missing library, no compiler, no GPU, disabled, error
  reason: str = ""
  note: str = ""
  hint: str = ""  # how to make an unavailable device work


def _messages(error: BaseException) -> list[str]:
  """The messages of an exception, with an ExceptionGroup (tinygrad's "no interface") spelled out."""
  if isinstance(error, BaseExceptionGroup):
    return list(dict.fromkeys(m for e in error.exceptions for m in _messages(e)))
  return [str(error) or type(error).__name__]


def _kind(reason: str) -> str:
  text = reason.lower()
  if "/dev/" in text or "0 devices available" in text or "no such device" in text:
    return "no GPU"
  if "library" in text or "shared object" in text or "plugin" in text:
    return "missing library"
  if "clang" in text or "compil" in text or "'cc'" in text:
    return "no compiler"
  return "error"


def _failure(error: BaseException) -> tuple[str, str]:
  reason = "; ".join(_messages(error))
  return _kind(reason), reason


def _smoke_test(name: str, renderer: str) -> str:
  from tinygrad import Tensor
  from tinygrad.helpers import Context
  try:
    with Context(CACHELEVEL=0, DEV=f"{name}:{renderer}"):
      result = (Tensor([1, 2, 3], device=name) * 2).tolist()
  except Exception as error:
    return "; ".join(_messages(error))
  return "ok" if result == [2, 4, 6] else f"computed {result} instead of [2, 4, 6]"


def tinygrad_device_names() -> list[str]:
  from tinygrad.device import ALL_DEVICES
  return [*ALL_DEVICES, *(n for n in EXTRA_TINYGRAD_DEVICES if n not in ALL_DEVICES)]


def probe_tinygrad(name: str) -> DeviceInfo:
  from tinygrad import Device

  from tinyjax.backends.tinygrad.machinery.runtimes import locate_dawn
  locate_dawn()
  info = DeviceInfo("tinygrad", name, False, note=EXTRA_TINYGRAD_DEVICES.get(name, ""), hint=INSTALL_HINTS.get(name, ""))
  try:
    device = Device[name]
    info.renderer = device._renderer_name(type(device.renderer))
  except Exception as error:
    info.kind, info.reason = _failure(error)
    return info
  info.renderers[info.renderer] = _smoke_test(name, info.renderer)
  if info.renderers[info.renderer] != "ok":
    info.kind, info.reason = _kind(info.renderers[info.renderer]), info.renderers[info.renderer]
    return info
  info.available = True
  for renderer in dict.fromkeys(device._renderer_name(r) for r in device.renderers):
    info.renderers.setdefault(renderer, _smoke_test(name, renderer))
  return info


def probe_xla() -> list[DeviceInfo]:
  import jax
  found, seen = [], set()
  allowed = [p for p in os.environ.get("JAX_PLATFORMS", "").split(",") if p]
  for platform in XLA_PLATFORMS:
    if allowed and platform not in allowed:
      reason = f"not in JAX_PLATFORMS={','.join(allowed)}"
      found.append(DeviceInfo("xla", platform, False, kind="disabled", reason=reason))
      continue
    try:
      devices = jax.devices(platform)
    except RuntimeError as error:
      reason = str(error)
      if reason.startswith("Unknown backend"):
        reason = f"jaxlib has no {platform} plugin installed ({reason})"
      found.append(DeviceInfo("xla", platform, False, kind=_kind(reason), reason=reason))
      continue
    for device in devices:
      name = f"{device.platform}:{device.id}"
      if name not in seen:
        seen.add(name)
        found.append(DeviceInfo("xla", name, True, renderer=device.device_kind))
  return found


def in_use() -> tuple[str, str]:
  """The backend and device tinyjax runs on with the settings in effect (device "" if it cannot be told)."""
  from tinyjax import config
  backend = config.validated("backend")
  requested = config.get("device")
  if backend == "xla":
    from tinyjax.backends.xla import XlaBackend
    try:
      return backend, XlaBackend(requested).device.name
    except RuntimeError:
      return backend, ""
  from tinygrad import Device
  from tinyjax.backends.tinygrad.machinery.device import canonical
  try:
    return backend, (canonical(requested) if requested else Device.DEFAULT).partition(":")[0]
  except RuntimeError:  # no usable device at all
    return backend, ""


def all_devices() -> list[DeviceInfo]:
  infos = [probe_tinygrad(name) for name in tinygrad_device_names()] + probe_xla()
  backend, device = in_use()
  for info in infos:
    info.default = (info.backend, info.name) == (backend, device)
  return infos


def _line(info: DeviceInfo) -> str:
  mark = "*" if info.default else " "
  if not info.available:
    detail = f"{info.kind}: {info.reason}" + (f" -> {info.hint}" if info.hint else "")
  else:
    detail = f"{'renderer' if info.backend == 'tinygrad' else 'kind'} {info.renderer}"
    if others := [r for r, status in info.renderers.items() if r != info.renderer and status == "ok"]:
      detail += f"; also works: {', '.join(others)}"
    if failing := [f"{r} ({_kind(status)})" for r, status in info.renderers.items() if status != "ok"]:
      detail += f"; fails: {', '.join(failing)}"
  note = f" [{info.note}]" if info.note else ""
  return f"{mark} {info.name:8} {'available' if info.available else 'unavailable':12}{detail}{note}"


def devices(
  as_json: Annotated[bool, typer.Option(
    "--json", help="Print a JSON list (one object per device) for scripts.")] = False,
):
  """List every tinygrad and XLA device, whether it works here (or why not), and its renderer.

  The device tinyjax runs on with the settings in effect (TINYJAX_BACKEND, TINYJAX_DEVICE, DEV) is marked
  with `*`. A tinygrad device is available when it opens and computes a small kernel correctly.
  """
  try:
    infos = all_devices()
  except ValueError as error:  # a TINYJAX_* variable with a value it cannot take
    typer.echo(f"tinyjax devices: {error}", err=True)
    raise typer.Exit(2) from None
  if as_json:
    typer.echo(json.dumps([dataclasses.asdict(i) for i in infos], indent=2))
    return
  for backend, title in (("tinygrad", "tinygrad devices"), ("xla", "XLA devices")):
    typer.echo(f"{title}:")
    for info in infos:
      if info.backend == backend:
        typer.echo(_line(info))
  if not any(i.default for i in infos):
    typer.echo("\n(the device the settings ask for is not available here: see `tinyjax doctor`)")
  else:
    typer.echo("\n* the device tinyjax runs on with the settings in effect")
