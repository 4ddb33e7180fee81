import atexit
import functools
import os
import shutil
import subprocess
import tempfile
import zlib

import jax
import pytest

from xfail import XFAIL_ON_DEVICE

# JAX's CPU devices as its own multi-device tests ask for them (jtu.request_cpu_devices(8)): tests/test_spmd.py
jax.config.update("jax_num_cpu_devices", 8)

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The oracle's XLA programs compile once for the whole suite: the CPU run's two workers, the device legs (the same
# oracle again) and the subprocess tests share JAX's persistent compilation cache (a directory git ignores)
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), ".cache", "xla"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# NB: POCL (the CL device here) builds each kernel's generic work-group function when tinyjax's helper process asks
# for the program's binary (amendments.py), then by default builds it again, specialized to the launch's sizes, at
# the kernel's first launch: about a third of a CL kernel's compile time (test_linalg's device leg: 120 -> 102 s).
# The suite runs the generic one: POCL's specialization optimizes the same code (docs/devices.md); users keep it.
os.environ.setdefault("POCL_WORK_GROUP_SPECIALIZATION", "0")


def _directory_of_this_run(prefix: str) -> str:
  """A new directory, removed when the process that made it exits (pytest's, or xdist's controller: its workers
  inherit the environment that names it)."""
  path = tempfile.mkdtemp(prefix=prefix)
  atexit.register(shutil.rmtree, path, ignore_errors=True)
  return path


# TINYJAX_BACKEND=auto remembers its measurements, and tinygrad's lowered programs are kept on disk: the tests' go to a
# directory of their own, not the user's cache
if "TINYJAX_AUTO_CACHE" not in os.environ:
  os.environ["TINYJAX_AUTO_CACHE"] = os.path.join(_directory_of_this_run("tinyjax-tests-"), "auto.json")
if "TINYJAX_PROGRAM_CACHE" not in os.environ:
  os.environ["TINYJAX_PROGRAM_CACHE"] = _directory_of_this_run("tinyjax-programs-")
# every program the suite flushes has its types checked before it is compiled (tinyjax/ir/show.py)
os.environ.setdefault("TINYJAX_CHECK_TYPES", "1")
# NB: every kernel is lowered in the test's process, where tests watch tinygrad's lowering (a helper process would
# lower some, as many as the cores allow: tests/backends/test_lowering_helpers.py starts its own)
os.environ["TINYJAX_LOWERING_HELPERS"] = "0"

# The device leg: the suite runs again on CL and WEBGPU (scripts/test.sh: `pytest --device CL -m device`), every
# test file but those below, which compute nothing on a device or take the device as a parameter themselves.
NOT_IN_LEG_FILES = {
  "tests/test_devices.py": "takes every device as a parameter, in the CPU run",
  "tests/test_layers.py": "the imports between tinyjax's layers: nothing computes",
  "tests/test_coverage.py": "the rule tables and the coverage page made from them: nothing computes",
  "tests/test_identity.py": "tinyjax's names against JAX's: nothing computes",
  "tests/test_cli.py": "the CLI's commands in subprocesses, each naming its device (`--device CL` among them)",
}

# NB: to keep the whole suite under 30 minutes on 2 cores (POCL's LLVM and lavapipe compile a kernel in 2-3x clang's
# time), the leg keeps of each test function its first case and about one in k of the others: those whose id hashes
# to the device's share mod k, a different share on each device (CL and WEBGPU together run 2 in k). A hash, not a
# stride: a stride over a grid of ops x dtypes drops whole dtypes. The shares turn with each commit (`_rotation`):
# three commits in a row run every case off the CPU, each run at the cost of one. `pytest --device CL -m device
# --leg-sample 1` runs every case; `--leg-share N` fixes the turn (to rerun a run's cases).
LEG_SAMPLE = {"CL": 6, "WEBGPU": 6}
LEG_SHARE = {"CL": 0, "WEBGPU": 3}
LEG_SAMPLE_ON_A_GPU = 2  # CUDA, NV, AMD, METAL: fast compilers

# The tests the device leg leaves out, and why: each is heavy, and what it adds on a device another leg test covers
NOT_IN_LEG = {
  "tests/backends/test_special.py::test_scipy_special": "the special-function primitives' kernels again (test_special "
    "runs them on the device), behind scipy's argument handling, which runs in JAX before any kernel",
  "tests/backends/test_special.py::test_x64_in_a_subprocess": "the same kernels in float64, in a process of its own; "
    "float64 on the device is tests/test_float64.py's and test_elementwise's x64 subprocess",
  "tests/test_models.py::test_example_runs[transformer_block.py]": "the example's layers are those of "
    "tests/test_native_models.py's transformer block, which the leg runs against JAX under TINYJAX_FALLBACK=error",
  "tests/backends/test_control_flow.py::test_rnn_and_its_gradient[37]": "a long scan's TinyJit replay "
    "(test_long_scan) and a scan's gradient (the 7-step case) at once; the leg runs both",
  "tests/backends/test_special.py::test_polygamma": "polygamma's kernels are zeta's series (test_zeta) and "
    "digamma's (test_elementwise); test_gradients takes polygamma(1, x) as digamma's derivative on the device",
  "tests/backends/test_linalg.py::test_scipy_polar[4x4]": "QDWH is qr in a while loop (test_jnp_qr, "
    "test_qr_in_jit_replays, test_control_flow's while loops) with dynamic_update_slice (test_indexing)",
  **{f"tests/backends/test_amendments.py::{name}": "names its device, CL (POCL), whatever the run's: the CPU run runs it"
     for name in ("test_pocl_kernels_are_compiled_in_a_helper_process", "test_bool_logic_compiles_on_opencl",
                  "test_every_cl_device_is_listed")},
}


