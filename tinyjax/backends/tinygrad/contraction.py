"""Contractions: dot_general and conv_general_dilated; and the reduce_window family."""
from tinyjax.backends.tinygrad.table import register  # noqa: F401
