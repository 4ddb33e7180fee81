"""tinyjax's settings: one table, read from the environment at first use (never at import).

`tinyjax.config.update(name, value)` overrides a setting for the process; names prefixed `jax_` are JAX's own
and go to `jax.config.update`. docs/settings.md is generated from SETTINGS.
"""
import contextlib
import contextvars
import dataclasses
import functools
import os



@dataclasses.dataclass(frozen=True)
class Setting:
  env: str
  default: str
  choices: tuple[str, ...] | None
  doc: str
  integer: bool = False  # the value must be a non-negative integer


SETTINGS: dict[str, Setting] = {
  "backend": Setting("TINYJAX_BACKEND", "tinygrad", ("tinygrad", "xla", "auto"),
                     "which backend runs flushed programs; auto: each program on the one measured faster for it"),
  "auto_cache": Setting("TINYJAX_AUTO_CACHE", "~/.cache/tinyjax/auto.json", None,
                        "where TINYJAX_BACKEND=auto remembers which backend was faster for each program"),
  "program_cache": Setting("TINYJAX_PROGRAM_CACHE", "~/.cache/tinyjax/programs", None,
                           "the directory where the kernels tinygrad lowers are kept for the next process (tinygrad's "
                           "CACHEDB keeps their binaries); empty: lower them again in every process"),
  "lowering_helpers": Setting("TINYJAX_LOWERING_HELPERS", "", None,
                              "how many helper processes lower a new program's kernels beside this one; empty: the "
                              "cores but one (shared among pytest-xdist's workers), at most 4; 0: none"),
  "device": Setting("TINYJAX_DEVICE", "", None,
                    "tinygrad device string (DEV syntax: CPU, CL, METAL, CUDA, ...; CLANG means CPU); empty: tinygrad's default"),
  "fallback": Setting("TINYJAX_FALLBACK", "xla", ("xla", "warn", "error"),
                      "what happens to an equation tinygrad cannot run: run it on XLA, also warn once per primitive, or raise"),
  "buffer_limit": Setting("TINYJAX_BUFFER_LIMIT", "2000", None, "flush once this many equations are pending",
                          integer=True),
  "log_compiles": Setting("TINYJAX_LOG_COMPILES", "0", ("0", "1"),
                          "print each program tinyjax compiles (as text, like a jaxpr) and why the cache missed"),
  "check_types": Setting("TINYJAX_CHECK_TYPES", "0", ("0", "1"),
                         "check each flushed program's shapes and dtypes before it is compiled (the test suite does)"),
  "check": Setting("TINYJAX_CHECK", "0", ("0", "1"),
                   "also run each flushed program on XLA; a difference raises tinyjax.CheckError naming the first "
                   "equation that differs (docs/reliability.md)"),
  "split": Setting("TINYJAX_SPLIT", "1", ("0", "1"),
                   "arrays placed on a mesh of N devices (jax.device_put with a NamedSharding) are split over N "
                   "instances of the tinygrad device (CPU:0..N-1, WEBGPU:0/1, ...) where it has them, and programs on "
                   "them run on all of them; 0: on one device"),
  "f64": Setting("TINYJAX_F64", "error", ("error", "downcast"),
                 "float64 (jax_enable_x64) on a device without float64: raise tinyjax.Float64Error at the call, or "
                 "compute it in float32 (docs/reliability.md)"),
}

_overrides: dict[str, str] = {}
# (backend or None, device) pushed by `default_device`
_device_stack: contextvars.ContextVar[tuple[tuple[str | None, str], ...]] = contextvars.ContextVar(
  "tinyjax_device_stack", default=())


def get(name: str) -> str:
  """The value in effect: `default_device` (device, backend), then `update`, then the environment, then the default."""
  if name in _PLACED and (stack := _device_stack.get()):
    if name == "device":
      return stack[-1][1]
    if backends := [b for b, _ in stack if b is not None]:
      return backends[-1]
  return _UNPLACED[name]()


def _unplaced(name: str):
  """`get` of one setting apart from `default_device`: `update`, then the environment, then the default."""
  setting, env_key = SETTINGS[name], _ENV_KEY_OF[name]

  def read() -> str:
    value = _overrides.get(name)
    if value is not None:
      return value
    # NB: settings are read at every call (an eager operation reads two, a jit call four); os.environ.get is
    # Python-level code around the dict of bytes it keeps in step with every change made through os.environ
    # (CPython on POSIX), which is read directly: a change between two calls is honoured
    if os.environ is not _ENVIRON or _ENVIRON_BYTES is None:
      return os.environ.get(setting.env, setting.default)
    raw = _ENVIRON_BYTES.get(env_key)
    return setting.default if raw is None else _decoded(raw)
  return read


