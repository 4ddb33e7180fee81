import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")


@pytest.fixture(autouse=True)
def _isolated_settings():
  """Each test starts from the settings the session started with (config.update does not leak between tests)."""
  from tinyjax import config
  saved = dict(config._overrides)
  yield
  config._overrides.clear()
  config._overrides.update(saved)
