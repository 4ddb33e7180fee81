"""Where the user's code is: whether a file is tinyjax's own, and the user's line that made a call."""
import os
import sys

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # tinyjax/, with its separator


def is_tinyjax_file(filename: str) -> bool:
  return os.path.abspath(filename).startswith(PACKAGE_DIR) if not filename.startswith("<") else False


def user_source() -> str:
  """file:line of the innermost caller outside tinyjax (where the user's value was made)."""
  frame = sys._getframe(1)
  while frame is not None and is_tinyjax_file(frame.f_code.co_filename):
    frame = frame.f_back
  return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "<unknown>"
