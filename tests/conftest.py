import os
import tempfile

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# TINYJAX_BACKEND=auto remembers its measurements: the tests' go to a directory of their own, not the user's cache
os.environ.setdefault("TINYJAX_AUTO_CACHE", os.path.join(tempfile.mkdtemp(prefix="tinyjax-tests-"), "auto.json"))


@pytest.fixture(autouse=True)
def _isolated_settings():
  """Each test starts from the settings the session started with (config.update does not leak between tests)."""
  from tinyjax import config
  saved = dict(config._overrides)
  yield
  config._overrides.clear()
  config._overrides.update(saved)