_PLACED = frozenset({"device", "backend"})  # the settings `default_device` sets
_ENVIRON = os.environ
_ENVIRON_BYTES = getattr(os.environ, "_data", None) if os.name == "posix" else None
_ENV_KEY_OF = {name: os.fsencode(s.env) for name, s in SETTINGS.items()}
_UNPLACED = {name: _unplaced(name) for name in SETTINGS}


def reader(name: str):
  """`get` of a setting that `default_device` does not set, as a function of no arguments; an integer setting's
  value comes checked and parsed.

  NB: for the settings asked at every eager operation: it costs half of `get`."""
  assert name not in _PLACED, name
  read = _UNPLACED[name]
  if not SETTINGS[name].integer:
    return read
  last = [(None, None)]  # the last value read, and that value parsed (one tuple: threads share it)

  def read_integer() -> int:
    value = read()
    text, parsed = last[0]
    if value is not text:  # NB: the same text is the same object (an override's, or _decoded's cached one)
      last[0] = value, (parsed := int(_check(name, value)))
    return parsed
  return read_integer


def state_of(*names: str):
  """A function of no arguments giving a key that is equal between two of its calls only when none of the named
  settings can differ between them (the default_device stack, their overrides and their environment variables as
  they stand): what a result derived from those settings alone is cached under."""
  env_names = [SETTINGS[name].env for name in names]
  env_keys = [_ENV_KEY_OF[name] for name in names]

  def key() -> tuple:
    if os.environ is not _ENVIRON or _ENVIRON_BYTES is None:
      environ = tuple(map(os.environ.get, env_names))
    else:
      environ = tuple(map(_ENVIRON_BYTES.get, env_keys))
    return _device_stack.get(), tuple(map(_overrides.get, names)), environ
  return key


@functools.lru_cache(maxsize=256)
def _decoded(raw: bytes) -> str:
  return os.fsdecode(raw)


def _check_name(name: str) -> None:
  if name not in SETTINGS:
    raise ValueError(f"unknown tinyjax setting {name!r}; settings are {sorted(SETTINGS)}")


def _check(name: str, value: str) -> str:
  _check_name(name)
  setting = SETTINGS[name]
  if setting.choices is not None and value not in setting.choices:
    raise ValueError(f"{setting.env}={value!r} is not one of {list(setting.choices)}")
  if setting.integer and not value.strip().isdigit():
    raise ValueError(f"{setting.env}={value!r} is not a non-negative integer")
  return value


def update(name: str, value) -> None:
  """Set a setting for this process, like `jax.config.update`; None unsets it (the environment's value, or the
  default, is in effect again). `jax_*` names are passed to JAX."""
  if name.startswith("jax_"):
    import jax  # NB: here, not at the top: a lowering helper reads the settings without JAX (lowering_helpers.py)
    jax.config.update(name, value)
  elif value is None:
    _check_name(name)
    _overrides.pop(name, None)
  else:
    _overrides[name] = _check(name, str(value))


def updated() -> dict[str, str]:
  """The settings `update` set in this process, by name (a copy: give each back to `update` to restore them)."""
  return dict(_overrides)


def validated(name: str) -> str:
  """`get`, with the value checked against the setting's choices (a bad environment variable raises here)."""
  return _checked(name, get(name))


# NB: settings are read at every call (a jitted call reads four); each value is checked once
_checked = functools.lru_cache(maxsize=256)(_check)


@contextlib.contextmanager
def default_device(device):
  """Run the enclosed code's flushes on `device` (a device string or an object from `tinyjax.devices()`).

  A device from `tinyjax.devices(backend)` also selects its backend; a device string keeps the backend in effect.
  """
  backend = getattr(device, "platform", None)
  entry = (backend if backend in SETTINGS["backend"].choices else None, str(getattr(device, "name", device)))
  token = _device_stack.set(_device_stack.get() + (entry,))
  try:
    yield
  finally:
    _device_stack.reset(token)


def markdown() -> str:
  """docs/settings.md, generated from SETTINGS."""
  lines = ["# Settings", "",
           "Generated from `tinyjax.config.SETTINGS`. Each is read when first needed (never at import): the value",
           "given to `tinyjax.config.update(name, value)` wins, then the environment variable, then the default;",
           "`update(name, None)` unsets it, and `tinyjax.config.updated()` lists what `update` set.",
           "`tinyjax.default_device(d)` overrides `device` inside a `with` block. Names starting with `jax_` go to",
           "`jax.config.update` (e.g. `jax_enable_x64`, also honoured from `JAX_ENABLE_X64`). tinygrad's own",
           "variables (`DEV`, `DEBUG`, `BEAM`, `JIT`, `CACHEDB`) are passed through untouched.", "",
           "| name | variable | default | choices | what it does |", "|---|---|---|---|---|"]
  for name, s in SETTINGS.items():
    choices = " \\| ".join(s.choices) if s.choices else "any"
    lines.append(f"| `{name}` | `{s.env}` | `{s.default}` | {choices} | {s.doc} |")
  return "\n".join(lines) + "\n"