# NB: float64 tests (marked `float64`) leave the leg of a device without float64: there TINYJAX_F64 applies instead,
# which tests/test_float64.py checks on every device
DEVICES_WITHOUT_FLOAT64 = {"WEBGPU", "METAL"}


def pytest_addoption(parser):
  parser.addoption("--device", default="CPU",
                   help="the tinygrad device the tests run on (TINYJAX_DEVICE): CPU (default), CL, WEBGPU, CUDA, ...")
  parser.addoption("--leg-share", type=int, default=None,
                   help="the turn of the device legs' shares (default: the number of commits in the checkout's history; "
                        "the run prints it)")
  parser.addoption("--leg-sample", type=int, default=None,
                   help="the device leg (-m device) keeps about one case in this many of each test function (default: "
                        "LEG_SAMPLE's for the device); 1 runs every case")


def pytest_configure(config):
  # NB: set before collection, so that the expected-failure table (tests/xfail.py) is read for this device
  os.environ["TINYJAX_DEVICE"] = config.getoption("--device")


def pytest_collection_modifyitems(config, items):
  root = str(config.rootpath)
  device = config.getoption("--device")
  sample = config.getoption("--leg-sample") or LEG_SAMPLE.get(device, LEG_SAMPLE_ON_A_GPU)
  turn = _rotation(config)
  share = (LEG_SHARE.get(device, 0) + turn) % sample
  # a difference of this device only (tests/xfail.py) is always in its leg: its strict xfail must be seen to hold
  own_differences = {reason for (on, *_), reason in XFAIL_ON_DEVICE.items() if on == device}
  seen: set[tuple[str, str]] = set()  # (file, test function)
  for item in items:
    path = os.path.relpath(str(item.path), root)
    # NB: tests on the `xla` fixture (tests/test_array.py's sweeps of the Array surface) flush on XLA on purpose
    if (path in NOT_IN_LEG_FILES or f"{path}::{item.name}" in NOT_IN_LEG or "xla" in item.fixturenames
            or device in DEVICES_WITHOUT_FLOAT64 and item.get_closest_marker("float64")):
      continue
    first = (path, item.originalname) not in seen
    seen.add((path, item.originalname))
    own = any(mark.kwargs.get("reason") in own_differences for mark in item.iter_markers("xfail"))
    if first or own or zlib.crc32(item.name.encode()) % sample == share:
      item.add_marker(pytest.mark.device)


def _rotation(config) -> int:
  """The turn of the legs' shares: `--leg-share`, else the number of commits in this checkout's history (in a shallow
  clone, which holds one, its commit's hash), so that consecutive commits run the shares after one another."""
  turn = config.getoption("--leg-share")
  return _commits_turn(str(config.rootpath)) if turn is None else turn


@functools.cache
def _commits_turn(root: str) -> int:
  def git(*args) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30, check=True).stdout
  try:
    if git("rev-parse", "--is-shallow-repository").strip() == "true":
      return int(git("rev-parse", "HEAD"), 16)
    return int(git("rev-list", "--count", "HEAD"))
  except (OSError, ValueError, subprocess.SubprocessError):  # not a git checkout
    return 0


def pytest_report_header(config):
  return f"device legs' turn: {_rotation(config)} (--leg-share)"


def pytest_terminal_summary(terminalreporter, config):
  """The count of cases that ran on the device under test, by outcome (docs/devices.md states them)."""
  counts = {outcome: len([r for r in terminalreporter.stats.get(outcome, []) if getattr(r, "when", "call") == "call"])
            for outcome in ("passed", "failed", "xfailed", "xpassed", "skipped")}
  summary = ", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n)
  terminalreporter.write_line(f"cases on {config.getoption('--device')}: {sum(counts.values())} ({summary})")


@pytest.fixture(autouse=True)
def _isolated_settings():
  """Each test starts from the settings the session started with (config.update does not leak between tests)."""
  from tinyjax import config
  saved = config.updated()
  yield
  for name in set(config.updated()) | set(saved):
    config.update(name, saved.get(name))


@pytest.fixture
def x64():
  """jax_enable_x64 on for the test (float64 arrays and float64 defaults), as it was afterwards."""
  from oracle import x64 as enabled
  with enabled():
    yield


@pytest.fixture
def xla(monkeypatch):
  """Flush on the XLA backend (the setting is read at each flush). NB: a test that takes it leaves the device legs
  (pytest_collection_modifyitems): it computes on XLA on purpose."""
  import tinyjax
  tinyjax.flush()
  monkeypatch.setenv("TINYJAX_BACKEND", "xla")
  monkeypatch.delenv("TINYJAX_DEVICE")  # NB: XLA's own device (the run's, `--device CL`, is tinygrad's)
  yield
  tinyjax.flush()
