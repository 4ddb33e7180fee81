import os
import tempfile

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# TINYJAX_BACKEND=auto remembers its measurements: the tests' go to a directory of their own, not the user's cache
os.environ.setdefault("TINYJAX_AUTO_CACHE", os.path.join(tempfile.mkdtemp(prefix="tinyjax-tests-"), "auto.json"))

# The device leg: these files (all their tests, or those whose id contains one of the given words) run again on CL
# and WEBGPU (scripts/test.sh: `pytest --device CL -m device`). Chosen to cover every rule family, transfers,
# mixed fallback segments, the float64 policy and the models within the suite's time budget.
DEVICE_LEG: dict[str, tuple[str, ...]] = {
  "tests/backends/test_elementwise.py": (),
  "tests/backends/test_reduction.py": (),
  "tests/backends/test_shape.py": (),
  "tests/backends/test_contraction.py": (),
  "tests/backends/test_indexing.py": (),
  "tests/backends/test_sorting.py": (),
  "tests/backends/test_control_flow.py": (),
  "tests/backends/test_random.py": (),
  "tests/backends/test_special.py": (),
  "tests/backends/test_linalg.py": (),
  "tests/test_float64.py": (),
  "tests/test_models.py": (),
  "tests/test_native_models.py": (),
  "tests/test_devices.py": (),
}


def pytest_addoption(parser):
  parser.addoption("--device", default="CPU",
                   help="the tinygrad device the tests run on (TINYJAX_DEVICE): CPU (default), CL, WEBGPU, CUDA, ...")


def pytest_configure(config):
  # NB: set before collection, so that the expected-failure table (tests/xfail.py) is read for this device
  os.environ["TINYJAX_DEVICE"] = config.getoption("--device")


def pytest_collection_modifyitems(config, items):
  root = str(config.rootpath)
  for item in items:
    path = os.path.relpath(str(item.path), root)
    if path in DEVICE_LEG and (not DEVICE_LEG[path] or any(word in item.nodeid for word in DEVICE_LEG[path])):
      item.add_marker(pytest.mark.device)


@pytest.fixture(autouse=True)
def _isolated_settings():
  """Each test starts from the settings the session started with (config.update does not leak between tests)."""
  from tinyjax import config
  saved = dict(config._overrides)
  yield
  config._overrides.clear()
  config._overrides.update(saved)
