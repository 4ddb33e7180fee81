"""Where the user's code is: whether a file is tinyjax's own, and the user's line that made a call."""
import os
import sys

from jax._src import source_info_util  # NB: JAX's list of the files that are not the user's is not public

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # tinyjax/, with its separator

# JAX names the user's line in a jaxpr's source info (print_saved_residuals, its errors) by skipping its own files:
# tinyjax's are skipped too, as a part of JAX's runtime (and its frames leave JAX's filtered tracebacks)
source_info_util.register_exclusion(PACKAGE_DIR)


def is_tinyjax_file(filename: str) -> bool:
  """Whether `filename` (a code object's: absolute for every imported module) is one of tinyjax's files.

  NB: a plain prefix test, no path normalisation: user_source asks it of every frame of every traced call."""
  return filename.startswith(PACKAGE_DIR)


_formatted: dict[tuple[str, int], str] = {}  # (file, line) -> "file:line", made once per line
_FORMATTED_KEPT = 4096


def user_source(own: int = 0) -> str:
  """file:line of the innermost caller outside tinyjax (where the user's value was made); the caller's `own`
  callers are known to be tinyjax's: skipped unread.

  NB: asked at every eager operation. Reading a frame's caller makes a Python object of it (CPython 3.11 makes frame
  objects lazily), which costs more than the rest of the test: known frames are skipped, and the test of each frame
  is is_tinyjax_file's, inlined."""
  frame = sys._getframe(1 + own)
  while frame is not None and frame.f_code.co_filename.startswith(PACKAGE_DIR):
    frame = frame.f_back
  if frame is None:
    return "<unknown>"
  key = (frame.f_code.co_filename, frame.f_lineno)
  source = _formatted.get(key)
  if source is None:
    if len(_formatted) >= _FORMATTED_KEPT:
      _formatted.clear()
    source = _formatted[key] = f"{key[0]}:{key[1]}"
  return source
