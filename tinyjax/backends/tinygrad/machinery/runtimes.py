"""Where tinygrad's device runtimes find their libraries, when tinyjax knows better than tinygrad's search."""
import importlib.util
import os
import pathlib
import platform
import tempfile


def locate_dawn() -> None:
  """Point tinygrad's WEBGPU device at the Dawn library of the dawn-python wheel (`pip install tinyjax[webgpu]`).

  NB: tinygrad looks for `libwebgpu_dawn.so` on the system's library path (or WEBGPU_PATH); the wheel ships it as
  `pydawn/lib/libwebgpu_dawn_<machine>.so` (`.dylib` on macOS), which tinygrad's search never finds. A WEBGPU_PATH
  the user set wins.
  """
  if os.environ.get("WEBGPU_PATH") or (spec := importlib.util.find_spec("pydawn")) is None or not spec.origin:
    return
  machine = {"arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
  lib = pathlib.Path(spec.origin).parent / "lib"
  for name in (f"libwebgpu_dawn_{machine}.so", f"libwebgpu_dawn_{platform.machine().lower()}.dylib"):
    if (lib / name).is_file():
      os.environ["WEBGPU_PATH"] = str(lib / name)
      break
  else:
    return
  if os.name == "posix" and not os.environ.get("XDG_RUNTIME_DIR"):
    # NB: on a machine with no desktop session, Vulkan's Wayland support (which Dawn loads) prints "error:
    # XDG_RUNTIME_DIR is invalid or not set" on every device it opens; an empty private directory (one per user) quiets it
    quiet = os.path.join(tempfile.gettempdir(), f"tinyjax-runtime-{os.getuid()}")
    os.makedirs(quiet, mode=0o700, exist_ok=True)
    os.environ["XDG_RUNTIME_DIR"] = quiet
