"""`tinyjax.scipy`: jax.scipy's special, linalg and stats on the tinyjax backend."""
from tinyjax.scipy import linalg, special, stats  # noqa: F401
